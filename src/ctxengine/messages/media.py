"""Sizes read from the headers of images and documents: the one parser the readers share.

An image's pixel size comes from ``imagesize`` (PNG, GIF, JPEG, WebP and the other formats it
knows), a PDF's page count from ``pypdf``. Transcripts hold images as base64, often megabytes of
it, so ``image_size`` decodes only a prefix (512 base64 chars, then 8,192, then 131,072, then the
whole) and reads on only while the parser ran out of bytes (a JPEG whose frame header comes after
large metadata segments). Token counts are taken from these sizes (``tokens.counter``), never from
the base64 length.

What follows the libraries, not hand parsing: a JPEG's stored size is used as it is (its EXIF
orientation is not applied, ``exif_rotation=False``: the bytes sent are what is sized); a size the
library cannot read (a damaged header, an unknown format) is None.
"""

from __future__ import annotations

import base64
import binascii
import io

__all__ = ["PREFIX_CHARS", "image_size", "image_size_bytes", "pdf_page_count"]

PREFIX_CHARS = (512, 8192, 131072)  # base64 chars decoded before giving up and decoding it all

Size = tuple[int, int]


class _Prefix(io.BytesIO):
    """The decoded start of an image that notes whether the parser read up to its end (then more
    bytes might let it find the size)."""

    def __init__(self, data: bytes) -> None:
        super().__init__(data)
        self.hit_end = False

    def read(self, size: int | None = -1, /) -> bytes:
        chunk = super().read(size)
        if size is None or size < 0 or len(chunk) < size:
            self.hit_end = True
        return chunk


def _sniff(raw: bytes) -> tuple[Size | None, bool]:
    """(size or None, whether more bytes might help) of ``raw``, the start of an image file."""
    import imagesize  # here, not at import: it imports urllib, http, email and xml (~25 ms)

    handle = _Prefix(raw)
    width, height = imagesize.get(handle, exif_rotation=False)
    if width >= 0 and height >= 0:
        return (width, height), False
    return None, handle.hit_end


def image_size_bytes(raw: bytes) -> Size | None:
    """``(width, height)`` in pixels of the image file ``raw`` (its bytes), read from its header.

    Returns None when the format is unknown or the header is damaged."""
    size, _ = _sniff(raw)
    return size


def image_size(data: str) -> Size | None:
    """``(width, height)`` in pixels of a base64 image, read from its header.

    Only a prefix is decoded (``PREFIX_CHARS``: 512 base64 chars, then more while the parser ran
    out of bytes, at last the whole). Returns None when the data is not base64, the format is
    unknown or the header is damaged."""
    for n in (*PREFIX_CHARS, len(data)):
        whole = n >= len(data)
        chunk = data if whole else data[: n - n % 4]
        try:
            raw = binascii.a2b_base64(chunk)
        except binascii.Error:
            if whole:
                return None
            continue
        size, need_more = _sniff(raw)
        if size is not None or not need_more or whole:
            return size
    return None


def pdf_page_count(data: str) -> int | None:
    """Number of pages of a base64 PDF, read with ``pypdf`` (its page tree, compressed object
    streams included). Returns None when the data is not base64 or not a readable PDF."""
    try:
        raw = base64.b64decode(data, validate=False)
    except (binascii.Error, ValueError):
        return None
    import pypdf  # here, not at import: it takes ~0.2 s, and most sessions hold no PDF

    try:
        return len(pypdf.PdfReader(io.BytesIO(raw)).pages)
    except Exception:  # pypdf raises many kinds of error on a damaged file: all mean "unreadable"
        return None
