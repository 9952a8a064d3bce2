import Foundation
import NIOConcurrencyHelpers
import PigeonDomain
import PigeonProtocol
@testable import PigeonServer
import PigeonTestSupport
import Testing

/// Typing expiry is on the tracker's injected clock: with a ``ManualClock`` an indicator that is not refreshed is
/// turned off by the sweep at its timeout, not by one before it, and "not before" is a fact of the clock, not a
/// fixed wait that hopes.
@Suite struct TypingClockTests {
    /// The typing frames broadcast, in order, with their recipients.
    final class RecordingFanout: EventFanout {
        let frames = NIOLockedValueBox<[(event: TypingEvent, to: [String])]>([])

        func publish(_ committed: [StoredEvent]) {}
        func deviceRevoked(_ revocation: DeviceRevocation) {}
        func broadcast(type: String, json: String, to users: [String]) {
            guard type == "typing", case .typing(let event) = try? JSONDecoder().decode(ServerEvent.self, from: Data(json.utf8)) else {
                Issue.record("not a typing frame: \(type) \(json)")
                return
            }
            frames.withLockedValue { $0.append((event, users)) }
        }

        var events: [TypingEvent] { frames.withLockedValue { $0.map(\.event) } }
    }

    /// Advances `clock` by one sweep interval and waits until the tracker is parked on it again, so that the sweep at
    /// the new time has run.
    static func sweep(_ clock: ManualClock) async throws {
        clock.advance(by: TypingTracker.sweepInterval)
        try await clock.waitForSleepers()
    }

    @Test func anIndicatorExpiresExactlyAtTheTimeoutAndARefreshMovesItsExpiry() async throws {
        let clock = ManualClock()
        let fanout = RecordingFanout()
        let timeout = Duration.seconds(10)
        let tracker = TypingTracker(fanout: fanout, timeout: timeout, clock: clock)
        let alice = DeviceIdentity(userId: "alice", deviceId: "alice-phone")
        let bob = DeviceIdentity(userId: "bob", deviceId: "bob-phone")
        let members = ["alice", "bob"]
        func on(_ user: String) -> TypingEvent { TypingEvent(conversationId: "c", userId: user, active: true) }
        func off(_ user: String) -> TypingEvent { TypingEvent(conversationId: "c", userId: user, active: false) }
        // One sweep per interval, so the timeout falls on a sweep: expiry is then exact, not up to an interval late.
        let sweepsPerTimeout = Int(timeout / TypingTracker.sweepInterval)
        #expect(TypingTracker.sweepInterval * sweepsPerTimeout == timeout)

        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await tracker.run() }
            defer { group.cancelAll() }
            // Parked on its first sweep (t+0.5 s); alice starts typing at t+0.
            try await clock.waitForSleepers()
            tracker.update(conversationId: "c", device: alice, active: true, members: members)
            #expect(fanout.events == [on("alice")])
            #expect(fanout.frames.withLockedValue { $0.first?.to } == ["bob"], "to the other members, not the typer")

            // Every sweep before the timeout keeps it, the last at 9.5 s included.
            for _ in 1..<sweepsPerTimeout {
                try await Self.sweep(clock)
                #expect(fanout.events == [on("alice")], "still typing at \(clock.now)")
            }
            #expect(clock.now == ManualClock.Instant(offset: timeout - TypingTracker.sweepInterval))
            // The sweep at exactly the timeout turns it off, once.
            try await Self.sweep(clock)
            #expect(clock.now == ManualClock.Instant(offset: timeout))
            #expect(fanout.events == [on("alice"), off("alice")], "off at the timeout")
            try await Self.sweep(clock)
            #expect(fanout.events == [on("alice"), off("alice")], "turned off once")

            // Bob starts at 10.5 s and refreshes at 15 s: his indicator then lasts until 25 s, not 20.5 s.
            let bobStarted = clock.now
            tracker.update(conversationId: "c", device: bob, active: true, members: members)
            for _ in 0..<9 { try await Self.sweep(clock) }
            #expect(clock.now == bobStarted.advanced(by: .milliseconds(4500)))
            tracker.update(conversationId: "c", device: bob, active: true, members: members)
            let refreshedAt = clock.now
            #expect(fanout.events == [on("alice"), off("alice"), on("bob"), on("bob")])
            while clock.now < refreshedAt.advanced(by: timeout - TypingTracker.sweepInterval) {
                try await Self.sweep(clock)
                #expect(fanout.events.count == 4, "bob's refreshed indicator holds at \(clock.now)")
            }
            try await Self.sweep(clock)
            #expect(clock.now == refreshedAt.advanced(by: timeout))
            #expect(fanout.events == [on("alice"), off("alice"), on("bob"), on("bob"), off("bob")], "off at the refresh's timeout")
        }
    }
}
