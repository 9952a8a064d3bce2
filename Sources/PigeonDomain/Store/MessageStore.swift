import PigeonProtocol

/// What an edit, a delete, a reply or a reaction needs to know of the message it targets.
public struct MessageTarget: Sendable, Equatable {
    public var senderId: String
    public var type: String
    public var deleted: Bool
    /// Its seq (0 where the caller does not need it): a member sees it only from its `joinedSeq` on.
    public var seq: Int64
    /// The thread it is in, if any: such a message cannot be a thread root.
    public var threadRoot: String?

    public init(senderId: String, type: String, deleted: Bool, seq: Int64 = 0, threadRoot: String? = nil) {
        self.senderId = senderId
        self.type = type
        self.deleted = deleted
        self.seq = seq
        self.threadRoot = threadRoot
    }
}

/// The durable, ordered store: devices, conversations, messages with their seq, receipts, the per-user event log
/// and the dead letters: every role below, as both stores (SQLite and PostgreSQL) implement them. A consumer asks
/// for the roles it uses (``DeviceStore``, ``EventLog`` …), not the whole store.
///
/// Guarantees every implementation gives (the contract suite checks them):
/// - seq per conversation is 1, 2, 3 … with no gap and no repeat, assigned in processing order;
/// - a message is stored at most once per serverId and per (senderId, senderDeviceId, clientMessageId);
/// - an event written for every member of a conversation keeps one copy of its payload, however many members;
/// - a message, its events and its seq are written in one transaction;
/// - the event log is split in ``eventPartitions`` partitions, everything about one conversation in one partition;
///   a partition's events are numbered 1, 2, 3 … in commit order (a reader that sees offset n has seen every lower
///   one) and handed to the ``Fanout`` in that order after commit; no row or lock is shared by the writers of
///   different partitions;
/// - watermarks only move up, read implies delivered, and both are clamped to the conversation's last seq.
public protocol MessageStore: DeviceStore, ConversationStore, MessageHistory, MessageProcessing, ReceiptStore, ReactionStore, EventLog, DeadLetterStore,
    StoreHealth, BlockStore {}

/// Devices: registration, tokens, revocation, last seen, and devices seen through a JWT.
public protocol DeviceStore: Sendable {
    /// Registers a device of `userId`, atomically checking `rule` against the user's devices at that moment
    /// (two concurrent registrations of a new user cannot both count as its first).
    func registerDevice(userId: String, name: String?, tokenHash: String, rule: DeviceRegistrationRule) async throws -> DeviceIdentity
    /// The device whose opaque token hashes to `tokenHash`, or `nil` (also once the device is revoked): the only way a
    /// device token is checked (the store never sees a token itself).
    func device(tokenHash: String) async throws -> DeviceIdentity?
    /// The devices of `userId` that are not revoked, registered or seen through a JWT, oldest first (ties: by id).
    func devices(of userId: String) async throws -> [DeviceRecord]
    /// Revokes a device that is not revoked yet, atomically: its opaque token stops matching (``device(tokenHash:)``),
    /// it leaves ``devices(of:)``, and JWTs of it issued up to `revokedAt`'s second are refused from now on
    /// (``recordJWTDevice(_:issuedAt:at:)``). It keeps counting as a device the user has had (``registerDevice``'s
    /// rule), and the messages it sent stay. `nil`, and nothing written, for a device the user does not have (or no
    /// longer has: revoked already). Caches of other nodes learn of it through the ``Fanout``.
    func revokeDevice(_ device: DeviceIdentity, at revokedAt: Int64) async throws -> DeviceRevocation?
    /// Records when devices were last seen (milliseconds since the epoch); a time never moves back, unknown devices
    /// are skipped. One write for the whole batch (``DeviceActivity`` calls it at most about once a minute per
    /// device, off the requests' path).
    func recordDevicesSeen(_ seen: [DeviceIdentity: Int64]) async throws
    /// A device that authenticated with a JWT (`sub` + `did`, issued at `issuedAt` seconds, `nil` without `iat`):
    /// recorded on first sight (no name, created and seen `now`), so that ``devices(of:)`` lists it; a revoked one is
    /// listed again when `issuedAt` is after its latest revocation's second. Answers its state after the call, from
    /// which the caller refuses tokens issued before the revocation.
    func recordJWTDevice(_ device: DeviceIdentity, issuedAt: Int64?, at now: Int64) async throws -> JWTDeviceState
}

/// Conversations and their members: creation, lists, lookups and membership changes.
public protocol ConversationStore: Sendable {
    /// Creates a conversation of `creator` and `members` (the creator always included, repeats dropped; the routes
    /// validate the list first) and, in the same transaction, a `conversation.created` event for every member, whose
    /// payload is stored once; its id is time-ordered. With ``MemberAdmission/consentRules`` the creation is held to the
    /// store's ``ConsentRules`` (``ConsentCheck``: a member who blocks the creator `forbidden`, past the strangers limit
    /// `rate_limited`, strangers invited under invitations), checked and recorded in the same transaction.
    func createConversation(creator: String, members: [String], name: String?, admission: MemberAdmission) async throws -> Conversation
    /// A page of `userId`'s conversations whose membership is `membership`, newest `updatedAt` first (ties: greater id
    /// first), starting after `before` (nil: the newest), at most `limit`.
    func conversations(of userId: String, before: ConversationCursor?, limit: Int, membership: MembershipState) async throws -> ConversationList
    /// The conversation if `userId` is a member, else `nil` (unknown and forbidden look the same).
    func conversation(id: String, for userId: String) async throws -> Conversation?
    /// The conversation with every member's role, joinedSeq and watermarks, as an operator sees it (no member's view:
    /// `lastMessage` null, `unreadCount` 0), or `nil` when it does not exist.
    func conversation(id: String) async throws -> Conversation?
    /// Member user ids of a conversation, `nil` if it does not exist. Cheap: served from memory when possible.
    func members(of conversationId: String) async throws -> [String]?
    /// The members of a conversation if this node has them in memory (``members(of:)`` answers the same, without a
    /// read), else `nil`: for the accept path that runs on a connection's event loop and must not wait.
    func cachedMembers(of conversationId: String) -> [String]?
    /// `userId`'s membership of the conversation (role, joinedSeq, watermarks), or `nil` when it is not a member.
    func member(_ userId: String, of conversationId: String) async throws -> ConversationMember?
    /// Applies a membership, role or name change by `actor` (``MembershipPlan`` has the rules) under the
    /// conversation's lock: the members' rows, and each change as a `pigeon.members` message with the next seq and its
    /// `message.new` events, in one transaction. Answers the conversation as `actor` sees it after the change (after
    /// leaving: without the caller, `lastMessage` null). `not_found` when the actor is not a member. Added members are
    /// admitted as ``createConversation(creator:members:name:admission:)`` admits them, against the actor.
    func changeMembership(
        conversationId: String, by actor: DeviceIdentity, _ operation: MembershipOperation, maxMembers: Int, admission: MemberAdmission
    ) async throws -> Conversation
}

extension ConversationStore {
    /// A creation held to the consent rules (a user's route).
    public func createConversation(creator: String, members: [String], name: String?) async throws -> Conversation {
        try await createConversation(creator: creator, members: members, name: name, admission: .consentRules)
    }

    /// The conversations `userId` joined.
    public func conversations(of userId: String, before: ConversationCursor?, limit: Int) async throws -> ConversationList {
        try await conversations(of: userId, before: before, limit: limit, membership: .joined)
    }

    /// A change held to the consent rules (a user's route).
    public func changeMembership(conversationId: String, by actor: DeviceIdentity, _ operation: MembershipOperation, maxMembers: Int) async throws
        -> Conversation
    {
        try await changeMembership(conversationId: conversationId, by: actor, operation, maxMembers: maxMembers, admission: .consentRules)
    }
}

/// Stored messages as the routes read them: history pages, a message's status, what an edit or delete targets, a resend's original.
public protocol MessageHistory: Sendable {
    /// What an edit or delete checks of its target at accept time: the message with `serverId` in the conversation,
    /// or `nil`.
    func messageTarget(conversationId: String, serverId: String) async throws -> MessageTarget?
    /// The stored message `deviceId` of `senderId` sent with `clientMessageId`, as a resend's answer (`200`), or nil.
    func storedMessage(senderId: String, deviceId: String, clientMessageId: String) async throws -> SendMessageResponse?
    /// Where an accepted message is: `.stored` with its seq, `.failed` if dead-lettered, `nil` while still queued.
    func status(ofMessage serverId: String) async throws -> (status: ServerMessageStatus, seq: Int64?)?
    /// `after`: messages with seq > after ascending; `before`: the page just before it, ascending;
    /// neither: the newest page. Nothing below `visibleFrom` (a late joiner's `joinedSeq`): a page never reaches
    /// below it and its `hasMore` says so. Each message carries its reactions as `reader` sees them (`me` false for
    /// every key without a reader), its reply preview and its thread summary, as of the read (API.md 1.2).
    func messages(conversationId: String, after: Int64?, before: Int64?, limit: Int, visibleFrom: Int64, reader: String?) async throws
        -> MessagePage
    /// The thread of the message `root`: the root and a page of its replies (the messages whose `threadRoot` it is),
    /// paged by seq as ``messages(conversationId:after:before:limit:visibleFrom:reader:)`` pages. `nil` when the root is
    /// not a message of the conversation, or lies below `visibleFrom`.
    func threadMessages(conversationId: String, root: String, after: Int64?, before: Int64?, limit: Int, visibleFrom: Int64, reader: String?)
        async throws -> ThreadPage?
}

/// Reactions (API.md 1.2): one row per (message, key, user); never a message (no seq, no unread, no push).
public protocol ReactionStore: Sendable {
    /// Adds or removes `userId`'s reaction `key` (valid already: ``Validation/isValidReactionKey(_:)``) on the message
    /// `serverId`, serialized with every other reaction to that message on every node. When it changes something, a
    /// `reaction` event goes to every member of the conversation in the same transaction, its `reactions` as that member
    /// sees them (`me`); a repeated add or the removal of an absent reaction changes and emits nothing. Answers the
    /// message's reactions after the call as `userId` sees them.
    ///
    /// `not_found`: `userId` is not a member, or the message is not in the conversation or below the member's
    /// `joinedSeq`. `conflict`: the message is deleted or a `pigeon.*` message, or an add would pass
    /// ``ReactionLimits/keysPerMessage`` distinct keys on it or ``ReactionLimits/keysPerUser`` keys of the user.
    func react(conversationId: String, serverId: String, userId: String, key: String, action: ReactionAction, at: Int64) async throws
        -> [Reaction]
    /// Who reacted to the message, ascending by user id then key; only `key` when given; users after `after`; at most
    /// `limit` users (each with every key it holds). `not_found` as ``react(conversationId:serverId:userId:key:action:at:)``
    /// for `reader`.
    func reactionUsers(conversationId: String, serverId: String, reader: String, key: String?, after: String?, limit: Int) async throws
        -> ReactionUsersPage
}

/// Processing: buffered messages stored in batches, each with the next seq of its conversation and its events.
public protocol MessageProcessing: Sendable {
    /// Processes a batch in buffer order, in one transaction; one result per item, in the same order.
    ///
    /// Each message is stored with the next seq of its conversation and its events (`message.new` for every member,
    /// except the sender's sending device; `message.stored` for that device), or recognised as stored already (by
    /// serverId or by (sender, device, clientMessageId)). A message that fails fails alone: the others of the batch are
    /// stored; later messages of its conversation in the batch are `.deferred` (order), and one whose item is its final
    /// attempt, or whose failure is permanent, is dead-lettered with `message.failed` to its sender. A fault of the
    /// whole store (unreachable, disk full) throws, and nothing of the batch is written.
    func process(_ items: [ProcessingItem]) async throws -> [ProcessingResult]
}

/// Receipts: the members' delivered and read watermarks.
public protocol ReceiptStore: Sendable {
    /// Moves `userId`'s delivered (or read, which moves delivered too) watermark in the conversation up to `upToSeq`,
    /// clamped to the conversation's last seq; a watermark never moves down. For each watermark that moved, a `receipt`
    /// event goes to every member, in the same transaction. Answers the watermarks as they are after the call (also
    /// when nothing moved: a repeated receipt is harmless); `not_found` when `userId` is not a member.
    func recordReceipt(conversationId: String, userId: String, kind: ReceiptKind, upToSeq: Int64) async throws -> ReceiptOutcome
    /// The same, answered through `completion` once committed (or failed): for the event loop, which must not wait. A
    /// store whose write is not callback-based answers through a task (the default).
    func recordReceipt(
        conversationId: String, userId: String, kind: ReceiptKind, upToSeq: Int64,
        completion: @escaping @Sendable (Result<ReceiptOutcome, any Error>) -> Void)
}

extension ReceiptStore {
    public func recordReceipt(
        conversationId: String, userId: String, kind: ReceiptKind, upToSeq: Int64,
        completion: @escaping @Sendable (Result<ReceiptOutcome, any Error>) -> Void
    ) {
        Task {
            do {
                completion(.success(try await recordReceipt(conversationId: conversationId, userId: userId, kind: kind, upToSeq: upToSeq)))
            } catch {
                completion(.failure(error))
            }
        }
    }
}

/// The per-user event log, split in partitions: what a device's stream reads and resumes from, and its pruning.
public protocol EventLog: Sendable {
    /// A random id of this store's event log and its partition layout; cursors from another log are unknown here.
    var epoch: String { get }
    /// How many partitions the event log has (1 for a single log).
    var eventPartitions: Int { get }
    /// The log this one continues after a restore from a backup, if any: its cursors up to its head stay valid here.
    var formerLog: FormerEventLog? { get }
    /// Events of `device`'s stream after `after`, at most `limit`: in each partition the next ones in offset order
    /// (a prefix of what follows, so that advancing the position past them skips nothing).
    func events(for device: DeviceIdentity, after: EventPosition, limit: Int) async throws -> [StoredEvent]
    /// The newest committed event of each partition (0 where none).
    func headPosition() async throws -> EventPosition
    /// Events at or below this were pruned; a cursor below it in any partition has missed events.
    func prunedThrough() async throws -> EventPosition
    /// Deletes events older than `cutoff` (milliseconds since the epoch); returns how many.
    @discardableResult
    func pruneEvents(olderThan cutoff: Int64) async throws -> Int
}

extension EventLog {
    public var formerLog: FormerEventLog? { nil }
}

/// An event log that a restored one continues: the epoch its cursors carry, and the last position the restored copy
/// holds. Its cursors at or before that position name the same events in the restored log.
public struct FormerEventLog: Sendable, Equatable {
    public var epoch: String
    public var head: EventPosition

    public init(epoch: String, head: EventPosition) {
        self.epoch = epoch
        self.head = head
    }
}

/// Dead letters: messages processing gave up on, kept for an operator to replay.
public protocol DeadLetterStore: Sendable {
    /// Dead letters, oldest failure first, at most `limit`, each with the error that ended it.
    func deadLetters(limit: Int) async throws -> [DeadLetter]
    /// The dead-lettered message with this serverId, as it was accepted.
    func deadLetter(serverId: String) async throws -> BufferedMessage?
    /// Forgets a dead letter (after it was requeued).
    func removeDeadLetter(serverId: String) async throws
    /// How many dead letters there are (the `pigeon_dead_letters` gauge).
    func deadLetterCount() async throws -> Int
}

/// Whether the store can serve now (`/readyz`).
public protocol StoreHealth: Sendable {
    /// Whether the store answers now (for `/readyz`): a cheap read, and after a disk fault a tiny write, so readiness
    /// comes back once the disk takes writes again.
    func isReady() async -> Bool
    /// Whether the store's disk refused its last write (full, or failing): `/readyz` names it.
    var isDiskFull: Bool { get }
}

extension StoreHealth {
    public var isDiskFull: Bool { false }
}

extension MessageHistory {
    /// Every message of the conversation the page holds (no late joiner's limit).
    public func messages(conversationId: String, after: Int64?, before: Int64?, limit: Int) async throws -> MessagePage {
        try await messages(conversationId: conversationId, after: after, before: before, limit: limit, visibleFrom: 0, reader: nil)
    }

    public func messages(conversationId: String, after: Int64?, before: Int64?, limit: Int, visibleFrom: Int64) async throws -> MessagePage {
        try await messages(conversationId: conversationId, after: after, before: before, limit: limit, visibleFrom: visibleFrom, reader: nil)
    }
}

