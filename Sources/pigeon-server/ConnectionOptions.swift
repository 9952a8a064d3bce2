import ArgumentParser
import PigeonServer

/// `pigeon-server serve` options of ServerConfiguration.connectionLimits.
struct ConnectionOptions: ParsableArguments {
    func apply(to configuration: inout ServerConfiguration, environment: [String: String]) throws {
    }
}
