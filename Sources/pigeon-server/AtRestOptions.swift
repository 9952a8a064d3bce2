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

    @Flag(
        name: .customLong("allow-insecure-key-file"),
        help: "Use an encryption key file that other users can read or write (refused otherwise, as OpenSSH refuses such a private key).")
    var allowInsecureKeyFile = false

    /// The key ring named by the flag or the environment; ``AtRestCipher/off`` when neither names one. A key file that
    /// its group or others may read or write is refused unless `--allow-insecure-key-file`: whoever can read it reads
    /// every sealed value, whoever can write it can make the server seal under a key of theirs.
    func cipher(environment: [String: String]) throws -> AtRestCipher {
        guard let path = encryptionKeyFile ?? environment["PIGEON_ENCRYPTION_KEY_FILE"].flatMap({ $0.isEmpty ? nil : $0 }) else {
            return .off
        }
        if !allowInsecureKeyFile, let problem = KeyFilePermissions.problem(path: path) { throw ValidationError(problem) }
        return try AtRestCipher.load(path: path)
    }

    func apply(to configuration: inout ServerConfiguration, environment: [String: String]) throws {
        configuration.atRest = try cipher(environment: environment)
    }
}

/// The check of a secret key file's permissions.
enum KeyFilePermissions {
    /// Why the file at `path` is not private to its owner (`nil` when it is, or when it cannot be read: loading it
    /// says that).
    static func problem(path: String) -> String? {
        var info = stat()
        guard stat(path, &info) == 0 else { return nil }
        let mode = info.st_mode & 0o777
        guard mode & 0o077 != 0 else { return nil }
        return "the encryption key file \(path) is accessible by others (mode \(String(mode, radix: 8))): chmod 600 it, "
            + "or pass --allow-insecure-key-file"
    }
}
