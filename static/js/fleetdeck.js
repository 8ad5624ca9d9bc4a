// Fleetdeck's page script: dark mode for Plotly's figures (they draw their own colours, so the
// stylesheet's prefers-color-scheme cannot reach them), and a self-refreshing page whose session
// has ended goes to the login page instead of swapping the login form into itself.
(function () {
  "use strict";
  var dark = window.matchMedia("(prefers-color-scheme: dark)");
  var LIGHT = {bg: "#ffffff", fg: "#1f2328", grid: "#e5e8eb"};
  var DARK = {bg: "#161b22", fg: "#e6edf3", grid: "#30363d"};

  function restyle(root, always) {
    if (!window.Plotly || !(dark.matches || always)) return;
    var c = dark.matches ? DARK : LIGHT;
    root.querySelectorAll(".js-plotly-plot").forEach(function (el) {
      window.Plotly.relayout(el, {
        paper_bgcolor: c.bg, plot_bgcolor: c.bg, "font.color": c.fg,
        "xaxis.gridcolor": c.grid, "yaxis.gridcolor": c.grid, "legend.font.color": c.fg, "title.font.color": c.fg
      });
    });
  }

  document.addEventListener("DOMContentLoaded", function () { restyle(document, false); });
  dark.addEventListener("change", function () { restyle(document, true); });
  document.addEventListener("htmx:afterSettle", function (event) { restyle(event.target, false); });
  document.addEventListener("htmx:beforeSwap", function (event) {
    var url = event.detail.xhr.responseURL || "";
    if (url.indexOf("/login/") !== -1) {
      event.detail.shouldSwap = false;
      window.location.reload();
    }
  });
})();
