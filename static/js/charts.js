// Draw every chart whose figure the server embedded as JSON (no inline scripts: CSP): in a
// json_script element named by data-chart on full pages, or in the element's own data-figure
// attribute in htmx partials (htmx drops every <script> of swapped HTML under the CSP).
//
// A refreshed partial brings new figures for charts already on the page. Drawing them into
// the fresh, empty elements would blank every chart for a frame (flicker) and drop the
// reader's zoom; instead the drawn element is kept across the swap, put back in place of
// its empty twin (same id) and updated with Plotly.react, all before the browser paints.
(function () {
  "use strict";
  var CONFIG = { displaylogo: false, responsive: true };
  var kept = {};
  var SELECTOR = "[data-chart], [data-figure]";
  function figureOf(el) {
    if (el.dataset.figure) { return JSON.parse(el.dataset.figure); }
    var source = document.getElementById(el.dataset.chart);
    return source ? JSON.parse(source.textContent) : null;
  }
  function layoutOf(figure) {
    return Object.assign({
      paper_bgcolor: "rgba(0,0,0,0)",
      plot_bgcolor: "rgba(0,0,0,0)",
      font: { color: "#e6e9ee", size: 12 },
      margin: { l: 60, r: 20, t: 20, b: 40 },
      legend: { orientation: "h" }
    }, figure.layout || {});
  }
  function draw(el) {
    if (!window.Plotly || el.dataset.drawn) { return; }
    var figure = figureOf(el);
    if (!figure) { return; }
    var old = el.id ? kept[el.id] : null;
    if (old) {
      delete kept[el.id];
      el.replaceWith(old);
      // The figure's layout.uirevision keeps a zoom the reader made across the update.
      window.Plotly.react(old, figure.data || [], layoutOf(figure), CONFIG);
      return;
    }
    window.Plotly.newPlot(el, figure.data || [], layoutOf(figure), CONFIG);
    el.dataset.drawn = "1";
  }
  function drawAll(root) {
    (root || document).querySelectorAll(SELECTOR).forEach(draw);
  }
  document.addEventListener("DOMContentLoaded", function () { drawAll(document); });
  document.addEventListener("htmx:beforeSwap", function (event) {
    var target = event.detail.target;
    if (!target || !event.detail.shouldSwap) { return; }
    target.querySelectorAll("[data-drawn]").forEach(function (el) {
      if (el.id) { kept[el.id] = el; }
    });
  });
  document.addEventListener("htmx:afterSwap", function () {
    drawAll(document);
    kept = {};  // charts the new content no longer has are let go
  });
})();
