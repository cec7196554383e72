// SPDX-License-Identifier: MIT
//
// The node's web view: the mesh from GET /v1/mesh (every peer's state, as
// this node sees it, polled every 2 s) and this node's transfers from the
// GET /v1/events websocket, with wire and effective speed over time.
// Plain DOM and canvas: no framework, nothing fetched from elsewhere.
//
// The token comes as #token=SECRET in the address (a fragment never goes
// to a server), is kept in this tab's sessionStorage and taken out of the
// address bar.  fetch() sends it as Authorization; a browser's websocket
// cannot send headers, so it goes as the subprotocol dmar.token.HEX.
// The rows carry data-* attributes (state, bytes) for tests and scripts.
"use strict";

const MESH_POLL_MS = 2000;
const CHART_SECONDS = 120;
const RECONNECT_MS = 2000;

const $ = (id) => document.getElementById(id);
let token = sessionStorage.getItem("dmar.token") || "";

function takeToken() {
  const m = /(?:^#|&)token=([^&]*)/.exec(location.hash);
  if (!m) return;
  token = decodeURIComponent(m[1]);
  sessionStorage.setItem("dmar.token", token);
  history.replaceState(null, "", location.pathname + location.search);
}

// ---- formatting -----------------------------------------------------------

function bytes(n) {
  if (n === undefined || n === null || n < 0) return "-";
  const u = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(n < 10 ? 2 : 1) : n) + " " + u[i];
}
const mbps = (x) => (x === undefined || x === null ? "-" : x.toFixed(x < 10 ? 2 : 1) + " MB/s");

function cell(tr, text, cls) {
  const td = document.createElement("td");
  td.textContent = text;
  if (cls) td.className = cls;
  tr.appendChild(td);
  return td;
}

function bar(td, done, total) {
  const b = document.createElement("div");
  b.className = "bar";
  const f = document.createElement("div");
  const frac = total > 0 ? Math.min(1, done / total) : 0;
  f.style.width = (100 * frac).toFixed(1) + "%";
  const s = document.createElement("span");
  s.textContent = bytes(done) + " / " + bytes(total) + " (" + Math.round(100 * frac) + " %)";
  b.append(f, s);
  td.appendChild(b);
}

// ---- talking to the node ---------------------------------------------------

function needToken(why) {
  $("main").hidden = true;
  $("login").hidden = false;
  $("login-why").textContent = why;
  setLink("down", "no token");
}

async function api(path) {
  const r = await fetch(path, { headers: token ? { Authorization: "Bearer " + token } : {}, cache: "no-store" });
  if (r.status === 401) {
    needToken(token ? "The node refused this token." : "This node needs its token.");
    throw new Error("401");
  }
  if (!r.ok) throw new Error(path + ": HTTP " + r.status);
  return r.json();
}

function setLink(state, text) {
  const l = $("link");
  l.dataset.state = state;
  l.textContent = text;
}

// ---- the mesh ---------------------------------------------------------------

function renderMesh(m) {
  $("self").textContent = m.node;
  document.title = "dmarfs " + m.node;
  const body = $("nodes").tBodies[0];
  body.textContent = "";
  for (const n of m.nodes) {
    const tr = document.createElement("tr");
    tr.dataset.node = n.name;
    tr.dataset.reachable = n.reachable ? "true" : "false";
    cell(tr, n.name + (n.self ? " (this node)" : ""));
    cell(tr, n.address + (n.url && n.url.startsWith("https:") ? " https" : ""));
    if (!n.reachable) {
      cell(tr, "unreachable", "state-down");
      const td = cell(tr, n.error + " (" + n.errno + ")");
      td.colSpan = 4;
    } else {
      const i = n.node || {};
      const a = i.arena || {};
      const x = i.transfers || {};
      cell(tr, "reachable", "state-up");
      cell(tr, n.ms === undefined ? "-" : n.ms.toFixed(1) + " ms", "num");
      tr.dataset.used = a.used;
      tr.dataset.size = a.size;
      bar(cell(tr, ""), a.used, a.size);
      cell(tr, i.store ? String(i.store.chunks) : "-", "num");
      cell(tr, (x.done || 0) + " / " + (x.failed || 0), "num");
    }
    body.appendChild(tr);
  }
  $("mesh-age").textContent = "Probed by " + m.node + " at " + new Date().toLocaleTimeString() + ".";
}

let polling = false; // one poll loop, stopped by a 401 until a token comes

async function pollMesh() {
  polling = true;
  try {
    renderMesh(await api("/v1/mesh"));
    $("login").hidden = true;
    $("main").hidden = false;
  } catch (e) {
    if (e.message === "401") {
      polling = false;
      return;
    }
    setLink("down", "node unreachable: " + e.message);
  }
  setTimeout(pollMesh, MESH_POLL_MS);
}

// ---- transfers, from the event stream ----------------------------------------

const transfers = new Map(); // id -> {ev, row, last}
let window1 = { eff: 0, wire: 0 }; // bytes moved since the last chart sample
let progressEvents = 0;

function transferRow(t) {
  const ev = t.ev;
  const tr = t.row || document.createElement("tr");
  tr.textContent = "";
  tr.dataset.id = ev.id;
  tr.dataset.state = t.state;
  tr.dataset.logical = ev.logical_bytes;
  tr.dataset.size = ev.size;
  tr.dataset.wire = ev.wire_bytes;
  cell(tr, ev.path + (ev.dest && ev.dest !== ev.path ? " \u2192 " + ev.dest : ""));
  cell(tr, ev.to);
  bar(cell(tr, ""), ev.logical_bytes, ev.size);
  cell(tr, mbps(ev.effective_MBps), "num");
  cell(tr, mbps(ev.wire_MBps), "num");
  cell(tr, bytes(ev.wire_bytes), "num");
  cell(tr, t.state + (ev.error ? ": " + ev.error : ""), t.state === "failed" ? "state-down" : "");
  if (!t.row) {
    t.row = tr;
    const body = $("transfers").tBodies[0];
    body.insertBefore(tr, body.firstChild);
    while (body.rows.length > 50) body.deleteRow(-1);
  }
  $("no-transfers").hidden = true;
}

function onTransfer(ev) {
  let t = transfers.get(ev.id);
  if (!t) {
    t = { last: { logical: 0, wire: 0 } };
    transfers.set(ev.id, t);
  }
  t.ev = ev;
  t.state = ev.type === "transfer.done" ? "done" : ev.type === "transfer.failed" ? "failed" : "running";
  // what moved since this transfer's last event, for the chart
  window1.eff += Math.max(0, (ev.logical_bytes || 0) - t.last.logical);
  window1.wire += Math.max(0, (ev.wire_bytes || 0) - t.last.wire);
  t.last = { logical: ev.logical_bytes || 0, wire: ev.wire_bytes || 0 };
  if (ev.type === "transfer.progress") document.body.dataset.progressEvents = ++progressEvents;
  transferRow(t);
}

function onEvent(ev) {
  if (ev.type === "hello") {
    $("self").textContent = ev.node;
  } else if (ev.type && ev.type.startsWith("transfer.")) {
    onTransfer(ev);
  } else if (ev.type === "arena") {
    const tr = document.querySelector('#nodes tr[data-node="' + CSS.escape($("self").textContent) + '"]');
    if (tr && tr.cells[4]) {
      tr.cells[4].textContent = "";
      bar(tr.cells[4], ev.used, ev.size);
    }
  }
}

function hex(s) {
  return Array.from(new TextEncoder().encode(s), (b) => b.toString(16).padStart(2, "0")).join("");
}

function connectEvents() {
  const url = (location.protocol === "https:" ? "wss://" : "ws://") + location.host + "/v1/events";
  const ws = new WebSocket(url, token ? ["dmar.v1", "dmar.token." + hex(token)] : ["dmar.v1"]);
  ws.onopen = () => setLink("live", "live");
  ws.onmessage = (m) => {
    try { onEvent(JSON.parse(m.data)); } catch (e) { /* not ours: skip */ }
  };
  ws.onclose = () => {
    setLink("down", "event stream closed: reconnecting");
    setTimeout(connectEvents, RECONNECT_MS);
  };
}

// ---- the chart: wire and effective speed, a sample a second -----------------

const samples = []; // {eff, wire} in MB/s, oldest first
let lastSample = performance.now();

function sample() {
  const now = performance.now();
  const s = Math.max(0.001, (now - lastSample) / 1000);
  lastSample = now;
  samples.push({ eff: window1.eff / s / 1e6, wire: window1.wire / s / 1e6 });
  window1 = { eff: 0, wire: 0 };
  while (samples.length > CHART_SECONDS) samples.shift();
  draw();
}

function niceMax(v) {
  if (v <= 0) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 5, 10]) if (v <= m * p) return m * p;
  return 10 * p;
}

function draw() {
  const c = $("chart");
  const g = c.getContext("2d");
  const W = c.width, H = c.height, L = 64, R = 10, T = 10, B = 24;
  const peak = samples.reduce((m, x) => Math.max(m, x.eff, x.wire), 0);
  const top = niceMax(peak);
  c.dataset.samples = samples.length;
  c.dataset.peakEffective = samples.reduce((m, x) => Math.max(m, x.eff), 0).toFixed(3);
  c.dataset.peakWire = samples.reduce((m, x) => Math.max(m, x.wire), 0).toFixed(3);
  g.clearRect(0, 0, W, H);
  g.setLineDash([]);
  g.font = "11px system-ui, sans-serif";
  g.fillStyle = "#4a5568";
  g.strokeStyle = "#d9dee5";
  g.lineWidth = 1;
  for (let k = 0; k <= 4; k++) {
    const y = T + (H - T - B) * (1 - k / 4);
    g.beginPath();
    g.moveTo(L, y);
    g.lineTo(W - R, y);
    g.stroke();
    g.fillText(((top * k) / 4).toPrecision(3) + " MB/s", 4, y + 4);
  }
  g.fillText("-" + CHART_SECONDS + " s", L, H - 6);
  g.fillText("now", W - R - 22, H - 6);
  const css = getComputedStyle(document.documentElement);
  for (const [key, color] of [["eff", "--eff"], ["wire", "--wire"]]) {
    g.strokeStyle = css.getPropertyValue(color).trim();
    g.lineWidth = 2;
    // dashed, so that wire shows where it equals effective (new data)
    g.setLineDash(key === "wire" ? [6, 4] : []);
    g.beginPath();
    samples.forEach((x, i) => {
      const px = L + ((W - L - R) * (CHART_SECONDS - samples.length + i)) / (CHART_SECONDS - 1);
      const py = T + (H - T - B) * (1 - x[key] / top);
      if (i) g.lineTo(px, py);
      else g.moveTo(px, py);
    });
    g.stroke();
  }
}

// ---- start -----------------------------------------------------------------

$("login").addEventListener("submit", (e) => {
  e.preventDefault();
  token = $("token").value.trim();
  sessionStorage.setItem("dmar.token", token);
  $("token").value = "";
  start();
});

let started = false;
function start() {
  if (!polling) pollMesh();
  if (!started) {
    started = true;
    connectEvents();
    setInterval(sample, 1000);
  }
}

// a token pasted into the address of an open page
window.addEventListener("hashchange", () => {
  takeToken();
  start();
});
takeToken();
start();
