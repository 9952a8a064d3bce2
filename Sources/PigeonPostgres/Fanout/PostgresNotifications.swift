import Foundation
import Logging
import PigeonDomain
import PigeonProtocol
import PostgresNIO

/// What the nodes sharing one PostgreSQL store tell each other, typed: one `LISTEN` channel per deployment
/// (`pigeon_<epoch>`) carries them all, so that a node holds one pooled connection for listening, not one per kind.
/// Each notification is a wake-up or a best-effort frame: the store's tables (event log, revocations, presence) stay
/// the source, so a lost notification delays a node by at most a poll, never loses anything.
package enum NodeNotification: Sendable, Equatable {
    /// `node` committed events in `partitions` of the log: the others' tails read those partitions (``PartitionMask/all``:
    /// every partition, what an older node's notification without the mask means).
    case committed(node: String, partitions: PartitionMask = .all)
    /// `node` committed revocations: the others read them.
    case revoked(node: String)
    /// A frame that is never stored (typing), relayed to the other nodes' devices of its users.
    case frame(EphemeralFrame)
    /// The members of a conversation changed on `node`: the others forget what they cached of them.
    case membersChanged(node: String, conversationId: String)
    /// A block of `userId` was made or ended on `node`: the others forget who they cached as blocking it.
    case blocksChanged(node: String, userId: String)
    /// One change set of a node's presence (announced in the transaction that wrote it, so in commit order).
    case presence(PresenceChange)

    /// The node that sent it; a node ignores its own.
    package var node: String {
        switch self {
        case .committed(let node, _), .revoked(let node), .membersChanged(let node, _), .blocksChanged(let node, _): node
        case .frame(let frame): frame.node
        case .presence(let change): change.node
        }
    }
}

/// A frame that is pushed and never stored (typing), as relayed between nodes.
package struct EphemeralFrame: Sendable, Codable, Equatable {
    package var type: String
    package var json: String
    package var users: [String]
    /// The node that sent it.
    package var node: String

    package init(type: String, json: String, users: [String], node: String) {
        self.type = type
        self.json = json
        self.users = users
        self.node = node
    }

    package enum CodingKeys: String, CodingKey {
        case type = "t", json = "j", users = "u", node = "n"
    }
}

/// One change set of a node's presence, as announced.
package struct PresenceChange: Sendable, Codable, Equatable {
    package var node: String
    package var version: Int64
    /// The node forgot every earlier stream (it restarted).
    package var reset: Bool
    package var online: [[String]]
    package var offline: [[String]]

    package init(node: String, version: Int64, reset: Bool, online: [[String]], offline: [[String]]) {
        self.node = node
        self.version = version
        self.reset = reset
        self.online = online
        self.offline = offline
    }

    package enum CodingKeys: String, CodingKey {
        case node = "n", version = "v", reset = "r", online = "on", offline = "off"
    }
}

extension NodeNotification: Codable {
    /// `{"k": kind, …}`: short keys, a `NOTIFY` payload must stay under 8,000 bytes.
    private enum CodingKeys: String, CodingKey {
        case kind = "k", node = "n", conversationId = "c", frame = "f", presence = "p", userId = "u", partitions = "m"
    }

    private enum Kind: String, Codable {
        case committed = "c", revoked = "r", frame = "f", membersChanged = "m", presence = "p", blocksChanged = "b"
    }

    package init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        switch try container.decode(Kind.self, forKey: .kind) {
        case .committed:
            // Absent in an older node's notification: every partition.
            let bits = try container.decodeIfPresent(UInt64.self, forKey: .partitions)
            self = .committed(node: try container.decode(String.self, forKey: .node), partitions: bits.map(PartitionMask.init(bits:)) ?? .all)
        case .revoked: self = .revoked(node: try container.decode(String.self, forKey: .node))
        case .frame: self = .frame(try container.decode(EphemeralFrame.self, forKey: .frame))
        case .membersChanged:
            self = .membersChanged(
                node: try container.decode(String.self, forKey: .node), conversationId: try container.decode(String.self, forKey: .conversationId))
        case .presence: self = .presence(try container.decode(PresenceChange.self, forKey: .presence))
        case .blocksChanged:
            self = .blocksChanged(node: try container.decode(String.self, forKey: .node), userId: try container.decode(String.self, forKey: .userId))
        }
    }

    package func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        switch self {
        case .committed(let node, let partitions):
            try container.encode(Kind.committed, forKey: .kind)
            try container.encode(node, forKey: .node)
            if let bits = partitions.bits { try container.encode(bits, forKey: .partitions) }
        case .revoked(let node):
            try container.encode(Kind.revoked, forKey: .kind)
            try container.encode(node, forKey: .node)
        case .frame(let frame):
            try container.encode(Kind.frame, forKey: .kind)
            try container.encode(frame, forKey: .frame)
        case .membersChanged(let node, let conversationId):
            try container.encode(Kind.membersChanged, forKey: .kind)
            try container.encode(node, forKey: .node)
            try container.encode(conversationId, forKey: .conversationId)
        case .presence(let change):
            try container.encode(Kind.presence, forKey: .kind)
            try container.encode(change, forKey: .presence)
        case .blocksChanged(let node, let userId):
            try container.encode(Kind.blocksChanged, forKey: .kind)
            try container.encode(node, forKey: .node)
            try container.encode(userId, forKey: .userId)
        }
    }

    /// The largest payload PostgreSQL takes (8,000 bytes), less a margin.
    package static let maxPayloadBytes = 7_999

    /// The notification as a `NOTIFY` payload (keys sorted: the same bytes every time), or `nil` when it is too large
    /// to send.
    package var payload: String? {
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        guard let data = try? encoder.encode(self), data.count <= Self.maxPayloadBytes else { return nil }
        return String(decoding: data, as: UTF8.self)
    }

    /// A payload read from the channel, or `nil` for one this version does not know (a newer node's: ignored).
    package init?(payload: String) {
        guard let decoded = try? JSONDecoder().decode(Self.self, from: Data(payload.utf8)) else { return nil }
        self = decoded
    }
}

/// The nodes' one notification channel: sends a ``NodeNotification``, and listens with reconnection.
package struct PostgresNotifications: Sendable {
    package let channel: String
    private let client: PostgresClient
    private let logger: Logger

    package init(client: PostgresClient, epoch: String, logger: Logger) {
        self.channel = "pigeon_\(epoch)"
        self.client = client
        self.logger = logger
    }

    /// Sends `notification` on a pooled connection, outside any transaction, within 10 s. One too large to send is
    /// dropped with a warning (the callers keep theirs under the limit).
    package func send(_ notification: NodeNotification) async throws {
        guard let payload = notification.payload else {
            logger.warning("notification too large; not sent", metadata: ["node": "\(notification.node)"])
            return
        }
        _ = try await withDeadline(.seconds(10)) { [client, logger, channel] in
            try await client.query("SELECT pg_notify(\(channel), \(payload))", logger: logger)
        }
    }

    /// Sends `notification` in the transaction of `connection`: delivered when (and only if) it commits, in commit
    /// order with the other transactions' notifications.
    package func send(_ notification: NodeNotification, in connection: PostgresConnection) async throws {
        guard let payload = notification.payload else {
            logger.warning("notification too large; not sent", metadata: ["node": "\(notification.node)"])
            return
        }
        try await connection.query("SELECT pg_notify(\(channel), \(payload))", logger: logger)
    }

    /// Listens on the channel until cancelled, reconnecting after a lost connection: `handle` gets every notification
    /// of another node that this version knows, and `nil` after each (re)connection (notifications may have been
    /// missed meanwhile: the handler re-reads what they would have woken).
    package func listen(as nodeId: String, handle: @escaping @Sendable (NodeNotification?) -> Void) async {
        var delay = Duration.milliseconds(100)
        while !Task.isCancelled {
            do {
                try await client.withConnection { [channel] connection in
                    try await connection.listen(on: channel) { notifications in
                        handle(nil)
                        delay = .milliseconds(100)
                        for try await notification in notifications {
                            guard let decoded = NodeNotification(payload: notification.payload), decoded.node != nodeId else { continue }
                            handle(decoded)
                        }
                    }
                }
            } catch {
                if Task.isCancelled { return }
                logger.warning("LISTEN connection lost; reconnecting", metadata: ["channel": "\(channel)", "error": "\(String(reflecting: error))"])
            }
            try? await Task.sleep(for: delay)
            delay = min(.seconds(2), delay * 2)
        }
    }
}
