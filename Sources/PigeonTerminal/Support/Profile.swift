import Foundation
import PigeonKit

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// One user's device on this machine: a directory with the device credentials (`device.json`, readable by the
/// owner only: the token is a password) and PigeonKit's database (`pigeon.sqlite`). By default
/// `~/.pigeon/<userId>/`; `~/.pigeon/current` names the profile that commands use when none is given.
public struct Profile: Sendable {
    /// What `login` stores.
    public struct Device: Codable, Sendable, Equatable {
        public var serverURL: String
        public var userId: String
        public var deviceId: String
        public var token: String
        public var deviceName: String?

        var credentials: PigeonClient.Credentials { .init(userId: userId, deviceId: deviceId, token: token) }
    }

    public let directory: URL

    public init(directory: URL) {
        self.directory = directory.standardizedFileURL
    }

    var deviceFile: URL { directory.appendingPathComponent("device.json") }
    public var databasePath: String { directory.appendingPathComponent("pigeon.sqlite").path }

    /// `$PIGEON_HOME`, else `$HOME/.pigeon` (the account's home directory when `$HOME` is not set).
    public static var root: URL {
        if let home = ProcessInfo.processInfo.environment["PIGEON_HOME"], !home.isEmpty { return URL(fileURLWithPath: home) }
        // `$HOME` as the process was given it (Foundation's home directory on Linux is the account's, from the password
        // database, whatever `$HOME` says).
        if let home = ProcessInfo.processInfo.environment["HOME"], !home.isEmpty {
            return URL(fileURLWithPath: home).appendingPathComponent(".pigeon")
        }
        return FileManager.default.homeDirectoryForCurrentUser.appendingPathComponent(".pigeon")
    }

    static var currentFile: URL { root.appendingPathComponent("current") }

    /// The profile a command uses: `--profile`, else `--user` (`~/.pigeon/<user>`), else `$PIGEON_PROFILE`, else
    /// the one `~/.pigeon/current` names. Nil when none is set.
    static func selected(profile: String?, user: String?) -> Profile? {
        if let profile { return Profile(directory: URL(fileURLWithPath: profile)) }
        if let user { return Profile(directory: root.appendingPathComponent(user)) }
        if let path = ProcessInfo.processInfo.environment["PIGEON_PROFILE"], !path.isEmpty {
            return Profile(directory: URL(fileURLWithPath: path))
        }
        guard let current = try? String(contentsOf: currentFile, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines),
            !current.isEmpty
        else { return nil }
        return Profile(directory: root.appendingPathComponent(current))
    }

    /// The stored device, or nil when this profile has not logged in.
    public func device() throws -> Device? {
        guard FileManager.default.fileExists(atPath: deviceFile.path) else { return nil }
        do {
            return try JSONDecoder().decode(Device.self, from: Data(contentsOf: deviceFile))
        } catch {
            throw CLIError("the profile at \(directory.path) is damaged (\(deviceFile.lastPathComponent) cannot be read: \(error)); log in with another --profile")
        }
    }

    /// Saves the device (owner-only permissions), creating the directory.
    func save(_ device: Device) throws {
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        let data = try JSONEncoder.pretty.encode(device)
        let temporary = directory.appendingPathComponent(".device.json.tmp")
        guard FileManager.default.createFile(atPath: temporary.path, contents: data, attributes: [.posixPermissions: 0o600]) else {
            throw CLIError("cannot write \(temporary.path)")
        }
        guard rename(temporary.path, deviceFile.path) == 0 else {
            throw CLIError("cannot write \(deviceFile.path): \(String(cString: strerror(errno)))")
        }
    }

    /// Deletes the stored device (after a logout): the profile is no longer logged in.
    func forgetDevice() throws {
        guard FileManager.default.fileExists(atPath: deviceFile.path) else { return }
        try FileManager.default.removeItem(at: deviceFile)
    }

    /// Makes this the profile used when none is given (only profiles under ``root``).
    func makeCurrent() throws {
        guard directory.deletingLastPathComponent().standardizedFileURL == Self.root.standardizedFileURL else { return }
        try FileManager.default.createDirectory(at: Self.root, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        try directory.lastPathComponent.write(to: Self.currentFile, atomically: true, encoding: .utf8)
    }
}

extension JSONEncoder {
    static var pretty: JSONEncoder {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        return encoder
    }
}
