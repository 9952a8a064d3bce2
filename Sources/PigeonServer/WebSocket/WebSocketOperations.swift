import NIOConcurrencyHelpers
import NIOCore
import PigeonDomain
import PigeonProtocol

/// What one WebSocket's operations do, for its ``WebSocketConnection``: on the event loop, the ones that need
/// nothing but memory (``actNow(_:)``); the others are handed to the lane, a task of the stream's
/// (`StreamController.runLane`), in the socket's order.
final class WebSocketOperations: Sendable {
    enum Outcome {
        /// Acted on (appended, answered, or refused with an `error` frame).
        case done
        /// Must wait (a store read, the before-send hook): the lane acts on it.
        case lane(ClientOperation)
    }

    let device: DeviceIdentity
    let session: StreamSession
    let receipts: ReceiptQueue
    private let controller: StreamController
    private let connection: NIOLoopBound<WebSocketConnection>
    private let lane: AsyncStream<ClientOperation>
    private let laneInput: AsyncStream<ClientOperation>.Continuation
    /// Acts on the lane's operations, in order, until the lane is finished.
    private let runLane: @Sendable (AsyncStream<ClientOperation>, WebSocketOperations) async -> Void
    /// The lane's task, started by its first operation (most sockets only send and read receipts: no task for them);
    /// `finished`: the stream ended, no task is started any more.
    private let laneTask = NIOLockedValueBox<(task: Task<Void, Never>?, finished: Bool)>((nil, false))

    init(
        controller: StreamController, device: DeviceIdentity, session: StreamSession, receipts: ReceiptQueue,
        connection: NIOLoopBound<WebSocketConnection>,
        runLane: @escaping @Sendable (AsyncStream<ClientOperation>, WebSocketOperations) async -> Void
    ) {
        self.controller = controller
        self.device = device
        self.session = session
        self.receipts = receipts
        self.connection = connection
        (lane, laneInput) = AsyncStream.makeStream(of: ClientOperation.self)
        self.runLane = runLane
    }

    /// The operation `text` holds (an `error` frame answered and `nil` if it holds none); the device was seen.
    func parse(_ text: String) -> ClientOperation? {
        // An operation is a request of the device's (its `lastSeenAt`).
        controller.authenticator.activity.seen(device)
        return controller.parseOperation(text, session: session)
    }

    /// Acts on `text` now if that needs nothing but memory: a send whose checks the node can make from memory (no
    /// before-send hook, no reply or thread target, no attachment, the members cached) is appended, its `ack` written
    /// from the commit; a receipt joins the socket's batch. Anything else goes to the lane.
    func actNow(_ text: String) -> Outcome {
        guard let operation = parse(text) else { return .done }
        switch operation {
        case .send(let conversationId, let request):
            guard let prepared = controller.ingest.prepareFromMemory(request, from: device, to: conversationId) else { return .lane(operation) }
            controller.append(prepared, clientMessageId: request.clientMessageId, session: session)
            return .done
        case .receipt(let conversationId, let request):
            receipts.add(conversationId: conversationId, kind: request.kind, upToSeq: request.upToSeq)
            return .done
        default:
            return .lane(operation)
        }
    }

    /// A binary message: answered with an `error` frame.
    func refuseBinary() {
        session.send(type: "error", json: StreamController.errorFrame(nil, PigeonError.invalid("send JSON text messages, not binary")))
    }

    func enqueue(_ operation: ClientOperation) {
        laneTask.withLockedValue { state in
            guard state.task == nil, !state.finished else { return }
            let (lane, runLane) = (lane, runLane)
            state.task = Task { [self] in await runLane(lane, self) }
        }
        laneInput.yield(operation)
    }

    /// No operation is taken after this; those taken are acted on.
    func finishLane() {
        laneInput.finish()
    }

    /// The stream ended: the lane takes nothing more, and what it is acting on is cancelled (a before-send hook's
    /// call, a store read); waits for it to end.
    func endLane() async {
        laneInput.finish()
        let task = laneTask.withLockedValue { state -> Task<Void, Never>? in
            state.finished = true
            return state.task
        }
        task?.cancel()
        await task?.value
    }

    /// The lane acted on one operation (from the lane's task).
    func laneFinished() {
        let connection = connection
        connection.eventLoop.execute { connection.value.laneFinished() }
    }
}
