import Logging
import PostgresNIO

/// The PostgreSQL store's schema: versioned migrations, applied in order at start-up.
///
/// Each migration runs in its own transaction under a session advisory lock, so nodes that start together
/// apply it once. A database with a version newer than this build knows is refused (an older node must not
/// write into a schema it does not understand).
enum PostgresSchema {
    /// Key of the advisory lock that serialises migrations.
    static let migrationLock: Int64 = 0x7069_6765_6f6e_0001

    static let migrations: [(version: Int, sql: [String])] = [
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
    ]

    static var latestVersion: Int { migrations.last?.version ?? 0 }

    /// Applies the migrations this database lacks, on one connection.
    static func migrate(_ connection: PostgresConnection, logger: Logger) async throws {
        try await connection.query("SELECT pg_advisory_lock(\(migrationLock))", logger: logger)
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
            _ = try? await connection.query("SELECT pg_advisory_unlock(\(migrationLock))", logger: logger)
            throw error
        }
        try await connection.query("SELECT pg_advisory_unlock(\(migrationLock))", logger: logger)
    }
}
