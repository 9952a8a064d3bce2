"use strict";
// Pigeon's web demo: two devices of the wire contract (docs/API.md), alice over the WebSocket and bob over SSE and
// HTTP. A sent message's tick follows docs/ARCHITECTURE.md ("The status model") and only the server's evidence:
//   pending ⏰  until an accept answer (202/200, a WebSocket ack) or message.stored;
//   sent ✓ (accepted), stored ✓ (message.stored gave its seq);
//   delivered ✓✓ once the other member's delivered watermark (receipt events) reaches its seq; read, blue ✓✓, likewise;
//   failed ⚠️ when the server refused it (the error code), dead-lettered it, or transient errors used up 3 tries.
// The receiving side acknowledges delivered on arrival and read while its chat is looked at.
// Every message, sent or received, carries its reactions (pills: the key and its count, the device's own highlighted;
// a click toggles it) and can be quoted by a reply. A message's pills are always the server's aggregate: the one of
// the last `reaction` event or react answer, never counted on the page.
// 📎 attaches a file: it is uploaded (POST /v1/attachments, the token in the Authorization header) while its message
// waits ⏰, then sent with the upload's id. Attachments are fetched the same way into blob: URLs: images shown, other
// files downloaded on a click. A token never goes into an attachment's URL.
(() => {
  const EVENT_TYPES = ["message.new", "message.stored", "message.failed", "receipt", "conversation.created", "typing", "reaction", "reset"];
  const PICKER = ["👍", "❤️", "😂", "🎉", "😮"];
  const QUOTED_BODY = 100;
  const TRANSIENT = new Set(["rate_limited", "overloaded", "internal", "request_timeout"]);
  const MAX_TRIES = 3;
  const ACK_TIMEOUT_MS = 10000;
  const SHOWN_BODY = 280;
  // The image types the server serves inline under their own type (docs/API.md "Attachments"): shown as images.
  const INLINE_IMAGES = new Set(["image/png", "image/jpeg", "image/gif", "image/webp"]);
  const TICKS = {
    pending: ["⏰", "waiting: the server has not accepted it yet"],
    sent: ["✓", "sent: the server accepted it (durable)"],
    stored: ["✓", "stored: persisted and ordered"],
    delivered: ["✓✓", "delivered: the other device has it (its delivered receipt came)"],
    read: ["✓✓", "read: the other side read it (its read receipt came)"],
    failed: ["⚠️", "not sent"],
  };

  const $ = (id) => document.getElementById(id);

  function el(tag, attributes = {}, children = []) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attributes)) node.setAttribute(name, value);
    for (const child of [].concat(children)) node.append(child);
    return node;
  }

  // The API's origin: ?api=http://host:port, else this page's own.
  function apiOrigin() {
    const given = new URLSearchParams(location.search).get("api");
    if (given === null || given === "") return location.origin;
    const text = given.endsWith("/") ? given.slice(0, -1) : given;
    if (!/^https?:\/\/[^/?#@\s\\]+$/i.test(text)) {
      throw new Error(`?api=${given} is not an origin: give http://host:port (no path)`);
    }
    return new URL(text).origin;
  }

  function randomBytes(count) {
    const bytes = new Uint8Array(count);
    crypto.getRandomValues(bytes);
    return bytes;
  }

  // A lowercase version 4 UUID (crypto.randomUUID needs a secure context; this does not).
  function newUUID() {
    const bytes = randomBytes(16);
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    const hex = Array.from(bytes, (byte) => byte.toString(16).padStart(2, "0")).join("");
    return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
  }

  function randomSuffix() {
    const letters = "abcdefghijkmnpqrstuvwxyz23456789";
    return Array.from(randomBytes(4), (byte) => letters[byte % letters.length]).join("");
  }

  const short = (id) => String(id).slice(0, 8);
  // "512 B", "1.5 KB", "2.0 MB" (of 1024).
  const sizeText = (bytes) =>
    bytes < 1024 ? `${bytes} B` : bytes < 1024 * 1024 ? `${(bytes / 1024).toFixed(1)} KB` : `${(bytes / (1024 * 1024)).toFixed(1)} MB`;
  // A Content-Type's type/subtype, lowercased, without parameters.
  const mediaType = (contentType) => String(contentType || "").split(";")[0].trim().toLowerCase();
  const clock = (ms) => new Date(ms).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit" });
  const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

  let API;
  let WS_API;
  let conversationId = null;
  let lookingAt = null; // the side whose chat is being read

  class ApiError extends Error {
    constructor(status, code, message) {
      super(`${code} (HTTP ${status}): ${message}`);
      this.code = code;
    }
  }

  // One HTTP call; any status is returned, a network failure throws.
  async function call(token, method, path, body, signal) {
    const headers = {};
    if (token) headers.Authorization = "Bearer " + token;
    const init = { method, headers, cache: "no-store", signal };
    if (body !== undefined) {
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    return answerOf(await fetch(API + path, init));
  }

  // An upload: the file's bytes as the body, under its own type; answered like call().
  async function uploadCall(token, file, signal) {
    const headers = { Authorization: "Bearer " + token, "Content-Type": file.type || "application/octet-stream" };
    const path = `/v1/attachments?name=${encodeURIComponent(file.name)}`;
    return answerOf(await fetch(API + path, { method: "POST", headers, body: file, cache: "no-store", signal }));
  }

  // An attachment's bytes as a Blob (of its type when the server serves it inline), fetched with the token in the
  // Authorization header; an error answer throws an ApiError with the server's code and message.
  async function fetchAttachment(token, id) {
    const response = await fetch(`${API}/v1/attachments/${encodeURIComponent(id)}`, { headers: { Authorization: "Bearer " + token } });
    if (!response.ok) {
      const answer = await answerOf(response);
      const error = errorOf(answer);
      throw new ApiError(answer.status, error.code, error.message);
    }
    return response.blob();
  }

  // An image file's width and height (null when the browser cannot decode it): sent with the attachment, the
  // receiver's hint of its shape.
  async function imageSize(file) {
    if (!INLINE_IMAGES.has(mediaType(file.type)) || typeof createImageBitmap !== "function") return null;
    try {
      const bitmap = await createImageBitmap(file);
      const size = { width: bitmap.width, height: bitmap.height };
      bitmap.close();
      return size;
    } catch {
      return null;
    }
  }

  async function answerOf(response) {
    const text = await response.text();
    let json = null;
    try {
      json = text ? JSON.parse(text) : null;
    } catch {
      json = null;
    }
    return { status: response.status, json, retryAfter: Number(response.headers.get("Retry-After")) || 0 };
  }

  function errorOf(answer) {
    const error = answer.json && answer.json.error;
    return {
      code: error && error.code ? error.code : `http_${answer.status}`,
      message: error && error.message ? error.message : `HTTP ${answer.status}`,
    };
  }

  async function expectStatus(promise, status, what) {
    const answer = await promise;
    if (answer.status !== status) {
      const error = errorOf(answer);
      throw new ApiError(answer.status, error.code, `${what}: ${error.message}`);
    }
    return answer.json;
  }

  function lookAt(side) {
    if (lookingAt === side) return;
    lookingAt = side;
    for (const each of sides) each.renderPane();
    side.syncReceipts();
  }

  // One device: its user, its stream, its outgoing messages and what the server said about them.
  class Side {
    constructor(name, transportKind) {
      this.name = name;
      this.transportKind = transportKind;
      this.userId = null;
      this.deviceId = null;
      this.token = null;
      this.cursor = null; // the last processed event's cursor: where a new stream resumes
      this.online = true; // the page's network switch
      this.connection = "connecting";
      this.everConnected = false;
      this.connects = 0; // streams opened so far
      this.outgoing = new Map(); // clientMessageId → item
      this.queue = []; // clientMessageIds without an answer yet, in sending order
      this.incoming = new Map(); // serverId → { message, node, viaHistory }
      this.seqs = new Set(); // the conversation's seqs this device knows of (its own and the other's)
      this.contiguous = 0; // every seq up to this one is known
      this.peerMarks = { delivered: 0, read: 0 }; // the other member's watermarks, from receipt events
      this.myMarks = { delivered: 0, read: 0 }; // this member's, confirmed by the server
      this.receiptSent = { delivered: 0, read: 0 };
      this.duplicates = 0; // a message.new for a message the stream already gave (never expected)
      this.rows = new Map(); // serverId → a shown message's reactions and quote source: { senderId, body, reactions, parts }
      this.laterReactions = new Map(); // serverId → the aggregate of a reaction event that came before its message was shown
      this.replyingTo = null; // the message the next send quotes: { serverId, senderId, body }
      this.reacting = new Map(); // clientMessageId → a react operation on the WebSocket waiting for its ack or error
      this.events = Promise.resolve();
      this.reconnectTimer = null;
      this.reconnectDelay = 500;
      this.uploadDelay = 500; // the wait before an upload that got no answer goes again
      this.typingSentAt = 0;
      this.typingStopTimer = null;
      this.peerTypingTimer = null;
      this.transport = transportKind === "ws" ? new SocketTransport(this) : new EventSourceTransport(this);
      this.build();
    }

    build() {
      const n = this.name;
      const connection = el("span", { id: `${n}-connection`, class: "connection" });
      const reading = el("span", { id: `${n}-reading`, class: "reading" });
      const unread = el("span", { id: `${n}-unread`, class: "unread" });
      const name = el("strong", { id: `${n}-name`, class: "name" }, n);
      const via = el("span", { class: "via" }, this.transportKind === "ws" ? "WebSocket /v1/ws" : "SSE /v1/events + HTTP");
      const online = el("input", { type: "checkbox", id: `${n}-online`, checked: "" });
      const head = el("header", { class: "side-head" }, [
        el("div", { class: "who" }, [name, via]),
        connection,
        reading,
        unread,
        el("label", { class: "switch", for: `${n}-online` }, [online, " online"]),
      ]);
      const banner = el("div", { id: `${n}-banner`, class: "banner", role: "status" });
      const list = el("ol", { id: `${n}-messages`, class: "messages", tabindex: "0", "aria-label": `${n}'s chat` });
      const typing = el("div", { id: `${n}-typing`, class: "typing", "aria-live": "polite" });
      const replyText = el("span", { id: `${n}-replying-text`, class: "replying-text" });
      const replyCancel = el("button", { type: "button", id: `${n}-replying-cancel`, class: "cancel", title: "do not quote it" }, "×");
      const replying = el("div", { id: `${n}-replying`, class: "replying" }, [replyText, replyCancel]);
      const input = el("input", { id: `${n}-input`, autocomplete: "off", placeholder: `Message as ${n}`, "aria-label": `${n}'s message`, disabled: "" });
      const attach = el(
        "button",
        { id: `${n}-attach`, type: "button", class: "attach", title: "attach a file (sent at once, with the text typed as its caption)", "aria-label": `attach a file as ${n}`, disabled: "" },
        "📎",
      );
      const file = el("input", { id: `${n}-file`, type: "file", class: "file", tabindex: "-1", "aria-label": `${n}'s file to attach`, disabled: "" });
      file.hidden = true;
      const send = el("button", { id: `${n}-send`, type: "submit", disabled: "" }, "Send");
      const form = el("form", { id: `${n}-compose`, class: "compose" }, [input, attach, file, send]);
      const error = el("p", { id: `${n}-error`, class: "error", role: "alert" });
      const wire = el("ol", { id: `${n}-wire` });
      const pane = el("section", { id: n, class: "side", "data-side": n, "data-transport": this.transportKind }, [
        head,
        banner,
        list,
        typing,
        replying,
        form,
        error,
        el("details", { class: "wire" }, [el("summary", {}, "on the wire"), wire]),
      ]);
      banner.hidden = true;
      typing.hidden = true;
      replying.hidden = true;
      replyCancel.addEventListener("click", () => this.quote(null));
      error.hidden = true;
      $("chats").append(pane);
      online.addEventListener("change", () => this.setOnline(online.checked));
      list.addEventListener("pointerdown", () => lookAt(this));
      list.addEventListener("focus", () => lookAt(this));
      input.addEventListener("focus", () => lookAt(this));
      input.addEventListener("input", () => this.typed());
      attach.addEventListener("click", () => {
        lookAt(this);
        file.click();
      });
      // A chosen file goes at once, the input's text (if any) with it.
      file.addEventListener("change", () => {
        const chosen = file.files && file.files[0];
        file.value = ""; // the same file can be chosen again
        if (!chosen || !conversationId) return;
        const text = input.value;
        input.value = "";
        this.send(text, chosen);
      });
      form.addEventListener("submit", (event) => {
        event.preventDefault();
        const text = input.value;
        if (text.trim() === "" || !conversationId) return;
        input.value = "";
        this.send(text);
      });
      this.dom = { pane, name, connection, reading, unread, banner, list, typing, replying, replyText, input, attach, file, send, error, wire };
      this.renderPane();
    }

    // MARK: setting up

    async register() {
      for (let attempt = 1; ; attempt += 1) {
        const userId = `${this.name}-${randomSuffix()}`;
        const answer = await call(null, "POST", "/v1/devices", { userId, deviceName: "web demo" });
        if (answer.status === 201 || answer.status === 200) {
          this.userId = answer.json.userId;
          this.deviceId = answer.json.deviceId;
          this.token = answer.json.token;
          this.dom.name.textContent = this.userId;
          this.dom.pane.dataset.userId = this.userId;
          this.dom.input.placeholder = `Message as ${this.userId}`;
          return;
        }
        if (answer.status === 401 && attempt < 3) continue; // that name has a device already: another one
        const error = errorOf(answer);
        const hint = answer.status === 401 ? " (the demo registers its users itself: it needs open registration, the default of the embedded server on a loopback address, or --open-registration)" : "";
        throw new ApiError(answer.status, error.code, `registering ${userId}: ${error.message}${hint}`);
      }
    }

    enable() {
      for (const control of [this.dom.input, this.dom.attach, this.dom.file, this.dom.send]) control.disabled = false;
    }

    // MARK: the stream

    connect() {
      clearTimeout(this.reconnectTimer);
      this.reconnectTimer = null;
      if (!this.online) return;
      this.setConnection(this.everConnected ? "reconnecting" : "connecting");
      this.wireLog("→", `open ${this.transportKind === "ws" ? "/v1/ws" : "/v1/events"}${this.cursor ? " from cursor " + this.cursor : ""}`);
      this.transport.open(this.cursor);
    }

    connected() {
      this.everConnected = true;
      this.connects += 1;
      this.reconnectDelay = 500;
      this.setConnection("online");
      this.receiptSent = { ...this.myMarks };
      this.flush();
      this.syncReceipts();
      readyCheck();
    }

    // The stream ended without the switch: reconnect from the last cursor, backing off up to 5 s.
    dropped(reason) {
      this.wireLog("×", reason);
      for (const id of this.queue) this.outgoing.get(id).inFlight = false;
      if (!this.online) return;
      this.setConnection("reconnecting");
      clearTimeout(this.reconnectTimer);
      this.reconnectTimer = setTimeout(() => this.connect(), this.reconnectDelay);
      this.reconnectDelay = Math.min(this.reconnectDelay * 2, 5000);
    }

    setOnline(online) {
      if (online === this.online) return;
      if (!online) this.stopTyping();
      this.online = online;
      if (online) {
        this.wireLog("·", "back online");
        this.connect();
        this.flush();
      } else {
        this.wireLog("·", "offline: the stream is closed, sends wait here");
        clearTimeout(this.reconnectTimer);
        this.transport.close();
        for (const id of this.queue) {
          const item = this.outgoing.get(id);
          item.inFlight = false;
          if (item.upload && item.upload.controller) item.upload.controller.abort(); // uploaded again when back
        }
        this.setConnection("offline");
      }
      this.renderPane();
    }

    setConnection(connection) {
      this.connection = connection;
      this.renderPane();
    }

    // Events are handled one at a time, in stream order; the cursor moves once an event is handled.
    enqueue(event) {
      this.events = this.events
        .then(() => this.handle(event))
        .catch((error) => this.showError(`handling ${event.type}: ${error.message}`));
    }

    async handle(event) {
      this.wireLog("←", describe(event));
      switch (event.type) {
        case "message.new":
          await this.onMessageNew(event.message);
          break;
        case "message.stored":
          this.onStored(event);
          break;
        case "message.failed":
          this.onFailed(event);
          break;
        case "receipt":
          this.onReceipt(event);
          break;
        case "typing":
          this.onTyping(event);
          break;
        case "reaction":
          if (event.conversationId === conversationId) this.setReactions(event.serverId, event.reactions);
          break;
        case "reset":
          await this.catchUp();
          break;
        default:
          break;
      }
      if (event.cursor) this.cursor = event.cursor;
    }

    // MARK: sending

    // `file`, when given, is uploaded first: the message waits (⏰) for it, and the ones sent after it wait behind it.
    send(text, file = null) {
      const quoted = this.replyingTo;
      this.quote(null);
      const item = {
        clientMessageId: newUUID(),
        body: text,
        replyTo: quoted ? quoted.serverId : null,
        // What the quote shows: the fields of the replyPreview the other side gets with the message.
        quoted: quoted ? { senderId: quoted.senderId, body: quoted.body, deleted: false } : null,
        clientTimestamp: Date.now(),
        accepted: false,
        serverId: null,
        seq: null,
        failure: null,
        tries: 0,
        inFlight: false,
        notBefore: 0,
        recipientsOnline: null,
        ackTimer: null,
        node: null,
        // The file to upload: waiting (to start, or to go again), uploading, done (its id in attachments), failed.
        upload: file ? { file, state: "waiting", controller: null, size: undefined, id: null, sentBefore: false } : null,
        attachments: [], // what the send carries: [{ id, width?, height? }]
      };
      this.outgoing.set(item.clientMessageId, item);
      this.queue.push(item.clientMessageId);
      this.addOutgoing(item);
      this.stopTyping();
      this.flush();
    }

    flush() {
      if (this.online && conversationId) this.startUploads();
      if (this.online && this.transport.ready() && conversationId) this.transport.flush();
      this.renderPane();
    }

    // Every waiting message's file starts uploading (several at once); the sends still go in order.
    startUploads() {
      for (const id of this.queue) {
        const item = this.outgoing.get(id);
        if (item.upload && item.upload.state === "waiting" && item.notBefore <= Date.now()) this.upload(item);
      }
    }

    // POST /v1/attachments with the file, the token in the Authorization header. 201: the message can go, with the
    // upload's id (and an image's width and height). No answer: it stays ⏰ and goes again (offline: when back). A
    // refusal: ⚠️ with the server's code and message (a transient one is tried again first, like a send), never ✓.
    async upload(item) {
      const upload = item.upload;
      upload.state = "uploading";
      const controller = new AbortController();
      upload.controller = controller;
      this.render(item);
      if (upload.size === undefined) upload.size = await imageSize(upload.file);
      const file = upload.file;
      this.wireLog("→", `POST /v1/attachments ${file.name} (${sizeText(file.size)})${upload.sentBefore ? " (again)" : ""}`);
      upload.sentBefore = true;
      let answer;
      try {
        answer = await uploadCall(this.token, file, controller.signal);
      } catch (error) {
        upload.controller = null;
        upload.state = "waiting";
        if (!this.online || controller.signal.aborted) {
          this.render(item); // switched off: uploaded again when back
          return;
        }
        this.wireLog("×", `upload: no answer (${error.message}): again in ${this.uploadDelay} ms`);
        item.notBefore = Date.now() + this.uploadDelay;
        setTimeout(() => this.flush(), this.uploadDelay);
        this.uploadDelay = Math.min(this.uploadDelay * 2, 5000);
        this.render(item);
        return;
      }
      upload.controller = null;
      this.uploadDelay = 500;
      if (answer.status === 201 && answer.json) {
        const stored = answer.json;
        this.wireLog("←", `201 attachment ${short(stored.id)} ${stored.name} (${sizeText(stored.size)}, ${stored.contentType})`);
        upload.state = "done";
        upload.id = stored.id;
        const reference = { id: stored.id };
        if (upload.size) {
          reference.width = upload.size.width;
          reference.height = upload.size.height;
        }
        item.attachments = [reference];
        item.tries = 0;
        item.notBefore = 0;
        this.render(item);
        this.flush();
        return;
      }
      const error = errorOf(answer);
      this.wireLog("←", `${answer.status} ${error.code} (upload of ${file.name}): ${error.message}`);
      if (TRANSIENT.has(error.code)) {
        upload.state = "waiting";
        this.transientError(item, error, answer.retryAfter);
        if (item.failure) upload.state = "failed"; // the tries are used up: retry uploads it again
      } else {
        upload.state = "failed";
        this.fail(item, { ...error, final: true });
      }
      this.render(item);
    }

    dequeue(item) {
      const index = this.queue.indexOf(item.clientMessageId);
      if (index >= 0) this.queue.splice(index, 1);
      clearTimeout(item.ackTimer);
      item.inFlight = false;
    }

    // The accept answer (HTTP 202/200, a WebSocket ack): ✓, or a seq when the message was stored already.
    accepted(item, answer) {
      this.dequeue(item);
      if (answer.status === "failed") {
        this.fail(item, { code: "failed", message: "the server dead-lettered it", final: true });
        return;
      }
      if (item.failure && item.failure.final) return;
      item.failure = null;
      item.accepted = true;
      item.serverId = answer.serverId;
      if (answer.seq) this.storedAs(item, answer.seq);
      this.render(item);
      this.flush(); // the messages held back behind it, if any, go now
    }

    storedAs(item, seq) {
      item.seq = seq;
      this.addSeq(seq);
      if (item.node) this.place(item.node, seq);
    }

    // Keeps the list in the conversation's order: a stored message (with its seq) goes after the stored ones with a
    // lower seq and before any with a higher one or still waiting for its seq (those stay last, in the order typed).
    place(node, seq) {
      node.dataset.seq = String(seq);
      const list = this.dom.list;
      const before = [...list.children].find(
        (other) => other !== node && (other.dataset.seq === undefined || Number(other.dataset.seq) > seq),
      );
      if (before) {
        if (node.nextSibling !== before) list.insertBefore(node, before);
      } else if (list.lastChild !== node) {
        list.append(node);
      }
    }

    // ⚠️: a refusal, a dead letter (final), or transient errors that used up the tries (retry offers another round).
    fail(item, failure) {
      if (item.seq !== null || (item.accepted && !failure.final)) return;
      this.dequeue(item);
      item.failure = failure;
      this.render(item);
      this.flush();
    }

    transientError(item, error, retryAfterSeconds) {
      item.inFlight = false;
      clearTimeout(item.ackTimer);
      item.tries += 1;
      this.wireLog("×", `${error.code}: ${error.message}`);
      if (item.tries >= MAX_TRIES) {
        this.fail(item, { ...error, final: false });
        return;
      }
      const delay = retryAfterSeconds > 0 ? retryAfterSeconds * 1000 : 500 * 2 ** item.tries;
      item.notBefore = Date.now() + delay;
      setTimeout(() => this.flush(), delay);
    }

    retry(item) {
      if (!item.failure || item.failure.final) return;
      item.failure = null;
      if (item.upload && item.upload.state !== "done") item.upload.state = "waiting";
      item.tries = 0;
      item.notBefore = 0;
      this.queue.push(item.clientMessageId);
      this.render(item);
      this.flush();
    }

    onAck(frame) {
      const reaction = this.reacting.get(frame.clientMessageId);
      if (reaction) {
        // Stored; the reaction event that follows on the stream carries the aggregate.
        this.reacting.delete(frame.clientMessageId);
        this.wireLog("←", `ack react ${reaction.action} ${reaction.key} on ${short(frame.serverId)}`);
        return;
      }
      const item = this.outgoing.get(frame.clientMessageId);
      if (!item) return;
      this.wireLog("←", `ack ${short(frame.clientMessageId)} ${frame.status}${frame.seq ? " seq " + frame.seq : ""}`);
      this.accepted(item, frame);
    }

    onErrorFrame(frame) {
      const error = frame.error || { code: "unknown", message: "" };
      this.wireLog("←", `error ${error.code}${frame.clientMessageId ? " for " + short(frame.clientMessageId) : ""}: ${error.message}`);
      const reaction = frame.clientMessageId ? this.reacting.get(frame.clientMessageId) : null;
      if (reaction) {
        this.reacting.delete(frame.clientMessageId);
        this.showError(`react ${reaction.key}: ${error.code}: ${error.message}`);
        return;
      }
      const item = frame.clientMessageId ? this.outgoing.get(frame.clientMessageId) : null;
      if (!item) {
        // A receipt or typing operation was refused: say so, and send the receipts again at the next occasion.
        this.receiptSent = { ...this.myMarks };
        this.showError(`${error.code}: ${error.message}`);
        return;
      }
      this.answerError(item, error, 1);
    }

    answerError(item, error, retryAfterSeconds) {
      if (TRANSIENT.has(error.code)) this.transientError(item, error, retryAfterSeconds);
      else this.fail(item, { ...error, final: true });
    }

    onStored(event) {
      if (event.conversationId !== conversationId) return;
      const item = this.outgoing.get(event.clientMessageId);
      if (!item) return;
      if (item.failure && item.failure.final) return;
      this.dequeue(item);
      item.failure = null;
      item.accepted = true;
      item.serverId = event.serverId;
      item.recipientsOnline = event.recipientsOnline;
      this.storedAs(item, event.seq);
      this.render(item);
      this.flush();
      this.syncReceipts();
    }

    onFailed(event) {
      const item = this.outgoing.get(event.clientMessageId);
      if (!item) return;
      this.fail(item, { ...(event.error || { code: "failed", message: "" }), final: true });
    }

    // MARK: receiving

    async onMessageNew(message) {
      if (message.conversationId !== conversationId) return;
      const known = this.incoming.get(message.serverId);
      if (known) {
        if (!known.viaHistory) {
          this.duplicates += 1;
          this.wireLog("!", `message ${short(message.serverId)} came twice`);
          this.renderPane();
        }
        return;
      }
      if (message.seq > this.contiguous + 1) await this.fetchAfter(this.contiguous);
      this.absorb(message, false);
      this.syncReceipts();
    }

    // A message of the conversation, from the stream or from history.
    absorb(message, viaHistory) {
      this.addSeq(message.seq);
      if (message.senderId === this.userId) {
        const item = this.outgoing.get(message.clientMessageId);
        if (item && message.senderDeviceId === this.deviceId && !(item.failure && item.failure.final)) {
          // One of ours, seen in history: stored.
          this.dequeue(item);
          item.failure = null;
          item.accepted = true;
          item.serverId = message.serverId;
          this.storedAs(item, message.seq);
          this.render(item);
        }
        if (message.reactions && this.rows.has(message.serverId)) this.setReactions(message.serverId, message.reactions);
        return;
      }
      if (message.type.startsWith("pigeon.") || this.incoming.has(message.serverId)) return;
      const body = message.body.length > SHOWN_BODY ? `${message.body.slice(0, SHOWN_BODY)}… (${message.body.length} characters)` : message.body;
      const attachments = message.attachments || [];
      const node = el(
        "li",
        {
          class: "msg in",
          "data-direction": "in",
          "data-server-id": message.serverId,
          "data-client-message-id": message.clientMessageId,
          "data-seq": String(message.seq),
        },
        [
          ...(attachments.length > 0 ? [el("div", { class: "attachments" }, attachments.map((attachment) => this.attachmentNode(attachment, null)))] : []),
          el("span", { class: "body" }, body),
          el("span", { class: "meta" }, `${clock(message.storedAt || message.acceptedAt)} · seq ${message.seq}`),
        ],
      );
      if (attachments.length > 0) node.dataset.attachments = String(attachments.length);
      if (message.replyPreview) {
        node.dataset.replyTo = message.replyTo;
        node.prepend(quoteOf(message.replyPreview));
      }
      this.addRow(message.serverId, node, message.senderId, message.body, message.reactions);
      this.incoming.set(message.serverId, { message, node, viaHistory });
      this.place(node, message.seq);
      this.dom.list.scrollTop = this.dom.list.scrollHeight;
      this.renderIncoming();
      this.hidePeerTyping();
    }

    addSeq(seq) {
      this.seqs.add(seq);
      while (this.seqs.has(this.contiguous + 1)) this.contiguous += 1;
    }

    // Gap recovery: the conversation's messages after `seq`, from history.
    async fetchAfter(seq) {
      let after = seq;
      for (;;) {
        const page = await expectStatus(
          call(this.token, "GET", `/v1/conversations/${conversationId}/messages?after=${after}&limit=100`),
          200,
          "history",
        );
        this.wireLog("←", `history after ${after}: ${page.messages.length} messages`);
        for (const message of page.messages) {
          this.absorb(message, true);
          after = Math.max(after, message.seq);
        }
        if (!page.hasMore || page.messages.length === 0) return;
      }
    }

    // After `reset` (a cursor the server no longer knows): the watermarks and the messages, from the conversation.
    async catchUp() {
      const conversation = await expectStatus(call(this.token, "GET", `/v1/conversations/${conversationId}`), 200, "the conversation");
      for (const member of conversation.members) this.mergeMarks(member.userId, member.deliveredSeq, member.readSeq);
      await this.fetchAfter(this.contiguous);
      this.syncReceipts();
    }

    mergeMarks(userId, deliveredSeq, readSeq) {
      const marks = userId === this.userId ? this.myMarks : this.peerMarks;
      marks.read = Math.max(marks.read, readSeq);
      marks.delivered = Math.max(marks.delivered, deliveredSeq, marks.read);
      if (userId === this.userId) this.renderIncoming();
      else for (const item of this.outgoing.values()) this.render(item);
    }

    onReceipt(event) {
      if (event.conversationId !== conversationId) return;
      if (event.kind === "read") this.mergeMarks(event.userId, 0, event.upToSeq);
      else this.mergeMarks(event.userId, event.upToSeq, 0);
    }

    isReading() {
      return lookingAt === this && document.visibilityState === "visible";
    }

    // Delivered up to every seq this device has, at once; read too while its chat is looked at.
    syncReceipts() {
      if (!this.online || !this.transport.ready() || !conversationId) return;
      for (const kind of ["delivered", "read"]) {
        if (kind === "read" && !this.isReading()) continue;
        const upToSeq = this.contiguous;
        const covered = Math.max(this.myMarks[kind], this.receiptSent[kind]);
        if (upToSeq <= covered) continue;
        const owed = [...this.incoming.values()].some(({ message }) => message.seq > covered && message.seq <= upToSeq);
        if (!owed) continue;
        this.receiptSent[kind] = upToSeq;
        this.wireLog("→", `receipt ${kind} up to ${upToSeq}`);
        this.transport.receipt(kind, upToSeq);
      }
    }

    // MARK: typing

    typed() {
      if (!this.online || !this.transport.ready() || !conversationId) return;
      const now = Date.now();
      if (now - this.typingSentAt > 3000) {
        this.typingSentAt = now;
        this.transport.typing(true);
      }
      clearTimeout(this.typingStopTimer);
      this.typingStopTimer = setTimeout(() => this.stopTyping(), 4000);
    }

    stopTyping() {
      clearTimeout(this.typingStopTimer);
      if (this.typingSentAt === 0) return;
      this.typingSentAt = 0;
      if (this.online && this.transport.ready()) this.transport.typing(false);
    }

    onTyping(event) {
      if (event.conversationId !== conversationId || event.userId === this.userId) return;
      clearTimeout(this.peerTypingTimer);
      if (!event.active) {
        this.hidePeerTyping();
        return;
      }
      this.dom.typing.textContent = `${event.userId} is typing…`;
      this.dom.typing.hidden = false;
      this.peerTypingTimer = setTimeout(() => this.hidePeerTyping(), 12000);
    }

    hidePeerTyping() {
      clearTimeout(this.peerTypingTimer);
      this.dom.typing.hidden = true;
    }

    // MARK: showing

    statusOf(item) {
      if (item.failure) return "failed";
      if (!item.accepted) return "pending";
      if (item.seq === null) return "sent";
      if (this.peerMarks.read >= item.seq) return "read";
      if (this.peerMarks.delivered >= item.seq) return "delivered";
      return "stored";
    }

    addOutgoing(item) {
      const body = item.body.length > SHOWN_BODY ? `${item.body.slice(0, SHOWN_BODY)}… (${item.body.length} characters)` : item.body;
      const tick = el("span", { class: "tick" });
      const why = el("span", { class: "why" });
      const retry = el("button", { type: "button", class: "retry" }, "retry");
      retry.addEventListener("click", () => this.retry(item));
      // The chosen file, shown from the page's own copy (nothing to fetch); its id once uploaded.
      const file = item.upload ? item.upload.file : null;
      const attachment = file
        ? this.attachmentNode({ id: null, name: file.name, size: file.size, contentType: file.type || "application/octet-stream" }, file)
        : null;
      const uploading = el("span", { class: "uploading", role: "status" });
      uploading.hidden = true;
      item.node = el(
        "li",
        { class: "msg out", "data-direction": "out", "data-client-message-id": item.clientMessageId },
        [
          ...(attachment ? [el("div", { class: "attachments" }, attachment)] : []),
          uploading,
          el("span", { class: "body" }, body),
          el("span", { class: "meta" }, [clock(item.clientTimestamp), tick]),
          why,
        ],
      );
      if (attachment) item.node.dataset.attachments = "1";
      if (item.quoted) {
        item.node.dataset.replyTo = item.replyTo;
        item.node.prepend(quoteOf(item.quoted));
      }
      item.parts = { tick, why, retry, attachment, uploading };
      this.dom.list.append(item.node);
      this.dom.list.scrollTop = this.dom.list.scrollHeight;
      this.render(item);
    }

    render(item) {
      if (!item.node) return;
      const status = this.statusOf(item);
      const [symbol, meaning] = TICKS[status];
      const node = item.node;
      node.dataset.status = status;
      node.dataset.tick = symbol;
      if (item.serverId) this.addRow(item.serverId, node, this.userId, item.body, []);
      if (item.seq !== null) node.dataset.seq = String(item.seq);
      if (item.recipientsOnline !== null) node.dataset.recipientsOnline = String(item.recipientsOnline);
      const { tick, why, retry, attachment, uploading } = item.parts;
      if (item.upload) this.renderUpload(item, attachment, uploading);
      tick.textContent = symbol;
      let title = meaning;
      if (item.seq !== null) title += ` (seq ${item.seq}`;
      if (item.recipientsOnline !== null) title += item.recipientsOnline > 0 ? ", handed to the online device" : ", waiting in the other's mailbox";
      if (item.seq !== null) title += ")";
      tick.title = title;
      if (item.failure) {
        node.dataset.errorCode = item.failure.code;
        why.textContent = `${item.failure.code}: ${item.failure.message}`;
        if (!item.failure.final) why.append(retry);
      } else {
        delete node.dataset.errorCode;
        why.textContent = "";
      }
    }

    // The upload under way (an indeterminate bar: fetch tells nothing of an upload's progress), or waiting for the
    // network; once done, the attachment carries its id and the width and height sent with it.
    renderUpload(item, attachment, uploading) {
      const upload = item.upload;
      item.node.dataset.upload = upload.state;
      if (upload.id) attachment.dataset.attachmentId = upload.id;
      if (upload.size) {
        attachment.dataset.width = String(upload.size.width);
        attachment.dataset.height = String(upload.size.height);
      }
      const label = `${upload.file.name} (${sizeText(upload.file.size)})`;
      if (upload.state === "uploading") {
        uploading.replaceChildren(el("progress", { "aria-label": `uploading ${upload.file.name}` }), ` uploading… ${label}`);
      } else if (upload.state === "waiting" && !item.failure) {
        uploading.replaceChildren(`waiting to upload ${label}`);
      }
      uploading.hidden = !(upload.state === "uploading" || (upload.state === "waiting" && !item.failure));
    }

    // One attachment of a shown message. An image the server serves inline is fetched with the token (in the
    // Authorization header) into a blob: URL and shown, bounded in size, its file name as alt text; any other file is
    // a "📎 name (size)" button that downloads it the same way. `local`: the sending side's own File, shown as is.
    attachmentNode(attachment, local) {
      const label = `📎 ${attachment.name} (${sizeText(attachment.size)})`;
      const node = el("div", {
        class: "attachment",
        "data-name": attachment.name,
        "data-size": String(attachment.size),
        "data-content-type": attachment.contentType,
      });
      if (attachment.id) node.dataset.attachmentId = attachment.id;
      if (attachment.width != null && attachment.height != null) {
        node.dataset.width = String(attachment.width);
        node.dataset.height = String(attachment.height);
      }
      if (INLINE_IMAGES.has(mediaType(attachment.contentType))) {
        node.dataset.kind = "image";
        const image = el("img", { class: "attachment-image", alt: attachment.name, title: label });
        node.append(image);
        this.showImage(node, image, attachment, local);
      } else {
        node.dataset.kind = "file";
        const button = el("button", { type: "button", class: "attachment-file", title: `download ${attachment.name}` }, label);
        button.addEventListener("click", () => this.download(node, button, attachment, local));
        node.append(button);
      }
      return node;
    }

    // data-state: loading, shown, failed. The blob: URL is revoked once the image has loaded (or failed to): the
    // <img> keeps what it decoded.
    async showImage(node, image, attachment, local) {
      node.dataset.state = "loading";
      let blob;
      try {
        blob = local || (await fetchAttachment(this.token, attachment.id));
      } catch (error) {
        node.dataset.state = "failed";
        node.replaceChildren(el("span", { class: "attachment-error" }, `📎 ${attachment.name}: not shown (${error.message})`));
        return;
      }
      const url = URL.createObjectURL(blob);
      const list = this.dom.list;
      const atBottom = list.scrollHeight - list.scrollTop - list.clientHeight < 40;
      image.addEventListener(
        "load",
        () => {
          URL.revokeObjectURL(url);
          node.dataset.state = "shown";
          if (atBottom) list.scrollTop = list.scrollHeight;
        },
        { once: true },
      );
      image.addEventListener(
        "error",
        () => {
          URL.revokeObjectURL(url);
          node.dataset.state = "failed";
          image.title = `${attachment.name}: the browser cannot show it`;
        },
        { once: true },
      );
      image.src = url;
    }

    // A click on a file: its bytes (fetched with the token) into a blob: URL, saved through an <a download>; the URL
    // is revoked a moment later, once the download has the bytes. data-state: downloading, downloaded, failed.
    async download(node, button, attachment, local) {
      if (button.disabled) return;
      button.disabled = true;
      node.dataset.state = "downloading";
      try {
        const blob = local || (await fetchAttachment(this.token, attachment.id));
        const url = URL.createObjectURL(blob);
        const link = el("a", { download: attachment.name });
        link.href = url;
        link.hidden = true;
        document.body.append(link);
        link.click();
        link.remove();
        setTimeout(() => URL.revokeObjectURL(url), 1000);
        node.dataset.state = "downloaded";
        this.wireLog("←", `attachment ${short(attachment.id || "local")} ${attachment.name}: ${sizeText(blob.size)} saved`);
      } catch (error) {
        node.dataset.state = "failed";
        this.showError(`download ${attachment.name}: ${error.message}`);
      } finally {
        button.disabled = false;
      }
    }

    renderIncoming() {
      let unread = 0;
      for (const { message, node } of this.incoming.values()) {
        const read = message.seq <= this.myMarks.read;
        node.dataset.read = String(read);
        if (!read) unread += 1;
      }
      this.dom.unread.textContent = unread > 0 ? `${unread} unread` : "";
      this.dom.pane.dataset.unread = String(unread);
    }

    renderPane() {
      const d = this.dom;
      if (!d) return;
      const reading = this.isReading();
      d.pane.dataset.online = String(this.online);
      d.pane.dataset.connection = this.connection;
      d.pane.dataset.connects = String(this.connects);
      d.pane.dataset.reading = String(reading);
      d.pane.dataset.duplicates = String(this.duplicates);
      d.pane.dataset.waiting = String(this.queue.length);
      d.connection.textContent = {
        connecting: "connecting…",
        online: "connected",
        reconnecting: "reconnecting…",
        offline: "offline",
      }[this.connection];
      d.reading.textContent = reading ? "👁 reading" : "not reading";
      d.reading.title = reading ? "this chat is looked at: what arrives is read" : "click the chat to read it";
      d.banner.hidden = this.online;
      const waiting = this.queue.length;
      d.banner.textContent = `📵 ${this.userId || this.name} is offline. ${waiting === 1 ? "1 message waits" : `${waiting} messages wait`} here (⏰) and go out, in order and with the same clientMessageId, when back online.`;
    }

    // MARK: reactions and replies

    // Gives a shown message its reactions row (pills, the picker, the reply button) once its serverId is known.
    addRow(serverId, node, senderId, body, reactions) {
      if (this.rows.has(serverId)) return;
      node.dataset.serverId = serverId;
      const pills = el("span", { class: "pills" });
      const picks = PICKER.map((key) => {
        const pick = el("button", { type: "button", class: "pick", "data-key": key, title: `react ${key}` }, key);
        pick.addEventListener("click", () => {
          picker.hidden = true;
          this.react(serverId, key, "add");
        });
        return pick;
      });
      const picker = el("span", { class: "picker" }, picks);
      picker.hidden = true;
      const add = el("button", { type: "button", class: "react-add", title: "add a reaction", "aria-label": "add a reaction" }, "☺+");
      add.addEventListener("click", () => {
        picker.hidden = !picker.hidden;
      });
      const reply = el("button", { type: "button", class: "reply", title: "reply with a quote", "aria-label": "reply" }, "↩");
      reply.addEventListener("click", () => this.quote({ serverId, senderId, body }));
      node.append(el("div", { class: "reactions" }, [pills, add, picker, reply]));
      this.rows.set(serverId, { pills });
      const later = this.laterReactions.get(serverId);
      this.laterReactions.delete(serverId);
      this.setReactions(serverId, later || reactions || []);
    }

    // Draws a message's reactions exactly as the server gave them (a reaction event, a read message): a pill per key
    // with its count, the ones this device's user holds highlighted (me). Nothing is counted here.
    setReactions(serverId, reactions) {
      const row = this.rows.get(serverId);
      if (!row) {
        this.laterReactions.set(serverId, reactions);
        return;
      }
      row.pills.replaceChildren(
        ...reactions.map((reaction) => {
          const pill = el(
            "button",
            {
              type: "button",
              class: "pill",
              "data-key": reaction.key,
              "data-count": String(reaction.count),
              "data-me": String(reaction.me),
              "aria-pressed": String(reaction.me),
              title: reaction.me ? `remove your ${reaction.key}` : `react ${reaction.key} too`,
            },
            `${reaction.key} ${reaction.count}`,
          );
          pill.addEventListener("click", () => this.react(serverId, reaction.key, reaction.me ? "remove" : "add"));
          return pill;
        }),
      );
    }

    react(serverId, key, action) {
      if (!this.online || !this.transport.ready()) {
        this.showError(`react ${key}: ${this.userId} is offline`);
        return;
      }
      this.wireLog("→", `react ${action} ${key} on ${short(serverId)}`);
      this.transport.react(serverId, key, action);
    }

    // The message the next send quotes (null: none), shown above the input until sent or cancelled.
    quote(target) {
      this.replyingTo = target;
      this.dom.replying.hidden = target === null;
      if (target === null) return;
      this.dom.replyText.replaceChildren(quoteOf({ senderId: target.senderId, body: target.body, deleted: false }));
      this.dom.input.focus();
    }

    showError(text) {
      this.dom.error.textContent = text;
      this.dom.error.hidden = false;
    }

    wireLog(direction, text) {
      const list = this.dom.wire;
      list.append(el("li", {}, `${clock(Date.now())} ${direction} ${text}`));
      while (list.children.length > 60) list.firstElementChild.remove();
    }
  }

  // A quote of a replied-to message, from its replyPreview (or, on the sending side, the same fields of the message
  // it quotes): "↪ alice-k3m9: the first words…"; a message without text (a file sent alone) is quoted as 📎.
  function quoteOf(preview) {
    const characters = Array.from(preview.body);
    const text = preview.deleted
      ? "(deleted)"
      : characters.length === 0
        ? "📎"
        : characters.length > QUOTED_BODY
          ? `${characters.slice(0, QUOTED_BODY).join("")}…`
          : preview.body;
    return el("span", { class: "quote", "data-sender-id": preview.senderId }, `↪ ${preview.senderId}: ${text}`);
  }

  const withAttachments = (item) => (item.attachments.length > 0 ? ` with attachment ${short(item.attachments[0].id)}` : "");

  function describe(event) {
    switch (event.type) {
      case "message.new": {
        const count = (event.message.attachments || []).length;
        return `message.new seq ${event.message.seq} from ${event.message.senderId}${count > 0 ? ` with ${count} attachment${count > 1 ? "s" : ""}` : ""}`;
      }
      case "message.stored":
        return `message.stored ${short(event.clientMessageId)} seq ${event.seq}, recipientsOnline ${event.recipientsOnline}`;
      case "message.failed":
        return `message.failed ${short(event.clientMessageId)}: ${event.error && event.error.code}`;
      case "receipt":
        return `receipt ${event.userId} ${event.kind} up to ${event.upToSeq}`;
      case "typing":
        return `typing ${event.userId} ${event.active}`;
      case "reaction":
        return `reaction ${event.userId} ${event.action} ${event.key} on ${short(event.serverId)}`;
      default:
        return event.type;
    }
  }

  // The WebSocket (alice): sends, receipts and typing are operations on the socket, answered by ack/error frames.
  class SocketTransport {
    constructor(side) {
      this.side = side;
      this.socket = null;
    }

    ready() {
      return this.socket !== null && this.socket.readyState === WebSocket.OPEN;
    }

    open(cursor) {
      const side = this.side;
      let url = `${WS_API}/v1/ws?access_token=${encodeURIComponent(side.token)}`;
      if (cursor) url += `&cursor=${encodeURIComponent(cursor)}`;
      const socket = new WebSocket(url);
      this.socket = socket;
      socket.onopen = () => {
        if (this.socket === socket) side.connected();
      };
      socket.onmessage = (message) => {
        if (this.socket !== socket) return;
        let frame;
        try {
          frame = JSON.parse(message.data);
        } catch {
          side.showError("the server sent a frame that is not JSON");
          return;
        }
        if (frame.type === "ack") side.onAck(frame);
        else if (frame.type === "error") side.onErrorFrame(frame);
        else side.enqueue(frame);
      };
      socket.onclose = (close) => {
        if (this.socket !== socket) return;
        this.socket = null;
        side.dropped(`WebSocket closed (${close.code}${close.reason ? " " + close.reason : ""})`);
      };
    }

    close() {
      const socket = this.socket;
      this.socket = null;
      if (socket) socket.close(1000, "offline");
    }

    // Every waiting message goes out at once, in order; one without an answer in 10 s goes again (same id).
    flush() {
      for (const id of [...this.side.queue]) {
        const item = this.side.outgoing.get(id);
        // A message whose file is not uploaded yet holds back itself and the ones after it.
        if (item.upload && item.upload.state !== "done") break;
        // Pipelined while the server takes them; once it refused one (rate_limited, overloaded), one at a time from
        // the first waiting one, so that the messages after it cannot overtake it.
        if (item.inFlight) {
          if (item.tries > 0) break;
          continue;
        }
        if (item.notBefore > Date.now()) break;
        item.inFlight = true;
        const frame = {
          op: "send",
          conversationId,
          clientMessageId: item.clientMessageId,
          type: "text",
          body: item.body,
          clientTimestamp: item.clientTimestamp,
        };
        if (item.replyTo) frame.replyTo = item.replyTo;
        if (item.attachments.length > 0) frame.attachments = item.attachments;
        this.operation(frame);
        this.side.wireLog("→", `send ${short(item.clientMessageId)}${withAttachments(item)}${item.tries > 0 || item.sentBefore ? " (again)" : ""}`);
        item.sentBefore = true;
        clearTimeout(item.ackTimer);
        item.ackTimer = setTimeout(() => {
          if (!item.inFlight) return;
          item.inFlight = false;
          this.side.wireLog("×", `no answer for ${short(item.clientMessageId)} in 10 s`);
          this.side.flush();
        }, ACK_TIMEOUT_MS);
        if (item.tries > 0) break;
      }
    }

    receipt(kind, upToSeq) {
      this.operation({ op: "receipt", conversationId, kind, upToSeq });
    }

    typing(active) {
      this.operation({ op: "typing", conversationId, active });
    }

    // Answered by an ack (the reaction event that follows carries the aggregate) or an error frame.
    react(serverId, key, action) {
      const clientMessageId = newUUID();
      this.side.reacting.set(clientMessageId, { key, action });
      this.operation({ op: "react", conversationId, serverId, key, action, clientMessageId });
    }

    operation(frame) {
      if (this.ready()) this.socket.send(JSON.stringify(frame));
    }
  }

  // Server-sent events (bob) for the stream; sends, receipts and typing are HTTP calls.
  class EventSourceTransport {
    constructor(side) {
      this.side = side;
      this.source = null;
      this.pumping = false;
      this.abort = null;
      this.networkDelay = 500;
    }

    // HTTP calls need only the network (the switch), not the stream.
    ready() {
      return this.side.online;
    }

    open(cursor) {
      const side = this.side;
      let url = `${API}/v1/events?access_token=${encodeURIComponent(side.token)}`;
      if (cursor) url += `&cursor=${encodeURIComponent(cursor)}`;
      const source = new EventSource(url);
      this.source = source;
      source.onopen = () => {
        if (this.source === source) side.connected();
      };
      for (const type of EVENT_TYPES) {
        source.addEventListener(type, (message) => {
          if (this.source !== source) return;
          let event;
          try {
            event = JSON.parse(message.data);
          } catch {
            side.showError(`the server sent a ${type} event that is not JSON`);
            return;
          }
          side.enqueue(event);
        });
      }
      source.onerror = () => {
        if (this.source !== source) return;
        if (source.readyState === EventSource.CLOSED) {
          this.source = null;
          side.dropped("the event stream was refused or failed (the browser gave up)");
        } else {
          // The browser reconnects by itself, to the same URL plus Last-Event-ID: the header wins over ?cursor=.
          side.wireLog("×", "the event stream dropped: the browser reconnects with Last-Event-ID");
          side.setConnection("reconnecting");
        }
      };
    }

    close() {
      if (this.source) this.source.close();
      this.source = null;
      if (this.abort) this.abort.abort();
    }

    flush() {
      if (!this.pumping) this.pump();
    }

    // One POST at a time, in order: the next message goes once the one before it has its answer.
    async pump() {
      this.pumping = true;
      try {
        while (this.side.online && this.side.queue.length > 0) {
          const item = this.side.outgoing.get(this.side.queue[0]);
          if (item.upload && item.upload.state !== "done") break; // flushed again once its file is uploaded
          const wait = item.notBefore - Date.now();
          if (wait > 0) {
            await sleep(wait);
            continue;
          }
          await this.post(item);
        }
      } finally {
        this.pumping = false;
      }
    }

    async post(item) {
      const side = this.side;
      const controller = new AbortController();
      this.abort = controller;
      item.inFlight = true;
      side.wireLog("→", `POST …/messages ${short(item.clientMessageId)}${withAttachments(item)}${item.sentBefore ? " (again)" : ""}`);
      item.sentBefore = true;
      const body = { clientMessageId: item.clientMessageId, type: "text", body: item.body, clientTimestamp: item.clientTimestamp };
      if (item.replyTo) body.replyTo = item.replyTo;
      if (item.attachments.length > 0) body.attachments = item.attachments;
      let answer;
      try {
        answer = await call(side.token, "POST", `/v1/conversations/${conversationId}/messages`, body, controller.signal);
      } catch (error) {
        item.inFlight = false;
        if (!side.online) return; // switched off: it goes again, with the same id, when back
        // No answer (the server unreachable): not a refusal, so it stays ⏰ and goes again.
        side.wireLog("×", `no answer (${error.message}): again in ${this.networkDelay} ms`);
        item.notBefore = Date.now() + this.networkDelay;
        this.networkDelay = Math.min(this.networkDelay * 2, 5000);
        return;
      } finally {
        if (this.abort === controller) this.abort = null;
      }
      this.networkDelay = 500;
      item.inFlight = false;
      if (!side.queue.includes(item.clientMessageId)) return; // answered meanwhile (message.stored)
      if (answer.status === 200 || answer.status === 202) {
        side.wireLog("←", `${answer.status} ${answer.json.status}${answer.json.seq ? " seq " + answer.json.seq : ""}`);
        side.accepted(item, answer.json);
      } else {
        const error = errorOf(answer);
        side.wireLog("←", `${answer.status} ${error.code}`);
        side.answerError(item, error, answer.retryAfter);
      }
    }

    async receipt(kind, upToSeq) {
      const side = this.side;
      try {
        const answer = await call(side.token, "POST", `/v1/conversations/${conversationId}/receipts`, { kind, upToSeq });
        if (answer.status === 200) {
          side.mergeMarks(side.userId, answer.json.deliveredSeq, answer.json.readSeq);
          return;
        }
        const error = errorOf(answer);
        side.showError(`receipt: ${error.code}: ${error.message}`);
      } catch (error) {
        side.wireLog("×", `receipt: no answer (${error.message})`);
      }
      side.receiptSent[kind] = side.myMarks[kind]; // sent again at the next occasion
    }

    // PUT adds, DELETE removes. The answer holds the aggregate too, but the reaction event on the stream is what the
    // pills show: it comes in the stream's order, so a late answer cannot draw an older state over a newer one.
    async react(serverId, key, action) {
      const side = this.side;
      const path = `/v1/conversations/${conversationId}/messages/${serverId}/reactions/${encodeURIComponent(key)}`;
      try {
        const answer = await call(side.token, action === "add" ? "PUT" : "DELETE", path);
        if (answer.status === 200) {
          side.wireLog("←", `200 ${action} ${key}: ${answer.json.reactions.map((r) => `${r.key} ${r.count}`).join(", ") || "none"}`);
          return;
        }
        const error = errorOf(answer);
        side.wireLog("←", `${answer.status} ${error.code}`);
        side.showError(`react ${key}: ${error.code}: ${error.message}`);
      } catch (error) {
        side.wireLog("×", `react: no answer (${error.message})`);
      }
    }

    async typing(active) {
      try {
        await call(this.side.token, "POST", `/v1/conversations/${conversationId}/typing`, { active });
      } catch {
        // Typing is ephemeral: a lost indicator is not worth a retry.
      }
    }
  }

  function readyCheck() {
    if (sides.every((side) => side.everConnected)) document.body.dataset.ready = "true";
  }

  function setupFailed(error) {
    const message = error instanceof TypeError
      ? `Cannot reach the API at ${API} (${error.message}). Is the server running? A page of another origin needs the server started with --cors-origin ${location.origin}.`
      : error.message;
    $("setup-error").textContent = message;
    $("setup-error").hidden = false;
    document.body.dataset.ready = "failed";
  }

  const sides = [];
  let alice;
  let bob;

  async function setup() {
    document.body.dataset.ready = "false";
    try {
      API = apiOrigin();
    } catch (error) {
      API = location.origin;
      setupFailed(error);
      return;
    }
    WS_API = API.replace(/^http/, "ws");
    $("api").textContent = API;
    alice = new Side("alice", "ws");
    bob = new Side("bob", "sse");
    sides.push(alice, bob);
    document.addEventListener("visibilitychange", () => {
      for (const side of sides) {
        side.renderPane();
        side.syncReceipts();
      }
    });
    try {
      await alice.register();
      await bob.register();
      // Cursors taken before the conversation exists: the streams start there and miss nothing.
      for (const side of sides) side.cursor = (await expectStatus(call(side.token, "GET", "/v1/sync"), 200, "sync")).cursor;
      const conversation = await expectStatus(call(alice.token, "POST", "/v1/conversations", { members: [bob.userId] }), 201, "creating the conversation");
      conversationId = conversation.id;
      document.body.dataset.conversationId = conversationId;
      for (const side of sides) {
        side.enable();
        side.connect();
      }
    } catch (error) {
      setupFailed(error);
    }
  }

  setup();
})();
