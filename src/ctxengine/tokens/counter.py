"""Token counters: exact for OpenAI encodings, calibrated estimates for Claude and others.

``OpenAICounter`` counts text exactly (``tokens.encoders``); ``EstimateCounter`` scales the exact
``o200k_base`` count by an ``EstimateProfile`` (``tokens.estimate``) since Claude's tokenizer is
not public; the ledger (``ctxengine.tokens.ledger``) corrects what is left online. Images and
documents are counted from their pixel size or pages (``tokens.media``). The rules for each
content block and the message framing are here (``_BlockCounter``); ``counter_for`` picks the
counter of a model. The names of the three modules beside this one are importable from here too.

Counting is pure and fast (the Rust tokenizer counts ~10M characters/s); encoders are built once
per process. Each counter remembers the counts of the texts it has seen (``tokens.memo``, bounded),
so a text counted again costs a dictionary lookup.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator
from functools import cache
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import msgspec

from ctxengine.messages.model import (
    Block,
    Document,
    Image,
    Message,
    Text,
    Thinking,
    ToolCall,
    ToolResult,
)
from ctxengine.tokens.encoders import Encoding, count_tokens, encoder, tokens_within
from ctxengine.tokens.estimate import (
    CLAUDE_PROFILE,
    CODE_CHAR_DENSITY,
    CODE_CHARS,
    GENERIC_PROFILE,
    SNIFF_CHARS,
    ContentClass,
    EstimateProfile,
    classify_text,
    count_cjk,
)
from ctxengine.tokens.media import (
    ANTHROPIC_IMAGE_MAX_EDGE,
    ANTHROPIC_IMAGE_MAX_PIXELS,
    ANTHROPIC_IMAGE_MAX_TOKENS,
    ANTHROPIC_IMAGE_UNKNOWN_TOKENS,
    ANTHROPIC_PIXELS_PER_TOKEN,
    DOCUMENT_UNKNOWN_TOKENS,
    OPENAI_IMAGE_BASE_TOKENS,
    OPENAI_IMAGE_MAX_EDGE,
    OPENAI_IMAGE_SHORT_EDGE,
    OPENAI_IMAGE_TILE_PX,
    OPENAI_IMAGE_TILE_TOKENS,
    OPENAI_IMAGE_UNKNOWN_TOKENS,
    PDF_BYTES_PER_PAGE,
    PDF_TOKENS_PER_PAGE,
    anthropic_image_size,
    anthropic_image_tokens,
    openai_image_tokens,
    pdf_pages,
)
from ctxengine.tokens.memo import TextMemo

if TYPE_CHECKING:
    from ctxengine.models.registry import ModelInfo

__all__ = [  # the names moved to encoders, estimate and media stay importable here
    "ANTHROPIC_IMAGE_MAX_EDGE",
    "ANTHROPIC_IMAGE_MAX_PIXELS",
    "ANTHROPIC_IMAGE_MAX_TOKENS",
    "ANTHROPIC_IMAGE_UNKNOWN_TOKENS",
    "ANTHROPIC_PIXELS_PER_TOKEN",
    "CLAUDE_PROFILE",
    "CODE_CHARS",
    "CODE_CHAR_DENSITY",
    "DOCUMENT_UNKNOWN_TOKENS",
    "ENCRYPTED_CHARS_PER_TOKEN",
    "GENERIC_PROFILE",
    "OPENAI_IMAGE_BASE_TOKENS",
    "OPENAI_IMAGE_MAX_EDGE",
    "OPENAI_IMAGE_SHORT_EDGE",
    "OPENAI_IMAGE_TILE_PX",
    "OPENAI_IMAGE_TILE_TOKENS",
    "OPENAI_IMAGE_UNKNOWN_TOKENS",
    "OPENAI_MESSAGE_OVERHEAD",
    "OPENAI_TOOL_CALL_OVERHEAD",
    "OPENAI_TOOL_RESULT_OVERHEAD",
    "PDF_BYTES_PER_PAGE",
    "PDF_TOKENS_PER_PAGE",
    "SNIFF_CHARS",
    "ContentClass",
    "Encoding",
    "EstimateCounter",
    "EstimateProfile",
    "OpenAICounter",
    "TokenCounter",
    "anthropic_image_size",
    "anthropic_image_tokens",
    "classify_text",
    "count_cjk",
    "count_tokens",
    "counter_for",
    "encoder",
    "openai_image_tokens",
    "pdf_pages",
    "tool_input_text",
]

ENCRYPTED_CHARS_PER_TOKEN = 4  # redacted / encrypted reasoning: base64 payload chars per token

# --- OpenAI chat framing (OpenAI cookbook "How to count tokens with tiktoken") ------------------
OPENAI_MESSAGE_OVERHEAD = 3  # tokens per message: <|start|>{role}\n ... <|end|>
OPENAI_TOOL_CALL_OVERHEAD = 8  # per tool call: call id + function wrapper (initial guess)
OPENAI_TOOL_RESULT_OVERHEAD = 6  # per tool result: its own "tool" message + call id (guess)


_JSON_ENCODER = msgspec.json.Encoder()
# ``within`` stops at the limit only for a text this many characters per token of it or longer
# (a shorter one is counted whole, and the count kept: it will most likely fit and be counted)
WITHIN_MIN_CHARS_PER_TOKEN = 4


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

    def within(self, text: str, max_tokens: int) -> bool:
        """Whether ``count_text(text) <= max_tokens``: the same answer, but a long text not
        counted yet is tokenized only as far as the limit (``_count_upto``), its count kept
        (``learn``) when it fits; a shorter one is counted whole (it will most likely fit)."""
        known = self._held(text)
        if known is not None or len(text) < WITHIN_MIN_CHARS_PER_TOKEN * max_tokens:
            return (known if known is not None else self.count_text(text)) <= max_tokens
        n = self._count_upto(text, max_tokens)
        if n is None:
            return False
        self.learn(text, False, n)
        return True

    def _held(self, text: str) -> int | None:
        """``count_text(text)`` when this counter holds it already, else None."""
        return None

    def _count_upto(self, text: str, max_tokens: int) -> int | None:
        """``count_text(text)`` when it is at most ``max_tokens``, else None (here: counted whole)."""
        n = self.count_text(text)
        return n if n <= max_tokens else None

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

    def memo_texts(self, block: Block) -> Iterator[tuple[str, bool]]:
        """The texts ``count_block(block)`` counts through this counter's memos, each with
        whether it is counted as JSON (a tool call's input): what a worker process can count
        ahead (``counted``) for this process to ``learn``. Images, PDF pages and encrypted
        reasoning (counted from their sizes) are left out."""
        if isinstance(block, Text):
            yield block.text, False
        elif isinstance(block, ToolResult):
            for part in block.content:
                yield from self.memo_texts(part)
        elif isinstance(block, ToolCall):
            yield block.name, False
            payload = block.input
            yield (payload, False) if isinstance(payload, str) else (tool_input_text(payload), True)
        elif isinstance(block, Thinking):
            if not (block.redacted or (block.encrypted and not block.thinking)):
                yield block.thinking, False
        elif isinstance(block, Document):
            yield block.title, False
            if block.media_type.lower().startswith("text/"):
                yield block.data, False

    def counted(self, text: str, as_json: bool) -> int:
        """Tokens of ``text`` as ``count_block`` counts it (``as_json``: a tool call's input)."""
        return self._count_json(text) if as_json else self.count_text(text)

    def learn(self, text: str, as_json: bool, tokens: int) -> None:
        """Remember ``tokens`` as ``counted(text, as_json)``, counted by a worker process's copy
        of this counter (the counts are pure: the same as counting here)."""
        raise NotImplementedError

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

    def _held(self, text: str) -> int | None:
        return self._memo.get(text)

    def _count_upto(self, text: str, max_tokens: int) -> int | None:
        return tokens_within(text, max_tokens, self.encoding)

    def learn(self, text: str, as_json: bool, tokens: int) -> None:
        self._memo.learn(text, tokens)  # JSON is counted as text here

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

    def learn(self, text: str, as_json: bool, tokens: int) -> None:
        (self._json_memo if as_json else self._memo).learn(text, tokens)

    def _estimate(self, text: str, kind: ContentClass) -> int:
        return self._from_o200k(count_tokens(text), text, kind)

    def _from_o200k(self, o200k: int, text: str, kind: ContentClass) -> int:
        p = self.profile
        tokens = self._factors[kind] * o200k
        if p.cjk_extra_per_char:
            tokens += p.cjk_extra_per_char * count_cjk(text)
        return math.ceil(tokens * (1.0 + p.margin))

    def _held(self, text: str) -> int | None:
        return self._memo.get(text)

    def _count_upto(self, text: str, max_tokens: int) -> int | None:
        """Tokenized only as far as the ``o200k_base`` count that could still fit
        (``tokens_within``; two tokens of slack over the estimate's inverse, so rounding never
        decides), then estimated exactly as ``count_text`` does."""
        p, kind = self.profile, classify_text(text)
        cjk = p.cjk_extra_per_char * count_cjk(text) if p.cjk_extra_per_char else 0.0
        limit = max(0, math.floor((max_tokens / (1.0 + p.margin) - cjk) / self._factors[kind]) + 2)
        o200k = tokens_within(text, limit)
        if o200k is None:  # over the limit: over max_tokens (see above)
            return None
        n = self._from_o200k(o200k, text, kind)
        return n if n <= max_tokens else None

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
    """The token counter for a model. Counters are stateless and shared.

    Args:
        model: the model's entry (``Registry.get``), whose ``tokenizer`` picks the counter, or
            None.

    Returns:
        An exact ``OpenAICounter`` for ``o200k_base`` / ``cl100k_base`` models, an
        ``EstimateCounter`` with ``CLAUDE_PROFILE`` for Claude (and when ``model`` is None), with
        ``GENERIC_PROFILE`` for other tokenizers.
    """
    return _shared_counter(model.tokenizer if model is not None else "claude")


def fits(count: Callable[[str], int], text: str, max_tokens: int) -> bool:
    """Whether ``count(text) <= max_tokens``: the same answer as counting, but when ``count`` is a
    counter's own ``count_text`` (``_BlockCounter``), through its ``within``, which tokenizes a
    long text only as far as the limit. For the loops that cut a text until it fits (the
    skeleton's heads, the notes' sections, the restored files)."""
    owner = getattr(count, "__self__", None)
    if isinstance(owner, _BlockCounter) and count == owner.count_text:
        return owner.within(text, max_tokens)
    return count(text) <= max_tokens
