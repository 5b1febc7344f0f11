"""ctxengine.messages.media: image sizes (imagesize) and PDF page counts (pypdf) from base64 headers; and
documents and images attached to a user message itself (no tool call): offloaded like a tool
result's when over the budget, retrievable by the handle their line names, the user's text whole.

Inputs are built here: PDFs with one line of text a page (``make_pdf``), screenshots of
1568x1000 px (~2,090 tokens each), sessions at a 64,000-token window under every preset."""

from __future__ import annotations

import base64
import io
import re
import struct

import pypdf
import pytest

from ctxengine.engine.core import ContextEngine
from ctxengine.layers.tool_result_budget import budget_message
from ctxengine.messages.media import image_size, image_size_bytes, pdf_page_count
from ctxengine.messages.model import Document, Image, Message, Text, ToolCall, ToolResult
from ctxengine.policy.registry import get_policy
from ctxengine.tools.retrieve import retrieve
from test_faults_readers import PRESETS, T0, make_pdf, screenshots


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def _png(w: int, h: int) -> bytes:
    ihdr = struct.pack(">I", 13) + b"IHDR" + struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + ihdr + b"\x00" * 64


def test_png_gif_webp_sizes() -> None:
    assert image_size(_b64(_png(640, 480))) == (640, 480)
    assert image_size_bytes(_png(640, 480)) == (640, 480)
    gif = b"GIF89a" + struct.pack("<HH", 17, 9) + b"\x00" * 20
    assert image_size(_b64(gif)) == (17, 9)
    vp8x = (
        b"RIFF"
        + b"\x00" * 4
        + b"WEBPVP8X"
        + b"\x00" * 8
        + (99).to_bytes(3, "little")
        + (49).to_bytes(3, "little")
    )
    assert image_size(_b64(vp8x)) == (100, 50)


def test_jpeg_frame_header_after_large_metadata_is_found() -> None:
    """The SOF marker comes after 200 kB of APP1 segments: more than the first prefixes hold."""
    app = b"\xff\xe1" + struct.pack(">H", 65535) + b"\x00" * 65533
    sof = b"\xff\xc0" + struct.pack(">HBHHB", 17, 8, 600, 800, 3) + b"\x00" * 9
    jpeg = b"\xff\xd8" + app * 3 + sof + b"\xff\xda" + b"\x00" * 100
    assert image_size(_b64(jpeg)) == (800, 600)
    assert image_size_bytes(jpeg) == (800, 600)


def test_unknown_damaged_or_not_base64_is_none() -> None:
    assert image_size(_b64(b"not an image at all")) is None
    assert image_size("") is None
    assert image_size("!!!!") is None
    assert image_size(_b64(b"\x89PNG\r\n\x1a\n")) is None  # cut before the IHDR chunk
    assert image_size_bytes(b"") is None


def test_matches_pillow() -> None:
    pil = pytest.importorskip("PIL.Image")
    for fmt in ("PNG", "JPEG", "GIF", "WEBP"):
        buf = io.BytesIO()
        pil.new("RGB", (37, 23)).save(buf, format=fmt)
        assert image_size(_b64(buf.getvalue())) == (37, 23), fmt


def _pdf(pages: int) -> str:
    writer = pypdf.PdfWriter()
    for _ in range(pages):
        writer.add_blank_page(width=200, height=200)
    buf = io.BytesIO()
    writer.write(buf)
    return _b64(buf.getvalue())


def test_pdf_page_count() -> None:
    assert pdf_page_count(_pdf(3)) == 3
    assert pdf_page_count(_pdf(1)) == 1


def test_pdf_page_count_of_garbage_is_none() -> None:
    assert pdf_page_count(_b64(b"not a pdf")) is None
    assert pdf_page_count(_b64(b"%PDF-1.4\n")) is None
    assert pdf_page_count("") is None


# ------------------------------------------------------------------------------------------------
# Documents and images attached to a user message
# ------------------------------------------------------------------------------------------------

WINDOW = 64_000
ASK = "Here is the spec: summarize it and list every MARK id."
AFTER = "Answer in English, please."


def spec(pages: int, tag: str = "SPEC") -> Document:
    """A PDF of ``pages`` pages, page i reading "<tag> page i MARK-<i>" (~3,000 tokens a page)."""
    data = make_pdf([f"{tag} page {i} MARK-{i:03d}" for i in range(1, pages + 1)])
    return Document("application/pdf", data, title=f"{tag}.pdf")


def user_engine(policy: str = "default") -> ContextEngine:
    e = ContextEngine(get_policy(policy), model="claude-sonnet-4-5", window=WINDOW)
    e.bootstrap(system="You are a coding agent.", fixed_prefix_tokens=2_000)
    e.ingest(Message("user", (Text("hello"),), "u0", timestamp=T0))
    e.ingest(Message("assistant", (Text("Hi. What should I do?"),), "a0", timestamp=T0 + 1))
    return e


def request_tokens(e: ContextEngine, now: float) -> int:
    """Tokens of the request ``assemble`` makes now, by the engine's own count."""
    p = e.assemble(now=now)
    return e.ledger.state.fixed_prefix + sum(e.counter.count_message(m) for m in p.messages)


ATTACHMENTS = {
    "pdf-60": lambda: (spec(60),),
    "two-pdfs": lambda: (spec(30, "A"), spec(30, "B")),
    "screenshots-50": lambda: screenshots(50),
    "ten-small-pdfs": lambda: tuple(spec(3, f"P{i}") for i in range(10)),
}


@pytest.mark.parametrize("kind", list(ATTACHMENTS))
@pytest.mark.parametrize("policy", PRESETS)
def test_user_attachments_never_push_a_request_past_the_window(policy: str, kind: str) -> None:
    """A 60-page PDF (~180,000 tokens), two 30-page ones, 50 screenshots (~105,000 tokens) or ten
    3-page PDFs attached to the user's message make no request larger than the window, under
    every preset, then and in the rounds after (the guard cannot cut the newest round); the
    user's text is sent whole, in one piece (the lines of what was offloaded come after it; a
    preset that compacts here quotes it). Each PDF is sent or named by its handle, also where
    a summary replaced the message (a summary still drops images it was sent: not pinned)."""
    e = user_engine(policy)
    parts = ATTACHMENTS[kind]()
    e.ingest(Message("user", (Text(ASK), *parts, Text(AFTER)), "u1", timestamp=T0 + 2))
    sizes = [request_tokens(e, T0 + 3)]
    sent = e.assemble(now=T0 + 3).messages
    assert any(f"{ASK}\n{AFTER}" in m.text() for m in sent)
    if "pdf" in kind:
        handles = set(re.findall(r"user-media/u1/part-\d+", "\n".join(m.text() for m in sent)))
        assert sum(isinstance(b, Document) for m in sent for b in m.blocks) + len(handles) == len(parts)
    for k in range(2):
        ts = T0 + 4 + k
        e.ingest(Message("assistant", (ToolCall(f"c{k}", "bash", {"cmd": "ls"}),), f"a{k + 1}", timestamp=ts))
        e.ingest(Message("user", (ToolResult(f"c{k}", (Text("ok"),), name="bash"),), f"r{k}", timestamp=ts))
        sizes.append(request_tokens(e, T0 + 5 + k))
    assert max(sizes) <= WINDOW, sizes


def test_an_offloaded_user_pdf_names_a_handle_that_gives_it_back() -> None:
    """The PDF's line names artifact ``user-media/u1/part-2`` and how to read it page-wise; the
    engine's ``retrieve`` gives its data back, ``retrieve_part`` the document whole, the
    ``retrieve`` tool its pages; the user's text is untouched and nothing of it is offloaded."""
    e = user_engine()
    doc = spec(40)
    events = e.ingest(Message("user", (Text(ASK), doc), "u1", timestamp=T0 + 2))
    assert [ev.layer for ev in events] == ["tool_result_budget"]
    assert events[0].details["user_parts"] == ["user-media/u1/part-2"]
    assert events[0].details["media_offloaded"] == 1 and events[0].details["call_ids"] == []
    shown = e.assemble(now=T0 + 3).messages[-1]
    assert shown.blocks[0] == Text(ASK)
    assert not any(isinstance(b, Document | Image) for b in shown.blocks)
    aid = "user-media/u1/part-2"
    line = shown.blocks[1].text  # type: ignore[union-attr]
    assert aid in line and "40 pages" in line and 'pages="1-10"' in line and "SPEC.pdf" in line
    assert e.retrieve(aid) == doc.data
    assert e.retrieve_part(aid) == doc
    text = retrieve(e.store, e.session_id, aid, pages="3-5")
    assert all(f"MARK-{i:03d}" in text for i in (3, 4, 5)) and "MARK-006" not in text
    assert e.retrieve("message:u1") == ASK  # the history keeps the message as sent


def test_an_offloaded_pdf_names_retrieve_only_where_the_agent_has_it() -> None:
    """Behind ``ctxengine proxy`` without ``--retrieve-tool`` the agent has no ``retrieve`` tool
    (``ClearedResults.name_retrieve`` off): the PDF's line names its artifact and no call the
    client cannot make (it offered ``retrieve(...)`` anyway)."""
    from ctxengine.policy.layer_settings import ClearedResults

    default = get_policy("default")
    policy = default.with_(default.settings(ClearedResults).with_(name_retrieve=False))
    e = ContextEngine(policy, model="claude-sonnet-4-5", window=WINDOW)
    e.bootstrap(system="You are a coding agent.", fixed_prefix_tokens=2_000)
    e.ingest(Message("user", (Text(ASK), spec(40)), "u1", timestamp=T0 + 2))
    line = e.assemble(now=T0 + 3).messages[-1].blocks[1].text  # type: ignore[union-attr]
    assert "user-media/u1/part-2" in line and "40 pages" in line and "retrieve" not in line


def test_offloaded_user_images_are_kept_whole_and_shown_the_same_every_call() -> None:
    """Screenshots of a message without an id: each offloaded one is kept under its own handle
    (``user-media/sha-<hash>/part-<k>``) and given back whole; the projection is byte-identical
    from call to call (prompt cache); screenshots that fit stay as images."""
    e = user_engine("pi")  # tool-result budget off: the overflow guard's share decides
    shots = tuple(
        Image("image/png", data=f"iVBORw0KGgo{k:04d}" + "A" * 4_000, width=1568, height=1000)
        for k in range(50)
    )
    e.ingest(Message("user", (*shots, Text(ASK)), "", timestamp=T0 + 2))
    first = e.assemble(now=T0 + 3).messages[-1]
    assert first == e.assemble(now=T0 + 4).messages[-1]
    kept = [b for b in first.blocks if isinstance(b, Image)]
    lines = [b.text for b in first.blocks if isinstance(b, Text) and b.text != ASK]
    assert kept and lines and len(kept) + len(lines) == 50
    assert first.blocks[len(kept)] == Text(ASK)  # the user's text before the lines
    handles = [line.split("artifact ", 1)[1].rstrip("]") for line in lines]
    assert all(h.startswith("user-media/sha-") for h in handles)
    parts = [e.retrieve_part(h) for h in handles]
    assert all(p in shots for p in parts) and len(set(handles)) == len(handles)
    assert "image" in retrieve(e.store, e.session_id, handles[0])


def test_a_user_attachment_the_window_can_take_is_not_offloaded() -> None:
    """What the user attaches is what the model is asked to look at: it stays as sent while the
    window can take it, whatever the per-result cap (a 1568x1000 screenshot, ~1,600 tokens, is
    over ``default``'s 1,280-token cap at 64,000 tokens, and was offloaded behind a line the
    model could not look at); a 400x300 screenshot, a 1568x1000 one, three of them and a
    2-page PDF (~6,000 tokens) under ``default`` and ``claude-code``."""
    counter = user_engine().counter.count_block
    small = Image("image/png", data="iVBORw0KGgo" + "A" * 400, width=400, height=300)
    cases = [
        (name, parts)
        for name in ("default", "claude-code")
        for parts in ((small,), screenshots(1), screenshots(3), (spec(2),))
    ]
    for name, parts in cases:
        policy = get_policy(name).for_window(WINDOW, 2_000)
        msg = Message("user", (Text(ASK), *parts), "u9", timestamp=T0)
        assert budget_message(msg, policy, 0, media_tokens=counter, free_window=WINDOW - 2_000) is None, name


@pytest.mark.parametrize("policy", ["default", "claude-code", "openclaw"])
def test_attachments_of_a_summarized_message_stay_retrievable(policy: str) -> None:
    """An image and a PDF attached to a user message that a compaction then summarizes: the
    summary keeps the words, and each attachment is kept whole and named with its handle after
    the summary (they vanished with no handle), retrievable as it was sent."""
    e = ContextEngine(get_policy(policy), model="claude-sonnet-4-5", window=WINDOW)
    e.bootstrap(system="You are a coding agent.", fixed_prefix_tokens=2_000)
    shot = screenshots(1)[0]
    pdf = spec(2, "ATT")
    e.ingest(Message("user", (Text("Look at these and fix the layout."), shot, pdf), "u1", timestamp=T0))
    e.ingest(Message("assistant", (Text("Looking."),), "a1", timestamp=T0 + 1))
    for k in range(80):  # enough later conversation for an automatic compaction
        e.ingest(
            Message("user", (Text(f"next step {k}: " + "word " * 900),), f"u{k + 2}", timestamp=T0 + 2 + k)
        )
        e.ingest(Message("assistant", (Text(f"done {k}"),), f"a{k + 2}", timestamp=T0 + 2.5 + k))
        p = e.assemble(now=T0 + 2.7 + k)
        if any(ev.layer.endswith("compact") for ev in p.events):
            break
    else:
        raise AssertionError("no compaction")
    shown = "\n".join(m.text() for m in p.messages)
    assert all(m.id != "u1" for m in p.messages)  # the message itself was summarized
    handles = re.findall(r"artifact (user-media/\S+)", shown)
    assert len(handles) == 2, shown[-800:]
    assert {type(e.retrieve_part(h)) for h in handles} == {Image, Document}
    assert shot in [e.retrieve_part(h) for h in handles]
