import ArgumentParser
import PigeonServer

/// `pigeon-server serve` options of ``AbuseLimits`` and the other per-user and per-address limits.
struct AbuseOptions: ParsableArguments {
    @Option(name: .customLong("registration-burst"), help: "Open registrations one client address may make at once (default 300).")
    var registrationBurst: Double?

    @Option(name: .customLong("registration-rate"), help: "Open registrations per second per client address after the burst; 0 turns the limit off (default 5).")
    var registrationRate: Double?

    @Option(name: .customLong("max-devices-per-user"), help: "Registered devices one user may have (default 10).")
    var maxDevicesPerUser: Int?

    @Option(name: .customLong("conversations-per-minute"), help: "Conversations one user may create per minute; 0 turns the limit off (default 60).")
    var conversationsPerMinute: Double?

    @Option(name: .customLong("stored-bytes-per-minute"), help: "Bytes one user may make the server store per minute; 0 turns the limit off (default 67108864).")
    var storedBytesPerMinute: Int?

    @Option(name: .customLong("max-attachment-bytes"), help: "Largest attachment upload in bytes (default 26214400, 25 MiB).")
    var maxAttachmentBytes: Int64?

    @Option(name: .customLong("attachment-quota-bytes"), help: "Bytes one user's attachments may take in storage (default 1073741824, 1 GiB).")
    var attachmentQuotaBytes: Int64?

    @Option(name: .customLong("attachment-uploads-per-minute"), help: "Attachment uploads one device may start per minute; 0 turns the limit off (default 30).")
    var attachmentUploadsPerMinute: Double?

    @Option(name: .customLong("metrics-token"), help: "Bearer token /metrics asks for (better: PIGEON_METRICS_TOKEN); without it /metrics is open.")
    var metricsToken: String?

    func apply(to configuration: inout ServerConfiguration, environment: [String: String]) throws {
        if let registrationBurst {
            guard registrationBurst >= 1 else { throw ValidationError("--registration-burst must be at least 1") }
            configuration.abuseLimits.registrationBurst = registrationBurst
        }
        if let registrationRate {
            guard registrationRate >= 0 else { throw ValidationError("--registration-rate must be 0 or more") }
            configuration.abuseLimits.registrationsPerSecond = registrationRate
        }
        if let maxDevicesPerUser {
            guard maxDevicesPerUser >= 1 else { throw ValidationError("--max-devices-per-user must be at least 1") }
            configuration.abuseLimits.maxDevicesPerUser = maxDevicesPerUser
        }
        if let conversationsPerMinute {
            guard conversationsPerMinute >= 0 else { throw ValidationError("--conversations-per-minute must be 0 or more") }
            configuration.abuseLimits.conversationsPerMinute = conversationsPerMinute
        }
        if let storedBytesPerMinute {
            guard storedBytesPerMinute >= 0 else { throw ValidationError("--stored-bytes-per-minute must be 0 or more") }
            configuration.abuseLimits.storedBytesPerMinute = storedBytesPerMinute
        }
        if let maxAttachmentBytes {
            guard maxAttachmentBytes >= 1 else { throw ValidationError("--max-attachment-bytes must be at least 1") }
            configuration.attachments.maxBytes = maxAttachmentBytes
        }
        if let attachmentQuotaBytes {
            guard attachmentQuotaBytes >= 0 else { throw ValidationError("--attachment-quota-bytes must be 0 or more") }
            configuration.attachments.quotaBytes = attachmentQuotaBytes
        }
        if let attachmentUploadsPerMinute {
            guard attachmentUploadsPerMinute >= 0 else { throw ValidationError("--attachment-uploads-per-minute must be 0 or more") }
            configuration.attachments.uploadsPerMinute = attachmentUploadsPerMinute
        }
        configuration.metricsToken = metricsToken ?? environment["PIGEON_METRICS_TOKEN"]
        if configuration.metricsToken?.isEmpty == true { throw ValidationError("the metrics token must not be empty") }
    }
}
