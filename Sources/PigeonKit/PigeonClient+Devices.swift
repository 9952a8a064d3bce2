import Foundation
import PigeonProtocol

extension PigeonClient {
    // MARK: Devices (network)

    /// The user's devices on the server (registered, or seen through a JWT), oldest first; ``DeviceInfo/current`` marks
    /// this one. `lastSeenAt` is written by the server at most about once a minute. Needs the network.
    public func devices() async throws -> [DeviceInfo] {
        try await accountTransport.devices()
    }

    /// Revokes one of the user's devices (``deviceId`` included: that is ``logout(wipeLocalData:)`` without its local
    /// part). At once the device's token is refused everywhere and its open streams close; its client reports
    /// ``PigeonEvent/signedOut(_:)`` and stops. Messages it sent stay. Throws the server's `not_found` for a device
    /// the user does not have (another user's, unknown, or revoked already). Needs the network.
    public func revokeDevice(_ deviceId: String) async throws {
        try await accountTransport.revokeDevice(deviceId)
    }

    /// Signs this device out: revokes it on the server, stops the client (what ``start()`` started; a caller that
    /// runs ``run()`` itself ends it), which reports ``ConnectionState/signedOut``, and with `wipeLocalData` deletes
    /// the local database (and its `-wal` and `-shm` files), unsent messages included, and the attachments' files
    /// beside it (this device's copies and the download cache). The client cannot be used afterwards.
    ///
    /// A token the server already refuses (revoked elsewhere) counts as signed out. Any other failure to reach the
    /// server throws, and then nothing changed: the device is still signed in and its data is kept.
    public func logout(wipeLocalData: Bool) async throws {
        do {
            try await accountTransport.revokeDevice(deviceId)
        } catch let error as PigeonClientError where error.refusesToken {
            configuration.logger.debug("logout: the token was already refused", metadata: ["error": "\(error)"])
        }
        engine.signOut(PigeonClientError(.closed, "this device signed out"))
        await stop()
        guard wipeLocalData else { return }
        store.close()
        for suffix in ["", "-wal", "-shm"] {
            let path = configuration.databasePath + suffix
            guard FileManager.default.fileExists(atPath: path) else { continue }
            do {
                try FileManager.default.removeItem(atPath: path)
            } catch {
                throw PigeonClientError(.localDatabase, "the device signed out, but \(path) could not be deleted: \(error)")
            }
        }
        let attachments = store.files.root
        guard FileManager.default.fileExists(atPath: attachments.path) else { return }
        do {
            try FileManager.default.removeItem(at: attachments)
        } catch {
            throw PigeonClientError(.localDatabase, "the device signed out, but \(attachments.path) could not be deleted: \(error)")
        }
    }

    /// The REST client of the account calls (the transport the client was opened with may be a test's fault injector).
    var accountTransport: HTTPTransport {
        HTTPTransport(
            baseURL: configuration.serverURL, token: configuration.credentials.token, requestTimeout: configuration.requestTimeout,
            connectTimeout: configuration.connectTimeout, liveness: configuration.livenessInterval, logger: configuration.logger,
            trustedCertificates: configuration.trustedCertificates)
    }
}
