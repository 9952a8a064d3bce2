import Foundation
import Logging
import PigeonKit
import PigeonProtocol

/// A logged-in profile's ``PigeonClient``, opened for one command.
struct DeviceSession: Sendable {
    let profile: Profile
    let device: Profile.Device
    let serverURL: URL
    let client: PigeonClient

    var server: String { serverURL.absoluteString }

    init(_ options: GlobalOptions, configure: (inout PigeonClient.Configuration) -> Void = { _ in }) throws {
        (profile, device) = try options.loggedInProfile()
        serverURL = try options.serverURL(stored: device.serverURL)
        var configuration = PigeonClient.Configuration(serverURL: serverURL, databasePath: profile.databasePath, credentials: device.credentials)
        configuration.connectTimeout = .seconds(5)
        configuration.requestTimeout = .seconds(15)
        configuration.logger = Logger(label: "pigeon")
        configure(&configuration)
        do {
            client = try PigeonClient(configuration: configuration)
        } catch {
            throw CLIError.from(error, server: serverURL.absoluteString)
        }
        if let recovery = client.localDatabaseRecovery {
            let lost = recovery.lostOutboxItems.map { "\($0) unsent message\($0 == 1 ? "" : "s") lost" } ?? "unsent messages may be lost"
            printWarning("the local database was damaged (\(recovery.reason)); moved to \(recovery.movedTo), rebuilt from the server; \(recovery.recoveredOutboxItems) unsent message(s) kept, \(lost)")
        }
    }

    /// Runs `body` with the client connected (started before, stopped after, also on errors).
    func online<T: Sendable>(_ body: () async throws -> T) async throws -> T {
        client.start()
        do {
            let result = try await body()
            await client.stop()
            return result
        } catch {
            await client.stop()
            throw CLIError.from(error, server: server)
        }
    }

    /// Waits until the client is online; fails at the first failed connection attempt (no server, a refused
    /// token) instead of retrying until `timeout`.
    func connected(timeout: Duration) async throws {
        let deadline = ContinuousClock.now + timeout
        while client.connectionState != .online {
            if let error = client.lastConnectionError { throw error }
            guard ContinuousClock.now < deadline else {
                throw CLIError("could not connect to \(server) within \(timeout)", status: .notYet)
            }
            try await Task.sleep(for: .milliseconds(10))
        }
    }

    /// Connects (failing fast), then ``PigeonClient/sync(timeout:)`` within what is left of `timeout`.
    func sync(timeout: Duration) async throws -> SyncReport {
        let start = ContinuousClock.now
        try await connected(timeout: timeout)
        return try await client.sync(timeout: max(.milliseconds(100), timeout - (ContinuousClock.now - start)))
    }

    /// The conversation `argument` names: its id (any case) or a unique prefix of one (4 characters or more) on
    /// this device. When it is not here and `fetch` is set, the conversation list is fetched from the server first.
    func conversation(_ argument: String, fetch: Bool) async throws -> PigeonConversation {
        if let found = try localConversation(argument) { return found }
        if fetch {
            do {
                try await client.catchUp()
            } catch {
                let reason = CLIError.from(error, server: server).message
                throw CLIError("no conversation \"\(argument)\" on this device, and the server could not be asked: \(reason)")
            }
            if let found = try localConversation(argument) { return found }
        }
        throw CLIError("no conversation \"\(argument)\" for \(device.userId)\(fetch ? " (here or on the server)" : " on this device"); `pigeon ls` lists them")
    }

    /// The invitation `argument` names (an id or a unique prefix of 4+ characters), as ``conversation(_:fetch:)``
    /// finds a conversation; with `fetch`, the server is asked first when it is not on this device.
    func invitation(_ argument: String, fetch: Bool) async throws -> PigeonConversation {
        if let found = try localConversation(argument, among: client.invitations()) { return found }
        if fetch {
            do {
                try await client.catchUp()
            } catch {
                let reason = CLIError.from(error, server: server).message
                throw CLIError("no invitation \"\(argument)\" on this device, and the server could not be asked: \(reason)")
            }
            if let found = try localConversation(argument, among: client.invitations()) { return found }
        }
        if let joined = try localConversation(argument, among: client.conversations()) {
            throw CLIError("\(MessageFormat.title(of: joined, me: device.userId)) (\(joined.id)) is not an invitation: you are \(joined.isMember ? "in it already" : "no longer in it")")
        }
        throw CLIError("no invitation \"\(argument)\" for \(device.userId); `pigeon invites` lists them")
    }

    private func localConversation(_ argument: String, among all: [PigeonConversation]? = nil) throws -> PigeonConversation? {
        let all = try all ?? client.conversations()
        if let id = Validation.canonicalUUID(argument) { return all.first { $0.id == id } }
        let prefix = argument.lowercased()
        guard prefix.count >= 4, prefix.allSatisfy({ $0.isHexDigit || $0 == "-" }) else {
            throw CLIError("\"\(argument)\" is not a conversation id (a UUID, or its first 4+ characters)")
        }
        let matches = all.filter { $0.id.hasPrefix(prefix) }
        guard matches.count <= 1 else {
            throw CLIError("\"\(argument)\" matches \(matches.count) conversations (\(matches.map(\.id).joined(separator: ", "))); give more of the id")
        }
        return matches.first
    }
}
