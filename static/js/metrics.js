// The tenant page's Metrics tab: each panel's series from the tenant's own Prometheus data source (a GET with the
// viewer's session; the server holds every query to the tenant's namespace), drawn with uPlot and written out as a
// table. The panels, their queries and the quota lines come from the page (json_script "metrics-config").
(function () {
  "use strict";

  var UNITS = {
    cores: function (v) { return v < 1 ? Math.round(v * 1000) + "m" : v.toFixed(2); },
    bytes: function (v) { return bytes(v); },
    "bytes/s": function (v) { return bytes(v) + "/s"; },
    count: function (v) { return String(Math.round(v)); },
  };
  var COLOURS = ["#1f5fbf", "#b35900", "#2f7d32", "#8e24aa", "#555"];

  function bytes(v) {
    var units = ["B", "KiB", "MiB", "GiB", "TiB"];
    var i = 0;
    while (Math.abs(v) >= 1024 && i < units.length - 1) { v /= 1024; i++; }
    return (i ? v.toFixed(1) : Math.round(v)) + " " + units[i];
  }

  function when(seconds, step) {
    return new Date(seconds * 1000).toISOString().slice(0, step < 60 ? 19 : 16).replace("T", " ");
  }

  function fetchSeries(config, query, start, end) {
    var params = new URLSearchParams({ query: query, start: start, end: end, step: config.step });
    return fetch(config.source + "?" + params.toString(), {
      credentials: "same-origin",
      headers: { Accept: "application/json" },
    }).then(function (answer) {
      return answer.json().then(function (body) {
        if (!answer.ok || body.status !== "success") {
          throw new Error(body.error || body.detail || "Prometheus answered " + answer.status);
        }
        return body.data.result;
      });
    });
  }

  // Prometheus's [[t, "v"], ...] per series, on the common time axis (null where a series has no point).
  function align(times, result) {
    var byTime = {};
    (result[0] ? result[0].values : []).forEach(function (point) { byTime[point[0]] = parseFloat(point[1]); });
    return times.map(function (t) { return t in byTime ? byTime[t] : null; });
  }

  function table(figure, panel, times, columns) {
    var head = figure.querySelector(".metric-data thead");  // not uPlot's legend, also a table
    var body = figure.querySelector(".metric-data tbody");
    var format = UNITS[panel.unit] || String;
    // Every line the chart draws: the series, then the flat quota lines.
    var names = ["Time (UTC)"].concat(panel.series.map(function (s) { return s.label; }))
      .concat(panel.lines.map(function (l) { return l.label; }));
    columns = columns.concat(panel.lines.map(function (l) { return times.map(function () { return l.value; }); }));
    head.innerHTML = "";
    body.innerHTML = "";
    var row = document.createElement("tr");
    names.forEach(function (name) {
      var th = document.createElement("th");
      th.scope = "col";
      th.textContent = name;
      row.appendChild(th);
    });
    head.appendChild(row);
    // Newest first: the row people look for.
    times.map(function (t, i) { return i; }).reverse().forEach(function (i) {
      var t = times[i];
      var tr = document.createElement("tr");
      var cells = [when(t, times[1] - times[0])].concat(columns.map(function (c) { return c[i] === null ? "—" : format(c[i]); }));
      cells.forEach(function (text, j) {
        var cell = document.createElement(j ? "td" : "th");
        if (!j) cell.scope = "row";
        cell.textContent = text;
        tr.appendChild(cell);
      });
      body.appendChild(tr);
    });
  }

  function draw(figure, panel, times, columns) {
    var chart = figure.querySelector(".metric-chart");
    var format = UNITS[panel.unit] || String;
    var series = [{}];
    var data = [times];
    panel.series.forEach(function (s, i) {
      series.push({ label: s.label, stroke: COLOURS[i], width: 2, value: function (u, v) { return v === null ? "—" : format(v); } });
      data.push(columns[i]);
    });
    panel.lines.forEach(function (line, i) {
      series.push({ label: line.label, stroke: COLOURS[panel.series.length + i], width: 1, dash: [6, 4],
                    value: function () { return format(line.value); } });
      data.push(times.map(function () { return line.value; }));
    });
    var width = Math.max(280, chart.clientWidth || figure.clientWidth || 600);
    var ink = getComputedStyle(figure).color;  // the page's own text colour, light or dark
    var axis = { stroke: ink, grid: { stroke: "rgba(128, 128, 128, 0.25)" }, ticks: { stroke: "rgba(128, 128, 128, 0.4)" } };
    new uPlot({
      width: width,
      height: 220,
      series: series,
      // Time in UTC, as the table and the rest of the portal show it.
      tzDate: function (ts) { return uPlot.tzDate(new Date(ts * 1000), "Etc/UTC"); },
      axes: [Object.assign({ values: function (u, ticks) {
        var span = times[times.length - 1] - times[0];
        return ticks.map(function (t) {
          var iso = new Date(t * 1000).toISOString();
          return span > 86400 ? iso.slice(5, 10) + " " + iso.slice(11, 16) : iso.slice(11, 16);
        });
      } }, axis), Object.assign({ size: 70, values: function (u, ticks) { return ticks.map(format); } }, axis)],
      scales: { y: { range: function (u, min, max) { return [0, Math.max(max, 1e-9) * 1.1]; } } },
      legend: { live: true },
    }, data, chart);
  }

  function load() {
    var source = document.getElementById("metrics-config");
    if (!source) return;
    if (typeof uPlot === "undefined") {  // the chart library did not load: say so instead of "Loading…" forever
      document.querySelectorAll(".metric-state").forEach(function (state) {
        state.textContent = "The graphs could not be drawn (the chart library did not load); reload the page.";
      });
      return;
    }
    var config = JSON.parse(source.textContent);
    var end = Math.floor(Date.now() / 1000);  // the newest point is now; Prometheus steps back from the start
    var start = end - config.seconds;
    var times = [];
    for (var t = start; t <= end; t += config.step) times.push(t);
    // One query at a time: the portal runs only a few of a person's queries at once (BERTH_READS_AT_ONCE) and
    // answers 429 to more; one after another, the panels still come in well under a second.
    var queue = Promise.resolve();
    config.panels.forEach(function (panel) {
      var figure = document.getElementById("metric-" + panel.id);
      var state = figure.querySelector(".metric-state");
      queue = queue.then(function () {  // the whole chain, failure included, before the next panel's queries
        var results = [];
        return panel.series.reduce(function (chain, s) {
          return chain.then(function () {
            return fetchSeries(config, s.query, start, end).then(function (result) { results.push(result); });
          });
        }, Promise.resolve()).then(function () { return results; });
      })
      .then(function (results) {
          var columns = results.map(function (result) { return align(times, result); });
          var any = columns.some(function (c) { return c.some(function (v) { return v !== null; }); });
          if (!any) {
            state.textContent = "No data in this period: no pods of this tenant have run, or they ran too briefly to be measured.";
            figure.classList.add("metric--empty");
            return;
          }
          state.textContent = "";
          state.hidden = true;
          draw(figure, panel, times, columns);
          table(figure, panel, times, columns);
          figure.classList.add("metric--drawn");
        })
        .catch(function (error) {
          state.textContent = "Could not load this graph: " + error.message;
          figure.classList.add("metric--failed");
        });
    });
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", load);
  else load();
})();
