import ArgumentParser
import Foundation
import PigeonDomain
import PigeonServer

/// `--encryption-key-file`: encryption at rest of the store's bodies, payloads, push data and attachment bytes
/// (SECURITY.md, "Encryption at rest"). Shared by `serve` and `rekey`.
struct AtRestOptions: ParsableArguments {
    @Option(
        name: .customLong("encryption-key-file"),
        help: "Encrypt message bodies, payloads, push data and attachment bytes at rest with this key: 32 raw bytes, or a key ring of id:base64key lines, newest last (or PIGEON_ENCRYPTION_KEY_FILE). See SECURITY.md.")
    var encryptionKeyFile: String?

    /// The key ring named by the flag or the environment; ``AtRestCipher/off`` when neither names one.
    func cipher(environment: [String: String]) throws -> AtRestCipher {
        guard let path = encryptionKeyFile ?? environment["PIGEON_ENCRYPTION_KEY_FILE"].flatMap({ $0.isEmpty ? nil : $0 }) else {
            return .off
        }
        return try AtRestCipher.load(path: path)
    }

    func apply(to configuration: inout ServerConfiguration, environment: [String: String]) throws {
        configuration.atRest = try cipher(environment: environment)
    }
}
