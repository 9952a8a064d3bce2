import PigeonProtocol

extension PigeonThroughput {
    /// Pipelined sends over WebSockets: each sender device keeps `settings.window` `send` operations in flight on its
    /// own stream, sending the next one whenever an `ack` or `error` answers one; counts acks per second.
    func overWebSocket() async throws -> ThroughputResult {
        try await measure(inFlightWindow: settings.window, sender: Self.pipelinedWebSocketSender(depth: settings.window, body: settings.messageBody))
    }

    /// One sender of the pipelined WebSocket load: it opens the sender device's stream on the node of `api`, keeps
    /// `depth` sends of `body` in flight until the window ends, records every answer in the tally, then waits for
    /// its outstanding answers (or until its task is cancelled) and returns what it got.
    static func pipelinedWebSocketSender(
        depth: Int,
        body: String
    ) -> @Sendable (ConversationPair, PigeonAPI, MeasurementWindow, ThroughputTally) async throws -> ConnectionAnswers {
        { pair, api, window, tally in
            try await PigeonWebSocket(baseURL: api.baseURL, token: pair.sender.token).run { frames, writer in
                var answers = ConnectionAnswers()
                var inFlight = 0
                func sendNext() async throws {
                    try await writer.send(.send(conversationId: pair.conversationId, .benchmark(body: body)))
                    inFlight += 1
                }
                for _ in 0..<depth {
                    try await sendNext()
                }
                for try await frame in frames {
                    let now = ContinuousClock.now
                    switch frame {
                    case .ack:
                        answers.accepted += 1
                        tally.recordAccepted(at: now)
                    case .error(let error):
                        tally.recordError(error.error.code.rawValue)
                    case .event:
                        continue
                    }
                    inFlight -= 1
                    if now < window.end {
                        try await sendNext()
                    } else if inFlight == 0 {
                        break
                    }
                }
                answers.unanswered = inFlight
                return answers
            }
        }
    }
}
