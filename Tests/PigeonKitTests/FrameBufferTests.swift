import NIOConcurrencyHelpers
@testable import PigeonKit
import PigeonProtocol
import PigeonTestSupport
import Testing

/// The buffer between a connection's reader and the sync engine is bounded: a reader that runs ahead (a resumed
/// stream replaying thousands of events) waits, so the connection's back-pressure reaches the server instead of every
/// decoded event piling up in the device's memory.
@Suite(.timeLimit(.minutes(1)))
struct FrameBufferTests {
    private func frame(_ index: Int) -> ServerFrame {
        .error(ErrorFrame(clientMessageId: "m\(index)", error: ErrorDetail(code: .invalidRequest, message: "\(index)")))
    }

    @Test func aReaderPastTheCapacityWaitsUntilTheConsumerTakesABatch() async throws {
        let buffer = FrameBuffer(capacity: 3)
        let appended = NIOLockedValueBox(0)
        let reader = Task {
            for index in 0..<10 {
                await buffer.append(frame(index))
                appended.withLockedValue { $0 += 1 }
            }
        }
        try await waitUntil("the reader filled the buffer") { appended.withLockedValue { $0 } == 2 }
        try await Task.sleep(for: .milliseconds(200))
        // It used to take every frame at once (unbounded).
        #expect(appended.withLockedValue { $0 } == 2, "the third append waits for room")
        var received: [ServerFrame] = []
        while received.count < 10, let batch = try await buffer.nextBatch() {
            #expect(batch.count <= 3)
            received += batch
        }
        #expect(received == (0..<10).map(frame), "every frame once, in order")
        await reader.value
    }

    @Test func finishingReleasesAWaitingReader() async throws {
        let buffer = FrameBuffer(capacity: 1)
        let reader = Task {
            await buffer.append(frame(0))
            await buffer.append(frame(1))
        }
        try await Task.sleep(for: .milliseconds(100))
        buffer.finish()
        await reader.value
        #expect(try await buffer.nextBatch() == [frame(0)], "what was buffered before the end is still read")
        #expect(try await buffer.nextBatch() == nil)
    }
}
