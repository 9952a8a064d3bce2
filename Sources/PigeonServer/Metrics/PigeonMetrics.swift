import Prometheus

/// The server's Prometheus metrics (seed 000's list), in a registry of their own so several servers can
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
    let deadLetters: Gauge
    let wsStreams: Gauge
    let sseStreams: Gauge
    let processingBatch: DurationHistogram
    let acceptToStored: DurationHistogram
    let storedToDelivered: DurationHistogram

    public init() {
        let latencyBuckets: [Duration] = [
            .microseconds(500), .milliseconds(1), .milliseconds(2), .milliseconds(5), .milliseconds(10), .milliseconds(25),
            .milliseconds(50), .milliseconds(100), .milliseconds(250), .milliseconds(500), .seconds(1), .seconds(2.5), .seconds(5),
            .seconds(10), .seconds(30), .seconds(60),
        ]
        accepted = registry.makeCounter(name: "pigeon_messages_accepted_total", help: "Messages accepted durably into the ingest buffer")
        duplicates = registry.makeCounter(name: "pigeon_messages_duplicate_total", help: "Resends answered with the original message")
        rejected = registry.makeCounter(name: "pigeon_messages_rejected_total", help: "Sends refused (invalid, unauthorized, overloaded, rate limited)")
        stored = registry.makeCounter(name: "pigeon_messages_stored_total", help: "Messages persisted with a seq")
        retried = registry.makeCounter(name: "pigeon_messages_retried_total", help: "Processing attempts that failed and will be retried")
        deadLettered = registry.makeCounter(name: "pigeon_messages_failed_total", help: "Messages moved to the dead-letter store")
        bufferDepth = registry.makeGauge(name: "pigeon_buffer_depth", help: "Messages accepted and not yet processed (queue size)")
        deadLetters = registry.makeGauge(name: "pigeon_dead_letters", help: "Messages in the dead-letter store")
        wsStreams = registry.makeGauge(name: "pigeon_open_streams", labels: [("transport", "ws")], help: "Open event streams")
        sseStreams = registry.makeGauge(name: "pigeon_open_streams", labels: [("transport", "sse")], help: "Open event streams")
        processingBatch = registry.makeDurationHistogram(
            name: "pigeon_processing_seconds", buckets: latencyBuckets, help: "Time to process one batch into the store")
        acceptToStored = registry.makeDurationHistogram(
            name: "pigeon_accept_to_stored_seconds", buckets: latencyBuckets, help: "Latency from accept to stored")
        storedToDelivered = registry.makeDurationHistogram(
            name: "pigeon_stored_to_delivered_seconds", buckets: latencyBuckets, help: "Latency from stored to the delivered receipt")
    }
}
