// PigeonJS: the local store, one IndexedDB database per `database` name, shared by the tabs of an app.

import { PigeonError } from "./errors.js";

// MARK: - The local store (IndexedDB)

/**
 * The IndexedDB database: `conversations` (the server's Conversation plus `contiguousSeq`, the highest seq below
 * which this device has every message), `messages` (local records, by `localId`), `outbox` (what the leader must send,
 * in order: an auto-incremented key) and `meta` (the stream's cursor).
 */
export class LocalStore {
    static VERSION = 1;

    static open(name) {
        return new Promise((resolve, reject) => {
            const request = indexedDB.open(name, LocalStore.VERSION);
            request.onupgradeneeded = () => {
                const db = request.result;
                db.createObjectStore("conversations", { keyPath: "id" });
                const messages = db.createObjectStore("messages", { keyPath: "localId" });
                messages.createIndex("bySort", ["conversationId", "sortKey"]);
                messages.createIndex("bySeq", ["conversationId", "seq"]);
                messages.createIndex("serverId", "serverId");
                messages.createIndex("clientMessageId", "clientMessageId");
                const outbox = db.createObjectStore("outbox", { keyPath: "order", autoIncrement: true });
                outbox.createIndex("localId", "localId", { unique: true });
                db.createObjectStore("meta", { keyPath: "key" });
            };
            request.onsuccess = () => resolve(new LocalStore(request.result));
            request.onerror = () => reject(request.error);
            request.onblocked = () => reject(new PigeonError("blocked", `the database ${name} is held open by an older version of the page`));
        });
    }

    constructor(db) {
        this.db = db;
    }

    close() {
        this.db.close();
    }

    /** Runs `body(stores)` in one transaction over `names`; resolves with what `body` returned once it committed. */
    transaction(names, mode, body) {
        return new Promise((resolve, reject) => {
            const tx = this.db.transaction(names, mode);
            const stores = Object.fromEntries(names.map((name) => [name, tx.objectStore(name)]));
            let result;
            tx.oncomplete = () => resolve(result);
            tx.onerror = () => reject(tx.error);
            tx.onabort = () => reject(tx.error ?? new PigeonError("aborted", "the transaction was aborted"));
            result = body(stores, tx);
        });
    }

    /** One request's result (a read). */
    static result(request) {
        return new Promise((resolve, reject) => {
            request.onsuccess = () => resolve(request.result);
            request.onerror = () => reject(request.error);
        });
    }

    get(store, key) {
        return LocalStore.result(this.db.transaction(store).objectStore(store).get(key));
    }

    getAll(store) {
        return LocalStore.result(this.db.transaction(store).objectStore(store).getAll());
    }

    byIndex(store, index, key) {
        return LocalStore.result(this.db.transaction(store).objectStore(store).index(index).get(key));
    }

    put(store, value) {
        return this.transaction([store], "readwrite", (s) => { s[store].put(value); });
    }

    /**
     * Read-modify-write of one record in a single transaction, so that no other writer (another tab) slips in
     * between: `change(record)` returns the new record, or null to leave it. Resolves with [before, after].
     */
    update(store, key, change) {
        return this.transaction([store], "readwrite", (s) => {
            const out = [undefined, undefined];
            const request = s[store].get(key);
            request.onsuccess = () => {
                const before = request.result;
                const after = change(before === undefined ? undefined : structuredClone(before));
                out[0] = before;
                if (after) {
                    s[store].put(after);
                    out[1] = after;
                }
            };
            return out;
        });
    }

    /** Up to `limit` records of `index` in `range`, newest first when `reverse`. */
    range(store, index, range, { limit = Infinity, reverse = false } = {}) {
        return new Promise((resolve, reject) => {
            const source = this.db.transaction(store).objectStore(store).index(index);
            const request = source.openCursor(range, reverse ? "prev" : "next");
            const found = [];
            request.onsuccess = () => {
                const cursor = request.result;
                if (!cursor || found.length >= limit) return resolve(found);
                found.push(cursor.value);
                cursor.continue();
            };
            request.onerror = () => reject(request.error);
        });
    }
}

/** Pending messages (no seq yet) sort after every stored one, among themselves by creation. */
export const PENDING_SORT_BASE = 2 ** 50;
export const sortKeyOf = (record) => (record.seq != null ? record.seq : PENDING_SORT_BASE + record.createdAt);
