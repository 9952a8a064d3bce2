import Foundation
import NIOFoundationCompat
import PigeonProtocol

extension PigeonThroughput {
    /// Sends over `POST /v1/conversations/{id}/messages`: each sender has one request in flight on its own keep-alive
    /// HTTP/1.1 connection; counts accepted answers (202) per second.
    func overHTTP() async throws -> ThroughputResult {
        let body = settings.messageBody
        return try await measure(inFlightWindow: nil) { pair, api, window, tally in
            let encoder = JSONEncoder()
            var answers = ConnectionAnswers()
            while ContinuousClock.now < window.end {
                let request = try encoder.encodeAsByteBuffer(SendMessageRequest.benchmark(body: body), allocator: .init())
                let outcome = try await api.sendMessage(request, conversationId: pair.conversationId, token: pair.sender.token)
                switch outcome {
                case .accepted:
                    answers.accepted += 1
                    tally.recordAccepted(at: .now)
                case .refused(let code):
                    tally.recordError(code)
                }
            }
            return answers
        }
    }
}
