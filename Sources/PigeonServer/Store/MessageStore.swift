import PigeonProtocol

/// An authenticated device: who is calling.
public struct DeviceIdentity: Sendable, Hashable {
    public var userId: String
    public var deviceId: String

    public init(userId: String, deviceId: String) {
        self.userId = userId
        self.deviceId = deviceId
    }
}

/// What must hold for a device registration to be written.
public struct DeviceRegistrationRule: Sendable {
    /// Refuse (`401 unauthorized`) when the user already has a device: the caller did not prove it is that user.
    public var onlyFirstDevice: Bool
    /// Refuse (`403 forbidden`) when the user already has this many devices.
    public var maxDevices: Int

    public init(onlyFirstDevice: Bool, maxDevices: Int) {
        self.onlyFirstDevice = onlyFirstDevice
        self.maxDevices = maxDevices
    }

    /// The refusal for a user that has ever had `everHad` devices (revoked ones included: a userId whose devices were
    /// all revoked is still taken) of which `active` are not revoked, or `nil` when the registration may be written.
    func refusal(everHad: Int, active: Int) -> PigeonError? {
        if onlyFirstDevice && everHad > 0 {
            return PigeonError(.unauthorized, "this userId already has devices: register another one with the token of one of them")
        }
        if active >= maxDevices {
            return PigeonError(.forbidden, "this user has \(active) devices, the most allowed; revoke one first")
        }
        return nil
    }
}

/// What an edit or a delete needs to know of the message it targets.
public struct MessageTarget: Sendable, Equatable {
    public var senderId: String
    public var type: String
    public var deleted: Bool

    public init(senderId: String, type: String, deleted: Bool) {
        self.senderId = senderId
        self.type = type
        self.deleted = deleted
    }
}

/// A device of a user as the store keeps it: registered, or seen through a JWT (API.md 1.1, "Devices: list and
/// revoke").
public struct DeviceRecord: Sendable, Equatable {
    public var deviceId: String
    /// The name it registered with; `nil` for none (always for a device seen through a JWT).
    public var name: String?
    /// When it registered, or was first seen through a JWT (milliseconds since the epoch).
    public var createdAt: Int64
    /// When it last made an authenticated request, as last written (``DeviceActivity`` writes it at most once a
    /// minute per device).
    public var lastSeenAt: Int64

    public init(deviceId: String, name: String?, createdAt: Int64, lastSeenAt: Int64) {
        self.deviceId = deviceId
        self.name = name
        self.createdAt = createdAt
        self.lastSeenAt = lastSeenAt
    }
}

/// A committed revocation of a device.
public struct DeviceRevocation: Sendable, Hashable {
    public var device: DeviceIdentity
    /// When it was revoked (milliseconds since the epoch).
    public var revokedAt: Int64

    public init(device: DeviceIdentity, revokedAt: Int64) {
        self.device = device
        self.revokedAt = revokedAt
    }

    /// The last second (of a JWT's `iat`) whose tokens the revocation refuses: a token of the device issued in a later
    /// second is accepted; one issued in this second or before, or without `iat`, is not. Opaque tokens are gone.
    public var tokensIssuedThrough: Int64 { revokedAt / 1000 }

    /// Whether a token of this device issued at `issuedAt` (a JWT's `iat` in seconds; `nil`: an opaque token or a
    /// JWT without `iat`) is refused by this revocation.
    public func refuses(tokenIssuedAt issuedAt: Int64?) -> Bool {
        guard let issuedAt else { return true }
        return issuedAt <= tokensIssuedThrough
    }
}

/// What the store knows of a device seen through a JWT (``MessageStore/recordJWTDevice(_:issuedAt:at:)``).
public struct JWTDeviceState: Sendable, Equatable {
    /// Its latest revocation, if it was ever revoked: tokens issued up to that second stay refused.
    public var lastRevokedAt: Int64?
    /// Whether it is listed in `GET /v1/devices` (not revoked, or seen again with a token issued after its
    /// revocation).
    public var isListed: Bool

    public init(lastRevokedAt: Int64?, isListed: Bool) {
        self.lastRevokedAt = lastRevokedAt
        self.isListed = isListed
    }

    /// Whether a token issued at `issuedAt` (seconds; `nil`: no `iat`) is refused by the device's latest revocation.
    public func refuses(tokenIssuedAt issuedAt: Int64?) -> Bool {
        guard let lastRevokedAt else { return false }
        guard let issuedAt else { return true }
        return issuedAt <= lastRevokedAt / 1000
    }
}

/// An event persisted in a user's event log, ready to push.
///
/// `payload` is the event's JSON object without its cursor; ``frame(cursor:)`` adds it.
public struct StoredEvent: Sendable, Equatable {
    /// The event's offset in its partition: 1, 2, 3 … in commit order, no gap.
    public var id: Int64
    /// The partition of the log it is in: its conversation's (``EventPartitioning``).
    public var partition: Int
    public var type: String
    /// The user whose devices receive it.
    public var userId: String
    /// Only this device receives it (`message.stored`, `message.failed`).
    public var deviceId: String?
    /// Every device of the user but this one receives it (the sender's own `message.new`).
    public var excludedDeviceId: String?
    public var payload: String

    public init(id: Int64, partition: Int = 0, type: String, userId: String, deviceId: String?, excludedDeviceId: String?, payload: String) {
        self.id = id
        self.partition = partition
        self.type = type
        self.userId = userId
        self.deviceId = deviceId
        self.excludedDeviceId = excludedDeviceId
        self.payload = payload
    }

    /// Whether `device` of ``userId`` receives this event.
    public func isVisible(to device: String) -> Bool {
        if let deviceId, deviceId != device { return false }
        if let excludedDeviceId, excludedDeviceId == device { return false }
        return true
    }

    /// The event as sent on the wire: the payload with `"cursor"` added.
    public func frame(cursor: String) -> String {
        "{\"cursor\":\"\(cursor)\"," + payload.dropFirst()
    }
}

/// Where committed events reach this node's connected devices: the stream hub. A ``Fanout`` feeds it.
public protocol EventSink: Sendable {
    /// Called with committed events, each partition's in offset order and each event once; a partition's events
    /// come in commit order (calls for different partitions may interleave).
    func publish(_ events: [StoredEvent])
}

/// Called inside the processing transaction for each message before it is written; throwing fails that message as
/// a store error would. For fault-injection tests.
public typealias ProcessingFaultInjector = @Sendable (BufferedMessage) throws -> Void

/// A buffered message handed to the store for processing.
public struct ProcessingItem: Sendable {
    public var entry: BufferEntry
    /// If this attempt fails, the message goes to the dead-letter store instead of being retried.
    public var isFinalAttempt: Bool

    public init(entry: BufferEntry, isFinalAttempt: Bool) {
        self.entry = entry
        self.isFinalAttempt = isFinalAttempt
    }
}

/// What processing did with one item.
public enum ProcessingResult: Sendable {
    /// Persisted now with this seq; events were written with it.
    case stored(seq: Int64)
    /// Persisted by an earlier attempt (the buffer handed it out twice): nothing was written.
    case alreadyStored(seq: Int64)
    /// Failed; not written. Retry later (a message of its conversation behind it is deferred).
    case failed(any Error)
    /// Moved to the dead-letter store; `message.failed` went to its sender.
    case deadLettered(any Error)
    /// Not attempted because an earlier message of its conversation failed in this batch.
    case deferred
}

/// A dead-lettered message.
public struct DeadLetter: Sendable, Codable, Equatable {
    public var message: Message
    public var failedAt: Int64
    public var error: ErrorDetail
}

/// A receipt's effect.
public struct ReceiptOutcome: Sendable {
    public var watermarks: ReceiptResponse
    /// For each delivered watermark that moved onto another member's message: its store time (for latency metrics).
    public var deliveredMessageStoredAt: Int64?
}

/// The durable, ordered store: devices, conversations, messages with their seq, receipts, the per-user event log
/// and the dead letters.
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
public protocol MessageStore: Sendable {
    /// A random id of this store's event log and its partition layout; cursors from another log are unknown here.
    var epoch: String { get }
    /// How many partitions the event log has (1 for a single log).
    var eventPartitions: Int { get }

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

    /// Creates a conversation of `creator` and `members` (the creator always included, repeats dropped; the routes
    /// validate the list first) and, in the same transaction, a `conversation.created` event for every member, whose
    /// payload is stored once; its id is time-ordered.
    func createConversation(creator: String, members: [String], name: String?) async throws -> Conversation
    /// A page of `userId`'s conversations, newest `updatedAt` first (ties: greater id first), starting after
    /// `before` (nil: the newest), at most `limit`.
    func conversations(of userId: String, before: ConversationCursor?, limit: Int) async throws -> ConversationList
    /// The conversation if `userId` is a member, else `nil` (unknown and forbidden look the same).
    func conversation(id: String, for userId: String) async throws -> Conversation?
    /// The conversation with every member's role, joinedSeq and watermarks, as an operator sees it (no member's view:
    /// `lastMessage` null, `unreadCount` 0), or `nil` when it does not exist.
    func conversation(id: String) async throws -> Conversation?
    /// Member user ids of a conversation, `nil` if it does not exist. Cheap: served from memory when possible.
    func members(of conversationId: String) async throws -> [String]?
    /// `userId`'s membership of the conversation (role, joinedSeq, watermarks), or `nil` when it is not a member.
    func member(_ userId: String, of conversationId: String) async throws -> ConversationMember?
    /// Applies a membership, role or name change by `actor` (``MembershipPlan`` has the rules) under the
    /// conversation's lock: the members' rows, and each change as a `pigeon.members` message with the next seq and its
    /// `message.new` events, in one transaction. Answers the conversation as `actor` sees it after the change (after
    /// leaving: without the caller, `lastMessage` null). `not_found` when the actor is not a member.
    func changeMembership(conversationId: String, by actor: DeviceIdentity, _ operation: MembershipOperation, maxMembers: Int) async throws
        -> Conversation
    /// What an edit or delete checks of its target at accept time: the message with `serverId` in the conversation,
    /// or `nil`.
    func messageTarget(conversationId: String, serverId: String) async throws -> MessageTarget?
    /// The stored message `deviceId` of `senderId` sent with `clientMessageId`, as a resend's answer (`200`), or nil.
    func storedMessage(senderId: String, deviceId: String, clientMessageId: String) async throws -> SendMessageResponse?

    /// Processes a batch in buffer order, in one transaction; one result per item, in the same order.
    ///
    /// Each message is stored with the next seq of its conversation and its events (`message.new` for every member,
    /// except the sender's sending device; `message.stored` for that device), or recognised as stored already (by
    /// serverId or by (sender, device, clientMessageId)). A message that fails fails alone: the others of the batch are
    /// stored; later messages of its conversation in the batch are `.deferred` (order), and one whose item is its final
    /// attempt, or whose failure is permanent, is dead-lettered with `message.failed` to its sender. A fault of the
    /// whole store (unreachable, disk full) throws, and nothing of the batch is written.
    func process(_ items: [ProcessingItem]) async throws -> [ProcessingResult]

    /// Where an accepted message is: `.stored` with its seq, `.failed` if dead-lettered, `nil` while still queued.
    func status(ofMessage serverId: String) async throws -> (status: ServerMessageStatus, seq: Int64?)?

    /// `after`: messages with seq > after ascending; `before`: the page just before it, ascending;
    /// neither: the newest page. Nothing below `visibleFrom` (a late joiner's `joinedSeq`): a page never reaches
    /// below it and its `hasMore` says so.
    func messages(conversationId: String, after: Int64?, before: Int64?, limit: Int, visibleFrom: Int64) async throws -> MessagePage

    /// Moves `userId`'s delivered (or read, which moves delivered too) watermark in the conversation up to `upToSeq`,
    /// clamped to the conversation's last seq; a watermark never moves down. For each watermark that moved, a `receipt`
    /// event goes to every member, in the same transaction. Answers the watermarks as they are after the call (also
    /// when nothing moved: a repeated receipt is harmless); `not_found` when `userId` is not a member.
    func recordReceipt(conversationId: String, userId: String, kind: ReceiptKind, upToSeq: Int64) async throws -> ReceiptOutcome

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

    /// Dead letters, oldest failure first, at most `limit`, each with the error that ended it.
    func deadLetters(limit: Int) async throws -> [DeadLetter]
    /// The dead-lettered message with this serverId, as it was accepted.
    func deadLetter(serverId: String) async throws -> BufferedMessage?
    /// Forgets a dead letter (after it was requeued).
    func removeDeadLetter(serverId: String) async throws
    /// How many dead letters there are (the `pigeon_dead_letters` gauge).
    func deadLetterCount() async throws -> Int

    /// Whether the store answers now (for `/readyz`): a cheap read, and after a disk fault a tiny write, so readiness
    /// comes back once the disk takes writes again.
    func isReady() async -> Bool
    /// Whether the store's disk refused its last write (full, or failing): `/readyz` names it.
    var isDiskFull: Bool { get }
}

extension MessageStore {
    public var isDiskFull: Bool { false }

    /// Every message of the conversation the page holds (no late joiner's limit).
    public func messages(conversationId: String, after: Int64?, before: Int64?, limit: Int) async throws -> MessagePage {
        try await messages(conversationId: conversationId, after: after, before: before, limit: limit, visibleFrom: 0)
    }
}

/// A conversation about to be created, the same for every store: a time-ordered id, its kind (direct for two
/// members and no name, API.md 1.1), the creator among the members (sorted, without repeats) as the owner, every
/// founding member joined at seq 0, and the `conversation.created` payload each member's log gets.
enum NewConversation {
    static func make(creator: String, members: [String], name: String?) throws -> (Conversation, userIds: [String], payload: String) {
        let userIds = Array(Set(members + [creator])).sorted()
        let conversation = Conversation(
            id: Identifiers.uuidV7(), kind: Conversation.kind(name: name, memberCount: userIds.count), name: name,
            createdAt: WallClock.nowMillis(), lastSeq: 0,
            members: userIds.map { ConversationMember(userId: $0, role: $0 == creator ? .owner : .member, joinedSeq: 0, deliveredSeq: 0, readSeq: 0) })
        return (conversation, userIds, try EventPayload().conversationCreated(conversation))
    }
}

/// Where a page of `GET /v1/conversations` starts: `before=<updatedAt>` (conversations updated strictly before it)
/// or `before=<updatedAt>:<id>` (strictly after that conversation in the list's order: older, or as old with a
/// smaller id), which pages through conversations updated in the same millisecond without skipping or repeating one.
public struct ConversationCursor: Sendable, Equatable {
    public var updatedAt: Int64
    public var id: String?

    public init(updatedAt: Int64, id: String?) {
        self.updatedAt = updatedAt
        self.id = id
    }

    /// Parses the `before` query parameter; a clear `400 invalid_request` for anything else.
    public init(parameter raw: String) throws {
        let parts = raw.split(separator: ":", maxSplits: 1, omittingEmptySubsequences: false)
        guard let updatedAt = Int64(parts[0]), updatedAt >= 0 else {
            throw PigeonError.invalid("before must be <updatedAt> or <updatedAt>:<conversationId>, updatedAt an integer from 0")
        }
        if parts.count == 2 {
            let id = parts[1]
            guard !id.isEmpty, id.utf8.count <= 64, id.utf8.allSatisfy({ $0 == UInt8(ascii: "-") || ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x61 && $0 <= 0x66) })
            else { throw PigeonError.invalid("before's conversationId is not a conversation id") }
            self.init(updatedAt: updatedAt, id: String(id))
        } else {
            self.init(updatedAt: updatedAt, id: nil)
        }
    }

    /// The `before` that continues after `conversation`.
    init(after conversation: Conversation) {
        self.init(updatedAt: conversation.updatedAt, id: conversation.id)
    }

    public var parameter: String { id.map { "\(updatedAt):\($0)" } ?? String(updatedAt) }
}

extension ConversationList {
    /// A page from `limit + 1` conversations read in list order: the extra one only says that more follow.
    init(page: [Conversation], limit: Int) {
        let hasMore = page.count > limit
        let conversations = Array(page.prefix(limit))
        self.init(
            conversations: conversations, hasMore: hasMore,
            nextBefore: hasMore ? conversations.last.map { ConversationCursor(after: $0).parameter } : nil)
    }
}
