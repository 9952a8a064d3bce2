import ArgumentParser
import PigeonServer

/// `pigeon-server serve` options of ServerConfiguration.abuseLimits.
struct AbuseOptions: ParsableArguments {
    func apply(to configuration: inout ServerConfiguration, environment: [String: String]) throws {
    }
}
