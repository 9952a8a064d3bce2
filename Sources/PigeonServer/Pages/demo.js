"use strict";
// Pigeon's web demo: two devices side by side, alice (her stream over the WebSocket) and bob (his over server-sent
// events), each a PigeonJS client (the browser SDK this server serves at /sdk/pigeon.js, docs/SDK-JS.md). The page
// draws what the SDK says: a sent message's tick is its status (docs/ARCHITECTURE.md, "The status model"), which the
// SDK moves only on the server's evidence:
//   pending ⏰  until an accept answer (202/200) or message.stored (the SDK's pending and sending);
//   sent ✓ (accepted), stored ✓ (message.stored gave its seq);
//   delivered ✓✓ / read, blue ✓✓, once the other member's watermark reached its seq;
//   failed ⚠️ when the server refused it (the error code), dead-lettered it, or transient errors used up 3 tries.
// The SDK acknowledges delivered on arrival; the page sends read while its chat is looked at (client.markRead).
// Every message carries its reactions (pills: the server's aggregate from the last `reaction` event with this device's
// own changes not yet confirmed, the user's own highlighted; a click toggles it, offline too) and can be quoted by a reply. 📎 attaches a file: the page uploads it
// (client.upload, the token in the Authorization header) while its message waits ⏰, then hands the message to the
// SDK with the upload's id; messages typed after it wait behind it. Attachments are fetched the same way
// (client.attachment) into blob: URLs. The online switch stops a side's client (its stream closes, sends wait on the
// page) and starts it again.
(() => {
  const PICKER = ["👍", "❤️", "😂", "🎉", "😮"];
  const QUOTED_BODY = 100;
  // Refusals that may pass on a later try: a failed message or upload with one of these offers a retry.
  const TRANSIENT = new Set(["rate_limited", "overloaded", "internal", "request_timeout", "timeout"]);
  const MAX_TRIES = 3;
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

  // A lowercase version 4 UUID: a message's clientMessageId, chosen when it is shown (before its file is uploaded).
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

  let API;
  let SDK; // the PigeonJS module, imported from API + "/sdk/pigeon.js"
  let conversationId = null;
  let lookingAt = null; // the side whose chat is being read

  // Registration (open registration, POST /v1/devices) is the app's business, not the SDK's: one plain call.
  async function register(userId) {
    const response = await fetch(API + "/v1/devices", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ userId, deviceName: "web demo" }),
      cache: "no-store",
    });
    let json = null;
    try {
      json = await response.json();
    } catch {
      json = null;
    }
    return { status: response.status, json };
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

  function lookAt(side) {
    if (lookingAt === side) return;
    lookingAt = side;
    for (const each of sides) each.renderPane();
    side.syncReceipts();
  }

  // One device: its user, its PigeonJS client, the messages it shows.
  class Side {
    constructor(name, transport) {
      this.name = name;
      this.transport = transport; // the client's stream: "websocket" or "sse"
      this.userId = null;
      this.token = null;
      this.client = null;
      this.online = true; // the page's network switch
      this.connection = "connecting";
      this.everConnected = false;
      this.connects = 0; // streams opened so far
      this.outgoing = new Map(); // clientMessageId → item (a message this side sent)
      this.held = []; // items not handed to the SDK yet, in sending order (offline, or behind an upload)
      this.handing = Promise.resolve(); // hands held items to the SDK one at a time
      this.incoming = new Map(); // serverId → { message, node }
      this.myRead = 0; // this user's read watermark, as the server confirmed it
      this.readAsked = 0; // the highest read receipt asked for
      this.duplicates = 0; // a message the SDK announced twice (never expected)
      this.rows = new Map(); // serverId → a shown message's reactions row: { pills }
      this.laterReactions = new Map(); // serverId → the aggregate of a reaction event that came before its message was shown
      this.replyingTo = null; // the message the next send quotes: { serverId, senderId, body }
      this.uploadDelay = 500; // the wait before an upload that got no answer goes again
      this.typingSentAt = 0;
      this.typingStopTimer = null;
      this.peerTypingTimer = null;
      this.build();
    }

    build() {
      const n = this.name;
      const connection = el("span", { id: `${n}-connection`, class: "connection" });
      const reading = el("span", { id: `${n}-reading`, class: "reading" });
      const unread = el("span", { id: `${n}-unread`, class: "unread" });
      const name = el("strong", { id: `${n}-name`, class: "name" }, n);
      const via = el("span", { class: "via" }, this.transport === "websocket" ? "PigeonJS, WebSocket /v1/ws" : "PigeonJS, SSE /v1/events");
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
      const pane = el("section", { id: n, class: "side", "data-side": n, "data-transport": this.transport }, [
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
        const answer = await register(userId);
        if (answer.status === 201 || answer.status === 200) {
          this.userId = answer.json.userId;
          this.token = answer.json.token;
          this.dom.name.textContent = this.userId;
          this.dom.pane.dataset.userId = this.userId;
          this.dom.input.placeholder = `Message as ${this.userId}`;
          return;
        }
        if (answer.status === 401 && attempt < 3) continue; // that name has a device already: another one
        const error = (answer.json && answer.json.error) || { code: `http_${answer.status}`, message: `HTTP ${answer.status}` };
        const hint = answer.status === 401 ? " (the demo registers its users itself: it needs open registration, the default of the embedded server on a loopback address, or --open-registration)" : "";
        throw new Error(`registering ${userId}: ${error.code}: ${error.message}${hint}`);
      }
    }

    // The device's client: a database of its own (a new user at every load), its stream as chosen, its events drawn.
    async start() {
      const client = new SDK.PigeonClient({ server: API, token: this.token, userId: this.userId, database: `pigeon-demo-${this.userId}`, transport: this.transport });
      this.client = client;
      client.addEventListener("connection", (event) => this.onConnection(event.detail));
      client.addEventListener("status", (event) => this.onStatus(event.detail));
      client.addEventListener("message", (event) => this.onMessage(event.detail.message));
      client.addEventListener("receipt", (event) => this.onReceipt(event.detail));
      client.addEventListener("typing", (event) => this.onTyping(event.detail));
      client.addEventListener("reaction", (event) => {
        const reaction = event.detail;
        if (reaction.error) this.showError(`react ${reaction.key}: ${reaction.error.code}: ${reaction.error.message}`);
        else if (!reaction.local) this.wireLog("←", `reaction ${reaction.userId} ${reaction.action} ${reaction.key} on ${short(reaction.serverId)}`);
        if (reaction.conversationId === conversationId) this.setReactions(reaction.serverId, reaction.reactions);
      });
      this.wireLog("→", `start (${this.transport === "websocket" ? "/v1/ws" : "/v1/events"})`);
      await client.start();
    }

    enable() {
      for (const control of [this.dom.input, this.dom.attach, this.dom.file, this.dom.send]) control.disabled = false;
    }

    // MARK: the client's events

    onConnection({ state, transport }) {
      if (!this.online) return;
      if (state === "online") {
        this.everConnected = true;
        this.connects += 1;
        this.wireLog("←", `connected (${transport})`);
        this.setConnection("online");
        this.flush();
        this.syncReceipts();
        readyCheck();
      } else if (state === "connecting") {
        this.setConnection(this.everConnected ? "reconnecting" : "connecting");
      }
    }

    // An outgoing message's status moved: the SDK's record is the truth; the tick is drawn from it.
    onStatus({ message, status }) {
      const item = this.outgoing.get(message.clientMessageId);
      if (!item) return;
      this.wireLog("←", `${short(message.clientMessageId)} ${status}${message.seq ? " seq " + message.seq : ""}`);
      item.record = message;
      if (message.seq != null && item.node) this.place(item.node, message.seq);
      this.render(item);
      this.renderPane();
    }

    onReceipt(receipt) {
      if (receipt.conversationId !== conversationId) return;
      this.wireLog("←", `receipt ${receipt.userId} ${receipt.kind} up to ${receipt.upToSeq}`);
      if (receipt.userId === this.userId && receipt.kind === "read") {
        this.myRead = Math.max(this.myRead, receipt.upToSeq);
        this.renderIncoming();
      }
    }

    setOnline(online) {
      if (online === this.online) return;
      if (!online) this.stopTyping();
      this.online = online;
      if (online) {
        this.wireLog("·", "back online: the client starts again from its cursor");
        this.setConnection("reconnecting");
        this.client.start().then(() => this.flush(), (error) => this.showError(`starting again: ${error.message}`));
      } else {
        this.wireLog("·", "offline: the client is stopped, sends wait here");
        this.client.stop();
        this.setConnection("offline");
      }
      this.renderPane();
    }

    setConnection(connection) {
      this.connection = connection;
      this.renderPane();
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
        record: null, // the SDK's record, once handed over
        failure: null, // an upload refused (the message is never sent)
        tries: 0,
        notBefore: 0,
        node: null,
        // The file to upload: waiting (to start, or to go again), uploading, done (its id in attachments), failed.
        upload: file ? { file, state: "waiting", size: undefined, id: null, sentBefore: false } : null,
        attachments: [], // what the send carries: [{ id, width?, height? }]
      };
      this.outgoing.set(item.clientMessageId, item);
      this.held.push(item);
      this.addOutgoing(item);
      this.stopTyping();
      this.flush();
    }

    // Online: uploads start, and the held messages go to the SDK in order, up to the first whose file is not uploaded.
    flush() {
      if (this.online && conversationId) {
        this.startUploads();
        this.handing = this.handing.then(() => this.handOver());
      }
      this.renderPane();
    }

    async handOver() {
      while (this.online && this.held.length > 0) {
        const item = this.held[0];
        if (item.failure) {
          this.held.shift();
          continue;
        }
        if (item.upload && item.upload.state !== "done") return;
        const options = { clientMessageId: item.clientMessageId, attachments: item.attachments };
        if (item.replyTo) options.replyTo = item.replyTo;
        try {
          item.record = await this.client.send(conversationId, item.body, options);
        } catch (error) {
          this.showError(`send: ${error.code}: ${error.message}`);
          return;
        }
        this.held.shift();
        this.wireLog("→", `send ${short(item.clientMessageId)}${item.attachments.length > 0 ? ` with attachment ${short(item.attachments[0].id)}` : ""}`);
        this.render(item);
      }
      this.renderPane();
    }

    // Every waiting message's file starts uploading (several at once); the sends still go in order.
    startUploads() {
      for (const item of this.held) {
        if (item.upload && item.upload.state === "waiting" && !item.failure && item.notBefore <= Date.now()) this.upload(item);
      }
    }

    // client.upload: 201, and the message can go, with the upload's id (and an image's width and height). No answer:
    // it stays ⏰ and goes again (offline: when back). A refusal: ⚠️ with the server's code and message (a transient
    // one is tried again first, like a send), and the message is never sent.
    async upload(item) {
      const upload = item.upload;
      upload.state = "uploading";
      this.render(item);
      if (upload.size === undefined) upload.size = await imageSize(upload.file);
      const file = upload.file;
      this.wireLog("→", `POST /v1/attachments ${file.name} (${sizeText(file.size)})${upload.sentBefore ? " (again)" : ""}`);
      upload.sentBefore = true;
      let stored;
      try {
        stored = await this.client.upload(file, file.name);
      } catch (error) {
        this.uploadFailed(item, error);
        return;
      }
      this.uploadDelay = 500;
      this.wireLog("←", `201 attachment ${short(stored.id)} ${stored.name} (${sizeText(stored.size)}, ${stored.contentType})`);
      upload.state = "done";
      upload.id = stored.id;
      const reference = { id: stored.id };
      if (upload.size) {
        reference.width = upload.size.width;
        reference.height = upload.size.height;
      }
      item.attachments = [reference];
      this.render(item);
      this.flush();
    }

    uploadFailed(item, error) {
      const upload = item.upload;
      upload.state = "waiting";
      if (error.code === "network" || !this.online) {
        if (this.online) {
          this.wireLog("×", `upload: no answer (${error.message}): again in ${this.uploadDelay} ms`);
          item.notBefore = Date.now() + this.uploadDelay;
          setTimeout(() => this.flush(), this.uploadDelay);
          this.uploadDelay = Math.min(this.uploadDelay * 2, 5000);
        }
        this.render(item);
        return;
      }
      this.wireLog("←", `${error.status} ${error.code} (upload of ${upload.file.name}): ${error.message}`);
      item.tries += 1;
      if (TRANSIENT.has(error.code) && item.tries < MAX_TRIES) {
        const delay = error.retryAfter ? error.retryAfter * 1000 : 500 * 2 ** item.tries;
        item.notBefore = Date.now() + delay;
        setTimeout(() => this.flush(), delay);
      } else {
        upload.state = "failed";
        item.failure = { code: error.code, message: error.message, final: !TRANSIENT.has(error.code) };
        this.flush(); // the messages behind it go
      }
      this.render(item);
    }

    // ⚠️ with a retry: the SDK's retry for a message it failed, another round of uploads for a refused file.
    retry(item) {
      if (item.record && item.record.status === "failed") {
        this.client.retry(item.record.localId).catch((error) => this.showError(`retry: ${error.message}`));
        return;
      }
      if (!item.failure || item.failure.final) return;
      item.failure = null;
      item.upload.state = "waiting";
      item.tries = 0;
      item.notBefore = 0;
      this.held.push(item);
      this.render(item);
      this.flush();
    }

    // What waits here: held messages and the SDK's not yet accepted ones (the banner's count).
    waiting() {
      let count = 0;
      for (const item of this.outgoing.values()) {
        if (item.failure) continue;
        if (!item.record || item.record.status === "pending" || item.record.status === "sending") count += 1;
      }
      return count;
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

    // MARK: receiving

    // A message of another user, announced by the SDK once, in seq order, with every lower seq on the device.
    onMessage(message) {
      if (message.conversationId !== conversationId || message.direction !== "in") return;
      if (this.incoming.has(message.serverId)) {
        this.duplicates += 1;
        this.wireLog("!", `message ${short(message.serverId)} came twice`);
        this.renderPane();
        return;
      }
      const count = (message.attachments || []).length;
      this.wireLog("←", `message seq ${message.seq} from ${message.senderId}${count > 0 ? ` with ${count} attachment${count > 1 ? "s" : ""}` : ""}`);
      if (message.type.startsWith("pigeon.")) return;
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
      this.incoming.set(message.serverId, { message, node });
      this.place(node, message.seq);
      this.dom.list.scrollTop = this.dom.list.scrollHeight;
      this.renderIncoming();
      this.hidePeerTyping();
      this.syncReceipts();
    }

    isReading() {
      return lookingAt === this && document.visibilityState === "visible";
    }

    // Read up to every message shown, while the chat is looked at (the SDK sends delivered by itself).
    syncReceipts() {
      if (!this.online || !this.isReading() || !conversationId || !this.client) return;
      let upToSeq = 0;
      for (const { message } of this.incoming.values()) upToSeq = Math.max(upToSeq, message.seq);
      if (upToSeq <= Math.max(this.myRead, this.readAsked)) return;
      this.readAsked = upToSeq;
      this.wireLog("→", `receipt read up to ${upToSeq}`);
      // The demo lists every message, thread replies too: all of them are shown.
      this.client.markRead(conversationId, upToSeq, { includingThreadReplies: true }).then(
        (marks) => {
          this.myRead = Math.max(this.myRead, marks.readSeq);
          this.renderIncoming();
        },
        (error) => {
          this.readAsked = this.myRead; // asked again at the next occasion
          this.wireLog("×", `receipt: ${error.code}: ${error.message}`);
        },
      );
    }

    // MARK: typing

    typed() {
      if (!this.online || this.connection !== "online" || !conversationId) return;
      const now = Date.now();
      if (now - this.typingSentAt > 3000) {
        this.typingSentAt = now;
        this.client.typing(conversationId, true).catch(() => {});
      }
      clearTimeout(this.typingStopTimer);
      this.typingStopTimer = setTimeout(() => this.stopTyping(), 4000);
    }

    // Typing is ephemeral: a lost indicator is not worth a retry.
    stopTyping() {
      clearTimeout(this.typingStopTimer);
      if (this.typingSentAt === 0) return;
      this.typingSentAt = 0;
      if (this.online && this.connection === "online") this.client.typing(conversationId, false).catch(() => {});
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
      if (!item.record) return "pending";
      const status = item.record.status;
      return status === "sending" ? "pending" : status;
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
      const record = item.record || {};
      const seq = record.seq ?? null;
      const recipientsOnline = record.recipientsOnline ?? null;
      node.dataset.status = status;
      node.dataset.tick = symbol;
      if (record.serverId) this.addRow(record.serverId, node, this.userId, item.body, record.reactions || []);
      if (seq !== null) node.dataset.seq = String(seq);
      if (recipientsOnline !== null) node.dataset.recipientsOnline = String(recipientsOnline);
      const { tick, why, retry, attachment, uploading } = item.parts;
      if (item.upload) this.renderUpload(item, attachment, uploading);
      tick.textContent = symbol;
      let title = meaning;
      if (seq !== null) title += ` (seq ${seq}`;
      if (recipientsOnline !== null) title += recipientsOnline > 0 ? ", handed to the online device" : ", waiting in the other's mailbox";
      if (seq !== null) title += ")";
      tick.title = title;
      const failure = item.failure || (status === "failed" ? { ...(record.error || { code: "failed", message: "" }), final: !TRANSIENT.has(record.error && record.error.code) } : null);
      if (failure) {
        node.dataset.errorCode = failure.code;
        why.textContent = `${failure.code}: ${failure.message}`;
        if (!failure.final) why.append(retry);
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
        blob = local || (await this.client.attachment(attachment.id));
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
        const blob = local || (await this.client.attachment(attachment.id));
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
        const read = message.seq <= this.myRead;
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
      const waiting = this.waiting();
      d.pane.dataset.waiting = String(waiting);
      d.connection.textContent = {
        connecting: "connecting…",
        online: "connected",
        reconnecting: "reconnecting…",
        offline: "offline",
      }[this.connection];
      d.reading.textContent = reading ? "👁 reading" : "not reading";
      d.reading.title = reading ? "this chat is looked at: what arrives is read" : "click the chat to read it";
      d.banner.hidden = this.online;
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

    // PUT adds, DELETE removes (client.react / unreact). The answer holds the aggregate too, but the pills show the
    // reaction event of the stream: it comes in the stream's order, so a late answer cannot draw an older state.
    // Reacting is local-first in the SDK, as sending is: the pills change at once (offline too) and the change goes
    // out when the pane is online; the server's reaction events then set them.
    async react(serverId, key, action) {
      this.wireLog("→", `${action === "add" ? "PUT" : "DELETE"} reaction ${key} on ${short(serverId)}${this.online ? "" : " (queued: offline)"}`);
      try {
        const reactions = await (action === "add" ? this.client.react(conversationId, serverId, key) : this.client.unreact(conversationId, serverId, key));
        this.setReactions(serverId, reactions);
      } catch (error) {
        this.showError(`react ${key}: ${error.code}: ${error.message}`);
      }
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
    const text = preview.unavailable
      ? "(message unavailable)"
      : preview.deleted
      ? "(deleted)"
      : characters.length === 0
        ? "📎"
        : characters.length > QUOTED_BODY
          ? `${characters.slice(0, QUOTED_BODY).join("")}…`
          : preview.body;
    return el("span", { class: "quote", "data-sender-id": preview.senderId }, `↪ ${preview.senderId}: ${text}`);
  }

  function readyCheck() {
    if (sides.every((side) => side.everConnected) && conversationId) document.body.dataset.ready = "true";
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

  async function setup() {
    document.body.dataset.ready = "false";
    try {
      API = apiOrigin();
    } catch (error) {
      API = location.origin;
      setupFailed(error);
      return;
    }
    $("api").textContent = API;
    const alice = new Side("alice", "websocket");
    const bob = new Side("bob", "sse");
    sides.push(alice, bob);
    document.addEventListener("visibilitychange", () => {
      for (const side of sides) {
        side.renderPane();
        side.syncReceipts();
      }
    });
    try {
      SDK = await import(API + "/sdk/pigeon.js");
      // Each load registers new users, with a database each: the ones of earlier loads are dropped (a database another
      // tab still has open goes once that tab closes).
      if (indexedDB.databases) {
        for (const { name } of await indexedDB.databases()) if (name && name.startsWith("pigeon-demo-")) indexedDB.deleteDatabase(name);
      }
      await alice.register();
      await bob.register();
      // The clients start (their streams live from now) before the conversation exists: they miss nothing of it.
      for (const side of sides) await side.start();
      const conversation = await alice.client.createConversation([bob.userId]);
      conversationId = conversation.id;
      document.body.dataset.conversationId = conversationId;
      for (const side of sides) side.enable();
      readyCheck();
    } catch (error) {
      setupFailed(error);
    }
  }

  setup();
})();
