import Logging
import Synchronization

/// The in-process server's log output: standard error, warnings and worse, until ``silence()`` once every figure is
/// printed (whatever the server says while it shuts down is no part of the measurements).
struct ServerLogHandler: LogHandler {
    private static let silenced = Atomic<Bool>(false)

    static func silence() {
        silenced.store(true, ordering: .relaxed)
    }

    private var base: StreamLogHandler

    init(label: String) {
        base = StreamLogHandler.standardError(label: label)
        base.logLevel = .warning
    }

    var logLevel: Logger.Level {
        get { base.logLevel }
        set { base.logLevel = newValue }
    }

    var metadata: Logger.Metadata {
        get { base.metadata }
        set { base.metadata = newValue }
    }

    var metadataProvider: Logger.MetadataProvider? {
        get { base.metadataProvider }
        set { base.metadataProvider = newValue }
    }

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { base[metadataKey: key] }
        set { base[metadataKey: key] = newValue }
    }

    func log(event: LogEvent) {
        guard !Self.silenced.load(ordering: .relaxed) else { return }
        base.log(event: event)
    }
}
