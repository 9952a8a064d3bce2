import ArgumentParser
import Foundation
import PigeonServer

/// `pigeon-server serve` options for browsers: the origins of ServerConfiguration.corsOrigins, and the web demo page.
struct WebOptions: ParsableArguments {
    @Option(
        name: .customLong("cors-origin"),
        help: "The origin of a web page that may call the /v1 API from a browser, like https://app.example.com, or * for any (repeatable; or PIGEON_CORS_ORIGINS, comma-separated). A WebSocket upgrade from a page of another origin is then refused. Default: no CORS.")
    var corsOrigins: [String] = []

    @Flag(
        name: .customLong("web"),
        help: "Serve the web demo page at GET / (alice and bob side by side in the browser, their ticks live; or PIGEON_WEB=1). Default: / is 404.")
    var web = false

    func apply(to configuration: inout ServerConfiguration, environment: [String: String]) throws {
        let fromEnvironment = environment["PIGEON_CORS_ORIGINS"].map { $0.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) } } ?? []
        let origins = corsOrigins.isEmpty ? fromEnvironment.filter { !$0.isEmpty } : corsOrigins
        for origin in origins where !CORSPolicy.isValidOrigin(origin) {
            throw ValidationError("--cors-origin: '\(origin)' is not an origin: give scheme://host[:port] (like https://app.example.com, no path) or *")
        }
        configuration.corsOrigins = origins
        configuration.webDemo = try web || Self.parseSwitch(environment["PIGEON_WEB"], name: "PIGEON_WEB")
    }

    /// An on/off environment variable: `1`/`true`/`yes`/`on` or `0`/`false`/`no`/`off` (any case; unset or empty: off).
    static func parseSwitch(_ text: String?, name: String) throws -> Bool {
        guard let text = text?.trimmingCharacters(in: .whitespaces).lowercased(), !text.isEmpty else { return false }
        switch text {
        case "1", "true", "yes", "on": return true
        case "0", "false", "no", "off": return false
        default: throw ValidationError("\(name) must be 1 or 0 (true/false, yes/no, on/off), not '\(text.prefix(40))'")
        }
    }
}
