import ArgumentParser
import Foundation
import PigeonServer

/// `pigeon-server serve` options for browsers: the origins of ServerConfiguration.corsOrigins.
struct WebOptions: ParsableArguments {
    @Option(
        name: .customLong("cors-origin"),
        help: "The origin of a web page that may call the /v1 API from a browser, like https://app.example.com, or * for any (repeatable; or PIGEON_CORS_ORIGINS, comma-separated). A WebSocket upgrade from a page of another origin is then refused. Default: no CORS.")
    var corsOrigins: [String] = []

    func apply(to configuration: inout ServerConfiguration, environment: [String: String]) throws {
        let fromEnvironment = environment["PIGEON_CORS_ORIGINS"].map { $0.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) } } ?? []
        let origins = corsOrigins.isEmpty ? fromEnvironment.filter { !$0.isEmpty } : corsOrigins
        for origin in origins where !CORSPolicy.isValidOrigin(origin) {
            throw ValidationError("--cors-origin: '\(origin)' is not an origin: give scheme://host[:port] (like https://app.example.com, no path) or *")
        }
        configuration.corsOrigins = origins
    }
}
