// TypeScript declarations of PigeonJS, the browser SDK served at /sdk/pigeon.js (docs/SDK-JS.md).

/** The module's version: `<wire contract version>+<12 hex digits of the file's SHA-256>`, e.g. `1.2+3f9a0c1d2e4b`. */
export declare const VERSION: string;

/** An outgoing message's statuses, in the only order they may be taken; `failed` from `pending`, `sending` or `sent`. */
export declare const STATUSES: readonly MessageStatus[];

export type MessageStatus = "pending" | "sending" | "sent" | "stored" | "delivered" | "read" | "failed";

export type StatusEvidence =
    | "dispatched" | "accepted" | "stored" | "deliveredToAll" | "readByAll" | "failedLocally" | "failedOnServer" | "retry";

/** The status after `evidence`, or null when it changes nothing (PigeonKit's rules). */
/** The aggregate a device shows: the server's with pending changes applied in order (each counted once). */
/** The one form the server stores a reaction key in (❤ and ❤️ are ❤️), or null when it takes no such key. */
export declare function canonicalReactionKey(key: string): string | null;
export declare function withPendingReactions(reactions: Reaction[] | null | undefined, pending: Array<{ key: string; add: boolean }> | null | undefined): Reaction[];
export declare function applyEvidence(status: MessageStatus, evidence: StatusEvidence, failureIsLocal?: boolean): MessageStatus | null;

/** An error of a call: the server's error code, or `network`, `timeout`, `stopped`, `blocked`. */
export declare class PigeonError extends Error {
    readonly code: string;
    /** The HTTP status, 0 when none came. */
    readonly status: number;
    /** `Retry-After` in seconds, when the server gave one. */
    readonly retryAfter: number | null;
}

export interface Reaction { key: string; count: number; me: boolean }

export interface Attachment {
    id: string; name: string; size: number; contentType: string; sha256: string;
    width: number | null; height: number | null; durationMs: number | null;
}

/** A message as this device stores it: the server's Message fields once known, and the local ones. */
export interface LocalMessage {
    /** This device's id of the record (stable from `send` on). */
    localId: string;
    clientMessageId: string;
    conversationId: string;
    /** `out`: this user's (this device's sends, and its other devices'); `in`: another user's. */
    direction: "out" | "in";
    /** Whether this device sent it (it has an outbox history and `status` events). */
    local?: boolean;
    /** Outgoing messages only. */
    status?: MessageStatus;
    /** The failure of a `failed` message. */
    error?: { code: string; message: string } | null;
    serverId?: string;
    seq?: number;
    senderId: string;
    senderDeviceId?: string;
    type: string;
    body: string;
    clientTimestamp: number;
    acceptedAt?: number;
    storedAt?: number;
    /** `message.stored`'s count of the other members' devices online then (0: it waits in their mailbox). */
    recipientsOnline?: number;
    /** This user's own message only: the members it is withheld from for good (they block this user); it stays ✓. */
    withheldFrom?: string[];
    /** The server's aggregate with this user's reactions not yet confirmed applied (`react`, `unreact`). */
    reactions: Reaction[];
    /** This user's reaction changes the server has not confirmed, in order (`tried`: one went out at least once). */
    pendingReactions?: Array<{ order: number; key: string; add: boolean; tried?: boolean }>;
    /** The server's aggregate as last heard, while changes are pending. */
    serverReactions?: Reaction[];
    /** When the text was last edited (the server's time, or this device's while its edit is pending). */
    editedAt?: number | null;
    /** When the message was deleted for everyone: its `body` is "" from then on. */
    deletedAt?: number | null;
    /** An edit's or deletion's own record: the localId of the message it changes, and (an edit) its new text. */
    target?: string;
    newBody?: string | null;
    replyTo: string | null;
    /** `unavailable` (present, true): the reader may not read the quoted message; its `body` is "". */
    replyPreview?: { serverId: string; senderId: string; type: string; body: string; deleted: boolean; unavailable?: boolean } | null;
    threadRoot: string | null;
    thread?: { replyCount: number; lastReplyAt: number; lastReplySenders: string[] } | null;
    attachments: Array<Attachment | { id: string; width?: number; height?: number; durationMs?: number }>;
    createdAt: number;
}

export interface Member { userId: string; deliveredSeq: number; readSeq: number; joinedSeq?: number; role?: string; membership?: string }

export interface Conversation {
    id: string;
    name: string | null;
    createdAt: number;
    lastSeq: number;
    members: Member[];
    kind?: "direct" | "group";
    lastMessage?: object | null;
    unreadCount?: number;
    /** The highest seq up to which this device holds every message. */
    contiguousSeq: number;
}

export type ConnectionState = "stopped" | "connecting" | "online" | "offline";

export interface PigeonEventMap {
    message: CustomEvent<{ message: LocalMessage }>;
    status: CustomEvent<{ message: LocalMessage; status: MessageStatus; previous: MessageStatus }>;
    receipt: CustomEvent<{ conversationId: string; userId: string; kind: "delivered" | "read"; upToSeq: number; at: number }>;
    typing: CustomEvent<{ conversationId: string; userId: string; active: boolean }>;
    /**
     * A message's reactions changed: the server's event, the answer to this device's change, or (`local`) the change
     * made on this device and not yet sent. `reactions` is what the device shows; `error`: the server refused this
     * device's change, which is dropped.
     */
    reaction: CustomEvent<{ conversationId: string; serverId: string; key: string; userId: string; action: "add" | "remove"; reactions: Reaction[]; at: number; local?: boolean; error?: { code: string; message: string } }>;
    /** A message's text changed: an edit or a deletion (this device's, at once or undone, or the server's). */
    updated: CustomEvent<{ message: LocalMessage; change?: LocalMessage }>;
    conversation: CustomEvent<{ conversation: Conversation }>;
    connection: CustomEvent<{ state: ConnectionState; leader: boolean; transport: "websocket" | "sse" | null }>;
}

export interface PigeonClientOptions {
    /** The server's origin, e.g. `https://chat.example.com`. */
    server: string;
    /** The device's token. */
    token: string;
    /** This device's user; read from a JWT's `sub` when omitted (required with a `pgn_` token). */
    userId?: string;
    /** The IndexedDB database name: one per signed-in device of the app; tabs with the same name share it. */
    database: string;
    /** `auto` (default): the WebSocket, server-sent events when it is refused. */
    transport?: "auto" | "websocket" | "sse";
    /** Test hooks. `dropEvent`: a stream frame for which it returns true is ignored, as if it never came. */
    debug?: { dropEvent?: (event: { type: string; cursor?: string; [field: string]: unknown }) => boolean };
}

export declare class PigeonClient extends EventTarget {
    /** Registers a device on a server with open registration: where a token comes from when the app's backend mints none. */
    static registerDevice(
        server: string, userId: string, options?: { deviceName?: string; existingToken?: string },
    ): Promise<{ userId: string; deviceId: string; token: string }>;
    constructor(options: PigeonClientOptions);
    readonly userId: string;
    readonly state: ConnectionState;
    readonly isLeader: boolean;

    /** Resolves with the connection state once known (within 10 s): "online", "offline", or "connecting" (retrying). */
    start(): Promise<ConnectionState>;
    stop(): void;

    conversations(): Promise<Conversation[]>;
    conversation(conversationId: string): Promise<Conversation | undefined>;
    messages(conversationId: string, options?: { before?: number; limit?: number }): Promise<LocalMessage[]>;
    message(localId: string): Promise<LocalMessage | undefined>;

    send(conversationId: string, text: string, options?: {
        type?: string; replyTo?: string | null; threadRoot?: string | null;
        attachments?: Array<{ id: string; width?: number; height?: number; durationMs?: number }>;
        /** The app's own id for the message (a UUID); by default a new one. */
        clientMessageId?: string;
    }): Promise<LocalMessage>;
    retry(localId: string): Promise<void>;
    /**
     * Local-first, like `send`: the message shows `text` at once (an `updated` event); resolves with the edit's own
     * record (type `pigeon.edit`, `target` = `localId`, status `pending`). A failed edit leaves the message as it was.
     * Throws `not_found`, `invalid_request` (empty text, U+0000, a member change or a change, a failed message),
     * `payload_too_large` (over 65,536 bytes of UTF-8), `conflict` (a deleted message).
     */
    edit(localId: string, text: string): Promise<LocalMessage>;
    /** Deletes this user's message for everyone, local-first like `edit`; resolves with the deletion's own record. */
    delete(localId: string): Promise<LocalMessage>;

    createConversation(members: string[], options?: { name?: string | null }): Promise<Conversation>;
    refreshConversations(): Promise<Conversation[]>;
    /** Marks read at once on the device (offline too); the receipt goes out from the leader when online. */
    /** Marks the main chat read (read means shown: thread replies only with includingThreadReplies, or through markThreadRead). */
    markRead(
        conversationId: string, upToSeq?: number, options?: { includingThreadReplies?: boolean; threadRoot?: string },
    ): Promise<{ deliveredSeq: number; readSeq: number } | undefined>;
    /** Marks the replies of a thread read (`threadRoot`: the root's serverId), while the thread is shown. */
    markThreadRead(conversationId: string, threadRoot: string, upToSeq?: number): Promise<{ deliveredSeq: number; readSeq: number } | undefined>;
    typing(conversationId: string, active?: boolean): Promise<void>;
    /**
     * Local-first, like `send`: shown at once (offline too), sent by the leader when online, in order with the
     * conversation's sends; an add and a remove of one key not yet sent cancel. Resolves with the reactions shown.
     * Throws `invalid_request` (a key that is neither one emoji nor an app token), `not_found` (a message the device
     * does not hold), `conflict` (a deleted message, or one of the server's own).
     */
    react(conversationId: string, serverId: string, key: string): Promise<Reaction[]>;
    unreact(conversationId: string, serverId: string, key: string): Promise<Reaction[]>;
    thread(conversationId: string, rootServerId: string, options?: { after?: number; before?: number; limit?: number }):
        Promise<{ root: object; messages: object[]; hasMore: boolean }>;
    upload(file: Blob, name?: string): Promise<Attachment>;
    attachment(id: string): Promise<Blob>;

    addEventListener<K extends keyof PigeonEventMap>(type: K, listener: (event: PigeonEventMap[K]) => void, options?: boolean | AddEventListenerOptions): void;
    addEventListener(type: string, listener: EventListenerOrEventListenerObject | null, options?: boolean | AddEventListenerOptions): void;
    removeEventListener<K extends keyof PigeonEventMap>(type: K, listener: (event: PigeonEventMap[K]) => void, options?: boolean | EventListenerOptions): void;
    removeEventListener(type: string, listener: EventListenerOrEventListenerObject | null, options?: boolean | EventListenerOptions): void;
}
