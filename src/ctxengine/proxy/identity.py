"""Session identity: which stored conversation a request continues.

Every request carries the whole conversation, so a session is found by the longest stored
conversation that is a prefix of it: each client message gets a link of a hash chain
(``link_i = H(link_{i-1}, message_i)``), rooted in a hash of the API key, the wire format and the
fixed prefix (system prompt), so two keys never share a session and a request with another system
prompt (a harness's side request) is another conversation. The key itself is never kept: only
``key_digest`` of it.

A message is hashed as its JSON bytes (the client's key order: a client serializes its messages
the same way on every request), in a normal form when it holds ``cache_control`` markers: they
are left out (a client such as Claude Code moves its breakpoint to the newest message on every
request; the conversation is the same), and a content of one text block is its string (the same
prompt sent either way). Hashes are BLAKE2b, 16 bytes. A message's own digest (what ``align``
compares) is its role's tag (``USER_TAG``, ``ASSISTANT_TAG``, ``OTHER_TAG``: one byte) and the
hash of its normal form.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

DIGEST_BYTES = 16
_ENCODER = msgspec.json.Encoder()
_MARK = b'"cache_control"'

# request headers that carry the client's credentials (never stored or logged)
AUTH_HEADERS = ("x-api-key", "authorization", "api-key")
SESSION_HEADER = "x-ctxengine-session"

# the first byte of a message's own digest: its role (``align`` tells user and assistant apart)
USER_TAG = b"u"
ASSISTANT_TAG = b"a"
OTHER_TAG = b"o"  # system, developer, tool, an item without a role (Responses function calls)
_TAGS = {"user": USER_TAG, "assistant": ASSISTANT_TAG}


def digest(*parts: bytes) -> bytes:
    """BLAKE2b digest of ``parts`` (each length-prefixed, so that parts cannot run together)."""
    h = hashlib.blake2b(digest_size=DIGEST_BYTES)
    for p in parts:
        h.update(len(p).to_bytes(8, "little"))
        h.update(p)
    return h.digest()


def key_digest(headers: Mapping[str, str]) -> str:
    """Hex digest of the client's credentials (the first auth header present, without a
    ``Bearer`` scheme; empty when none). The only form in which a key is kept."""
    for name in AUTH_HEADERS:
        value = headers.get(name)
        if value:  # the same key as ``x-api-key: K`` or ``authorization: Bearer K``
            key = value.strip()
            key = key[7:].strip() if key[:7].lower() == "bearer " else key
            return digest(b"key", key.encode()).hex()
    return digest(b"key").hex()


def _normal(value: Any) -> Any:
    """``value`` without ``cache_control`` keys in its content blocks (copies only what changes)."""
    if isinstance(value, dict):
        if "cache_control" in value or any(isinstance(v, list | dict) for v in value.values()):
            return {k: _normal(v) for k, v in value.items() if k != "cache_control"}
        return value
    if isinstance(value, list):
        return [_normal(v) for v in value]
    return value


def _one_text(message: Any) -> Any:
    """``message`` with a content of one text block as that block's string: Claude Code sends
    its newest prompt as ``[{"type": "text", "text": P, "cache_control": ...}]`` and the same
    prompt as ``P`` once it is no longer the newest."""
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, list) and len(content) == 1 and isinstance(content[0], dict):
        block = content[0]
        if block.get("type") == "text" and isinstance(block.get("text"), str) and set(block) <= _TEXT_KEYS:
            return {**message, "content": block["text"]}
    return message


_TEXT_KEYS = frozenset({"type", "text", "cache_control"})


def message_bytes(message: Any) -> bytes:
    """The normal form of one client message, as JSON bytes (normalized only when it needs it:
    encoding is fast, walking the message is not)."""
    message = _one_text(message)
    raw = _ENCODER.encode(message)
    return _ENCODER.encode(_normal(message)) if _MARK in raw else raw


def root(provider: str, key: str, fixed_prefix: Any) -> bytes:
    """The chain's root: wire format, key digest and the request's fixed prefix (system prompt)."""
    return digest(provider.encode(), key.encode(), _ENCODER.encode(_normal(fixed_prefix)))


def chain(start: bytes, messages: Sequence[Any]) -> list[bytes]:
    """``links[i]`` identifies ``messages[: i + 1]`` under ``start``."""
    return chain_and_digests(start, messages)[0]


def chain_and_digests(start: bytes, messages: Sequence[Any]) -> tuple[list[bytes], list[bytes]]:
    """``chain(start, messages)``, and each message's own digest (its normal form's, whatever
    precedes it, after its role's tag: what ``align`` compares when a client moves messages), each
    message encoded once."""
    links: list[bytes] = []
    digests: list[bytes] = []
    prev = start
    for m in messages:
        raw = message_bytes(m)
        prev = digest(prev, raw)
        links.append(prev)
        digests.append(role_tag(m) + digest(raw))
    return links, digests


class _Listed(msgspec.Struct):
    """A request body's message list as each message's JSON bytes (other fields skipped)."""

    messages: list[msgspec.Raw] | None = None
    input: list[msgspec.Raw] | str | None = None


_LISTED = msgspec.json.Decoder(_Listed)


def raw_messages(body: bytes, conversation: Sequence[Any], key: str = "messages") -> list[msgspec.Raw] | None:
    """Each message of ``conversation`` (the list at the body's ``key``, ``messages`` or
    ``input``, less its leading fixed-prefix messages) as the JSON bytes the client sent; None
    when ``body`` does not hold such a list (the caller hashes the decoded messages then)."""
    try:
        listed = _LISTED.decode(body)
    except msgspec.DecodeError:
        return None
    raws = listed.input if key == "input" else listed.messages
    if not isinstance(raws, list) or len(raws) < len(conversation):
        return None
    return raws[len(raws) - len(conversation) :]


CHAIN_MEMO_BYTES = 128 * 1024 * 1024  # client bytes the chain memo holds at most (oldest forgotten first)


class ChainMemo:
    """``chain_and_digests`` of request after request: the links and digests of the leading
    messages whose JSON bytes are those of the previous request of the same conversation (its
    root and first message) are that request's, and only the messages after them are encoded and
    hashed. A message's link depends only on the previous link and the message, which its bytes
    determine: the result is ``chain_and_digests``'s. Holds each conversation's last request's
    bytes, ``max_bytes`` in all."""

    def __init__(self, max_bytes: int = CHAIN_MEMO_BYTES) -> None:
        self.max_bytes = max_bytes
        # conversation -> (its last request's message bytes, links, digests, size in bytes)
        self._last: OrderedDict[bytes, tuple[list[msgspec.Raw], list[bytes], list[bytes], int]]
        self._last = OrderedDict()
        self._bytes = 0
        self.reused = 0  # messages whose link came from the memo

    def chain(
        self, start: bytes, messages: Sequence[Any], raws: Sequence[msgspec.Raw] | None
    ) -> tuple[list[bytes], list[bytes]]:
        """``chain_and_digests(start, messages)``; ``raws``: each message's JSON bytes as the
        client sent them (None: nothing is reused or kept)."""
        if raws is None or len(raws) != len(messages) or not raws:
            return chain_and_digests(start, messages)
        key = start + digest(bytes(raws[0]))
        prev = self._last.pop(key, None)
        k = 0
        if prev is not None:
            self._bytes -= prev[3]
            old, n = prev[0], min(len(prev[0]), len(raws))
            while k < n and old[k] == raws[k]:
                k += 1
        links, digests = (prev[1][:k], prev[2][:k]) if prev is not None else ([], [])
        more_links, more_digests = chain_and_digests(links[-1] if links else start, messages[k:])
        links += more_links
        digests += more_digests
        self.reused += k
        size = sum(len(r) for r in raws)
        if size <= self.max_bytes:
            self._last[key] = (list(raws), links, digests, size)
            self._bytes += size
            while self._bytes > self.max_bytes:
                _, dropped = self._last.popitem(last=False)
                self._bytes -= dropped[3]
        return list(links), list(digests)


def role_tag(message: Any) -> bytes:
    """The tag of ``message``'s role that starts its own digest (``USER_TAG``, ``ASSISTANT_TAG``
    or ``OTHER_TAG``)."""
    role = message.get("role") if isinstance(message, dict) else None
    return _TAGS.get(role, OTHER_TAG) if isinstance(role, str) else OTHER_TAG
