"""What ``ctxengine replay`` makes of ``--policy`` and ``--demo``: the help that lists every
policy, a baseline or peer name as the engine of its own it is (as ``bench`` runs it), and the
folder of the demo sessions shipped in the package. A refusal is one ``error:`` line, exit 2.
"""

from __future__ import annotations

from pathlib import Path

from ctxengine.cli.stderr import fail, say
from ctxengine.policy.registry import BUILTIN, Policy, presets

__all__ = ["POLICY_HELP", "baseline_engine", "demo_path"]

POLICY_HELP = (
    f"Policy: ours ({', '.join(BUILTIN)}), a harness preset ({', '.join(presets())}), a baseline "
    "(identifiers-only: the latest request and every identifier seen; own-words-only: the latest "
    "request and the agent's own earlier words) or a Python peer (langchain-trim, langchain-clear; "
    "extra 'peers'); --policy-file for your own."
)


def demo_path(path: Path | None) -> Path:
    """The folder of the shipped demo sessions, for ``--demo`` (refused beside a transcript)."""
    if path is not None:
        raise fail(f"--demo replays the shipped sessions: leave out {path}, or leave out --demo")
    from ctxengine.demo import demo_dir

    try:
        folder = demo_dir()
    except FileNotFoundError as exc:
        raise fail(str(exc)) from None
    say("demo:", "2 real sessions shipped with ctxengine (sources: data/demo/SOURCES.md)")
    return folder


def baseline_engine(policy: str, policy_file: Path | None, engine: str) -> tuple[Policy, str] | None:
    """``(its policy, its engine)`` when ``--policy`` names a baseline (``baselines.BASELINES``)
    or a Python peer (``peers.PEERS``): an engine of its own, as ``bench`` runs it; None for any
    other name (a policy, for ``engine``; ``load_policy`` says when it is unknown)."""
    if policy_file is not None or policy in BUILTIN or policy in presets():
        return None
    from ctxengine import peers
    from ctxengine.engine import baselines

    if policy not in baselines.BASELINES and policy not in peers.PEERS:
        return None
    if engine != "ctxengine":
        raise fail(f"--policy {policy} is an engine of its own: leave out --engine {engine}")
    if policy in peers.PEERS:
        missing = peers.available()
        if missing:
            raise fail(f"--policy {policy}: {missing}")
        return peers.policy_for(policy), policy
    return baselines.policy_for(policy), policy
