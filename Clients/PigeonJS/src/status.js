// PigeonJS: the status machine of an outgoing message, PigeonKit's `MessageStatus.applying` (the same table: both
// SDKs' tests read it from Clients/vectors/status.json).

// MARK: - The status machine

/** An outgoing message's statuses, in the only order they may be taken (docs/ARCHITECTURE.md, "The status model"). */
export const STATUSES = Object.freeze(["pending", "sending", "sent", "stored", "delivered", "read", "failed"]);
export const rank = (status) => STATUSES.indexOf(status);

/**
 * The status after `evidence`, or null when it changes nothing. The same rules as PigeonKit's
 * `MessageStatus.applying`: forward only, each status only on its own evidence, `failed` → `pending` only by retry,
 * nothing fails once stored, and proof that the server has a message (`accepted`, `stored`) ends a *local* failure
 * (no answer came) but never a server's (dead-lettered).
 */
export function applyEvidence(status, evidence, failureIsLocal = true) {
    switch (evidence) {
        case "dispatched": return status === "pending" ? "sending" : null;
        case "retry": return status === "failed" ? "pending" : null;
        case "accepted":
            if (status === "failed") return failureIsLocal ? "sent" : null;
            return rank(status) < rank("sent") ? "sent" : null;
        case "stored":
            if (status === "failed") return failureIsLocal ? "stored" : null;
            return rank(status) < rank("stored") ? "stored" : null;
        case "failedLocally": return status === "pending" || status === "sending" ? "failed" : null;
        case "failedOnServer": return ["pending", "sending", "sent"].includes(status) ? "failed" : null;
        case "deliveredToAll":
            return status !== "failed" && rank(status) >= rank("stored") && rank(status) < rank("delivered") ? "delivered" : null;
        case "readByAll":
            return status !== "failed" && rank(status) >= rank("stored") && rank(status) < rank("read") ? "read" : null;
        default: throw new TypeError(`unknown evidence ${evidence}`);
    }
}
