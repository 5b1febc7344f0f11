"""The engine's decisions committed: ``Commits`` writes a decision's artifacts and entry
to the store, applies it to the view, and sets its event's token figures and quality figures;
it also answers retrievals of what left the context.

A commit writes the store first (a ``StoreError`` then leaves the engine unchanged), then
changes the view, tells the ``compaction_listeners`` that content left the context, and sets
``tokens_before`` / ``tokens_after`` (predicted input tokens) on the event. Policy ``recorded``
replays the recorded session's own compactions (``recorded_cut``, ``recorded_event``).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import msgspec

from ctxengine.engine.state import content_left
from ctxengine.layers.base import (
    REQUEST_TEXT,
    Cut,
    LayerEvent,
    Replacements,
    artifact_id,
    call_artifact_id,
    part_artifact_id,
    result_text,
    user_parts,
)
from ctxengine.messages.model import Document, Image, Message, Text, ToolCall, ToolResult

if TYPE_CHECKING:
    from ctxengine.engine.state import SessionState
    from ctxengine.engine.view import EngineView
from ctxengine.summary.audit import quality, request_kept


class Commits:
    """Commits of decisions (store, view, event figures) and retrieval of what left the
    context (see the module docstring).

    Args:
        state: the session whose store and decisions a commit changes.
        view: its projection, rebuilt after a decision.
    """

    def __init__(self, state: SessionState, view: EngineView) -> None:
        self.state = state
        self.view = view
        self._recorded_before = 0  # policy ``recorded``: predicted tokens before its compaction
        self._recorded_dropped: list[Message] = []  # and the messages it dropped

    def retrieve(self, artifact: str) -> str:
        """``ContextEngine.retrieve`` (documented there)."""
        if artifact.startswith("message:"):
            wanted = artifact.removeprefix("message:")
            for msg in reversed(self.state.history):
                if msg.id == wanted:
                    return msg.text()
            raise KeyError(f"no message {wanted!r} in this session")
        content, _ = self.state.store.get_artifact(self.state.session_id, artifact)
        return content

    def latest_request_verbatim(self) -> bool | str:
        """``ContextEngine.latest_request_verbatim`` (documented there)."""
        found = self.state.compactor.latest_request
        if found is None:
            return True
        latest = found[0]
        if request_kept(latest, self.view.messages):
            return True
        texts = [m.text() for m in self.view.messages if m.role == "user"]
        head = latest[:200]
        if any(head in t and f"message {found[1]} of the transcript" in t for t in texts):
            return "partial"
        return False

    def retrieve_part(self, artifact: str) -> Image | Document:
        """``ContextEngine.retrieve_part`` (documented there)."""
        content, meta = self.state.store.get_artifact(self.state.session_id, artifact)
        fields = {k: v for k, v in meta.items() if k not in ("layer", "call_id", "message_id", "part")}
        kind = fields.get("type")
        if kind not in ("image", "document"):
            raise ValueError(f"artifact {artifact!r} is not an image or a document")
        part: Image | Document = msgspec.convert(fields | {"data": content}, Image | Document)
        return part

    def store_replacements(self, d: Replacements) -> None:
        """Write a decision's artifacts and entry; raises ``StoreError`` before any state changes."""
        self._store_user_parts(d)
        self._store_call_inputs(d)
        for key in d.results:
            msg_id, call_id = key.split("\x00", 1)
            result = self._find_result_block(msg_id, call_id)
            if result is None:
                continue
            parts = [(k, p) for k, p in enumerate(result.content, 1) if isinstance(p, Image | Document)]
            text = result_text(result)
            if text or not parts:
                self.state.store.put_artifact(
                    self.state.session_id,
                    artifact_id(call_id),
                    text,
                    {"layer": d.event.layer, "call_id": call_id},
                )
            for k, part in parts:  # images and documents whole, each under its own id
                meta: dict[str, Any] = {"layer": d.event.layer, "call_id": call_id, "part": k}
                meta |= msgspec.to_builtins(part)
                content = meta.pop("data", "")
                self.state.store.put_artifact(
                    self.state.session_id, part_artifact_id(call_id, k), content, meta
                )
        entry: dict[str, Any] = {
            "layer": d.event.layer,
            "call_ids": sorted(k.split("\x00", 1)[1] for k in d.results),
        }
        keys = [k.split("\x00", 1) for k in d.parts]
        if media := sorted(aid for _, aid in keys if aid != REQUEST_TEXT):
            entry["user_parts"] = media
        if cut := sorted(msg_id for msg_id, aid in keys if aid == REQUEST_TEXT):
            entry["request_cut"] = cut  # the user's text cut in place (the guard's fit_request)
        if d.calls:
            entry["call_inputs_cut"] = sorted(c.id for c in d.calls.values())  # the guard's fit_calls
        self.state.store.append(
            self.state.session_id, "clear" if d.event.layer != "tool_result_budget" else "offload", entry
        )

    def _store_call_inputs(self, d: Replacements) -> None:
        """Keep the whole input of each tool call whose input ``d.calls`` cuts in place, as
        artifact ``tool-call/<call id>``: each string value under its key, the rest as JSON (a raw
        string input as it is)."""
        for key, cut in d.calls.items():
            msg_id = key.split("\x00", 1)[0]
            call = self._find_call_block(msg_id, cut.id)
            if call is None:
                continue
            text = (
                call.input  # a raw input (Codex's apply_patch): the text itself
                if isinstance(call.input, str)
                else "\n\n".join(
                    f"{k}:\n{v}" if isinstance(v, str) else f"{k}: {msgspec.json.encode(v).decode()}"
                    for k, v in call.input.items()
                )
            )
            meta = {"layer": d.event.layer, "call_id": cut.id, "message_id": msg_id, "tool": call.name}
            self.state.store.put_artifact(self.state.session_id, call_artifact_id(cut.id), text, meta)

    def _find_call_block(self, message_id: str, call_id: str) -> ToolCall | None:
        for msg in reversed(self.state.history):
            if msg.id == message_id:
                return next((c for c in msg.tool_calls if c.id == call_id), None)
        return None

    def _store_user_parts(self, d: Replacements) -> None:
        """Write the images and documents of user messages that ``d.parts`` replaces, each whole
        under its ``user-media/<message id>/part-<k>`` id (meta: layer, message id, part index
        and the part's fields but its data)."""
        for key in d.parts:
            msg_id, aid = key.split("\x00", 1)
            if aid == REQUEST_TEXT:
                continue  # a text cut in place: the whole of it stays in the history
            for k, part in self._find_user_part(msg_id, aid):
                self._put_user_part(aid, msg_id, k, part, d.event.layer)

    def _put_user_part(self, aid: str, msg_id: str, k: int, part: Image | Document, layer: str) -> None:
        """Keep image or document ``k`` of user message ``msg_id`` whole as artifact ``aid``
        (meta: layer, message id, part index and the part's fields but its data)."""
        meta: dict[str, Any] = {"layer": layer, "message_id": msg_id, "part": k}
        meta |= msgspec.to_builtins(part)
        content = meta.pop("data", "")
        self.state.store.put_artifact(self.state.session_id, aid, content, meta)

    def _keep_summarized_media(self, cut: Cut) -> None:
        """The images and documents a user attached to the messages ``cut`` summarizes: a
        summary keeps their words, not them, so each is kept whole as its artifact
        (``user-media/<message id>/part-<k>``) and named, with how to get it back, in one message
        after the cut's prefix (they were left out with no handle)."""
        lines: list[str] = []
        for m in cut.summarized:
            for k, aid, part in user_parts(m):
                self._put_user_part(aid, m.id, k, part, cut.event.layer)
                kind = "image" if isinstance(part, Image) else "document"
                title = f' "{part.title}"' if isinstance(part, Document) and part.title else ""
                lines.append(
                    f"- {kind}{title} ({part.media_type or 'unknown type'}) of message {m.id}: artifact {aid}"
                )
        if lines:
            text = (
                "Attachments of the summarized messages, kept whole (read one with retrieve(id=...)):\n"
                + "\n".join(lines)
            )
            cut.prefix.append(
                Message(role="user", blocks=(Text(text),), id="summarized-media", origin="restore")
            )
            cut.event.details["media_kept"] = len(lines)

    def _find_user_part(self, message_id: str, artifact: str) -> list[tuple[int, Image | Document]]:
        """[(index, part)] of the newest history message ``message_id`` holding user part
        ``artifact``; [] when none does."""
        for msg in reversed(self.state.history):
            if msg.id == message_id:
                found = [(k, p) for k, aid, p in user_parts(msg) if aid == artifact]
                if found:
                    return found
        return []

    def apply_replacements(self, d: Replacements) -> None:
        """Show ``d``'s replacements from now on (frozen: the same history, the same bytes)."""
        self.state.replacements.update(d.results)
        self.state.replacements.update(d.parts)
        self.state.replacements.update(d.calls)

    def commit_replacements(self, d: Replacements) -> LayerEvent:
        before = self.view.predict()
        self.store_replacements(d)
        originals = [  # the cleared results, as tool results (no user request among them)
            Message("user", (ToolResult(key.split("\x00", 1)[1], (Text(text),)),), f"original:{key}")
            for key in d.results
            if (text := self._find_result(*key.split("\x00", 1))) is not None
        ]
        self.apply_replacements(d)
        self.view.rebuild()
        content_left(self.state)  # content left the context: re-reads must show it
        d.event.tokens_before = before
        d.event.tokens_after = self.view.predict()
        if d.event.layer != "tool_result_budget":  # a clearing is a compaction: its quality figures
            self.add_quality(d.event, originals)
        return d.event

    def add_quality(self, event: LayerEvent, removed: list[Message]) -> None:
        """Quality figures of a compaction that made no summary (clearing, the overflow guard):
        how much it saved, and which identifiers of what it removed the projection still shows
        (placeholders listing them, the tool calls, later messages)."""
        shown = "\n".join(
            [m.text() for m in self.view.messages]
            + [json.dumps(c.input, ensure_ascii=False) for m in self.view.messages for c in m.tool_calls]
        )
        q = quality(
            tokens_before=event.tokens_before,
            tokens_after=event.tokens_after,
            span=removed,
            summary=shown,
            kept=self.view.messages,
        )
        event.details["quality"] = msgspec.to_builtins(q) | {
            "latest_request_verbatim": self.latest_request_verbatim()
        }

    def _find_result(self, message_id: str, call_id: str) -> str | None:
        r = self._find_result_block(message_id, call_id)
        return result_text(r) if r is not None else None

    def _find_result_block(self, message_id: str, call_id: str) -> ToolResult | None:
        for msg in reversed(self.state.history):
            if msg.id != message_id:
                continue
            for r in msg.tool_results:
                if r.call_id == call_id:
                    return r
        return None

    def commit_cut(self, cut: Cut) -> LayerEvent:
        before = self.view.predict()
        self._keep_summarized_media(cut)
        src = self.view.src[cut.keep_from] if cut.keep_from < len(self.view.src) else len(self.state.history)
        if src < 0:
            src = next((s for s in self.view.src[cut.keep_from :] if s >= 0), len(self.state.history))
        self.state.store.append(
            self.state.session_id,
            "compaction",
            {
                "layer": cut.event.layer,
                "kept_from": src,
                "prefix": [msgspec.to_builtins(m) for m in cut.prefix],
            },
        )
        self.state.kept_from = src
        self.state.prefix = list(cut.prefix)
        self.view.rebuild()
        self.state.ledger.reset()  # usage from before a compaction no longer applies
        content_left(self.state)
        cut.event.tokens_before = before
        cut.event.tokens_after = self.view.predict()
        q = cut.event.details.get("quality")
        if q is None:
            self.add_quality(cut.event, cut.summarized)
        elif isinstance(q, dict):
            q.update(
                tokens_before=before,
                tokens_after=cut.event.tokens_after,
                tokens_saved=before - cut.event.tokens_after,
                compression_ratio=round(cut.event.tokens_after / before, 4) if before else 1.0,
                latest_request_verbatim=self.latest_request_verbatim(),
            )
        return cut.event

    def recorded_cut(self, idx: int) -> None:
        """Policy ``recorded``: the recorded session compacted here; the projection restarts at
        the compaction's first message (its summary and restore attachments)."""
        self._recorded_before = self.view.predict()
        self._recorded_dropped = [m for m in self.view.messages if m.origin in ("message", "attachment")]
        self.state.kept_from = idx
        self.state.prefix = []
        self.view.rebuild()
        self.state.ledger.reset()

    def recorded_event(self, summary: Message) -> LayerEvent:
        """The summarization call the recorded session made (the transcript does not log it):
        priced as a cache read of ``preTokens`` plus the summary as output."""
        rec = self.state.recorded.get(summary.compaction or 0)
        before = self._recorded_before
        pre = rec.pre_tokens if rec and rec.pre_tokens else before
        out = self.view.count(summary)
        return LayerEvent(
            layer="recorded_compaction",
            reason=f"recorded {rec.trigger if rec else 'auto'} compaction",
            tokens_before=before,
            tokens_after=self.view.predict(),
            llm_calls=1,
            llm_input_tokens=pre,
            llm_output_tokens=out,
            llm_cost_usd=self.state.model.cost_usd(cache_read_tokens=pre, output_tokens=out),
            details={
                "pre_tokens": pre,
                "post_tokens": rec.post_tokens if rec else None,
                "quality": msgspec.to_builtins(
                    quality(
                        tokens_before=before,
                        tokens_after=self.view.predict(),
                        span=self._recorded_dropped,
                        summary=summary.text(),
                        kept=[],
                    )
                )
                | {"latest_request_verbatim": self.latest_request_verbatim()},
            },
        )
