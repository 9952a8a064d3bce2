import Foundation
import PigeonKit
import PigeonProtocol

/// An error `pigeon` reports as one clear line on stderr ("pigeon: …") with its exit status; never a stack trace.
public struct CLIError: Error, CustomStringConvertible, Equatable {
    /// Exit statuses: 1 an error, 64 a usage error (from the argument parser), 75 (`EX_TEMPFAIL`) not finished in
    /// time: what was asked is saved and the next run carries on.
    public enum Status: Int32, Sendable {
        case failure = 1
        case notYet = 75
    }

    public var message: String
    public var status: Status

    public init(_ message: String, status: Status = .failure) {
        self.message = message
        self.status = status
    }

    public var description: String { message }

    /// The gist of a network error's text (NIO's are long).
    static func networkReason(_ message: String) -> String {
        let lowered = message.lowercased()
        if lowered.contains("connection refused") { return "connection refused" }
        if lowered.contains("timed out") || lowered.contains("timeout") { return "no answer in time" }
        if lowered.contains("connection reset") { return "connection reset" }
        if lowered.contains("name or service not known") || lowered.contains("could not resolve") { return "unknown host" }
        return message
    }

    /// What to do once the server no longer accepts a device's token (revoked from another device): the one advice every
    /// command gives. The old profile keeps the revoked device (and its unsent messages), so the new device needs a
    /// profile of its own, and, as a further device of the user, proof from a profile still signed in.
    static func signInAgain(userId: String?) -> String {
        let user = userId ?? "<userId>"
        return "to sign in again, log in a new device in a new profile: `pigeon login \(user) --profile <new directory> "
            + "--from-profile <a profile of \(user) still signed in>` (without --from-profile if \(user) has no device left)"
    }

    /// What a PigeonKit or network error means to someone at a terminal, and what to do about it.
    static func from(_ error: any Error, server: String) -> CLIError {
        if let error = error as? CLIError { return error }
        guard let error = error as? PigeonClientError else { return CLIError("\(error)") }
        switch error.code {
        case .network, .webSocketRefused:
            return CLIError("cannot reach the Pigeon server at \(server) (\(networkReason(error.message))); is it running? (`pigeon-server serve`, or pass --server URL)")
        case .timeout:
            return CLIError(error.message, status: .notYet)
        case .server:
            if error.httpStatus == 401 {
                return CLIError("the server at \(server) does not accept this device's token (\(error.message)); \(signInAgain(userId: nil))")
            }
            if error.serverError?.code == .notFound {
                return CLIError("the server says: \(error.message)")
            }
            return CLIError("the server at \(server) refused: \(error.message)")
        case .unknownConversation:
            return CLIError("\(error.message); `pigeon ls` lists this device's conversations")
        case .wrongDatabase:
            return CLIError("\(error.message); use another --profile for another user")
        default:
            return CLIError(error.message)
        }
    }
}
