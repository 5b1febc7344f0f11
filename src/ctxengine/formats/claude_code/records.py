"""Claude Code records -> messages: one handler per record type.

``Builder.add`` takes the records of one session in file order: ``assistant`` records are grouped
by ``message.id`` into one message per model call (blocks deduped, the call's last non-zero usage
kept); ``user`` records holding tool results are merged into the results message of the latest
assistant message, other user records and ``attachment`` records are held back while its calls
await their results; records re-logged by a resumed session are dropped (``duplicate:<type>``);
``system``/``compact_boundary`` opens a recorded compaction (``tree``); other types are counted in
``skipped``. See the package docstring for the rules.
"""

from __future__ import annotations

from typing import Any

from ctxengine.formats import usage_problem
from ctxengine.formats.claude_code.attachments import render_attachment
from ctxengine.formats.claude_code.blocks import Draft, block_key, content_blocks, timestamp
from ctxengine.formats.claude_code.builder import SYNTHETIC_MODEL, BuilderBase
from ctxengine.formats.claude_code.tree import boundary, link, open_compaction, record_id
from ctxengine.formats.claude_code.usage import anthropic_usage
from ctxengine.messages.model import Block, ToolCall, ToolResult


class Builder(BuilderBase):
    """Reads the records of one session into its drafts; ``finish`` makes the ``Session``."""

    def add(self, rec: dict[str, Any], lineno: int) -> None:
        kind = rec.get("type")
        if not isinstance(kind, str):  # every Claude Code record names its type: a damaged one
            self.malformed(lineno, f"record without a string 'type' ({type(kind).__name__})")
            return
        if kind in ("user", "assistant", "attachment"):
            uuid = rec.get("uuid")
            if isinstance(uuid, str) and uuid:
                if uuid in self.uuids:
                    self.skipped[f"duplicate:{kind}"] += 1
                    return
                self.uuids.add(uuid)
            self._note_session(rec)
        if kind == "assistant":
            self._assistant(rec, lineno)
        elif kind == "user":
            self._user(rec, lineno)
        elif kind == "attachment":
            self._attachment(rec, lineno)
        elif kind == "system":
            subtype = rec.get("subtype")
            if subtype == "compact_boundary":
                boundary(self, rec)
            else:
                self.skipped[f"system:{subtype}"] += 1
        else:
            self.skipped[kind] += 1
            self._note_other(kind, rec)

    def _assistant(self, rec: dict[str, Any], lineno: int) -> None:
        msg = rec.get("message")
        if not isinstance(msg, dict) or not isinstance(msg.get("content"), list | str):
            self.malformed(lineno, "assistant record without a message.content")
            return
        ts = timestamp(rec.get("timestamp"))
        mid = msg.get("id")
        if not isinstance(mid, str) or not mid:
            mid = record_id(rec, lineno)
        draft = self.assistant_by_id.get(mid)
        is_new = draft is None
        if draft is None:
            draft = Draft("assistant", self.unique_id(mid), ts)
            self.assistant_by_id[mid] = draft
        link(draft, rec)
        model = msg.get("model")
        if isinstance(model, str) and model:
            draft.model = model
        if model == SYNTHETIC_MODEL:
            draft.meta["synthetic"] = True
        if rec.get("isApiErrorMessage") is True:
            draft.meta["api_error"] = True
        if self.restore_k is not None:
            self.restore_k = None
        added = 0
        for block in content_blocks(msg["content"], draft):
            if isinstance(block, ToolCall):
                if not block.id or self.call_owner.setdefault(block.id, draft.id) != draft.id:
                    # no id, or another message's: its result cannot be paired (said, not lost quietly)
                    why = f"tool_use id {block.id!r} of an earlier message" if block.id else "no tool_use id"
                    self.malformed(lineno, f"{why}: the {block.name or 'tool'} call is left out", kept=True)
                    continue
                if block.id in self.call_ids:
                    continue  # the same message written again (one line per content block)
                self.call_ids.add(block.id)
                self.call_names[block.id] = block.name
                if draft is self.latest_assistant:
                    self.pending_calls.add(block.id)
            else:
                key = block_key(block)
                if key in draft.keys:
                    continue
                draft.keys.add(key)
            draft.blocks.append(block)
            added += 1
        raw_usage = msg.get("usage")
        if raw_usage is not None and not isinstance(raw_usage, dict):
            why = f"usage is a {type(raw_usage).__name__}, not an object; usage left out"
            self.malformed(lineno, why, kept=True)
        if not draft.meta.get("synthetic"):
            usage = anthropic_usage(msg.get("usage"))
            if (problem := usage_problem(usage)) is not None:
                self.malformed(lineno, problem, kept=True)
                usage = None
            if usage is not None and not usage.is_zero:
                draft.usage = usage
        if is_new:
            # a new model call: results of the previous one are complete
            self.pending_calls = {b.id for b in draft.blocks if isinstance(b, ToolCall)}
            self.open_results = None
            self.latest_assistant = draft
            self.emit(draft)
        elif added == 0:
            self.skipped["duplicate:assistant"] += 1

    def _user(self, rec: dict[str, Any], lineno: int) -> None:
        msg = rec.get("message")
        if not isinstance(msg, dict) or not isinstance(msg.get("content"), list | str):
            self.malformed(lineno, "user record without a message.content")
            return
        ts = timestamp(rec.get("timestamp"))
        uuid = record_id(rec, lineno)
        probe = Draft("user", "", ts)
        blocks = content_blocks(msg["content"], probe)
        results: list[Block] = []
        others: list[Block] = []
        for block in blocks:
            if isinstance(block, ToolResult):
                if block.call_id in self.result_ids:
                    continue
                self.result_ids.add(block.call_id)
                results.append(block)
            else:
                others.append(block)
        if not results:
            others = self._new_user_blocks(ts, others)
        if not results and not others:
            self.skipped["duplicate:user"] += 1
            return
        if results:
            self._merge_results(rec, ts, uuid, probe, results, others)
        else:
            self._user_message(rec, ts, uuid, probe, others)

    def _merge_results(
        self,
        rec: dict[str, Any],
        ts: float | None,
        uuid: str,
        probe: Draft,
        results: list[Block],
        others: list[Block],
    ) -> None:
        """Add a record's tool results (and its other blocks) to the results message of the
        latest assistant message; place the held-back user messages once no call is pending."""
        for block in others:  # record user content of result records too
            if ts is not None:
                self.user_keys.add((ts, block_key(block)))
        self.restore_k = None
        target = self.open_results
        if target is None:
            target = Draft("user", self.unique_id(uuid), ts)
            self.emit(target)
            self.open_results = target
        target.meta.update(probe.meta)
        link(target, rec)
        target.blocks.extend(results)
        target.blocks.extend(others)
        for block in results:
            if isinstance(block, ToolResult):
                self.pending_calls.discard(block.call_id)
        if not self.pending_calls:
            self.flush_deferred()

    def _user_message(
        self, rec: dict[str, Any], ts: float | None, uuid: str, probe: Draft, others: list[Block]
    ) -> None:
        """A user record without tool results: a prompt, a meta record or a compaction's
        summary / restored context."""
        draft = Draft("user", self.unique_id(uuid), ts)
        draft.meta.update(probe.meta)
        link(draft, rec)
        draft.blocks.extend(others)
        is_meta = rec.get("isMeta") is True
        if is_meta:
            draft.meta["is_meta"] = True
        if rec.get("isCompactSummary") is True:
            if self.restore_k is None:
                open_compaction(self, ts, None, "unknown")
            draft.origin = "compact_summary"
            draft.compaction = self.restore_k
        elif self.restore_k is not None and is_meta:
            draft.origin = "compact_restore"
            draft.compaction = self.restore_k
        else:
            self.restore_k = None
        self.emit_user(draft)

    def _new_user_blocks(self, ts: float | None, blocks: list[Block]) -> list[Block]:
        """Drop blocks already seen at the same timestamp (re-logged after a resume)."""
        if ts is None:
            return blocks
        keys = [(ts, block_key(b)) for b in blocks]
        fresh = [b for b, k in zip(blocks, keys, strict=True) if k not in self.user_keys]
        self.user_keys.update(keys)
        return fresh

    def _attachment(self, rec: dict[str, Any], lineno: int) -> None:
        att = rec.get("attachment")
        if not isinstance(att, dict):
            self.malformed(lineno, "attachment record without an attachment object")
            return
        att_type = att.get("type") if isinstance(att.get("type"), str) else "unknown"
        blocks = render_attachment(att)
        if not blocks:
            self.skipped[f"attachment:{att_type}"] += 1
            return
        ts = timestamp(rec.get("timestamp"))
        blocks = self._new_user_blocks(ts, blocks)
        if not blocks:
            self.skipped["duplicate:attachment"] += 1
            return
        uuid = record_id(rec, lineno)
        draft = Draft("user", self.unique_id(uuid), ts, origin="attachment")
        draft.meta["attachment_type"] = att_type
        link(draft, rec)
        draft.blocks.extend(blocks)
        if self.restore_k is not None:
            draft.origin = "compact_restore"
            draft.compaction = self.restore_k
        self.emit_user(draft)
