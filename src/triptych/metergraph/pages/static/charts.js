// Draws the usage overview's charts from the page's JSON block with uPlot (vendored, MIT).
// Each figure gets data-drawn="true" once uPlot has painted it.
(function () {
  "use strict";
  var palette = ["#2f6fde", "#e8590c", "#2b8a3e", "#c2255c", "#7048e8", "#0b7285", "#e67700", "#495057", "#868e96"];

  function draw() {
    var block = document.getElementById("usage-data");
    if (!block || typeof uPlot === "undefined") { return; }
    var data = JSON.parse(block.textContent);
    var figures = document.querySelectorAll("figure.chart");
    figures.forEach(function (figure) {
      var key = figure.getAttribute("data-metric");
      var target = figure.querySelector(".plot");
      var series = [{}];
      var columns = [data.x];
      data.series.forEach(function (s, i) {
        series.push({ label: s.name, stroke: palette[i % palette.length], width: 2, spanGaps: key !== "p95_latency_ms",
                      points: { show: data.x.length < 40 } });
        columns.push(s[key]);
      });
      var width = Math.max(320, target.clientWidth || 520);
      var opts = {
        width: width, height: 240, series: series,
        axes: [{}, { size: 70 }],
        scales: { x: { time: true } },
        hooks: { draw: [function () { figure.setAttribute("data-drawn", "true"); }] }
      };
      new uPlot(opts, columns, target);
    });
  }

  if (document.readyState === "loading") { document.addEventListener("DOMContentLoaded", draw); } else { draw(); }
})();
