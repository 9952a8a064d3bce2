import Logging
import PigeonDomain
import PostgresNIO

/// The PostgreSQL store's schema: versioned migrations, applied in order at start-up.
///
/// Each migration runs in its own transaction under a session advisory lock, so nodes that start together
/// apply it once. A database with a version newer than this build knows is refused (an older node must not
/// write into a schema it does not understand).
package enum PostgresSchema {
    /// Seed of the advisory lock that serialises migrations and layout changes of one schema (deployments in other
    /// schemas of the database do not wait for each other).
    package static let migrationLock: Int64 = 0x7069_6765_6f6e_0001

    /// Takes the schema's migration lock (a session lock of this connection).
    package static func lockSchema(_ connection: PostgresConnection, logger: Logger) async throws {
        try await connection.query("SELECT pg_advisory_lock(hashtextextended(current_schema(), \(migrationLock)))", logger: logger)
    }

    package static func unlockSchema(_ connection: PostgresConnection, logger: Logger) async throws {
        try await connection.query("SELECT pg_advisory_unlock(hashtextextended(current_schema(), \(migrationLock)))", logger: logger)
    }

    package static let migrations: [(version: Int, sql: [String])] = [
        (
            1,
            [
                "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL)",
                """
                CREATE TABLE devices(
                    id TEXT PRIMARY KEY,
                    user_id TEXT NOT NULL,
                    name TEXT,
                    token_hash TEXT NOT NULL UNIQUE,
                    created_at BIGINT NOT NULL)
                """,
                "CREATE INDEX devices_user ON devices(user_id)",
                """
                CREATE TABLE conversations(
                    id TEXT PRIMARY KEY,
                    name TEXT,
                    created_by TEXT NOT NULL,
                    created_at BIGINT NOT NULL,
                    last_seq BIGINT NOT NULL DEFAULT 0)
                """,
                """
                CREATE TABLE members(
                    conversation_id TEXT NOT NULL REFERENCES conversations(id),
                    user_id TEXT NOT NULL,
                    delivered_seq BIGINT NOT NULL DEFAULT 0,
                    read_seq BIGINT NOT NULL DEFAULT 0,
                    PRIMARY KEY(conversation_id, user_id))
                """,
                "CREATE INDEX members_user ON members(user_id, conversation_id)",
                """
                CREATE TABLE messages(
                    conversation_id TEXT NOT NULL,
                    seq BIGINT NOT NULL,
                    server_id TEXT NOT NULL UNIQUE,
                    client_message_id TEXT NOT NULL,
                    sender_id TEXT NOT NULL,
                    sender_device_id TEXT NOT NULL,
                    type TEXT NOT NULL,
                    body TEXT NOT NULL,
                    client_timestamp BIGINT NOT NULL,
                    accepted_at BIGINT NOT NULL,
                    stored_at BIGINT NOT NULL,
                    PRIMARY KEY(conversation_id, seq),
                    UNIQUE(sender_device_id, client_message_id))
                """,
                // One row: the last event id handed out. Writers bump it inside their transaction, so its row lock
                // orders event ids by commit (a reader that sees id n has seen every id below it).
                "CREATE TABLE event_counter(only_row BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (only_row), last_id BIGINT NOT NULL)",
                "INSERT INTO event_counter(last_id) VALUES (0)",
                """
                CREATE TABLE events(
                    id BIGINT PRIMARY KEY,
                    user_id TEXT NOT NULL,
                    device_id TEXT,
                    excluded_device_id TEXT,
                    type TEXT NOT NULL,
                    created_at BIGINT NOT NULL,
                    conversation_id TEXT,
                    seq BIGINT,
                    payload TEXT)
                """,
                "CREATE INDEX events_user ON events(user_id, id)",
                """
                CREATE TABLE dead_letters(
                    server_id TEXT PRIMARY KEY,
                    conversation_id TEXT NOT NULL,
                    client_message_id TEXT NOT NULL,
                    sender_id TEXT NOT NULL,
                    sender_device_id TEXT NOT NULL,
                    type TEXT NOT NULL,
                    body TEXT NOT NULL,
                    client_timestamp BIGINT NOT NULL,
                    accepted_at BIGINT NOT NULL,
                    failed_at BIGINT NOT NULL,
                    error_code TEXT NOT NULL,
                    error_message TEXT NOT NULL)
                """,
                "CREATE INDEX dead_letters_failed ON dead_letters(failed_at)",
            ]
        ),
        (
            2,
            [
                // Which devices have a stream open on which node, for `recipientsOnline` across nodes. A node that
                // stops heart-beating (crashed) is ignored after a few seconds and its rows are removed.
                "CREATE TABLE nodes(node_id TEXT PRIMARY KEY, seen_at BIGINT NOT NULL)",
                """
                CREATE TABLE presence(
                    node_id TEXT NOT NULL,
                    device_id TEXT NOT NULL,
                    user_id TEXT NOT NULL,
                    PRIMARY KEY(node_id, device_id))
                """,
                "CREATE INDEX presence_user ON presence(user_id)",
            ]
        ),
        (
            3,
            [
                // An event written for every member (`conversation.created`, `receipt`) keeps its payload once: its
                // id is the id of the first event pointing at it (they are consecutive events), and it is pruned with
                // the last one.
                "CREATE TABLE event_payloads(id BIGINT PRIMARY KEY, payload TEXT NOT NULL)",
                "ALTER TABLE events ADD COLUMN payload_id BIGINT",
                // A device id is only unique within its user (JWT `did` claims are the issuer's): de-duplicate by all three.
                "CREATE UNIQUE INDEX messages_client_id ON messages(sender_id, sender_device_id, client_message_id)",
                "ALTER TABLE messages DROP CONSTRAINT IF EXISTS messages_sender_device_id_client_message_id_key",
                // The order of the paginated conversation list: the store time of the newest message, else creation.
                "ALTER TABLE conversations ADD COLUMN updated_at BIGINT NOT NULL DEFAULT 0",
                """
                UPDATE conversations c SET updated_at = COALESCE(
                    (SELECT MAX(m.stored_at) FROM messages m WHERE m.conversation_id = c.id), c.created_at)
                """,
            ]
        ),
        (
            4,
            [
                // The event log in partitions (a conversation's events all in one, by EventPartitioning): each
                // partition's offsets come from its own row, locked by its writers to their commit, so offsets follow
                // commit order within a partition and writers of different partitions share no row. The one-row
                // `event_counter` every writer locked is gone; its events stay, with their ids, in partition 0.
                """
                CREATE TABLE event_partitions(
                    part INTEGER PRIMARY KEY,
                    last_offset BIGINT NOT NULL DEFAULT 0,
                    pruned_through BIGINT NOT NULL DEFAULT 0)
                """,
                """
                INSERT INTO event_partitions(part, last_offset, pruned_through)
                SELECT 0, last_id, COALESCE((SELECT value::bigint FROM meta WHERE key = 'pruned_through'), 0) FROM event_counter
                """,
                "DROP TABLE event_counter",
                "DELETE FROM meta WHERE key = 'pruned_through'",
                "INSERT INTO meta(key, value) VALUES ('event_partitions', '1')",
                "ALTER TABLE events ADD COLUMN part INTEGER NOT NULL DEFAULT 0",
                "ALTER TABLE events DROP CONSTRAINT events_pkey",
                "ALTER TABLE events ADD PRIMARY KEY (part, id)",
                "DROP INDEX events_user",
                "CREATE INDEX events_user ON events(user_id, part, id)",
                // Presence mirrored in every node's memory: each node's change sets are versioned, so that the
                // others apply them in order and reload on a gap. A device id is unique only within its user.
                "ALTER TABLE nodes ADD COLUMN presence_version BIGINT NOT NULL DEFAULT 0",
                "ALTER TABLE presence DROP CONSTRAINT presence_pkey",
                "ALTER TABLE presence ADD PRIMARY KEY (node_id, user_id, device_id)",
                "ALTER TABLE event_payloads ADD COLUMN part INTEGER NOT NULL DEFAULT 0",
                "ALTER TABLE event_payloads DROP CONSTRAINT event_payloads_pkey",
                "ALTER TABLE event_payloads ADD PRIMARY KEY (part, id)",
                // Takes `counts[i]` offsets in partition `parts[i]`, locking the partitions' rows in partition order
                // (so two writers of several partitions cannot deadlock); answers the first offset of each.
                """
                CREATE FUNCTION pigeon_take_offsets(parts INTEGER[], counts BIGINT[])
                RETURNS TABLE(taken_part INTEGER, first_offset BIGINT) LANGUAGE plpgsql AS $$
                DECLARE
                    i INTEGER;
                BEGIN
                    FOR i IN SELECT s FROM generate_subscripts(parts, 1) AS s ORDER BY parts[s] LOOP
                        UPDATE event_partitions SET last_offset = last_offset + counts[i] WHERE part = parts[i]
                            RETURNING part, last_offset - counts[i] + 1 INTO taken_part, first_offset;
                        IF NOT FOUND THEN
                            RAISE EXCEPTION 'event partition % does not exist', parts[i];
                        END IF;
                        RETURN NEXT;
                    END LOOP;
                END
                $$
                """,
            ]
        ),
        (
            5,
            [
                // Fails the statement it is part of (and so its implicit transaction) unless `ok`: the one-statement
                // batch of a node that trusts its cached last seqs checks them with it (+Processing).
                """
                CREATE FUNCTION pigeon_check(ok BOOLEAN, problem TEXT) RETURNS BOOLEAN LANGUAGE plpgsql AS $$
                BEGIN
                    IF ok IS NOT TRUE THEN
                        RAISE EXCEPTION 'pigeon: %', problem USING ERRCODE = 'PGSTL';
                    END IF;
                    RETURN TRUE;
                END
                $$
                """,
            ]
        ),
        (
            6,
            [
                // API.md 1.1: a conversation's kind (existing unnamed two-member ones are direct), a member's role (the
                // creator is the owner) and the seq it joined at (0 for founding members).
                "ALTER TABLE conversations ADD COLUMN kind TEXT NOT NULL DEFAULT 'group'",
                """
                UPDATE conversations c SET kind = 'direct'
                WHERE c.name IS NULL AND (SELECT count(*) FROM members m WHERE m.conversation_id = c.id) = 2
                """,
                "ALTER TABLE members ADD COLUMN role TEXT NOT NULL DEFAULT 'member'",
                "ALTER TABLE members ADD COLUMN joined_seq BIGINT NOT NULL DEFAULT 0",
                "UPDATE members m SET role = 'owner' FROM conversations c WHERE c.id = m.conversation_id AND m.user_id = c.created_by",
            ]
        ),
        (
            7,
            [
                // API.md 1.1, devices: a device is the pair (user, device id), so that JWT `did`s of different users never
                // collide; a device seen through a JWT has no token hash. A revoked device keeps its row (its user still
                // counts as having had a device): `revoked_at` is set while it is revoked, `last_revoked_at` keeps the
                // latest revocation (a JWT device seen again with a newer token is listed again, older tokens stay
                // refused), and `revocation_seq` orders the revocations the nodes follow (+Devices, PostgresFanout).
                "ALTER TABLE devices DROP CONSTRAINT devices_pkey",
                "ALTER TABLE devices ADD PRIMARY KEY (user_id, id)",
                "DROP INDEX devices_user",
                "ALTER TABLE devices ALTER COLUMN token_hash DROP NOT NULL",
                "ALTER TABLE devices ADD COLUMN last_seen_at BIGINT",
                "UPDATE devices SET last_seen_at = created_at",
                "ALTER TABLE devices ALTER COLUMN last_seen_at SET NOT NULL",
                "ALTER TABLE devices ADD COLUMN revoked_at BIGINT",
                "ALTER TABLE devices ADD COLUMN last_revoked_at BIGINT",
                "ALTER TABLE devices ADD COLUMN revocation_seq BIGINT",
                "CREATE SEQUENCE device_revocation_seq",
                "CREATE INDEX devices_revocation ON devices(revocation_seq) WHERE revocation_seq IS NOT NULL",
            ]
        ),
        (
            8,
            [
                // API.md 1.1, edit and delete: when a message was last edited or deleted, and the target a pigeon.edit or
                // pigeon.delete names (a delete erases the text of the target's earlier edits too).
                "ALTER TABLE messages ADD COLUMN target_id TEXT",
                "ALTER TABLE messages ADD COLUMN edited_at BIGINT",
                "ALTER TABLE messages ADD COLUMN deleted_at BIGINT",
                "CREATE INDEX messages_target ON messages(target_id) WHERE target_id IS NOT NULL",
            ]
        ),
        (
            9,
            [
                // API.md 1.1, push: a device's registration (a pushkey belongs to one device of an app), the push owed
                // to each device (one row, the newest message: bursts coalesce; claimed by one node at a time with a
                // lease), and how far the dispatchers have read each partition of the event log (one row, locked by
                // the node that scans; from the log's head at this migration: history is never pushed).
                """
                CREATE TABLE push_registrations(
                    user_id TEXT NOT NULL,
                    device_id TEXT NOT NULL,
                    kind TEXT NOT NULL,
                    app_id TEXT NOT NULL,
                    pushkey TEXT NOT NULL,
                    data TEXT,
                    updated_at BIGINT NOT NULL,
                    last_pushed_at BIGINT,
                    PRIMARY KEY (user_id, device_id))
                """,
                "CREATE UNIQUE INDEX push_registrations_pushkey ON push_registrations(app_id, pushkey)",
                """
                CREATE TABLE push_pending(
                    user_id TEXT NOT NULL,
                    device_id TEXT NOT NULL,
                    conversation_id TEXT NOT NULL,
                    seq BIGINT NOT NULL,
                    stored_at BIGINT NOT NULL,
                    owed_since BIGINT NOT NULL,
                    due_at BIGINT NOT NULL,
                    attempts INTEGER NOT NULL DEFAULT 0,
                    claimed_until BIGINT NOT NULL DEFAULT 0,
                    claimed_by TEXT,
                    PRIMARY KEY (user_id, device_id))
                """,
                "CREATE INDEX push_pending_due ON push_pending(due_at)",
                "CREATE TABLE push_cursor(id INTEGER PRIMARY KEY CHECK (id = 1), offsets BIGINT[] NOT NULL)",
                "INSERT INTO push_cursor(id, offsets) SELECT 1, COALESCE(array_agg(last_offset ORDER BY part), '{}') FROM event_partitions",
            ]
        ),
        (
            10,
            [
                // API.md 1.2, replies and threads: the message a message quotes and the thread it is in; a thread root
                // keeps its thread's summary (replies not deleted, the newest one's store time, its newest distinct
                // senders joined by commas), updated by the transaction that stores or deletes a reply.
                "ALTER TABLE messages ADD COLUMN reply_to TEXT",
                "ALTER TABLE messages ADD COLUMN thread_root TEXT",
                "ALTER TABLE messages ADD COLUMN thread_count INTEGER NOT NULL DEFAULT 0",
                "ALTER TABLE messages ADD COLUMN thread_last_at BIGINT",
                "ALTER TABLE messages ADD COLUMN thread_senders TEXT",
                "CREATE INDEX messages_thread ON messages(conversation_id, thread_root, seq) WHERE thread_root IS NOT NULL",
                "ALTER TABLE dead_letters ADD COLUMN reply_to TEXT",
                "ALTER TABLE dead_letters ADD COLUMN thread_root TEXT",
                // API.md 1.2, reactions: one row per (message, key, user); a message's rows go with its delete.
                """
                CREATE TABLE reactions(
                    conversation_id TEXT NOT NULL,
                    seq BIGINT NOT NULL,
                    key TEXT NOT NULL,
                    user_id TEXT NOT NULL,
                    at BIGINT NOT NULL,
                    PRIMARY KEY (conversation_id, seq, key, user_id))
                """,
            ]
        ),
        (
            11,
            [
                // API.md 1.2, attachments. The bytes are stored once per content (`sha256`) as chunks of
                // PostgresAttachmentStore.chunkSize; an upload stages its chunks under a blob id taken from the sequence
                // before the blob's row exists (hence the deferred key), and drops them when equal bytes are stored already.
                // Chunks are kept out of line uncompressed: media does not compress, and a range is read without
                // fetching the whole chunk.
                "CREATE SEQUENCE attachment_blob_ids",
                """
                CREATE TABLE attachment_blobs(
                    id BIGINT PRIMARY KEY DEFAULT nextval('attachment_blob_ids'),
                    sha256 TEXT NOT NULL UNIQUE,
                    size BIGINT NOT NULL)
                """,
                """
                CREATE TABLE attachment_chunks(
                    blob_id BIGINT NOT NULL REFERENCES attachment_blobs(id) ON DELETE CASCADE DEFERRABLE INITIALLY DEFERRED,
                    n INTEGER NOT NULL,
                    data BYTEA NOT NULL,
                    PRIMARY KEY (blob_id, n))
                """,
                "ALTER TABLE attachment_chunks ALTER COLUMN data SET STORAGE EXTERNAL",
                // An upload: its own row whatever it shares, naming its bytes (which cannot be erased while a row names
                // them). `linked`: a stored message has carried it.
                """
                CREATE TABLE attachments(
                    id TEXT PRIMARY KEY,
                    owner_id TEXT NOT NULL,
                    name TEXT NOT NULL,
                    content_type TEXT NOT NULL,
                    size BIGINT NOT NULL,
                    sha256 TEXT NOT NULL,
                    blob_id BIGINT NOT NULL REFERENCES attachment_blobs(id),
                    created_at BIGINT NOT NULL,
                    linked BOOLEAN NOT NULL DEFAULT FALSE)
                """,
                "CREATE INDEX attachments_owner ON attachments(owner_id)",
                "CREATE INDEX attachments_blob ON attachments(blob_id)",
                // Which stored messages carry which uploads (written in the message's transaction, removed by its
                // delete for everyone): who may read an upload, and which uploads the sweep keeps.
                """
                CREATE TABLE message_attachments(
                    attachment_id TEXT NOT NULL,
                    conversation_id TEXT NOT NULL,
                    seq BIGINT NOT NULL,
                    PRIMARY KEY (attachment_id, conversation_id, seq))
                """,
                "CREATE INDEX message_attachments_message ON message_attachments(conversation_id, seq)",
                // A message's attachments as it carries them (AttachmentColumn), and a dead letter's.
                "ALTER TABLE messages ADD COLUMN attachments TEXT",
                "ALTER TABLE dead_letters ADD COLUMN attachments TEXT",
            ]
        ),
        (
            12,
            [
                // API.md 1.2, webhooks: the outbox. A row is inserted by the transaction that commits what it reports
                // (PostgresMessageStore+Webhooks) and deleted once the app's backend answered it 2xx. `position` orders
                // each key's events (a conversation, or a user's devices); only a key's oldest pending one is sent.
                // `state`: 0 pending, 1 dead letter. Any node's dispatcher claims heads under a lease.
                """
                CREATE TABLE webhook_events(
                    position BIGSERIAL PRIMARY KEY,
                    id TEXT NOT NULL,
                    ordering_key TEXT NOT NULL,
                    type TEXT NOT NULL,
                    created_at BIGINT NOT NULL,
                    body TEXT NOT NULL,
                    state SMALLINT NOT NULL DEFAULT 0,
                    attempts INTEGER NOT NULL DEFAULT 0,
                    next_attempt_at BIGINT NOT NULL,
                    retry_from BIGINT NOT NULL,
                    claimed_until BIGINT NOT NULL DEFAULT 0,
                    claimed_by TEXT,
                    last_error TEXT,
                    dead_at BIGINT)
                """,
                "CREATE INDEX webhook_events_key ON webhook_events(ordering_key, position) WHERE state = 0",
                "CREATE INDEX webhook_events_due ON webhook_events(next_attempt_at) WHERE state = 0",
                "CREATE INDEX webhook_events_dead ON webhook_events(id) WHERE state = 1",
            ]
        ),
        (
            13,
            [
                // API.md 1.2, consent and blocking. A block is a row while it lasts; a message hidden from a member by a
                // block is a row for good, written with the message (an unblock shows what follows, never what was
                // hidden). A stranger add counts for an hour against its adder (`--stranger-adds-per-hour`), on every
                // node; older rows are deleted as the adder adds. Members gain their membership (invited or joined).
                """
                CREATE TABLE blocks(
                    blocker TEXT NOT NULL,
                    blocked TEXT NOT NULL,
                    at BIGINT NOT NULL,
                    PRIMARY KEY (blocker, blocked))
                """,
                "CREATE INDEX blocks_blocked ON blocks(blocked, blocker)",
                """
                CREATE TABLE hidden_messages(
                    conversation_id TEXT NOT NULL,
                    seq BIGINT NOT NULL,
                    user_id TEXT NOT NULL,
                    sender_id TEXT NOT NULL,
                    PRIMARY KEY (conversation_id, seq, user_id))
                """,
                "CREATE INDEX hidden_messages_user ON hidden_messages(conversation_id, user_id, seq)",
                "CREATE INDEX hidden_messages_sender ON hidden_messages(sender_id, conversation_id)",
                """
                CREATE TABLE stranger_adds(
                    adder TEXT NOT NULL,
                    added TEXT NOT NULL,
                    at BIGINT NOT NULL,
                    PRIMARY KEY (adder, added))
                """,
                "ALTER TABLE members ADD COLUMN membership TEXT NOT NULL DEFAULT 'joined'",
                "CREATE INDEX members_invited ON members(conversation_id, user_id) WHERE membership = 'invited'",
            ]
        ),
        (
            // What a member is shown of a message edited by an edit hidden from it (its sender is blocked by the
            // member): the text (sealed like messages.body) and edit time it last saw. A later edit the member gets,
            // or a delete, removes the row.
            14,
            [
                """
                CREATE TABLE message_views(
                    conversation_id TEXT NOT NULL,
                    seq BIGINT NOT NULL,
                    user_id TEXT NOT NULL,
                    body TEXT NOT NULL,
                    edited_at BIGINT,
                    PRIMARY KEY (conversation_id, seq, user_id))
                """
            ]
        ),
    ]

    package static var latestVersion: Int { migrations.last?.version ?? 0 }

    /// A node is alive while its heartbeat (the `nodes` table) is younger than this.
    package static let nodeTimeoutMillis: Int64 = 10_000

    /// Gives the event log `partitions` partitions (after ``migrate(_:logger:)``), under the migration lock, and
    /// answers the log's epoch and partition count.
    ///
    /// - Same count as stored: nothing changes.
    /// - Another count: refused while another node heart-beats (nodes of one deployment must agree on where a
    ///   conversation's events go). Otherwise the partitions' rows are created, and the epoch is renewed unless only
    ///   partition 0 ever had events (the single log of before migration 4): every cursor of the old layout is then
    ///   answered `reset`, never read against a layout it was not made for. The old events stay until pruned.
    package static func applyLayout(_ connection: PostgresConnection, partitions: Int, nodeId: String, logger: Logger) async throws -> (
        epoch: String, partitions: Int
    ) {
        try await lockSchema(connection, logger: logger)
        do {
            let layout = try await connection.withTransaction(logger: logger) { connection -> (String, Int) in
                let candidate = Identifiers.randomHex(bytes: 4)
                try await connection.query("INSERT INTO meta(key, value) VALUES ('epoch', \(candidate)) ON CONFLICT (key) DO NOTHING", logger: logger)
                try await connection.query(
                    "INSERT INTO meta(key, value) VALUES ('event_partitions', \(String(partitions))) ON CONFLICT (key) DO NOTHING", logger: logger)
                var stored: [String: String] = [:]
                for try await (key, value) in try await connection.query(
                    "SELECT key, value FROM meta WHERE key IN ('epoch', 'event_partitions')", logger: logger
                ).decode((String, String).self) {
                    stored[key] = value
                }
                guard let epoch = stored["epoch"], let current = stored["event_partitions"].flatMap({ Int($0) }) else {
                    throw PigeonError.invalid("the PostgreSQL store's meta table lacks its epoch or partition count")
                }
                try await connection.query(
                    "INSERT INTO event_partitions(part) SELECT generate_series(0, \(partitions - 1)) ON CONFLICT DO NOTHING", logger: logger)
                guard current != partitions else { return (epoch, partitions) }
                var others: [String] = []
                for try await node in try await connection.query(
                    "SELECT node_id FROM nodes WHERE node_id <> \(nodeId) AND seen_at >= \(WallClock.nowMillis() - nodeTimeoutMillis)",
                    logger: logger
                ).decode(String.self) {
                    others.append(node)
                }
                guard others.isEmpty else {
                    throw PigeonError.invalid(
                        "the event log has \(current) partitions and this node asks for \(partitions) (event_partitions), but "
                            + "\(others.count) other node(s) are running on this store: stop them all before changing the partition count")
                }
                var used = false
                for try await count in try await connection.query(
                    "SELECT COUNT(*) FROM event_partitions WHERE part > 0 AND last_offset > 0", logger: logger
                ).decode(Int.self) {
                    used = count > 0
                }
                let newEpoch = used ? Identifiers.randomHex(bytes: 4) : epoch
                try await connection.query("UPDATE meta SET value = \(newEpoch) WHERE key = 'epoch'", logger: logger)
                try await connection.query("UPDATE meta SET value = \(String(partitions)) WHERE key = 'event_partitions'", logger: logger)
                logger.notice(
                    "event log partitions changed",
                    metadata: ["from": "\(current)", "to": "\(partitions)", "cursors": "\(used ? "reset (new epoch)" : "kept")"])
                return (newEpoch, partitions)
            }
            try await unlockSchema(connection, logger: logger)
            return layout
        } catch let error as PostgresTransactionError {
            try? await unlockSchema(connection, logger: logger)
            throw error.closureError ?? error
        } catch {
            try? await unlockSchema(connection, logger: logger)
            throw error
        }
    }

    /// Applies the migrations this database lacks, on one connection.
    package static func migrate(_ connection: PostgresConnection, logger: Logger) async throws {
        try await lockSchema(connection, logger: logger)
        do {
            try await connection.query(
                "CREATE TABLE IF NOT EXISTS pigeon_migrations(version INTEGER PRIMARY KEY, applied_at BIGINT NOT NULL)", logger: logger)
            var current = 0
            for try await version in try await connection.query("SELECT COALESCE(MAX(version), 0) FROM pigeon_migrations", logger: logger)
                .decode(Int.self)
            {
                current = version
            }
            guard current <= latestVersion else {
                throw PigeonError.invalid(
                    "the PostgreSQL schema is at version \(current), newer than this pigeon-server knows (\(latestVersion)); upgrade the server")
            }
            for migration in migrations where migration.version > current {
                try await connection.withTransaction(logger: logger) { connection in
                    for statement in migration.sql {
                        try await connection.query(PostgresQuery(unsafeSQL: statement), logger: logger)
                    }
                    try await connection.query(
                        "INSERT INTO pigeon_migrations(version, applied_at) VALUES (\(migration.version), \(WallClock.nowMillis()))",
                        logger: logger)
                }
                logger.info("applied PostgreSQL migration", metadata: ["version": "\(migration.version)"])
            }
        } catch {
            try? await unlockSchema(connection, logger: logger)
            throw error
        }
        try await unlockSchema(connection, logger: logger)
    }
}
