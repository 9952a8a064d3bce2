import ArgumentParser
import PigeonServer

/// `pigeon-server serve` options of ServerConfiguration.push.
struct PushOptions: ParsableArguments {
    @Option(name: .customLong("push-gateway"), help: "Matrix push gateway (Sygnal or compatible) base URL, or its /_matrix/push/v1/notify URL (also PIGEON_PUSH_GATEWAY); without it no push is sent.")
    var gateway: String?

    @Flag(name: .customLong("push-include-body"), help: "Put the message body in push notifications (default: the body never leaves the server).")
    var includeBody = false

    @Option(name: .customLong("push-timeout-seconds"), help: "Seconds one request to the push gateway may take before it is retried (default 10).")
    var timeoutSeconds: Double?

    @Option(name: .customLong("push-retry-minutes"), help: "Minutes a push is retried after timeouts and 5xx answers before it is given up (default 10).")
    var retryMinutes: Double?

    func apply(to configuration: inout ServerConfiguration, environment: [String: String]) throws {
        configuration.push.gatewayURL = gateway ?? environment["PIGEON_PUSH_GATEWAY"].flatMap { $0.isEmpty ? nil : $0 }
        configuration.push.includeBody = includeBody
        if let timeoutSeconds {
            guard timeoutSeconds > 0, timeoutSeconds <= 300 else { throw ValidationError("--push-timeout-seconds must be more than 0 and at most 300") }
            configuration.push.requestTimeout = .milliseconds(Int64(timeoutSeconds * 1000))
        }
        if let retryMinutes {
            guard retryMinutes >= 0, retryMinutes <= 1440 else { throw ValidationError("--push-retry-minutes must be 0 to 1440") }
            configuration.push.retryWindow = .milliseconds(Int64(retryMinutes * 60_000))
        }
        if let problem = configuration.push.problem { throw ValidationError(problem) }
    }
}
