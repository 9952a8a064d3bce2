import Foundation
import Logging
import NIOConcurrencyHelpers
import PigeonProtocol

/// The network side of a ``PigeonClient``: a coordinator of one part per loop (in `Engine/`), which ``run()`` runs
/// together and ends together: the ``ConnectionLoop``, the ``OutboxDispatcher``, the ``ReceiptSender``, the
/// ``GapFiller``, the ``CatchUpLoop`` and the ``Upkeep``. They share ``EngineShared``; everything they learn goes
/// through the local database first. Every wait and backoff runs on the configuration's clock, and every jitter comes
/// from its jitter, so tests can drive them.
final class ClientEngine: Sendable {
    let shared: EngineShared
    let connection: ConnectionLoop
    let dispatcher: OutboxDispatcher
    let receipts: ReceiptSender
    let gaps: GapFiller
    let catchUps: CatchUpLoop
    let upkeep: Upkeep

    init(store: LocalStore, transport: any PigeonTransport, hub: EventHub, settings: PigeonClient.Configuration, logger: Logger) throws {
        let shared = try EngineShared(store: store, transport: transport, hub: hub, settings: settings, logger: logger)
        self.shared = shared
        dispatcher = OutboxDispatcher(shared: shared)
        connection = ConnectionLoop(shared: shared, dispatcher: dispatcher)
        receipts = ReceiptSender(shared: shared)
        gaps = GapFiller(shared: shared)
        catchUps = CatchUpLoop(shared: shared, gaps: gaps)
        upkeep = Upkeep(shared: shared)
    }

    var transport: any PigeonTransport { shared.transport }
    var clock: ElapsedClock { shared.clock }
    var outbox: NIOLockedValueBox<OutboxQueue> { shared.outbox }
    var gapWake: AsyncSignal { shared.gapWake }
    var connectionState: ConnectionState { shared.connectionState }
    var lastConnectionError: PigeonClientError? { shared.lastConnectionError }
    var isNetworkEnabled: Bool { shared.isNetworkEnabled }
    var isRunning: Bool { shared.isRunning }
    var receiptsSentCount: Int { shared.receiptsSentCount }
    var connectionGeneration: Int { shared.connectionGeneration }

    /// Runs every loop until the task is cancelled.
    func run() async {
        let slot = shared.slot
        slot.withLockedValue { $0.running = true }
        defer { slot.withLockedValue { $0.running = false } }
        await withTaskCancellationHandler {
            await withDiscardingTaskGroup { group in
                group.addTask { await self.connection.run() }
                group.addTask { await self.dispatcher.run() }
                group.addTask { await self.receipts.run() }
                group.addTask { await self.gaps.run() }
                group.addTask { await self.catchUps.run() }
                group.addTask { await self.upkeep.run() }
            }
        } onCancel: {
            // The stream's reader waits for frames, not for cancellation: closing the connection ends it.
            slot.withLockedValue { $0.connection }?.close()
        }
        slot.withLockedValue { $0.connection }?.close()
        shared.setState(.offline)
    }

    /// Switches the network on or off. Off closes the stream at once; messages sent meanwhile wait (⏰).
    func setNetworkEnabled(_ enabled: Bool) {
        let connection = shared.slot.withLockedValue { slot -> (any EventStreamConnection)? in
            slot.networkEnabled = enabled
            return enabled ? nil : slot.connection
        }
        connection?.close()
        shared.connectionWake.notify()
    }

    /// Persists and announces a batch, then starts what it calls for.
    func apply(_ batch: [Incoming]) async throws { try await shared.apply(batch) }

    // MARK: The parts' calls, for the client

    func enqueue(_ item: OutboxItem) { dispatcher.enqueue(item) }
    func cancelQueued(_ localId: Int64) -> Bool { dispatcher.cancelQueued(localId) }
    func requeue(_ item: OutboxItem) { dispatcher.requeue(item) }
    func receiptsChanged() { receipts.receiptsChanged() }
    func setTyping(conversationId: String, active: Bool) async throws { try await connection.setTyping(conversationId: conversationId, active: active) }
    func signOut(_ error: PigeonClientError) { connection.signOut(error) }
    @discardableResult
    func replaceConnection() -> Bool { connection.replaceConnection() }
    func catchUp() async throws { try await catchUps.catchUp() }
    func catchUp(conversationId: String) async throws { try await gaps.catchUp(conversationId: conversationId) }
    @discardableResult
    func refreshConversation(_ id: String) async throws -> Bool { try await gaps.refreshConversation(id) }
    func fetchMissingMessages(in conversationId: String? = nil) async throws { try await gaps.fetchMissingMessages(in: conversationId) }

    // MARK: Calls that change a conversation

    /// Creates the conversation on the server and saves it locally before returning it.
    func createConversation(_ request: CreateConversationRequest) async throws -> Conversation {
        let conversation = try await transport.createConversation(request)
        try await shared.apply([.conversations([conversation])])
        return conversation
    }
    /// A member or name call: the server's answer (the conversation after the change) is applied before it returns.
    /// Errors say what went wrong in the terms of the call: `403` ``PigeonClientError/Code-swift.struct/forbidden``,
    /// `400` ``PigeonClientError/Code-swift.struct/invalidArgument``, and for a `404` the conversation is read again:
    /// ``PigeonClientError/Code-swift.struct/notMember`` when this user is no longer a member, else
    /// ``PigeonClientError/Code-swift.struct/invalidArgument`` (the user named is not a member).
    func changeConversation(_ id: String, _ call: () async throws -> Conversation) async throws -> Conversation {
        do {
            let conversation = try await call()
            try await shared.apply([.conversations([conversation])])
            return conversation
        } catch let error as PigeonClientError where error.code == .server && error.serverError != nil {
            let detail = error.serverError!
            switch detail.code {
            case .forbidden:
                throw PigeonClientError(.forbidden, detail.message, serverError: detail, httpStatus: error.httpStatus)
            case .invalidRequest:
                throw PigeonClientError(.invalidArgument, detail.message, serverError: detail, httpStatus: error.httpStatus)
            case .notFound:
                guard try await gaps.refreshConversation(id) else {
                    throw PigeonClientError(
                        .notMember, "\(shared.settings.credentials.userId) is not a member of conversation \(id)", serverError: detail, httpStatus: error.httpStatus)
                }
                throw PigeonClientError(.invalidArgument, detail.message, serverError: detail, httpStatus: error.httpStatus)
            default:
                throw error
            }
        }
    }}

/// Keeps the write-ahead log short without making any write pay for it (see ``LocalStore/checkpoint(thresholdBytes:)``).
struct Upkeep: EnginePart {
    let shared: EngineShared

    func run() async {
        while !Task.isCancelled {
            try? await clock.sleep(for: .seconds(1))
            do {
                try await store.checkpoint()
            } catch {
                logger.debug("checkpoint failed", metadata: ["error": "\(error)"])
            }
        }
    }
}
