"""The proxy's start-up heap frozen once warm (``warm.freeze_heap``): in a process that is the
proxy's own (``ctxengine proxy``: ``server.serve``), never in an app made inside another program."""

from __future__ import annotations

import gc
import subprocess
import sys
import textwrap
from typing import Any

import pytest

import ctxengine.proxy.server as server
from ctxengine.policy.registry import get_policy
from ctxengine.proxy import ProxyConfig
from ctxengine.proxy.warm import warm_start


def test_a_warm_start_that_freezes_leaves_the_collector_only_what_comes_after() -> None:
    """In a fresh interpreter: after ``warm_start(..., freeze=True)`` the start-up's objects are
    frozen (tens of thousands) and the collector's generations hold next to none of them."""
    code = textwrap.dedent(
        """
        import gc
        from ctxengine.policy.registry import get_policy
        from ctxengine.proxy.warm import warm_start
        warm_start(get_policy("default"), None, freeze=True)
        print(gc.get_freeze_count(), len(gc.get_objects()))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    frozen, tracked = map(int, out.stdout.split())
    assert frozen > 10_000 and tracked < frozen // 20, (frozen, tracked)


def test_a_warm_start_freezes_nothing_unless_asked() -> None:
    before = gc.get_freeze_count()
    warm_start(get_policy("default"), None)
    assert gc.get_freeze_count() == before == 0
    assert ProxyConfig().freeze_heap is False


def test_the_command_serves_an_app_that_freezes_its_heap(monkeypatch: pytest.MonkeyPatch) -> None:
    served: list[Any] = []
    monkeypatch.setattr(server.uvicorn, "run", lambda app, **kw: served.append(app))
    monkeypatch.setattr(server, "logging_setup", lambda: None)  # the test process's logging stays
    config = ProxyConfig()
    server.serve(config)
    (app,) = served
    assert app.state.proxy.config.freeze_heap is True and config.freeze_heap is False
