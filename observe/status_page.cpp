#include "observe/status_page.hpp"

namespace accord {

const char* const status_page_html = R"page(<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>accord</title>
<style>
body{font-family:sans-serif;margin:2em}
td,th{padding:2px 10px;text-align:right}
th{background:#eee}
svg{background:#fff;border:1px solid #ccc;display:block;margin-bottom:1em}
#connection{color:#b00}
</style></head>
<body>
<h1>accord</h1>
<p id="job">waiting for the job's first answer</p>
<p id="progress"></p>
<p id="connection"></p>
<table id="figures"></table>
<h2>Loss</h2><svg id="loss-chart" width="720" height="260"></svg>
<h2>Throughput</h2><svg id="throughput-chart" width="720" height="200"></svg>
<h2>Hidden communication</h2><svg id="hidden-chart" width="720" height="200"></svg>
<h2>Workers (last step)</h2>
<table id="workers"><thead><tr><th>rank</th><th>compute s</th><th>communication s</th><th>wait s</th><th>busiest at</th></tr></thead><tbody></tbody></table>
<h2>Staleness</h2><div id="staleness"></div>
<h2>Membership</h2><ul id="events"></ul>
<script>
"use strict";
const svgNamespace = "http://www.w3.org/2000/svg";

function element(name, attributes, text, namespace) {
  const node = namespace ? document.createElementNS(namespace, name) : document.createElement(name);
  for (const key in attributes || {}) node.setAttribute(key, attributes[key]);
  if (text !== undefined) node.textContent = text;
  return node;
}
function fixed(value, digits) { return value === null || value === undefined ? "-" : Number(value).toFixed(digits); }
function replaceChildren(node, children) {
  while (node.firstChild) node.removeChild(node.firstChild);
  for (const child of children) node.appendChild(child);
}
function duration(seconds) {
  const s = Math.max(0, Math.round(seconds));
  if (s < 60) return s + "s";
  if (s < 3600) return Math.floor(s / 60) + "m" + String(s % 60).padStart(2, "0") + "s";
  return Math.floor(s / 3600) + "h" + String(Math.floor(s / 60) % 60).padStart(2, "0") + "m";
}

// Each series: {name, colour, points: [[step, value], ...], dots}. Axes span every series.
function chart(svg, series, digits) {
  const width = Number(svg.getAttribute("width")), height = Number(svg.getAttribute("height")), margin = 50;
  const all = series.flatMap(s => s.points);
  const children = [];
  if (all.length === 0) {
    children.push(element("text", {x: margin, y: height / 2}, "no steps yet", svgNamespace));
    replaceChildren(svg, children);
    return;
  }
  let xHigh = 1, yLow = Infinity, yHigh = -Infinity;
  for (const [step, value] of all) {
    xHigh = Math.max(xHigh, step);
    yLow = Math.min(yLow, value);
    yHigh = Math.max(yHigh, value);
  }
  if (yHigh <= yLow) yHigh = yLow + 1;
  const x = step => margin + (width - 2 * margin) * step / xHigh;
  const y = value => height - 30 - (height - 60) * (value - yLow) / (yHigh - yLow);
  const bottom = y(yLow), top = y(yHigh);
  children.push(element("line", {x1: margin, y1: bottom, x2: width - margin, y2: bottom, stroke: "#888"}, undefined, svgNamespace));
  children.push(element("line", {x1: margin, y1: top, x2: margin, y2: bottom, stroke: "#888"}, undefined, svgNamespace));
  children.push(element("text", {x: 4, y: top + 4, "font-size": 12}, yHigh.toFixed(digits), svgNamespace));
  children.push(element("text", {x: 4, y: bottom, "font-size": 12}, yLow.toFixed(digits), svgNamespace));
  children.push(element("text", {x: width - margin - 40, y: bottom + 18, "font-size": 12}, "step " + xHigh, svgNamespace));
  series.forEach((s, i) => {
    if (s.points.length === 0) return;
    const points = s.points.map(([step, value]) => x(step).toFixed(1) + "," + y(value).toFixed(1)).join(" ");
    children.push(element("polyline", {"data-series": s.name, fill: "none", stroke: s.colour,
                                       "stroke-width": s.dots ? 0 : 1.5, points: points}, undefined, svgNamespace));
    if (s.dots)
      for (const [step, value] of s.points)
        children.push(element("circle", {"data-series": s.name, cx: x(step).toFixed(1), cy: y(value).toFixed(1),
                                         r: 3, fill: s.colour}, undefined, svgNamespace));
    children.push(element("text", {x: width - 170, y: 16 + 16 * i, "font-size": 12, fill: s.colour}, s.name, svgNamespace));
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
    const rows = [
      ["step", last.step], ["train loss", fixed(last.train_loss, 4)], ["held-out loss", fixed(last.eval_loss, 4)],
      ["items/s", fixed(last.items_per_second, 0)], ["bits/param", fixed(last.bits_per_parameter, 1)],
      ["bytes sent (step)", last.bytes], ["hidden", fixed(100 * last.hidden_fraction, 1) + "%"],
      ["learning rate", Number(last.learning_rate).toPrecision(4)], ["gradient norm", Number(last.gradient_norm).toPrecision(4)],
      ["workers", last.workers], ["epoch", last.epoch]];
    if (last.vote_agreement !== undefined) rows.push(["vote agreement", fixed(last.vote_agreement, 3)]);
    if (last.consensus_distance !== undefined) rows.push(["consensus distance", fixed(last.consensus_distance, 4)]);
    for (const [name, value] of rows) {
      const row = element("tr", {"data-figure": name});
      row.appendChild(element("th", {}, name));
      row.appendChild(element("td", {}, String(value)));
      figures.push(row);
    }
  }
  replaceChildren(document.getElementById("figures"), figures);

  const pick = column => status.points.map(p => [p[0], p[column]]);
  chart(document.getElementById("loss-chart"),
        [{name: "train loss", colour: "#1f77b4", points: pick(1)},
         {name: "held-out loss", colour: "#ff7f0e", points: status.eval, dots: true}], 4);
  chart(document.getElementById("throughput-chart"), [{name: "items/s", colour: "#2ca02c", points: pick(2)}], 0);
  chart(document.getElementById("hidden-chart"),
        [{name: "hidden %", colour: "#9467bd", points: pick(3).map(([s, v]) => [s, 100 * v])}], 1);

  const workers = (last ? last.per_worker : []).map((w, rank) => {
    const row = element("tr", {"data-rank": rank});
    const busiest = [["compute", w.compute], ["communication", w.communication], ["wait", w.wait]]
                        .reduce((a, b) => (b[1] > a[1] ? b : a))[0];
    for (const value of [rank, fixed(w.compute, 4), fixed(w.communication, 4), fixed(w.wait, 4), busiest])
      row.appendChild(element("td", {}, String(value)));
    return row;
  });
  replaceChildren(document.querySelector("#workers tbody"), workers);

  const staleness = document.getElementById("staleness");
  if (status.staleness.length === 0) {
    replaceChildren(staleness, [element("p", {}, "no stale gradients (only the parameter-server topology applies them)")]);
  } else {
    const table = element("table", {id: "staleness-table"});
    const head = element("tr");
    head.appendChild(element("th", {}, "updates stale"));
    head.appendChild(element("th", {}, "gradients applied (whole job)"));
    table.appendChild(head);
    status.staleness.forEach((count, k) => {
      const row = element("tr", {"data-staleness": k});
      row.appendChild(element("td", {}, String(k)));
      row.appendChild(element("td", {}, String(count)));
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

}  // namespace accord
