import Foundation
import NIOCore
import Synchronization

/// Follows the paced messages of one conversation (or MQTT topic) from their send to their arrival at the receiver
/// and, for Pigeon, to ✓✓ at the sender, recording both latencies. Messages are keyed by their client message id.
///
/// ✓✓ works by watermark as in the wire contract: the sender learns each message's seq from `message.stored`, and a
/// `receipt` from the other member with `upToSeq` ≥ seq marks every message up to it delivered, whichever of the two
/// events comes first. Messages sent during the warm-up are followed but not recorded.
final class DeliveryTracker: Sendable {
    private struct InFlight {
        let sentAt: ContinuousClock.Instant
        let measured: Bool
        var received = false
        var delivered: Bool
    }

    private struct State {
        var inFlight: [String: InFlight] = [:]
        var idBySeq: [Int64: String] = [:]
        var deliveredUpTo: Int64 = 0
        var measuredSent = 0
        var refusals: [String: Int] = [:]
    }

    private let state = Mutex(State())
    private let awaitsDelivery: Bool
    private let toReceiver: LatencyRecorder
    private let toDelivered: LatencyRecorder?

    /// A tracker recording into shared histograms; without `toDelivered` a message is complete once received.
    init(toReceiver: LatencyRecorder, toDelivered: LatencyRecorder?) {
        self.toReceiver = toReceiver
        self.toDelivered = toDelivered
        awaitsDelivery = toDelivered != nil
    }

    /// The message `id` is about to be written; `measured` is false during the warm-up.
    func sent(_ id: String, at instant: ContinuousClock.Instant, measured: Bool) {
        state.withLock { state in
            state.inFlight[id] = InFlight(sentAt: instant, measured: measured, delivered: !awaitsDelivery)
            if measured { state.measuredSent += 1 }
        }
    }

    /// The server refused an operation with `code`; when it was the send of message `id`, that message will never
    /// arrive.
    func refused(_ id: String?, code: String) {
        state.withLock { state in
            state.refusals[code, default: 0] += 1
            if let id, let message = state.inFlight.removeValue(forKey: id), message.measured {
                state.measuredSent -= 1
            }
        }
    }

    /// The receiver got the message (`message.new`, or the MQTT PUBLISH).
    func received(_ id: String, at instant: ContinuousClock.Instant) {
        state.withLock { state in
            guard var message = state.inFlight[id], !message.received else { return }
            message.received = true
            if message.measured { toReceiver.record(instant - message.sentAt) }
            update(&state, id: id, message)
        }
    }

    /// `message.stored` told the sender the message's seq.
    func stored(_ id: String, seq: Int64, at instant: ContinuousClock.Instant) {
        state.withLock { state in
            guard let message = state.inFlight[id], !message.delivered else { return }
            if seq <= state.deliveredUpTo {
                markDelivered(&state, id: id, message, at: instant)
            } else {
                state.idBySeq[seq] = id
            }
        }
    }

    /// A `receipt` moved the other member's delivered watermark to `upToSeq`.
    func delivered(upTo upToSeq: Int64, at instant: ContinuousClock.Instant) {
        state.withLock { state in
            guard upToSeq > state.deliveredUpTo else { return }
            for seq in (state.deliveredUpTo + 1)...upToSeq {
                if let id = state.idBySeq.removeValue(forKey: seq), let message = state.inFlight[id] {
                    markDelivered(&state, id: id, message, at: instant)
                }
            }
            state.deliveredUpTo = upToSeq
        }
    }

    private func markDelivered(_ state: inout State, id: String, _ message: InFlight, at instant: ContinuousClock.Instant) {
        var message = message
        message.delivered = true
        if message.measured { toDelivered?.record(instant - message.sentAt) }
        update(&state, id: id, message)
    }

    private func update(_ state: inout State, id: String, _ message: InFlight) {
        if message.received && message.delivered {
            state.inFlight.removeValue(forKey: id)
        } else {
            state.inFlight[id] = message
        }
    }

    /// Where the measured messages stand.
    struct Progress {
        /// Measured messages sent and not refused.
        var sent = 0
        /// Measured messages the receiver has not got.
        var missingAtReceiver = 0
        /// Measured messages without ✓✓ (always 0 without delivery tracking).
        var missingDelivered = 0
        var refusals: [String: Int] = [:]

        var isSettled: Bool { missingAtReceiver == 0 && missingDelivered == 0 }

        static func + (lhs: Progress, rhs: Progress) -> Progress {
            Progress(
                sent: lhs.sent + rhs.sent,
                missingAtReceiver: lhs.missingAtReceiver + rhs.missingAtReceiver,
                missingDelivered: lhs.missingDelivered + rhs.missingDelivered,
                refusals: lhs.refusals.merging(rhs.refusals, uniquingKeysWith: +)
            )
        }
    }

    var progress: Progress {
        state.withLock { state in
            var progress = Progress(sent: state.measuredSent, refusals: state.refusals)
            for message in state.inFlight.values where message.measured {
                if !message.received { progress.missingAtReceiver += 1 }
                if !message.delivered { progress.missingDelivered += 1 }
            }
            return progress
        }
    }
}

extension DeliveryTracker {
    /// A paced publish of a broker's run: a fresh id, and the payload of the id padded with `padding` bytes (the body
    /// size of the run), recorded as sent now (measured when now is in `window`).
    func nextPacedPayload(padding: Int, window: MeasurementWindow) -> (id: String, payload: ByteBuffer) {
        let id = UUID().uuidString.lowercased()
        var payload = ByteBuffer(string: id)
        payload.writeRepeatingByte(UInt8(ascii: "x"), count: padding)
        let now = ContinuousClock.now
        sent(id, at: now, measured: window.contains(now))
        return (id, payload)
    }
}
