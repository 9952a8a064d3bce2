import Foundation
import Logging
import PigeonDomain
import PigeonProtocol
import PostgresNIO

/// Reactions (API.md 1.2): one row per (message, key, user), written under the message's row lock.
extension PostgresMessageStore {
    // MARK: Reactions

    /// A reaction waiting for the next reaction transaction.
    package struct PendingReaction {
        package var conversationId: String
        package var serverId: String
        package var userId: String
        package var key: String
        package var action: ReactionAction
        package var at: Int64
        package var continuation: CheckedContinuation<[Reaction], any Error>
    }

    /// Reactions are written in groups, like receipts: a transaction that writes events holds its partition's row
    /// through its commit, so one transaction per reaction would cap a conversation at one reaction per fsync. The
    /// writer takes every reaction that arrived while the previous group was being committed.
    public func react(conversationId: String, serverId: String, userId: String, key: String, action: ReactionAction, at: Int64) async throws
        -> [Reaction]
    {
        try await withCheckedThrowingContinuation { continuation in
            pendingReactions.withLockedValue {
                $0.append(
                    PendingReaction(
                        conversationId: conversationId, serverId: serverId, userId: userId, key: key, action: action, at: at,
                        continuation: continuation))
            }
            reactionWakeUp.notify()
        }
    }

    /// Writes the queued reactions, a group per transaction, until cancelled; then fails what is left.
    package func writeReactions() async {
        while true {
            await reactionWakeUp.wait(timeout: .seconds(1))
            let group = pendingReactions.withLockedValue { pending -> [PendingReaction] in
                let group = Array(pending.prefix(500))
                pending.removeFirst(group.count)
                return group
            }
            if Task.isCancelled && group.isEmpty { break }
            guard !group.isEmpty else { continue }
            if pendingReactions.withLockedValue({ !$0.isEmpty }) { reactionWakeUp.notify() }
            do {
                let (outcomes, committed) = try await withDeadline(.seconds(10)) { try await self.writeReactionGroup(group) }
                fanout.publish(committed)
                for (reaction, outcome) in zip(group, outcomes) { reaction.continuation.resume(with: outcome) }
            } catch {
                for reaction in group { reaction.continuation.resume(throwing: error) }
            }
        }
        let left = pendingReactions.withLockedValue { pending in
            defer { pending = [] }
            return pending
        }
        for reaction in left { reaction.continuation.resume(throwing: PigeonError.overloaded("the server is shutting down")) }
    }

    /// One transaction for a group: the reactions to one message are applied together (a refused one changes nothing
    /// and is answered its error; the others go on), then every event of the group in one statement. Messages' rows
    /// are locked in (conversation, serverId) order, whatever order the reactions came in, so that two nodes' groups
    /// cannot deadlock; the reactions to one message keep their order.
    private func writeReactionGroup(_ group: [PendingReaction]) async throws -> ([Result<[Reaction], any Error>], [StoredEvent]) {
        let order = group.indices.sorted { (group[$0].conversationId, group[$0].serverId, $0) < (group[$1].conversationId, group[$1].serverId, $1) }
        var runs: [[Int]] = []
        for index in order {
            if let last = runs.last?.last, group[last].conversationId == group[index].conversationId, group[last].serverId == group[index].serverId {
                runs[runs.count - 1].append(index)
            } else {
                runs.append([index])
            }
        }
        return try await transaction { connection -> ([Result<[Reaction], any Error>], [StoredEvent]) in
            var outcomes = [Result<[Reaction], any Error>](repeating: .success([]), count: group.count)
            var events = EventRows()
            for run in runs {
                let answers = try await self.apply(run.map { group[$0] }, connection, into: &events)
                for (index, answer) in zip(run, answers) { outcomes[index] = answer }
            }
            return (outcomes, events.types.isEmpty ? [] : try await self.insert(events, connection))
        }
    }

    /// The reactions to one message, in their order, in the group's transaction, in a fixed number of statements
    /// whatever their number: the conversation's member rows (`FOR KEY SHARE`: no reacting member can leave
    /// meanwhile), the message's row `FOR UPDATE` (every reaction to it on every node, and a delete of it, wait for
    /// the commit), its reaction rows; then each reaction is decided on those rows in memory (refusals before anything
    /// changes), and what changed is written back in one delete and one insert. Every change makes a `reaction` event
    /// for every member, its payload stored once per group of members who see the same reactions
    /// (``ReactionRules/views(of:members:)``).
    private func apply(_ reactions: [PendingReaction], _ connection: PostgresConnection, into events: inout EventRows) async throws
        -> [Result<[Reaction], any Error>]
    {
        let (conversationId, serverId) = (reactions[0].conversationId, reactions[0].serverId)
        var joined: [String: Int64] = [:]
        var members: [String] = []
        // An invited member gets only its invitation until it accepts: no reactions.
        var invited = Set<String>()
        for try await (member, seq, membership) in try await connection.query(
            "SELECT user_id, joined_seq, membership FROM members WHERE conversation_id = \(conversationId) ORDER BY user_id FOR KEY SHARE",
            logger: logger
        ).decode((String, Int64, String).self) {
            joined[member] = seq
            members.append(member)
            if membership == MembershipState.invited.rawValue { invited.insert(member) }
        }
        guard !members.isEmpty else { return reactions.map { _ in .failure(PigeonError.conversationNotFound) } }
        let target = try await lockedTarget(conversationId: conversationId, serverId: serverId, connection)
        // A message hidden from a member is not there for it (it may not react, and hears of no reaction to it); a
        // member who blocks a reactor hears of none of its reactions.
        var hiddenFrom = Set<String>()
        var blockers: [String: Set<String>] = [:]
        if let seq = target?.seq {
            for try await user in try await connection.query(
                "SELECT user_id FROM hidden_messages WHERE conversation_id = \(conversationId) AND seq = \(seq)", logger: logger
            ).decode(String.self) {
                hiddenFrom.insert(user)
            }
            for try await (blocked, blocker) in try await connection.query(
                "SELECT blocked, blocker FROM blocks WHERE blocked = ANY(\(Array(Set(reactions.map(\.userId)))))", logger: logger
            ).decode((String, String).self) {
                blockers[blocked, default: []].insert(blocker)
            }
        }
        var initial: [ReactionRow] = []
        if let seq = target?.seq {
            for try await (key, user, at) in try await connection.query(
                "SELECT key, user_id, at FROM reactions WHERE conversation_id = \(conversationId) AND seq = \(seq)", logger: logger
            ).decode((String, String, Int64).self) {
                initial.append(ReactionRow(key: key, userId: user, at: at))
            }
        }
        var rows = initial
        var answers: [Result<[Reaction], any Error>] = []
        let payloads = EventPayload()
        let now = WallClock.nowMillis()
        for reaction in reactions {
            let (userId, key) = (reaction.userId, reaction.key)
            guard let joinedSeq = joined[userId] else {
                answers.append(.failure(PigeonError.conversationNotFound))
                continue
            }
            if let refusal = ReactionRules.refusal(target: target, joinedSeq: joinedSeq) {
                answers.append(.failure(refusal))
                continue
            }
            if hiddenFrom.contains(userId) {
                answers.append(.failure(PigeonError(.notFound, "message not found")))
                continue
            }
            let holds = rows.contains { $0.userId == userId && $0.key == key }
            switch reaction.action {
            case .add:
                guard !holds else {
                    answers.append(.success(ReactionRules.aggregate(rows, reader: userId)))
                    continue
                }
                if let refusal = ReactionRules.limitRefusal(adding: key, by: userId, to: rows) {
                    answers.append(.failure(refusal))
                    continue
                }
                rows.append(ReactionRow(key: key, userId: userId, at: reaction.at))
            case .remove:
                guard holds else {
                    answers.append(.success(ReactionRules.aggregate(rows, reader: userId)))
                    continue
                }
                rows.removeAll { $0.userId == userId && $0.key == key }
            }
            events.webhooks.record(
                webhooks.reaction(conversationId: conversationId, serverId: serverId, key: key, userId: userId, action: reaction.action, at: reaction.at))
            let withheld = hiddenFrom.union(blockers[userId] ?? []).union(invited)
            for view in ReactionRules.views(of: rows, members: withheld.isEmpty ? members : members.filter { !withheld.contains($0) }) {
                let payload = payloads.reaction(
                    ReactionEvent(
                        conversationId: conversationId, serverId: serverId, key: key, userId: userId, action: reaction.action,
                        reactions: view.reactions, at: reaction.at))
                events.append(type: "reaction", userIds: view.members, sharedPayload: payload, at: now, partition: partition(of: conversationId))
            }
            answers.append(.success(ReactionRules.aggregate(rows, reader: userId)))
        }
        guard let seq = target?.seq else { return answers }
        // Written back as a difference: a row removed and added again in the group is replaced (its `at` is new).
        let removed = initial.filter { !rows.contains($0) }
        let added = rows.filter { !initial.contains($0) }
        if !removed.isEmpty {
            try await connection.query(
                """
                DELETE FROM reactions r USING unnest(\(removed.map(\.key))::text[], \(removed.map(\.userId))::text[]) AS d(k, u)
                WHERE r.conversation_id = \(conversationId) AND r.seq = \(seq) AND r.key = d.k AND r.user_id = d.u
                """, logger: logger)
        }
        if !added.isEmpty {
            try await connection.query(
                """
                INSERT INTO reactions(conversation_id, seq, key, user_id, at)
                SELECT \(conversationId), \(seq), k, u, a FROM unnest(\(added.map(\.key))::text[], \(added.map(\.userId))::text[], \(added.map(\.at))::bigint[]) AS n(k, u, a)
                """, logger: logger)
        }
        return answers
    }

    /// The message `serverId` of the conversation as a reaction needs it, its row locked to the commit; nil when it is
    /// not a message of the conversation.
    private func lockedTarget(conversationId: String, serverId: String, _ connection: PostgresConnection) async throws -> MessageTarget? {
        for try await (senderId, type, deleted, seq, threadRoot) in try await connection.query(
            """
            SELECT sender_id, type, deleted_at IS NOT NULL, seq, thread_root FROM messages
            WHERE conversation_id = \(conversationId) AND server_id = \(serverId) FOR UPDATE
            """, logger: logger
        ).decode((String, String, Bool, Int64, String?).self) {
            return MessageTarget(senderId: senderId, type: type, deleted: deleted, seq: seq, threadRoot: threadRoot)
        }
        return nil
    }

    /// Users are compared byte by byte (`COLLATE "C"`), the same on every database whatever its collation, so that a
    /// page's `after` cursor means one thing.
    public func reactionUsers(conversationId: String, serverId: String, reader: String, key: String?, after: String?, limit: Int) async throws
        -> ReactionUsersPage
    {
        guard limit > 0 else { throw PigeonError.invalid("limit must be at least 1") }
        guard let member = try await member(reader, of: conversationId) else { throw PigeonError.conversationNotFound }
        guard let target = try await messageTarget(conversationId: conversationId, serverId: serverId), target.seq >= member.joinedSeq else {
            throw PigeonError(.notFound, "message not found")
        }
        // A message hidden from the reader by a block is not there for it.
        for try await _ in try await client.query(
            "SELECT 1 FROM hidden_messages WHERE conversation_id = \(conversationId) AND seq = \(target.seq) AND user_id = \(reader)", logger: logger
        ) {
            throw PigeonError(.notFound, "message not found")
        }
        var users: [ReactionUser] = []
        for try await (userId, key, at) in try await client.query(
            """
            SELECT r.user_id, r.key, r.at FROM reactions r
            WHERE r.conversation_id = \(conversationId) AND r.seq = \(target.seq) AND (\(key == nil) OR r.key = \(key ?? ""))
                AND r.user_id IN (
                    SELECT DISTINCT u.user_id COLLATE "C" FROM reactions u
                    WHERE u.conversation_id = \(conversationId) AND u.seq = \(target.seq) AND (\(key == nil) OR u.key = \(key ?? ""))
                        AND u.user_id COLLATE "C" > \(after ?? "")
                    ORDER BY 1 LIMIT \(limit + 1))
            ORDER BY r.user_id COLLATE "C", r.key COLLATE "C"
            """, logger: logger
        ).decode((String, String, Int64).self) {
            users.append(ReactionUser(userId: userId, key: key, at: at))
        }
        var seen: [String] = []
        for user in users where seen.last != user.userId { seen.append(user.userId) }
        let hasMore = seen.count > limit
        if hasMore { users.removeAll { $0.userId == seen[limit] } }
        return ReactionUsersPage(users: users, hasMore: hasMore)
    }

    /// The reaction rows of the messages named (conversation, seq), by message: one statement for them all.
    package static func reactionRows(
        of messages: [(conversationId: String, seq: Int64)], client: PostgresClient, logger: Logger
    ) async throws -> [MessageKey: [ReactionRow]] {
        var keys = Set<MessageKey>()
        for message in messages { keys.insert(MessageKey(conversationId: message.conversationId, seq: message.seq)) }
        guard !keys.isEmpty else { return [:] }
        let unique = Array(keys)
        var rows: [MessageKey: [ReactionRow]] = [:]
        for try await (conversationId, seq, key, userId, at) in try await client.query(
            """
            SELECT r.conversation_id, r.seq, r.key, r.user_id, r.at FROM reactions r
            JOIN unnest(\(unique.map(\.conversationId))::text[], \(unique.map(\.seq))::bigint[]) AS k(c, s)
                ON r.conversation_id = k.c AND r.seq = k.s
            """, logger: logger
        ).decode((String, Int64, String, String, Int64).self) {
            rows[MessageKey(conversationId: conversationId, seq: seq), default: []].append(ReactionRow(key: key, userId: userId, at: at))
        }
        return rows
    }
}
