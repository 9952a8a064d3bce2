// PigeonJS: the server's HTTP API, as PigeonKit's transport calls it: one call, one answer or one PigeonError.

import { PigeonError } from "./errors.js";
import { RETRY } from "./policy.js";

/** The `/v1` API of one server for one device's token. */
export class ServerApi {
    #server;
    #token;

    constructor(server, token) {
        this.#server = server;
        this.#token = token;
    }

    /** One HTTP call; throws a PigeonError for a refusal (`code` from the body), a timeout or a network failure. */
    async fetch(method, path, body, { timeoutMs = RETRY.ackTimeoutMs } = {}) {
        const headers = { Authorization: `Bearer ${this.#token}` };
        let payload;
        if (body instanceof Blob) {
            payload = body;
            headers["Content-Type"] = body.type || "application/octet-stream";
        } else if (body !== undefined) {
            payload = JSON.stringify(body);
            headers["Content-Type"] = "application/json";
        }
        const abort = new AbortController();
        const timer = setTimeout(() => abort.abort(), timeoutMs);
        let response;
        try {
            response = await fetch(this.#server + path, { method, headers, body: payload, signal: abort.signal, credentials: "omit" });
        } catch (error) {
            throw abort.signal.aborted
                ? new PigeonError("timeout", `${method} ${path}: no answer in ${timeoutMs} ms`)
                : new PigeonError("network", `${method} ${path}: ${error.message}`);
        } finally {
            clearTimeout(timer);
        }
        if (!response.ok) {
            let error = {};
            try { error = (await response.json()).error ?? {}; } catch { /* not JSON: the status says it */ }
            const retryAfter = Number(response.headers.get("Retry-After")) || null;
            throw new PigeonError(error.code ?? `http_${response.status}`, error.message ?? response.statusText, { status: response.status, retryAfter });
        }
        return response;
    }

    /** One call's JSON answer (null for a `204`). */
    async call(method, path, body, options) {
        const response = await this.fetch(method, path, body, options);
        return response.status === 204 ? null : response.json();
    }
}
