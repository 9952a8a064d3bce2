import Foundation
import PigeonKit
import PigeonTestSupport
import Testing

/// PigeonKit's retry policy and timings are the ones both SDKs share (`Clients/vectors/retry.json`; PigeonJS's
/// browser test checks its `policy.js` against the same file).
@Suite struct SharedTimingsTests {
    let timings = SharedVectors.timings

    @Test func theRetryPolicyIsTheSharedOne() {
        let policy = RetryPolicy()
        #expect(policy.maxAttempts == timings.tries)
        #expect(policy.ackTimeout == .milliseconds(timings.ackTimeoutMs))
        #expect(policy.baseDelay == .milliseconds(timings.backoffBaseMs))
        #expect(policy.maxDelay == .milliseconds(timings.backoffMaxMs))
        for step in timings.backoff {
            // With the jitter at its top the delay is the full one; at its bottom, half of it.
            #expect(policy.delay(afterAttempt: step.attempt, jitter: 1) == .milliseconds(step.fullMs), "attempt \(step.attempt)")
            #expect(policy.delay(afterAttempt: step.attempt, jitter: 0) == .milliseconds(step.fullMs / 2), "attempt \(step.attempt)")
        }
    }

    @Test func theConnectionAndReceiptTimingsAreTheSharedOnes() throws {
        let configuration = PigeonClient.Configuration(
            serverURL: URL(string: "http://127.0.0.1:1")!, databasePath: "/dev/null",
            credentials: .init(userId: "u", deviceId: "d", token: "t"))
        #expect(configuration.reconnectBaseDelay == .milliseconds(timings.reconnectBaseMs))
        #expect(configuration.reconnectMaxDelay == .milliseconds(timings.reconnectMaxMs))
        #expect(configuration.receiptDelay == .milliseconds(timings.receiptDelayMs))
    }
}
