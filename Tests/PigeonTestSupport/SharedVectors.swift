import Foundation

/// The rules both SDKs share, as data (`Clients/vectors/*.json`): PigeonKit's tests, the server's and PigeonJS's
/// browser tests read the same cases, so a rule changed in one SDK fails the other's tests.
public enum SharedVectors {
    /// The status machine: each status's next status for each evidence (`nil`: no change).
    public struct StatusTable: Decodable, Sendable {
        public var statuses: [String]
        public var evidence: [String]
        public var afterLocalFailure: [String: [String?]]
        public var serverFailed: [String?]

        /// The status after `evidence` from `status` (`failureIsLocal` only matters for `failed`); `nil`: no change.
        public func next(_ status: String, _ evidence: String, failureIsLocal: Bool) -> String? {
            guard let column = self.evidence.firstIndex(of: evidence) else { return nil }
            if status == "failed" && !failureIsLocal { return serverFailed[column] }
            return afterLocalFailure[status]?[column] ?? nil
        }
    }

    /// Reaction keys the server takes, refuses, and the one form it stores each in.
    public struct ReactionKeys: Decodable, Sendable {
        public struct Canonical: Decodable, Sendable {
            public var given: String
            public var canonical: String
        }
        public var valid: [String]
        public var invalid: [String]
        public var canonical: [Canonical]
    }

    /// The outbox's retry policy and the SDKs' timings.
    public struct Timings: Decodable, Sendable {
        public struct Backoff: Decodable, Sendable {
            public var attempt: Int
            public var fullMs: Int
        }
        public var ackTimeoutMs: Int
        public var tries: Int
        public var backoffBaseMs: Int
        public var backoffMaxMs: Int
        public var reconnectBaseMs: Int
        public var reconnectMaxMs: Int
        public var receiptDelayMs: Int
        public var backoff: [Backoff]
    }

    public static let status: StatusTable = load("status.json")
    public static let reactionKeys: ReactionKeys = load("reaction-keys.json")
    public static let timings: Timings = load("retry.json")

    /// The repository's `Clients/vectors` folder (this file is `Tests/PigeonTestSupport/SharedVectors.swift`).
    public static let directory = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("Clients/vectors")

    private static func load<T: Decodable>(_ name: String) -> T {
        let url = directory.appendingPathComponent(name)
        do {
            return try JSONDecoder().decode(T.self, from: try Data(contentsOf: url))
        } catch {
            fatalError("the shared test vectors \(url.path) cannot be read: \(error)")
        }
    }
}
