// Keep the hypothesis tree's open/closed branches as the reader left them across the htmx
// refresh of every poll cycle (the server only knows which branches it suggests closing).
(function () {
  "use strict";
  var state = {};
  document.addEventListener("toggle", function (event) {
    var el = event.target;
    if (el.tagName === "DETAILS" && el.dataset.testid) { state[el.dataset.testid] = el.open; }
  }, true);
  document.addEventListener("htmx:afterSwap", function (event) {
    event.target.querySelectorAll("details[data-testid]").forEach(function (el) {
      var saved = state[el.dataset.testid];
      if (saved !== undefined && el.open !== saved) { el.open = saved; }
    });
  });
})();
