"""Make the README's two screenshots (docs/dashboard.png, docs/report.png) from real sessions.

The dashboard: the Claude Code session ``cc_opus-4.5_general-tool-calls`` (56 calls) driven
through ``ctxengine proxy --window 32000`` in front of the tests' loopback upstream, as its client
would (each request the whole history so far), while Debian's chromium shows ``/ctxengine/``; the
mouse rests on the first call where a compaction acted. The report: ``ctxengine replay
cc_mimo-v2.5-pro_2x-autocompact_db3f6604.jsonl --window 64000 --html`` opened from disk.

Run from the repository's root with ../shared beside it: ``.venv/bin/python docs/screenshots.py``.
"""

from __future__ import annotations

import os
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
from playwright.sync_api import Page, sync_playwright
from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from ctxengine.cli.commands import app  # noqa: E402
from ctxengine.formats import load  # noqa: E402
from ctxengine.formats.anthropic_writer import to_anthropic  # noqa: E402
from ctxengine.messages.model import Message  # noqa: E402
from ctxengine.proxy import ProxyConfig, create_app  # noqa: E402
from proxy_servers import Upstream, serve  # noqa: E402

CC = ROOT.parent / "shared" / "data" / "transcripts" / "claude-code-jsonl"
DRIVEN = CC / "cc_opus-4.5_general-tool-calls_2-comment-header-lines.jsonl"
REPORTED = CC / "cc_mimo-v2.5-pro_2x-autocompact_db3f6604.jsonl"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]


def drive(base: str) -> None:
    """Every recorded call of ``DRIVEN`` sent through the proxy at ``base``."""
    (session,) = load(DRIVEN)
    model = "claude-opus-4-5"
    http = httpx.Client(base_url=base, headers={"x-api-key": "sk-demo", "user-agent": "claude-cli/2.1.197"})
    history: list[Message] = []
    for msg in session.messages:
        if msg.role == "assistant":
            msgs = to_anthropic(history, model=model, cache_breakpoints=False)["messages"]
            http.post(
                "/v1/messages", json={"model": model, "max_tokens": 1024, "messages": msgs}
            ).raise_for_status()
            time.sleep(0.05)
        history.append(msg)


def dashboard(page: Page) -> None:
    up = Upstream()
    with serve(up.app()) as up_url:
        cfg = ProxyConfig(anthropic_upstream=up_url, openai_upstream=up_url + "/v1", window=32_000)
        with serve(create_app(cfg)) as base:
            page.goto(base + "/ctxengine/")
            t = threading.Thread(target=drive, args=(base,))
            t.start()
            t.join()
            time.sleep(1.5)
            sid = httpx.get(base + "/ctxengine/sessions").json()["sessions"][0]["id"]
            points = httpx.get(f"{base}/ctxengine/sessions/{sid}/calls").json()["points"]
            call = next((p["call"] for p in points if p["compaction"]), points[-1]["call"])
            x, y = page.evaluate(
                "call => { const c = Chart.getChart(document.getElementById('chart'));"
                " const r = c.canvas.getBoundingClientRect();"
                " return [r.left + c.scales.x.getPixelForValue(call), r.top + c.chartArea.top + 30]; }",
                call,
            )
            page.mouse.move(x - 20, y)
            page.mouse.move(x, y, steps=3)
            page.screenshot(path=str(ROOT / "docs" / "dashboard.png"))
            page.goto("about:blank")  # the page's stream closed before the proxy stops


def report(page: Page) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "report.html"
        args = ["replay", os.path.relpath(REPORTED, ROOT), "--window", "64000", "--html", str(out), "--quiet"]
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0, result.output
        page.goto(out.as_uri())
        page.screenshot(path=str(ROOT / "docs" / "report.png"))


def main() -> None:
    os.chdir(ROOT)  # the report names its transcript as given: ../shared/...
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 860})
        dashboard(page)
        report(page)
        browser.close()
    print("wrote docs/dashboard.png, docs/report.png")


if __name__ == "__main__":
    main()
