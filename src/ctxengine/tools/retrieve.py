"""``retrieve``: page through a tool result that the engine offloaded or cleared, by artifact id.

The tool-result budget replaces a large result with a ``<persisted-output>`` preview (Claude Code's
large-result handling, reference notes section C1) and keeps the original as artifact
``tool-result/<call id>`` in the ``SessionStore``; clearing does the same. ``retrieve`` brings it
back in pages, with the read tool's rules:
- ``offset`` (1-based line) / ``limit`` (lines, default 2,000), ``cat -n`` numbering, lines over
  2,000 characters cut, pi's hint ``[Showing lines S-E of T. Use offset=E+1 to continue.]``, and
  the 25,000-token cap (exact ``o200k_base`` by default, as ``read``);
- JSON artifacts (an object or array) are paged in pretty-printed form (2-space indent), so a
  one-line JSON blob becomes pageable. Without offset/limit/query a JSON artifact gets a
  structural preview instead: JMESPath paths with types, key counts, array lengths and sample
  values (strings cut at 60 chars), at most 4 levels deep and 150 lines; the first element of an
  array stands for all (the key union is listed when the keys vary);
- ``query``: a JMESPath expression (``jmespath`` library) evaluated on the JSON; the result is
  pretty JSON cut at 20,000 characters with a hint to narrow the query. With offset/limit the
  query result is paged instead.

- ``pages`` (e.g. ``"3"``, ``"3-7"``): an offloaded PDF (artifact ``tool-result/<call id>/part-<k>``,
  kept whole by the tool-result budget) is read page-wise, as Claude Code's Read takes ``pages``:
  at most ``PDF_MAX_PAGES_PER_READ`` (20) pages a call, ``PDF_DEFAULT_PAGES`` (10) without
  ``pages``, the text of each page (``pypdf``) under a ``--- page N of T ---`` line, the 25,000-token
  cap and a hint for the next pages. A text document part is paged by lines like any text; an
  image part cannot be returned as text: its description says so (``ContextEngine.retrieve_part``
  gives it back to a harness). An image or document attached to a user message itself and
  offloaded the same way is artifact ``user-media/<message id>/part-<k>`` and is read alike.

Ids may be given with or without the ``tool-result/`` prefix.
"""

from __future__ import annotations

import base64
import binascii
import io
import json
import re
from collections.abc import Callable
from typing import Any

import jmespath
import jmespath.exceptions

from ctxengine.layers.base import artifact_id
from ctxengine.store.base import SessionStore, StoreError
from ctxengine.tokens.counter import TokenCounter
from ctxengine.tools.base import ToolError, ToolSpec
from ctxengine.tools.budgets import READ_MAX_TOKENS
from ctxengine.tools.read import (
    DEFAULT_COUNTER,
    cap_tokens,
    check_page_args,
    continuation_hint,
    numbered,
)

QUERY_MAX_CHARS = 20_000
PDF_MAX_PAGES_PER_READ = 20  # Claude Code's Read: at most 20 PDF pages per request
PDF_DEFAULT_PAGES = 10
PREVIEW_MAX_DEPTH = 4
PREVIEW_MAX_LINES = 150
PREVIEW_MAX_KEYS = 30
PREVIEW_SAMPLE_CHARS = 60
PREVIEW_ITEMS_SCANNED = 50  # array items inspected for types and varying keys

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def load_artifact_meta(store: SessionStore, session: str, aid: str) -> tuple[str, str, dict[str, Any]]:
    """(id, content, meta) of artifact ``aid`` (``tool-result/`` prefix optional)."""
    if not isinstance(aid, str) or not aid.strip():
        raise ToolError("id is required: the artifact id, e.g. tool-result/<tool call id>")
    aid = aid.strip()
    candidates = [aid] if aid.startswith("tool-result/") else [aid, artifact_id(aid)]
    for cand in candidates:
        try:
            content, meta = store.get_artifact(session, cand)
            return cand, content, meta
        except StoreError:
            continue
    raise ToolError(
        f"no artifact {aid!r} in this session. Artifact ids look like tool-result/<tool call id> "
        "(or user-media/<message id>/part-<k> for a user's attachment), as named in the placeholder "
        "of an offloaded or cleared tool result."
    )


def parse_json(content: str) -> Any | None:
    """The parsed JSON object or array, or None when ``content`` is not one."""
    head = content.lstrip()[:1]
    if head not in ("{", "["):
        return None
    try:
        return json.loads(content)
    except ValueError:
        return None


def pretty(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False)


# ------------------------------------------------------------------------------------------------
# Structural preview
# ------------------------------------------------------------------------------------------------


def _type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _key(path: str, key: str) -> str:
    name = key if _IDENT.match(key) else json.dumps(key, ensure_ascii=False)
    return name if path == "@" else f"{path}.{name}"


def _sample(value: Any) -> str:
    if isinstance(value, str):
        cut = value[:PREVIEW_SAMPLE_CHARS]
        more = f"… ({len(value):,} chars)" if len(value) > PREVIEW_SAMPLE_CHARS else ""
        return json.dumps(cut, ensure_ascii=False) + more
    return json.dumps(value)


def _describe(value: Any, path: str, depth: int, out: list[str]) -> None:
    if len(out) >= PREVIEW_MAX_LINES:
        return
    kind = _type(value)
    if isinstance(value, dict):
        out.append(f"{path}: object {{{len(value)} keys}}")
        if depth >= PREVIEW_MAX_DEPTH:
            if value:
                out.append(f"{path}: keys {', '.join(list(value)[:PREVIEW_MAX_KEYS])}")
            return
        for i, (k, v) in enumerate(value.items()):
            if i >= PREVIEW_MAX_KEYS:
                out.append(f"{path}: ... and {len(value) - PREVIEW_MAX_KEYS} more keys")
                break
            _describe(v, _key(path, str(k)), depth + 1, out)
    elif isinstance(value, list):
        head = value[:PREVIEW_ITEMS_SCANNED]
        kinds: dict[str, int] = {}
        for item in head:
            kinds[_type(item)] = kinds.get(_type(item), 0) + 1
        if not value:
            out.append(f"{path}: array [0 items]")
            return
        of = (
            next(iter(kinds))
            if len(kinds) == 1
            else "mixed (" + ", ".join(f"{k}×{n}" for k, n in kinds.items()) + ")"
        )
        scanned = f" (first {len(head)} inspected)" if len(value) > len(head) and len(kinds) > 1 else ""
        out.append(f"{path}: array [{len(value):,} items] of {of}{scanned}")
        dicts = [item for item in head if isinstance(item, dict)]
        if len(dicts) > 1:
            union: dict[str, None] = {}
            for d in dicts:
                union.update(dict.fromkeys(map(str, d)))
            if any(set(map(str, d)) != set(union) for d in dicts):
                keys = list(union)
                more = f", ... ({len(keys) - PREVIEW_MAX_KEYS} more)" if len(keys) > PREVIEW_MAX_KEYS else ""
                out.append(
                    f"{path}[*]: keys vary across items; union: {', '.join(keys[:PREVIEW_MAX_KEYS])}{more}"
                )
        if depth < PREVIEW_MAX_DEPTH:
            _describe(value[0], f"{'' if path == '@' else path}[0]", depth + 1, out)
    elif value is None:
        out.append(f"{path}: null")
    else:
        out.append(f"{path}: {kind} = {_sample(value)}")


def structure(value: Any) -> list[str]:
    """Preview lines of a parsed JSON value: one per path (JMESPath syntax), depth-limited."""
    out: list[str] = []
    _describe(value, "@", 0, out)
    if len(out) >= PREVIEW_MAX_LINES:
        out = out[:PREVIEW_MAX_LINES]
        out.append(f"... (preview cut at {PREVIEW_MAX_LINES} lines; query deeper paths directly)")
    return out


def _example_query(value: Any) -> str:
    if isinstance(value, list):
        return "[0:5]"
    if isinstance(value, dict):
        for k, v in value.items():
            name = _key("@", str(k))
            if isinstance(v, list) and v and isinstance(v[0], dict):
                return f"{name}[0:5].{_key('@', str(next(iter(v[0]), 'id')))}" if v[0] else f"{name}[0:5]"
        return "keys(@)" if len(value) > 1 else _key("@", str(next(iter(value), "a")))
    return "@"


# ------------------------------------------------------------------------------------------------
# retrieve
# ------------------------------------------------------------------------------------------------


def _page(text: str, aid: str, start: int, count: int, counter: TokenCounter, header: str | None) -> str:
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    total = len(lines)
    if total == 0:
        return f"[Artifact {aid} is empty.]"
    if start > total:
        raise ToolError(f"offset={start} is past the end of {aid}, which has {total:,} lines.")
    page = lines[start - 1 : start - 1 + count]
    end = start + len(page) - 1
    body = "\n".join(numbered(start + i, ln.removesuffix("\r")) for i, ln in enumerate(page))
    cap_tokens(body, counter, aid, start, len(page), "retrieve")
    parts = [header] if header else []
    parts.append(body)
    if end < total:
        parts.append("\n" + continuation_hint(start, end, total))
    return "\n".join(parts)


def parse_pages(pages: Any, total: int) -> tuple[int, int]:
    """(first, last) 1-based pages of ``pages`` ("3" or "3-7"; None: the first
    ``PDF_DEFAULT_PAGES``), checked against ``total`` and ``PDF_MAX_PAGES_PER_READ``."""
    if pages is None:
        return 1, min(total, PDF_DEFAULT_PAGES)
    m = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", str(pages)) if isinstance(pages, str | int) else None
    if m is None or isinstance(pages, bool):
        raise ToolError(f'pages is a page or a range of pages such as "3" or "3-7"; got {pages!r}')
    first = int(m.group(1))
    last = int(m.group(2)) if m.group(2) else first
    if first < 1 or last < first:
        raise ToolError(f'pages are 1-based and the range must not run backwards; got {pages!r}')
    if first > total:
        raise ToolError(f"page {first} is past the end: the document has {total:,} pages.")
    if last - first + 1 > PDF_MAX_PAGES_PER_READ:
        raise ToolError(
            f"at most {PDF_MAX_PAGES_PER_READ} pages per call; got {last - first + 1}. "
            f'Read pages="{first}-{first + PDF_MAX_PAGES_PER_READ - 1}" first.'
        )
    return first, min(last, total)


def _pdf_pages(aid: str, content: str, meta: dict[str, Any], pages: Any, counter: TokenCounter) -> str:
    """The text of pages of the PDF kept as artifact ``aid`` (base64 ``content``)."""
    import pypdf  # imported here: ~70 ms that every command paid at start, for a rare request
    import pypdf.errors

    try:
        reader = pypdf.PdfReader(io.BytesIO(base64.b64decode(content, validate=False)))
        total = len(reader.pages)
    except (binascii.Error, ValueError, pypdf.errors.PyPdfError) as exc:
        raise ToolError(f"artifact {aid} is a PDF that cannot be read ({exc}).") from None
    if total == 0:
        return f"[Artifact {aid} is a PDF without pages.]"
    first, last = parse_pages(pages, total)
    title = f' "{meta["title"]}"' if meta.get("title") else ""
    out = [f"[PDF{title}, artifact {aid}: pages {first}-{last} of {total:,}]"]
    for n in range(first, last + 1):
        try:
            text = reader.pages[n - 1].extract_text() or ""
        except (ValueError, KeyError, pypdf.errors.PyPdfError) as exc:
            text = f"(the text of this page cannot be extracted: {exc})"
        out.append(f"--- page {n} of {total:,} ---")
        out.append(text.strip() or "(no extractable text on this page: scanned or drawn)")
    body = "\n".join(out)
    tokens = counter.count_text(body) if len(body) * 2 > READ_MAX_TOKENS else 0
    if tokens > READ_MAX_TOKENS:
        raise ToolError(
            f"pages {first}-{last} of {aid} come to about {tokens:,} tokens, over the "
            f"{READ_MAX_TOKENS:,}-token limit for one retrieve. Read fewer pages."
        )
    if last < total:
        nxt = f"{last + 1}-{min(total, last + (last - first + 1))}"
        body += f'\n\n[Showing pages {first}-{last} of {total:,}. Use pages="{nxt}" to continue.]'
    return body


def retrieve(
    store: SessionStore,
    session: str,
    id: str,  # the tool's argument name
    offset: int | None = None,
    limit: int | None = None,
    query: str | None = None,
    pages: str | None = None,
    *,
    counter: TokenCounter | None = None,
) -> str:
    """Page through artifact ``id`` of ``session`` (see the module docs). Raises ``ToolError``."""
    start, count = check_page_args(offset, limit)
    counter = counter if counter is not None else DEFAULT_COUNTER
    aid, content, meta = load_artifact_meta(store, session, id)
    kind = meta.get("type")
    media = str(meta.get("media_type", "")).lower()
    if kind == "document" and media == "application/pdf":
        return _pdf_pages(aid, content, meta, pages, counter)
    if pages is not None:
        raise ToolError(f"artifact {aid} is not a PDF, so pages does not apply. Page it with offset/limit.")
    if kind == "image" or (kind == "document" and not media.startswith("text/")):
        size = f", {meta['width']}x{meta['height']} px" if meta.get("width") and meta.get("height") else ""
        return (
            f"[Artifact {aid} is {'an image' if kind == 'image' else 'a document'} "
            f"({media or 'unknown type'}{size}, {len(content):,} base64 chars) kept whole; it cannot be "
            "returned as text. The harness can attach it again (ContextEngine.retrieve_part).]"
        )
    paged = offset is not None or limit is not None
    data = parse_json(content)
    if query is not None:
        if not isinstance(query, str) or not query.strip():
            raise ToolError("query must be a non-empty JMESPath expression, e.g. items[0:5].name")
        if data is None:
            raise ToolError(
                f"artifact {aid} is not JSON, so query does not apply. Page it with offset/limit instead."
            )
        try:
            result = jmespath.search(query, data)
        except jmespath.exceptions.JMESPathError as exc:
            raise ToolError(f"invalid JMESPath query {query!r}: {exc}".strip()) from None
        text = pretty(result)
        if paged:
            return _page(text, aid, start, count, counter, f"[Query {query!r} on {aid}, pretty-printed JSON]")
        if len(text) <= QUERY_MAX_CHARS:
            return text
        cut = text[:QUERY_MAX_CHARS]
        cut = cut[: cut.rfind("\n")] if "\n" in cut else cut
        return (
            f"{cut}\n\n[Result cut at {len(cut):,} of {len(text):,} chars. Narrow the query (a slice "
            "such as items[0:20], a projection such as items[*].name) or page it with offset/limit.]"
        )
    if data is None:
        return _page(content, aid, start, count, counter, None)
    text = pretty(data)
    if paged:
        return _page(text, aid, start, count, counter, f"[JSON artifact {aid}, pretty-printed]")
    n_lines = text.count("\n") + 1
    lines = [f"JSON artifact {aid} ({len(content):,} chars). Structure (JMESPath paths):"]
    lines += structure(data)
    example = json.dumps(_example_query(data), ensure_ascii=False)
    lines.append(
        f"\n[Query it with retrieve(id={json.dumps(aid)}, query={example}) (JMESPath), or page the "
        f"pretty-printed JSON ({n_lines:,} lines) with offset/limit.]"
    )
    return "\n".join(lines)


RETRIEVE_DESCRIPTION = (
    "Read back a tool result that was offloaded or cleared from the context, by its artifact id "
    "(tool-result/<call id>, or user-media/<message id>/part-<k> for an attachment of the user's, as "
    "named in the placeholder). Text is paged like read: numbered lines "
    "from `offset` (1-based), `limit` lines (default 2,000). A JSON result without offset/limit "
    "returns its structure (paths, types, array lengths, samples); `query` runs a JMESPath "
    "expression on it (e.g. `items[?status=='failed'].name`). An offloaded PDF is read page-wise "
    'with `pages` (e.g. "1-10", at most 20 pages).'
)

RETRIEVE_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "id": {"type": "string", "description": "Artifact id, e.g. tool-result/toolu_01abc."},
        "offset": {"type": "integer", "minimum": 1, "description": "1-based line to start from."},
        "limit": {"type": "integer", "minimum": 1, "description": "Number of lines (default 2000)."},
        "query": {"type": "string", "description": "JMESPath expression, for JSON artifacts."},
        "pages": {"type": "string", "description": 'PDF pages, e.g. "3" or "3-7" (at most 20).'},
    },
    "required": ["id"],
    "additionalProperties": False,
}


def specs(
    store: SessionStore, session: str | Callable[[], str], counter: TokenCounter | None = None
) -> list[ToolSpec]:
    """The ``retrieve`` tool on ``store``'s artifacts of ``session`` (a session id, or a callable
    returning the current one)."""

    def run(
        id: str,
        offset: int | None = None,
        limit: int | None = None,
        query: str | None = None,
        pages: str | None = None,
    ) -> str:
        sid = session() if callable(session) else session
        return retrieve(store, sid, id, offset, limit, query, pages, counter=counter)

    return [ToolSpec("retrieve", RETRIEVE_DESCRIPTION, RETRIEVE_PARAMETERS, run)]
