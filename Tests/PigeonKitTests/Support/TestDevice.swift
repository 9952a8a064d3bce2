import Foundation
import NIOConcurrencyHelpers
import PigeonKit
import PigeonProtocol
import PigeonTestSupport

/// A registered device with its own database, and the client tests drive. Records every event it emits.
final class TestDevice: Sendable {
    let credentials: PigeonClient.Credentials
    let databasePath: String
    let serverURL: URL
    let client: PigeonClient
    private let recorded = NIOLockedValueBox<[PigeonEvent]>([])
    private let recorder: Task<Void, Never>

    var userId: String { credentials.userId }

    init(credentials: PigeonClient.Credentials, databasePath: String, serverURL: URL, client: PigeonClient) {
        self.credentials = credentials
        self.databasePath = databasePath
        self.serverURL = serverURL
        self.client = client
        let events = client.events()
        let recorded = self.recorded
        recorder = Task {
            for await event in events { recorded.withLockedValue { $0.append(event) } }
        }
    }

    deinit { recorder.cancel() }

    /// Registers a new device of `userId` on `server` and opens a client on a fresh database (not started); a
    /// user that has devices needs one of them (`existing`) to prove it.
    static func register(
        _ userId: String, on serverURL: URL, existing: TestDevice? = nil, connectingThrough connectURL: URL? = nil,
        databasePath: String? = nil, transport: TransportMaker? = nil,
        configure: (inout PigeonClient.Configuration) -> Void = { _ in }
    ) async throws -> TestDevice {
        let credentials = try await PigeonClient.registerDevice(
            serverURL: serverURL, userId: userId, deviceName: "test", existingDevice: existing?.credentials)
        let path = databasePath ?? (makeTemporaryDirectory() + "/pigeon.sqlite")
        return try open(credentials: credentials, serverURL: connectURL ?? serverURL, databasePath: path, transport: transport, configure: configure)
    }

    /// Opens a client on an existing device's database (a restart of the app).
    static func open(
        credentials: PigeonClient.Credentials, serverURL: URL, databasePath: String,
        transport: TransportMaker? = nil,
        configure: (inout PigeonClient.Configuration) -> Void = { _ in }
    ) throws -> TestDevice {
        var configuration = PigeonClient.Configuration(serverURL: serverURL, databasePath: databasePath, credentials: credentials)
        configuration.reconnectBaseDelay = .milliseconds(50)
        configuration.reconnectMaxDelay = .milliseconds(500)
        configuration.connectTimeout = .seconds(3)
        configuration.receiptDelay = .milliseconds(10)
        configure(&configuration)
        let client: PigeonClient
        if let transport {
            client = try PigeonClient(configuration: configuration, transport: transport.make(configuration))
        } else {
            client = try PigeonClient(configuration: configuration)
        }
        return TestDevice(credentials: credentials, databasePath: databasePath, serverURL: serverURL, client: client)
    }

    /// Registers a device whose client talks through a ``FaultyTransport`` over the real one.
    static func registerFaulty(
        _ userId: String, on serverURL: URL, configure: (inout PigeonClient.Configuration) -> Void = { _ in }
    ) async throws -> (TestDevice, FaultyTransport) {
        let made = NIOLockedValueBox<FaultyTransport?>(nil)
        let device = try await register(userId, on: serverURL, transport: TransportMaker { configuration in
            let faulty = FaultyTransport(base: configuration.realTransport)
            made.withLockedValue { $0 = faulty }
            return faulty
        }, configure: configure)
        guard let faulty = made.withLockedValue({ $0 }) else { throw TestFailure("no transport was made") }
        return (device, faulty)
    }

    var events: [PigeonEvent] { recorded.withLockedValue { $0 } }

    /// Statuses this device announced for one of its messages, in order.
    /// The statuses announced for a message, in order. An announcement that repeats the status only because the
    /// message's delivery path became known (a resend's `200 stored` answer came before its `message.stored`, which
    /// says whether the peer was online: ``LocalStore/recordStored``) is that same step, not a second one.
    func statusHistory(localId: Int64) -> [MessageStatus] {
        var history: [(status: MessageStatus, path: DeliveryPath?)] = []
        for event in events {
            guard case .messageStatusChanged(let message) = event, message.localId == localId else { continue }
            if let last = history.last, last.status == message.status, last.path == nil, message.deliveryPath != nil {
                history[history.count - 1].path = message.deliveryPath
                continue
            }
            history.append((message.status, message.deliveryPath))
        }
        return history.map(\.status)
    }

    /// Messages announced as received, in order.
    var received: [PigeonMessage] {
        events.compactMap { event in
            if case .messageReceived(let message) = event { return message }
            return nil
        }
    }

    func message(_ localId: Int64) throws -> PigeonMessage {
        guard let message = try client.message(localId: localId) else { throw TestFailure("no message \(localId)") }
        return message
    }

    /// Every message of a conversation in the local database, oldest first.
    func allMessages(in conversationId: String) throws -> [PigeonMessage] {
        try client.messages(in: conversationId, limit: 100_000).messages
    }

    func waitUntilOnline(timeout: Duration = .seconds(20)) async throws {
        try await waitUntil("\(userId) is online", timeout: timeout) { self.client.connectionState == .online }
    }

    func waitForStatus(_ localId: Int64, atLeast status: MessageStatus, timeout: Duration = .seconds(20)) async throws {
        try await waitUntil("message \(localId) of \(userId) is \(status)", timeout: timeout) {
            let current = try self.message(localId).status
            return current != .failed && current >= status
        }
    }
}

/// Starts every device's client and waits until each is online.
func startAll(_ devices: TestDevice...) async throws {
    for device in devices { device.client.start() }
    for device in devices { try await device.waitUntilOnline() }
}

/// Creates a conversation between the devices' users (the first creates it) and waits until every device that is
/// online has it (the others get it when they connect: a first connection catches up).
func makeConversation(_ devices: [TestDevice]) async throws -> String {
    let creator = devices[0]
    let others = Array(Set(devices.dropFirst().map(\.userId)).subtracting([creator.userId])).sorted()
    let conversation = try await creator.client.createConversation(members: others)
    for device in devices.dropFirst() where device.client.connectionState == .online {
        try await waitUntil("\(device.userId) has the conversation") {
            if try device.client.conversation(id: conversation.id) != nil { return true }
            if device.client.connectionState == .online { try? await device.client.catchUp() }
            return false
        }
    }
    return conversation.id
}

/// Whether `statuses` only ever moves forward (docs/ARCHITECTURE.md's invariant 4).
func isMonotonic(_ statuses: [MessageStatus]) -> Bool {
    zip(statuses, statuses.dropFirst()).allSatisfy { $0 < $1 }
}

/// Makes the transport of a test client (not a bare closure, so a trailing closure always means `configure`).
struct TransportMaker {
    let make: (PigeonClient.Configuration) -> any PigeonTransport
}
