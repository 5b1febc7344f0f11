"""The public API: ``ctxengine.__all__`` names what a user needs, each resolves to the object of
the module that defines it, and ``import ctxengine`` alone stays light (the CLI imports it)."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys

import ctxengine


def test_all_lists_the_public_names_and_each_resolves_to_its_module() -> None:
    needed = (
        "ContextEngine",
        "Policy",
        "Message",
        "load",
        "replay_session",
        "to_anthropic",
        "to_openai_chat",
    )
    for name in needed:
        assert name in ctxengine.__all__
    for name in ctxengine.__all__:
        if name == "__version__":
            continue
        where = ctxengine._WHERE[name]
        assert getattr(ctxengine, name) is getattr(importlib.import_module(where), name)
    assert set(ctxengine.__all__) - {"__version__"} == set(ctxengine._WHERE)
    assert ctxengine.__version__ and ctxengine.__version__[0].isdigit()


def test_a_submodule_import_does_not_shadow_an_exported_name() -> None:
    import ctxengine.policy.harnesses  # the module ``ctxengine.policy.harnesses`` becomes a package attribute

    assert ctxengine.get_policy("pi").name == "pi"
    assert "presets" not in ctxengine.__all__  # it names the module, not a function


def test_an_unknown_name_raises_attribute_error() -> None:
    try:
        ctxengine.NoSuchThing  # noqa: B018
    except AttributeError as exc:
        assert "NoSuchThing" in str(exc)
    else:
        raise AssertionError("no AttributeError")


def test_import_is_light() -> None:
    code = (
        "import sys, ctxengine; "
        "print(*(m in sys.modules for m in ('ctxengine.engine.core', 'ctxengine.replay')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


def test_the_names_work_together_on_a_real_transcript() -> None:
    from conftest import CODEX

    path = next(CODEX.glob("*.jsonl"))
    session = ctxengine.load(path)[0]
    report = ctxengine.replay_session(session, ctxengine.get_policy("default"), window=64_000)
    assert report.summary.pairing_violations == 0
    engine = ctxengine.ContextEngine(ctxengine.DEFAULT, model=session.model or "unknown", window=64_000)
    for m in session.messages[:20]:
        engine.ingest(m)
    projection = engine.assemble()
    assert ctxengine.to_openai_chat(projection.messages, model=session.model or "gpt-4o")
    assert isinstance(projection.messages[0], ctxengine.Message)


def test_the_replay_and_the_restore_do_not_load_the_tools() -> None:
    # one-way imports: the tool-limit report, the read/grep limits, shell parsing and the bootstrap
    # loader sit in ``ctxengine.tools`` below the agent tools themselves (``limits``, ``budgets``,
    # ``shell``, ``instruction_files``): the replay and the restore load those, never a tool
    below = ("limits", "budgets", "shell", "instruction_files")
    code = (
        "import sys, ctxengine.replay, ctxengine.summary.restore, ctxengine.compaction; "
        "print(sorted(m for m in sys.modules if m.startswith('ctxengine.tools')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    loaded = ast.literal_eval(out)
    assert "ctxengine.tools.limits" in loaded  # the replay's tool-limit report, as before
    tools = [m for m in loaded if m != "ctxengine.tools" and m.split(".")[2] not in below]
    assert tools == []
