import Foundation
import Logging
import NIOConcurrencyHelpers
import PigeonDomain
import PigeonProtocol

/// Frames that are never stored (typing) relayed between nodes, best effort, and membership changes announced so that
/// the other nodes forget what they cached of a conversation's members.
final class PostgresFrames: Sendable {
    private let local: LocalFanout
    private let notifications: PostgresNotifications
    private let nodeId: String
    private let logger: Logger
    private let outbox: AsyncStream<EphemeralFrame>.Continuation
    private let queue: AsyncStream<EphemeralFrame>
    /// What runs when another node announces a membership change (``announceMembersChange(_:)``).
    private let membersChanged = NIOLockedValueBox<Callback<String>?>(nil)
    /// What runs when another node announces a block change (``announceBlocksChange(_:)``).
    private let blocksChanged = NIOLockedValueBox<Callback<String>?>(nil)

    init(local: LocalFanout, notifications: PostgresNotifications, nodeId: String, logger: Logger) {
        self.local = local
        self.notifications = notifications
        self.nodeId = nodeId
        self.logger = logger
        (queue, outbox) = AsyncStream.makeStream(of: EphemeralFrame.self, bufferingPolicy: .bufferingNewest(10_000))
    }

    func broadcast(type: String, json: String, to users: [String]) {
        local.broadcast(type: type, json: json, to: users)
        outbox.yield(EphemeralFrame(type: type, json: json, users: users, node: nodeId))
    }

    /// Sends the queued frames, a large member list in several notifications (a payload stays under 8,000 bytes).
    func send() async {
        for await frame in queue {
            let budget = 7_000 - frame.json.utf8.count - frame.type.utf8.count - 80
            let perUser = (frame.users.map(\.utf8.count).max() ?? 0) + 3
            let chunkSize = max(1, budget / perUser)
            for start in stride(from: 0, to: frame.users.count, by: chunkSize) {
                var chunk = frame
                chunk.users = Array(frame.users[start..<min(frame.users.count, start + chunkSize)])
                // A chunk still over the limit (one huge user id or frame) is dropped by `send`, with a warning.
                do {
                    try await notifications.send(.frame(chunk))
                } catch {
                    if Task.isCancelled { return }
                    logger.debug("ephemeral frame not relayed", metadata: ["error": "\(String(reflecting: error))"])
                }
            }
        }
    }

    /// A frame another node relayed: to this node's devices of its users.
    func receive(_ frame: EphemeralFrame) {
        local.broadcast(type: frame.type, json: frame.json, to: frame.users)
    }

    /// Sets what runs when another node announces a membership change of a conversation.
    func onMembersChanged(_ handler: @escaping @Sendable (String) -> Void) {
        membersChanged.withLockedValue { $0 = Callback(handler) }
    }

    /// Another node announced a membership change of `conversationId`.
    func receiveMembersChange(_ conversationId: String) {
        membersChanged.withLockedValue { $0 }?.call(conversationId)
    }

    /// Tells the other nodes that the members of `conversationId` changed (after the change committed). Best effort: a
    /// lost notification leaves another node's cached list until its next processing batch of that conversation, which
    /// re-reads the members under the conversation's lock (the change moved its last seq).
    func announceMembersChange(_ conversationId: String) async {
        do {
            try await notifications.send(.membersChanged(node: nodeId, conversationId: conversationId))
        } catch {
            logger.warning("membership change not announced", metadata: ["conversation": "\(conversationId)", "error": "\(String(reflecting: error))"])
        }
    }

    func onBlocksChanged(_ handler: @escaping @Sendable (String) -> Void) {
        blocksChanged.withLockedValue { $0 = Callback(handler) }
    }

    /// Another node announced that a block of `userId` was made or ended.
    func receiveBlocksChange(_ userId: String) {
        blocksChanged.withLockedValue { $0 }?.call(userId)
    }

    /// Tells the other nodes that a block of `userId` was made or ended (after it committed). Best effort: what the
    /// other nodes cache of it serves only typing (a lost notification lets typing through until their cache starts
    /// over); messages, reactions and adds read the blocks in their own transactions.
    func announceBlocksChange(_ userId: String) async {
        do {
            try await notifications.send(.blocksChanged(node: nodeId, userId: userId))
        } catch {
            logger.warning("block change not announced", metadata: ["user": "\(userId)", "error": "\(String(reflecting: error))"])
        }
    }
}
