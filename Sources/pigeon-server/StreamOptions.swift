import ArgumentParser
import PigeonServer

/// `pigeon-server serve` options of ServerConfiguration.streamLimits.
struct StreamOptions: ParsableArguments {
    func apply(to configuration: inout ServerConfiguration, environment: [String: String]) throws {
    }
}
