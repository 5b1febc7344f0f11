"""ctxengine.media: image sizes (imagesize) and PDF page counts (pypdf) from base64 headers."""

from __future__ import annotations

import base64
import io
import struct

import pypdf
import pytest

from ctxengine.media import image_size, image_size_bytes, pdf_page_count


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
