import ArgumentParser
import PigeonServer

/// `pigeon-server serve` options of ServerConfiguration.streamLimits.
struct StreamOptions: ParsableArguments {
    @Option(name: .customLong("max-streams-per-device"), help: "Open streams (WebSocket and SSE) per device on this node; a new one past it closes the oldest (default 8).")
    var maxStreamsPerDevice: Int?

    @Option(name: .customLong("stream-outbound-bytes"), help: "Bytes a stream may hold for a client that does not read; past it the client is disconnected and resumes by cursor (default 4194304).")
    var outboundBytes: Int?

    @Option(name: .customLong("stream-write-timeout-seconds"), help: "Seconds one write to a stream may take before the stream is closed (default 30).")
    var writeTimeoutSeconds: Double?

    @Option(name: .customLong("typing-rate"), help: "Typing operations per second per device; 0 turns the limit off (default 5).")
    var typingRate: Double?

    @Option(name: .customLong("typing-burst"), help: "Typing operations one device may send at once (default 10).")
    var typingBurst: Double?

    func apply(to configuration: inout ServerConfiguration, environment: [String: String]) throws {
        if let maxStreamsPerDevice {
            guard maxStreamsPerDevice >= 1 else { throw ValidationError("--max-streams-per-device must be at least 1") }
            configuration.streamLimits.maxStreamsPerDevice = maxStreamsPerDevice
        }
        if let outboundBytes {
            guard outboundBytes >= 65_536 else { throw ValidationError("--stream-outbound-bytes must be at least 65536") }
            configuration.streamLimits.outboundBytes = outboundBytes
        }
        if let writeTimeoutSeconds {
            guard writeTimeoutSeconds > 0, writeTimeoutSeconds <= 86_400 else {
                throw ValidationError("--stream-write-timeout-seconds must be more than 0 and at most 86400")
            }
            configuration.streamLimits.writeTimeout = .milliseconds(Int64(writeTimeoutSeconds * 1000))
        }
        if let typingRate {
            guard typingRate >= 0 else { throw ValidationError("--typing-rate must be 0 or more") }
            configuration.streamLimits.typingPerSecond = typingRate
        }
        if let typingBurst {
            guard typingBurst >= 1 else { throw ValidationError("--typing-burst must be at least 1") }
            configuration.streamLimits.typingBurst = typingBurst
        }
    }
}
