// Draw every chart whose figure the server embedded as JSON (no inline scripts: CSP): in a
// json_script element named by data-chart on full pages, or in the element's own data-figure
// attribute in htmx partials (htmx drops every <script> of swapped HTML under the CSP).
//
// A chart is drawn when it comes near the viewport (IntersectionObserver), not all at once:
// the investigation page holds ~15 of them and drawing every one delayed the first usable
// screen (issue 17). Charts never scrolled to are never drawn. Browsers without the
// observer draw everything at once, as before.
//
// plotly.js (1.5 MB) is not in the page's HTML: this script loads it (the file its own
// data-plotly attribute names) once the page has loaded and has a chart to draw, after
// the next paint, or at once when a chart comes into view. Its parse (~1 s on a first
// visit here) then holds up neither the first paint, nor DOMContentLoaded (when htmx asks
// for the evidence partial), nor the load event, nor the evidence's arrival on screen
// (the charts' captions carry the current values). A chart that comes into view before
// plotly.js is ready is drawn as soon as it is.
(function () {
  "use strict";
  // plotly.js carries defaults that name its own hosts (the logo's link, the "send to
  // cloud" server, the geo maps' topojson CDN). None is used by a cartesian chart, but the
  // console makes no request off its origin, so each is switched off or pointed home.
  var CONFIG = {
    displaylogo: false,
    responsive: true,
    showLink: false,
    showSendToCloud: false,
    showEditInChartStudio: false,
    plotlyServerURL: "",
    topojsonURL: "/static/vendor/plotly/"
  };
  var kept = {};
  var SELECTOR = "[data-chart], [data-figure]";
  // Drawn a little before it scrolls in, so a reader scrolling down rarely sees one empty.
  var observer = "IntersectionObserver" in window ? new IntersectionObserver(function (entries) {
    entries.forEach(function (entry) {
      if (!entry.isIntersecting) { return; }
      var el = entry.target;
      observer.unobserve(el);
      whenPlotly(function () { if (el.isConnected) { draw(el); } });
    });
  }, { rootMargin: "200px 0px" }) : null;
  var PLOTLY_SRC = document.currentScript ? document.currentScript.dataset.plotly : "";
  var waiting = [];
  function loadPlotly() {
    if (window.Plotly || !PLOTLY_SRC || document.getElementById("plotly-js")) { return; }
    var script = document.createElement("script");
    script.id = "plotly-js";
    script.src = PLOTLY_SRC;
    script.addEventListener("load", function () {
      var ready = waiting;
      waiting = [];
      ready.forEach(function (then) { then(); });
    });
    document.head.appendChild(script);
  }
  function whenPlotly(then) {
    if (window.Plotly) { then(); return; }
    waiting.push(then);
    loadPlotly();
  }
  var loaded = document.readyState === "complete";
  function loadPlotlySoon() {
    if (!loaded || window.Plotly || !document.querySelector(SELECTOR)) { return; }
    requestAnimationFrame(function () { setTimeout(loadPlotly, 0); });
  }
  window.addEventListener("load", function () { loaded = true; loadPlotlySoon(); });
  function figureOf(el) {
    if (el.dataset.figure) { return JSON.parse(el.dataset.figure); }
    var source = document.getElementById(el.dataset.chart);
    return source ? JSON.parse(source.textContent) : null;
  }
  // The page's time-range control (data-range-control): the last N seconds of each time
  // chart's own window, up to the window's end (now, while the investigation is open), or
  // the whole window (null). It holds across the evidence's refreshes and for charts drawn
  // later, since every layout is cut here; a zoom the reader makes on one chart still wins
  // on that chart (uirevision keeps GUI edits, not this one).
  var rangeS = null;
  function cutRange(xaxis) {
    if (!xaxis || xaxis.type !== "date" || !Array.isArray(xaxis.range)) { return xaxis; }
    var start = xaxis.range[0], end = xaxis.range[1];
    var from = rangeS === null ? start : Math.max(start, end - rangeS * 1000);
    return Object.assign({}, xaxis, { range: [from, end] });
  }
  function layoutOf(figure) {
    var layout = Object.assign({
      paper_bgcolor: "rgba(0,0,0,0)",
      plot_bgcolor: "rgba(0,0,0,0)",
      font: { color: "#e6e9ee", size: 12 },
      margin: { l: 60, r: 20, t: 20, b: 40 },
      legend: { orientation: "h" }
    }, figure.layout || {});
    // Only a layout that has an x axis gets one back: an own "xaxis" key set to undefined
    // makes plotly.js read its "anchor" and throw (the artifact page's bar chart has none).
    if (layout.xaxis) { layout.xaxis = cutRange(layout.xaxis); }
    return layout;
  }
  function chooseRange(button) {
    var control = button.closest("[data-range-control]");
    var raw = button.dataset.rangeS;
    rangeS = raw ? Number(raw) : null;
    control.querySelectorAll("button[data-range-s]").forEach(function (other) {
      other.setAttribute("aria-pressed", other === button ? "true" : "false");
    });
    if (!window.Plotly) { return; }
    document.querySelectorAll(SELECTOR).forEach(function (el) {
      if (!el.dataset.drawn) { return; }
      var figure = el.atlasFigure || figureOf(el);
      var xaxis = figure && figure.layout ? cutRange(figure.layout.xaxis) : null;
      if (xaxis && xaxis.range) { window.Plotly.relayout(el, { "xaxis.range": xaxis.range }); }
    });
  }
  document.addEventListener("click", function (event) {
    var button = event.target.closest ? event.target.closest("[data-range-control] button[data-range-s]") : null;
    if (button) { chooseRange(button); }
  });
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
      old.atlasFigure = figure;  // the element keeps its first figure's attribute
      return;
    }
    window.Plotly.newPlot(el, figure.data || [], layoutOf(figure), CONFIG);
    el.atlasFigure = figure;
    el.dataset.drawn = "1";
  }
  function drawAll(root) {
    (root || document).querySelectorAll(SELECTOR).forEach(function (el) {
      if (el.dataset.drawn) { return; }
      // A chart the reader already has drawn is updated in place now, seen or not.
      if (el.id && kept[el.id]) { draw(el); return; }
      if (!observer) { whenPlotly(function () { draw(el); }); return; }
      observer.observe(el);
    });
    loadPlotlySoon();
  }
  document.addEventListener("DOMContentLoaded", function () { drawAll(document); });
  document.addEventListener("htmx:beforeSwap", function (event) {
    var target = event.detail.target;
    if (!target || !event.detail.shouldSwap) { return; }
    target.querySelectorAll(SELECTOR).forEach(function (el) {
      if (el.dataset.drawn) {
        if (el.id) { kept[el.id] = el; }
      } else if (observer) {
        observer.unobserve(el);  // about to be replaced by its fresh twin
      }
    });
  });
  document.addEventListener("htmx:afterSwap", function () {
    drawAll(document);
    kept = {};  // charts the new content no longer has are let go
  });
})();
