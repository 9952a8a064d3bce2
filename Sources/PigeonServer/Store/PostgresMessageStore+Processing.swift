import Foundation
import Logging
import NIOConcurrencyHelpers
import PigeonProtocol
import PostgresNIO

/// Processing batches: one transaction per batch, seqs assigned under the conversations' row locks.
extension PostgresMessageStore {
    // MARK: Processing

    public func process(_ items: [ProcessingItem]) async throws -> [ProcessingResult] {
        do {
            return try await processBatch(items)
        } catch let error where Self.isMessageError(error) {
            // Something in the batch was refused by the database (bad data): one message per transaction, so
            // the one at fault fails alone and the rest are stored.
            logger.warning("batch refused by PostgreSQL; processing its messages one by one", metadata: ["error": "\(String(reflecting: error))"])
            var results: [ProcessingResult] = []
            var blocked = Set<String>()
            for item in items {
                if blocked.contains(item.entry.message.conversationId) {
                    results.append(.deferred)
                    continue
                }
                let result: ProcessingResult
                do {
                    result = try await processBatch([item]).first ?? .deferred
                } catch let error where Self.isMessageError(error) {
                    if item.isFinalAttempt {
                        try await deadLetterAlone(item.entry.message, error: error)
                        result = .deadLettered(error)
                    } else {
                        result = .failed(error)
                    }
                }
                if case .failed = result { blocked.insert(item.entry.message.conversationId) }
                results.append(result)
            }
            return results
        }
    }

    /// Whether a database error is about the data of a message (it fails that message) rather than the store
    /// being unavailable (the batch waits and is tried again).
    static func isMessageError(_ error: any Error) -> Bool {
        guard let error = error as? PSQLError, error.code == .server, let state = error.serverInfo?[.sqlState] else { return false }
        // 22: data exception (e.g. a NUL character in text); 23: integrity constraint; 54: program limit exceeded.
        return state.hasPrefix("22") || state.hasPrefix("23") || state.hasPrefix("54")
    }

    func processBatch(_ items: [ProcessingItem]) async throws -> [ProcessingResult] {
        let messages = items.map(\.entry.message)
        let conversationIds = Array(Set(messages.map(\.conversationId))).sorted()
        let missingMembers = conversationIds.filter { id in membersCache.withLockedValue { $0[id] == nil } }
        let (results, committed) = try await transaction { connection -> ([ProcessingResult], [StoredEvent]) in
            var lastSeqs: [String: Int64] = [:]
            for try await (id, lastSeq) in try await connection.query(
                "SELECT id, last_seq FROM conversations WHERE id = ANY(\(conversationIds)) ORDER BY id FOR UPDATE", logger: logger
            ).decode((String, Int64).self) {
                lastSeqs[id] = lastSeq
            }
            if !missingMembers.isEmpty {
                var fetched: [String: [String]] = [:]
                for try await (conversationId, userId) in try await connection.query(
                    "SELECT conversation_id, user_id FROM members WHERE conversation_id = ANY(\(missingMembers)) ORDER BY conversation_id, user_id",
                    logger: logger
                ).decode((String, String).self) {
                    fetched[conversationId, default: []].append(userId)
                }
                membersCache.withLockedValue { cache in cache.merge(fetched) { old, _ in old } }
            }
            // Stored before (a redelivery after a crash between commit and acknowledgement, or a resend whose
            // buffer de-duplication record expired): by serverId or by (sender, device, clientMessageId).
            var storedByServerId: [String: Int64] = [:]
            var storedByClientId: [[String]: Int64] = [:]
            for try await (serverId, senderId, deviceId, clientMessageId, seq) in try await connection.query(
                """
                SELECT m.server_id, m.sender_id, m.sender_device_id, m.client_message_id, m.seq FROM messages m
                WHERE m.server_id = ANY(\(messages.map(\.serverId)))
                UNION ALL
                SELECT m.server_id, m.sender_id, m.sender_device_id, m.client_message_id, m.seq FROM messages m
                JOIN unnest(\(messages.map(\.senderId))::text[], \(messages.map(\.senderDeviceId))::text[],
                    \(messages.map(\.clientMessageId))::text[]) AS k(u, d, c)
                    ON m.sender_id = k.u AND m.sender_device_id = k.d AND m.client_message_id = k.c
                """, logger: logger
            ).decode((String, String, String, String, Int64).self) {
                storedByServerId[serverId] = seq
                storedByClientId[[senderId, deviceId, clientMessageId]] = seq
            }

            let payloads = EventPayload()
            let now = WallClock.nowMillis()
            var results: [ProcessingResult] = []
            results.reserveCapacity(items.count)
            var blocked = Set<String>()
            var rows = MessageRows()
            var deadLetters = DeadLetterRows()
            var events = EventRows()
            var newLastSeqs: [String: Int64] = [:]
            for item in items {
                let message = item.entry.message
                if blocked.contains(message.conversationId) {
                    results.append(.deferred)
                    continue
                }
                if let seq = storedByServerId[message.serverId]
                    ?? storedByClientId[[message.senderId, message.senderDeviceId, message.clientMessageId]]
                {
                    results.append(.alreadyStored(seq: seq))
                    continue
                }
                do {
                    try faultInjector?(message)
                    guard let lastSeq = newLastSeqs[message.conversationId] ?? lastSeqs[message.conversationId],
                        let members = membersCache.withLockedValue({ $0[message.conversationId] }), members.contains(message.senderId)
                    else { throw PigeonError.conversationNotFound }
                    let seq = lastSeq + 1
                    newLastSeqs[message.conversationId] = seq
                    let stored = Message(
                        serverId: message.serverId, clientMessageId: message.clientMessageId, conversationId: message.conversationId,
                        seq: seq, senderId: message.senderId, senderDeviceId: message.senderDeviceId, type: message.type, body: message.body,
                        clientTimestamp: message.clientTimestamp, acceptedAt: message.acceptedAt, storedAt: now)
                    rows.append(stored)
                    let part = partition(of: message.conversationId)
                    let rendered = payloads.messageNew(stored)
                    for userId in members {
                        events.append(
                            type: "message.new", userId: userId,
                            excludedDeviceId: userId == message.senderId ? message.senderDeviceId : nil, payload: nil, at: now,
                            partition: part, message: (message.conversationId, seq, rendered))
                    }
                    let recipients = members.filter { $0 != message.senderId }
                    let online = fanout.onlineDeviceCount(
                        of: recipients, excluding: DeviceIdentity(userId: message.senderId, deviceId: message.senderDeviceId))
                    events.append(
                        type: "message.stored", userId: message.senderId, deviceId: message.senderDeviceId,
                        payload: payloads.messageStored(
                            MessageStoredEvent(
                                conversationId: message.conversationId, serverId: message.serverId,
                                clientMessageId: message.clientMessageId, seq: seq, storedAt: now,
                                recipientsOnline: online)),
                        at: now, partition: part)
                    results.append(.stored(seq: seq))
                } catch {
                    let permanent = (error as? PigeonError)?.isPermanent ?? false
                    if item.isFinalAttempt || permanent {
                        let detail = Self.errorDetail(error)
                        deadLetters.append(message, failedAt: now, error: detail)
                        events.append(
                            type: "message.failed", userId: message.senderId, deviceId: message.senderDeviceId,
                            payload: try payloads.messageFailed(
                                MessageFailedEvent(
                                    conversationId: message.conversationId, serverId: message.serverId,
                                    clientMessageId: message.clientMessageId, error: detail)),
                            at: now, partition: partition(of: message.conversationId))
                        results.append(.deadLettered(error))
                    } else {
                        blocked.insert(message.conversationId)
                        results.append(.failed(error))
                    }
                }
            }
            return (
                results,
                try await write(BatchWrite(messages: rows, deadLetters: deadLetters, lastSeqs: newLastSeqs, events: events, now: now), connection)
            )
        }
        fanout.publish(committed)
        return results
    }

    /// Dead-letters one message in a transaction of its own (after the database refused it). If the database
    /// refuses the dead letter too (text it cannot hold), U+0000 characters are kept as U+FFFD.
    func deadLetterAlone(_ message: BufferedMessage, error: any Error) async throws {
        do {
            try await deadLetterAlone(message, detail: Self.errorDetail(error))
        } catch let refusal where Self.isMessageError(refusal) {
            func storable(_ text: String) -> String { text.replacingOccurrences(of: "\u{0}", with: "\u{FFFD}") }
            var sanitized = message
            sanitized.body = storable(message.body)
            sanitized.type = storable(message.type)
            var detail = Self.errorDetail(error)
            detail.message = storable(detail.message) + " (U+0000 kept as U+FFFD in this dead letter)"
            try await deadLetterAlone(sanitized, detail: detail)
        }
    }

    func deadLetterAlone(_ message: BufferedMessage, detail: ErrorDetail) async throws {
        let now = WallClock.nowMillis()
        var deadLetters = DeadLetterRows()
        deadLetters.append(message, failedAt: now, error: detail)
        var events = EventRows()
        events.append(
            type: "message.failed", userId: message.senderId, deviceId: message.senderDeviceId,
            payload: try EventPayload().messageFailed(
                MessageFailedEvent(
                    conversationId: message.conversationId, serverId: message.serverId, clientMessageId: message.clientMessageId, error: detail)),
            at: now, partition: partition(of: message.conversationId))
        let committed = try await transaction { connection in
            try await write(BatchWrite(deadLetters: deadLetters, events: events, now: now), connection)
        }
        fanout.publish(committed)
    }

    static func errorDetail(_ error: any Error) -> ErrorDetail {
        if let error = error as? PigeonError { return error.detail }
        if let error = error as? PSQLError, let message = error.serverInfo?[.message] {
            return ErrorDetail(code: .invalidRequest, message: "the store refused the message: \(message)")
        }
        return ErrorDetail(code: .internalError, message: "processing failed: \(error)")
    }

    public func status(ofMessage serverId: String) async throws -> (status: ServerMessageStatus, seq: Int64?)? {
        for try await (kind, seq) in try await client.query(
            """
            SELECT 's', seq FROM messages WHERE server_id = \(serverId)
            UNION ALL SELECT 'f', 0 FROM dead_letters WHERE server_id = \(serverId)
            """, logger: logger
        ).decode((String, Int64).self) {
            return kind == "s" ? (.stored, seq) : (.failed, nil)
        }
        return nil
    }
}
