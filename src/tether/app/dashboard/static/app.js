// tether hub dashboard: reads /api/events (server-sent events over fetch, so the token can go in
// a header) and renders the model. Every value from the hub is set with textContent, never as
// HTML. No framework, no build step.
"use strict";

const TOKEN_KEY = "tether-dashboard-token";
let offset = 0; // server clock minus this browser's, seconds
let controller = null;
let retryTimer = null;

function $(id) { return document.getElementById(id); }

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (key === "class") node.className = value;
    else if (key.startsWith("data-")) node.setAttribute(key, value);
    else if (key === "title") node.title = value;
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function age(seconds) {
  if (seconds === null || seconds === undefined) return "-";
  let s = Math.max(0, Math.floor(Date.now() / 1000 + offset - seconds));
  if (s >= 2 * 86400) return Math.floor(s / 86400) + "d";
  if (s >= 2 * 3600) return Math.floor(s / 3600) + "h";
  if (s >= 60) return Math.floor(s / 60) + "m";
  return s + "s";
}

function ageCell(seconds, suffix) {
  const node = el("span", { class: "age" }, age(seconds) + (suffix || ""));
  if (seconds !== null && seconds !== undefined) {
    node.dataset.ts = String(seconds);
    node.dataset.suffix = suffix || "";
  }
  return node;
}

function tickAges() {
  for (const node of document.querySelectorAll(".age[data-ts]")) {
    node.textContent = age(Number(node.dataset.ts)) + node.dataset.suffix;
  }
}

function statusBadge(status, reason, message) {
  const cls = status === "True" || status === "yes" ? "ok" : (status === "pending" || status === "Unknown" ? "warn" : "bad");
  return el("span", { class: "badge " + cls, title: message || "" }, status + (reason ? " (" + reason + ")" : ""));
}

function table(headers, rows, attrs) {
  const head = el("tr", {}, ...headers.map((h) => el("th", {}, h)));
  return el("table", attrs || {}, el("thead", {}, head), el("tbody", {}, ...rows));
}

function renderClusters(clusters) {
  const body = $("clusters-table").tBodies[0];
  body.replaceChildren(...clusters.map((c) => {
    const nodes = c.nodes_total === null ? "-" : c.nodes_ready + "/" + c.nodes_total + " ready";
    const alloc = c.allocatable.map(([k, v]) => k + " " + v).join(", ") || "-";
    const where = [c.region, c.zones.join(",")].filter(Boolean).join(" / ") || "-";
    const heartbeat = c.heartbeat_s === null ? "-" : ageCell(c.heartbeat_s, " ago (" + c.heartbeat_kind + ")");
    const labels = c.labels.map(([k, v]) => el("span", { class: "label" }, k + "=" + v));
    return el("tr", { "data-cluster": c.name, "data-ready": c.ready },
      el("td", { class: "name" }, c.name, el("div", { class: "labels" }, ...labels)),
      el("td", {}, c.mode),
      el("td", { class: "ready" }, statusBadge(c.ready, c.ready_reason, c.ready_message)),
      el("td", {}, c.version || "-"),
      el("td", {}, heartbeat),
      el("td", {}, nodes),
      el("td", {}, alloc),
      el("td", { class: "where" }, where),
      el("td", {}, c.taints.join(", ") || "-"),
      el("td", { class: "error" }, c.probe_error || "-"));
  }));
  $("clusters-empty").hidden = clusters.length > 0;
}

function renderObjects(objects) {
  $("objects").replaceChildren(...objects.map((o) => {
    const key = (o.namespace ? o.namespace + "/" : "") + o.kind + "/" + o.name;
    const cond = o.condition ? statusBadge(o.condition.status, o.condition.reason, o.condition.message) : null;
    const rows = o.placements.map((p) => el("tr", { "data-cluster": p.cluster, "data-applied": p.applied },
      el("td", {}, p.cluster),
      el("td", { class: "applied" }, statusBadge(p.applied, "", p.message)),
      el("td", {}, p.reason || "-"),
      el("td", { class: "observed" }, p.observed),
      el("td", {}, p.latency_s === null ? "-" : p.latency_s.toFixed(2) + "s"),
      el("td", { class: "message" }, p.message || "")));
    return el("div", { class: "object", "data-object": key },
      el("h3", {}, o.kind + " ", el("span", { class: "ref" }, (o.namespace ? o.namespace + "/" : "") + o.name),
        el("span", { class: "dialect" }, o.dialect), cond),
      rows.length ? table(["Cluster", "Applied", "Reason", "Observed", "Time to propagate", "Why not"], rows)
        : el("p", { class: "empty" }, "not propagated to any cluster"));
  }));
  $("objects-empty").hidden = objects.length > 0;
}

function renderTunnel(t) {
  if (!t) {
    $("tunnel").replaceChildren(el("p", { class: "empty" }, "This hub runs no tunnel server (--tunnel-agent-port)."));
    return;
  }
  const kib = (n) => (n / 1024).toFixed(1) + " KiB";
  const failures = t.dial_failures.map(([r, n]) => r + " " + n).join(", ") || "none";
  $("tunnel").replaceChildren(table(["Agents", "Open connections", "Pending dials", "Bytes to agents",
    "Bytes from agents", "CONNECTs refused", "Dial failures"], [el("tr", {},
    el("td", {}, t.agents.join(", ") || "none"), el("td", {}, t.established), el("td", {}, t.pending_dials),
    el("td", {}, kib(t.bytes_to_agents)), el("td", {}, kib(t.bytes_from_agents)),
    el("td", {}, t.connects_refused), el("td", {}, failures))]));
}

function renderMirrors(mirrors) {
  if (!mirrors.length) {
    $("mirror-list").replaceChildren(el("p", { class: "empty" }, "No MirrorPolicy."));
    return;
  }
  $("mirror-list").replaceChildren(table(["Policy", "Ready", "Members"], mirrors.map((m) => el("tr", {},
    el("td", {}, m.name), el("td", {}, statusBadge(m.ready, m.reason, m.message)),
    el("td", {}, m.clusters.map(([c, rs]) => c + " \u2190 " + (rs.join(", ") || "-")).join("; ") || "-")))));
}

function renderMesh(peers) {
  if (!peers.length) {
    $("mesh-list").replaceChildren(el("p", { class: "empty" }, "No cluster reports a mesh (tether mesh)."));
    return;
  }
  $("mesh-list").replaceChildren(table(["Cluster", "Mesh", "Message"], peers.map((p) => el("tr", {},
    el("td", {}, p.cluster), el("td", {}, statusBadge(p.status, p.reason, p.message)), el("td", {}, p.message)))));
}

function renderDns(records) {
  if (!records.length) {
    $("dns-list").replaceChildren(el("p", { class: "empty" }, "No DNSEndpoint (KubeFed's ServiceDNSRecord / IngressDNSRecord)."));
    return;
  }
  $("dns-list").replaceChildren(table(["Name", "Type", "Targets", "TTL", "DNSEndpoint"], records.map((r) =>
    el("tr", { "data-dns": r.dns_name }, el("td", {}, r.dns_name), el("td", {}, r.record_type),
      el("td", {}, r.targets.join(", ") || "-"), el("td", {}, r.ttl === null ? "-" : r.ttl),
      el("td", {}, r.endpoint)))));
}

function render(model) {
  offset = model.now_s - Date.now() / 1000;
  renderClusters(model.clusters);
  renderObjects(model.objects);
  renderTunnel(model.tunnel);
  renderMirrors(model.mirrors);
  renderMesh(model.mesh);
  renderDns(model.dns);
  $("updated").textContent = "updated " + new Date((model.now_s) * 1000).toLocaleTimeString();
  document.body.dataset.rendered = String(Number(document.body.dataset.rendered || "0") + 1);
}

function setState(text, cls) {
  const node = $("state");
  node.textContent = text;
  node.className = "badge " + cls;
}

function showLogin(message) {
  $("main").hidden = true;
  $("login").hidden = false;
  $("signout").hidden = true;
  $("who").textContent = "";
  if (message) $("login-reason").textContent = message;
  setState("signed out", "warn");
}

function headers() {
  const token = sessionStorage.getItem(TOKEN_KEY);
  return token ? { Authorization: "Bearer " + token } : {};
}

async function whoami() {
  const answer = await fetch("/api/whoami", { headers: headers(), cache: "no-store" });
  if (answer.ok) {
    const who = await answer.json();
    $("who").textContent = "as " + who.username;
  }
}

function scheduleRetry() {
  if (retryTimer === null) retryTimer = setTimeout(() => { retryTimer = null; connect(); }, 2000);
}

async function connect() {
  if (controller) controller.abort();
  controller = new AbortController();
  const signal = controller.signal;
  let answer;
  try {
    answer = await fetch("/api/events", { headers: headers(), signal, cache: "no-store" });
  } catch (err) {
    if (signal.aborted) return;
    setState("reconnecting", "warn");
    scheduleRetry();
    return;
  }
  if (answer.status === 401 || answer.status === 403) {
    let message = "";
    try { message = (await answer.json()).message || ""; } catch (err) { message = ""; }
    showLogin(message);
    return;
  }
  if (!answer.ok || !answer.body) {
    setState("hub answered " + answer.status, "bad");
    scheduleRetry();
    return;
  }
  $("login").hidden = true;
  $("main").hidden = false;
  $("signout").hidden = !sessionStorage.getItem(TOKEN_KEY);
  setState("live", "ok");
  whoami().catch(() => {});
  const reader = answer.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += value;
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const block = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        let event = "message";
        const data = [];
        for (const line of block.split("\n")) {
          if (line.startsWith("event:")) event = line.slice(6).trim();
          else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
        }
        if (event === "model" && data.length) render(JSON.parse(data.join("\n")));
        if (event === "unauthorized") { controller.abort(); showLogin("The hub no longer lets you see this dashboard."); return; }
      }
    }
  } catch (err) {
    if (signal.aborted) return;
  }
  if (signal.aborted) return;
  setState("reconnecting", "warn");
  scheduleRetry();
}

function signIn() {
  const token = $("token").value.trim();
  if (!token) return;
  sessionStorage.setItem(TOKEN_KEY, token);
  $("token").value = "";
  connect();
}

function signOut() {
  sessionStorage.removeItem(TOKEN_KEY);
  if (controller) controller.abort();
  showLogin("Signed out.");
}

document.addEventListener("DOMContentLoaded", () => {
  $("signin").addEventListener("click", signIn);
  $("token").addEventListener("keydown", (e) => { if (e.key === "Enter") signIn(); });
  $("signout").addEventListener("click", signOut);
  setInterval(tickAges, 1000);
  if (sessionStorage.getItem(TOKEN_KEY)) $("login").hidden = true; // no sign-in flash on reload
  connect();
});
