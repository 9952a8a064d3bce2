import GRDB
import NIOConcurrencyHelpers
import PigeonDomain
import PigeonProtocol

/// What the embedded store knows of consent without a query: the rules it applies, and whether a block or an invitation
/// was ever written (until then the message path, history and receipts skip their consent queries).
package struct SQLiteConsentState: Sendable {
    package var rules = ConsentRules.open
    /// A block (and so possibly a hidden message) was ever written; set inside the writing transaction, before its commit.
    package var blocksExist = false
    /// An invited member was ever written.
    package var invitesExist = false
}

/// Blocking, strangers and invitations (API.md 1.2) on the embedded store (``BlockStore`` has the rules). Every decision is
/// taken in the group commit's one writer, so it is the order of the store.
extension SQLiteMessageStore {
    // MARK: Blocks

    public func block(_ blocked: String, by blocker: String, at: Int64) async throws {
        try await write(
            { [consent] db in
                consent.withLockedValue { $0.blocksExist = true }
                let count = try Int.fetchOne(db.cachedStatement(sql: "SELECT count(*) FROM blocks WHERE blocker = ?"), arguments: [blocker]) ?? 0
                let known = try Bool.fetchOne(
                    db.cachedStatement(sql: "SELECT 1 FROM blocks WHERE blocker = ? AND blocked = ?"), arguments: [blocker, blocked]) ?? false
                if known { return }
                guard count < BlockLimits.perUser else { throw PigeonError.invalid("a user blocks at most \(BlockLimits.perUser) users") }
                try db.cachedStatement(sql: "INSERT INTO blocks(blocker, blocked, at) VALUES (?, ?, ?)").execute(arguments: [blocker, blocked, at])
            },
            afterCommit: { [blockersCache] _ in blockersCache.changed(blocked, members: nil) })
    }

    public func unblock(_ blocked: String, by blocker: String) async throws {
        try await write(
            { db in
                try db.cachedStatement(sql: "DELETE FROM blocks WHERE blocker = ? AND blocked = ?").execute(arguments: [blocker, blocked])
            },
            afterCommit: { [blockersCache] _ in blockersCache.changed(blocked, members: nil) })
    }

    public func blocks(of blocker: String) async throws -> [Block] {
        try await pool.read { db in
            try Row.fetchAll(
                db.cachedStatement(sql: "SELECT blocked, at FROM blocks WHERE blocker = ? ORDER BY at, blocked"), arguments: [blocker]
            ).map { Block(userId: $0[0], at: $0[1]) }
        }
    }

    public func blockers(of blocked: String) async throws -> Set<String> {
        if let cached = blockersCache[blocked] { return Set(cached) }
        let generation = blockersCache.generation(of: blocked)
        let blockers = try await pool.read { db in try Self.blockers(db, of: blocked) }
        blockersCache.store(blockers.sorted(), for: blocked, ifGeneration: generation)
        return blockers
    }

    public func setConsentRules(_ rules: ConsentRules) {
        consent.withLockedValue { $0.rules = rules }
    }

    /// Who blocks `blocked` (among `members` when given), as this transaction sees it.
    static func blockers(_ db: Database, of blocked: String, among members: [String]? = nil) throws -> Set<String> {
        let all = try String.fetchAll(db.cachedStatement(sql: "SELECT blocker FROM blocks WHERE blocked = ?"), arguments: [blocked])
        guard let members else { return Set(all) }
        return Set(all).intersection(members)
    }

    // MARK: Hidden messages and invited members, as the message path sees them

    /// The members of a conversation that get no `message.new` of a message of `message`'s sender: those who block it
    /// (``MessageEvents/hiddenFrom(_:blockers:members:)``, recorded as hidden) and those still invited.
    func withheld(_ db: Database, _ message: BufferedMessage, members: [String]) throws -> (hidden: [String], withheld: Set<String>) {
        let state = consent.withLockedValue { $0 }
        var hidden: [String] = []
        if state.blocksExist {
            hidden = MessageEvents.hiddenFrom(message, blockers: try Self.blockers(db, of: message.senderId, among: members), members: members)
        }
        var withheld = Set(hidden)
        if state.invitesExist { withheld.formUnion(try Self.invited(db, message.conversationId)) }
        return (hidden, withheld)
    }

    /// The members of a conversation who are invited and have not accepted.
    static func invited(_ db: Database, _ conversationId: String) throws -> Set<String> {
        Set(try String.fetchAll(
            db.cachedStatement(sql: "SELECT user_id FROM members WHERE conversation_id = ? AND membership = 'invited'"), arguments: [conversationId]))
    }

    static func insertHidden(_ db: Database, conversationId: String, seq: Int64, senderId: String, from users: [String]) throws {
        for user in users {
            try db.cachedStatement(sql: "INSERT OR IGNORE INTO hidden_messages(conversation_id, seq, user_id, sender_id) VALUES (?, ?, ?, ?)")
                .execute(arguments: [conversationId, seq, user, senderId])
        }
    }

    /// Whether reads must leave out hidden messages (none was ever written otherwise).
    var mayHide: Bool { consent.withLockedValue { $0.blocksExist } }

    // MARK: Adding members

    /// Decides and records an add of `added` by `adder` in this transaction (``ConsentCheck``): the blocks, contacts and
    /// recent stranger adds read here, the new strangers counted against the adder.
    func admit(_ db: Database, _ added: [String], by adder: String, admission: MemberAdmission, now: Int64) throws -> ConsentCheck.Admission {
        let rules = consent.withLockedValue { $0.rules }
        guard admission == .consentRules, !added.isEmpty else { return ConsentCheck.Admission() }
        let placeholders = databaseQuestionMarks(count: added.count)
        let blockers = Set(try String.fetchAll(
            db, sql: "SELECT blocker FROM blocks WHERE blocked = ? AND blocker IN (\(placeholders))",
            arguments: StatementArguments([adder] + added)))
        var contacts = Set<String>()
        var recent: [(userId: String, at: Int64)] = []
        if rules.invitations || rules.strangerAddsPerHour > 0 {
            contacts = Set(try String.fetchAll(
                db,
                sql: """
                    SELECT DISTINCT b.user_id FROM members a JOIN members b ON b.conversation_id = a.conversation_id
                    WHERE a.user_id = ? AND a.membership = 'joined' AND b.membership = 'joined' AND b.user_id IN (\(placeholders))
                    """,
                arguments: StatementArguments([adder] + added)))
        }
        if rules.strangerAddsPerHour > 0 {
            try db.cachedStatement(sql: "DELETE FROM stranger_adds WHERE adder = ? AND at <= ?").execute(arguments: [adder, now - ConsentRules.window])
            recent = try Row.fetchAll(db.cachedStatement(sql: "SELECT added, at FROM stranger_adds WHERE adder = ?"), arguments: [adder])
                .map { ($0[0], $0[1]) }
        }
        let admitted = try ConsentCheck.admit(
            added, blockers: blockers, contacts: contacts, recent: recent, rules: rules, admission: admission, now: now)
        for user in admitted.newStrangers {
            try db.cachedStatement(sql: "INSERT OR REPLACE INTO stranger_adds(adder, added, at) VALUES (?, ?, ?)").execute(arguments: [adder, user, now])
        }
        if !admitted.invited.isEmpty { consent.withLockedValue { $0.invitesExist = true } }
        return admitted
    }

    // MARK: Invitations

    public func acceptInvitation(conversationId: String, userId: String) async throws -> Conversation {
        try await write(
            { db -> [StoredEvent] in
                guard
                    let membership = try String.fetchOne(
                        db.cachedStatement(sql: "SELECT membership FROM members WHERE conversation_id = ? AND user_id = ?"),
                        arguments: [conversationId, userId])
                else { throw PigeonError.conversationNotFound }
                guard membership == MembershipState.invited.rawValue else { return [] }
                try db.cachedStatement(sql: "UPDATE members SET membership = 'joined' WHERE conversation_id = ? AND user_id = ?")
                    .execute(arguments: [conversationId, userId])
                // Processing later in this group commit reads who is invited from the table (there is no cache of it).
                guard var conversation = try Self.conversationView(db, id: conversationId, for: userId) else { throw PigeonError.conversationNotFound }
                conversation.lastMessage = nil
                conversation.unreadCount = 0
                let payload = try EventPayload().conversationCreated(conversation)
                return [
                    try Self.insertEvent(
                        db, type: "conversation.created", userId: userId, deviceId: nil, excludedDeviceId: nil, payload: payload,
                        at: WallClock.nowMillis())
                ]
            },
            afterCommit: { [fanout] events in fanout.publish(events) })
        guard let conversation = try await pool.read({ db in try Self.conversationView(db, id: conversationId, for: userId) }) else {
            throw PigeonError.conversationNotFound
        }
        return conversation
    }
}
