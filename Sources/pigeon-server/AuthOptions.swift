import ArgumentParser
import PigeonServer

/// `pigeon-server serve` options of device tokens (JWT keys and claims).
struct AuthOptions: ParsableArguments {
    @Option(name: .customLong("jwt-secret"), help: "HMAC key of your backend's device tokens (better: PIGEON_JWT_SECRET).")
    var jwtSecret: String?

    func apply(to configuration: inout ServerConfiguration, environment: [String: String]) throws {
        configuration.auth.jwtSecret = jwtSecret ?? environment["PIGEON_JWT_SECRET"]
        if configuration.auth.jwtSecret?.isEmpty == true { throw ValidationError("the JWT key must not be empty") }
    }
}
