"""The pages' templates (Jinja2) and static files, read from the installed package.

``static/chart.umd.min.js`` is Chart.js 4.6.1 as the npm registry ships it
(``npm pack chart.js@4.6.1``, ``dist/chart.umd.min.js``; MIT, ``static/chart.js.LICENSE.md``);
the other files of ``static/`` are ctxengine's. ``.ci/run`` checks that the file is npm's.
"""

from __future__ import annotations

import functools
from importlib.resources import files
from typing import Any

import jinja2
from markupsafe import Markup

PACKAGE = "ctxengine.dashboard"
# static files a page may load: name -> media type
ASSETS = {
    "chart.umd.min.js": "text/javascript",
    "calls_chart.js": "text/javascript",
    "dashboard.js": "text/javascript",
    "report.js": "text/javascript",
    "style.css": "text/css",
    "chart.js.LICENSE.md": "text/markdown",
}


@functools.cache
def asset(name: str) -> str:
    """The text of the static file ``name`` (one of ``ASSETS``).

    Raises:
        KeyError: ``name`` is not one of ``ASSETS``.
    """
    if name not in ASSETS:
        raise KeyError(name)
    return (files(PACKAGE) / "static" / name).read_text(encoding="utf-8")


def inline(name: str) -> Markup:
    """A static file's text to put inside a ``<script>`` or ``<style>`` element of a
    self-contained page.

    Raises:
        ValueError: the text would end its element early (it holds ``</script`` or ``</style``).
    """
    text = asset(name)
    low = text.lower()
    if "</script" in low or "</style" in low:
        raise ValueError(f"{name} cannot be inlined: it holds a closing tag")
    return Markup(text)


@functools.cache
def environment() -> jinja2.Environment:
    """The templates of ``templates/`` (HTML autoescaped; ``inline`` available to them)."""
    env = jinja2.Environment(
        loader=jinja2.PackageLoader(PACKAGE, "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.globals["inline"] = inline
    env.filters["tokens"] = _tokens
    env.filters["pct"] = _pct
    return env


def render(template: str, **context: Any) -> str:
    """``template`` rendered with ``context``."""
    return environment().get_template(template).render(**context)


def _tokens(n: int | None) -> str:
    return "–" if n is None else f"{n:,}"


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{x * 100:.1f}%"
