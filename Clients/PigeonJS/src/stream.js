// PigeonJS: the device's event stream (the WebSocket, server-sent events as the fallback) and its reconnection
// backoff, PigeonKit's WebSocket and SSE sessions. The client decides when to open it and what its frames mean.

import { RECONNECT, backoff } from "./policy.js";

/** The SSE event types the stream listens to (every event of docs/API.md's stream). */
const SSE_EVENTS = ["message.new", "message.stored", "message.failed", "receipt", "conversation.created", "typing", "reaction", "reset"];

/**
 * One event stream at a time: `open(cursor)` opens it (`auto`: the WebSocket, and SSE after a WebSocket that never
 * opened, alternating), `onOpened`, `onFrame(text)` and `onLost()` say what happens to it; `retry(connect)` calls
 * `connect` again after the reconnection backoff (0.5 s doubling to 30 s, equal jitter).
 */
export class EventStream {
    #server;
    #token;
    #choice;
    #socket = null;
    #source = null;
    #refusals = 0;
    #attempt = 0;
    #timer = null;
    /** `websocket` or `sse`: what the stream is (or was last). */
    transport = null;

    constructor({ server, token, choice, onOpened, onFrame, onLost }) {
        this.#server = server;
        this.#token = token;
        this.#choice = choice;
        this.onOpened = onOpened;
        this.onFrame = onFrame;
        this.onLost = onLost;
    }

    /** Whether a stream is open or opening. */
    get isOpen() {
        return this.#socket !== null || this.#source !== null;
    }

    /** Opens the stream from `cursor` (none: from now). */
    open(cursor) {
        const query = new URLSearchParams({ access_token: this.#token });
        if (cursor) query.set("cursor", cursor);
        const useSSE = this.#choice === "sse" || (this.#choice === "auto" && this.#refusals % 2 === 1);
        if (useSSE) this.#openSSE(query);
        else this.#openWebSocket(query);
    }

    /** Sends a client operation over the WebSocket when one is open; whether it did. */
    send(operation) {
        if (this.#socket?.readyState !== WebSocket.OPEN) return false;
        this.#socket.send(JSON.stringify(operation));
        return true;
    }

    close() {
        const socket = this.#socket;
        const source = this.#source;
        this.#socket = null;
        this.#source = null;
        socket?.close();
        source?.close();
    }

    /** The stream opened: the next loss backs off from the start again. */
    #opened() {
        this.#attempt = 0;
        this.onOpened();
    }

    /** Forgets the backoff (the browser is online again) and the reconnection scheduled. */
    resetBackoff() {
        clearTimeout(this.#timer);
        this.#attempt = 0;
    }

    /** Calls `connect` after the next backoff. */
    retry(connect) {
        this.#attempt += 1;
        clearTimeout(this.#timer);
        this.#timer = setTimeout(connect, backoff(this.#attempt, RECONNECT.baseMs, RECONNECT.maxMs));
    }

    /** Cancels a scheduled reconnection. */
    cancelRetry() {
        clearTimeout(this.#timer);
    }

    #openWebSocket(query) {
        const url = this.#server.replace(/^http/, "ws") + "/v1/ws?" + query;
        const socket = new WebSocket(url);
        this.#socket = socket;
        this.transport = "websocket";
        let opened = false;
        socket.onopen = () => {
            opened = true;
            this.#refusals = 0;
            this.#opened();
        };
        socket.onmessage = (event) => this.onFrame(event.data);
        socket.onclose = () => {
            if (this.#socket !== socket) return;
            this.#socket = null;
            if (!opened) this.#refusals += 1;
            this.onLost();
        };
    }

    #openSSE(query) {
        const source = new EventSource(this.#server + "/v1/events?" + query);
        this.#source = source;
        this.transport = "sse";
        source.onopen = () => this.#opened();
        const onEvent = (event) => this.onFrame(event.data);
        for (const type of SSE_EVENTS) source.addEventListener(type, onEvent);
        // The browser's own reconnection would resume from Last-Event-ID, but the SDK resumes from the cursor it
        // saved (after processing), and backs off: it closes the source and opens a new one.
        source.onerror = () => {
            if (this.#source !== source) return;
            source.close();
            this.#source = null;
            if (this.#choice === "auto") this.#refusals += 1;
            this.onLost();
        };
    }
}
