// The controller's web view: plain JS and SVG, nothing fetched but this controller's /api.
// Link states arrive by push (/api/live, Server-Sent Events) as the controller's events
// happen; the page reads the fabric again only when the stream (re)starts or says `resync`.
"use strict";

const SVG = "http://www.w3.org/2000/svg";
// One hue per rail (ToRs, and spines of a rail plane); switches of every rail are grey.
const RAIL_COLOURS = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948",
  "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac", "#1b9e77", "#7570b3"];
const STATES = [
  ["up", "up"], ["down", "down"], ["hold_down", "hold-down"], ["damped", "damped"],
  ["unknown", "unknown"], ["drained", "drained (operator)"], ["miswired", "miswired (LLDP)"],
  ["latency_outlier", "latency outlier"],
];
// Counters come in the agents' periodic reports, which are no events: an open switch page
// reads them again this often (link and session changes still arrive by push).
const SWITCH_REFRESH_MS = 5000;
const TELEMETRY_REFRESH_MS = 5000;

const state = {
  summary: null,        // /api/fabric
  scope: { rail: "", pod: "" },
  links: new Map(),     // key -> link
  switchName: null,     // the switch page shown, or null
  switchTimer: null,
  summaryTimer: null,
  latencyOutliers: new Set(),  // cables the latency heat map points at
};

function railColour(rail) {
  return rail >= 0 ? RAIL_COLOURS[rail % RAIL_COLOURS.length] : "#c8c8c8";
}

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  for (const c of children) node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return node;
}

// A colour sample. Set through the CSSOM: the page's Content-Security-Policy allows no inline
// style attribute.
function swatch(colour) {
  const span = el("span", { class: "swatch" });
  span.style.background = colour;
  return span;
}

function svgEl(tag, attrs = {}) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  return node;
}

async function getJson(path) {
  const reply = await fetch(path, { cache: "no-store" });
  const body = await reply.json();
  if (!reply.ok) throw Object.assign(new Error(body.error || reply.statusText), { status: reply.status });
  return body;
}

function when(wallNs) {
  if (!wallNs) return "-";
  return new Date(Number(wallNs) / 1e6).toISOString().replace("T", " ").replace("Z", " UTC");
}

function notice(text) {
  const box = document.getElementById("notice");
  box.hidden = !text;
  box.textContent = text || "";
}

// -- the fabric page ---------------------------------------------------------------------

async function loadAll() {
  try {
    state.summary = await getJson("/api/fabric");
  } catch (err) {
    notice(err.status === 503 ? "The controller is starting; waiting for it." : `Cannot read the fabric: ${err.message}`);
    setTimeout(loadAll, 1000);
    return;
  }
  notice("");
  renderSummary();
  await loadView();
  if (state.switchName) await loadSwitch();
}

function renderSummary() {
  const s = state.summary;
  document.getElementById("fabric-name").textContent = s.fabric;
  renderCounts(s);
  renderRailTable(s);
  renderSummaryPanels(s);
}

function renderCounts(s) {
  const st = s.links_by_state;
  document.getElementById("counts").textContent =
    `${s.counts.switches} switches (${s.roles.tor} ToRs, ${s.roles.spine} spines, ${s.roles.core} cores), ` +
    `${s.counts.links} links: ${st.up} up, ${st.down} down, ${st.hold_down} held down, ` +
    `${st.damped} damped, ${st.unknown} unknown, ${st.drained} drained; ${s.sessions} agent sessions`;
}

function renderSummaryPanels(s) {
  renderAlarms(s.alarms);
  renderTelemetry(s.telemetry);
  const bar = document.getElementById("scope-bar");
  bar.hidden = s.draw_whole;
  if (!s.draw_whole) {
    fillSelect("rail-select", s.rails.map((r) => r.rail), "rail");
    fillSelect("pod-select", s.pods.map((p) => p.pod), "pod");
    if (state.scope.rail === "" && s.rails.length) state.scope.rail = String(s.rails[0].rail);
    if (state.scope.pod === "" && s.pods.length) state.scope.pod = String(s.pods[0].pod);
    document.getElementById("rail-select").value = state.scope.rail;
    document.getElementById("pod-select").value = state.scope.pod;
    document.getElementById("scope-note").textContent =
      `${s.counts.links} links are too many to draw at once: one rail and pod at a time`;
  }
}

function fillSelect(id, values, what) {
  const select = document.getElementById(id);
  const have = [...select.options].map((o) => o.value).join(",");
  const want = ["", ...values.map(String)].join(",");
  if (have === want) return;
  select.replaceChildren(el("option", { value: "" }, `every ${what}`),
    ...values.map((v) => el("option", { value: String(v) }, String(v))));
}

function renderRailTable(s) {
  const table = document.getElementById("rail-table");
  const names = ["up", "down", "hold_down", "damped", "unknown"];
  const heads = { hold_down: "held" };
  const head = el("tr", {}, el("th", {}, "rail"), ...names.map((n) => el("th", {}, heads[n] || n)));
  const rows = s.rails.map((r) => el("tr", {},
    el("td", {}, swatch(railColour(r.rail)), ` ${r.rail}`),
    ...names.map((n) => el("td", { class: `num${r.links_by_state[n] && n !== "up" ? ` state state-${n}` : ""}` },
      r.links_by_state[n]))));
  table.replaceChildren(head, ...rows);
}

function renderAlarms(alarms) {
  document.getElementById("alarm-count").textContent = `(${alarms.total})`;
  const list = document.getElementById("alarms");
  if (!alarms.alarms.length) {
    list.replaceChildren(el("li", { class: "sev-SEVERITY_INFO" }, "no active alarm"));
    return;
  }
  const items = alarms.alarms.map((a) => el("li", { "data-alarm": a.id },
    el("span", { class: `sev-${a.severity}` }, a.severity.replace("SEVERITY_", "").toLowerCase()),
    ` ${a.kind} `, a.switch_name ? switchLink(a.switch_name) : "", a.port ? `:${a.port}` : "",
    ` — ${a.message} (${when(a.raised_wall_ns)})`));
  if (alarms.total > alarms.alarms.length) items.push(el("li", {}, `… and ${alarms.total - alarms.alarms.length} more`));
  list.replaceChildren(...items);
}

function renderTelemetry(telemetry) {
  for (const [name, what] of Object.entries(telemetry)) {
    const panel = document.querySelector(`[data-telemetry="${name}"]`);
    if (!panel) continue;
    const note = panel.querySelector(".not-measured");
    if (what.data === null) {
      if (note) { note.hidden = false; note.textContent = what.status; }
      panel.querySelectorAll("table.matrix, p.matrix-sample, ol.outliers").forEach((n) => n.remove());
      if (name === "latency_heatmap") markOutlierLinks([]);
      continue;
    }
    if (note) note.hidden = true;
    if (name === "traffic_matrix") renderMatrix(panel, what.data);
    if (name === "latency_heatmap") renderHeat(panel, what.data);
  }
}

// The heat map's colour scale: p99 RTT on a log scale, green at HEAT_LOW_NS and below, red at
// HEAT_HIGH_NS and above (absolute, so a cell changes colour when it slows, whatever the rest).
const HEAT_LOW_NS = 10e3;
const HEAT_HIGH_NS = 10e6;

function heatColour(ns) {
  if (!ns) return "#f0f0f0";
  const frac = Math.min(1, Math.max(0, Math.log(ns / HEAT_LOW_NS) / Math.log(HEAT_HIGH_NS / HEAT_LOW_NS)));
  return `hsl(${Math.round(120 * (1 - frac))}, 70%, 72%)`;
}

const us = (ns) => (ns / 1e3).toFixed(1);

// The latency heat map by rail pair: p99 RTT (µs) of the mesh probes, sources down (the tail:
// one slow uplink of a rail's ToRs moves it, where the median moves only when most probes
// are slow); outlier cells outlined; then the outlier cables, ranked, marked on the drawing.
function renderHeat(panel, data) {
  const cells = new Map(data.cells.map((c) => [`${c.src_rail}>${c.dst_rail}`, c]));
  const head = el("tr", {}, el("th", {}, "p99 µs"), ...data.rails.map((r) => el("th", {}, `to rail ${r}`)));
  const rows = data.rails.map((src) => el("tr", {},
    el("th", {}, `rail ${src}`),
    ...data.rails.map((dst) => {
      const c = cells.get(`${src}>${dst}`);
      if (!c) return el("td", { class: "idle", "data-heat": `${src}>${dst}` }, "–");
      const td = el("td", {
        class: c.outlier ? "heat outlier" : "heat", "data-heat": `${src}>${dst}`, "data-p99-ns": String(c.p99_ns),
        title: `p50 ${us(c.p50_ns)} µs, p99 ${us(c.p99_ns)} µs, baseline p99 ${c.baseline_p99_ns ? us(c.baseline_p99_ns) : "–"} µs, ` +
          `${c.samples} samples, ${(c.loss * 100).toFixed(1)}% lost`,
      }, us(c.p99_ns));
      td.style.background = heatColour(c.p99_ns);
      return td;
    })));
  const table = el("table", { class: "matrix heat" }, el("thead", {}, head), el("tbody", {}, ...rows));
  const sample = el("p", { class: "matrix-sample" },
    `over the last ${data.window_s.toFixed(0)} s, ${data.reports} reports; colour: p99 from ` +
    `${us(HEAT_LOW_NS)} µs (green) to ${us(HEAT_HIGH_NS)} µs (red); outlined: an outlier`);
  const outliers = el("ol", { class: "outliers" }, ...data.outliers.map((o) =>
    el("li", { "data-outlier": o.link }, `${o.link} — ${o.reason.replace("_", " ")}` +
      (o.p50_ns ? `, p50 ${us(o.p50_ns)} µs` : "") + (o.bad_pairs ? `, ${o.bad_pairs} bad ToR pairs` : ""))));
  if (data.outlier_count > data.outliers.length) outliers.append(el("li", {}, `… and ${data.outlier_count - data.outliers.length} more (railctl latency)`));
  panel.querySelectorAll("table.matrix, p.matrix-sample, ol.outliers").forEach((n) => n.remove());
  panel.append(table, sample, outliers);
  markOutlierLinks(data.outliers.map((o) => o.link));
}

// The outlier cables on the drawing (and kept for lines drawn later).
function markOutlierLinks(keys) {
  state.latencyOutliers = new Set(keys);
  document.querySelectorAll("line.link").forEach((line) =>
    line.setAttribute("data-latency-outlier", String(state.latencyOutliers.has(line.dataset.key))));
}

// The traffic matrix by rail, Mb/s: sources down, destinations across.
function renderMatrix(panel, data) {
  const rate = new Map(data.cells.map((c) => [`${c.src_rail}>${c.dst_rail}`, c.bytes_per_s]));
  const mbps = (bytes) => (bytes * 8 / 1e6).toFixed(3);
  const head = el("tr", {}, el("th", {}, "Mb/s"), ...data.rails.map((r) => el("th", {}, `to rail ${r}`)));
  const rows = data.rails.map((src) => el("tr", {},
    el("th", {}, `rail ${src}`),
    ...data.rails.map((dst) => {
      const bytes = rate.get(`${src}>${dst}`) || 0;
      return el("td", { class: bytes > 0 ? "busy" : "idle", "data-cell": `${src}>${dst}` }, mbps(bytes));
    })));
  const table = el("table", { class: "matrix" }, el("thead", {}, head), el("tbody", {}, ...rows));
  const [lo, hi] = data.window_s;
  const sample = el("p", { class: "matrix-sample" },
    `${data.tors_measured} ToRs measured over ${lo.toFixed(1)}–${hi.toFixed(1)} s` +
    (data.tors_unmeasured ? `; ${data.tors_unmeasured} not yet` : ""));
  panel.querySelectorAll("table.matrix, p.matrix-sample").forEach((n) => n.remove());
  panel.append(table, sample);
}

function switchLink(name) {
  return el("a", { href: `#/switch/${encodeURIComponent(name)}` }, name);
}

async function loadView() {
  const s = state.summary;
  const params = new URLSearchParams();
  if (!s.draw_whole) {
    if (state.scope.rail !== "") params.set("rail", state.scope.rail);
    if (state.scope.pod !== "") params.set("pod", state.scope.pod);
  }
  let switches = [];
  const links = [];
  let offset = 0;
  for (;;) {
    params.set("offset", String(offset));
    const page = await getJson(`/api/view?${params}`);
    if (page.switches) switches = page.switches;
    links.push(...page.links);
    if (page.next_offset === null) break;
    offset = page.next_offset;
  }
  state.links = new Map(links.map((l) => [l.key, l]));
  draw(switches, links);
}

// Tiers from the top: cores, spines, ToRs. ToRs are grouped by rail (the rail is what the
// fabric is built around), then pod and block; spines by rail plane and pod.
function draw(switches, links) {
  const svg = document.getElementById("fabric");
  const tiers = { core: [], spine: [], tor: [], unknown: [] };
  for (const sw of switches) (tiers[sw.role] || tiers.unknown).push(sw);
  const order = (a, b) => (a.rail - b.rail) || (a.pod - b.pod) || (a.block - b.block) || a.name.localeCompare(b.name);
  tiers.tor.sort(order);
  tiers.spine.sort(order);
  tiers.core.sort((a, b) => a.name.localeCompare(b.name));
  const rows = ["core", "spine", "tor"].filter((t) => tiers[t].length);
  const widest = Math.max(1, ...rows.map((t) => tiers[t].length));
  const gap = widest > 64 ? 14 : 140;
  const width = Math.max(600, widest * gap + 120);
  const rowGap = 140;
  const height = rows.length * rowGap + 20;
  const pos = new Map();
  rows.forEach((tier, i) => {
    const list = tiers[tier];
    const step = (width - 120) / list.length;
    list.forEach((sw, j) => pos.set(sw.name, { x: 100 + step * (j + 0.5), y: 50 + i * rowGap, sw }));
  });
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  // Drawn at its own size (a large rail scrolls), never stretched past it.
  svg.setAttribute("width", String(width));
  svg.setAttribute("height", String(height));
  svg.style.maxWidth = widest > 64 ? "none" : "";
  const linkLayer = svgEl("g", { class: "links" });
  for (const link of links) {
    const a = pos.get(link.a);
    const b = pos.get(link.b);
    if (!a || !b) continue;
    const line = svgEl("line", { x1: a.x, y1: a.y, x2: b.x, y2: b.y, class: "link" });
    setLinkAttrs(line, link);
    linkLayer.append(line);
  }
  const nodeLayer = svgEl("g", { class: "nodes" });
  const labels = widest <= 64;
  rows.forEach((tier, i) => {
    const label = svgEl("text", { x: 8, y: 54 + i * rowGap, class: "tier-label" });
    label.textContent = tier === "tor" ? "ToRs" : `${tier}s`;
    nodeLayer.append(label);
  });
  for (const { x, y, sw } of pos.values()) {
    const g = svgEl("g", { class: "node", "data-switch": sw.name, "data-role": sw.role, "data-rail": sw.rail,
      "data-connected": sw.connected });
    const size = labels ? 18 : 8;
    const fill = sw.role === "core" ? "#8c8c8c" : sw.role === "spine" && sw.rail < 0 ? "#b8b8b8" : railColour(sw.rail);
    g.append(svgEl("rect", { x: x - size / 2, y: y - size / 2, width: size, height: size, rx: sw.role === "tor" ? 2 : 9, fill }));
    const title = svgEl("title");
    title.textContent = `${sw.name} (${sw.role}${sw.rail >= 0 ? `, rail ${sw.rail}` : ""}${sw.pod >= 0 ? `, pod ${sw.pod}` : ""})` +
      (sw.connected ? "" : ": no agent session");
    g.append(title);
    if (labels) {
      const text = svgEl("text", { x, y: sw.role === "tor" ? y + 26 : y - 14 });
      text.textContent = sw.name;
      g.append(text);
    }
    g.addEventListener("click", () => { location.hash = `#/switch/${encodeURIComponent(sw.name)}`; });
    nodeLayer.append(g);
  }
  svg.replaceChildren(linkLayer, nodeLayer);
}

function setLinkAttrs(line, link) {
  line.setAttribute("data-key", link.key);
  line.setAttribute("data-state", link.state);
  line.setAttribute("data-drained", String(link.drained));
  line.setAttribute("data-miswired", String(link.miswired));
  line.setAttribute("data-latency-outlier", String(state.latencyOutliers.has(link.key)));
  let title = line.querySelector("title");
  if (!title) { title = svgEl("title"); line.append(title); }
  title.textContent = `${link.key}: ${link.state}${link.drained ? ", drained" : ""}${link.miswired ? ", miswired" : ""}` +
    `${link.reason ? ` (${link.reason})` : ""}; since ${when(link.since_wall_ns)}, ${link.flaps} flaps`;
}

function renderLegend() {
  const items = STATES.map(([name, label]) => {
    const colour = getComputedStyle(document.documentElement).getPropertyValue(`--${name}`);
    return el("span", {}, swatch(colour), label);
  });
  items.push(el("span", {}, "ToRs coloured by rail; spines by rail plane; cores grey; a dashed outline: no agent session"));
  document.getElementById("legend").replaceChildren(...items);
}

// -- live updates ------------------------------------------------------------------------

function onLink(link) {
  const old = state.links.get(link.key);
  state.links.set(link.key, link);
  // The header's figures follow at once; per rail they follow with the next read.
  if (old && state.summary) {
    const counts = state.summary.links_by_state;
    counts[old.state] -= 1;
    counts[link.state] += 1;
    counts.drained += Number(link.drained) - Number(old.drained);
    renderCounts(state.summary);
  }
  const line = document.querySelector(`line.link[data-key="${CSS.escape(link.key)}"]`);
  if (line) setLinkAttrs(line, link);
  if (state.switchName && (link.a === state.switchName || link.b === state.switchName)) scheduleSwitch();
  scheduleSummary();
}

function onSwitch(sw) {
  const node = document.querySelector(`g.node[data-switch="${CSS.escape(sw.name)}"]`);
  if (node) node.setAttribute("data-connected", String(sw.connected));
  if (state.switchName === sw.name) scheduleSwitch();
  scheduleSummary();
}

// The figures (counts per rail) follow the changes, read at most once a second.
function scheduleSummary() {
  if (state.summaryTimer) return;
  state.summaryTimer = setTimeout(async () => {
    state.summaryTimer = null;
    try { state.summary = await getJson("/api/fabric"); renderSummary(); } catch (err) { /* the stream says */ }
  }, 1000);
}

// The telemetry is measured, not an event: read again every TELEMETRY_REFRESH_MS.
async function refreshTelemetry() {
  try { renderTelemetry(await getJson("/api/telemetry")); } catch (err) { /* the stream says */ }
  setTimeout(refreshTelemetry, TELEMETRY_REFRESH_MS);
}

function connect() {
  const live = document.getElementById("live");
  const source = new EventSource("/api/live");
  source.addEventListener("hello", () => { live.dataset.live = "live"; live.textContent = "live"; loadAll(); });
  source.addEventListener("resync", () => loadAll());
  source.addEventListener("link", (e) => onLink(JSON.parse(e.data)));
  source.addEventListener("switch", (e) => onSwitch(JSON.parse(e.data)));
  source.addEventListener("alarms", (e) => renderAlarms(JSON.parse(e.data)));
  source.onerror = () => { live.dataset.live = "reconnecting"; live.textContent = "reconnecting"; };
}

// -- a switch's page ---------------------------------------------------------------------

function scheduleSwitch() {
  clearTimeout(state.switchTimer);
  state.switchTimer = setTimeout(loadSwitch, 300);
}

function rate(v, unit) {
  if (v === null || v === undefined) return "-";
  if (unit === "b/s") {
    for (const [div, u] of [[1e9, "Gb/s"], [1e6, "Mb/s"], [1e3, "kb/s"]]) if (v >= div) return `${(v / div).toFixed(1)} ${u}`;
    return `${v.toFixed(0)} b/s`;
  }
  return v.toFixed(1);
}

function peer(p) {
  if (!p || !p.name) return "-";
  return p.nic ? `${p.name}/${p.nic}` : `${p.name}:${p.port}`;
}

async function loadSwitch() {
  const name = state.switchName;
  if (!name) return;
  clearTimeout(state.switchTimer);
  const page = document.getElementById("switch-page");
  let data;
  try {
    data = await getJson(`/api/switches/${encodeURIComponent(name)}`);
  } catch (err) {
    page.replaceChildren(el("p", {}, el("a", { href: "#/" }, "← the fabric")), el("p", { class: "state-down" }, err.message));
    return;
  }
  if (state.switchName !== name) return;
  const st = data.status;
  const facts = [
    ["role", `${data.switch.role}${data.switch.rail >= 0 ? `, rail ${data.switch.rail}` : ""}${data.switch.pod >= 0 ? `, pod ${data.switch.pod}` : ""}`],
    ["agent session", st.connected ? `connected (agent ${st.agent_version || "?"})` : "none"],
    ["converged", st.converged ? "yes" : `no${st.not_converged_reason ? `: ${st.not_converged_reason}` : ""}`],
    ["generation desired / applied", `${st.desired_generation} / ${st.applied_generation}`],
    ["routes, groups", `${st.route_count}, ${st.group_count}`],
    ["last seen", when(st.last_seen_wall_ns)],
  ];
  const cols = ["port", "ifname", "oper", "speed", "plan peer", "LLDP peer", "rx pkt/s", "tx pkt/s", "rx", "tx",
    "drops", "ECN marks", "PFC pause tx/rx", "watchdog storms", "queue depth", "counters at"];
  const rows = data.interfaces.map((i) => {
    const c = i.counters;
    const oper = i.oper.replace("OPER_STATE_", "").toLowerCase();
    return el("tr", { "data-port": i.port },
      el("td", { class: "num" }, i.port), el("td", {}, i.ifname || "-"),
      el("td", { class: `state state-${oper}` }, oper),
      el("td", { class: "num" }, i.speed_mbps ? `${i.speed_mbps / 1000}G` : "-"),
      el("td", {}, peer(i.plan_peer)), el("td", {}, peer(i.lldp_peer)),
      el("td", { class: "num" }, rate(i.rx_packets_per_s)), el("td", { class: "num" }, rate(i.tx_packets_per_s)),
      el("td", { class: "num" }, rate(i.rx_bits_per_s, "b/s")), el("td", { class: "num" }, rate(i.tx_bits_per_s, "b/s")),
      el("td", { class: "num" }, c ? c.drops : "-"), el("td", { class: "num" }, c ? c.ecn_marks : "-"),
      el("td", { class: "num" }, c ? `${c.pfc_pause_tx} / ${c.pfc_pause_rx}` : "-"),
      el("td", { class: "num" }, c ? c.pfc_watchdog_storms : "-"),
      el("td", { class: "num" }, c && c.queue_depth_bytes !== null ? `${c.queue_depth_bytes} B` : c ? "n/a" : "-"),
      el("td", {}, when(i.counters_wall_ns)));
  });
  const linkRows = data.links.map((l) => el("tr", { "data-key": l.key },
    el("td", {}, l.key), el("td", { class: `state state-${l.state}` }, l.state + (l.drained ? ", drained" : "") + (l.miswired ? ", miswired" : "")),
    el("td", {}, l.reason || ""), el("td", {}, when(l.since_wall_ns)), el("td", { class: "num" }, l.flaps)));
  const alarmList = el("ul", {}, ...(data.alarms.alarms.length ? data.alarms.alarms.map((a) =>
    el("li", {}, el("span", { class: `sev-${a.severity}` }, a.kind), ` ${a.port ? `port ${a.port}: ` : ""}${a.message}`))
    : [el("li", {}, "no active alarm")]));
  page.replaceChildren(
    el("p", {}, el("a", { href: "#/" }, "← the fabric")),
    el("h2", {}, name),
    el("section", {}, el("table", { class: "facts" }, ...facts.map(([k, v]) => el("tr", {}, el("td", {}, k), el("td", {}, v))))),
    el("section", {}, el("h3", {}, "Interfaces and counters"),
      el("table", { id: "interfaces" }, el("tr", {}, ...cols.map((c) => el("th", {}, c))), ...rows),
      el("p", { class: "not-measured" }, "- : not reported yet (rates need two counter reports); n/a: the target does not count it")),
    el("section", {}, el("h3", {}, "Links"),
      el("table", { id: "switch-links" }, el("tr", {}, ...["link", "state", "why routing avoids it", "since", "flaps"].map((c) => el("th", {}, c))), ...linkRows)),
    el("section", {}, el("h3", {}, `Alarms (${data.alarms.total})`), alarmList));
  state.switchTimer = setTimeout(loadSwitch, SWITCH_REFRESH_MS);
}

// -- routing between the two pages -------------------------------------------------------

function route() {
  const match = location.hash.match(/^#\/switch\/(.+)$/);
  state.switchName = match ? decodeURIComponent(match[1]) : null;
  clearTimeout(state.switchTimer);
  document.getElementById("fabric-page").hidden = Boolean(state.switchName);
  document.getElementById("switch-page").hidden = !state.switchName;
  if (state.switchName) loadSwitch();
}

document.getElementById("rail-select").addEventListener("change", (e) => { state.scope.rail = e.target.value; loadView(); });
document.getElementById("pod-select").addEventListener("change", (e) => { state.scope.pod = e.target.value; loadView(); });
window.addEventListener("hashchange", route);
renderLegend();
route();
connect();
setTimeout(refreshTelemetry, TELEMETRY_REFRESH_MS);
