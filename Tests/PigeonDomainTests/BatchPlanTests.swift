import PigeonDomain
import PigeonProtocol
import Testing

@testable import PigeonServer

/// ``BatchPlan`` and ``MessageEvents``: the processing policy and the events of a stored message, as both stores
/// apply them, without I/O.
@Suite struct BatchPlanTests {
    struct Refused: Error {}

    /// What happens to one message of a batch, as a store reports it.
    enum Step: Sendable, CustomStringConvertible {
        case stores(Int64)
        case wasStored(Int64)
        case fails(PigeonError?)
        var description: String {
            switch self {
            case .stores(let seq): "stores \(seq)"
            case .wasStored(let seq): "was stored \(seq)"
            case .fails(let error): "fails \(error.map { $0.detail.code.rawValue } ?? "(store error)")"
            }
        }
    }

    struct Case: Sendable, CustomTestStringConvertible {
        /// (conversation, final attempt, what the store reports if asked)
        var messages: [(String, Bool, Step)]
        /// What each comes to: stored/already/failed/dead/deferred.
        var results: [String]
        var testDescription: String { messages.map { "\($0.0)\($0.1 ? "!" : "") \($0.2)" }.joined(separator: ", ") }
    }

    static let cases: [Case] = [
        Case(messages: [("a", false, .stores(1)), ("a", false, .stores(2))], results: ["stored 1", "stored 2"]),
        Case(messages: [("a", false, .wasStored(7)), ("a", false, .stores(8))], results: ["already 7", "stored 8"]),
        // A store error blocks the rest of its conversation in this batch; other conversations flow on.
        Case(
            messages: [("a", false, .fails(nil)), ("a", false, .stores(2)), ("b", false, .stores(1)), ("a", true, .stores(2))],
            results: ["failed", "deferred", "stored 1", "deferred"]),
        // The final attempt dead-letters it and its conversation flows on.
        Case(messages: [("a", true, .fails(nil)), ("a", false, .stores(1))], results: ["dead internal", "stored 1"]),
        // A permanent error dead-letters at once, whatever the attempt.
        Case(
            messages: [("a", false, .fails(.conversationNotFound)), ("a", false, .stores(1))],
            results: ["dead not_found", "stored 1"]),
        Case(
            messages: [("a", false, .fails(.invalid("bad"))), ("b", false, .fails(.overloaded("busy"))), ("b", false, .stores(1))],
            results: ["dead invalid_request", "failed", "deferred"]),
        Case(messages: [], results: []),
    ]

    @Test(arguments: cases)
    func eachMessageComesToWhatThePolicySays(_ test: Case) {
        var plan = BatchPlan()
        var asked: [Int] = []
        for (index, (conversation, final, step)) in test.messages.enumerated() {
            let item = ProcessingItem(entry: BufferEntry(id: "\(index)", message: Self.message(conversation), attempts: 0), isFinalAttempt: final)
            guard plan.shouldAttempt(item) else { continue }
            asked.append(index)
            switch step {
            case .stores(let seq): plan.stored(seq: seq)
            case .wasStored(let seq): plan.alreadyStored(seq: seq)
            case .fails(let error):
                let action = plan.failed(item, error: error ?? Refused())
                let dead = final || (error?.isPermanent ?? false)
                #expect((action == .retryLater) == !dead)
            }
        }
        #expect(plan.results.map(Self.describe) == test.results)
        #expect(asked.count == test.results.filter { $0 != "deferred" }.count, "a deferred message is never attempted")
    }

    @Test func theDeadLetterCarriesThePigeonErrorTheStoresRefusalOrAnInternalError() {
        #expect(BatchPlan.deadLetterDetail(PigeonError.conversationNotFound) == PigeonError.conversationNotFound.detail)
        #expect(
            BatchPlan.deadLetterDetail(Refused(), refusal: "invalid byte sequence")
                == ErrorDetail(code: .invalidRequest, message: "the store refused the message: invalid byte sequence"))
        let unexpected = BatchPlan.deadLetterDetail(Refused())
        #expect(unexpected.code == .internalError && unexpected.message.hasPrefix("processing failed: "))
        var plan = BatchPlan()
        let item = ProcessingItem(entry: BufferEntry(id: "1", message: Self.message("a"), attempts: 4), isFinalAttempt: true)
        #expect(plan.failed(item, error: Refused(), refusal: "too long") == .deadLetter(BatchPlan.deadLetterDetail(Refused(), refusal: "too long")))
    }

    @Test func aStoredMessageGoesToEveryMemberButTheSendingDevice() {
        let message = Self.message("a", sender: "alice", device: "phone")
        let recipients = MessageEvents.newMessageRecipients(of: message, members: ["alice", "bob", "carol"])
        #expect(recipients.map(\.userId) == ["alice", "bob", "carol"], "the sender's other devices get it too")
        #expect(recipients.map(\.excludedDeviceId) == ["phone", nil, nil])
        let stored = MessageEvents.stored(message, seq: 4, storedAt: 99)
        #expect(stored.seq == 4 && stored.storedAt == 99 && stored.serverId == message.serverId && stored.body == message.body)
        let failed = MessageEvents.failed(message, error: PigeonError.conversationNotFound.detail)
        #expect(failed.serverId == message.serverId && failed.clientMessageId == message.clientMessageId)
    }

    @Test func recipientsOnlineCountsTheOtherMembersDevicesOnlyNotTheSendersOwn() {
        let hub = StreamHub()
        let fanout = LocalFanout(hub: hub)
        let message = Self.message("a", sender: "alice", device: "phone")
        let sessions = [("alice", "phone"), ("alice", "laptop"), ("bob", "phone"), ("carol", "tablet"), ("dave", "phone")].map { user, device in
            let session = hub.makeSession(
                device: DeviceIdentity(userId: user, deviceId: device), transport: "test", limits: StreamLimits(), limitHit: { _ in })
            hub.register(session, maxStreamsPerDevice: 8)
            return session
        }
        defer { for session in sessions { hub.unregister(session) } }
        let event = MessageEvents.stored(message, seq: 1, storedAt: 1, members: ["alice", "bob", "carol"], presence: fanout)
        #expect(event.recipientsOnline == 2, "bob's and carol's devices; not the sender's, not dave (no member)")
    }

    static func describe(_ result: ProcessingResult) -> String {
        switch result {
        case .stored(let seq): "stored \(seq)"
        case .alreadyStored(let seq): "already \(seq)"
        case .failed: "failed"
        case .deadLettered(let error): "dead \(BatchPlan.deadLetterDetail(error).code.rawValue)"
        case .deferred: "deferred"
        }
    }

    static func message(_ conversation: String, sender: String = "alice", device: String = "d1") -> BufferedMessage {
        BufferedMessage(
            serverId: "s-\(conversation)-\(Int.random(in: 0..<1_000_000))", conversationId: conversation, senderId: sender,
            senderDeviceId: device, clientMessageId: "c", type: "text", body: "hi", clientTimestamp: 1, acceptedAt: 1)
    }
}
