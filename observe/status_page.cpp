#include "observe/status_page.hpp"

#include "observe/step_figures.hpp"

namespace accord {
namespace {

// Laid out for a first screen of 1280 x 800: the job and its figures in two short rows, then two
// rows of three panels (loss, throughput, hidden communication; the workers' time, membership,
// staleness), so nothing a run is watched for needs scrolling.
const char* const page_template = R"page(<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>accord</title>
<style>
body{font-family:sans-serif;margin:12px 16px;font-size:14px}
header{display:flex;gap:16px;align-items:baseline;flex-wrap:wrap}
h1{font-size:20px;margin:0}
h2{font-size:14px;margin:0 0 4px 0}
p{margin:0}
#connection{color:#b00}
#figures{display:flex;flex-wrap:wrap;gap:6px;margin:8px 0}
#figures div{background:#f3f3f3;border-radius:4px;padding:3px 8px}
#figures span{color:#555;margin-right:6px}
.panels{display:grid;grid-template-columns:repeat(3,402px);gap:10px 14px}
.panel{height:280px;overflow:hidden}
svg{background:#fff;border:1px solid #ccc;display:block}
#events{margin:0;padding-left:18px;max-height:250px;overflow-y:auto}
#staleness{max-height:250px;overflow-y:auto}
td,th{padding:1px 8px;text-align:right}
th{background:#eee}
</style></head>
<body>
<header><h1>accord</h1><p id="job">waiting for the job's first answer</p><p id="progress"></p><p id="connection"></p></header>
<div id="figures"></div>
<div class="panels">
<div class="panel"><h2>Loss</h2><svg id="loss-chart" width="400" height="250"></svg></div>
<div class="panel"><h2>Throughput</h2><svg id="throughput-chart" width="400" height="250"></svg></div>
<div class="panel"><h2>Communication hidden behind compute</h2><svg id="hidden-chart" width="400" height="250"></svg></div>
<div class="panel"><h2>Workers' time in the last step</h2><svg id="worker-bars" width="400" height="250"></svg></div>
<div class="panel"><h2>Membership</h2><ul id="events"></ul></div>
<div class="panel"><h2>Staleness</h2><div id="staleness"></div></div>
</div>
<script>
"use strict";
// From the metrics' declarations (observe/step_figures.cpp's status_page_figures): the last
// step's figures shown as tiles, and each part of a worker's time with its key in the step's line.
const declared = DECLARED;
const tiles = declared.tiles;
const svgNamespace = "http://www.w3.org/2000/svg";

function element(name, attributes, text, namespace) {
  const node = namespace ? document.createElementNS(namespace, name) : document.createElement(name);
  for (const key in attributes || {}) node.setAttribute(key, attributes[key]);
  if (text !== undefined) node.textContent = text;
  return node;
}
function svgElement(name, attributes, text) { return element(name, attributes, text, svgNamespace); }
function replaceChildren(node, children) {
  while (node.firstChild) node.removeChild(node.firstChild);
  for (const child of children) node.appendChild(child);
}
function missing(value) { return value === null || value === undefined; }
function fixed(value, digits) { return missing(value) ? "-" : Number(value).toFixed(digits); }
// Human units: 20.1k, 3.40M; 15.0 MiB; 820 µs, 12.3 ms, 1.25 s. Three significant digits, all
// digits from 100 up (toPrecision would write 1023 as "1.02e+3").
function significant(v) { return v >= 100 ? v.toFixed(0) : v.toPrecision(3); }
function scaled(value, base, units) {
  let unit = 0, v = Math.abs(value);
  while (v >= base && unit < units.length - 1) { v /= base; ++unit; }
  return (value < 0 ? "-" : "") + (unit === 0 && Number.isInteger(v) ? String(v) : significant(v)) + units[unit];
}
function count(value) { return missing(value) ? "-" : scaled(Number(value), 1000, ["", "k", "M", "G", "T"]); }
function bytes(value) { return missing(value) ? "-" : scaled(Number(value), 1024, [" B", " KiB", " MiB", " GiB", " TiB"]); }
function seconds(value) {
  if (missing(value)) return "-";
  const s = Number(value);
  if (s === 0) return "0 s";
  if (s < 1e-3) return significant(s * 1e6) + " µs";
  if (s < 1) return significant(s * 1e3) + " ms";
  return significant(s) + " s";
}
// A tile's value as its declaration says.
function shown(value, tile) {
  switch (tile.format) {
    case "fixed": return fixed(value, tile.digits);
    case "significant": return Number(value).toPrecision(tile.digits);
    case "percent": return fixed(100 * value, tile.digits) + "%";
    case "thousands": return count(value);
    case "bytes": return bytes(value);
    default: return String(value);
  }
}
function duration(seconds) {
  const s = Math.max(0, Math.round(seconds));
  if (s < 60) return s + "s";
  if (s < 3600) return Math.floor(s / 60) + "m" + String(s % 60).padStart(2, "0") + "s";
  return Math.floor(s / 3600) + "h" + String(Math.floor(s / 60) % 60).padStart(2, "0") + "m";
}

// Each series: {name, colour, points: [[step, value], ...], dots}. The value axis spans every
// series, or `range` ([low, high]) when given; `format` writes its values.
function chart(svg, series, format, range) {
  const width = Number(svg.getAttribute("width")), height = Number(svg.getAttribute("height")), margin = 52;
  const all = series.flatMap(s => s.points);
  const children = [];
  if (all.length === 0) {
    children.push(svgElement("text", {x: margin, y: height / 2}, "no steps yet"));
    replaceChildren(svg, children);
    return;
  }
  let xHigh = 1, yLow = Infinity, yHigh = -Infinity;
  for (const [step, value] of all) {
    xHigh = Math.max(xHigh, step);
    yLow = Math.min(yLow, value);
    yHigh = Math.max(yHigh, value);
  }
  if (range) [yLow, yHigh] = range;
  if (yHigh <= yLow) yHigh = yLow + 1;
  const x = step => margin + (width - margin - 10) * step / xHigh;
  const y = value => height - 24 - (height - 44) * (value - yLow) / (yHigh - yLow);
  const bottom = y(yLow), top = y(yHigh);
  children.push(svgElement("line", {x1: margin, y1: bottom, x2: width - 10, y2: bottom, stroke: "#888"}));
  children.push(svgElement("line", {x1: margin, y1: top, x2: margin, y2: bottom, stroke: "#888"}));
  children.push(svgElement("text", {x: 4, y: top + 4, "font-size": 11}, format(yHigh)));
  children.push(svgElement("text", {x: 4, y: bottom, "font-size": 11}, format(yLow)));
  children.push(svgElement("text", {x: width - 80, y: bottom + 16, "font-size": 11}, "step " + count(xHigh)));
  series.forEach((s, i) => {
    if (s.points.length === 0) return;
    const points = s.points.map(([step, value]) => x(step).toFixed(1) + "," + y(value).toFixed(1)).join(" ");
    children.push(svgElement("polyline", {"data-series": s.name, fill: "none", stroke: s.colour,
                                          "stroke-width": s.dots ? 0 : 1.5, points: points}));
    if (s.dots)
      for (const [step, value] of s.points)
        children.push(svgElement("circle", {"data-series": s.name, cx: x(step).toFixed(1), cy: y(value).toFixed(1),
                                            r: 3, fill: s.colour}));
    children.push(svgElement("text", {x: width - 110, y: 14 + 14 * i, "font-size": 11, fill: s.colour}, s.name));
  });
  replaceChildren(svg, children);
}

const activityColours = ["#1f77b4", "#ff7f0e", "#999", "#2ca02c", "#d62728"];
const activities = declared.worker_seconds.map(([activity, key], i) => [activity, activityColours[i % 5], key]);

// One bar per worker, its compute, communication and wait seconds of the last step stacked.
function workerBars(svg, perWorker) {
  const width = Number(svg.getAttribute("width")), height = Number(svg.getAttribute("height")), left = 56;
  const children = [];
  activities.forEach(([activity, colour], i) => {
    children.push(svgElement("rect", {x: left + 100 * i, y: 4, width: 10, height: 10, fill: colour}));
    children.push(svgElement("text", {x: left + 100 * i + 14, y: 13, "font-size": 11}, activity));
  });
  const total = w => activities.reduce((sum, [activity]) => sum + w[activity], 0);
  const longest = Math.max(1e-12, ...perWorker.map(total));
  const row = Math.min(22, (height - 24) / Math.max(1, perWorker.length));
  perWorker.forEach((w, rank) => {
    const group = svgElement("g", {"data-rank": rank});
    const top = 22 + rank * row;
    group.appendChild(svgElement("text", {x: 2, y: top + row * 0.7, "font-size": Math.min(11, row)}, "rank " + rank));
    let at = left;
    for (const [activity, colour] of activities) {
      const size = (width - left - 64) * w[activity] / longest;
      const bar = svgElement("rect", {"data-activity": activity, x: at.toFixed(1), y: top.toFixed(1),
                                      width: size.toFixed(1), height: Math.max(1, row - 3).toFixed(1), fill: colour});
      bar.appendChild(svgElement("title", {}, activity + " " + seconds(w[activity])));
      group.appendChild(bar);
      at += size;
    }
    group.appendChild(svgElement("text", {x: (at + 4).toFixed(1), y: top + row * 0.7, "font-size": Math.min(11, row)},
                                 seconds(total(w))));
    children.push(group);
  });
  replaceChildren(svg, children);
}

function show(status) {
  document.getElementById("job").textContent = status.job;
  const last = status.last;
  const figures = [];
  if (last) {
    const done = last.step - status.first_step, left = status.steps - last.step;
    const eta = done > 0 ? " | ETA " + duration((last.seconds - status.first_seconds) / done * left) : "";
    document.getElementById("progress").textContent =
        "running: step " + last.step + " of " + status.steps + " after " + duration(last.seconds) + eta;
    for (const tile of tiles) {
      const value = last[tile.key];
      if (missing(value)) continue;  // not measured in this job (yet)
      const figure = element("div", {"data-figure": tile.label});
      figure.appendChild(element("span", {}, tile.label));
      figure.appendChild(element("b", {}, shown(value, tile) + tile.suffix));
      figures.push(figure);
    }
  }
  replaceChildren(document.getElementById("figures"), figures);

  const pick = column => status.points.map(p => [p[0], p[column]]);
  chart(document.getElementById("loss-chart"),
        [{name: "train loss", colour: "#1f77b4", points: pick(1)},
         {name: "held-out loss", colour: "#ff7f0e", points: status.eval, dots: true}], v => v.toFixed(3));
  chart(document.getElementById("throughput-chart"), [{name: "items/s", colour: "#2ca02c", points: pick(2)}], count);
  chart(document.getElementById("hidden-chart"),
        [{name: "hidden %", colour: "#9467bd", points: pick(3).map(([s, v]) => [s, 100 * v])}], v => v.toFixed(0) + "%",
        [0, 100]);
  // Each worker's compute, communication and wait seconds of the last step (the metrics line's
  // worker_compute_seconds, ... by rank).
  const perWorker = !last ? [] : last[activities[0][2]].map(
      (_, rank) => Object.fromEntries(activities.map(([activity, colour, key]) => [activity, last[key][rank]])));
  workerBars(document.getElementById("worker-bars"), perWorker);

  const staleness = document.getElementById("staleness");
  if (status.staleness.length === 0) {
    replaceChildren(staleness, [element("p", {}, "no stale gradients (only the parameter-server topology applies them)")]);
  } else {
    const table = element("table", {id: "staleness-table"});
    const head = element("tr");
    head.appendChild(element("th", {}, "updates stale"));
    head.appendChild(element("th", {}, "gradients applied (whole job)"));
    table.appendChild(head);
    status.staleness.forEach((applied, k) => {
      const row = element("tr", {"data-staleness": k});
      row.appendChild(element("td", {}, String(k)));
      row.appendChild(element("td", {}, String(applied)));
      table.appendChild(row);
    });
    replaceChildren(staleness, [table]);
  }

  const events = status.events.length ? status.events : ["no membership events"];
  replaceChildren(document.getElementById("events"), events.map(line => element("li", {}, line)));
}

async function refresh() {
  const connection = document.getElementById("connection");
  try {
    const answer = await fetch("status.json", {cache: "no-store"});
    show(await answer.json());
    connection.textContent = "";
  } catch (error) {
    connection.textContent = "the job does not answer (finished or stopped?): the figures are its last ones";
  }
}
refresh();
setInterval(refresh, 2000);
</script>
</body></html>
)page";

}  // namespace

const std::string& status_page_html() {
  static const std::string page = [] {
    std::string text = page_template;
    const std::string placeholder = "DECLARED";
    return text.replace(text.find(placeholder), placeholder.size(), status_page_figures().dump());
  }();
  return page;
}

}  // namespace accord
