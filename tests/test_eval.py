"""``ctxengine eval``: LLM-judged probes at every compaction (issue 8, section 6).

The real ``anthropic`` / ``openai`` SDK clients talk to the scripted loopback server
(``tests/llm_server.py``); the judge's replies come from ``judge_reply``, which answers the probes
and returns a JSON grade to a grading prompt. The session is the smallest real Claude Code file
(the subagent sidechain, 19 calls) at a 32,000-token window, where both ``default`` and
``claude-code`` compact within the first few calls; ``--max-compactions 2`` keeps each run to six
judge calls per policy.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from conftest import CLAUDE_CODE
from ctxengine.cli.commands import app
from ctxengine.eval.probes import PROBES, GradeError, Judge, evaluate_policy, parse_grade
from ctxengine.formats import load
from ctxengine.formats.validate import validate_anthropic, validate_openai_chat
from ctxengine.llm import AnthropicClient, OpenAIClient, ProviderClient
from ctxengine.models.registry import Registry
from ctxengine.policy.registry import get_policy
from ctxengine.tokens.counter import counter_for
from llm_server import Recorded, ScriptedLLMServer, server_error

SIDECHAIN = CLAUDE_CODE / "cc_mimo-v2.5-pro_subagent-sidechain_of-4530697c_agent-aee292b61a7ab9367.jsonl"
WINDOW = "32000"
JUDGES = {"anthropic": "claude-sonnet-4-6", "openai": "gpt-4o"}
GRADE = {"recall": 4, "artifact": 3, "continuation": 5, "decision": 2}
SMALL_JUDGE_WINDOW = 8_000  # below the sidechain's full history at its second compaction

pytestmark = pytest.mark.usefixtures("clean_llm_env")


# ------------------------------------------------------------------ the stub judge


def last_text(body: dict[str, Any]) -> str:
    """The text of the last message of a request body (either wire format)."""
    content = body["messages"][-1]["content"]
    if isinstance(content, str):
        return content
    return "\n".join(b.get("text", "") for b in content if isinstance(b, dict))


def is_grading(rec: Recorded) -> bool:
    return "<reference>" in last_text(rec.body)


def judge_reply(body: dict[str, Any]) -> str:
    """A grade for a grading prompt; else an answer naming how many messages the request held
    (so that each answer can be traced into the grading prompt)."""
    if "<reference>" in last_text(body):
        return json.dumps(GRADE)
    return f"## recall\nanswer from {len(body['messages'])} messages"


@pytest.fixture
def server() -> Iterator[ScriptedLLMServer]:
    with ScriptedLLMServer(default=judge_reply) as s:
        yield s


@pytest.fixture(params=list(JUDGES))
def provider(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def base_url(provider: str, server: ScriptedLLMServer) -> str:
    return server.url if provider == "anthropic" else server.openai_url


def run_eval(
    provider: str, server: ScriptedLLMServer, out: Path, *args: str
) -> tuple[Result, dict[str, Any]]:
    res = CliRunner().invoke(
        app,
        [
            "eval",
            str(SIDECHAIN),
            "--judge",
            f"{provider}:{JUDGES[provider]}",
            "--judge-base-url",
            base_url(provider, server),
            "--window",
            WINDOW,
            "--max-compactions",
            "2",
            "--json",
            str(out),
            *args,
        ],
        env={"COLUMNS": "200"},
    )
    assert res.exit_code == 0, (res.stderr, res.exception)
    return res, json.loads(out.read_text(encoding="utf-8"))


def tool_ids(body: dict[str, Any]) -> set[str]:
    """Ids of the tool calls in a request body (Anthropic ``tool_use`` / OpenAI ``tool_calls``)."""
    ids: set[str] = set()
    for m in body["messages"]:
        for c in m.get("tool_calls") or ():
            ids.add(c["id"])
        if isinstance(m.get("content"), list):
            ids |= {b["id"] for b in m["content"] if isinstance(b, dict) and b.get("type") == "tool_use"}
    return ids


def validate(provider: str, body: dict[str, Any]) -> list[str]:
    return validate_anthropic(body) if provider == "anthropic" else validate_openai_chat(body)


def make_client(provider: str, server: ScriptedLLMServer) -> ProviderClient:
    cls = AnthropicClient if provider == "anthropic" else OpenAIClient
    return cls(JUDGES[provider], api_key="test-key", base_url=base_url(provider, server), max_retries=0)


def judge_for(client: ProviderClient, window: int = 200_000) -> Judge:
    return Judge(client, window=window, counter=counter_for(Registry.default().get(client.model)))


# ------------------------------------------------------------------ the probes, end to end


def test_each_compaction_is_probed_with_the_context_then_the_full_history_then_graded(
    provider: str, server: ScriptedLLMServer, tmp_path: Path
) -> None:
    res, report = run_eval(provider, server, tmp_path / "eval.json", "--policies", "default,claude-code,none")
    by_name = {p["policy"]: p for p in report["policies"]}
    assert report["judge"] == f"{provider}:{JUDGES[provider]}"
    for name in ("default", "claude-code"):
        p = by_name[name]
        assert (p["compactions_probed"], p["graded"], p["failures"]) == (2, 2, 0)
        assert p["mean"] == {k: float(v) for k, v in GRADE.items()}
        assert p["overall"] == sum(GRADE.values()) / 4
        assert (p["judge_calls"], p["judge_failed_calls"]) == (6, 0)
        assert p["judge_tokens"] > 0 and p["judge_cost_usd"] > 0
        assert all(set(q["layers"]) and q["error"] is None for q in p["probes"])
    # a policy that never compacts asks nothing and grades nothing (None, not 0)
    assert by_name["none"]["compactions_probed"] == 0 and by_name["none"]["overall"] is None
    assert by_name["none"]["judge_calls"] == 0

    # what the judge received: per compaction, the policy's context, the full history, the grade
    reqs = server.requests
    assert len(reqs) == 12 and all(r.provider == provider for r in reqs)
    session = load(SIDECHAIN)[0]
    first_call = next(m for m in session.messages if m.tool_calls).tool_calls[0].id
    lacking = 0
    for k in range(0, 12, 3):
        ctx, full, grade = reqs[k : k + 3]
        assert not is_grading(ctx) and not is_grading(full) and is_grading(grade)
        for probe in (ctx, full):
            assert all(q in last_text(probe.body) for q in PROBES.values())
            assert validate(provider, probe.body) == []
        # the full history holds every call so far from the session's first; the compacted
        # context holds a subset of them
        full_ids, ctx_ids = tool_ids(full.body), tool_ids(ctx.body)
        assert full_ids >= ctx_ids
        assert not full_ids or first_call in full_ids
        lacking += first_call in full_ids - ctx_ids
        # the grader sees the context's answer as the answer, the full history's as the reference
        text = last_text(grade.body)
        answer = re.search(r"<answer>\n(.*)\n</answer>", text, re.DOTALL)
        reference = re.search(r"<reference>\n(.*)\n</reference>", text, re.DOTALL)
        assert answer and reference
        assert answer[1] == f"## recall\nanswer from {len(ctx.body['messages'])} messages"
        assert reference[1] == f"## recall\nanswer from {len(full.body['messages'])} messages"
    assert lacking >= 2  # compaction really dropped early content at most probes
    assert "default" in res.stdout and "claude-code" in res.stdout and "3.50" in res.stdout


def test_a_full_history_over_the_judges_window_is_trimmed_pairing_safe_and_reported(
    provider: str, server: ScriptedLLMServer, tmp_path: Path
) -> None:
    res, report = run_eval(
        provider, server, tmp_path / "eval.json", "--judge-window", str(SMALL_JUDGE_WINDOW)
    )
    (p,) = report["policies"]
    trimmed = [q for q in p["probes"] if q["full_trimmed_messages"]]
    assert trimmed and p["full_history_trimmed"] == len(trimmed)
    assert p["graded"] == 2
    assert "trimmed to the judge's window (8,000 tokens)" in res.stdout
    fulls = [r for k, r in enumerate(server.requests) if k % 3 == 1]
    for q, full in zip(p["probes"], fulls, strict=True):
        assert validate(provider, full.body) == []  # no tool result without its call
        assert q["full_tokens"] < SMALL_JUDGE_WINDOW
        if q["full_trimmed_messages"]:
            n = q["full_trimmed_messages"]
            assert f"oldest {n} messages of the conversation were left out" in last_text(full.body)


# ------------------------------------------------------------------ failures


def test_an_unparseable_grade_and_a_failed_call_are_failures_not_zeros(
    provider: str, server: ScriptedLLMServer
) -> None:
    server.script = [
        ("ok", "answer A"),
        ("ok", "answer B"),
        ("ok", "I would give it a 4 out of 5 overall."),  # probe 1: not the JSON asked for
        server_error(provider),  # probe 2: the first judge call fails
    ]  # probe 3: graded by judge_reply
    client = make_client(provider, server)
    result = evaluate_policy(
        load(SIDECHAIN), get_policy("default"), judge_for(client), window=int(WINDOW), max_compactions=3
    )
    assert (result.compactions_probed, result.graded, result.failures) == (3, 1, 2)
    first, second, third = result.probes
    assert first.grades is None and first.error is not None and "unparseable grade" in first.error
    assert "4 out of 5" in first.error
    assert second.grades is None and second.error and "500" in second.error
    assert third.grades == GRADE and third.error is None
    assert result.mean == {k: float(v) for k, v in GRADE.items()}  # the failures are not averaged in
    assert (result.judge_calls, result.judge_failed_calls) == (7, 1)
    assert len(server.requests) == 7


def test_every_probe_failing_exits_1_with_the_reasons(server: ScriptedLLMServer, tmp_path: Path) -> None:
    server.default = ("ok", "no idea")  # answers, then an unparseable grade, every time
    judge = ["--judge", "openai:gpt-4o", "--judge-base-url", server.openai_url]
    res = CliRunner().invoke(
        app, ["eval", str(SIDECHAIN), *judge, "--window", WINDOW, "--max-compactions", "2"]
    )
    assert res.exit_code == 1, (res.stderr, res.exception)
    assert "all 2 probes failed" in res.stderr
    assert res.stderr.count("unparseable grade") == 2


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"recall": 5, "artifact": 0, "continuation": 3, "decision": 1}', (5, 0, 3, 1)),
        ('```json\n{"recall": 1, "artifact": 2, "continuation": 3, "decision": 4}\n```', (1, 2, 3, 4)),
    ],
)
def test_parse_grade_reads_the_json_object(text: str, expected: tuple[int, ...]) -> None:
    g = parse_grade(text)
    assert (g.recall, g.artifact, g.continuation, g.decision) == expected


@pytest.mark.parametrize(
    "text",
    [
        "Grade: 4",
        'Here it is: {"recall": 5, "artifact": 5, "continuation": 5, "decision": 5}',
        '{"recall": 5, "artifact": 5, "continuation": 5}',
        '{"recall": 5, "artifact": 5, "continuation": 5, "decision": 5, "overall": 5}',
        '{"recall": 4.5, "artifact": 5, "continuation": 5, "decision": 5}',
        '{"recall": 6, "artifact": 5, "continuation": 5, "decision": 5}',
        '{"recall": "5", "artifact": 5, "continuation": 5, "decision": 5}',
        "",
    ],
)
def test_parse_grade_refuses_anything_else(text: str) -> None:
    with pytest.raises(GradeError):
        parse_grade(text)


# ------------------------------------------------------------------ the command line


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--judge", "claude-sonnet-4-5"], "--judge claude-sonnet-4-5: bad LLM spec"),
        (["--judge", "gemini:pro"], "--judge gemini:pro: unknown LLM provider"),
        (["--judge", "anthropic:claude-sonnet-4-6"], "no API key"),  # no key, no base URL
        (["--judge", "openai:gpt-4o", "--policies", "bogus"], "unknown policy 'bogus'"),
        (["--judge", "openai:gpt-4o", "--max-compactions", "-1"], "--max-compactions"),
        (["--judge", "openai:gpt-4o", "--window", "1000"], "16,000"),
        (["--judge", "openai:gpt-4o", "--quiet"], "--quiet leaves the table out"),
    ],
)
def test_argument_errors_are_one_line_and_exit_2(args: list[str], says: str) -> None:
    res = CliRunner().invoke(app, ["eval", str(SIDECHAIN), *args])
    assert res.exit_code == 2, (res.stderr, res.exception)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and says in lines[0], res.stderr
    assert res.stdout == ""
