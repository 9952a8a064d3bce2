import Foundation
import GRDB
import NIOConcurrencyHelpers
import PigeonDomain
import PigeonProtocol

/// The event log (cursors, replay, pruning, restores) and the dead letters.
extension SQLiteMessageStore {
    /// Makes the store at `path` (a restored copy, no server on it) a log of its own: a new epoch, and the old one kept
    /// with the copy's last event id as ``formerLog``. A cursor the old log gave out up to there names the same events
    /// here and keeps working; one beyond it named events the copy does not hold, and is answered `reset`, even once new
    /// events (whose ids start again after the copy's last) pass it. Only the latest restore is remembered.
    package static func markRestored(path: String) throws {
        let queue = try DatabaseQueue(path: path)
        defer { try? queue.close() }
        try queue.write { db in
            // Every conversation's seqs go on past anything the server before the restore can have given out, so no
            // seq is given twice: a device that has a message the backup lacks keeps it at its seq, and the restored
            // server's next message comes at a seq of its own (clients pass over seqs no message holds, as they do
            // over a blocked user's).
            try db.execute(sql: "UPDATE conversations SET last_seq = last_seq + ?", arguments: [Self.restoredSeqGap])
            guard let epoch = try String.fetchOne(db, sql: "SELECT value FROM meta WHERE key = 'epoch'") else { return }
            let head = try Int64.fetchOne(db, sql: "SELECT seq FROM sqlite_sequence WHERE name = 'events'") ?? 0
            try db.execute(
                sql: """
                    INSERT OR REPLACE INTO meta(key, value) VALUES ('epoch', ?), ('restored_epoch', ?), ('restored_head', ?)
                    """,
                arguments: [Identifiers.randomHex(bytes: 4), epoch, String(head)])
        }
    }

    /// How far a restore moves every conversation's seqs on: more messages than one conversation can have been given
    /// between a backup and its restore (a thousand a second for eleven days), and room for millions of restores within
    /// the seqs a JavaScript number holds exactly (2^53).
    package static let restoredSeqGap: Int64 = 1_000_000_000

    /// One partition: the embedded store has a single writer, so one log in commit order shares nothing it could contend on.
    public var eventPartitions: Int { 1 }

    public func events(for device: DeviceIdentity, after position: EventPosition, limit: Int) async throws -> [StoredEvent] {
        let after = position.offsets[0]
        return try await pool.read { db in
            let payloads = EventPayload()
            let rows = try Row.fetchAll(
                db.cachedStatement(
                    sql: """
                        SELECT e.id, e.type, e.device_id, e.excluded_device_id, at_rest_open(COALESCE(e.payload, p.payload)), \(Self.joinedMessageColumns)
                        FROM events e LEFT JOIN messages m ON m.conversation_id = e.conversation_id AND m.seq = e.seq
                            LEFT JOIN event_payloads p ON p.id = e.payload_id
                        WHERE e.user_id = ? AND e.id > ? AND (e.device_id IS NULL OR e.device_id = ?)
                            AND (e.excluded_device_id IS NULL OR e.excluded_device_id != ?)
                        ORDER BY e.id LIMIT ?
                        """),
                arguments: [device.userId, after, device.deviceId, device.deviceId, limit]
            )
            // A message.new is rendered from its message as of this read, decorated for the device's user in one go.
            var messages: [Message] = []
            var messageIndex: [Int: Int] = [:]
            for (index, row) in rows.enumerated() where (row[4] as String?) == nil {
                messageIndex[index] = messages.count
                messages.append(Self.message(row, from: 5))
            }
            try Self.decorate(db, &messages, reader: device.userId)
            return rows.enumerated().map { index, row in
                let payload: String = (row[4] as String?) ?? payloads.messageNew(messages[messageIndex[index]!])
                return StoredEvent(id: row[0], type: row[1], userId: device.userId, deviceId: row[2], excludedDeviceId: row[3], payload: payload)
            }
        }
    }

    public func headPosition() async throws -> EventPosition {
        let head = try await pool.read { db in try Int64.fetchOne(db, sql: "SELECT seq FROM sqlite_sequence WHERE name = 'events'") ?? 0 }
        return EventPosition(offsets: [head])
    }

    public func prunedThrough() async throws -> EventPosition {
        let pruned = try await pool.read { db in
            try String.fetchOne(db, sql: "SELECT value FROM meta WHERE key = 'pruned_through'").flatMap { Int64($0) } ?? 0
        }
        return EventPosition(offsets: [pruned])
    }

    @discardableResult
    public func pruneEvents(olderThan cutoff: Int64) async throws -> Int {
        try await write { db -> Int in
            // Event ids grow with time, so binary-search the newest id created before the cutoff.
            guard var high = try Int64.fetchOne(db, sql: "SELECT MAX(id) FROM events"),
                var low = try Int64.fetchOne(db, sql: "SELECT MIN(id) FROM events")
            else { return 0 }
            var boundary: Int64 = 0
            while low <= high {
                let middle = low + (high - low) / 2
                guard let row = try Row.fetchOne(db, sql: "SELECT id, created_at FROM events WHERE id >= ? ORDER BY id LIMIT 1", arguments: [middle])
                else { break }
                if (row[1] as Int64) < cutoff {
                    boundary = row[0]
                    low = (row[0] as Int64) + 1
                } else {
                    high = middle - 1
                }
            }
            guard boundary > 0 else { return 0 }
            let newestPrunedPayload = try Int64.fetchOne(
                db, sql: "SELECT MAX(payload_id) FROM events WHERE id <= ? AND payload_id IS NOT NULL", arguments: [boundary])
            try db.execute(sql: "DELETE FROM events WHERE id <= ?", arguments: [boundary])
            let deleted = db.changesCount
            if let newestPrunedPayload {
                // A shared payload goes with the last event that points at it. Its events are consecutive and payload
                // ids grow with event ids, so only the first event left can still point at a payload up to this one.
                try db.execute(
                    sql: """
                        DELETE FROM event_payloads WHERE id <= ?
                            AND id IS NOT (SELECT payload_id FROM events WHERE id > ? ORDER BY id LIMIT 1)
                        """,
                    arguments: [newestPrunedPayload, boundary])
            }
            try db.execute(
                sql: "INSERT INTO meta(key, value) VALUES ('pruned_through', ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                arguments: [String(boundary)])
            return deleted
        }
    }

    // MARK: Dead letters

    public func deadLetters(limit: Int) async throws -> [DeadLetter] {
        try await pool.read { db in
            try Row.fetchAll(
                db,
                sql: """
                    SELECT server_id, client_message_id, conversation_id, sender_id, sender_device_id, type, at_rest_open(body),
                        client_timestamp, accepted_at, failed_at, error_code, error_message, reply_to, thread_root, attachments
                    FROM dead_letters ORDER BY failed_at LIMIT ?
                    """,
                arguments: [limit]
            ).map { row in
                DeadLetter(
                    message: Message(
                        serverId: row[0], clientMessageId: row[1], conversationId: row[2], seq: 0, senderId: row[3], senderDeviceId: row[4],
                        type: row[5], body: row[6], clientTimestamp: row[7], acceptedAt: row[8], storedAt: 0, replyTo: row[12],
                        threadRoot: row[13], attachments: AttachmentColumn.decode(row[14])),
                    failedAt: row[9], error: ErrorDetail(code: ErrorCode(rawValue: row[10]), message: row[11]))
            }
        }
    }

    public func deadLetter(serverId: String) async throws -> BufferedMessage? {
        try await pool.read { db in
            try Row.fetchOne(
                db,
                sql: """
                    SELECT server_id, conversation_id, sender_id, sender_device_id, client_message_id, type, at_rest_open(body),
                        client_timestamp, accepted_at, reply_to, thread_root, attachments FROM dead_letters WHERE server_id = ?
                    """,
                arguments: [serverId]
            ).map { row in
                BufferedMessage(
                    serverId: row[0], conversationId: row[1], senderId: row[2], senderDeviceId: row[3], clientMessageId: row[4],
                    type: row[5], body: row[6], clientTimestamp: row[7], acceptedAt: row[8], replyTo: row[9], threadRoot: row[10],
                    attachments: AttachmentColumn.decode(row[11]))
            }
        }
    }

    public func removeDeadLetter(serverId: String) async throws {
        try await write { db in
            try db.execute(sql: "DELETE FROM dead_letters WHERE server_id = ?", arguments: [serverId])
        }
    }

    public func deadLetterCount() async throws -> Int {
        try await pool.read { db in try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM dead_letters") ?? 0 }
    }
}
