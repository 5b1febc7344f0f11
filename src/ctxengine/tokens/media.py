"""Tokens of images and documents, from their pixel size or page count (never from the base64
length):

- Anthropic (docs.anthropic.com, "Vision"): an image whose long edge exceeds 1,568 px or whose
  size exceeds ~1,600 tokens is first scaled down (aspect kept); then tokens = ceil(w * h / 750).
  Unknown size: 1,600 tokens, the most one image can cost.
- OpenAI (platform.openai.com, "Images and vision", detail ``high``): fit in 2048 x 2048, scale so
  the short side is at most 768 px, then 85 + 170 per 512-px tile. Unknown size: 1,445, the most
  one image can cost (2 x 4 tiles).

Documents: ``text/*`` counts as its text; a PDF ``PDF_TOKENS_PER_PAGE`` per page (its pages counted by
``pypdf``, or a size-based guess); anything else ``DOCUMENT_UNKNOWN_TOKENS``. Pixels, tokens.
"""

from __future__ import annotations

import base64
import binascii
import functools
import math
import re
from typing import Literal

from ctxengine.messages.media import pdf_page_count

# --- Anthropic images (docs.anthropic.com/en/docs/build-with-claude/vision) -------------------
ANTHROPIC_PIXELS_PER_TOKEN = 750  # tokens = ceil(width * height / 750)
ANTHROPIC_IMAGE_MAX_EDGE = 1_568  # px: a longer edge is scaled down first
ANTHROPIC_IMAGE_MAX_TOKENS = 1_600  # an image above ~1,600 tokens (~1.2 megapixels) is scaled down
ANTHROPIC_IMAGE_MAX_PIXELS = ANTHROPIC_IMAGE_MAX_TOKENS * ANTHROPIC_PIXELS_PER_TOKEN  # 1,200,000
ANTHROPIC_IMAGE_UNKNOWN_TOKENS = 1_600  # image of unknown size: the most one image can cost

# --- OpenAI images (platform.openai.com/docs/guides/images-vision, GPT-4o / 4.1 / 5, detail high)
OPENAI_IMAGE_BASE_TOKENS = 85
OPENAI_IMAGE_TILE_TOKENS = 170  # per 512 x 512 tile
OPENAI_IMAGE_TILE_PX = 512
OPENAI_IMAGE_MAX_EDGE = 2_048  # px: first fit in a 2048 x 2048 square
OPENAI_IMAGE_SHORT_EDGE = 768  # px: then scale so the short side is at most 768
OPENAI_IMAGE_UNKNOWN_TOKENS = 85 + 170 * 8  # 1,445: the largest image (768 x 2048, 2 x 4 tiles)

# --- Documents ---------------------------------------------------------------------------------
PDF_TOKENS_PER_PAGE = 3_000  # Anthropic: 1,500-3,000 text tokens per page, upper end
PDF_BYTES_PER_PAGE = 100_000  # page-count guess when the page objects are compressed
DOCUMENT_UNKNOWN_TOKENS = PDF_TOKENS_PER_PAGE  # a document we cannot size: one dense page


def anthropic_image_size(width: int, height: int) -> tuple[int, int]:
    """Pixel size after the Anthropic API's downscaling: long edge at most 1,568 px and at most
    ``ANTHROPIC_IMAGE_MAX_PIXELS`` (~1,600 tokens), aspect ratio kept, rounded down."""
    scale = min(
        1.0,
        ANTHROPIC_IMAGE_MAX_EDGE / max(width, height),
        math.sqrt(ANTHROPIC_IMAGE_MAX_PIXELS / (width * height)),
    )
    if scale >= 1.0:
        return width, height
    return max(1, int(width * scale)), max(1, int(height * scale))


def anthropic_image_tokens(width: int | None, height: int | None) -> int:
    """Tokens of one image for Claude: ceil(w * h / 750) after downscaling (at most ~1,600);
    ``ANTHROPIC_IMAGE_UNKNOWN_TOKENS`` when the size is unknown or not positive."""
    if not width or not height or width <= 0 or height <= 0:
        return ANTHROPIC_IMAGE_UNKNOWN_TOKENS
    w, h = anthropic_image_size(width, height)
    return math.ceil(w * h / ANTHROPIC_PIXELS_PER_TOKEN)


def openai_image_tokens(
    width: int | None,
    height: int | None,
    *,
    detail: Literal["high", "low"] = "high",
    base_tokens: int = OPENAI_IMAGE_BASE_TOKENS,
    tile_tokens: int = OPENAI_IMAGE_TILE_TOKENS,
) -> int:
    """Tokens of one image for GPT-4o / GPT-4.1 / GPT-5 class models. ``low`` detail costs
    ``base_tokens``; ``high``: fit in 2048 x 2048, scale the short side down to 768, then
    ``base_tokens + tile_tokens`` per 512-px tile. Unknown size: the largest possible image."""
    if detail == "low":
        return base_tokens
    if not width or not height or width <= 0 or height <= 0:
        return base_tokens + tile_tokens * 8
    w, h = float(width), float(height)
    if max(w, h) > OPENAI_IMAGE_MAX_EDGE:
        s = OPENAI_IMAGE_MAX_EDGE / max(w, h)
        w, h = w * s, h * s
    if min(w, h) > OPENAI_IMAGE_SHORT_EDGE:
        s = OPENAI_IMAGE_SHORT_EDGE / min(w, h)
        w, h = w * s, h * s
    tiles = math.ceil(math.floor(w) / OPENAI_IMAGE_TILE_PX) * math.ceil(math.floor(h) / OPENAI_IMAGE_TILE_PX)
    return base_tokens + tile_tokens * max(1, tiles)


_PDF_PAGE = re.compile(rb"/Type\s*/Page(?![a-zA-Z])")


@functools.lru_cache(maxsize=64)
def pdf_pages(data: str) -> int:
    """Page count of a base64 PDF, at least 1: read by ``pypdf`` (``ctxengine.messages.media.pdf_page_count``:
    the page tree, compressed object streams included); for a file ``pypdf`` cannot read (no
    cross-reference table: a cut or hand-made PDF) its ``/Type /Page`` objects; failing both, a
    size-based guess (``PDF_BYTES_PER_PAGE``). The last 64 PDFs counted are remembered (the same
    PDF is counted at every call that carries it)."""
    pages = pdf_page_count(data)
    if pages:
        return pages
    try:
        raw = base64.b64decode(data, validate=False)
    except (binascii.Error, ValueError):
        return max(1, math.ceil(len(data) * 3 / 4 / PDF_BYTES_PER_PAGE))
    pages = len(_PDF_PAGE.findall(raw))
    return pages if pages else max(1, math.ceil(len(raw) / PDF_BYTES_PER_PAGE))
