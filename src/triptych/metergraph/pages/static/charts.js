// Draws the usage overview's charts from the page's JSON block with uPlot (vendored, MIT).
// Days are UTC calendar days: the server sends each day's labels, and this script makes no dates of its
// own, so the browser's time zone moves nothing. Each day spans one unit of the x scale centred on its
// point, so one day is a one-day window with its point in the middle, never uPlot's default of years.
// Each figure gets data-drawn="true" once uPlot has painted it, with the ranges and tick labels it drew
// (data-x-range, data-y-range, data-x-labels) for anyone checking the picture.
(function () {
  "use strict";
  var palette = ["#2f6fde", "#e8590c", "#2b8a3e", "#c2255c", "#7048e8", "#0b7285", "#e67700", "#495057", "#868e96"];
  var HALF_DAY = 43200;
  var COUNTS = { calls: true, errors: true };
  var WHOLE = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1e3, 2e3, 5e3, 1e4, 2e4, 5e4, 1e5, 2e5, 5e5, 1e6, 1e7, 1e8];

  function number(v, digits) {
    return v.toLocaleString("en-US", { maximumFractionDigits: digits });
  }

  function money(v) {
    return "$" + v.toLocaleString("en-US", { minimumFractionDigits: Math.abs(v) < 1 ? 4 : 2,
                                             maximumFractionDigits: Math.abs(v) < 1 ? 4 : 2 });
  }

  // How a value reads on the axis and in the hover, per metric.
  function formatter(key) {
    if (key === "cost_usd") { return money; }
    if (key === "p95_latency_ms") { return function (v) { return number(v, 0) + " ms"; }; }
    return function (v) { return number(v, 0); };
  }

  // A y range from zero to just above the data; a chart with nothing to show still gets a small range of
  // its own unit (1 call or error, one cent, 100 ms) rather than uPlot's 0-100.
  function yRange(key, columns) {
    var top = 0;
    columns.forEach(function (col) { col.forEach(function (v) { if (v !== null && v > top) { top = v; } }); });
    var floor = key === "cost_usd" ? 0.01 : key === "p95_latency_ms" ? 100 : 1;
    top = Math.max(top * 1.1, floor);
    if (COUNTS[key]) { top = Math.ceil(top); }
    return [0, top];
  }

  // Ticks on day points only, every step-th day so that the labels fit.
  function daySplits(x, width) {
    var fit = Math.max(1, Math.floor(width / 80));
    var step = Math.max(1, Math.ceil(x.length / fit));
    var out = [];
    for (var i = 0; i < x.length; i += step) { out.push(x[i]); }
    return out;
  }

  function draw() {
    var block = document.getElementById("usage-data");
    if (!block || typeof uPlot === "undefined") { return; }
    var data = JSON.parse(block.textContent);
    var index = {};
    data.x.forEach(function (x, i) { index[x] = i; });
    var figures = document.querySelectorAll("figure.chart");
    figures.forEach(function (figure) {
      var key = figure.getAttribute("data-metric");
      var target = figure.querySelector(".plot");
      var fmt = formatter(key);
      var width = Math.max(320, target.clientWidth || 520);
      var series = [{
        label: "Day (UTC)",
        value: function (u, x) {
          var i = index[x];
          return i === undefined ? "–" : data.days[i];
        }
      }];
      var columns = [data.x];
      var values = [];
      data.series.forEach(function (s, n) {
        var col = s[key];
        values.push(col);
        series.push({
          label: s.name, stroke: palette[n % palette.length], width: 2, spanGaps: false,
          points: { show: data.x.length < 40 },
          value: function (u, v, si, i) {
            if (i === null || i === undefined) { return "–"; }
            if (v !== null) { return fmt(v); }
            if (key === "cost_usd" && s.unpriced[i] > 0) {
              return "no price (" + s.unpriced[i] + " unpriced call" + (s.unpriced[i] === 1 ? "" : "s") + ")";
            }
            return "no calls";
          }
        });
        columns.push(col);
      });
      var splits = daySplits(data.x, width);
      var yr = yRange(key, values);
      var yAxis = { size: 80, values: function (u, ticks) { return ticks.map(fmt); } };
      if (COUNTS[key]) { yAxis.incrs = WHOLE; }  // counts tick on whole numbers only
      var opts = {
        width: width, height: 240, series: series,
        scales: {
          x: { time: false, range: function () { return [data.x[0] - HALF_DAY, data.x[data.x.length - 1] + HALF_DAY]; } },
          y: { range: function () { return yr; } }
        },
        axes: [
          {
            splits: function () { return splits; },
            values: function (u, ticks) {
              var labels = ticks.map(function (x) { var i = index[x]; return i === undefined ? "" : data.labels[i]; });
              figure.setAttribute("data-x-labels", JSON.stringify(labels));
              return labels;
            }
          },
          yAxis
        ],
        hooks: {
          draw: [function (u) {
            figure.setAttribute("data-x-range", JSON.stringify([u.scales.x.min, u.scales.x.max]));
            figure.setAttribute("data-y-range", JSON.stringify([u.scales.y.min, u.scales.y.max]));
            figure.setAttribute("data-drawn", "true");
          }]
        }
      };
      new uPlot(opts, columns, target);
    });
  }

  if (document.readyState === "loading") { document.addEventListener("DOMContentLoaded", draw); } else { draw(); }
})();
