"""``--html FILE`` of ``replay`` and ``bench``: the page written (``report_html``), said once
written; a file that cannot be written is one ``error:`` line and exit 2 (the early checks of
``cli_outputs`` catch most before any work)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ctxengine.cli.stderr import fail, say

if TYPE_CHECKING:
    from ctxengine.bench.records import BenchResult
    from ctxengine.models.registry import Registry
    from ctxengine.policy.registry import Policy
    from ctxengine.replay.records import SessionReport

HTML_HELP = "Write a self-contained HTML page (charts per session; opens from disk, no network)."


def write_replay(
    path: Path,
    reports: Sequence[SessionReport],
    recorded: Sequence[SessionReport] | None,
    policy: Policy,
    registry: Registry,
    source: Path,
) -> None:
    """The replay page of ``reports`` to ``path`` (``report_html.write_replay_html``)."""
    from ctxengine.dashboard.report_html import write_replay_html

    try:
        write_replay_html(path, reports, recorded, policy=policy, registry=registry, source=str(source))
    except OSError as exc:
        raise fail(f"--html {path}: {exc.strerror or exc}") from None
    say("wrote", str(path))


def write_bench(path: Path, result: BenchResult, title: str) -> None:
    """The bench page of ``result`` to ``path`` (``report_html.write_bench_html``)."""
    from ctxengine.dashboard.report_html import write_bench_html

    try:
        write_bench_html(path, result, title=title)
    except OSError as exc:
        raise fail(f"--html {path}: {exc.strerror or exc}") from None
    say("wrote", str(path))
