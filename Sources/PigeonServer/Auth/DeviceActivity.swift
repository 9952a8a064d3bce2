import Logging
import NIOConcurrencyHelpers
import PigeonDomain
import PigeonProtocol
import ServiceLifecycle

/// When each device was last seen (its latest authenticated request): kept in memory by ``seen(_:at:)``, which
/// never waits, and written to the store by ``run()`` in batches, at most once per ``interval`` per device.
///
/// A device's first request after a write more than an interval old is written within about a second; later ones
/// in the same interval are written by the sweep that follows it. The stored `lastSeenAt` is so never more than
/// about an interval (and a second) older than the device's latest request. What was not written when the node
/// stops is lost (a graceful shutdown writes it).
public final class DeviceActivity: Service, Sendable {
    private struct Entry {
        /// The latest request seen.
        var latest: Int64
        /// The value last written (`nil`: none yet), and when.
        var written: Int64?
        var writtenAt: Int64?
    }

    private struct State {
        var entries: [DeviceIdentity: Entry] = [:]
        /// Devices whose latest request is to be written now.
        var due: Set<DeviceIdentity> = []
    }

    private let store: any DeviceStore
    /// The shortest time between two writes of one device.
    let interval: Duration
    private let logger: Logger
    private let state = NIOLockedValueBox(State())
    /// What ``run()`` waits on: the interval and the coalescing second.
    private let clock: ElapsedClock
    private let wakeUp: AsyncSignal
    private var intervalMillis: Int64 { interval.components.seconds * 1000 + interval.components.attoseconds / 1_000_000_000_000_000 }

    init(store: any DeviceStore, interval: Duration, logger: Logger, clock: any Clock<Duration> = ContinuousClock()) {
        self.store = store
        self.interval = interval
        self.logger = logger
        let clock = ElapsedClock(clock)
        self.clock = clock
        self.wakeUp = AsyncSignal(clock: clock)
    }

    /// Records a request of `device` at `now` (milliseconds since the epoch). In memory only: a write, if one is due,
    /// happens in ``run()``.
    func seen(_ device: DeviceIdentity, at now: Int64 = WallClock.nowMillis()) {
        let intervalMillis = self.intervalMillis
        let wake = state.withLockedValue { state -> Bool in
            var entry = state.entries[device] ?? Entry(latest: now)
            entry.latest = max(entry.latest, now)
            state.entries[device] = entry
            guard entry.writtenAt.map({ now - $0 >= intervalMillis }) ?? true else { return false }
            return state.due.insert(device).inserted
        }
        if wake { wakeUp.notify() }
    }

    /// Writes what is due until graceful shutdown (then once more): woken by ``seen(_:at:)``, coalescing a second's
    /// worth of devices per write, and every interval for the requests an earlier write did not cover (both waits on
    /// the injected clock; the times written are the wall clock's).
    public func run() async throws {
        let coalescing = min(interval, .seconds(1))
        await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                await self.wakeUp.wait(timeout: self.interval)
                if Task.isCancelled { break }
                await self.flush()
                try? await self.clock.sleep(for: coalescing)
            }
        }
        await flush()
    }

    /// Writes every device whose latest request is not written and whose last write is an interval old (or that
    /// was never written); forgets devices silent for two intervals.
    func flush(now: Int64 = WallClock.nowMillis()) async {
        let intervalMillis = self.intervalMillis
        let batch = state.withLockedValue { state -> [DeviceIdentity: Int64] in
            var batch: [DeviceIdentity: Int64] = [:]
            for (device, entry) in state.entries {
                let isDue = state.due.contains(device) || entry.writtenAt.map { now - $0 >= intervalMillis } ?? true
                if isDue, entry.latest > (entry.written ?? .min) {
                    batch[device] = entry.latest
                    state.entries[device]?.written = entry.latest
                    state.entries[device]?.writtenAt = now
                } else if now - entry.latest >= 2 * intervalMillis {
                    state.entries[device] = nil
                }
            }
            state.due = []
            return batch
        }
        guard !batch.isEmpty else { return }
        do {
            try await store.recordDevicesSeen(batch)
        } catch {
            logger.warning("recording when devices were last seen failed; retrying", metadata: ["devices": "\(batch.count)", "error": "\(error)"])
            state.withLockedValue { state in
                for device in batch.keys {
                    state.entries[device]?.written = nil
                    state.entries[device]?.writtenAt = nil
                }
            }
        }
    }
}
