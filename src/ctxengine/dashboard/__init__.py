"""Pages that show what the engine does: the proxy's live dashboard and the HTML report of a replay
or a bench.

``timeline``: one point per proxied call (the dashboard chart's data); ``routes``: the proxy's
``/ctxengine/`` page, its assets and ``GET /ctxengine/sessions/{id}/calls``; ``report_html``: the
self-contained ``--html`` file of ``replay`` and ``bench``; ``assets``: the Jinja2 templates and the
static files shipped in the package (Chart.js from the npm registry, with its licence: see
docs/dashboard.md). Nothing is fetched at run time.
"""
