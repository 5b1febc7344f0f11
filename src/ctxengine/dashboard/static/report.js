/* ctxengine --html report: draws the charts whose specs the page carries as JSON. */
(function () {
  "use strict";
  function data(id) {
    const el = document.getElementById(id);
    return el ? JSON.parse(el.textContent) : null;
  }
  const charts = data("ctx-charts");
  if (charts) {
    Object.keys(charts).forEach(function (id) {
      window.ctxCharts.make(document.getElementById(id), charts[id]);
    });
  }
  const scatter = data("ctx-scatter");
  if (scatter) {
    const palette = ["#1f6feb", "#d4760a", "#1a7f37", "#8250df", "#c62828", "#0a7ea4", "#bf3989", "#6e7781", "#9a6700", "#3d2a96"];
    const pct = function (x) { return x === null ? "–" : (100 * x).toFixed(1) + "%"; };
    new Chart(document.getElementById("scatter"), {
      type: "scatter",
      data: {datasets: scatter.points.map(function (p, i) {
        return {label: p.label, data: [{x: p.cost_usd, y: 100 * p.content_recall, p: p}],
                backgroundColor: palette[i % palette.length], pointRadius: 7, pointHoverRadius: 9};
      })},
      options: {
        animation: false, responsive: true, maintainAspectRatio: false,
        scales: {x: {title: {display: true, text: "cost $ (with prompt caching)"}},
                 y: {title: {display: true, text: "content recall %"}}},
        plugins: {legend: {position: "bottom"}, tooltip: {callbacks: {label: function (c) {
          const p = c.raw.p;
          return p.label + ": content recall " + pct(p.content_recall) + ", read recall " + pct(p.read_recall) +
            ", $" + p.cost_usd.toFixed(4) + " ($" + p.cost_with_refetch_usd.toFixed(4) + " with re-fetches)";
        }}}},
      },
    });
  }
})();
