// PigeonJS: the client of one device: the tabs' leadership, the outbox, receiving and gap recovery, over the event
// stream (stream.js) and the HTTP API (transport.js) (docs/SDK-JS.md).

import { PigeonError } from "./errors.js";
import { applyEvidence } from "./status.js";
import { START_SETTLES_MS, RECEIPT_BATCH_MS, HISTORY_PAGE, afterFailedTry, MAX_BODY_BYTES } from "./policy.js";
import { CHANGE_TYPES, changeApplied, UUID, requireConversationId } from "./messages.js";
import { canonicalReactionKey, withPendingReactions } from "./reactions.js";
import { LocalStore, sortKeyOf } from "./store.js";
import { EventStream } from "./stream.js";
import { ServerApi } from "./transport.js";

// MARK: - The client

/**
 * A Pigeon client for one device: `new PigeonClient({ server, token, userId, database })`, then `await start()`.
 *
 * Events (an `EventTarget`; each a `CustomEvent` whose `detail` is described in docs/SDK-JS.md): `message` (a new
 * message from someone else, in seq order), `status` (an outgoing message's status moved), `receipt`, `typing`,
 * `reaction`, `conversation`, `connection` (`detail.state`: `connecting`, `online`, `offline`, `stopped`; and
 * `detail.leader`).
 */
export class PigeonClient extends EventTarget {
    #server;
    #database;
    #debug;
    #store = null;
    #channel = null;
    #started = false;
    #releaseLock = null;
    #leader = false;
    #state = "stopped";
    /** Resolves `start()`: set by `start`, called once the connection state is known. */
    #stateKnown = null;
    #api;
    #stream;
    #events = Promise.resolve();
    #inFlight = new Set();
    #outboxTimer = null;
    #gapTimers = new Map();
    #receiptTimers = new Map();
    #flushingReads = false;
    #readsAgain = false;
    #onlineListener = () => this.#browserOnline();
    #offlineListener = () => this.#browserOffline();

    /**
     * @param {object} options
     * @param {string} options.server the server's origin, e.g. `https://chat.example.com`.
     * @param {string} options.token the device's token (sent as `Authorization: Bearer`, and in the stream's URL).
     * @param {string} [options.userId] this device's user; read from a JWT's `sub` when not given.
     * @param {string} options.database the IndexedDB database name (one per signed-in device of the app).
     * @param {"auto"|"websocket"|"sse"} [options.transport] the event stream; `auto`: the WebSocket, SSE when refused.
     * @param {{dropEvent?: (event: object) => boolean}} [options.debug] test hooks: `dropEvent` drops a stream frame.
     */
    constructor({ server, token, userId, database, transport = "auto", debug = {} } = {}) {
        super();
        if (typeof server !== "string" || !/^https?:\/\/[^/]+\/?$/.test(server)) {
            throw new PigeonError("invalid_request", "server must be an origin such as https://chat.example.com");
        }
        if (typeof token !== "string" || token.length === 0) throw new PigeonError("invalid_request", "token is required");
        if (typeof database !== "string" || database.length === 0) throw new PigeonError("invalid_request", "database is required");
        if (!["auto", "websocket", "sse"].includes(transport)) throw new PigeonError("invalid_request", "transport must be auto, websocket or sse");
        this.#server = server.replace(/\/$/, "");
        this.#database = database;
        this.#debug = debug;
        this.userId = userId ?? PigeonClient.#userOfJWT(token);
        if (!this.userId) throw new PigeonError("invalid_request", "userId is required with an opaque (pgn_) token");
        this.#api = new ServerApi(this.#server, token);
        this.#stream = new EventStream({
            server: this.#server, token, choice: transport,
            onOpened: () => this.#streamOpened(), onFrame: (text) => this.#frame(text), onLost: () => this.#streamLost(),
        });
    }

    /**
     * Registers a device of `userId` on a server with open registration (`POST /v1/devices`) and resolves with
     * `{userId, deviceId, token}`: where a token comes from when the app's backend mints none. A further device of a
     * user needs a token of one of its devices (`existingToken`). With JWTs from the app's backend, use those instead.
     */
    static async registerDevice(server, userId, { deviceName, existingToken } = {}) {
        if (typeof server !== "string" || !/^https?:\/\/[^/]+\/?$/.test(server)) {
            throw new PigeonError("invalid_request", "server must be an origin such as https://chat.example.com");
        }
        const headers = { "Content-Type": "application/json" };
        if (existingToken) headers.Authorization = `Bearer ${existingToken}`;
        let response;
        try {
            response = await fetch(`${server.replace(/\/$/, "")}/v1/devices`, {
                method: "POST", headers, body: JSON.stringify(deviceName ? { userId, deviceName } : { userId }),
            });
        } catch (error) {
            throw new PigeonError("network", `the server could not be reached: ${error.message}`);
        }
        const answer = await response.json().catch(() => null);
        if (!response.ok) {
            throw new PigeonError(answer?.error?.code ?? "server", answer?.error?.message ?? `the server answered ${response.status}`);
        }
        return { userId: answer.userId, deviceId: answer.deviceId, token: answer.token };
    }

    /** `sub` of a JWT, or null for anything else. */
    static #userOfJWT(token) {
        const parts = token.split(".");
        if (parts.length !== 3) return null;
        try {
            return JSON.parse(atob(parts[1].replace(/-/g, "+").replace(/_/g, "/"))).sub ?? null;
        } catch {
            return null;
        }
    }

    /** The connection state: `stopped`, `connecting`, `online` or `offline` (the leader's, in every tab). */
    get state() {
        return this.#state;
    }

    /** Whether this tab owns the stream and the outbox. */
    get isLeader() {
        return this.#leader;
    }

    /**
     * Opens the local store, joins the tabs of this database and connects (this tab becomes the leader at once, or
     * when the current leader's tab closes). Resolves with the connection state once it is known: `"online"` (the
     * stream is open), `"offline"` (the browser is), or `"connecting"` when the first attempt failed and it keeps
     * trying (a `connection` event tells when it is online); in another tab than the leader, the leader's state. It
     * resolves within 10 seconds whatever happens; it never rejects for the network (only for the store).
     */
    async start() {
        if (this.#started) return this.#state;
        this.#store = await LocalStore.open(this.#database);
        this.#started = true;
        const known = new Promise((resolve) => {
            this.#stateKnown = resolve;
        });
        const settled = setTimeout(() => this.#knowState(), START_SETTLES_MS);
        this.#channel = new BroadcastChannel(`pigeon:${this.#database}`);
        this.#channel.onmessage = (event) => this.#fromOtherTab(event.data);
        // A follower learns the leader's connection state at once, not at its next change.
        this.#channel.postMessage({ kind: "hello" });
        addEventListener("online", this.#onlineListener);
        addEventListener("offline", this.#offlineListener);
        if (navigator.locks) {
            navigator.locks.request(`pigeon:${this.#database}`, () => new Promise((release) => {
                if (!this.#started) return release();
                this.#releaseLock = release;
                this.#becomeLeader();
            }));
        } else {
            // Without Web Locks every tab leads: use one tab per database there.
            this.#becomeLeader();
        }
        await known;
        clearTimeout(settled);
        return this.#state;
    }

    /** The connection state is known: `start()` resolves (once). */
    #knowState() {
        const resolve = this.#stateKnown;
        this.#stateKnown = null;
        resolve?.();
    }

    /** Closes the stream, leaves the leadership to another tab and closes the store. The outbox stays. */
    stop() {
        if (!this.#started) return;
        this.#started = false;
        this.#leader = false;
        removeEventListener("online", this.#onlineListener);
        removeEventListener("offline", this.#offlineListener);
        this.#stream.close();
        this.#stream.cancelRetry();
        clearTimeout(this.#outboxTimer);
        for (const timer of [...this.#gapTimers.values(), ...this.#receiptTimers.values()]) clearTimeout(timer);
        this.#gapTimers.clear();
        this.#receiptTimers.clear();
        this.#releaseLock?.();
        this.#releaseLock = null;
        this.#channel.close();
        this.#store.close();
        this.#setState("stopped");
        this.#knowState();
    }

    // MARK: Reading the store

    /** The conversations on this device, the newest activity first. */
    async conversations() {
        const all = await this.#store.getAll("conversations");
        const activity = (c) => c.lastMessage?.storedAt ?? c.createdAt ?? 0;
        return all.sort((a, b) => activity(b) - activity(a));
    }

    /** One conversation from the store, or undefined. */
    conversation(conversationId) {
        return this.#store.get("conversations", conversationId);
    }

    /**
     * Up to `limit` messages of a conversation from the store, ascending: the newest ones (messages not stored yet
     * last), or those before `before` (a seq) to scroll back.
     */
    async messages(conversationId, { before, limit = 50 } = {}) {
        const upper = before != null ? before : Infinity;
        const range = IDBKeyRange.bound([conversationId, -Infinity], [conversationId, upper], false, before != null);
        const newestFirst = await this.#store.range("messages", "bySort", range, { limit, reverse: true });
        return newestFirst.reverse();
    }

    /** One local record by its `localId`, or undefined. */
    message(localId) {
        return this.#store.get("messages", localId);
    }

    // MARK: Sending

    /**
     * Saves a message on this device and queues it: resolves with its local record (status `pending`) once saved.
     * It goes out in order with this device's other sends to the conversation, even after a reload; `status`
     * events follow its ticks. `clientMessageId` (a UUID) is the app's own id for it when the app shows the message
     * before it hands it over (the server de-duplicates by it); by default a new one.
     */
    async send(conversationId, text, { type = "text", replyTo = null, threadRoot = null, attachments = [], clientMessageId } = {}) {
        this.#requireStarted();
        requireConversationId(conversationId);
        if (typeof text !== "string") throw new PigeonError("invalid_request", "text must be a string");
        if (!/^[a-z0-9._-]{1,32}$/.test(type) || type.startsWith("pigeon.")) {
            throw new PigeonError("invalid_request", "type must be 1-32 characters of [a-z0-9._-], not pigeon.*");
        }
        if (clientMessageId !== undefined && (typeof clientMessageId !== "string" || !UUID.test(clientMessageId))) {
            throw new PigeonError("invalid_request", "clientMessageId must be a UUID");
        }
        const now = Date.now();
        const record = {
            localId: crypto.randomUUID(), clientMessageId: clientMessageId?.toLowerCase() ?? crypto.randomUUID(), conversationId, direction: "out", local: true,
            senderId: this.userId, type, body: text, replyTo, threadRoot, attachments, reactions: [],
            clientTimestamp: now, createdAt: now, status: "pending", tries: 0, failureIsLocal: true,
        };
        record.sortKey = sortKeyOf(record);
        await this.#store.transaction(["messages", "outbox"], "readwrite", (s) => {
            s.messages.put(record);
            s.outbox.put({ localId: record.localId, conversationId, notBefore: 0 });
        });
        this.#outboxChanged();
        return record;
    }

    /** Sends a failed message again: back to `pending` at the end of the outbox (a new clientMessageId when the server dead-lettered it). */
    async retry(localId) {
        this.#requireStarted();
        let moved = false;
        await this.#store.transaction(["messages", "outbox"], "readwrite", (s) => {
            const request = s.messages.get(localId);
            request.onsuccess = () => {
                const record = request.result;
                if (!record || record.status !== "failed") return;
                const next = applyEvidence(record.status, "retry");
                if (!record.failureIsLocal) record.clientMessageId = crypto.randomUUID();
                Object.assign(record, { status: next, tries: 0, failureIsLocal: true, error: null });
                s.messages.put(record);
                s.outbox.put({ localId, conversationId: record.conversationId, notBefore: 0 });
                moved = true;
                if (CHANGE_TYPES.has(record.type) && record.target) {
                    // The change shows on its message again while it is retried.
                    const target = s.messages.get(record.target);
                    target.onsuccess = () => {
                        if (!target.result || target.result.deletedAt) return;
                        s.messages.put(Object.assign(target.result, changeApplied(record, Date.now())));
                    };
                }
            };
        });
        if (!moved) throw new PigeonError("invalid_request", "only a failed message can be retried");
        this.#announce("status", { message: await this.message(localId), status: "pending", previous: "failed" });
        this.#outboxChanged();
    }

    // MARK: Editing and deleting

    /**
     * Replaces the text of this user's message `localId` with `text`. Local-first, like a send: the message shows the
     * new text (and `editedAt`) at once, offline too, with an `updated` event; the edit is an outgoing record of its
     * own (type `pigeon.edit`, `target` = the message's localId, with `status` events) that the outbox sends in the
     * conversation's order, so an edit of a message still waiting goes right after it. If the edit fails (the server
     * refuses it, e.g. `forbidden` for another user's message), the message reads as before again (`updated`);
     * `retry` on the edit tries again. Resolves with the edit's record. Throws, saving nothing, `not_found` (no such
     * message on the device), `invalid_request` (empty text, U+0000, a member change or another change, a failed
     * message: retry it first), `payload_too_large` (over 65,536 bytes) or `conflict` (a deleted message).
     */
    async edit(localId, text) {
        if (typeof text !== "string" || text === "") throw new PigeonError("invalid_request", "the text is empty (to remove a message, delete it)");
        const bytes = new TextEncoder().encode(text).length;
        if (bytes > MAX_BODY_BYTES) throw new PigeonError("payload_too_large", `the text is ${bytes} bytes; the limit is ${MAX_BODY_BYTES}`);
        if (text.includes("\u0000")) throw new PigeonError("invalid_request", "the text contains U+0000");
        return this.#saveChange(localId, text);
    }

    /**
     * Deletes this user's message `localId` for everyone: its text is erased on the device at once (`body` "",
     * `deletedAt`, no reactions; an `updated` event) and from the server once the deletion (type `pigeon.delete`)
     * reaches it, like `edit`.
     */
    async delete(localId) {
        return this.#saveChange(localId, null);
    }

    async #saveChange(localId, text) {
        this.#requireStarted();
        const target = typeof localId === "string" ? await this.message(localId) : undefined;
        if (!target) throw new PigeonError("not_found", `the device has no message ${localId}`);
        if (target.type.startsWith("pigeon.")) throw new PigeonError("invalid_request", "a member change, an edit or a deletion cannot be changed");
        if (target.deletedAt) throw new PigeonError("conflict", "the message is deleted");
        if (target.status === "failed") throw new PigeonError("invalid_request", "the message failed to send: retry it first");
        const now = Date.now();
        const change = {
            localId: crypto.randomUUID(), clientMessageId: crypto.randomUUID(), conversationId: target.conversationId, direction: "out",
            local: true, senderId: this.userId, type: text === null ? "pigeon.delete" : "pigeon.edit", body: "", target: target.localId,
            newBody: text, replyTo: null, threadRoot: null, attachments: [], reactions: [],
            clientTimestamp: now, createdAt: now, status: "pending", tries: 0, failureIsLocal: true,
        };
        change.sortKey = sortKeyOf(change);
        let shown = null;
        await this.#store.transaction(["messages", "outbox"], "readwrite", (s) => {
            const request = s.messages.get(target.localId);
            request.onsuccess = () => {
                const current = request.result;
                change.before = { body: current.body, editedAt: current.editedAt ?? null, deletedAt: current.deletedAt ?? null, reactions: current.reactions ?? [] };
                shown = Object.assign(current, changeApplied(change, now));
                s.messages.put(shown);
                s.messages.put(change);
                s.outbox.put({ localId: change.localId, conversationId: change.conversationId, notBefore: 0 });
            };
        });
        this.#announce("updated", { message: shown, change });
        this.#outboxChanged();
        return change;
    }

    /** A failed edit or deletion: its message reads as before it again, unless a newer change of it came since. */
    async #revertChange(change) {
        let shown = null;
        await this.#store.update("messages", change.target, (target) => {
            if (!target || target.pendingChange !== change.localId) return null;
            const { body, editedAt, deletedAt, reactions } = change.before ?? {};
            shown = Object.assign(target, { body: body ?? target.body, editedAt, deletedAt, reactions: reactions ?? [], pendingChange: null });
            return shown;
        });
        if (shown) this.#announce("updated", { message: shown, change });
    }

    /**
     * The app's before-send hook stored another body than this device sent: the sender's copy reads as stored (a
     * message takes the body; an edit its new text, which its message shows while the edit is its pending change).
     */
    async #bodyReplaced(record, body) {
        let shown = null;
        if (record.type === "pigeon.edit") {
            await this.#store.update("messages", record.localId, (r) => (r ? { ...r, newBody: body } : null));
            await this.#store.update("messages", record.target, (target) => {
                if (!target || target.pendingChange !== record.localId) return null;
                shown = Object.assign(target, { body });
                return shown;
            });
        } else if (!CHANGE_TYPES.has(record.type)) {
            await this.#store.update("messages", record.localId, (r) => {
                if (!r) return null;
                shown = Object.assign(r, { body });
                return shown;
            });
        }
        if (shown) this.#announce("updated", { message: shown });
    }

    /** This device's change is stored: its message no longer waits for it (a later change from the server applies). */
    async #changeStored(change) {
        await this.#store.update("messages", change.target, (target) => {
            if (!target) return null;
            if (target.pendingChange === change.localId) target.pendingChange = null;
            if (change.seq != null) target.changeSeq = Math.max(target.changeSeq ?? 0, change.seq);
            return target;
        });
    }

    /**
     * A change from the server (`pigeon.edit`, `pigeon.delete`, this device's own once stored): its message takes it,
     * unless the message already took a later one or waits for a change of this device's own that is not stored yet.
     */
    async #applyServerChange(message) {
        if (!CHANGE_TYPES.has(message.type) || message.seq == null) return;
        let body;
        try {
            body = JSON.parse(message.body);
        } catch {
            return;
        }
        const target = body?.serverId && (await this.#store.byIndex("messages", "serverId", body.serverId));
        if (!target) return; // Not on the device: the server's copy of it, when it comes, reads changed already.
        const own = await this.#store.byIndex("messages", "clientMessageId", message.clientMessageId);
        let shown = null;
        await this.#store.update("messages", target.localId, (record) => {
            if (!record || (record.changeSeq ?? 0) >= message.seq) return null;
            const mine = own && own.target === record.localId ? own.localId : null;
            if (record.pendingChange && record.pendingChange !== mine) return { ...record, changeSeq: message.seq };
            const at = message.storedAt ?? message.acceptedAt ?? Date.now();
            shown = Object.assign(record, message.type === "pigeon.delete"
                ? { body: "", deletedAt: at, reactions: [], serverReactions: [], pendingReactions: [] }
                : { body: typeof body.body === "string" ? body.body : record.body, editedAt: at });
            Object.assign(shown, { changeSeq: message.seq, pendingChange: null });
            return shown;
        });
        if (shown) this.#announce("updated", { message: shown });
    }

    // MARK: Conversations, receipts, typing, reactions, threads, attachments

    /** Creates a conversation with `members` (userIds; the caller is added): resolves with the server's Conversation. */
    async createConversation(members, { name = null } = {}) {
        const conversation = await this.#api.call("POST", "/v1/conversations", { members, name });
        await this.#saveConversation(conversation);
        return conversation;
    }

    /** Lists the conversations from the server into the store; resolves with the store's list. */
    async refreshConversations() {
        const { conversations } = await this.#api.call("GET", "/v1/conversations");
        for (const conversation of conversations) await this.#saveConversation(conversation);
        return this.conversations();
    }

    /**
     * Marks the conversation's main chat read up to `upToSeq` (default: every message this device has): call it for what
     * the screen shows. A read receipt means "shown to the user": thread replies count once their thread is shown
     * (`markThreadRead`) or with `{includingThreadReplies: true}`, and the watermark stops below the first incoming
     * message not shown. At once on the device, and offline too. The read watermark is saved with the conversation and its receipt goes out from the leader tab when
     * online (after a reload too), like a send; the server's answer then confirms it. Resolves with this user's
     * watermarks as the device has them. Throws `not_found` for a conversation the device does not have and
     * `invalid_request` for a seq that is not a whole number.
     */
    async markRead(conversationId, upToSeq, { includingThreadReplies = false, threadRoot = null } = {}) {
        const conversation = await this.conversation(conversationId);
        if (!conversation) throw new PigeonError("not_found", `the device has no conversation ${conversationId}`);
        const contiguous = conversation.contiguousSeq ?? 0;
        const target = upToSeq ?? contiguous;
        if (!Number.isSafeInteger(target) || target < 0) throw new PigeonError("invalid_request", "upToSeq must be a whole number ≥ 0");
        // Read means shown: the main chat's messages (with includingThreadReplies, thread replies too) or, with
        // threadRoot, that thread's replies are marked shown; the watermark stops below the first incoming one not shown.
        const mine = conversation.members?.find((m) => m.userId === this.userId);
        const current = Math.max(mine?.readSeq ?? 0, conversation.readToSend ?? 0);
        let firstUnshown = Infinity;
        if (contiguous > current) {
            const pending = await this.#store.range("messages", "bySeq", IDBKeyRange.bound([conversationId, current + 1], [conversationId, contiguous]));
            for (const record of pending) {
                if (record.direction === "out" || record.shown) continue;
                const inScope = threadRoot ? record.threadRoot === threadRoot : includingThreadReplies || !record.threadRoot;
                if (inScope && record.seq <= target) {
                    await this.#store.update("messages", record.localId, (r) => r && { ...r, shown: true });
                } else {
                    firstUnshown = Math.min(firstUnshown, record.seq);
                }
            }
        }
        const seq = Math.min(contiguous, firstUnshown - 1);
        if (seq < 1 || seq <= current) {
            const known = (await this.conversation(conversationId))?.members?.find((m) => m.userId === this.userId);
            return { deliveredSeq: known?.deliveredSeq ?? 0, readSeq: known?.readSeq ?? 0 };
        }
        await this.#store.update("conversations", conversationId, (c) => c && { ...c, readToSend: Math.max(c.readToSend ?? 0, seq) });
        await this.#applyWatermark(conversationId, this.userId, "read", seq);
        this.#outboxChanged();
        const me = (await this.conversation(conversationId))?.members?.find((m) => m.userId === this.userId);
        return { deliveredSeq: me?.deliveredSeq ?? seq, readSeq: me?.readSeq ?? seq };
    }

    /** Marks the replies of the thread of `threadRoot` (the root's serverId) read: call it while the thread is shown. */
    async markThreadRead(conversationId, threadRoot, upToSeq) {
        return this.markRead(conversationId, upToSeq, { threadRoot });
    }

    /** Shows (or stops showing) this user typing in a conversation; the server ends it by itself after 10 s. */
    async typing(conversationId, active = true) {
        if (this.#leader && this.#stream.send({ op: "typing", conversationId, active })) return;
        await this.#api.call("POST", `/v1/conversations/${conversationId}/typing`, { active });
    }

    /**
     * Adds this user's reaction `key` (one emoji, or an app token `[a-z0-9_:+-]{1,32}`) to a message the device holds
     * (by its serverId). Local-first, like a send: the message's `reactions` show it at once, offline too, and the
     * leader sends it when online, in order with the conversation's sends, after a reload too; an add and a remove of
     * one key that have not gone out cancel each other. Resolves with the message's reactions as the device now shows
     * them; the server's answer and its `reaction` events then set them. A reaction the server refuses (a deleted
     * message, a key it does not take, too many keys) is dropped: the `reaction` event that gives the aggregate back
     * carries its `error`.
     */
    react(conversationId, serverId, key) {
        return this.#queueReaction(conversationId, serverId, key, true);
    }

    /** Removes this user's reaction `key` from a message, local-first as `react` adds one. */
    unreact(conversationId, serverId, key) {
        return this.#queueReaction(conversationId, serverId, key, false);
    }

    async #queueReaction(conversationId, serverId, key, add) {
        this.#requireStarted();
        requireConversationId(conversationId);
        if (typeof serverId !== "string" || serverId === "") throw new PigeonError("invalid_request", "serverId must be a message's serverId");
        const given = key;
        key = canonicalReactionKey(given);
        if (key === null) {
            throw new PigeonError("invalid_request", "a reaction key is one emoji or an app token [a-z0-9_:+-]{1,32}, at most 64 bytes");
        }
        const record = await this.#store.byIndex("messages", "serverId", serverId);
        if (!record || record.conversationId !== conversationId) {
            throw new PigeonError("not_found", `the device has no message ${serverId} in conversation ${conversationId}`);
        }
        if (record.deletedAt) throw new PigeonError("conflict", "a deleted message takes no reactions");
        if (record.type?.startsWith("pigeon.")) throw new PigeonError("conflict", "the server's own messages take no reactions");
        let shown = null;
        let changed = false;
        await this.#store.transaction(["messages", "outbox"], "readwrite", (s) => {
            const request = s.messages.get(record.localId);
            request.onsuccess = () => {
                const current = request.result;
                const pending = current.pendingReactions ?? [];
                const base = pending.length > 0 ? current.serverReactions ?? [] : current.reactions ?? [];
                const holds = (list) => withPendingReactions(base, list).find((reaction) => reaction.key === key)?.me === true;
                const save = () => {
                    Object.assign(current, { serverReactions: base, pendingReactions: pending, reactions: withPendingReactions(base, pending) });
                    s.messages.put(current);
                    shown = current.reactions;
                    changed = true;
                };
                if (holds(pending) === add) {
                    shown = withPendingReactions(base, pending);
                    return;
                }
                // The opposite change not yet tried: both cancel, when that leaves what is asked for.
                const last = pending.findLastIndex((change) => change.key === key);
                if (last >= 0 && !pending[last].tried && holds(pending.toSpliced(last, 1)) === add) {
                    s.outbox.delete(pending[last].order);
                    pending.splice(last, 1);
                    return save();
                }
                const put = s.outbox.put({ kind: "reaction", conversationId, serverId, key, add, notBefore: 0 });
                put.onsuccess = () => {
                    pending.push({ order: put.result, key, add });
                    save();
                };
            };
        });
        if (changed) {
            this.dispatchEvent(new CustomEvent("reaction", {
                detail: { conversationId, serverId, key, userId: this.userId, action: add ? "add" : "remove", reactions: shown, at: Date.now(), local: true },
            }));
            this.#outboxChanged();
        }
        return shown;
    }

    /** A thread's root and replies (`{root, messages, hasMore}`), from the server. */
    thread(conversationId, rootServerId, { after, before, limit } = {}) {
        const query = new URLSearchParams();
        if (after != null) query.set("after", after);
        if (before != null) query.set("before", before);
        if (limit != null) query.set("limit", limit);
        return this.#api.call("GET", `/v1/conversations/${conversationId}/threads/${rootServerId}/messages?${query}`);
    }

    /** Uploads a file (a `Blob`/`File`): resolves with the attachment (`id`, `name`, `size`, ...) to pass to `send`. */
    async upload(blob, name = blob.name) {
        if (!(blob instanceof Blob)) throw new PigeonError("invalid_request", "upload takes a Blob or a File");
        if (!name) throw new PigeonError("invalid_request", "an upload needs a name");
        return this.#api.call("POST", `/v1/attachments?name=${encodeURIComponent(name)}`, blob);
    }

    /** An attachment's bytes, fetched with the token in `Authorization` (never in a URL). */
    async attachment(id) {
        const response = await this.#api.fetch("GET", `/v1/attachments/${id}`);
        return response.blob();
    }

    // MARK: Checks

    #requireStarted() {
        if (!this.#started) throw new PigeonError("stopped", "call start() first");
    }

    // MARK: Events out (this tab's listeners, and the other tabs')

    #announce(type, detail) {
        this.dispatchEvent(new CustomEvent(type, { detail }));
        if (this.#leader) this.#channel?.postMessage({ kind: "event", type, detail });
    }

    #setState(state) {
        if (this.#state === state) return;
        this.#state = state;
        this.#announce("connection", { state, leader: this.#leader, transport: this.#stream.transport });
    }

    #fromOtherTab(data) {
        if (data.kind === "event" && !this.#leader) {
            if (data.type === "connection") {
                this.#state = data.detail.state;
                this.#knowState();
            }
            this.dispatchEvent(new CustomEvent(data.type, { detail: { ...data.detail, leader: false } }));
        } else if (data.kind === "outbox" && this.#leader) {
            this.#pumpOutbox();
        } else if (data.kind === "hello" && this.#leader) {
            this.#channel.postMessage({ kind: "event", type: "connection", detail: { state: this.#state, transport: this.#stream.transport } });
        }
    }

    /** A send was saved: the leader sends it, wherever it runs. */
    #outboxChanged() {
        if (this.#leader) this.#pumpOutbox();
        else this.#channel.postMessage({ kind: "outbox" });
    }

    // MARK: Leadership

    #becomeLeader() {
        this.#leader = true;
        this.#connect();
        this.#pumpOutbox();
    }

    // MARK: The stream

    #browserOnline() {
        if (!this.#leader) return;
        this.#stream.resetBackoff();
        if (!this.#stream.isOpen) this.#connect();
    }

    #browserOffline() {
        if (!this.#leader) return;
        this.#stream.close();
        this.#setState("offline");
        this.#knowState();
    }

    async #connect() {
        if (!this.#leader || !this.#started || this.#stream.isOpen) return;
        if (navigator.onLine === false) {
            this.#setState("offline");
            return this.#knowState();
        }
        this.#setState("connecting");
        const cursor = (await this.#store.get("meta", "cursor"))?.value;
        if (!this.#leader || !this.#started || this.#stream.isOpen) return;
        this.#stream.open(cursor);
    }

    #streamOpened() {
        this.#setState("online");
        this.#knowState();
        // Whatever happened while away (a restart, a reset, messages of a conversation this device never heard of):
        // one list of the conversations, then the history of each that moved.
        this.#enqueue(() => this.#catchUp());
        this.#pumpOutbox();
    }

    #streamLost() {
        if (!this.#leader || !this.#started) return;
        // The first attempt's end is known either way: offline, or failing and trying again.
        this.#knowState();
        if (navigator.onLine === false) return this.#setState("offline");
        this.#setState("connecting");
        this.#stream.retry(() => this.#connect());
    }

    /** Frames are processed one at a time, in order; the cursor is saved after each event is persisted. */
    #frame(text) {
        let event;
        try {
            event = JSON.parse(text);
        } catch {
            return;
        }
        if (this.#debug.dropEvent?.(event)) return;
        this.#enqueue(async () => {
            await this.#handle(event);
            if (event.cursor && event.type !== "typing") await this.#store.put("meta", { key: "cursor", value: event.cursor });
        });
    }

    #enqueue(work) {
        this.#events = this.#events.then(work).catch((error) => {
            console.error("pigeon: processing failed", error);
        });
        return this.#events;
    }

    async #handle(event) {
        switch (event.type) {
            case "message.new":
                return this.#received(event.message.conversationId, [event.message]);
            case "message.stored":
                return this.#storedEvent(event);
            case "message.failed":
                return this.#evidence({ clientMessageId: event.clientMessageId }, "failedOnServer", { error: event.error, failureIsLocal: false });
            case "receipt":
                await this.#applyWatermark(event.conversationId, event.userId, event.kind, event.upToSeq);
                return this.#announce("receipt", event);
            case "conversation.created":
                await this.#saveConversation(event.conversation);
                return this.#announce("conversation", { conversation: await this.conversation(event.conversation.id) });
            case "typing":
                return this.#announce("typing", event);
            case "reaction": {
                const shown = await this.#setReactions(event.serverId, event.reactions);
                return this.#announce("reaction", { ...event, reactions: shown ?? event.reactions });
            }
            case "reset":
                return this.#catchUp();
            case "ack": case "error":
                return; // Answers to WebSocket operations; the SDK sends over HTTP.
            default:
                return; // A newer server's event: ignored, as the contract allows.
        }
    }

    // MARK: Receiving

    /** Saves a Conversation from the server, keeping what this device knows (its contiguous seq). */
    async #saveConversation(conversation) {
        await this.#store.update("conversations", conversation.id, (existing) => ({
            ...existing, ...conversation, contiguousSeq: existing?.contiguousSeq ?? 0,
        }));
    }

    /**
     * Messages of one conversation from the stream or history: persisted, then the conversation's contiguous seq is
     * advanced; a seq beyond it is a gap, fetched from history at once. Messages are announced only when contiguous,
     * so the app sees them in seq order and never a hole.
     */
    async #received(conversationId, messages) {
        if (!(await this.conversation(conversationId))) {
            try {
                await this.#saveConversation(await this.#api.call("GET", `/v1/conversations/${conversationId}`));
            } catch (error) {
                if (error.code === "not_found") return;
                await this.#saveConversation({ id: conversationId, members: [] });
            }
        }
        for (const message of messages) await this.#persist(message);
        await this.#advance(conversationId);
    }

    /** One server Message into the store: matched by serverId, or (this device's own send) by clientMessageId. */
    async #persist(message) {
        const existing = (await this.#store.byIndex("messages", "serverId", message.serverId))
            ?? (await this.#store.byIndex("messages", "clientMessageId", message.clientMessageId));
        if (existing) {
            await this.#store.update("messages", existing.localId, (record) => {
                const shown = record.pendingChange ? { body: record.body, editedAt: record.editedAt, deletedAt: record.deletedAt } : null;
                Object.assign(record, this.#fields(message), shown ?? {});
                if (message.reactions) {
                    record.serverReactions = message.reactions;
                    record.reactionsHeard = (record.reactionsHeard ?? 0) + 1;
                    record.reactions = withPendingReactions(message.reactions, record.pendingReactions);
                }
                record.sortKey = sortKeyOf(record);
                return record;
            });
            if (existing.local) await this.#evidence({ localId: existing.localId }, "stored");
            await this.#applyServerChange(message);
            return;
        }
        const mine = message.senderId === this.userId;
        const record = {
            localId: crypto.randomUUID(), ...this.#fields(message), clientMessageId: message.clientMessageId,
            direction: mine ? "out" : "in", status: mine ? "stored" : undefined, createdAt: Date.now(),
        };
        record.sortKey = sortKeyOf(record);
        await this.#store.put("messages", record);
        await this.#applyServerChange(message);
    }

    #fields(message) {
        const { serverId, conversationId, seq, senderId, senderDeviceId, type, body, clientTimestamp, acceptedAt, storedAt,
            reactions, replyTo, replyPreview, threadRoot, thread, attachments, editedAt, deletedAt, withheldFrom } = message;
        return Object.fromEntries(Object.entries({ serverId, conversationId, seq, senderId, senderDeviceId, type, body,
            clientTimestamp, acceptedAt, storedAt, reactions, replyTo, replyPreview, threadRoot, thread, attachments, editedAt,
            deletedAt, withheldFrom }).filter(([, value]) => value !== undefined));
    }

    /**
     * Moves the conversation's contiguous seq over the messages the store holds; while one beyond it is known, fetches
     * the history after it (at once; on failure again after a second, never giving up). Announces each newly
     * contiguous message of another device, in seq order, and sends a delivered receipt.
     */
    async #advance(conversationId) {
        const conversation = await this.conversation(conversationId);
        const from = conversation.contiguousSeq ?? 0;
        let seq = from;
        while (await this.#store.byIndex("messages", "bySeq", [conversationId, seq + 1])) seq += 1;
        const beyond = await this.#store.range("messages", "bySeq",
            IDBKeyRange.bound([conversationId, seq + 1], [conversationId, Infinity]), { limit: 1 });
        if (beyond.length > 0 || seq < (conversation.lastSeq ?? 0)) {
            try {
                // The history is the server's whole answer: what it does not list up to the conversation's lastSeq
                // (as known before the fetch) does not exist for this user (hidden by a block, before its join).
                seq = Math.max(await this.#fetchHistory(conversationId, seq), conversation.lastSeq ?? 0);
                clearTimeout(this.#gapTimers.get(conversationId));
                this.#gapTimers.delete(conversationId);
            } catch (error) {
                if (!this.#gapTimers.has(conversationId)) {
                    this.#gapTimers.set(conversationId, setTimeout(() => {
                        this.#gapTimers.delete(conversationId);
                        this.#enqueue(() => this.#advance(conversationId));
                    }, 1_000));
                }
            }
        }
        if (seq <= from) return;
        await this.#store.update("conversations", conversationId, (c) => ({ ...c, contiguousSeq: Math.max(c.contiguousSeq ?? 0, seq) }));
        const fresh = await this.#store.range("messages", "bySeq", IDBKeyRange.bound([conversationId, from + 1], [conversationId, seq]));
        let incoming = false;
        for (const record of fresh) {
            if (record.local) continue;
            if (record.direction === "in") incoming = true;
            this.#announce("message", { message: record });
        }
        if (incoming) this.#scheduleDelivered(conversationId);
    }

    /** History after `after` until the newest page; persists it; resolves with the highest seq the server has for us. */
    async #fetchHistory(conversationId, after) {
        let seq = after;
        for (;;) {
            const page = await this.#api.call("GET", `/v1/conversations/${conversationId}/messages?after=${seq}&limit=${HISTORY_PAGE}`);
            for (const message of page.messages) await this.#persist(message);
            if (page.messages.length > 0) seq = page.messages[page.messages.length - 1].seq;
            if (!page.hasMore) return seq;
        }
    }

    /** The catch-up after a (re)connection or a `reset`: the conversations and their watermarks, then each one's missing messages. */
    async #catchUp() {
        let conversations;
        try {
            ({ conversations } = await this.#api.call("GET", "/v1/conversations"));
        } catch {
            return; // The stream's next reconnection tries again.
        }
        for (const conversation of conversations) {
            await this.#saveConversation(conversation);
            for (const member of conversation.members ?? []) {
                await this.#applyWatermark(conversation.id, member.userId, "read", member.readSeq);
                await this.#applyWatermark(conversation.id, member.userId, "delivered", member.deliveredSeq);
            }
            await this.#advance(conversation.id);
        }
    }

    #scheduleDelivered(conversationId) {
        if (!this.#leader || this.#receiptTimers.has(conversationId)) return;
        this.#receiptTimers.set(conversationId, setTimeout(async () => {
            this.#receiptTimers.delete(conversationId);
            const conversation = await this.conversation(conversationId);
            if (!conversation?.contiguousSeq) return;
            try {
                await this.#api.call("POST", `/v1/conversations/${conversationId}/receipts`, { kind: "delivered", upToSeq: conversation.contiguousSeq });
            } catch {
                // The next message or reconnection's catch-up sends it again.
            }
        }, RECEIPT_BATCH_MS));
    }

    /** A watermark of a member moved (only up; read implies delivered): this user's messages it covers may tick. */
    async #applyWatermark(conversationId, userId, kind, upToSeq) {
        if (upToSeq == null) return;
        const [, after] = await this.#store.update("conversations", conversationId, (conversation) => {
            if (!conversation) return null;
            const members = conversation.members ?? [];
            let member = members.find((m) => m.userId === userId);
            if (!member) {
                member = { userId, deliveredSeq: 0, readSeq: 0 };
                members.push(member);
            }
            if (kind === "read") member.readSeq = Math.max(member.readSeq ?? 0, upToSeq);
            member.deliveredSeq = Math.max(member.deliveredSeq ?? 0, upToSeq, kind === "read" ? member.readSeq : 0);
            conversation.members = members;
            return conversation;
        });
        if (!after || userId === this.userId || upToSeq < 1) return;
        const others = (seq) => after.members.filter((m) => m.userId !== this.userId && (m.joinedSeq ?? 0) <= seq);
        const mine = await this.#store.range("messages", "bySeq", IDBKeyRange.bound([conversationId, 1], [conversationId, upToSeq]));
        for (const record of mine) {
            if (record.direction !== "out" || !["stored", "delivered"].includes(record.status)) continue;
            const counted = others(record.seq);
            if (counted.length === 0) continue;
            // A member it is withheld from (it blocks this user) never gets it: whatever its watermark, ✓ for good.
            const withheld = record.withheldFrom ?? [];
            if (counted.some((m) => withheld.includes(m.userId))) continue;
            if (counted.every((m) => (m.readSeq ?? 0) >= record.seq)) await this.#evidence({ localId: record.localId }, "readByAll");
            else if (counted.every((m) => (m.deliveredSeq ?? 0) >= record.seq)) await this.#evidence({ localId: record.localId }, "deliveredToAll");
        }
    }

    /** The server's aggregate for a message: shown with this user's changes it has not confirmed yet. */
    async #setReactions(serverId, reactions) {
        const record = await this.#store.byIndex("messages", "serverId", serverId);
        if (!record) return null;
        let shown = reactions;
        await this.#store.update("messages", record.localId, (r) => {
            shown = withPendingReactions(reactions, r.pendingReactions);
            return { ...r, serverReactions: reactions, reactions: shown, reactionsHeard: (r.reactionsHeard ?? 0) + 1 };
        });
        return shown;
    }

    async #storedEvent(event) {
        await this.#evidence({ clientMessageId: event.clientMessageId }, "stored", {
            fields: {
                serverId: event.serverId, seq: event.seq, storedAt: event.storedAt, recipientsOnline: event.recipientsOnline,
                ...(event.withheldFrom ? { withheldFrom: event.withheldFrom } : {}),
            },
        });
        await this.#advance(event.conversationId);
    }

    /**
     * Applies a piece of evidence to an outgoing message (found by localId or clientMessageId), writing its status
     * and `fields` in one transaction and announcing a `status` event when the status moved. A message that reached
     * the server leaves the outbox.
     */
    async #evidence(key, evidence, { fields = {}, error, failureIsLocal = true } = {}) {
        const record = key.localId ? await this.message(key.localId) : await this.#store.byIndex("messages", "clientMessageId", key.clientMessageId);
        if (!record || record.direction !== "out") return null;
        let moved = null;
        await this.#store.transaction(["messages", "outbox"], "readwrite", (s) => {
            const request = s.messages.get(record.localId);
            request.onsuccess = () => {
                const current = request.result;
                const next = applyEvidence(current.status, evidence, current.failureIsLocal !== false);
                Object.assign(current, fields);
                current.sortKey = sortKeyOf(current);
                if (next) {
                    moved = { previous: current.status };
                    current.status = next;
                    if (next === "failed") Object.assign(current, { error: error ?? null, failureIsLocal });
                }
                s.messages.put(current);
                if (next && next !== "sending" && next !== "pending") {
                    const done = s.outbox.index("localId").getKey(current.localId);
                    done.onsuccess = () => { if (done.result !== undefined) s.outbox.delete(done.result); };
                }
                if (moved) moved.record = current;
            };
        });
        if (moved) {
            this.#announce("status", { message: moved.record, status: moved.record.status, previous: moved.previous });
            if (CHANGE_TYPES.has(moved.record.type) && moved.record.target) {
                if (moved.record.status === "failed") await this.#revertChange(moved.record);
                else if (moved.record.status === "stored") await this.#changeStored(moved.record);
            }
        }
        return moved;
    }

    // MARK: The outbox (the leader only)

    /**
     * Starts every conversation's next send: one message per conversation on the wire at a time, in the order they
     * were saved, conversations in parallel. Only while the stream is up: a message is never tried against a server
     * this device cannot reach, so an offline stretch spends no tries.
     */
    async #pumpOutbox() {
        if (!this.#leader || !this.#started || this.#state !== "online") return;
        this.#flushReads();
        const items = await this.#store.getAll("outbox");
        const heads = new Map();
        for (const item of items) if (!heads.has(item.conversationId)) heads.set(item.conversationId, item);
        let soonest = Infinity;
        for (const item of heads.values()) {
            if (this.#inFlight.has(item.conversationId)) continue;
            if (item.notBefore > Date.now()) {
                soonest = Math.min(soonest, item.notBefore);
                continue;
            }
            this.#inFlight.add(item.conversationId);
            this.#sendItem(item).finally(() => {
                this.#inFlight.delete(item.conversationId);
                this.#pumpOutbox();
            });
        }
        clearTimeout(this.#outboxTimer);
        if (soonest !== Infinity) this.#outboxTimer = setTimeout(() => this.#pumpOutbox(), soonest - Date.now());
    }

    /**
     * The read receipts `markRead` saved that the server has not confirmed, one request per conversation (the leader,
     * online). A network failure leaves them for the next pump (a reconnection's); a refusal (`4xx` other than `401` and
     * `429`: the user left, say) drops the receipt, which no retry could make acceptable.
     */
    async #flushReads() {
        if (this.#flushingReads) {
            this.#readsAgain = true;
            return;
        }
        this.#flushingReads = true;
        try {
            do {
                this.#readsAgain = false;
                for (const conversation of await this.#store.getAll("conversations")) {
                    const seq = conversation.readToSend ?? 0;
                    if (seq <= (conversation.readSent ?? 0)) continue;
                    let confirmed = null;
                    try {
                        confirmed = await this.#api.call("POST", `/v1/conversations/${conversation.id}/receipts`, { kind: "read", upToSeq: seq });
                    } catch (error) {
                        const refused = error.status >= 400 && error.status < 500 && error.status !== 401 && error.status !== 429;
                        if (!refused) return;
                    }
                    await this.#store.update("conversations", conversation.id, (c) => c && { ...c, readSent: Math.max(c.readSent ?? 0, seq) });
                    if (confirmed) await this.#applyWatermark(conversation.id, this.userId, "read", confirmed.readSeq);
                }
            } while (this.#readsAgain && this.#state === "online");
        } finally {
            this.#flushingReads = false;
        }
    }

    /** One try of an outbox item over HTTP; the `202`/`200` is the ack (10 s without one is a failed try). */
    async #sendItem(item) {
        if (item.kind === "reaction") return this.#sendReaction(item);
        const record = await this.message(item.localId);
        if (!record || !["pending", "sending"].includes(record.status)) {
            await this.#store.transaction(["outbox"], "readwrite", (s) => { s.outbox.delete(item.order); });
            return;
        }
        let path = `/v1/conversations/${record.conversationId}/messages`;
        let body = { clientMessageId: record.clientMessageId, type: record.type, body: record.body, clientTimestamp: record.clientTimestamp };
        if (CHANGE_TYPES.has(record.type) && record.target) {
            // Sent after the message it changes (the conversation's order): that one has its serverId by now, unless it failed.
            const target = await this.message(record.target);
            if (!target?.serverId) {
                await this.#evidence({ localId: record.localId }, "failedLocally", {
                    error: { code: "invalid_request", message: "the message it changes never reached the server" } });
                return;
            }
            path += `/${target.serverId}/${record.type === "pigeon.edit" ? "edit" : "delete"}`;
            body = { clientMessageId: record.clientMessageId, clientTimestamp: record.clientTimestamp };
            if (record.type === "pigeon.edit") body.body = record.newBody;
        } else {
            if (record.replyTo) body.replyTo = record.replyTo;
            if (record.threadRoot) body.threadRoot = record.threadRoot;
            if (record.attachments?.length) body.attachments = record.attachments.map(({ id, width, height, durationMs }) => ({ id, width, height, durationMs }));
        }
        await this.#evidence({ localId: record.localId }, "dispatched");
        try {
            const answer = await this.#api.call("POST", path, body);
            if (answer.status === "failed") {
                await this.#evidence({ localId: record.localId }, "failedOnServer", { fields: { serverId: answer.serverId }, failureIsLocal: false,
                    error: { code: "failed", message: "the server dead-lettered this message" } });
                return;
            }
            await this.#evidence({ localId: record.localId }, "accepted", { fields: { serverId: answer.serverId, acceptedAt: answer.acceptedAt } });
            if (answer.bodyReplaced === true && typeof answer.body === "string") await this.#bodyReplaced(record, answer.body);
            if (answer.status === "stored" && answer.seq != null) {
                await this.#evidence({ localId: record.localId }, "stored", { fields: { seq: answer.seq } });
                this.#enqueue(() => this.#advance(record.conversationId));
            }
        } catch (error) {
            await this.#sendFailed(item, record, error);
        }
    }

    /** A try that got no acceptance: count it, back off, or fail the message (PigeonKit's rules). */
    async #sendFailed(item, record, error) {
        const next = afterFailedTry(error, record.tries);
        if (next.wait) return this.#later(item, next.wait);
        if (next.fail) return this.#evidence({ localId: record.localId }, "failedLocally", { error: next.fail });
        await this.#store.update("messages", record.localId, (r) => ({ ...r, tries: next.tries }));
        await this.#later(item, next.retry);
    }

    /**
     * One try of a queued reaction; the answer is the message's aggregate. Once tried, a change may have reached the
     * server whatever the outcome, so a later opposite call is sent rather than cancelled against it.
     */
    async #sendReaction(item) {
        const record = await this.#store.byIndex("messages", "serverId", item.serverId);
        const change = record?.pendingReactions?.find((pending) => pending.order === item.order);
        if (!change) {
            await this.#store.transaction(["outbox"], "readwrite", (s) => { s.outbox.delete(item.order); });
            return;
        }
        if (!change.tried) {
            await this.#store.update("messages", record.localId, (r) => ({
                ...r, pendingReactions: r.pendingReactions.map((pending) => (pending.order === item.order ? { ...pending, tried: true } : pending)),
            }));
        }
        const path = `/v1/conversations/${item.conversationId}/messages/${item.serverId}/reactions/${encodeURIComponent(item.key)}`;
        const heard = record.reactionsHeard ?? 0;
        try {
            const answer = await this.#api.call(item.add ? "PUT" : "DELETE", path);
            await this.#reactionSettled(item, answer.reactions, null, heard);
        } catch (error) {
            const next = afterFailedTry(error, item.tries);
            if (next.wait) return this.#later(item, next.wait);
            if (next.fail) return this.#reactionSettled(item, null, next.fail);
            await this.#store.update("outbox", item.order, (i) => (i ? { ...i, tries: next.tries, notBefore: Date.now() + next.retry } : null));
        }
    }

    /**
     * A queued reaction is done: out of the outbox and of the message's pending changes. The device shows the server's
     * aggregate from the answer, or (refused) the last one it had, with the changes still pending. An answer and the
     * stream's events are not ordered against each other: when an aggregate was heard from the server while the
     * request was out (`heard` counts them), that one may be newer than the answer, so the confirmed change is applied
     * to it instead (counted once if it has it already); a later event brings anything it lacks.
     */
    async #reactionSettled(item, reactions, error, heard = 0) {
        let shown = null;
        await this.#store.transaction(["messages", "outbox"], "readwrite", (s) => {
            s.outbox.delete(item.order);
            const request = s.messages.index("serverId").get(item.serverId);
            request.onsuccess = () => {
                const current = request.result;
                if (!current) return;
                current.pendingReactions = (current.pendingReactions ?? []).filter((pending) => pending.order !== item.order);
                if (reactions && (current.reactionsHeard ?? 0) === heard) current.serverReactions = reactions;
                else if (reactions) current.serverReactions = withPendingReactions(current.serverReactions ?? [], [item]);
                current.reactions = current.deletedAt ? [] : withPendingReactions(current.serverReactions ?? [], current.pendingReactions);
                s.messages.put(current);
                shown = current.reactions;
            };
        });
        if (shown === null) return;
        this.#announce("reaction", {
            conversationId: item.conversationId, serverId: item.serverId, key: item.key, userId: this.userId,
            action: item.add ? "add" : "remove", reactions: shown, at: Date.now(), ...(error ? { error } : {}),
        });
    }

    async #later(item, ms) {
        await this.#store.update("outbox", item.order, (i) => (i ? { ...i, notBefore: Date.now() + ms } : null));
    }
}
