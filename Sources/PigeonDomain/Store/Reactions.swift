import PigeonProtocol

/// One stored reaction: `userId` holds `key` on a message since `at`.
public struct ReactionRow: Sendable, Equatable {
    public var key: String
    public var userId: String
    public var at: Int64

    public init(key: String, userId: String, at: Int64) {
        self.key = key
        self.userId = userId
        self.at = at
    }
}

/// The rules of reactions (API.md 1.2), the same on every store: what refuses a reaction, how a message's rows
/// aggregate for a reader, and which members share one view of a `reaction` event.
package enum ReactionRules {
    /// Why `userId` (a member from `joinedSeq` on) may not react to `target`: `not_found` when it cannot see it,
    /// `conflict` when it is deleted or the server's own.
    package static func refusal(target: MessageTarget?, joinedSeq: Int64) -> PigeonError? {
        guard let target, target.seq >= joinedSeq else { return PigeonError(.notFound, "message not found") }
        if target.deleted { return PigeonError(.conflict, "the message is deleted") }
        if Validation.isServerMessageType(target.type) { return PigeonError(.conflict, "\(target.type) messages take no reactions") }
        return nil
    }

    /// Why adding `key` by `userId` to a message holding `rows` would pass a limit, else `nil`. Call only when the
    /// user does not hold the key yet.
    package static func limitRefusal(adding key: String, by userId: String, to rows: [ReactionRow]) -> PigeonError? {
        if rows.lazy.filter({ $0.userId == userId }).count >= ReactionLimits.keysPerUser {
            return PigeonError(.conflict, "a user holds at most \(ReactionLimits.keysPerUser) reactions on one message")
        }
        var keys = Set<String>()
        for row in rows { keys.insert(row.key) }
        if !keys.contains(key), keys.count >= ReactionLimits.keysPerMessage {
            return PigeonError(.conflict, "a message holds at most \(ReactionLimits.keysPerMessage) distinct reactions")
        }
        return nil
    }

    /// The aggregate of a message's `rows` as `reader` sees it: keys in order of their first use (the oldest row
    /// holding it; ties by key), each with its count and whether `reader` holds it.
    package static func aggregate(_ rows: [ReactionRow], reader: String?) -> [Reaction] {
        var order: [String] = []
        var first: [String: Int64] = [:]
        var counts: [String: Int] = [:]
        var mine = Set<String>()
        for row in rows {
            if let at = first[row.key] {
                if row.at < at { first[row.key] = row.at }
            } else {
                first[row.key] = row.at
                order.append(row.key)
            }
            counts[row.key, default: 0] += 1
            if row.userId == reader { mine.insert(row.key) }
        }
        order.sort { (first[$0]!, $0) < (first[$1]!, $1) }
        return order.map { Reaction(key: $0, count: counts[$0]!, me: mine.contains($0)) }
    }

    /// The members grouped by how they see a message holding `rows`: members who hold the same keys see the same
    /// `reactions` (`me` is the only difference), so a `reaction` event's payload is stored once per group, not once
    /// per member. Groups come in a stable order (the members' order of first appearance).
    package static func views(of rows: [ReactionRow], members: [String]) -> [(reactions: [Reaction], members: [String])] {
        var held: [String: Set<String>] = [:]
        for row in rows { held[row.userId, default: []].insert(row.key) }
        var groups: [Set<String>: Int] = [:]
        var result: [(reactions: [Reaction], members: [String])] = []
        for member in members {
            let keys = held[member] ?? []
            if let index = groups[keys] {
                result[index].members.append(member)
            } else {
                groups[keys] = result.count
                result.append((aggregate(rows, reader: member), [member]))
            }
        }
        return result
    }
}

/// The rules of replies and threads (API.md 1.2).
package enum ReplyRules {
    /// Why a message of a sender (a member from `joinedSeq` on) may not quote `replyTarget` (`replyTo`) or be put in
    /// `threadTarget`'s thread (`threadRoot`), else `nil`. A target that is absent, or below `joinedSeq`, is `not_found`;
    /// a deleted one `conflict`; a root that is itself in a thread `invalid_request`.
    package static func refusal(
        replyTo: String?, replyTarget: MessageTarget?, threadRoot: String?, threadTarget: MessageTarget?, joinedSeq: Int64
    ) -> PigeonError? {
        if let replyTo {
            guard let target = replyTarget, target.seq >= joinedSeq else {
                return PigeonError(.notFound, "replyTo \(replyTo) is not a message of this conversation")
            }
            if target.deleted { return PigeonError(.conflict, "replyTo \(replyTo) is deleted") }
            if Validation.isServerMessageType(target.type) { return PigeonError(.conflict, "a \(target.type) message cannot be quoted") }
        }
        if let threadRoot {
            guard let target = threadTarget, target.seq >= joinedSeq else {
                return PigeonError(.notFound, "threadRoot \(threadRoot) is not a message of this conversation")
            }
            if target.deleted { return PigeonError(.conflict, "threadRoot \(threadRoot) is deleted") }
            if target.threadRoot != nil { return .invalid("threadRoot \(threadRoot) is itself in a thread: a thread has one level") }
            if Validation.isServerMessageType(target.type) { return PigeonError(.conflict, "a \(target.type) message cannot start a thread") }
        }
        return nil
    }

    /// The thread summary columns' senders: user ids joined by commas (a user id holds no comma).
    package static func senders(_ text: String?) -> [String] {
        guard let text, !text.isEmpty else { return [] }
        return text.split(separator: ",").map(String.init)
    }

    package static func sendersText(_ senders: [String]) -> String {
        senders.joined(separator: ",")
    }
}
