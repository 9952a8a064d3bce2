// PigeonJS: the browser SDK of Pigeon, one dependency-free ES module (docs/SDK-JS.md).
//
// It is PigeonKit's counterpart for the browser: a local-first client whose messages are saved on the device
// (IndexedDB) before they go out, whose outbox survives a reload, and whose ticks move only on the server's evidence.
// Every Pigeon server serves it at GET /sdk/pigeon.js (its types at /sdk/pigeon.d.ts); import it from there:
//
//     import { PigeonClient } from "https://chat.example.com/sdk/pigeon.js";
//     const client = new PigeonClient({ server: "https://chat.example.com", token, userId: "alice", database: "alice" });
//     client.addEventListener("message", (e) => show(e.detail.message));
//     await client.start();
//     await client.send(conversationId, "hello");
//
// Design in one paragraph. All tabs of one app that use the same `database` share one IndexedDB store. Exactly one
// of them, the leader (it holds the Web Lock `pigeon:<database>`), owns the event stream (WebSocket, SSE as the
// fallback) and the outbox: it sends, processes events and writes what they say. Every tab may save a send into the
// outbox and read the store; the others learn what the leader did through a BroadcastChannel of the same name, and a
// follower becomes the leader when the leader's tab closes (the browser releases its lock). So two tabs never send the
// same outbox item twice, and the store has one writer of server state.

/** The module's version: the wire contract it speaks and a hash of its files, filled in by the server serving it. */
export const VERSION = "0.0.0-unserved";

export { PigeonError } from "./errors.js";
export { STATUSES, applyEvidence } from "./status.js";
export { canonicalReactionKey, withPendingReactions } from "./reactions.js";
export { PigeonClient } from "./client.js";
