"""The dashboard's data and pages without a browser: ``GET /ctxengine/sessions/{id}/calls`` (one
point per call, the same sums as ``GET /ctxengine/sessions``, scoped like it), the page and its
assets served from the package, and the self-contained ``replay --html`` / ``bench --html`` pages
of real transcripts (every figure on them is the JSON's). The browser tests are in
``test_dashboard_browser.py``."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest
from typer.testing import CliRunner

from conftest import CLAUDE_CODE, SWE_AGENT
from ctxengine.cli.commands import app
from ctxengine.dashboard.assets import ASSETS, asset
from ctxengine.dashboard.timeline import is_compaction
from ctxengine.layers.base import LayerEvent
from ctxengine.proxy.app import create_app
from ctxengine.proxy.config import ProxyConfig
from proxy_servers import Upstream, serve

pytestmark = pytest.mark.usefixtures("clean_llm_env")

SIDECHAIN = CLAUDE_CODE / "cc_mimo-v2.5-pro_subagent-sidechain_of-4530697c_agent-aee292b61a7ab9367.jsonl"
SWE_GPT4 = SWE_AGENT / "sweagent-0.x_gpt-4_pydicom__pydicom-1458.traj"
WORDS = ["alpha", "beta", "gamma", "delta", "config", "loader", "parser"]


@dataclass
class Rig:
    base: str
    upstream: Upstream

    def convo(self, turns: int, key: str = "sk-dash-a", start: int = 0) -> None:
        """An Anthropic agent of ``turns`` tool rounds, each result ~3,000 tokens (some offloaded,
        compacted at a 32,000-token window)."""
        c = anthropic.Anthropic(api_key=key, base_url=self.base, max_retries=0)
        msgs: list[dict[str, Any]] = [{"role": "user", "content": f"Audit the config loader {start}."}]
        for t in range(turns):
            c.messages.create(model="claude-sonnet-4-5", max_tokens=64, messages=msgs)
            msgs.append(
                {
                    "role": "assistant",
                    "content": [
                        {
                            "type": "tool_use",
                            "id": f"toolu_{t}",
                            "name": "Read",
                            "input": {"path": f"c{t}.py"},
                        }
                    ],
                }
            )
            text = " ".join(WORDS[(i * 7 + t) % len(WORDS)] + str(i % 97) for i in range(2500))
            msgs.append(
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": f"toolu_{t}", "content": text}],
                }
            )

    def get(self, path: str, **headers: str) -> httpx.Response:
        return httpx.get(self.base + path, headers=headers)


def proxy_rig(tmp_path: Path, **config: Any) -> Iterator[Rig]:
    up = Upstream()
    with serve(up.app()) as up_url:
        cfg = ProxyConfig(
            anthropic_upstream=up_url,
            openai_upstream=up_url + "/v1",
            window=32_000,
            store=tmp_path / "s",
            **config,
        )
        with serve(create_app(cfg)) as base:
            yield Rig(base, up)


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    yield from proxy_rig(tmp_path, background_notes=False)


def test_calls_one_point_per_call_with_the_sessions_sums(rig: Rig) -> None:
    rig.convo(8)
    s = rig.get("/ctxengine/sessions").json()["sessions"][0]
    data = rig.get(f"/ctxengine/sessions/{s['id']}/calls").json()
    points = data["points"]
    assert s["calls"] == data["calls"] == len(points) == 8 and data["first_call"] == 1
    assert [p["call"] for p in points] == list(range(1, 9))
    assert sum(p["client_tokens"] for p in points) == s["client_tokens"]
    assert sum(p["upstream_tokens"] for p in points) == s["upstream_tokens"]
    assert sum(p["input_tokens"] for p in points) == s["reported_input_tokens"]
    assert all(p["window_tokens"] == 32_000 and 0 < p["threshold_tokens"] < 32_000 for p in points)
    events = [LayerEvent(**e) for p in points for e in p["events"]]
    assert sum(is_compaction(e) for e in events) == s["compactions"]
    assert sum(e.layer == "tool_result_budget" for e in events) == s["offloads"] > 0
    assert any(p["offload"] for p in points)
    assert s["agent"].startswith("Anthropic/Python")  # the SDK's User-Agent product
    # one point per request that went upstream
    assert len(rig.upstream.seen) == 8


def test_calls_scoped_like_the_sessions_api(tmp_path: Path) -> None:
    for rig in proxy_rig(tmp_path, admin_token="adm-1"):
        rig.convo(2, key="sk-dash-a")
        rig.convo(2, key="sk-dash-b", start=1)
        mine = rig.get("/ctxengine/sessions", **{"x-api-key": "sk-dash-a"}).json()["sessions"]
        every = rig.get("/ctxengine/sessions", **{"x-ctxengine-admin": "adm-1"}).json()["sessions"]
        assert len(mine) == 1 and len(every) == 2
        theirs = next(s["id"] for s in every if s["id"] != mine[0]["id"])
        path = f"/ctxengine/sessions/{mine[0]['id']}/calls"
        assert rig.get(path).status_code == 401
        assert rig.get(path, **{"x-api-key": "sk-dash-a"}).json()["calls"] == 2
        assert rig.get(path, **{"x-ctxengine-admin": "adm-1"}).status_code == 200
        assert rig.get(f"/ctxengine/sessions/{theirs}/calls", **{"x-api-key": "sk-dash-a"}).status_code == 404
        assert rig.get("/ctxengine/sessions/nope/calls", **{"x-ctxengine-admin": "adm-1"}).status_code == 404
        page = rig.get("/ctxengine/")  # the page holds no figures: anyone may load it
        assert page.status_code == 200 and mine[0]["id"] not in page.text


def stream_events(rig: Rig, n: int, **headers: str) -> list[tuple[str, Any]]:
    """The first ``n`` events of ``GET /ctxengine/stream`` (name, data)."""
    out: list[tuple[str, Any]] = []
    with httpx.stream("GET", rig.base + "/ctxengine/stream", headers=headers, timeout=10) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        name = ""
        for line in r.iter_lines():
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                out.append((name, json.loads(line[6:])))
                if len(out) == n:
                    return out
    return out


def test_stream_sends_the_json_apis_figures(tmp_path: Path) -> None:
    for rig in proxy_rig(tmp_path, admin_token="adm-3"):
        rig.convo(3, key="sk-dash-a")
        rig.convo(2, key="sk-dash-b", start=1)
        key = {"x-api-key": "sk-dash-a"}
        (s_name, report), (c_name, calls) = stream_events(rig, 2, **key)
        assert (s_name, c_name) == ("sessions", "calls")
        assert report == rig.get("/ctxengine/sessions", **key).json()
        assert len(report["sessions"]) == 1 and calls["id"] == report["sessions"][0]["id"]
        assert calls == rig.get(f"/ctxengine/sessions/{calls['id']}/calls", **key).json()
        assert len(calls["points"]) == 3
        every = stream_events(rig, 1, **{"x-ctxengine-admin": "adm-3"})[0][1]
        assert len(every["sessions"]) == 2
        assert httpx.get(rig.base + "/ctxengine/stream").status_code == 401


def test_page_and_assets_come_from_the_package(rig: Rig) -> None:
    page = rig.get("/ctxengine/")
    assert page.headers["content-type"].startswith("text/html")
    urls = re.findall(r'(?:src|href)="([^"]*)"', page.text)
    assert urls and all(u.startswith(("/ctxengine/", "data:")) for u in urls), urls
    for u in urls:
        if u.startswith("/ctxengine/assets/"):
            r = rig.get(u)
            assert r.status_code == 200 and r.text == asset(u.rsplit("/", 1)[1])
    assert rig.get("/ctxengine/assets/chart.umd.min.js").headers["content-type"].startswith("text/javascript")
    assert rig.get("/ctxengine/assets/../app.py").status_code == 404
    assert rig.get("/ctxengine/assets/nothing.js").status_code == 404
    moved = httpx.get(rig.base + "/ctxengine", follow_redirects=False)
    assert moved.status_code == 308 and moved.headers["location"] == "/ctxengine/"
    assert rig.upstream.seen == []  # nothing of the dashboard went upstream


def test_vendored_chart_js_is_npms_with_its_licence() -> None:
    assert asset("chart.umd.min.js").startswith("/*!\n * Chart.js v4.6.1\n")
    assert "MIT License" in asset("chart.js.LICENSE.md")
    assert set(ASSETS) >= {"chart.umd.min.js", "chart.js.LICENSE.md"}


def replay_html(tmp_path: Path, *paths: Path) -> tuple[str, list[dict[str, Any]]]:
    """``replay --html --json`` of ``paths`` (a folder of links to them when more than one)."""
    src = paths[0]
    if len(paths) > 1:
        src = tmp_path / "sessions"
        src.mkdir()
        for p in paths:
            (src / p.name).symlink_to(p)
    html, js = tmp_path / "r.html", tmp_path / "r.json"
    args = [
        "replay",
        str(src),
        "--window",
        "64000",
        "--html",
        str(html),
        "--json",
        str(js),
        "--quiet",
        "--jobs",
        "1",
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    data = json.loads(js.read_text())
    return html.read_text(), data if isinstance(data, list) else [data]


def embedded(html: str, element: str) -> Any:
    m = re.search(rf'<script type="application/json" id="{element}">(.*?)</script>', html, re.S)
    assert m is not None
    return json.loads(m.group(1))


def test_replay_html_self_contained_with_the_json_figures(tmp_path: Path) -> None:
    html, reports = replay_html(tmp_path, SIDECHAIN)
    r = reports[0]
    assert not re.search(r'<(?:script|link|img)[^>]+(?:src|href)="(?!data:)', html)  # nothing loaded
    assert "Chart.js v4.6.1" in html
    charts = embedded(html, "ctx-charts")
    assert list(charts) == ["chart-0"]
    spec = charts["chart-0"]
    assert spec["x"] == [c["index"] for c in r["calls"]]
    sent = next(line for line in spec["lines"] if line["label"] == "sent (default)")
    assert sent["values"] == [c["sent_tokens"] for c in r["calls"]]
    window = next(line for line in spec["lines"] if line["label"] == "window")
    assert set(window["values"]) == {64_000}
    threshold = next(line for line in spec["lines"] if line["label"] == "compaction threshold")
    compactions = [(c["index"], e) for c in r["calls"] for e in c["events"] if e["layer"].endswith("compact")]
    assert compactions  # the sidechain compacts once at 64,000
    for _, e in compactions:  # the threshold drawn is the one the layer gave as its reason
        assert f"threshold {threshold['values'][0]:,}" in e["reason"]
    marked = next(m for m in spec["markers"] if m["label"] == "compaction")
    assert marked["x"] == [i for i, _ in compactions]
    rows = re.findall(r"<table class=\"compactions\">.*?</table>", html, re.S)
    assert len(rows) == 1 and rows[0].count("<tr>") == 1 + len(compactions)
    assert "kept whole" in rows[0]
    assert any(line["label"] == "recorded policy" for line in spec["lines"])
    forgot = [c for c in r["calls"] if c["forgotten"] or c["content_grounded"] > c["content_hits"]]
    assert f"Forgotten at each call ({len(forgot)} calls)" in html


def test_replay_html_of_a_folder_has_every_session(tmp_path: Path) -> None:
    html, reports = replay_html(tmp_path, SIDECHAIN, SWE_GPT4)
    charts = embedded(html, "ctx-charts")
    assert len(reports) == len(charts) == 2
    for i, r in enumerate(reports):
        assert f'id="session-{i}"' in html
        assert len(charts[f"chart-{i}"]["x"]) == len(r["calls"]) == r["session"]["calls"]


def test_bench_html_scatter_is_the_bench_json(tmp_path: Path) -> None:
    html, js = tmp_path / "b.html", tmp_path / "b.json"
    args = ["bench", str(SIDECHAIN), "--window", "64000", "--policies", "default,none"]
    result = CliRunner().invoke(app, [*args, "--jobs", "1", "--html", str(html), "--json", str(js)])
    assert result.exit_code == 0, result.output
    bench = json.loads(js.read_text())["policies"]
    points = embedded(html.read_text(), "ctx-scatter")["points"]
    assert {p["label"]: (p["content_recall"], p["cost_usd"]) for p in points} == {
        name: (row["content_recall"], row["cost_usd"]) for name, row in bench.items()
    }


def test_html_option_checked_before_any_work(tmp_path: Path) -> None:
    same = tmp_path / "x.out"
    result = CliRunner().invoke(app, ["replay", str(SIDECHAIN), "--json", str(same), "--html", str(same)])
    assert result.exit_code == 2 and "--json and --html both name" in result.output
    result = CliRunner().invoke(app, ["replay", str(SIDECHAIN), "--html", str(tmp_path / "no" / "r.html")])
    assert result.exit_code == 2 and "does not exist" in result.output


def test_calls_with_a_postgresql_store(tmp_path: Path) -> None:
    """With the gateway's store the table is the store's and the node charts the calls it served."""
    from gateway_servers import pg_schema_url

    up = Upstream()
    with pg_schema_url() as store, serve(up.app()) as up_url:
        cfg = ProxyConfig(anthropic_upstream=up_url, window=32_000, store=store, background_notes=False)
        with serve(create_app(cfg)) as base:
            rig = Rig(base, up)
            rig.convo(4)
            s = rig.get("/ctxengine/sessions").json()["sessions"][0]
            (_, report), (_, calls) = stream_events(rig, 2)
            assert report["sessions"][0]["calls"] == s["calls"] == len(calls["points"]) == 4
            assert sum(p["upstream_tokens"] for p in calls["points"]) == s["upstream_tokens"]
