import Foundation
import Logging
import NIOConcurrencyHelpers
import PigeonProtocol

/// The send loop of the server's outgoing HTTP work (pushes to the gateway, events to the app's webhook): claim due
/// items under the store's lease, keep at most `limit` in flight, each delivered in a task of its own; a finished one
/// makes room and wakes the loop. Shared by ``PushDispatcher`` and ``WebhookDispatcher``.
enum LeasedDelivery {
    /// Runs until cancelled. `claim(free)` claims at most `free` due items (its lease keeps other nodes off them);
    /// `deliver` sends one and records what became of it. `wake` is notified by each finished delivery, and may be by
    /// others (a commit); without a wake-up the loop looks again every `pollInterval`. A failed claim is logged as
    /// `failure` and tried again at the next turn.
    static func run<Item: Sendable>(
        limit: Int, wake: AsyncSignal, pollInterval: Duration, logger: Logger, failure: Logger.Message,
        claim: @Sendable (_ free: Int) async throws -> [Item], deliver: @escaping @Sendable (Item) async -> Void
    ) async {
        let inFlight = InFlight(limit: limit)
        // Discarding: a finished delivery leaves nothing behind (a plain group keeps every child's result until
        // `next()`, which this loop never calls: one entry per item sent, for the server's lifetime).
        await withDiscardingTaskGroup { group in
            while !Task.isCancelled {
                let free = inFlight.free
                if free > 0 {
                    do {
                        let claimed = try await claim(free)
                        for item in claimed {
                            inFlight.take()
                            group.addTask {
                                await deliver(item)
                                inFlight.give()
                                wake.notify()
                            }
                        }
                        if claimed.count == free { continue }
                    } catch {
                        logger.warning(failure, metadata: ["error": "\(error)"])
                    }
                }
                await wake.wait(timeout: pollInterval)
            }
            group.cancelAll()
        }
    }

    /// The wait (milliseconds) after `attempts` failed tries: doubling from `first` up to `longest`, ±20 %.
    static func retryDelay(afterAttempts attempts: Int, first: Duration, longest: Duration) -> Int64 {
        let base = min(Double(longest.milliseconds), Double(first.milliseconds) * pow(2, Double(min(attempts - 1, 30))))
        return Int64(base * Double.random(in: 0.8...1.2))
    }
}

/// Deliveries in flight, against their limit.
private final class InFlight: Sendable {
    private let count = NIOLockedValueBox(0)
    private let limit: Int

    init(limit: Int) {
        self.limit = limit
    }

    var free: Int { limit - count.withLockedValue { $0 } }
    func take() { count.withLockedValue { $0 += 1 } }
    func give() { count.withLockedValue { $0 -= 1 } }
}
