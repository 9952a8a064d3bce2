import NIOConcurrencyHelpers
import PigeonDomain
import Prometheus

/// The server's Prometheus metrics (rates, latencies, depths, connections), in a registry of their own so several servers can
/// live in one process (tests) without a global metrics bootstrap.
public final class PigeonMetrics: Sendable {
    public let registry = PrometheusCollectorRegistry()

    let accepted: Counter
    let duplicates: Counter
    let rejected: Counter
    let stored: Counter
    let retried: Counter
    let deadLettered: Counter
    let bufferDepth: Gauge
    /// How many buffer partitions this node processes now (`pigeon_buffer_partitions_held`; only with a partitioned
    /// buffer: Redis Streams).
    let bufferPartitionsHeld: Gauge
    let deadLetters: Gauge
    let wsStreams: Gauge
    let sseStreams: Gauge
    let processingBatch: DurationHistogram
    let acceptToStored: DurationHistogram
    let storedToDelivered: DurationHistogram
    /// Push notifications the gateway accepted (`pigeon_push_sent_total`).
    let pushSent: Counter
    /// Pushes given up: refused by the gateway for good, or still failing at the end of the retry window.
    let pushFailed: Counter
    /// Pushes whose pushkey the gateway rejected (the registration is dropped).
    let pushRejected: Counter
    /// Devices owed a push now.
    let pushPending: Gauge
    /// Attachment uploads stored, their bytes, and what the sweep erased (`pigeon_attachment_*`).
    let attachmentsUploaded: Counter
    let attachmentBytesUploaded: Counter
    let attachmentsSweptCounter: Counter
    let attachmentBytesSwept: Counter
    /// This node's counts since it started, for the operator's page (`GET /v1/admin/stats`): the same events as the
    /// Prometheus counters above, readable without rendering the registry.
    let counts = MessageCounts()
    /// Accept → stored and stored → delivered in milliseconds, for the page's recent quantiles.
    let recentAcceptToStored = LatencyHistogram()
    let recentStoredToDelivered = LatencyHistogram()
    /// `pigeon_processing_stage_seconds{stage=…}`.
    private let stages: [ProcessingStage: DurationHistogram]
    /// `pigeon_limit_hits_total{limit=...}`, one counter per limit name, made at its first hit.
    private let limitCounters = NIOLockedValueBox([String: Counter]())

    /// `pigeon_<name>` with its help text.
    private static func name(_ name: String, _ help: String) -> MetricNameDescriptor {
        MetricNameDescriptor(namespace: "pigeon", metricName: name, unitName: "", helpText: help)
    }

    public init() {
        let latencyBuckets: [Duration] = [
            .microseconds(500), .milliseconds(1), .milliseconds(2), .milliseconds(5), .milliseconds(10), .milliseconds(25),
            .milliseconds(50), .milliseconds(100), .milliseconds(250), .milliseconds(500), .seconds(1), .seconds(2.5), .seconds(5),
            .seconds(10), .seconds(30), .seconds(60),
        ]
        accepted = registry.makeCounter(descriptor: Self.name("messages_accepted_total", "Messages accepted durably into the ingest buffer"))
        duplicates = registry.makeCounter(descriptor: Self.name("messages_duplicate_total", "Resends answered with the original message"))
        rejected = registry.makeCounter(descriptor: Self.name("messages_rejected_total", "Sends refused (invalid, unauthorized, overloaded, rate limited)"))
        stored = registry.makeCounter(descriptor: Self.name("messages_stored_total", "Messages persisted with a seq"))
        retried = registry.makeCounter(descriptor: Self.name("messages_retried_total", "Processing attempts that failed and will be retried"))
        deadLettered = registry.makeCounter(descriptor: Self.name("messages_failed_total", "Messages moved to the dead-letter store"))
        bufferDepth = registry.makeGauge(descriptor: Self.name("buffer_depth", "Messages accepted and not yet processed (queue size)"))
        bufferPartitionsHeld = registry.makeGauge(
            descriptor: Self.name("buffer_partitions_held", "Ingest buffer partitions this node holds the lease of and processes"))
        deadLetters = registry.makeGauge(descriptor: Self.name("dead_letters", "Messages in the dead-letter store"))
        wsStreams = registry.makeGauge(descriptor: Self.name("open_streams", "Open event streams"), labels: [("transport", "ws")])
        sseStreams = registry.makeGauge(descriptor: Self.name("open_streams", "Open event streams"), labels: [("transport", "sse")])
        processingBatch = registry.makeDurationHistogram(descriptor: Self.name("processing_seconds", "Time to process one batch into the store"), buckets: latencyBuckets)
        acceptToStored = registry.makeDurationHistogram(descriptor: Self.name("accept_to_stored_seconds", "Latency from accept to stored"), buckets: latencyBuckets)
        storedToDelivered = registry.makeDurationHistogram(descriptor: Self.name("stored_to_delivered_seconds", "Latency from stored to the delivered receipt"), buckets: latencyBuckets)
        pushSent = registry.makeCounter(descriptor: Self.name("push_sent_total", "Push notifications the push gateway accepted"))
        pushFailed = registry.makeCounter(descriptor: Self.name("push_failed_total", "Push notifications given up (refused for good, or failing past the retry window)"))
        pushRejected = registry.makeCounter(descriptor: Self.name("push_rejected_total", "Push notifications whose pushkey the gateway rejected (registration dropped)"))
        pushPending = registry.makeGauge(descriptor: Self.name("push_pending", "Devices owed a push notification"))
        attachmentsUploaded = registry.makeCounter(descriptor: Self.name("attachment_uploads_total", "Attachment uploads stored durably"))
        attachmentBytesUploaded = registry.makeCounter(descriptor: Self.name("attachment_upload_bytes_total", "Bytes of the attachment uploads stored"))
        attachmentsSweptCounter = registry.makeCounter(
            descriptor: Self.name("attachments_erased_total", "Attachments erased: deleted with their messages, or never sent within 24 hours"))
        attachmentBytesSwept = registry.makeCounter(descriptor: Self.name("attachment_erased_bytes_total", "Stored bytes of the attachments erased"))
        let stageBuckets: [Duration] = [
            .microseconds(100), .microseconds(250), .microseconds(500), .milliseconds(1), .milliseconds(2), .milliseconds(5),
            .milliseconds(10), .milliseconds(25), .milliseconds(50), .milliseconds(100), .milliseconds(250), .seconds(1), .seconds(5),
        ]
        var stages: [ProcessingStage: DurationHistogram] = [:]
        for stage in ProcessingStage.allCases {
            stages[stage] = registry.makeDurationHistogram(
                descriptor: Self.name("processing_stage_seconds", "Time spent in each stage between accept and stored"),
                labels: [("stage", stage.rawValue)], buckets: stageBuckets)
        }
        self.stages = stages
    }

    /// A message accepted into the buffer.
    func messageAccepted() {
        accepted.increment()
        counts.accepted.add()
    }

    /// A message stored with its seq `nowMillis`, accepted at `acceptedAt` (milliseconds since the epoch).
    func messageStored(acceptedAt: Int64, nowMillis: Int64) {
        let latency = max(0, nowMillis - acceptedAt)
        stored.increment()
        counts.stored.add()
        acceptToStored.record(.milliseconds(latency))
        recentAcceptToStored.record(milliseconds: latency)
    }

    /// A message moved to the dead-letter store.
    func messageDeadLettered() {
        deadLettered.increment()
        counts.deadLettered.add()
    }

    /// A processing attempt that failed and will be retried.
    func messageRetried() {
        retried.increment()
        counts.retried.add()
    }

    /// A send refused.
    func messageRejected() {
        rejected.increment()
        counts.rejected.add()
    }

    /// A delivered receipt that moved a member's delivered watermark onto another member's message stored at
    /// `storedAt`.
    func messageDelivered(storedAt: Int64, nowMillis: Int64) {
        let latency = max(0, nowMillis - storedAt)
        counts.delivered.add()
        storedToDelivered.record(.milliseconds(latency))
        recentStoredToDelivered.record(milliseconds: latency)
    }

    /// Reports the processing stages into `pigeon_processing_stage_seconds`.
    public var stageTimer: ProcessingStageTimer {
        ProcessingStageTimer { [stages] stage, duration in stages[stage]?.record(duration) }
    }

    /// Counts one request, connection or stream refused or closed by the limit `name` (docs/SECURITY.md lists
    /// the names): `pigeon_limit_hits_total{limit="<name>"}`.
    func attachmentUploaded(bytes: Int64) {
        attachmentsUploaded.increment()
        attachmentBytesUploaded.increment(by: bytes)
    }

    func attachmentsSwept(count: Int, bytes: Int64) {
        attachmentsSweptCounter.increment(by: Int64(count))
        attachmentBytesSwept.increment(by: bytes)
    }

    public func limitHit(_ name: String) {
        let counter = limitCounters.withLockedValue { counters -> Counter in
            if let counter = counters[name] { return counter }
            let counter = registry.makeCounter(
                descriptor: Self.name("limit_hits_total", "Requests, connections and streams refused or closed by a limit"),
                labels: [("limit", name)])
            counters[name] = counter
            return counter
        }
        counter.increment()
    }
}

/// How many messages this node accepted, stored, saw delivered, dead-lettered, retried and refused since it started.
final class MessageCounts: Sendable {
    let accepted = RelaxedCounter()
    let stored = RelaxedCounter()
    let delivered = RelaxedCounter()
    let deadLettered = RelaxedCounter()
    let retried = RelaxedCounter()
    let rejected = RelaxedCounter()
}
