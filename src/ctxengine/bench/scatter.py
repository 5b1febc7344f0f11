"""The ``ctxengine bench --plot`` picture: read recall against the cost with re-fetches, one
point per policy, coloured by kind (ours, the harness presets, the baselines and peers, said in
the legend), each point named by a label placed where it overlaps no label placed before it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ctxengine import peers
from ctxengine.bench.records import PRESETS, BenchResult
from ctxengine.engine import baselines

__all__ = ["plot"]

KINDS = (
    ("ours", "tab:green"),
    ("harness presets", "tab:blue"),
    ("baselines", "tab:orange"),
    ("Python peers", "tab:purple"),
    ("other", "tab:gray"),
)
OFFSETS = ((6, 4), (6, -12), (-6, 4), (-6, -12), (6, 16), (-6, 16), (6, -24), (-6, -24))
"""Where a label may sit beside its point, points (tried in this order)."""


def _kind(name: str) -> str:
    if name in ("default", "none", "recorded") or name.startswith("evict-"):
        return "ours"
    if name in PRESETS:
        return "harness presets"
    if name in baselines.BASELINES:
        return "baselines"
    return "Python peers" if name in peers.PEERS else "other"


def _place(ax: Any, name: str, xy: tuple[float, float], placed: list[Any], renderer: Any) -> None:
    """Annotate ``name`` at the first offset whose box overlaps no label in ``placed``."""
    label = None
    for dx, dy in OFFSETS:
        if label is not None:
            label.remove()
        label = ax.annotate(
            name,
            xy,
            textcoords="offset points",
            xytext=(dx, dy),
            fontsize=8,
            ha="left" if dx > 0 else "right",
        )
        box = label.get_window_extent(renderer)
        if not any(box.overlaps(other) for other in placed):
            break
    if label is not None:
        placed.append(label.get_window_extent(renderer))


def plot(result: BenchResult, path: Path) -> None:
    """Read recall against the cost with re-fetches, one point per policy. Raises
    ``RuntimeError`` without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise RuntimeError("--plot needs matplotlib: pip install 'ctxengine[plot]'") from exc
    fig, ax = plt.subplots(figsize=(7.5, 5))
    colors = dict(KINDS)
    points = [
        (name, r.cost_with_refetch_usd, r.read_recall)
        for name, r in result.policies.items()
        if r.read_recall is not None and r.sessions
    ]
    shown: set[str] = set()
    for name, x, y in points:
        kind = _kind(name)
        ax.scatter([x], [y], s=60, color=colors[kind], zorder=3, label=None if kind in shown else kind)
        shown.add(kind)
    fig.canvas.draw()  # the points' axes limits, so that label boxes can be measured
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    placed: list[Any] = []
    for name, x, y in sorted(points, key=lambda p: -p[2]):
        _place(ax, name, (x, y), placed, renderer)
    sessions = max((r.sessions for r in result.policies.values()), default=0)
    window = f"window {result.window_tokens:,} tokens" if result.window_tokens else "each model's window"
    ax.set_title(
        f"ctxengine bench — read recall vs cost with re-fetch, {sessions} sessions, {window}", fontsize=9
    )
    ax.set_xlabel("cost with re-fetch (USD, prompt-cache pricing, all sessions)")
    ax.set_ylabel("read recall (pooled)")
    ax.grid(alpha=0.3)
    if shown:
        ax.legend(title="policy kind", fontsize=8, title_fontsize=8, loc="best")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
