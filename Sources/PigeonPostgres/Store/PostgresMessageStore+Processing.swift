import Foundation
import Logging
import NIOConcurrencyHelpers
import PigeonDomain
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
            var plan = BatchPlan(capacity: items.count)
            for item in items {
                guard plan.shouldAttempt(item) else { continue }
                do {
                    switch try await processBatch([item]).first {
                    case .stored(let seq): plan.stored(seq: seq)
                    case .alreadyStored(let seq): plan.alreadyStored(seq: seq)
                    case .failed(let error), .deadLettered(let error): _ = plan.failed(item, error: error)
                    case .deferred, nil: preconditionFailure("a batch of one message answers for it")
                    }
                } catch let error where Self.isMessageError(error) {
                    if case .deadLetter(let detail) = plan.failed(item, error: error, refusal: Self.refusal(error)) {
                        try await deadLetterAlone(item.entry.message, detail: detail)
                    }
                }
            }
            return plan.results
        }
    }

    /// Whether a database error is about the data of a message (it fails that message) rather than the store
    /// being unavailable (the batch waits and is tried again).
    package static func isMessageError(_ error: any Error) -> Bool {
        guard let error = error as? PSQLError, error.code == .server, let state = error.serverInfo?[.sqlState] else { return false }
        // 22: data exception (e.g. a NUL character in text); 23: integrity constraint; 54: program limit exceeded.
        return state.hasPrefix("22") || state.hasPrefix("23") || state.hasPrefix("54")
    }

    /// Stores a batch: in one statement when this node knows the last seq of each of its conversations from its own
    /// earlier batches (``processTrusting(_:lastSeqs:)``), else (or when that statement fails) in a transaction that
    /// locks the conversations and reads what it needs first (``processLocking(_:)``).
    package func processBatch(_ items: [ProcessingItem]) async throws -> [ProcessingResult] {
        let conversationIds = Array(Set(items.map(\.entry.message.conversationId))).sorted()
        let known = lastSeqCache.withLockedValue { cache in conversationIds.compactMap { id in cache[id].map { (id, $0) } } }
        let membersKnown = conversationIds.allSatisfy { membersCache.contains($0) }
        // An edit or a delete reads its target under a lock first, a reply its quote, a thread reply its root: the
        // locking path.
        let readsMessages = items.contains { item in
            let message = item.entry.message
            return ServerMessageType.isLifecycle(message.type) || message.replyTo != nil || message.threadRoot != nil
        }
        let consentless = consentConversations.withLockedValue { $0.isDisjoint(with: conversationIds) }
        if known.count == conversationIds.count, membersKnown, !readsMessages, consentless {
            do {
                return try await processTrusting(items, lastSeqs: Dictionary(uniqueKeysWithValues: known))
            } catch {
                // Another node stored in one of these conversations meanwhile (a partition moved), a message was
                // stored before (a redelivery), or the database refused something: the locking path finds out which.
                forgetLastSeqs(conversationIds)
                logger.debug("one-statement batch refused; storing it under the conversations' locks", metadata: ["error": "\(String(reflecting: error))"])
            }
        }
        return try await processLocking(items)
    }

    /// The batch in one statement, its own transaction (one round trip instead of five): planned on the last seqs this
    /// node cached, without looking for earlier copies. The statement checks each conversation's last seq under its
    /// row lock and fails as a whole if one moved; an earlier copy of a message (a redelivery) fails it on the unique
    /// indexes. Either way nothing is written and the caller takes the locking path.
    package func processTrusting(_ items: [ProcessingItem], lastSeqs: [String: Int64]) async throws -> [ProcessingResult] {
        let clock = ContinuousClock()
        let started = clock.now
        let members = Dictionary(uniqueKeysWithValues: lastSeqs.keys.compactMap { id in membersCache[id].map { (id, $0) } })
        var (results, batch) = try plan(items, lastSeqs: lastSeqs, storedBefore: StoredBefore(), members: members, targets: [:], consent: BatchConsent())
        batch.expectedLastSeqs = lastSeqs
        // Planned as if no member blocked a sender or were invited: the statement checks it (else the locking path).
        batch.consentCheck = Array(Set(items.map { [$0.entry.message.senderId, $0.entry.message.conversationId] }))
        let committed = try await client.withConnection { [stageTimer] connection in
            let leased = clock.now
            stageTimer.record(.connection, leased - started)
            let committed = try await write(batch, connection)
            stageTimer.record(.write, clock.now - leased)
            return committed
        }
        rememberLastSeqs(batch.lastSeqs)
        fanout.publish(committed)
        return results
    }

    /// The batch in a transaction that first locks its conversations (`FOR UPDATE`, in id order) and reads their last
    /// seqs, their members (a membership change holds the same lock, so they are the current ones), the messages its
    /// edits, deletes, replies and thread replies name (locked, in serverId order: a thread root's summary changes, and
    /// a delete takes its target's reactions, which ``react(conversationId:serverId:userId:key:action:at:)`` writes
    /// under the same lock), and earlier copies of its messages. After the batch's rows, the summaries of the thread
    /// roots it changed are written.
    package func processLocking(_ items: [ProcessingItem]) async throws -> [ProcessingResult] {
        let messages = items.map(\.entry.message)
        let conversationIds = Array(Set(messages.map(\.conversationId))).sorted()
        let generations = conversationIds.map { membersCache.generation(of: $0) }
        var targetIds = Set(messages.compactMap { try? MessageLifecycle.target(of: $0)?.serverId })
        for message in messages {
            if let replyTo = message.replyTo { targetIds.insert(replyTo) }
            if let threadRoot = message.threadRoot { targetIds.insert(threadRoot) }
        }
        let clock = ContinuousClock()
        let (results, committed, lastSeqs) = try await timedTransaction { connection -> ([ProcessingResult], [StoredEvent], [String: Int64]) in
            let reading = clock.now
            var lastSeqs: [String: Int64] = [:]
            for try await (id, lastSeq) in try await connection.query(
                "SELECT id, last_seq FROM conversations WHERE id = ANY(\(conversationIds)) ORDER BY id FOR UPDATE", logger: logger
            ).decode((String, Int64).self) {
                lastSeqs[id] = lastSeq
            }
            var members: [String: [String]] = [:]
            var consent = BatchConsent()
            for try await (conversationId, userId, membership) in try await connection.query(
                """
                SELECT conversation_id, user_id, membership FROM members WHERE conversation_id = ANY(\(conversationIds))
                ORDER BY conversation_id, user_id
                """,
                logger: logger
            ).decode((String, String, String).self) {
                members[conversationId, default: []].append(userId)
                if membership == MembershipState.invited.rawValue { consent.invited[conversationId, default: []].insert(userId) }
            }
            for try await (blocked, blocker) in try await connection.query(
                "SELECT blocked, blocker FROM blocks WHERE blocked = ANY(\(Array(Set(messages.map(\.senderId)))))", logger: logger
            ).decode((String, String).self) {
                consent.blockers[blocked, default: []].insert(blocker)
            }
            rememberConsent(consent, messages: messages, members: members)
            for (conversationId, generation) in zip(conversationIds, generations) {
                if let list = members[conversationId] { membersCache.store(list, for: conversationId, ifGeneration: generation) }
            }
            var targets: [String: StoredTarget] = [:]
            if !targetIds.isEmpty {
                for try await row in try await connection.query(
                    """
                    SELECT \(unescaped: Self.messageColumns) FROM messages
                    WHERE server_id = ANY(\(targetIds.sorted())) ORDER BY server_id FOR UPDATE
                    """, logger: logger
                ).decode(MessageTuple.self) {
                    let message = try Self.message(row, cipher: cipher)
                    targets[message.serverId] = StoredTarget(message)
                }
            }
            let quoted = Set(messages.compactMap(\.replyTo)).filter { targets[$0] != nil }
            if !quoted.isEmpty {
                // Who is shown a quoted message otherwise (``QuoteViews``): the members who joined after it and those it
                // is hidden from may not read it; those an edit of it was hidden from read their own version.
                for try await (serverId, userId, body) in try await connection.query(
                    """
                    SELECT t.server_id, me.user_id, NULL::text FROM messages t JOIN members me ON me.conversation_id = t.conversation_id
                    WHERE t.server_id = ANY(\(quoted.sorted())) AND (me.joined_seq > t.seq OR EXISTS (
                        SELECT 1 FROM hidden_messages h WHERE h.conversation_id = t.conversation_id AND h.seq = t.seq AND h.user_id = me.user_id))
                    UNION ALL
                    SELECT t.server_id, v.user_id, v.body FROM messages t
                    JOIN message_views v ON v.conversation_id = t.conversation_id AND v.seq = t.seq
                    WHERE t.server_id = ANY(\(quoted.sorted())) AND t.edited_at IS NOT NULL
                    """, logger: logger
                ).decode((String, String, String?).self) {
                    if let body {
                        let opened: String = try cipher.open(body)
                        targets[serverId]?.quoteViews.bodies[userId] = opened
                    } else {
                        targets[serverId]?.quoteViews.blind.insert(userId)
                    }
                }
            }
            // Stored before (a redelivery after a crash between commit and acknowledgement, or a resend whose
            // buffer de-duplication record expired): by serverId or by (sender, device, clientMessageId).
            var storedBefore = StoredBefore()
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
                storedBefore.byServerId[serverId] = seq
                storedBefore.byClientId[[senderId, deviceId, clientMessageId]] = seq
            }
            try await decorateEditTargets(&targets, of: messages, connection)
            stageTimer.record(.read, clock.now - reading)
            let (results, batch) = try plan(items, lastSeqs: lastSeqs, storedBefore: storedBefore, members: members, targets: targets, consent: consent)
            let writing = clock.now
            let committed = try await write(batch, connection)
            try await writeThreads(batch.threads, connection)
            try await writeViews(batch.views, connection)
            stageTimer.record(.write, clock.now - writing)
            return (results, committed, lastSeqs.merging(batch.lastSeqs) { _, new in new })
        }
        rememberLastSeqs(lastSeqs)
        fanout.publish(committed)
        return results
    }

    /// A message stored before the batch that one of its messages names (by serverId): what an edit, a delete, a
    /// reply's preview or a thread reply needs of it.
    package struct StoredTarget {
        package var conversationId: String
        package var target: MessageTarget
        package var body: String
        package var thread: ThreadSummary?
        /// The whole message as stored (what `message.edited` starts from).
        package var message: Message
        /// For a message a reply quotes: who is shown it otherwise than as stored.
        package var quoteViews = QuoteViews()

        package init(_ message: Message) {
            self.message = message
            conversationId = message.conversationId
            target = MessageTarget(
                senderId: message.senderId, type: message.type, deleted: message.deletedAt != nil, seq: message.seq, threadRoot: message.threadRoot)
            body = message.body
            thread = message.thread
        }
    }

    /// Writes the summaries of the thread roots a batch changed, after its messages (so that a recomputed summary
    /// counts the batch's own replies and deletes): new replies only, the summary planned on the locked root's; a
    /// deleted reply, recomputed from the replies left (count, the newest one's store time, its newest distinct senders).
    /// Writes what a batch's edits and deletes do to the members' kept versions (``ViewChanges``), round by round.
    package func writeViews(_ views: ViewChanges, _ connection: PostgresConnection) async throws {
        for round in views.rounds {
            let cleared = round.map(\.target)
            try await connection.query(
                """
                DELETE FROM message_views v USING unnest(\(cleared.map(\.conversationId))::text[], \(cleared.map(\.seq))::bigint[],
                    \(round.map { $0.keeping.joined(separator: "\n") })::text[]) AS k(c, s, keep)
                WHERE v.conversation_id = k.c AND v.seq = k.s AND v.user_id <> ALL(string_to_array(k.keep, E'\\n'))
                """, logger: logger)
            let kept = round.flatMap { change in change.keeping.map { (change, $0) } }
            guard !kept.isEmpty else { continue }
            try await connection.query(
                """
                INSERT INTO message_views(conversation_id, seq, user_id, body, edited_at)
                SELECT k.c, k.s, k.u, k.b, NULLIF(k.e, 0) FROM unnest(\(kept.map(\.0.target.conversationId))::text[], \(kept.map(\.0.target.seq))::bigint[],
                    \(kept.map(\.1))::text[], \(cipher.seal(all: kept.map(\.0.body)))::text[], \(kept.map { $0.0.editedAt ?? 0 })::bigint[])
                    AS k(c, s, u, b, e)
                ON CONFLICT DO NOTHING
                """, logger: logger)
        }
    }

    package func writeThreads(_ threads: ThreadRows, _ connection: PostgresConnection) async throws {
        guard !threads.isEmpty else { return }
        let roots = threads.summaries.keys.sorted()
        let summaries = roots.map { threads.summaries[$0]! }
        try await connection.query(
            """
            WITH added AS (
                UPDATE messages m SET thread_count = t.n, thread_last_at = t.at, thread_senders = t.s
                FROM unnest(\(roots)::text[], \(summaries.map { Int32($0.replyCount) })::integer[], \(summaries.map(\.lastReplyAt))::bigint[],
                    \(summaries.map { ReplyRules.sendersText($0.lastReplySenders) })::text[]) AS t(id, n, at, s)
                WHERE m.server_id = t.id),
            recomputed AS (
                SELECT r.server_id AS id,
                    (SELECT count(*) FROM messages x
                        WHERE x.conversation_id = r.conversation_id AND x.thread_root = r.server_id AND x.deleted_at IS NULL) AS n,
                    (SELECT x.stored_at FROM messages x
                        WHERE x.conversation_id = r.conversation_id AND x.thread_root = r.server_id AND x.deleted_at IS NULL
                        ORDER BY x.seq DESC LIMIT 1) AS at,
                    (SELECT string_agg(s.sender_id, ',' ORDER BY s.newest DESC) FROM (
                        SELECT x.sender_id, max(x.seq) AS newest FROM messages x
                        WHERE x.conversation_id = r.conversation_id AND x.thread_root = r.server_id AND x.deleted_at IS NULL
                        GROUP BY x.sender_id ORDER BY newest DESC LIMIT \(ThreadSummary.senderLimit)) s) AS s
                FROM messages r WHERE r.server_id = ANY(\(threads.recomputed.sorted())))
            UPDATE messages m SET thread_count = r.n, thread_last_at = r.at, thread_senders = r.s
            FROM recomputed r WHERE m.server_id = r.id
            """, logger: logger)
    }

    /// Who in a batch's conversations gets no `message.new` of whom: the invited members of each conversation, and who
    /// blocks each sender (anywhere; ``MessageEvents/hiddenFrom(_:blockers:members:)`` keeps the members).
    package struct BatchConsent {
        package var invited: [String: Set<String>] = [:]
        package var blockers: [String: Set<String>] = [:]

        package init() {}
    }

    /// Remembers the conversations of a batch where a member blocks a sender or is invited: their batches take the
    /// locking path from now on (the one-statement path would refuse them).
    private func rememberConsent(_ consent: BatchConsent, messages: [BufferedMessage], members: [String: [String]]) {
        var found = Set(consent.invited.keys)
        for message in messages {
            if let blockers = consent.blockers[message.senderId], let list = members[message.conversationId], !blockers.isDisjoint(with: list) {
                found.insert(message.conversationId)
            }
        }
        guard !found.isEmpty else { return }
        consentConversations.withLockedValue { known in
            if known.count + found.count > Self.lastSeqCacheLimit { known.removeAll(keepingCapacity: true) }
            known.formUnion(found)
        }
    }

    /// Messages of a batch stored before, with their seqs.
    package struct StoredBefore {
        package var byServerId: [String: Int64] = [:]
        /// By [sender, device, clientMessageId].
        package var byClientId: [[String]: Int64] = [:]
    }

    /// What a batch writes and what each of its messages comes to, given its conversations' last seqs (a conversation
    /// missing there is gone), members and messages stored before, and the targets of its edits and deletes stored
    /// before it (by serverId, with their conversation).
    package func plan(
        _ items: [ProcessingItem], lastSeqs: [String: Int64], storedBefore: StoredBefore, members membersByConversation: [String: [String]],
        targets: [String: StoredTarget], consent: BatchConsent = BatchConsent()
    ) throws -> ([ProcessingResult], BatchWrite) {
        let payloads = EventPayload()
        let now = WallClock.nowMillis()
        var plan = BatchPlan(capacity: items.count)
        var batch = BatchWrite(now: now)
        /// serverId → the members each message of this batch is hidden from (a reply later in the batch may quote it).
        var hiddenInBatch: [String: QuoteViews] = [:]
        for item in items {
            let message = item.entry.message
            guard plan.shouldAttempt(item) else { continue }
            if let seq = storedBefore.byServerId[message.serverId]
                ?? storedBefore.byClientId[[message.senderId, message.senderDeviceId, message.clientMessageId]]
            {
                plan.alreadyStored(seq: seq)
                continue
            }
            do {
                try faultInjector?(message)
                guard let lastSeq = batch.lastSeqs[message.conversationId] ?? lastSeqs[message.conversationId] else {
                    throw PigeonError.conversationNotFound
                }
                let members = try MessageEvents.members(membersByConversation[message.conversationId], admitting: message)
                let lifecycle = try MessageLifecycle.target(of: message)
                if let lifecycle {
                    if let refusal = MessageLifecycle.refusal(message, target: batch.target(lifecycle.serverId, in: message.conversationId, stored: targets)) {
                        throw refusal
                    }
                }
                try Self.checkRelations(message, batch: batch, stored: targets)
                let seq = lastSeq + 1
                batch.lastSeqs[message.conversationId] = seq
                var stored = MessageEvents.stored(message, seq: seq, storedAt: now)
                batch.messages.append(stored, targetId: lifecycle?.serverId)
                if let lifecycle {
                    if let before = batch.current(lifecycle.serverId, in: message.conversationId, stored: targets) {
                        // The members this edit is hidden from keep the version they were shown; a delete erases them all.
                        let hiddenFrom =
                            lifecycle.newBody == nil
                            ? [] : MessageEvents.hiddenFrom(message, blockers: consent.blockers[message.senderId] ?? [], members: members)
                        batch.views.change(conversationId: message.conversationId, seq: before.seq, keeping: hiddenFrom, body: before.body, editedAt: before.editedAt)
                    }
                    batch.apply(targetId: lifecycle.serverId, newBody: lifecycle.newBody, at: now, stored: targets)
                }
                if let replyTo = message.replyTo { stored.replyPreview = batch.preview(of: replyTo, in: message.conversationId, stored: targets) }
                recordStoredWebhooks(into: &batch, message: message, stored: stored, lifecycle: lifecycle, targets: targets, at: now)
                if let threadRoot = message.threadRoot {
                    batch.threads.addReply(
                        to: threadRoot, by: message.senderId, at: now,
                        before: batch.messages.index(of: threadRoot) == nil ? targets[threadRoot]?.thread : nil)
                }
                let part = partition(of: message.conversationId)
                let hidden = MessageEvents.hiddenFrom(message, blockers: consent.blockers[message.senderId] ?? [], members: members)
                var withheld = Set(hidden)
                withheld.formUnion(consent.invited[message.conversationId] ?? [])
                for user in hidden { batch.hidden.append(conversationId: message.conversationId, seq: seq, userId: user, senderId: message.senderId) }
                if !hidden.isEmpty { hiddenInBatch[message.serverId] = QuoteViews(blind: Set(hidden)) }
                let quotes = message.replyTo.map { targets[$0]?.quoteViews ?? hiddenInBatch[$0] ?? QuoteViews() } ?? QuoteViews()
                let writes = MessageEvents.writes(
                    of: message, stored: stored, members: members, withheld: withheld, hidden: hidden, quotes: quotes, presence: fanout,
                    payloads: payloads)
                for recipient in writes.newRecipients {
                    batch.events.append(
                        type: "message.new", userId: recipient.userId, excludedDeviceId: recipient.excludedDeviceId, payload: nil, at: now,
                        partition: part, message: (message.conversationId, seq, writes.newPayload(for: recipient.userId)))
                }
                batch.events.append(
                    type: "message.stored", userId: message.senderId, deviceId: message.senderDeviceId, payload: writes.storedPayload,
                    at: now, partition: part)
                plan.stored(seq: seq)
            } catch {
                if case .deadLetter(let detail) = plan.failed(item, error: error, refusal: Self.refusal(error)) {
                    batch.deadLetters.append(message, failedAt: now, error: detail)
                    batch.events.append(
                        type: "message.failed", userId: message.senderId, deviceId: message.senderDeviceId,
                        payload: try payloads.messageFailed(MessageEvents.failed(message, error: detail)),
                        at: now, partition: partition(of: message.conversationId))
                }
            }
        }
        return (plan.results, batch)
    }

    /// Checks a message's `replyTo` and `threadRoot` once more where it is stored (accept checked them): a target that
    /// is not a message of its conversation fails it (`not_found`, permanent), and so does a root that is itself in a
    /// thread (`invalid_request`). A target deleted since is no reason to fail: its quote says so.
    package static func checkRelations(_ message: BufferedMessage, batch: BatchWrite, stored: [String: StoredTarget]) throws {
        if let replyTo = message.replyTo, batch.target(replyTo, in: message.conversationId, stored: stored) == nil {
            throw PigeonError(.notFound, "replyTo \(replyTo) is not a message of this conversation")
        }
        if let root = message.threadRoot {
            guard let target = batch.target(root, in: message.conversationId, stored: stored) else {
                throw PigeonError(.notFound, "threadRoot \(root) is not a message of this conversation")
            }
            if target.threadRoot != nil { throw PigeonError.invalid("threadRoot \(root) is itself in a thread") }
        }
    }

    /// Most conversations whose last seq a node keeps (the cache starts over when it would hold more).
    package static let lastSeqCacheLimit = 100_000

    package func rememberLastSeqs(_ lastSeqs: [String: Int64]) {
        lastSeqCache.withLockedValue { cache in
            if cache.count + lastSeqs.count > Self.lastSeqCacheLimit { cache.removeAll(keepingCapacity: true) }
            cache.merge(lastSeqs) { _, new in new }
        }
    }

    package func forgetLastSeqs(_ conversationIds: [String]) {
        lastSeqCache.withLockedValue { cache in for id in conversationIds { cache[id] = nil } }
    }

    /// Dead-letters one message in a transaction of its own (after the database refused it). If the database
    /// refuses the dead letter too (text it cannot hold), U+0000 characters are kept as U+FFFD.
    /// Dead-letters one message with `detail` in a transaction of its own (after the database refused it). If the
    /// database refuses the dead letter too (text it cannot hold), U+0000 characters are kept as U+FFFD.
    package func deadLetterAlone(_ message: BufferedMessage, detail: ErrorDetail) async throws {
        do {
            try await writeDeadLetter(message, detail: detail)
        } catch let refusal where Self.isMessageError(refusal) {
            func storable(_ text: String) -> String { text.replacingOccurrences(of: "\u{0}", with: "\u{FFFD}") }
            var sanitized = message
            sanitized.body = storable(message.body)
            sanitized.type = storable(message.type)
            var detail = detail
            detail.message = storable(detail.message) + " (U+0000 kept as U+FFFD in this dead letter)"
            try await writeDeadLetter(sanitized, detail: detail)
        }
    }

    private func writeDeadLetter(_ message: BufferedMessage, detail: ErrorDetail) async throws {
        let now = WallClock.nowMillis()
        var deadLetters = DeadLetterRows()
        deadLetters.append(message, failedAt: now, error: detail)
        var events = EventRows()
        events.append(
            type: "message.failed", userId: message.senderId, deviceId: message.senderDeviceId,
            payload: try EventPayload().messageFailed(MessageEvents.failed(message, error: detail)),
            at: now, partition: partition(of: message.conversationId))
        let committed = try await transaction { connection in
            try await write(BatchWrite(deadLetters: deadLetters, events: events, now: now), connection)
        }
        fanout.publish(committed)
    }

    /// PostgreSQL's words when it refused a message's data (``isMessageError(_:)``), for the dead letter.
    package static func refusal(_ error: any Error) -> String? {
        (error as? PSQLError)?.serverInfo?[.message]
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
