// The floor operator's page: one WebSocket, deltas in, commands out; no reload needed.
"use strict";
(function () {
  const params = new URLSearchParams(location.search);
  let token = params.get("token") || sessionStorage.getItem("fleet-token") || "";
  let operator = params.get("operator") || sessionStorage.getItem("fleet-operator") || "operator";
  const tiles = {};      // robot name -> element
  const thumbs = {};     // robot name -> thumbnail version shown
  let socket = null;
  let retry = null;

  const $ = (id) => document.getElementById(id);

  function showLogin(message) {
    $("main").hidden = true;
    $("login").hidden = false;
    $("login-error").textContent = message || "";
    $("login-operator").value = operator;
  }

  $("login").addEventListener("submit", (ev) => {
    ev.preventDefault();
    token = $("login-token").value;
    operator = $("login-operator").value || "operator";
    sessionStorage.setItem("fleet-token", token);
    sessionStorage.setItem("fleet-operator", operator);
    connect();
  });

  function connect() {
    if (!token) { showLogin(""); return; }
    const scheme = location.protocol === "https:" ? "wss" : "ws";
    const url = `${scheme}://${location.host}/ws?token=${encodeURIComponent(token)}` +
      `&operator=${encodeURIComponent(operator)}`;
    let opened = false;
    socket = new WebSocket(url);
    socket.onopen = () => {
      opened = true;
      $("login").hidden = true;
      $("main").hidden = false;
      $("conn").textContent = "live";
      $("conn").className = "conn up";
    };
    socket.onmessage = (ev) => {
      const msg = JSON.parse(ev.data);
      if (msg.type === "delta") apply(msg);
      else if (msg.type === "error") console.warn("fleet:", msg.detail);
    };
    socket.onclose = () => {
      $("conn").textContent = "offline";
      $("conn").className = "conn down";
      if (!opened) { sessionStorage.removeItem("fleet-token"); token = ""; showLogin("token refused"); return; }
      clearTimeout(retry);
      retry = setTimeout(connect, 1000);
    };
  }

  function tileFor(name) {
    if (tiles[name]) return tiles[name];
    const el = $("tile-template").content.firstElementChild.cloneNode(true);
    el.dataset.robot = name;
    el.querySelector(".name").textContent = name;
    el.querySelectorAll("button[data-op]").forEach((b) => {
      b.addEventListener("click", () => send(b.dataset.op, name));
    });
    tiles[name] = el;
    const all = Object.keys(tiles).sort();
    const next = all[all.indexOf(name) + 1];
    $("tiles").insertBefore(el, next ? tiles[next] : null);
    return el;
  }

  function pct(x) { return x === null || x === undefined ? "–" : `${Math.round(x * 100)}%`; }

  function render(r) {
    const el = tileFor(r.name);
    const mode = r.lost ? "lost" : r.mode;
    const badge = el.querySelector(".mode");
    badge.textContent = r.lost ? "LOST" : (r.takeover_requested ? "takeover" : r.mode);
    badge.className = `mode ${mode}`;
    el.classList.toggle("lost", r.lost);
    el.dataset.mode = mode;
    el.dataset.updates = r.updates;
    el.dataset.episode = r.episode;
    el.dataset.tick = r.tick;
    el.querySelector(".task").textContent = r.task;
    el.querySelector(".task").title = `${r.driver} ${r.endpoint}`;
    el.querySelector(".fill").style.width = `${Math.round((r.progress || 0) * 100)}%`;
    el.querySelector(".success").textContent = `success ${pct(r.predicted_success)}`;
    el.querySelector(".idle").textContent = `idle ${r.idle_s.toFixed(1)} s`;
    el.querySelector(".controller").textContent = r.controller || "nobody";
    el.querySelector(".episode").textContent = `ep ${r.episode} · ${r.episode_step}`;
    if (r.thumb_version && thumbs[r.name] !== r.thumb_version) {
      thumbs[r.name] = r.thumb_version;
      el.querySelector("img").src =
        `/thumb/${encodeURIComponent(r.name)}?token=${encodeURIComponent(token)}&v=${r.thumb_version}`;
    }
  }

  function apply(msg) {
    for (const r of Object.values(msg.robots)) render(r);
    const byRobot = {};
    for (const a of msg.alerts) (byRobot[a.robot] = byRobot[a.robot] || []).push(a);
    for (const [name, el] of Object.entries(tiles)) {
      const kinds = (byRobot[name] || []).map((a) => a.kind);
      for (const k of ["stall", "predicted_failure", "error", "lost"]) {
        el.classList.toggle(`alert-${k}`, kinds.includes(k));
      }
      el.dataset.alerts = kinds.join(" ");
      el.querySelector(".flags").textContent = (byRobot[name] || []).map((a) => a.detail).join("; ");
    }
    const alerts = $("alerts");
    alerts.replaceChildren(...msg.alerts.map((a) => {
      const li = document.createElement("li");
      li.className = `alert kind-${a.kind}`;
      li.dataset.robot = a.robot;
      li.dataset.kind = a.kind;
      li.textContent = `${a.robot}: ${a.kind.replace("_", " ")} — ${a.detail}`;
      return li;
    }));
    $("alert-count").textContent = msg.alerts.length ? `(${msg.alerts.length})` : "";
    const queue = $("queue");
    queue.replaceChildren(...msg.queue.map((q) => {
      const li = document.createElement("li");
      li.className = "request";
      li.dataset.robot = q.robot;
      li.dataset.request = q.request;
      li.textContent = `${q.request} ${q.robot} (${q.reason.replace("_", " ")}) `;
      const b = document.createElement("button");
      b.textContent = q.request;
      b.addEventListener("click", () => send(q.request, q.robot));
      li.appendChild(b);
      return li;
    }));
    $("queue-count").textContent = msg.queue.length ? `(${msg.queue.length})` : "";
    const names = Object.keys(tiles);
    const lost = names.filter((n) => tiles[n].classList.contains("lost")).length;
    $("summary").textContent =
      `${names.length} robots · ${lost} lost · ${msg.alerts.length} alerts · ${msg.queue.length} requests`;
  }

  function send(op, robot) {
    if (socket && socket.readyState === WebSocket.OPEN) socket.send(JSON.stringify({ op, robot }));
  }

  connect();
})();
