import PigeonBenchSupport
import PigeonProtocol

/// The latency scenario: paced sends at a total rate over `settings.connections` sender WebSockets, each sender's
/// conversation partner connected on a WebSocket of its own. Measures send → `message.new` at the receiver and
/// send → ✓✓ at the sender; the receiver answers every `message.new` with a delivered receipt up to its seq, as a
/// client SDK would. With several nodes the senders alternate between them and each receiver is on the next node
/// after its sender's (see ``PigeonDeployment/partnerNode(forConnection:)``), so messages and receipts cross nodes.
struct PigeonLatency {
    let deployment: PigeonDeployment
    let settings: BenchSettings
    /// Prefix of the user ids the run registers.
    let namePrefix: String

    func measure(rate: Int) async throws -> LatencyResult {
        let pairs = try await deployment.setupAPI.makePairs(count: settings.connections, prefix: "\(namePrefix)\(rate)", offlinePushMembers: settings.offlinePushMembers)
        let toReceiver = LatencyRecorder()
        let toDelivered = LatencyRecorder()
        let trackers = pairs.map { _ in DeliveryTracker(toReceiver: toReceiver, toDelivered: toDelivered) }
        let window = MeasurementWindow(warmup: settings.warmup, duration: settings.duration)
        let run = PacedLatencyRun(rate: rate, window: window, grace: settings.grace, trackers: trackers)
        let senderURLs = pairs.indices.map { deployment.node(forConnection: $0).baseURL }
        let receiverURLs = pairs.indices.map { deployment.partnerNode(forConnection: $0).baseURL }
        let body = settings.messageBody
        let (progress, load) = try await LoadMonitor.measure(servers: deployment.pids, services: deployment.services, window: window) {
            try await run.run(
                receiver: { index, ready in
                    try await Self.receive(pairs[index], tracker: trackers[index], baseURL: receiverURLs[index], ready: ready)
                },
                sender: { index, schedule in
                    try await Self.send(
                        pairs[index],
                        tracker: trackers[index],
                        baseURL: senderURLs[index],
                        body: body,
                        schedule: schedule,
                        window: window
                    )
                }
            )
        }
        return LatencyResult(
            rate: rate,
            measuredSeconds: window.seconds,
            progress: progress,
            toReceiver: toReceiver.summary,
            toDelivered: toDelivered.summary,
            load: load
        )
    }

    /// The receiver: notes every `message.new` of its conversation and acknowledges it as delivered (a refused
    /// receipt counts as an error of the run).
    private static func receive(_ pair: ConversationPair, tracker: DeliveryTracker, baseURL: String, ready: Counter) async throws {
        try await PigeonWebSocket(baseURL: baseURL, token: pair.receiver.token).run { frames, writer in
            ready.increment()
            for try await frame in frames {
                switch frame {
                case .event(.messageNew(_, let message)) where message.conversationId == pair.conversationId:
                    tracker.received(message.clientMessageId, at: .now)
                    let receipt = ReceiptRequest(kind: .delivered, upToSeq: message.seq)
                    try await writer.send(.receipt(conversationId: pair.conversationId, receipt))
                case .error(let error):
                    tracker.refused(nil, code: "receipt \(error.error.code)")
                case .ack, .event:
                    continue
                }
            }
        }
    }

    /// The sender: writes a `send` at every instant of `schedule` while following its messages' seqs and the
    /// receiver's receipts on the same stream.
    private static func send(
        _ pair: ConversationPair,
        tracker: DeliveryTracker,
        baseURL: String,
        body: String,
        schedule: PacedSchedule,
        window: MeasurementWindow
    ) async throws {
        try await PigeonWebSocket(baseURL: baseURL, token: pair.sender.token).run { frames, writer in
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask {
                    for instant in schedule {
                        try await Task.sleep(until: instant)
                        let request = SendMessageRequest.benchmark(body: body)
                        let now = ContinuousClock.now
                        tracker.sent(request.clientMessageId, at: now, measured: window.contains(now))
                        try await writer.send(.send(conversationId: pair.conversationId, request))
                    }
                }
                for try await frame in frames {
                    let now = ContinuousClock.now
                    switch frame {
                    case .error(let error):
                        tracker.refused(error.clientMessageId, code: error.error.code.rawValue)
                    case .event(.messageStored(_, let stored)):
                        tracker.stored(stored.clientMessageId, seq: stored.seq, at: now)
                    case .event(.messageFailed(_, let failed)):
                        tracker.refused(failed.clientMessageId, code: "message.failed \(failed.error.code)")
                    case .event(.receipt(_, let receipt))
                    where receipt.conversationId == pair.conversationId && receipt.userId == pair.receiver.userId:
                        tracker.delivered(upTo: receipt.upToSeq, at: now)
                    case .ack, .event:
                        continue
                    }
                }
                try await group.waitForAll()
            }
        }
    }
}
