import Logging
import PigeonDomain

extension PigeonCore {
    /// The webhook dispatcher of `--webhook` (nil without it), woken after each commit of this node.
    static func webhookDispatcher(
        store: any WebhookStore, configuration: ServerConfiguration, metrics: PigeonMetrics, nodeId: String, local: LocalFanout, logger: Logger
    ) -> WebhookDispatcher? {
        let app = configuration.appBackend
        guard let url = app.webhookURL, let secret = app.webhookSecret else { return nil }
        let dispatcher = WebhookDispatcher(
            store: store, url: url, secret: secret, configuration: app, metrics: WebhookMetrics(registry: metrics.registry, endpoint: url),
            nodeId: nodeId, logger: logger, clock: configuration.clock)
        local.observePublications { [weak dispatcher] in dispatcher?.committed() }
        return dispatcher
    }
}
