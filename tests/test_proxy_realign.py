"""A client that moves earlier messages (aider) stays one session: the proxy realigns it.

aider's requests (measured, aider 0.86.2): system prompt; repo map user + "Ok" assistant; the
conversation; the files message (the files added to the chat) and its "Ok" reply just before the
newest user message; its SEARCH/REPLACE reminder, a ``system`` message, always last. No request
extends the previous one as a prefix. Here, Chat Completions requests of that shape through the
proxy (memory-only and with ``--store``), at a small window so that the session compacts.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from ctxengine.proxy import ProxyConfig, create_app
from gateway_servers import pg_schema_url
from proxy_servers import Upstream, serve
from test_proxy import Rig, log_lines

pytestmark = [
    pytest.mark.usefixtures("clean_llm_env"),
    # windows under 32,000 tokens on purpose (compaction within a few requests)
    pytest.mark.filterwarnings("ignore::ctxengine.models.registry.WindowWarning"),
]

KEY = "sk-aider-user"
TURNS = 9
SYSTEM = {"role": "system", "content": "Act as an expert software developer. " * 20}
REMINDER = {"role": "system", "content": "# *SEARCH/REPLACE block* Rules:\n" + "Every block must ... " * 40}
REPO_MAP = [
    {
        "role": "user",
        "content": "Here are summaries of some files present in my git repository.\n"
        + "def f(): ...\n" * 150,
    },
    {"role": "assistant", "content": "Ok, I won't try and edit those files without asking first."},
]
FILES = [
    {
        "role": "user",
        "content": "I have *added these files to the chat*\n\nsrc/app.py\n" + "x = compute(1)\n" * 250,
    },
    {"role": "assistant", "content": "Ok, any changes I propose will be to those files."},
]


def reply(t: int) -> str:
    body = "\n".join(f"    value_{t}_{i} = compute({i * 7919 % 10007})" for i in range(150))
    block = f"<<<<<<< SEARCH\n=======\n{body}\n>>>>>>> REPLACE"
    return f"Here is the change {t}.\n\nsrc/app.py\n```python\n{block}\n```"


def files_pair(version: int) -> list[dict[str, Any]]:
    """aider's files message once the file was edited ``version`` times (its text is the chat
    files' current contents), and its fixed reply."""
    if version == 0:
        return FILES
    text = "I have *added these files to the chat*\n\nsrc/app.py\n" + f"x = edited({version})\n" * 250
    return [{"role": "user", "content": text}, FILES[1]]


def aider_request(t: int, edits: bool = False) -> list[dict[str, Any]]:
    """aider's request of turn ``t``: the turns before it done, the files pair moved before the
    newest prompt (with ``edits``, rewritten: each turn's edit applied), the reminder last."""
    done: list[dict[str, Any]] = []
    for k in range(t):
        done += [
            {"role": "user", "content": f"Step {k}: change the parser."},
            {"role": "assistant", "content": reply(k)},
            {"role": "user", "content": "I updated the files."},
            {"role": "assistant", "content": "Ok."},
        ]
    return [
        SYSTEM,
        *REPO_MAP,
        *done,
        *(files_pair(t) if edits else FILES),
        {"role": "user", "content": f"Step {t}: change the parser."},
        REMINDER,
    ]


def _rig(tmp_path: Path, store: bool | str) -> Iterator[Rig]:
    """A proxy on a loopback upstream: memory-only (False), ``--store DIR`` (True) or the store at
    a URL (PostgreSQL)."""
    up = Upstream()
    where = tmp_path / "store" if store is True else store or None
    with serve(up.app()) as up_url:
        cfg = ProxyConfig(openai_upstream=up_url + "/v1", window=16_000, store=where)
        app = create_app(cfg)
        with serve(app) as base:
            yield Rig(up, base, app.state.proxy)


@pytest.fixture(params=["memory", "store", "postgres"])
def rig(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Rig]:
    if request.param == "postgres":
        with pg_schema_url() as url:
            yield from _rig(tmp_path, url)
    else:
        yield from _rig(tmp_path, request.param == "store")


def send(rig: Rig, messages: list[dict[str, Any]], key: str = KEY) -> dict[str, Any]:
    r = httpx.post(
        rig.base + "/v1/chat/completions",
        json={"model": "gpt-4o", "messages": messages},
        headers={"authorization": f"Bearer {key}"},
        timeout=30,
    )
    assert r.status_code == 200, r.text
    rig.settle()
    body = rig.upstream.seen[-1].body
    assert rig.upstream.seen[-1].problems == []
    return {k: v for k, v in body.items() if k != "prompt_cache_key"}  # the session's id


def in_client_order(sent: list[dict[str, Any]], request: list[dict[str, Any]]) -> bool:
    """Whether the client's messages ``sent`` holds (those sent unchanged) are in the request's order."""
    k = 0
    for m in sent:
        if m in request:
            if m not in request[k:]:
                return False
            k = request.index(m, k) + 1
    return True


def compacted(body: dict[str, Any]) -> bool:
    return any("ran out of context" in str(m.get("content")) for m in body["messages"])


def test_aider_shaped_requests_are_one_session(rig: Rig, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="ctxengine.proxy")
    same = 0
    for t in range(TURNS):
        request = aider_request(t)
        sent = send(rig, request)
        fresh = send(rig, request, key=f"sk-fresh-{t}")  # a new session for this request alone
        assert sent["messages"][-2:] == request[-2:]  # the newest prompt, the reminder: in place
        assert in_client_order(sent["messages"], request)
        if not compacted(sent) and not compacted(fresh):
            assert sent == fresh  # where no compaction differs: what a fresh session would send
            same += 1
    sessions = rig.sessions()["sessions"]
    ours = [s for s in sessions if s["messages"] == len(aider_request(TURNS - 1)) - 1 and s["calls"] == TURNS]
    assert len(ours) == 1, sessions
    (session,) = ours
    assert session["branch_of"] is None and session["compactions"] >= 1
    assert len(sessions) == 1 + TURNS  # the conversation's, and one fresh one per request
    assert same >= 4
    lines = log_lines(caplog, "realigned:", TURNS - 1)
    assert all(
        "realigned: 4 messages moved" in line or "realigned: 3 messages moved" in line for line in lines
    )


def test_aider_files_message_rewritten_after_each_edit_is_one_session(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    """After each edit aider's files message holds the file's new text under the same "Ok"
    reply: the old text leaves the view, the new one is ingested where it stands, one session."""
    caplog.set_level(logging.INFO, logger="ctxengine.proxy")
    same = 0
    for t in range(TURNS):
        request = aider_request(t, edits=True)
        sent = send(rig, request)
        fresh = send(rig, request, key=f"sk-fresh-{t}")
        assert sent["messages"][-2:] == request[-2:]  # the newest prompt, the reminder: in place
        texts = [str(m.get("content")) for m in sent["messages"]]
        assert not any(files_pair(v)[0]["content"] in x for v in range(t) for x in texts)  # old texts left
        if not compacted(sent):
            assert sent["messages"][-4:-2] == request[-4:-2]  # the new files pair, where it stands
        assert in_client_order(sent["messages"], request)
        if not compacted(sent) and not compacted(fresh):
            assert sent == fresh
            same += 1
    sessions = rig.sessions()["sessions"]
    ours = [s for s in sessions if s["calls"] == TURNS]
    assert len(ours) == 1, sessions
    assert ours[0]["branch_of"] is None and ours[0]["compactions"] >= 1
    assert ours[0]["messages"] == len(aider_request(TURNS - 1)) - 1
    assert len(sessions) == 1 + TURNS and all(s["branch_of"] is None for s in sessions)
    assert same >= 4
    assert len(log_lines(caplog, "realigned:", TURNS - 1)) == TURNS - 1


def repo_map_pair(version: int) -> list[dict[str, Any]]:
    """aider's repo map (its first message) once the repository changed ``version`` times, and
    its fixed reply."""
    if version == 0:
        return REPO_MAP
    text = REPO_MAP[0]["content"].replace("def f()", f"def g{version}()")
    return [{"role": "user", "content": text}, REPO_MAP[1]]


def test_aider_repo_map_rewritten_is_one_session(rig: Rig, caplog: pytest.LogCaptureFixture) -> None:
    """When the repository changes aider rewrites its first message (the repo map) under the same
    "Ok": no leading message is shared, the newest session of the chain root (same key, same
    system prompt) is realigned from its first message. What the session had compacted and the
    request holds unchanged where it stood stays behind its summary (not shown twice)."""
    caplog.set_level(logging.INFO, logger="ctxengine.proxy")
    before: list[dict[str, Any]] = []
    previous: dict[str, Any] = {}
    hidden_checked = 0
    for t in range(TURNS):
        request = aider_request(t, edits=True)
        request[1:3] = repo_map_pair(t // 3)  # the repository changed at turns 3 and 6
        sent = send(rig, request)
        assert sent["messages"][-2:] == request[-2:]  # the newest prompt, the reminder: in place
        assert in_client_order(sent["messages"], request)
        if t % 3 == 0 and t and compacted(previous):  # rewritten; the old session had compacted
            stayed = [m for k, m in enumerate(request) if k < len(before) and before[k] == m]
            once = [m for m in stayed if m["role"] == "assistant" and request.count(m) == 1]  # a reply
            hidden = [m for m in once if m not in previous["messages"]]
            assert hidden and not any(m in sent["messages"] for m in hidden)
            hidden_checked += 1
        before, previous = request, sent
    assert hidden_checked >= 1
    sessions = rig.sessions()["sessions"]
    assert len(sessions) == 1 and sessions[0]["calls"] == TURNS and sessions[0]["branch_of"] is None
    assert len(log_lines(caplog, "realigned:", TURNS - 1)) == TURNS - 1
    for t in range(TURNS):  # the same conversation with a repo map that never changes
        send(rig, aider_request(t, edits=True), key="sk-aider-still-repository")
    plain = [s for s in rig.sessions()["sessions"] if s["id"] != sessions[0]["id"]]
    assert len(plain) == 1 and 1 <= sessions[0]["compactions"] <= plain[0]["compactions"], (sessions, plain)
    sessions = [s for s in rig.sessions()["sessions"] if s["id"] == sessions[0]["id"]]
    # a one-shot request with the same key and system prompt is another conversation: a new
    # session, not a branch of the first, which it leaves as it was
    send(rig, [SYSTEM, {"role": "user", "content": "Summarize this chat."}])
    after = {s["id"]: s for s in rig.sessions()["sessions"]}
    assert len(after) == 3 and all(s["branch_of"] is None for s in after.values())
    assert after[sessions[0]["id"]]["calls"] == TURNS


def test_a_changed_reply_under_a_rewritten_files_message_branches(rig: Rig) -> None:
    for t in range(2):
        send(rig, aider_request(t, edits=True))
    request = aider_request(2, edits=True)
    request[-3] = {"role": "assistant", "content": "Ok, I will edit those files."}  # the files reply
    send(rig, request)
    sessions = rig.sessions()["sessions"]
    assert len(sessions) == 2 and sessions[1]["branch_of"] == sessions[0]["id"]


def test_a_rewind_still_branches(rig: Rig) -> None:
    for t in range(3):
        send(rig, aider_request(t))
    rewound = aider_request(2)
    rewound[-7] = {"role": "assistant", "content": "A regenerated answer."}  # turn 1's reply
    send(rig, rewound)
    sessions = rig.sessions()["sessions"]
    assert len(sessions) == 2 and sessions[1]["branch_of"] == sessions[0]["id"]
    assert sessions[0]["calls"] == 3


@pytest.mark.parametrize("where", ["store", "postgres"])
def test_a_restarted_node_replays_a_realignment_from_the_store(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, where: str
) -> None:
    """A node that must replay the session's turns from a request whose messages a realignment
    moved since replays them from the store's entries (``stored_replay``): the same session goes
    on, and the node sends what a node that never restarted sends."""
    caplog.set_level(logging.INFO, logger="ctxengine.proxy")
    head = [SYSTEM, *REPO_MAP]
    a = {"role": "user", "content": "first " * 300}
    b = {"role": "assistant", "content": "second " * 300}
    c = {"role": "user", "content": "third"}
    first, moved = [*head, a, b, c], [*head, c, {"role": "assistant", "content": "fourth"}, a, b]
    later = [*moved, {"role": "assistant", "content": "fifth"}, {"role": "user", "content": "sixth"}]
    with contextlib.ExitStack() as stack:
        url: str | bool = stack.enter_context(pg_schema_url()) if where == "postgres" else True
        gen = _rig(tmp_path / "restarted", store=url)
        rig = next(gen)
        send(rig, first)
        send(rig, moved)  # realigned
        (s,) = rig.sessions()["sessions"]
        assert s["calls"] == 2 and s["branch_of"] is None
        gen.close()
        gen = _rig(tmp_path / "restarted", store=url)  # a restart on the same store: nothing cached
        rig = next(gen)
        stack.callback(gen.close)
        sent = send(rig, later)  # continues the stored chain; its turn 1 moved turn 0's messages
        (s,) = rig.sessions()["sessions"]
        assert s["calls"] == 3 and s["branch_of"] is None
        assert not log_lines(caplog, "cannot be replayed", 0)
        control_gen = _rig(tmp_path / "control", store=True)  # one node that served all three
        control = next(control_gen)
        stack.callback(control_gen.close)
        for request in (first, moved):
            send(control, request)
        assert send(control, later) == sent


@pytest.mark.parametrize("where", ["store", "postgres"])
def test_aider_across_a_restart_stays_one_session(tmp_path: Path, where: str) -> None:
    """Every aider request realigns its session (the files pair moves, rewritten after each
    edit; the repo map rewritten once). A restarted node, which never saw the session, aligns the
    request with the client messages' digests the store keeps and replays the turns from the
    store's entries: one session, and each request sends what a node that never restarted sends,
    compactions included."""

    def request(t: int) -> list[dict[str, Any]]:
        messages = aider_request(t, edits=True)
        messages[1:3] = repo_map_pair(t // 6)  # the repository changed at turn 6
        return messages

    with contextlib.ExitStack() as stack:
        url: str | bool = stack.enter_context(pg_schema_url()) if where == "postgres" else True
        control_gen = _rig(tmp_path / "control", store=True)  # one node that served every request
        control = next(control_gen)
        stack.callback(control_gen.close)
        expected = [send(control, request(t)) for t in range(TURNS)]
        restart_at = (6, 8)
        sent, gen = [], None
        for t in range(TURNS):
            if gen is None or t in restart_at:
                if gen is not None:
                    gen.close()
                gen = _rig(tmp_path / "restarted", store=url)  # nothing cached
                rig = next(gen)
            sent.append(send(rig, request(t)))
        sessions = rig.sessions()["sessions"]
        assert gen is not None
        gen.close()
    assert len(sessions) == 1 and sessions[0]["calls"] == TURNS and sessions[0]["branch_of"] is None
    assert any(compacted(b) for b in expected[: restart_at[0]])  # the replay has a compaction to redo
    assert sent == expected


def test_a_realigned_turn_replays_on_an_engine_at_the_turn_before() -> None:
    """``replay_turn`` of a realigned turn (``TurnRecord.realigned``) leaves an engine that was at
    the turn before exactly where the serving node's is (the view, the figures it keeps)."""
    from ctxengine.proxy.apply import prepare, replay_turn
    from ctxengine.proxy.index import TurnRecord
    from ctxengine.proxy.sessions import ProxySession
    from ctxengine.proxy.wire_openai import OpenAIWire

    proxy = create_app(ProxyConfig(window=16_000)).state.proxy
    wire = OpenAIWire()

    def session(sid: str) -> ProxySession:
        return ProxySession(sid, "openai", "gpt-4o", proxy._engine(sid, "gpt-4o"), wire.reader())

    served, replayed = session("a"), session("b")
    first, second = (wire.parse({"model": "gpt-4o", "messages": aider_request(t)}) for t in (0, 1))
    for s in (served, replayed):
        prepare(s, wire, first)
    served.realign = 2  # the repo map pair is shared; the files pair, prompt and reminder moved
    done = prepare(served, wire, second)
    assert done.realigned == 2 and done.moved == 4
    record = TurnRecord(1, len(second.conversation), done.budget, done.at, None, None, done.realigned)
    replay_turn(replayed, wire, second, record)
    view = [(m.id, m.blocks) for m in served.engine.view.messages]
    assert [(m.id, m.blocks) for m in replayed.engine.view.messages] == view
    assert [m["content"] for m in second.conversation[-4:]] == [
        m.blocks[0].text
        for m in served.engine.view.messages[-4:]  # type: ignore[union-attr]
    ]
    added = sum(served.engine.counter.count_message(m) for m in done.new)  # by ``finish``
    assert (replayed.ingested, replayed.history_tokens) == (served.ingested, served.history_tokens + added)


def test_a_client_clearing_an_old_tool_result_realigns_its_session(tmp_path: Path) -> None:
    """Claude Code clears old tool results itself (a user message of results rewritten, the
    assistant message after it unchanged): the rewrite rule realigns the session instead of
    starting a branch; what goes upstream is the client's cleared text, valid, in its order."""
    import copy

    from test_proxy import _rig as anthropic_rig
    from test_proxy import _turns

    for r in anthropic_rig(tmp_path, window=64_000):
        msgs = _turns(6, size=2_000)
        client = r.anthropic()
        client.messages.create(model="claude-sonnet-4-6", max_tokens=64, messages=msgs)
        cleared = copy.deepcopy(msgs) + _turns(7, size=2_000)[-2:]
        cleared[2]["content"][0]["content"] = "[Old tool result content cleared]"  # round 0's result
        client.messages.create(model="claude-sonnet-4-6", max_tokens=64, messages=cleared)
        seen = r.upstream.seen[-1]
        assert seen.problems == []
        body = str(seen.body["messages"])
        assert "[Old tool result content cleared]" in body and "line 0.7 " not in body
        assert "line 6.3 " in body  # the new round
        sessions = r.sessions()["sessions"]
        assert len(sessions) == 1 and sessions[0]["calls"] == 2, sessions
