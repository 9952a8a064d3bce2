import PigeonProtocol

/// What the push dispatcher keeps in the store (API.md 1.1, "Push for devices that are not connected"): the devices'
/// registrations, the push owed to each device, and how far the event log has been read for pushes. Both stores
/// implement it; everything here survives a crash, so a push owed is never forgotten.
///
/// The life of a push: ``collectOwedPushes(limit:now:window:minInterval:isOnline:)`` reads the messages stored
/// since the last collection and records one owed push per offline registered device (the newest message wins:
/// bursts coalesce), ``claimDuePushes(now:limit:leaseUntil:node:includeBody:)`` hands the due ones to one node
/// under a lease, and ``finishPush(_:outcome:now:minInterval:node:)`` records the gateway's answer.
public protocol PushStore: Sendable {
    /// Stores (or replaces) `device`'s registration. A pushkey wakes one device: another device of the same user
    /// holding the same pushkey and app loses it (the app reinstalled); a device of another user holding it makes
    /// this ``PigeonError/pushkeyHeld`` and changes nothing (knowing a pushkey must not let one take over another
    /// user's notifications; it is free again once that device unregisters, registers another pushkey, or is revoked).
    func setPushRegistration(_ request: PushRegistrationRequest, data: String?, for device: DeviceIdentity, at now: Int64) async throws
    /// Drops `device`'s registration and any push owed to it; `false` when it had none.
    @discardableResult
    func removePushRegistration(of device: DeviceIdentity) async throws -> Bool
    /// `device`'s registration, with when it was last pushed to and whether a push is owed now.
    func pushRegistration(of device: DeviceIdentity) async throws -> PushRegistrationInfo?

    /// Reads at most `limit` events stored after the push cursor and, in one transaction, records a push owed to
    /// every device with a registration that the `message.new` events of ordinary messages reach (not the sender's
    /// user's devices; not a device `isOnline` says has a stream open; not a message stored before `now - window`),
    /// and moves the cursor past what it read. `nil` when another node is collecting now.
    func collectOwedPushes(
        limit: Int, now: Int64, window: Int64, minInterval: Int64, isOnline: @escaping @Sendable (DeviceIdentity) -> Bool
    ) async throws -> PushCollection?
    /// Claims at most `limit` owed pushes that are due and not claimed, for `node` until `leaseUntil`, with what a
    /// notification carries (the registration, the message, the user's unread count now).
    func claimDuePushes(now: Int64, limit: Int, leaseUntil: Int64, node: String, includeBody: Bool) async throws -> [ClaimedPush]
    /// Records what became of a claimed push. A newer message owed to the device meanwhile stays owed (due
    /// `minInterval` after now when this one was sent).
    func finishPush(_ push: ClaimedPush, outcome: PushOutcome, now: Int64, minInterval: Int64, node: String) async throws
    /// Gives up `node`'s claims (a restarted node sends what it had claimed at once, not after its lease).
    func releasePushClaims(node: String) async throws
    /// How many devices are owed a push now (`pigeon_push_pending`).
    func pendingPushCount() async throws -> Int
    /// When the earliest owed push not claimed is due (ms since the epoch); `nil`: none is owed.
    func nextPushDue() async throws -> Int64?
}

/// What one collection read and recorded.
public struct PushCollection: Sendable, Equatable {
    /// Events read (the cursor moved past them).
    public var scanned: Int
    /// Pushes recorded as owed (new or replacing an older message of the same device).
    public var owed: Int
    /// Whether the log holds more events after the cursor (collect again at once).
    public var more: Bool

    public init(scanned: Int, owed: Int, more: Bool) {
        self.scanned = scanned
        self.owed = owed
        self.more = more
    }
}

/// A push owed to a device, claimed by one node: everything its notification carries.
public struct ClaimedPush: Sendable, Equatable {
    public var device: DeviceIdentity
    public var kind: PushKind
    public var appId: String
    public var pushkey: String
    /// The registration's `data` as JSON text.
    public var data: String?
    /// When the registration was written (ms): the notification's `pushkey_ts` (in seconds).
    public var registeredAt: Int64
    public var conversationId: String
    public var seq: Int64
    public var serverId: String
    public var senderId: String
    public var messageType: String
    /// The message's body, only when the server was told to send bodies and the message is not deleted.
    public var body: String?
    /// The user's unread messages over all its conversations, when claimed.
    public var unread: Int
    /// When the device was first owed a push not yet sent (the retry window counts from it).
    public var owedSince: Int64
    /// Failed sends of this push so far.
    public var attempts: Int

    public init(
        device: DeviceIdentity, kind: PushKind, appId: String, pushkey: String, data: String?, registeredAt: Int64, conversationId: String,
        seq: Int64, serverId: String, senderId: String, messageType: String, body: String?, unread: Int, owedSince: Int64, attempts: Int
    ) {
        self.device = device
        self.kind = kind
        self.appId = appId
        self.pushkey = pushkey
        self.data = data
        self.registeredAt = registeredAt
        self.conversationId = conversationId
        self.seq = seq
        self.serverId = serverId
        self.senderId = senderId
        self.messageType = messageType
        self.body = body
        self.unread = unread
        self.owedSince = owedSince
        self.attempts = attempts
    }
}

/// What became of a claimed push.
public enum PushOutcome: Sendable, Equatable {
    /// The gateway answered 200: not sent again for this message.
    case sent
    /// The gateway answered 200 and rejected the pushkey: the registrations of this app and pushkey are dropped.
    case rejected
    /// A timeout, a 5xx, a 429 or no connection: tried again at this time (ms since the epoch).
    case retry(at: Int64)
    /// Not sent and not tried again: the device came online (its stream delivers), the gateway refused the request
    /// for good, or the retry window passed.
    case dropped
}

extension PigeonError {
    /// A push registration of a pushkey that a device of another user holds (``PushStore/setPushRegistration(_:data:for:at:)``).
    package static let pushkeyHeld = PigeonError(
        .conflict,
        "this pushkey is registered to a device of another user; it is free once that device unregisters it or is revoked")
}
