import PigeonProtocol
import Synchronization

extension PigeonThroughput {
    /// The consuming receiver of one conversation of a throughput run, as a client app is: the receiver device's
    /// WebSocket stream, on which it records the seq of every `message.new` of the conversation in `ledger` and
    /// answers with delivered receipts, gathered over `receiptDelay` as PigeonKit gathers them (one receipt per
    /// `message.new` when the delay is zero). Increments `ready` once the stream is open; a refused receipt counts
    /// as an error of the run. Runs until cancelled.
    static func consume(
        _ pair: ConversationPair,
        baseURL: String,
        ledger: ReceivedMessages,
        receiptDelay: Duration,
        tally: ThroughputTally,
        ready: Counter
    ) async throws {
        try await PigeonWebSocket(baseURL: baseURL, token: pair.receiver.token).run { frames, writer in
            let receipts = DeliveredReceipts(conversationId: pair.conversationId, delay: receiptDelay)
            ready.increment()
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { try await receipts.send(on: writer) }
                for try await frame in frames {
                    switch frame {
                    case .event(.messageNew(_, let message)) where message.conversationId == pair.conversationId:
                        ledger.record(message.seq)
                        if receiptDelay == .zero {
                            try await writer.send(.receipt(conversationId: pair.conversationId, ReceiptRequest(kind: .delivered, upToSeq: message.seq)))
                        } else {
                            receipts.owe(upTo: message.seq)
                        }
                    case .error(let error):
                        tally.recordError("receipt \(error.error.code.rawValue)")
                    case .ack, .event:
                        continue
                    }
                }
                group.cancelAll()
            }
        }
    }
}

/// The delivered receipts one receiver owes for its conversation, sent the way PigeonKit sends them: the first
/// `message.new` after a receipt wakes the sending task, which waits the gathering delay and then sends one receipt
/// up to the highest seq received by then.
final class DeliveredReceipts: Sendable {
    private struct Watermarks {
        var received: Int64 = 0
        var sent: Int64 = 0
        var scheduled = false
    }

    private let conversationId: String
    private let delay: Duration
    private let watermarks = Mutex(Watermarks())
    private let wake: AsyncStream<Void>
    private let wakeContinuation: AsyncStream<Void>.Continuation

    init(conversationId: String, delay: Duration) {
        self.conversationId = conversationId
        self.delay = delay
        (wake, wakeContinuation) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
    }

    /// The receiver got the message with `seq`.
    func owe(upTo seq: Int64) {
        let schedule = watermarks.withLock { watermarks in
            watermarks.received = max(watermarks.received, seq)
            defer { watermarks.scheduled = true }
            return !watermarks.scheduled
        }
        if schedule { wakeContinuation.yield() }
    }

    /// Sends the owed receipts on `writer` until the task is cancelled. Call it from one task.
    func send(on writer: PigeonWebSocket.OperationWriter) async throws {
        for await _ in wake {
            try await Task.sleep(for: delay)
            let upTo = watermarks.withLock { watermarks -> Int64? in
                watermarks.scheduled = false
                guard watermarks.received > watermarks.sent else { return nil }
                watermarks.sent = watermarks.received
                return watermarks.received
            }
            if let upTo {
                try await writer.send(.receipt(conversationId: conversationId, ReceiptRequest(kind: .delivered, upToSeq: upTo)))
            }
        }
    }
}
