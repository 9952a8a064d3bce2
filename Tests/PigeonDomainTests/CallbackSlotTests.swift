import NIOConcurrencyHelpers
import PigeonDomain
@testable import PigeonServer
import Testing

/// An observer read from its slot on every publication must stay the closure it was: reading a bare closure out of
/// `NIOLockedValueBox` wrapped it in two more thunks each time, so the n-th publication walked a chain of 2n calls
/// (quadratic: 200,000 publications took hours; with the ``Callback`` slot they take milliseconds).
@Suite(.timeLimit(.minutes(1))) struct CallbackSlotTests {
    @Test func anObserverReadOnEveryPublicationDoesNotGrow() {
        let fanout = LocalFanout(sink: DiscardingSink())
        let calls = NIOLockedValueBox(0)
        fanout.observePublications { calls.withLockedValue { $0 += 1 } }
        for _ in 0..<200_000 { fanout.publish([]) }
        #expect(calls.withLockedValue { $0 } == 200_000)
    }

    struct DiscardingSink: EventSink {
        func publish(_ events: [StoredEvent]) {}
    }
}
