// Draw every chart whose figure the server embedded as JSON (no inline scripts: CSP).
(function () {
  "use strict";
  function draw(el) {
    var source = document.getElementById(el.dataset.chart);
    if (!source || !window.Plotly) { return; }
    var figure = JSON.parse(source.textContent);
    var layout = Object.assign({
      paper_bgcolor: "rgba(0,0,0,0)",
      plot_bgcolor: "rgba(0,0,0,0)",
      font: { color: "#c9d1d9", size: 12 },
      margin: { l: 60, r: 20, t: 20, b: 40 },
      legend: { orientation: "h" }
    }, figure.layout || {});
    window.Plotly.newPlot(el, figure.data || [], layout, { displaylogo: false, responsive: true });
  }
  function drawAll(root) {
    (root || document).querySelectorAll("[data-chart]").forEach(draw);
  }
  document.addEventListener("DOMContentLoaded", function () { drawAll(document); });
  document.addEventListener("htmx:afterSwap", function (event) { drawAll(event.target); });
})();
