"""The dashboard and the ``--html`` report in a real browser: Debian's ``chromium`` driven by
Playwright (``executable_path=/usr/bin/chromium``, headless; ``.ci/run`` installs it). The proxy
runs in front of a loopback upstream (``proxy_servers``); every request a page makes beyond
127.0.0.1, ``file:`` and ``data:`` is refused and fails the test. Screenshots are saved under
``out/test-artifacts/`` (``CTXENGINE_TEST_ARTIFACTS`` to put them elsewhere).

Outside CI, without chromium or Playwright, the module is skipped with one reason; under CI
(``CI=true``) it fails instead.
"""

from __future__ import annotations

import importlib.util
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from conftest import REPO
from ctxengine.cli.commands import app
from test_dashboard import SIDECHAIN, SWE_GPT4, Rig, proxy_rig, replay_html

CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
LOCAL = ("http://127.0.0.1", "file://", "data:", "blob:")

_missing = [
    why
    for ok, why in (
        (CHROMIUM.exists(), f"no {CHROMIUM} (apt-get install chromium)"),
        (importlib.util.find_spec("playwright") is not None, "no playwright (pip install playwright)"),
    )
    if not ok
]
if _missing:
    if os.environ.get("CI") == "true":
        pytest.fail(f"the browser tests must run under CI: {'; '.join(_missing)}", pytrace=False)
    pytest.skip(f"browser tests skipped: {'; '.join(_missing)}", allow_module_level=True)

from playwright.sync_api import Browser, Page, sync_playwright  # noqa: E402

pytestmark = pytest.mark.usefixtures("clean_llm_env")


def artifacts() -> Path:
    out = Path(os.environ.get("CTXENGINE_TEST_ARTIFACTS") or REPO / "out" / "test-artifacts")
    out.mkdir(parents=True, exist_ok=True)
    return out


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        yield b
        b.close()


class Watched:
    """A page whose requests beyond this machine are refused and counted, and whose script
    errors are kept."""

    def __init__(self, browser: Browser) -> None:
        self.page: Page = browser.new_page(viewport={"width": 1280, "height": 900})
        self.foreign: list[str] = []
        self.asked: list[str] = []  # every URL the page requested
        self.errors: list[str] = []
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.route("**/*", self._route)

    def _route(self, route: Any) -> None:
        url = route.request.url
        self.asked.append(url)
        if url.startswith(LOCAL):
            route.continue_()
        else:
            self.foreign.append(url)
            route.abort()

    def clean(self) -> None:
        """No request beyond this machine, no script error; the page closed (its stream too)."""
        self.page.close()
        assert self.foreign == [] and self.errors == []

    def chart_points(self, selector: str, label: str) -> list[dict[str, float]]:
        """The points of the dataset ``label`` of the Chart.js chart on ``selector``'s canvas."""
        pts: list[dict[str, float]] = self.page.evaluate(
            "([sel, label]) => Chart.getChart(document.querySelector(sel)).data.datasets"
            ".find(d => d.label === label).data.map(p => ({x: p.x, y: p.y}))",
            [selector, label],
        )
        return pts

    def hover_call(self, selector: str, call: int) -> None:
        """Move the mouse over call ``call`` of the chart on ``selector``'s canvas."""
        x, y = self.page.evaluate(
            "([sel, call]) => { const c = Chart.getChart(document.querySelector(sel));"
            " const r = c.canvas.getBoundingClientRect();"
            " return [r.left + c.scales.x.getPixelForValue(call), r.top + c.chartArea.top + 20]; }",
            [selector, call],
        )
        self.page.mouse.move(x - 30, y)
        self.page.mouse.move(x, y, steps=3)

    def row(self, sid: str) -> dict[str, Any]:
        """The dashboard's row of session ``sid``: field -> (the value the page read, its text)."""
        cells: dict[str, Any] = self.page.evaluate(
            "sid => Object.fromEntries(Array.from(document.querySelectorAll("
            "`#sessions tr[data-session='${sid}'] td`)).map(td => [td.dataset.field,"
            " [JSON.parse(td.dataset.value), td.textContent]]))",
            sid,
        )
        return cells


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    yield from proxy_rig(tmp_path)


def settled(rig: Rig, calls: int) -> dict[str, Any]:
    """The JSON API's report once its newest session has ``calls`` calls."""
    for _ in range(200):
        report: dict[str, Any] = httpx.get(rig.base + "/ctxengine/sessions").json()
        if report["sessions"] and report["sessions"][-1]["calls"] == calls:
            return report
        time.sleep(0.02)
    raise AssertionError(f"the session never reached {calls} calls")


def test_dashboard_live_and_equal_to_the_json_api(browser: Browser, rig: Rig) -> None:
    w = Watched(browser)
    w.page.goto(rig.base + "/ctxengine/", wait_until="load")
    w.page.wait_for_selector("#status:has-text('live')", timeout=5000)
    assert w.page.locator("#sessions tbody tr").count() == 0
    rig.convo(1)
    w.page.wait_for_selector("#sessions tbody tr[data-session]", timeout=1000)  # within a second
    rig.convo(1, start=1)  # a second session, then more calls on a third while the page watches
    rig.convo(9, start=2)
    report = settled(rig, 9)
    s = report["sessions"][-1]
    w.page.wait_for_function(
        "sid => { const c = document.querySelector(`tr[data-session='${sid}'] td[data-field=calls]`);"
        " return c && c.textContent === '9'; }",
        arg=s["id"],
        timeout=3000,
    )
    time.sleep(0.6)  # one more poll: the chart of the newest session drawn
    row = w.row(s["id"])
    for field in ("calls", "client_tokens", "upstream_tokens", "compactions", "offloads", "cost_saved_usd"):
        assert row[field][0] == s[field], field
    assert row["client_tokens"][1] == f"{s['client_tokens']:,}"
    assert row["cost_saved_usd"][1] == f"${s['cost_saved_usd']:.4f}"
    assert row["saved_share"][0] == pytest.approx(1 - s["upstream_tokens"] / s["client_tokens"])
    assert row["cache_hit_ratio"][0] == pytest.approx(s["cache_read_tokens"] / s["reported_input_tokens"])
    assert row["agent"][1] == s["agent"] and row["id"][1] == s["id"]
    assert len(w.page.locator("#sessions tbody tr").all()) == len(report["sessions"]) == 3
    calls = httpx.get(rig.base + f"/ctxengine/sessions/{s['id']}/calls").json()["points"]
    up = w.chart_points("#chart", "sent upstream")
    assert len(up) == s["calls"] == 9  # one point per call
    assert up == [{"x": p["call"], "y": p["upstream_tokens"]} for p in calls]
    client = w.chart_points("#chart", "client sent")
    assert [p["y"] for p in client] == [p["client_tokens"] for p in calls]
    offloads = w.chart_points("#chart", "offload")
    assert [p["x"] for p in offloads] == [p["call"] for p in calls if p["offload"]] != []
    totals = w.page.inner_text("#totals")
    assert f"requests: {report['totals']['requests']}" in totals.replace("\n", " ")
    w.hover_call("#chart", 6)  # hover: that call's layer events, as the JSON has them
    tip = "() => { const t = Chart.getChart(chart).tooltip; return [t.title, t.footer]; }"
    title, footer = w.page.evaluate(tip)
    events = calls[5]["events"]
    assert title == ["call 6"] and events
    assert footer == [
        f"{e['layer']}: {e['reason']} ({e['tokens_before']:,} → {e['tokens_after']:,})" for e in events
    ]
    w.page.screenshot(path=str(artifacts() / "dashboard.png"), full_page=True)
    live = [u for u in w.asked if "/ctxengine/s" in u]  # the stream, never the polling fallback
    assert live and all(u.startswith(rig.base + "/ctxengine/stream") for u in live), live
    w.clean()


def test_dashboard_scoped_by_the_key_typed(browser: Browser, tmp_path: Path) -> None:
    for rig in proxy_rig(tmp_path, admin_token="adm-2"):
        rig.convo(2, key="sk-dash-a")
        rig.convo(3, key="sk-dash-b", start=1)
        w = Watched(browser)
        w.page.goto(rig.base + "/ctxengine/", wait_until="load")
        w.page.wait_for_selector("#auth:not([hidden])", timeout=5000)  # refused: asks for a key
        w.page.fill("#auth input[name=secret]", "sk-dash-b")
        w.page.click("#auth button")
        w.page.wait_for_selector("#sessions tbody tr[data-session]", timeout=3000)
        assert w.page.locator("#sessions tbody tr").count() == 1
        assert w.row(w.page.get_attribute("#sessions tbody tr", "data-session") or "")["calls"][0] == 3
        w.page.click("#auth-show")
        w.page.check("#auth input[value=admin]")
        w.page.fill("#auth input[name=secret]", "adm-2")
        w.page.click("#auth button")
        w.page.wait_for_function(
            "() => document.querySelectorAll('#sessions tbody tr').length === 2", timeout=3000
        )
        w.clean()


def test_report_from_file_shows_every_session(browser: Browser, tmp_path: Path) -> None:
    _, reports = replay_html(tmp_path, SIDECHAIN, SWE_GPT4)
    w = Watched(browser)
    w.page.goto((tmp_path / "r.html").as_uri(), wait_until="load")
    assert w.page.locator("section.session").count() == len(reports) == 2
    for i, r in enumerate(reports):
        section = w.page.locator(f"#session-{i}")
        assert f"calls: {len(r['calls'])}" in section.inner_text().replace("\n", " ")
        sent = w.chart_points(f"#chart-{i}", f"sent ({r['policy']})")
        assert sent == [{"x": c["index"], "y": c["sent_tokens"]} for c in r["calls"]]
    assert w.page.locator("#overview tbody tr").count() == 2
    w.page.screenshot(path=str(artifacts() / "report.png"), full_page=False)
    w.clean()


def test_bench_report_from_file_plots_every_policy(browser: Browser, tmp_path: Path) -> None:
    html, js = tmp_path / "b.html", tmp_path / "b.json"
    args = ["bench", str(SIDECHAIN), "--window", "64000", "--policies", "default,none,claude-code"]
    result = CliRunner().invoke(app, [*args, "--jobs", "1", "--html", str(html), "--json", str(js)])
    assert result.exit_code == 0, result.output
    bench = json.loads(js.read_text())["policies"]
    w = Watched(browser)
    w.page.goto(html.as_uri(), wait_until="load")
    points = w.page.evaluate(
        "() => Chart.getChart(document.getElementById('scatter')).data.datasets"
        ".map(d => [d.label, d.data[0].x, d.data[0].y])"
    )
    assert sorted(points) == sorted([n, p["cost_usd"], 100 * p["content_recall"]] for n, p in bench.items())
    assert w.page.locator("#policies tbody tr").count() == len(bench) == 3
    w.page.screenshot(path=str(artifacts() / "bench.png"), full_page=False)
    w.clean()
