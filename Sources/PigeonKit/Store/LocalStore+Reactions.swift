import Foundation
import GRDB
import PigeonProtocol

/// Reactions (API.md 1.2) in the local database.
///
/// A message keeps the server's aggregate as last heard (`confirmedReactions`: from an answer, a `reaction` event or
/// a copy read from the server, each replacing it whole) and the one shown (`reactions`: the confirmed one with this
/// device's reactions that the server has not answered yet on top, see ``ReactionAggregate``). This device's
/// reactions wait in `reactionOutbox`, in the order they were made; an add and a remove of the same key that are both
/// still waiting cancel out there, so nothing is sent for them.
extension LocalStore {
    /// Saves this user's add or remove of `key` on the message `targetLocalId` and shows it at once. When the opposite
    /// change of the same key still waits and `cancelQueued` takes it out of the outbox (it is not on the wire), the
    /// two cancel out; when the same change already waits, nothing is added. Returns the message as shown now, the
    /// outbox item to queue (`nil` when none) and what to announce.
    func saveReaction(
        targetLocalId: Int64, key: String, action: ReactionAction, clientMessageId: String, cancelQueued: (Int64) -> Bool
    ) throws -> (PigeonMessage, OutboxItem?, ApplyOutcome) {
        try pool.write { db in
            let target = try self.referencedMessage(db, localId: targetLocalId, conversationId: nil, purpose: "reacted to")
            try self.requireMembership(db, conversationId: target.conversationId)
            var item: OutboxItem?
            let last = try Row.fetchOne(
                db.cachedStatement(sql: "SELECT id, action FROM reactionOutbox WHERE targetLocalId = ? AND key = ? ORDER BY id DESC LIMIT 1"),
                arguments: [targetLocalId, key])
            if let last, last[1] as String == action.rawValue {
                // The same change is on its way already.
            } else if let last, cancelQueued(last[0]) {
                try db.cachedStatement(sql: "DELETE FROM reactionOutbox WHERE id = ?").execute(arguments: [last[0] as Int64])
            } else {
                let id = try self.reserveLocalId(db)
                try db.cachedStatement(sql: """
                    INSERT INTO reactionOutbox (id, conversationId, targetLocalId, key, action, clientMessageId) VALUES (?, ?, ?, ?, ?, ?)
                    """).execute(arguments: [id, target.conversationId, targetLocalId, key, action.rawValue, clientMessageId])
                item = OutboxItem(localId: id, conversationId: target.conversationId, clientMessageId: clientMessageId, kind: .reaction)
            }
            var outcome = ApplyOutcome()
            try self.refreshReactions(db, localId: targetLocalId, outcome: &outcome)
            try self.collectLifecycleEvents(db, &outcome)
            return (try self.message(db, localId: targetLocalId) ?? target, item, outcome)
        }
    }

    /// A fresh id from the messages' local id sequence (the `sqlite_sequence` row of their AUTOINCREMENT, which
    /// SQLite lets a program update): every message saved afterwards gets a higher local id, so one outbox line
    /// orders messages and reactions by a single number.
    func reserveLocalId(_ db: Database) throws -> Int64 {
        let sequence = try Int64.fetchOne(db, sql: "SELECT seq FROM sqlite_sequence WHERE name = 'messages'")
        let highestMessage = try Int64.fetchOne(db, sql: "SELECT coalesce(max(localId), 0) FROM messages") ?? 0
        let highestReaction = try Int64.fetchOne(db, sql: "SELECT coalesce(max(id), 0) FROM reactionOutbox") ?? 0
        let id = max(sequence ?? 0, highestMessage, highestReaction) + 1
        if sequence == nil {
            try db.execute(sql: "INSERT INTO sqlite_sequence (name, seq) VALUES ('messages', ?)", arguments: [id])
        } else {
            try db.execute(sql: "UPDATE sqlite_sequence SET seq = ? WHERE name = 'messages'", arguments: [id])
        }
        return id
    }

    /// Recomputes what a message shows: nothing once it is deleted, else its confirmed aggregate with this device's
    /// waiting reactions on top, oldest first. Notes a change.
    func refreshReactions(_ db: Database, localId: Int64, outcome: inout ApplyOutcome) throws {
        guard let row = try Row.fetchOne(
            db.cachedStatement(sql: "SELECT reactions, confirmedReactions, deletedAt FROM messages WHERE localId = ?"), arguments: [localId])
        else { return }
        let before = Self.decodeJSON([Reaction].self, row[0]) ?? []
        var shown: [Reaction] = []
        if (row[2] as Int64?) == nil {
            let pending = try Row.fetchAll(
                db.cachedStatement(sql: "SELECT action, key FROM reactionOutbox WHERE targetLocalId = ? ORDER BY id"), arguments: [localId]
            ).compactMap { row in ReactionAction(rawValue: row[0]).map { (action: $0, key: row[1] as String) } }
            shown = ReactionAggregate.showing(Self.decodeJSON([Reaction].self, row[1]) ?? [], pending: pending)
        }
        guard shown != before else { return }
        try db.cachedStatement(sql: "UPDATE messages SET reactions = ? WHERE localId = ?").execute(arguments: [Self.reactionsColumn(shown), localId])
        outcome.noteReactions(localId)
    }

    /// The server's aggregate for a message (it replaces the one known), then what is shown.
    func setConfirmedReactions(_ db: Database, localId: Int64, _ reactions: [Reaction], outcome: inout ApplyOutcome) throws {
        reactionsInFlight.withLockedValue { $0.heard(localId) }
        try db.cachedStatement(sql: "UPDATE messages SET confirmedReactions = ? WHERE localId = ?")
            .execute(arguments: [Self.reactionsColumn(reactions), localId])
        try refreshReactions(db, localId: localId, outcome: &outcome)
    }

    /// A `reaction` event: its aggregate (as this user sees it) replaces the message's. Applying it again changes
    /// nothing. A message not on this device yet brings its reactions when it arrives.
    func applyReactionEvent(_ db: Database, _ event: ReactionEvent, outcome: inout ApplyOutcome) throws {
        guard let localId = try Int64.fetchOne(
            db.cachedStatement(sql: "SELECT localId FROM messages WHERE serverId = ? AND conversationId = ?"),
            arguments: [event.serverId, event.conversationId])
        else { return }
        try setConfirmedReactions(db, localId: localId, event.reactions, outcome: &outcome)
    }

    /// What to put on the wire for a waiting reaction: `.targetNotSent` when its message never reached the server
    /// (it failed); `nil` when the reaction is gone.
    func reactionRequest(id: Int64) async throws -> OutboxRequest? {
        try await pool.read { db in
            guard let row = try Row.fetchOne(
                db.cachedStatement(sql: """
                    SELECT r.key, r.action, r.clientMessageId, m.serverId, r.targetLocalId FROM reactionOutbox r
                    JOIN messages m ON m.localId = r.targetLocalId WHERE r.id = ?
                    """),
                arguments: [id])
            else { return nil }
            guard let serverId = row[3] as String?, let action = ReactionAction(rawValue: row[1]) else { return .targetNotSent }
            self.reactionsInFlight.withLockedValue { $0.dispatched(id, target: row[4]) }
            return .react(ReactRequest(serverId: serverId, key: row[0], action: action, clientMessageId: row[2]))
        }
    }

    /// The server applied a waiting reaction: it leaves the outbox, and the message's confirmed aggregate becomes
    /// `reactions` (an HTTP answer), or, when the answer carried none (a WebSocket `ack`), the confirmed aggregate
    /// with this user's change applied (the server has it; the `reaction` event that follows replaces the whole).
    ///
    /// An answer and the stream's events are not ordered against each other: when an aggregate was heard for the
    /// message while the request was out, it may be newer than the answer (another user's reaction made after it),
    /// so the change is applied to that one instead (counted once if it has it already); a later event brings
    /// anything it lacks.
    func reactionAnswered(id: Int64, reactions: [Reaction]?) async throws -> ApplyOutcome {
        try await pool.write { db in
            var outcome = ApplyOutcome()
            guard let row = try Row.fetchOne(
                db.cachedStatement(sql: "SELECT r.targetLocalId, r.key, r.action, m.confirmedReactions FROM reactionOutbox r JOIN messages m ON m.localId = r.targetLocalId WHERE r.id = ?"),
                arguments: [id])
            else { return outcome }
            let localId: Int64 = row[0]
            try db.cachedStatement(sql: "DELETE FROM reactionOutbox WHERE id = ?").execute(arguments: [id])
            let overtaken = self.reactionsInFlight.withLockedValue { $0.settled(id) }
            let confirmed = (overtaken ? nil : reactions) ?? ReactionAggregate.applying(
                ReactionAction(rawValue: row[2]) ?? .add, key: row[1], to: Self.decodeJSON([Reaction].self, row[3]) ?? [])
            try self.setConfirmedReactions(db, localId: localId, confirmed, outcome: &outcome)
            try self.collectLifecycleEvents(db, &outcome)
            return outcome
        }
    }

    /// A waiting reaction that cannot go (refused by the server, its message not sent, or its tries spent): it leaves
    /// the outbox, the message shows what it showed without it, and the failure is announced.
    func dropReaction(id: Int64, reason: ErrorDetail) async throws -> ApplyOutcome {
        try await pool.write { db in
            var outcome = ApplyOutcome()
            guard let row = try Row.fetchOne(
                db.cachedStatement(sql: "SELECT targetLocalId, key, action FROM reactionOutbox WHERE id = ?"), arguments: [id])
            else { return outcome }
            try db.cachedStatement(sql: "DELETE FROM reactionOutbox WHERE id = ?").execute(arguments: [id])
            _ = self.reactionsInFlight.withLockedValue { $0.settled(id) }
            try self.refreshReactions(db, localId: row[0], outcome: &outcome)
            outcome.reactionFailures.append((row[0], row[1], ReactionAction(rawValue: row[2]) ?? .add, reason))
            try self.collectLifecycleEvents(db, &outcome)
            return outcome
        }
    }

    func recordReactionAttempts(id: Int64, attempts: Int) async throws {
        try await pool.write { db in
            try db.cachedStatement(sql: "UPDATE reactionOutbox SET attempts = ? WHERE id = ?").execute(arguments: [attempts, id])
        }
    }

    /// This device's reactions that wait for the server, oldest first.
    func pendingReactions() throws -> [PendingReaction] {
        try pool.read { db in
            try Row.fetchAll(db, sql: "SELECT targetLocalId, key, action FROM reactionOutbox ORDER BY id").compactMap { row in
                ReactionAction(rawValue: row[2]).map { PendingReaction(messageLocalId: row[0], key: row[1], action: $0) }
            }
        }
    }

    /// A reactions column: JSON, NULL when there are none.
    static func reactionsColumn(_ reactions: [Reaction]) -> String? {
        reactions.isEmpty ? nil : json(reactions)
    }
}

/// This device's reactions on the wire, and whether a server aggregate for their message was heard since each went
/// out (in memory: a request and its answer belong to one run of the client). Only messages with a reaction on the
/// wire are counted, so it holds a few entries, not one per message.
struct ReactionsInFlight: Sendable {
    /// Per message with a reaction on the wire: aggregates heard for it so far.
    private var heardCount: [Int64: Int] = [:]
    /// Per reaction on the wire (its outbox id): its message, and that message's count when the reaction went out.
    private var requests: [Int64: (target: Int64, heard: Int)] = [:]

    /// Reaction `id` to the message `target` is going out (again: a retry starts the count anew).
    mutating func dispatched(_ id: Int64, target: Int64) {
        let heard = heardCount[target, default: 0]
        heardCount[target] = heard
        requests[id] = (target, heard)
    }

    /// A server aggregate for the message `localId` was applied.
    mutating func heard(_ localId: Int64) {
        if let count = heardCount[localId] { heardCount[localId] = count + 1 }
    }

    /// Reaction `id` is answered or dropped: whether an aggregate was heard for its message since it went out.
    mutating func settled(_ id: Int64) -> Bool {
        guard let request = requests.removeValue(forKey: id) else { return false }
        let overtaken = heardCount[request.target, default: 0] != request.heard
        if !requests.values.contains(where: { $0.target == request.target }) { heardCount.removeValue(forKey: request.target) }
        return overtaken
    }
}
