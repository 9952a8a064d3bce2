// PigeonJS: what a change (an edit or a deletion) does to its message, and the checks of a call's arguments.

import { PigeonError } from "./errors.js";

/** The server's own types for a change of a message (API.md 1.1). */
export const CHANGE_TYPES = new Set(["pigeon.edit", "pigeon.delete"]);

/** What a change (an edit or a deletion of this device's) does to its message on the device until the server has it. */
export function changeApplied(change, at) {
    return change.type === "pigeon.delete"
        ? { body: "", deletedAt: at, reactions: [], pendingChange: change.localId }
        : { body: change.newBody, editedAt: at, pendingChange: change.localId };
}

export const UUID = /^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$/;

export function requireConversationId(conversationId) {
    if (typeof conversationId !== "string" || !UUID.test(conversationId)) {
        throw new PigeonError("invalid_request", "conversationId must be a conversation's UUID");
    }
}
