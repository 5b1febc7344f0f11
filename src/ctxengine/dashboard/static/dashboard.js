/* ctxengine proxy dashboard: reads GET /ctxengine/stream (server-sent events: the report of
   GET /ctxengine/sessions and the calls of the chosen session, whenever they change) and shows them
   as they are; when the stream fails, polls the two JSON routes every data-poll-ms milliseconds. */
(function () {
  "use strict";
  const body = document.body;
  const POLL_MS = Number(body.dataset.pollMs) || 1000;
  const ADMIN_HEADER = body.dataset.adminHeader;
  const AUTH_KEY = "ctxengine-dashboard-auth";
  const fmt = window.ctxCharts.fmt;
  let picked = null;      // the session on the chart: the one the user clicked, else the newest with calls
  let userPicked = false;
  let chart = null;
  let shownCalls = null;  // calls of the session on the chart when it was last drawn
  let editingKey = false; // the user opened the key form ("change key"): polling leaves it open

  function headers() {
    const saved = JSON.parse(sessionStorage.getItem(AUTH_KEY) || "null");
    if (!saved) { return {}; }
    const h = {};
    if (saved.kind === "admin") { h[ADMIN_HEADER] = saved.secret; } else { h["x-api-key"] = saved.secret; }
    return h;
  }

  async function getJSON(url) {
    const r = await fetch(url, {headers: headers(), cache: "no-store"});
    if (r.status === 401) { throw Object.assign(new Error("401"), {unauthorized: true}); }
    if (!r.ok) { throw new Error(url + ": HTTP " + r.status); }
    return r.json();
  }

  function pct(x) { return x === null ? "–" : (100 * x).toFixed(1) + "%"; }
  function usd(x) { return "$" + x.toFixed(4); }
  function hitRatio(s) { return s.reported_input_tokens > 0 ? s.cache_read_tokens / s.reported_input_tokens : null; }
  function savedShare(s) { return s.client_tokens > 0 ? 1 - s.upstream_tokens / s.client_tokens : null; }

  const COLUMNS = [
    ["id", function (s) { return s.id + (s.branch_of ? " (branch of " + s.branch_of + ")" : ""); }, "text"],
    ["agent", function (s) { return s.agent || "–"; }, "text"],
    ["model", function (s) { return s.model; }, "text"],
    ["calls", function (s) { return String(s.calls); }],
    ["client_tokens", function (s) { return fmt(s.client_tokens); }],
    ["upstream_tokens", function (s) { return fmt(s.upstream_tokens); }],
    ["saved_share", function (s) { return pct(savedShare(s)); }, "", savedShare],
    ["compactions", function (s) { return String(s.compactions); }],
    ["offloads", function (s) { return String(s.offloads); }],
    ["cache_hit_ratio", function (s) { return pct(hitRatio(s)); }, "", hitRatio],
    ["cost_saved_usd", function (s) { return usd(s.cost_saved_usd); }],
    ["upstream_errors", function (s) { return String(s.upstream_errors); }],
  ];

  function cell(tag, text, cls, field, value) {
    const c = document.createElement(tag);
    c.textContent = text;
    if (cls) { c.className = cls; }
    if (field) { c.dataset.field = field; c.dataset.value = JSON.stringify(value); }
    return c;
  }

  function showTable(report) {
    const tbody = document.querySelector("#sessions tbody");
    const rows = report.sessions.map(function (s) {
      const tr = document.createElement("tr");
      tr.dataset.session = s.id;
      if (s.id === picked) { tr.className = "pick"; }
      COLUMNS.forEach(function (col) {
        const value = col[3] ? col[3](s) : s[col[0]];
        tr.appendChild(cell("td", col[1](s), col[2], col[0], value === undefined ? null : value));
      });
      tr.addEventListener("click", function () { pick(s.id); });
      return tr;
    });
    tbody.replaceChildren.apply(tbody, rows);
    const t = report.totals;
    const totals = document.getElementById("totals");
    totals.replaceChildren.apply(totals, [
      ["sessions", t.sessions], ["requests", t.requests], ["fail-opens", t.fail_open],
      ["bad requests", t.bad_requests], ["upstream unreachable", t.upstream_unreachable],
      ["passed through", t.passed_through], ["left to the provider", t.left_to_provider],
      ["sessions evicted", t.sessions_evicted],
    ].map(function (kv) {
      const span = document.createElement("span");
      span.dataset.total = kv[0];
      span.append(kv[0] + ": ");
      const b = document.createElement("b");
      b.textContent = kv[1] === undefined ? "–" : String(kv[1]);
      span.appendChild(b);
      return span;
    }));
  }

  function spec(data) {
    const p = data.points;
    const x = p.map(function (q) { return q.call; });
    const notes = {};
    p.forEach(function (q) {
      notes[String(q.call)] = q.events.map(function (e) {
        return e.layer + ": " + e.reason + " (" + fmt(e.tokens_before) + " → " + fmt(e.tokens_after) + ")";
      });
    });
    function marks(key) {
      const hit = p.filter(function (q) { return q[key]; });
      return {x: hit.map(function (q) { return q.call; }), y: hit.map(function (q) { return q.upstream_tokens; })};
    }
    const c = marks("compaction"), o = marks("offload");
    return {
      x: x,
      notes: notes,
      lines: [
        {label: "client sent", values: p.map(function (q) { return q.client_tokens; }), color: "#8c959f"},
        {label: "sent upstream", values: p.map(function (q) { return q.upstream_tokens; }), color: "#1f6feb"},
        {label: "window", values: p.map(function (q) { return q.window_tokens; }), color: "#c62828", dash: true},
        {label: "compaction threshold", values: p.map(function (q) { return q.threshold_tokens; }), color: "#e3a008", dash: true},
      ],
      markers: [
        {label: "compaction", x: c.x, y: c.y, color: "#8250df", style: "triangle"},
        {label: "offload", x: o.x, y: o.y, color: "#1a7f37", style: "rectRot"},
      ],
    };
  }

  function showChart(data) {
    document.getElementById("detail").hidden = false;
    document.getElementById("chart-title").textContent = "session " + data.id + ": tokens per call";
    const figs = document.getElementById("chart-figures");
    const first = data.first_call;
    figs.textContent = data.calls + " calls, window " + fmt(data.window_tokens) + " tokens" +
      (first !== null && first > 1 ? " (the newest " + data.points.length + " drawn)" : "");
    const drawn = data.id + ":" + data.calls + ":" + data.points.length;
    if (shownCalls === drawn && chart) { return; }
    shownCalls = drawn;
    if (chart) { window.ctxCharts.update(chart, spec(data)); }
    else { chart = window.ctxCharts.make(document.getElementById("chart"), spec(data)); }
  }

  function status(text, bad) {
    const el = document.getElementById("status");
    el.textContent = text;
    el.className = bad ? "bad" : "";
  }

  function applyReport(report) {
    if (!editingKey) { document.getElementById("auth").hidden = true; }
    const withCalls = report.sessions.filter(function (s) { return s.calls > 0; });
    if (!userPicked || !report.sessions.some(function (s) { return s.id === picked; })) {
      userPicked = false;  // follow the newest session with calls
      picked = withCalls.length ? withCalls[withCalls.length - 1].id : null;
    }
    showTable(report);
    status("live: " + report.sessions.length + " sessions, updated " + new Date().toLocaleTimeString("en-GB"));
  }

  function failed(e) {
    if (e.unauthorized) {
      document.getElementById("auth").hidden = false;
      document.getElementById("auth-show").hidden = false;
      status("give an API key or the admin token to list sessions", true);
    } else {
      status("cannot read the proxy: " + e.message + " (retrying)", true);
    }
  }

  async function poll() {  // when the stream fails
    try {
      applyReport(await getJSON("/ctxengine/sessions"));
      if (picked !== null) { showChart(await getJSON("/ctxengine/sessions/" + encodeURIComponent(picked) + "/calls")); }
    } catch (e) {
      failed(e);
    }
  }

  function onEvent(block) {
    let name = "message", data = "";
    block.split("\n").forEach(function (line) {
      if (line.startsWith("event: ")) { name = line.slice(7); } else if (line.startsWith("data: ")) { data += line.slice(6); }
    });
    const value = JSON.parse(data);
    if (name === "sessions") { applyReport(value); }
    else if (name === "calls" && value.id === picked) { showChart(value); }
    else if (name === "failure") { status(value.error, true); }
  }

  let current = null;   // the AbortController of the open stream
  let keyGiven = null;  // resolves the wait for a key after a 401

  async function stream() {
    const ctrl = new AbortController();
    current = ctrl;
    const q = userPicked && picked !== null ? "?session=" + encodeURIComponent(picked) : "";
    const r = await fetch("/ctxengine/stream" + q, {headers: headers(), cache: "no-store", signal: ctrl.signal});
    if (r.status === 401) { throw Object.assign(new Error("401"), {unauthorized: true}); }
    if (!r.ok || !r.body) { throw new Error("/ctxengine/stream: HTTP " + r.status); }
    const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
    let buf = "";
    for (;;) {
      const part = await reader.read();
      if (part.done) { return; }
      buf += part.value;
      let cut;
      while ((cut = buf.indexOf("\n\n")) >= 0) {
        onEvent(buf.slice(0, cut));
        buf = buf.slice(cut + 2);
      }
    }
  }

  function reconnect() {
    if (current) { current.abort(); }
  }

  function pick(id) {
    picked = id;
    userPicked = true;
    reconnect();
  }

  document.getElementById("auth").addEventListener("submit", function (ev) {
    ev.preventDefault();
    const form = ev.target;
    sessionStorage.setItem(AUTH_KEY, JSON.stringify({kind: form.kind.value, secret: form.secret.value}));
    form.secret.value = "";
    editingKey = false;
    shownCalls = null;
    if (keyGiven) { keyGiven(); keyGiven = null; } else { reconnect(); }
  });

  document.getElementById("auth-show").addEventListener("click", function () {
    editingKey = true;
    document.getElementById("auth").hidden = false;
  });

  function sleep(ms) { return new Promise(function (resolve) { setTimeout(resolve, ms); }); }

  async function run() {  // the stream ends after its life: reconnect at once; on failure poll, then retry
    for (;;) {
      try {
        await stream();
      } catch (e) {
        if (e.name === "AbortError") { continue; }
        failed(e);
        if (e.unauthorized) {
          await new Promise(function (resolve) { keyGiven = resolve; });
        } else {
          await poll();
          await sleep(POLL_MS);
        }
      }
    }
  }
  run();
})();
