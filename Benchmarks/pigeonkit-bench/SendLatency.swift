import Foundation
import PigeonBenchSupport
import PigeonKitBenchDevice
import PigeonKit

/// Measurement 1: `send` on a client that never went online, so only the local path runs: validation, the
/// transaction that writes the message and its outbox item, the `messageStatusChanged` (pending) event and the
/// outbox enqueue.
struct SendLatency {
    struct Result {
        /// From the call until `send` returned.
        var call: LatencySummary
        /// From the call until the sending task read the message's `messageStatusChanged` (pending) from `events()`.
        var event: LatencySummary
    }

    let client: PigeonClient
    let conversationId: String
    let bodyBytes: Int

    /// `warmup` unmeasured sends, then `count` measured ones, one after the other.
    func run(warmup: Int, count: Int) async throws -> Result {
        let clock = ContinuousClock()
        var call = LatencySample()
        var event = LatencySample()
        let events = client.events()
        var iterator = events.makeAsyncIterator()
        for index in 0..<(warmup + count) {
            let body = MessageBody.text(index: index, bytes: bodyBytes)
            let start = clock.now
            let message = try client.send(body, to: conversationId)
            let returned = clock.now
            guard case .messageStatusChanged(let changed)? = await iterator.next() else {
                throw BenchError("send \(index): the first event was not messageStatusChanged")
            }
            let observed = clock.now
            guard changed.localId == message.localId, changed.status.rawValue == "pending" else {
                throw BenchError("send \(index): the event was for message \(changed.localId) (\(changed.status.rawValue))")
            }
            if index >= warmup {
                call.record(returned - start)
                event.record(observed - start)
            }
        }
        return Result(call: call.summary, event: event.summary)
    }
}
