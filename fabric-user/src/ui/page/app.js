// The live view: polls /api/view and recolours and relabels the server's picture by element id.
// The picture itself (and the first view) come with the page, so this only keeps it current.
"use strict";

const POLL_MS = 1000;
let layoutKey = null;
let selected = null;

const byId = (id) => document.getElementById(id);

function el(tag, attrs, text) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}

function row(cells, header) {
  const tr = el("tr");
  for (const c of cells) {
    const td = el(header ? "th" : "td");
    if (c instanceof Node) td.appendChild(c); else td.textContent = c;
    tr.appendChild(td);
  }
  return tr;
}

function fmt(x, digits) {
  return Number(x).toFixed(digits);
}

function setDir(id, dir) {
  const line = byId(id);
  if (!line) return;
  line.setAttribute("stroke", dir.colour);
  line.setAttribute("data-util", fmt(dir.util, 3));
}

function setText(id, text) {
  const t = byId(id);
  if (t && t.textContent !== text) t.textContent = text;
}

function setTitle(g, text) {
  const t = g && g.querySelector("title");
  if (t) t.textContent = text;
}

function dirTitle(name, d) {
  return `${name}: ${fmt(d.gbps, 1)} Gbit/s (${fmt(d.util * 100, 0)}%), ECN ${d.ecn}, PFC frames ${d.pauses}, drops ${d.drops}`;
}

function renderLinks(view) {
  for (const l of view.links) {
    setDir(l.id + "/up", l.up_dir);
    setDir(l.id + "/down", l.down_dir);
    setText(l.id + "/label", l.label);
    setText(l.id + "/marks", l.marks);
    const g = byId("link-" + l.id);
    if (g) {
      g.classList.toggle("down", !l.up);
      g.classList.toggle("degraded", l.up && l.degraded !== "");
      const state = l.up ? (l.degraded ? ` (DEGRADED: ${l.degraded})` : "") : " (DOWN)";
      setTitle(g, `${l.id}${state}\n${dirTitle("up", l.up_dir)}\n${dirTitle("down", l.down_dir)}`);
    }
  }
  for (const s of view.switches) {
    const g = byId("node-" + s.name);
    if (!g) continue;
    g.classList.toggle("unhealthy", !s.healthy);
    setTitle(g, s.healthy ? s.name : `${s.name}: ${s.problems.join("; ")}`);
  }
}

function renderJob(job) {
  const box = byId("job");
  box.replaceChildren();
  if (!job) {
    box.textContent = "no job running";
    return;
  }
  box.appendChild(el("div", {}, `${job.collective} (${job.job_id}): iteration ${job.iteration}/${job.iterations}, step ${job.step}/${job.steps}`));
  const bar = el("div", { class: "progress" });
  bar.appendChild(el("div", { style: `width:${fmt(job.fraction * 100, 1)}%` }));
  box.appendChild(bar);
}

function renderJobs(jobs) {
  const table = byId("jobs");
  table.replaceChildren();
  table.dataset.rendered = "script";
  if (!jobs || jobs.length === 0) {
    table.appendChild(row(["no jobs run"]));
    return;
  }
  table.appendChild(row(["job", "state", "steps", "iterations", "last ms"], true));
  for (const j of jobs) {
    const bar = el("span", { class: "progress inline" });
    bar.appendChild(el("span", { style: `width:${fmt(j.fraction * 100, 1)}%` }));
    const steps = el("span", {}, `${j.steps_done}/${j.steps} `);
    steps.appendChild(bar);
    const last = j.last_completion_ms === null ? "" : fmt(j.last_completion_ms, 1);
    const tr = row([j.name, j.state, steps, j.iterations_done, last]);
    tr.id = "job-" + j.name;
    tr.className = j.state;
    table.appendChild(tr);
  }
}

function renderTotals(t) {
  const table = byId("totals");
  table.replaceChildren();
  const rows = [
    ["ECN marks", t.ecn_marked],
    ["PFC frames received", t.pfc_frames_received],
    ["PFC XOFF sent", t.pfc_xoff_sent],
    ["paused (ms, wall)", fmt(t.paused_ns / 1e6, 1)],
    ["queue overflow drops", t.overflow_drops],
    ["watchdog storms", t.watchdog_storms],
    ["deepest queue (KiB)", fmt(t.max_depth_bytes / 1024, 0)],
  ];
  for (const r of rows) table.appendChild(row(r));
}

function renderBalance(balance) {
  const table = byId("balance");
  table.replaceChildren(row(["RTSW", "max/mean", "Jain", "Gbit/s per uplink"], true));
  for (const b of balance) {
    const bars = el("span");
    const most = Math.max(1e-9, ...b.uplinks.map((u) => u[1]));
    for (const [port, gbps] of b.uplinks) {
      const bar = el("span", { class: "bar", title: `${port}: ${fmt(gbps, 1)} Gbit/s`, style: `width:${4 + Math.round((36 * gbps) / most)}px` });
      if (gbps < 0.05) bar.style.background = "#b8c0c8";
      bars.appendChild(bar);
    }
    const mm = el("span", b.max_over_mean > 1.5 ? { class: "bad" } : {}, fmt(b.max_over_mean, 2));
    table.appendChild(row([b.rtsw, mm, fmt(b.jain, 3), bars]));
  }
}

function render(view) {
  const status = byId("status");
  status.className = "status " + view.status;
  status.textContent = view.message;
  document.body.classList.toggle("stale", view.status === "down");
  const drawn = byId("svg-holder").querySelector("svg") !== null;
  // `layoutKey` is the key of the picture this script fetched; the one the page came with is
  // fetched again once (its key is unknown: the page may have been opened while the testbed was
  // down and then built again differently).
  if (view.status !== "down" && (!drawn || view.layout_key !== layoutKey)) {
    // A different (or rebuilt) testbed: fetch its picture again.
    layoutKey = view.layout_key;
    fetch("/api/topology.svg", { cache: "no-store" })
      .then((r) => r.text())
      .then((svg) => {
        byId("svg-holder").innerHTML = svg;
        hookSwitches();
      });
    return;
  }
  renderLinks(view);
  renderJob(view.job);
  renderJobs(view.jobs);
  renderTotals(view.totals);
  renderBalance(view.balance);
  if (selected) showSwitch(selected);
}

function showSwitch(name) {
  fetch("/api/switch/" + encodeURIComponent(name), { cache: "no-store" })
    .then((r) => (r.ok ? r.json() : null))
    .then((d) => {
      byId("detail-title").textContent = "Switch " + name;
      const box = byId("detail");
      box.replaceChildren();
      if (!d) {
        box.textContent = "no counters for it now";
        return;
      }
      for (const p of d.health.problems) box.appendChild(el("div", { class: "problem" }, p));
      if (!d.stats) return;
      const t = el("table", { class: "ports" });
      t.appendChild(row(["port", "up", "rx MB", "tx MB", "drops", "ECN", "PFC rx", "queue KiB"], true));
      for (const p of d.stats.ports) {
        const sum = (f) => p.classes.reduce((a, c) => a + c[f], 0);
        const drops = Object.values(p.drops).reduce((a, b) => a + b, 0) + sum("overflow_drops");
        const up = p.up ? "yes" : el("span", { class: "bad" }, "DOWN");
        t.appendChild(row([p.port, up, fmt(p.rx_bytes / 1e6, 1), fmt(p.tx_bytes / 1e6, 1), drops, sum("ecn_marked"), p.rx_pfc_frames, fmt(sum("depth_bytes") / 1024, 1)]));
      }
      box.appendChild(t);
    })
    .catch(() => {});
}

// Clicking a switch keeps its ports shown (and refreshed) until it is clicked again.
function select(name) {
  for (const s of document.querySelectorAll(".node.selected")) s.classList.remove("selected");
  selected = selected === name ? null : name;
  const g = byId("node-" + name);
  if (selected && g) g.classList.add("selected");
  showSwitch(name);
}

function hookSwitches() {
  for (const g of document.querySelectorAll(".node")) {
    const name = g.getAttribute("data-name");
    if (g.getAttribute("data-role") === "host") continue;
    g.addEventListener("mouseenter", () => { if (!selected) showSwitch(name); });
    g.addEventListener("click", () => select(name));
  }
}

function poll() {
  fetch("/api/view", { cache: "no-store" })
    .then((r) => r.json())
    .then(render)
    .catch(() => {
      const status = byId("status");
      status.className = "status down";
      status.textContent = "the view's server does not answer (fabric ui stopped?); retrying";
    })
    .finally(() => setTimeout(poll, POLL_MS));
}

render(JSON.parse(byId("initial-view").textContent));
hookSwitches();
// `?switch=NAME` opens with that switch selected (a link to it, and the browser test).
const preselected = new URLSearchParams(location.search).get("switch");
if (preselected) select(preselected);
setTimeout(poll, POLL_MS);
