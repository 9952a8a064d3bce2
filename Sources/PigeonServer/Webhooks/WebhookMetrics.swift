import Foundation
import Prometheus

/// The webhook dispatcher's metrics, labelled with the endpoint (`endpoint="https://backend.example/hooks"`: the URL
/// without credentials, query or fragment), in the server's registry.
final class WebhookMetrics: Sendable {
    /// Events the endpoint answered `2xx` (`pigeon_webhook_delivered_total`).
    let delivered: Counter
    /// Tries that failed and will be tried again (`pigeon_webhook_retried_total`).
    let retried: Counter
    /// Events given up after the retry window (`pigeon_webhook_dead_total`).
    let dead: Counter
    /// Events recorded and not yet delivered (`pigeon_webhook_pending`), and dead letters kept (`pigeon_webhook_dead_letters`).
    let pending: Gauge
    let deadLetters: Gauge
    /// How long the oldest pending event has waited, in seconds (`pigeon_webhook_oldest_pending_seconds`; 0: none).
    let oldestPendingSeconds: Gauge

    init(registry: PrometheusCollectorRegistry, endpoint: String) {
        let labels = [("endpoint", Self.label(endpoint))]
        func name(_ name: String, _ help: String) -> MetricNameDescriptor {
            MetricNameDescriptor(namespace: "pigeon", metricName: name, unitName: "", helpText: help)
        }
        delivered = registry.makeCounter(descriptor: name("webhook_delivered_total", "Webhook events the endpoint answered 2xx"), labels: labels)
        retried = registry.makeCounter(descriptor: name("webhook_retried_total", "Webhook tries that failed and will be tried again"), labels: labels)
        dead = registry.makeCounter(descriptor: name("webhook_dead_total", "Webhook events given up after the retry window"), labels: labels)
        pending = registry.makeGauge(descriptor: name("webhook_pending", "Webhook events recorded and not yet delivered"), labels: labels)
        deadLetters = registry.makeGauge(descriptor: name("webhook_dead_letters", "Webhook events kept as dead letters"), labels: labels)
        oldestPendingSeconds = registry.makeGauge(
            descriptor: name("webhook_oldest_pending_seconds", "Age of the oldest webhook event not yet delivered"), labels: labels)
    }

    /// The endpoint as a label: scheme, host, port and path only (no user, password or query string in the metrics).
    static func label(_ url: String) -> String {
        guard var components = URLComponents(string: url) else { return url }
        components.user = nil
        components.password = nil
        components.query = nil
        components.fragment = nil
        return components.string ?? url
    }
}
