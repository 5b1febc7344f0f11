/* ctxengine: the chart of tokens per call (Chart.js), shared by the proxy dashboard and the HTML
   report. A spec is {x: [call...], lines: [{label, values, color, dash}], markers: [{label, x, y,
   color, style}], notes: {call: [text...]}}: one point per call on each line; markers on the calls
   where a layer acted; notes shown when hovering a call. */
(function () {
  "use strict";

  function fmt(n) {
    return n === null || n === undefined ? "–" : Math.round(n).toLocaleString("en-US");
  }

  function datasets(spec) {
    const out = spec.lines.map(function (l) {
      return {
        type: "line",
        label: l.label,
        data: spec.x.map(function (x, i) { return {x: x, y: l.values[i]}; }),
        borderColor: l.color,
        backgroundColor: l.color,
        borderWidth: l.dash ? 1.2 : 2,
        borderDash: l.dash ? [6, 4] : [],
        pointRadius: l.dash ? 0 : 2,
        pointHoverRadius: l.dash ? 0 : 4,
        spanGaps: false,
        stepped: l.dash ? "middle" : false,
      };
    });
    spec.markers.forEach(function (m) {
      out.push({
        type: "scatter",
        label: m.label,
        data: m.x.map(function (x, i) { return {x: x, y: m.y[i]}; }),
        borderColor: m.color,
        backgroundColor: m.color,
        pointStyle: m.style,
        pointRadius: 7,
        pointHoverRadius: 9,
      });
    });
    return out;
  }

  function options(spec) {
    return {
      animation: false,
      responsive: true,
      maintainAspectRatio: false,
      parsing: true,
      interaction: {mode: "nearest", axis: "x", intersect: false},
      scales: {
        x: {type: "linear", title: {display: true, text: "call"}, ticks: {precision: 0},
            min: spec.x.length ? spec.x[0] : undefined,
            max: spec.x.length > 1 ? spec.x[spec.x.length - 1] : undefined},
        y: {beginAtZero: true, title: {display: true, text: "tokens"},
            ticks: {callback: function (v) { return fmt(v); }}},
      },
      plugins: {
        legend: {position: "bottom"},
        tooltip: {
          callbacks: {
            title: function (items) { return items.length ? "call " + items[0].parsed.x : ""; },
            label: function (c) { return c.dataset.label + ": " + fmt(c.parsed.y); },
            footer: function (items) {
              if (!items.length) { return ""; }
              const notes = spec.notes[String(items[0].parsed.x)] || [];
              return notes.length ? notes : ["no layer acted"];
            },
          },
        },
      },
    };
  }

  function make(canvas, spec) {
    return new Chart(canvas, {data: {datasets: datasets(spec)}, options: options(spec)});
  }

  function update(chart, spec) {
    chart.data.datasets = datasets(spec);
    chart.options = options(spec);
    chart.update("none");
  }

  window.ctxCharts = {make: make, update: update, fmt: fmt};
})();
