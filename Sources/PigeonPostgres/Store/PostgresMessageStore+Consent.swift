import Foundation
import Logging
import PigeonDomain
import PigeonProtocol
import PostgresNIO

/// Blocking, strangers and invitations (API.md 1.2) on PostgreSQL (``BlockStore`` has the rules). Every decision is taken
/// in a transaction that reads the committed blocks, so it holds on every node at once; only typing reads a cache.
extension PostgresMessageStore {
    /// Seed of the advisory locks that serialise one user's adds of strangers on every node (its hourly count).
    package static let strangerLock: Int64 = 0x7069_6765_6f6e_0002

    // MARK: Blocks

    public func block(_ blocked: String, by blocker: String, at: Int64) async throws {
        try await transaction { connection in
            // The blocker's rows are counted under a lock of the blocker: two blocks at once cannot both pass the limit.
            try await connection.query("SELECT pg_advisory_xact_lock(hashtextextended(\(blocker), \(Self.strangerLock)))", logger: logger)
            var known = false
            var count = 0
            for try await (n, has) in try await connection.query(
                "SELECT count(*), bool_or(blocked = \(blocked)) FROM blocks WHERE blocker = \(blocker)", logger: logger
            ).decode((Int, Bool?).self) {
                count = n
                known = has ?? false
            }
            if known { return }
            guard count < BlockLimits.perUser else { throw PigeonError.invalid("a user blocks at most \(BlockLimits.perUser) users") }
            try await connection.query("INSERT INTO blocks(blocker, blocked, at) VALUES (\(blocker), \(blocked), \(at))", logger: logger)
        }
        blockersCache.changed(blocked, members: nil)
        await fanout.announceBlocksChange(blocked)
    }

    public func unblock(_ blocked: String, by blocker: String) async throws {
        try await client.query("DELETE FROM blocks WHERE blocker = \(blocker) AND blocked = \(blocked)", logger: logger)
        blockersCache.changed(blocked, members: nil)
        await fanout.announceBlocksChange(blocked)
    }

    public func blocks(of blocker: String) async throws -> [Block] {
        var blocks: [Block] = []
        for try await (userId, at) in try await client.query(
            "SELECT blocked, at FROM blocks WHERE blocker = \(blocker) ORDER BY at, blocked COLLATE \"C\"", logger: logger
        ).decode((String, Int64).self) {
            blocks.append(Block(userId: userId, at: at))
        }
        return blocks
    }

    public func blockers(of blocked: String) async throws -> Set<String> {
        if let cached = blockersCache[blocked] { return Set(cached) }
        let generation = blockersCache.generation(of: blocked)
        var blockers: [String] = []
        for try await blocker in try await client.query("SELECT blocker FROM blocks WHERE blocked = \(blocked)", logger: logger).decode(String.self) {
            blockers.append(blocker)
        }
        blockersCache.store(blockers.sorted(), for: blocked, ifGeneration: generation)
        return Set(blockers)
    }

    public func setConsentRules(_ rules: ConsentRules) {
        consentRules.withLockedValue { $0 = rules }
    }

    // MARK: Adding members

    /// Decides and records an add of `added` by `adder` in the caller's transaction (``ConsentCheck``): the blocks,
    /// contacts and recent stranger adds read there (the adder's stranger adds under its advisory lock: every node counts
    /// the same hour), the new strangers recorded.
    package func admit(
        _ connection: PostgresConnection, _ added: [String], by adder: String, admission: MemberAdmission, now: Int64
    ) async throws -> ConsentCheck.Admission {
        let rules = consentRules.withLockedValue { $0 }
        guard admission == .consentRules, !added.isEmpty else { return ConsentCheck.Admission() }
        var blockers = Set<String>()
        for try await blocker in try await connection.query(
            "SELECT blocker FROM blocks WHERE blocked = \(adder) AND blocker = ANY(\(added))", logger: logger
        ).decode(String.self) {
            blockers.insert(blocker)
        }
        var contacts = Set<String>()
        if rules.invitations || rules.strangerAddsPerHour > 0 {
            for try await contact in try await connection.query(
                """
                SELECT DISTINCT b.user_id FROM members a JOIN members b ON b.conversation_id = a.conversation_id
                WHERE a.user_id = \(adder) AND a.membership = 'joined' AND b.membership = 'joined' AND b.user_id = ANY(\(added))
                """, logger: logger
            ).decode(String.self) {
                contacts.insert(contact)
            }
        }
        var recent: [(userId: String, at: Int64)] = []
        if rules.strangerAddsPerHour > 0, added.contains(where: { !contacts.contains($0) }) {
            try await connection.query("SELECT pg_advisory_xact_lock(hashtextextended(\(adder), \(Self.strangerLock)))", logger: logger)
            try await connection.query("DELETE FROM stranger_adds WHERE adder = \(adder) AND at <= \(now - ConsentRules.window)", logger: logger)
            for try await (user, at) in try await connection.query(
                "SELECT added, at FROM stranger_adds WHERE adder = \(adder)", logger: logger
            ).decode((String, Int64).self) {
                recent.append((user, at))
            }
        }
        let admitted = try ConsentCheck.admit(
            added, blockers: blockers, contacts: contacts, recent: recent, rules: rules, admission: admission, now: now)
        if !admitted.newStrangers.isEmpty {
            try await connection.query(
                """
                INSERT INTO stranger_adds(adder, added, at) SELECT \(adder), u, \(now) FROM unnest(\(admitted.newStrangers)::text[]) AS t(u)
                ON CONFLICT (adder, added) DO UPDATE SET at = excluded.at
                """, logger: logger)
        }
        return admitted
    }

    // MARK: Invitations

    public func acceptInvitation(conversationId: String, userId: String) async throws -> Conversation {
        let committed = try await transaction { connection -> [StoredEvent] in
            var membership: String?
            for try await state in try await connection.query(
                "SELECT membership FROM members WHERE conversation_id = \(conversationId) AND user_id = \(userId) FOR UPDATE", logger: logger
            ).decode(String.self) {
                membership = state
            }
            guard let membership else { throw PigeonError.conversationNotFound }
            guard membership == MembershipState.invited.rawValue else { return [] }
            try await connection.query(
                "UPDATE members SET membership = 'joined' WHERE conversation_id = \(conversationId) AND user_id = \(userId)", logger: logger)
            guard let conversation = try await Self.conversationRows(connection, id: conversationId, logger: logger) else {
                throw PigeonError.conversationNotFound
            }
            var events = EventRows()
            events.append(
                type: "conversation.created", userId: userId, payload: try EventPayload().conversationCreated(conversation), at: WallClock.nowMillis(),
                partition: partition(of: conversationId))
            return try await insert(events, connection)
        }
        fanout.publish(committed)
        guard let conversation = try await conversationView(id: conversationId, for: userId) else { throw PigeonError.conversationNotFound }
        return conversation
    }

    /// A conversation and its members as `connection` reads them, without anyone's view.
    package static func conversationRows(_ connection: PostgresConnection, id: String, logger: Logger) async throws -> Conversation? {
        var conversation: Conversation?
        for try await (id, kind, name, createdAt, lastSeq, updatedAt) in try await connection.query(
            "SELECT id, kind, name, created_at, last_seq, updated_at FROM conversations WHERE id = \(id)", logger: logger
        ).decode((String, String, String?, Int64, Int64, Int64).self) {
            conversation = Conversation(
                id: id, kind: ConversationKind(rawValue: kind) ?? .group, name: name, createdAt: createdAt, lastSeq: lastSeq,
                updatedAt: updatedAt, members: [])
        }
        guard var conversation else { return nil }
        for try await row in try await connection.query(
            "SELECT \(unescaped: memberColumns) FROM members WHERE conversation_id = \(id) ORDER BY user_id", logger: logger
        ).decode(MemberTuple.self) {
            conversation.members.append(member(row))
        }
        return conversation
    }

    // MARK: Members' rows

    /// A member row's columns, in ``MemberTuple``'s order.
    package static let memberColumns = "user_id, role, joined_seq, delivered_seq, read_seq, membership"

    package typealias MemberTuple = (String, String, Int64, Int64, Int64, String)

    package static func member(_ t: MemberTuple) -> ConversationMember {
        ConversationMember(
            userId: t.0, role: MemberRole(rawValue: t.1) ?? .member, joinedSeq: t.2, deliveredSeq: t.3, readSeq: t.4,
            membership: MembershipState(rawValue: t.5) ?? .joined)
    }
}
