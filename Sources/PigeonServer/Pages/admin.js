"use strict";
(function () {
  const TOKEN_KEY = "pigeon-admin-token";
  const SVG = "http://www.w3.org/2000/svg";
  const MAX_SAMPLES = 300;
  const state = { token: sessionStorage.getItem(TOKEN_KEY), samples: [], lastAt: null, timer: null, deadLetterTimer: null, conversationTimer: null, webhookTimer: null, conversationId: null, deadLetterCount: null, generation: 0 };
  const $ = (id) => document.getElementById(id);

  class ApiError extends Error {
    constructor(kind, message, status) { super(message); this.kind = kind; this.status = status; }
  }

  async function api(method, path) {
    let response;
    try {
      response = await fetch(path, { method: method, headers: { "Authorization": "Bearer " + state.token }, cache: "no-store" });
    } catch (error) {
      throw new ApiError("unreachable", "The server is unreachable (" + error.message + "). Retrying every second…");
    }
    let body = null;
    try { body = await response.json(); } catch (_) { body = null; }
    if (response.status === 401) {
      throw new ApiError("unauthorized", "The server refused this admin token (401 unauthorized). Enter the token it was started with.", 401);
    }
    if (!response.ok) {
      const detail = body && body.error ? body.error.code + ": " + body.error.message : "HTTP " + response.status;
      throw new ApiError("error", detail, response.status);
    }
    return body;
  }

  function setStatus(kind, message) {
    const status = $("status");
    status.dataset.state = kind;
    status.textContent = message || "";
  }

  function setNumber(id, value, text) {
    const element = $(id);
    element.dataset.value = value === null || value === undefined ? "" : String(value);
    element.textContent = text !== undefined ? text : (value === null || value === undefined ? "–" : String(value));
  }

  function formatBytes(bytes) {
    if (bytes < 1024) return bytes + " B";
    const units = ["KiB", "MiB", "GiB", "TiB"];
    let value = bytes / 1024;
    let unit = 0;
    while (value >= 1024 && unit < units.length - 1) { value /= 1024; unit += 1; }
    return (value >= 100 ? Math.round(value) : Math.round(value * 10) / 10) + " " + units[unit];
  }

  function formatRate(value) { return value >= 100 ? String(Math.round(value)) : String(Math.round(value * 10) / 10); }

  function formatAge(millis) {
    if (millis < 1000) return "just now";
    if (millis < 60000) return (millis / 1000).toFixed(1) + " s ago";
    if (millis < 3600000) return Math.round(millis / 60000) + " min ago";
    return Math.round(millis / 3600000) + " h ago";
  }

  function formatTime(millis) { return new Date(millis).toLocaleTimeString(); }

  function cell(row, text, className) {
    const td = document.createElement("td");
    td.textContent = text;
    if (className) td.className = className;
    row.appendChild(td);
    return td;
  }

  function svgElement(name, attributes) {
    const element = document.createElementNS(SVG, name);
    for (const key in attributes) element.setAttribute(key, String(attributes[key]));
    return element;
  }

  // A line chart of `series` ([{values, className}]) over the samples' times, newest at the right; an
  // `integral` one (counts) keeps its grid on whole numbers.
  function drawChart(id, series, integral) {
    const svg = $(id);
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    const width = 600, height = 170, top = 8, bottom = 150, left = 40, right = 596;
    let max = 0;
    for (const line of series) for (const value of line.values) if (value !== null && value > max) max = value;
    const ceiling = max <= 0 ? 1 : niceCeiling(max);
    const scale = integral ? 4 * Math.ceil(ceiling / 4) : ceiling;
    for (let step = 0; step <= 4; step++) {
      const y = bottom - (bottom - top) * step / 4;
      svg.appendChild(svgElement("line", { x1: left, x2: right, y1: y, y2: y, class: "grid" }));
      const label = svgElement("text", { x: left - 4, y: y + 4, "text-anchor": "end", class: "axis" });
      label.textContent = String(Number((scale * step / 4).toPrecision(3)));
      svg.appendChild(label);
    }
    const count = MAX_SAMPLES;
    const first = svgElement("text", { x: left, y: height - 4, class: "axis" });
    first.textContent = "−5 min";
    svg.appendChild(first);
    const last = svgElement("text", { x: right, y: height - 4, "text-anchor": "end", class: "axis" });
    last.textContent = "now";
    svg.appendChild(last);
    for (const line of series) {
      const values = line.values;
      const points = [];
      values.forEach((value, index) => {
        if (value === null) return;
        const x = right - (right - left) * (values.length - 1 - index) / (count - 1);
        const y = bottom - (bottom - top) * Math.min(value, scale) / scale;
        points.push(x.toFixed(1) + "," + y.toFixed(1));
      });
      if (points.length === 1) points.push(points[0]);
      svg.appendChild(svgElement("polyline", { points: points.join(" "), class: line.className }));
    }
  }

  function niceCeiling(value) {
    const magnitude = Math.pow(10, Math.floor(Math.log10(value)));
    for (const factor of [1, 2, 2.5, 5, 10]) if (factor * magnitude >= value) return factor * magnitude;
    return 10 * magnitude;
  }

  function render(stats) {
    $("node-line").textContent = "node " + stats.nodeId + " · up since " + new Date(stats.startedAt).toLocaleString() + " · server time " + formatTime(stats.serverTime);
    for (const key of ["accepted", "stored", "delivered", "deadLettered"]) {
      setNumber("rate-" + key, stats.rates[key], formatRate(stats.rates[key]));
      setNumber("total-" + key, stats.totals[key]);
    }
    setNumber("total-retried", stats.totals.retried);
    setNumber("total-rejected", stats.totals.rejected);
    setNumber("buffer-depth", stats.bufferDepth);
    setNumber("streams-websocket", stats.openStreams.websocket);
    setNumber("streams-sse", stats.openStreams.sse);
    setNumber("dead-letter-count", stats.deadLetters, stats.deadLetters === null ? "?" : String(stats.deadLetters));
    const attachments = stats.attachments;
    setNumber("attachment-bytes", attachments ? attachments.bytes : null, attachments ? formatBytes(attachments.bytes) : "?");
    setNumber("attachment-count", attachments ? attachments.count : null);
    setNumber("attachment-orphans", attachments ? attachments.orphans : null);
    setNumber("attachment-orphan-bytes", attachments ? attachments.orphanBytes : null, attachments ? formatBytes(attachments.orphanBytes) : "?");
    $("latency-window").textContent = "last " + stats.latency.windowSeconds + " s";
    for (const kind of ["acceptToStored", "storedToDelivered"]) {
      const quantiles = stats.latency[kind];
      for (const q of ["p50", "p90", "p99"]) setNumber("latency-" + kind + "-" + q, quantiles[q], quantiles[q] === null ? "–" : quantiles[q] + " ms");
      setNumber("latency-" + kind + "-count", quantiles.count);
    }
    renderNodes(stats);
    const samples = state.samples;
    drawChart("chart-rates", [
      { values: samples.map((s) => s.accepted), className: "accepted" },
      { values: samples.map((s) => s.stored), className: "stored" },
      { values: samples.map((s) => s.delivered), className: "delivered" },
      { values: samples.map((s) => s.deadLettered), className: "failed" },
    ]);
    drawChart("chart-depth", [{ values: samples.map((s) => s.bufferDepth), className: "depth" }], true);
    drawChart("chart-streams", [
      { values: samples.map((s) => s.openStreams.websocket), className: "ws" },
      { values: samples.map((s) => s.openStreams.sse), className: "sse" },
    ], true);
    drawChart("chart-latency", [
      { values: samples.map((s) => s.acceptToStored.p99), className: "stored" },
      { values: samples.map((s) => s.storedToDelivered.p99), className: "delivered" },
    ]);
    if (stats.deadLetters !== null && stats.deadLetters !== state.deadLetterCount) {
      state.deadLetterCount = stats.deadLetters;
      loadDeadLetters();
    }
  }

  function renderNodes(stats) {
    const body = $("nodes");
    while (body.firstChild) body.removeChild(body.firstChild);
    for (const node of stats.nodes) {
      const row = document.createElement("tr");
      const age = Math.max(0, stats.serverTime - node.lastHeartbeatAt);
      row.dataset.nodeId = node.nodeId;
      row.dataset.heartbeatAge = String(age);
      if (age > 10000) row.className = "stale";
      cell(row, node.nodeId + (node.thisNode ? " (this node)" : ""), "id");
      cell(row, formatAge(age) + " · " + formatTime(node.lastHeartbeatAt));
      body.appendChild(row);
    }
  }

  async function poll(generation) {
    if (generation !== state.generation) return;
    try {
      const path = "/v1/admin/stats" + (state.lastAt === null ? "" : "?since=" + state.lastAt);
      const stats = await api("GET", path);
      if (generation !== state.generation) return;
      for (const sample of stats.samples) state.samples.push(sample);
      if (state.samples.length > MAX_SAMPLES) state.samples.splice(0, state.samples.length - MAX_SAMPLES);
      if (state.samples.length > 0) state.lastAt = state.samples[state.samples.length - 1].at;
      setStatus("ok", "");
      render(stats);
    } catch (error) {
      if (!handleError(error)) return;
    }
    state.timer = setTimeout(() => poll(generation), 1000);
  }

  // Shows the error; answers whether polling goes on (not after a refused token).
  function handleError(error) {
    if (error.kind === "unauthorized") {
      showLogin(error.message);
      return false;
    }
    setStatus(error.kind === "unreachable" ? "unreachable" : "error", error.kind === "unreachable" ? error.message : "The server answered an error: " + error.message);
    return true;
  }

  async function loadDeadLetters() {
    try {
      const list = await api("GET", "/v1/admin/dead-letters?limit=100");
      renderDeadLetters(list.deadLetters);
    } catch (error) {
      if (error.kind === "unauthorized") { showLogin(error.message); return; }
      $("dead-letter-status").textContent = "Could not list the dead letters: " + error.message;
    }
  }

  function renderDeadLetters(deadLetters) {
    const body = $("dead-letters");
    while (body.firstChild) body.removeChild(body.firstChild);
    $("dead-letters-empty").hidden = deadLetters.length > 0;
    for (const letter of deadLetters) {
      const message = letter.message;
      const row = document.createElement("tr");
      row.dataset.serverId = message.serverId;
      cell(row, formatTime(letter.failedAt));
      cell(row, message.serverId, "id");
      cell(row, message.conversationId, "id");
      cell(row, message.senderId + " / " + message.senderDeviceId);
      cell(row, letter.error.code + ": " + letter.error.message);
      const bodyCell = cell(row, message.body, "body");
      bodyCell.title = message.body;
      const actions = cell(row, "");
      const button = document.createElement("button");
      button.type = "button";
      button.className = "replay";
      button.dataset.serverId = message.serverId;
      button.textContent = "Replay";
      button.addEventListener("click", () => replay(message.serverId, button));
      actions.appendChild(button);
      body.appendChild(row);
    }
  }

  async function replay(serverId, button) {
    button.disabled = true;
    try {
      await api("POST", "/v1/admin/dead-letters/" + encodeURIComponent(serverId) + "/replay");
      $("dead-letter-status").textContent = "Replayed " + serverId + ": back in the buffer, to be stored with the conversation's next seq.";
    } catch (error) {
      if (error.kind === "unauthorized") { showLogin(error.message); return; }
      $("dead-letter-status").textContent = "Replay of " + serverId + " failed: " + error.message;
      button.disabled = false;
    }
    await loadDeadLetters();
  }

  // Webhooks: the outbox's state (GET /v1/admin/webhooks) and its dead letters (GET /v1/admin/webhooks/dead), each
  // with a button that sends it again with the same id (POST /v1/admin/webhooks/{id}/replay). Refreshed every 5 s.
  async function loadWebhooks() {
    clearTimeout(state.webhookTimer);
    try {
      const overview = await api("GET", "/v1/admin/webhooks");
      $("webhook-endpoint").textContent = overview.endpoint === null ? "no endpoint (--webhook is not set)" : overview.endpoint;
      setNumber("webhook-pending", overview.pending);
      setNumber("webhook-dead", overview.dead);
      $("webhook-oldest").textContent = overview.oldestPendingAt === null ? "none"
        : Math.max(0, Math.round((overview.serverTime - overview.oldestPendingAt) / 1000)) + " s";
      const list = await api("GET", "/v1/admin/webhooks/dead?limit=100");
      renderDeadWebhooks(list.deadWebhooks);
    } catch (error) {
      if (error.kind === "unauthorized") { showLogin(error.message); return; }
      $("webhook-status").textContent = "Could not read the webhooks: " + error.message;
    }
    state.webhookTimer = setTimeout(loadWebhooks, 5000);
  }

  function renderDeadWebhooks(events) {
    const body = $("dead-webhooks");
    while (body.firstChild) body.removeChild(body.firstChild);
    $("dead-webhooks-empty").hidden = events.length > 0;
    for (const event of events) {
      const row = document.createElement("tr");
      row.dataset.eventId = event.id;
      cell(row, formatTime(event.deadAt));
      cell(row, event.id, "id");
      cell(row, event.type);
      cell(row, event.orderingKey, "id");
      cell(row, String(event.attempts));
      const error = cell(row, event.lastError, "body");
      error.title = event.body;
      const actions = cell(row, "");
      const button = document.createElement("button");
      button.type = "button";
      button.className = "replay-webhook";
      button.dataset.eventId = event.id;
      button.textContent = "Replay";
      button.addEventListener("click", () => replayWebhook(event.id, button));
      actions.appendChild(button);
      body.appendChild(row);
    }
  }

  async function replayWebhook(id, button) {
    button.disabled = true;
    try {
      await api("POST", "/v1/admin/webhooks/" + encodeURIComponent(id) + "/replay");
      $("webhook-status").textContent = "Replayed " + id + ": pending again, sent with the same id after its conversation's pending events.";
    } catch (error) {
      if (error.kind === "unauthorized") { showLogin(error.message); return; }
      $("webhook-status").textContent = "Replay of " + id + " failed: " + error.message;
      button.disabled = false;
    }
    await loadWebhooks();
  }

  async function lookUpConversation(id) {
    try {
      const conversation = await api("GET", "/v1/admin/conversations/" + encodeURIComponent(id));
      if (state.conversationId !== id) return;
      $("conversation-error").textContent = "";
      renderConversation(conversation);
    } catch (error) {
      if (error.kind === "unauthorized") { showLogin(error.message); return; }
      if (state.conversationId !== id) return;
      $("conversation-result").hidden = true;
      $("conversation-error").textContent = error.status === 404 ? "No conversation with this id." : error.message;
      return;
    }
    clearTimeout(state.conversationTimer);
    state.conversationTimer = setTimeout(() => { if (state.conversationId === id) lookUpConversation(id); }, 2000);
  }

  function renderConversation(conversation) {
    $("conversation-result").hidden = false;
    $("conversation-result").dataset.conversationId = conversation.conversationId;
    setNumber("conversation-last-seq", conversation.lastSeq);
    $("conversation-kind").textContent = conversation.kind;
    $("conversation-name").textContent = conversation.name === null ? "" : "“" + conversation.name + "”";
    const behind = $("conversation-behind");
    behind.dataset.value = conversation.behind.join(",");
    behind.textContent = conversation.behind.length === 0 ? "no one" : conversation.behind.join(", ");
    const body = $("conversation-members");
    while (body.firstChild) body.removeChild(body.firstChild);
    for (const member of conversation.members) {
      const row = document.createElement("tr");
      row.dataset.userId = member.userId;
      row.dataset.deliveredSeq = String(member.deliveredSeq);
      row.dataset.readSeq = String(member.readSeq);
      row.dataset.behind = String(member.behind);
      if (member.behind) row.className = "behind";
      cell(row, member.userId);
      cell(row, member.role);
      cell(row, String(member.joinedSeq));
      cell(row, String(member.deliveredSeq), "delivered-seq");
      cell(row, String(member.readSeq), "read-seq");
      const undelivered = cell(row, String(member.undelivered));
      if (member.behind) {
        const badge = document.createElement("span");
        badge.className = "badge behind";
        badge.textContent = "behind";
        undelivered.appendChild(document.createTextNode(" "));
        undelivered.appendChild(badge);
      }
      const devices = cell(row, "");
      for (const device of member.devices) {
        const badge = document.createElement("span");
        badge.className = "badge" + (device.online ? " online" : "");
        badge.dataset.deviceId = device.deviceId;
        badge.dataset.online = String(device.online);
        badge.textContent = (device.name || device.deviceId.slice(0, 8)) + (device.online ? " · online" : " · offline");
        badge.title = device.deviceId + ", last seen " + new Date(device.lastSeenAt).toLocaleString();
        devices.appendChild(badge);
      }
      body.appendChild(row);
    }
  }

  function showLogin(message) {
    state.generation++;
    clearTimeout(state.timer);
    clearTimeout(state.conversationTimer);
    clearTimeout(state.webhookTimer);
    state.token = null;
    sessionStorage.removeItem(TOKEN_KEY);
    $("dashboard").hidden = true;
    $("forget-token").hidden = true;
    $("login").hidden = false;
    setStatus(message ? "unauthorized" : "idle", message || "");
    $("token-input").focus();
  }

  function start() {
    state.generation++;
    state.samples = [];
    state.lastAt = null;
    state.deadLetterCount = null;
    $("login").hidden = true;
    $("dashboard").hidden = false;
    $("forget-token").hidden = false;
    setStatus("idle", "");
    poll(state.generation);
    loadDeadLetters();
    loadWebhooks();
  }

  $("token-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const token = $("token-input").value.trim();
    if (!token) return;
    state.token = token;
    sessionStorage.setItem(TOKEN_KEY, token);
    $("token-input").value = "";
    start();
  });
  $("forget-token").addEventListener("click", () => showLogin(""));
  $("dead-letters-refresh").addEventListener("click", () => loadDeadLetters());
  $("webhooks-refresh").addEventListener("click", () => loadWebhooks());
  $("conversation-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const id = $("conversation-id").value.trim();
    if (!id) return;
    state.conversationId = id;
    clearTimeout(state.conversationTimer);
    lookUpConversation(id);
  });

  if (state.token) start(); else showLogin("");
})();
