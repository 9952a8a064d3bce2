import Foundation
import GRDB
import PigeonProtocol

/// Opens the SDK's SQLite database (WAL, versioned migrations) and rebuilds it when it cannot be opened.
enum LocalDatabase {
    /// How much a commit survives.
    enum Durability: Sendable {
        /// `synchronous = NORMAL` in WAL mode: a commit survives the app being killed (SIGKILL, a crash, a
        /// force-quit) but the last commits may roll back on a power loss. No disk flush per write.
        case survivesAppCrash
        /// `synchronous = FULL`: every commit is flushed to disk before it returns (costs a flush per send).
        case survivesPowerLoss
    }

    /// Page cache of each reader, in KiB (SQLite's default is 2,000). A device's reads are pages of 50 messages and the
    /// file's pages stay in the system's cache anyway: a small cache per reader keeps the app's own memory low
    /// (pigeonkit-bench's memory figure) without slowing them. The writer keeps SQLite's default: a catch-up writes
    /// thousands of messages (and their search index) per transaction, and a smaller cache spills its dirty pages.
    static let readerCacheKibibytes = 512

    static func configuration(readonly: Bool = false) -> Configuration {
        var configuration = Configuration()
        configuration.readonly = readonly
        configuration.foreignKeysEnabled = true
        configuration.busyMode = .timeout(10)
        configuration.label = "PigeonKit"
        configuration.prepareDatabase { db in
            if db.configuration.readonly { try db.execute(sql: "PRAGMA cache_size = -\(readerCacheKibibytes)") }
        }
        return configuration
    }

    static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        // The local-first schema (conversations, messages, outbox, sync state), grown: messages keep the server's id and seq beside the local id; the outbox and the
        // sync state are tables of their own; the members' watermarks drive the ✓✓ and blue ticks.
        migrator.registerMigration("v1") { db in
            try db.execute(sql: """
                CREATE TABLE device (
                    id INTEGER PRIMARY KEY CHECK (id = 1),
                    userId TEXT NOT NULL,
                    deviceId TEXT NOT NULL,
                    streamCursor TEXT,
                    needsFullSync INTEGER NOT NULL DEFAULT 1
                );
                CREATE TABLE conversations (
                    id TEXT PRIMARY KEY NOT NULL,
                    name TEXT,
                    createdAt INTEGER NOT NULL,
                    lastSeq INTEGER NOT NULL DEFAULT 0,
                    contiguousSeq INTEGER NOT NULL DEFAULT 0,
                    readSeq INTEGER NOT NULL DEFAULT 0,
                    lastActivityAt INTEGER NOT NULL
                );
                CREATE TABLE members (
                    conversationId TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
                    userId TEXT NOT NULL,
                    deliveredSeq INTEGER NOT NULL DEFAULT 0,
                    readSeq INTEGER NOT NULL DEFAULT 0,
                    PRIMARY KEY (conversationId, userId)
                ) WITHOUT ROWID;
                CREATE TABLE messages (
                    localId INTEGER PRIMARY KEY AUTOINCREMENT,
                    conversationId TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
                    clientMessageId TEXT NOT NULL,
                    serverId TEXT UNIQUE,
                    seq INTEGER,
                    senderId TEXT NOT NULL,
                    senderDeviceId TEXT NOT NULL,
                    type TEXT NOT NULL,
                    body TEXT NOT NULL,
                    clientTimestamp INTEGER NOT NULL,
                    acceptedAt INTEGER,
                    storedAt INTEGER,
                    isOutgoing INTEGER NOT NULL,
                    status TEXT NOT NULL,
                    failureCode TEXT,
                    failureMessage TEXT,
                    failureIsLocal INTEGER,
                    deliveryPath TEXT,
                    recipientsOnline INTEGER,
                    UNIQUE (senderDeviceId, clientMessageId)
                );
                CREATE UNIQUE INDEX messages_by_seq ON messages(conversationId, seq) WHERE seq IS NOT NULL;
                CREATE INDEX messages_unsent ON messages(conversationId, localId) WHERE seq IS NULL;
                CREATE TABLE outbox (
                    localId INTEGER PRIMARY KEY NOT NULL REFERENCES messages(localId) ON DELETE CASCADE,
                    conversationId TEXT NOT NULL,
                    clientMessageId TEXT NOT NULL,
                    attempts INTEGER NOT NULL DEFAULT 0,
                    failed INTEGER NOT NULL DEFAULT 0
                );
                CREATE VIRTUAL TABLE messages_fts USING fts5(
                    body, content = 'messages', content_rowid = 'localId', tokenize = 'unicode61 remove_diacritics 2'
                );
                CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages BEGIN
                    INSERT INTO messages_fts(rowid, body) VALUES (new.localId, new.body);
                END;
                CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages BEGIN
                    INSERT INTO messages_fts(messages_fts, rowid, body) VALUES ('delete', old.localId, old.body);
                END;
                CREATE TRIGGER messages_fts_update AFTER UPDATE OF body ON messages BEGIN
                    INSERT INTO messages_fts(messages_fts, rowid, body) VALUES ('delete', old.localId, old.body);
                    INSERT INTO messages_fts(rowid, body) VALUES (new.localId, new.body);
                END;
                """)
        }
        // API.md 1.1: a conversation's kind, a member's role and the seq it joined at, as the server reports them.
        migrator.registerMigration("v2") { db in
            try db.execute(sql: """
                ALTER TABLE conversations ADD COLUMN kind TEXT;
                ALTER TABLE members ADD COLUMN role TEXT NOT NULL DEFAULT 'member';
                ALTER TABLE members ADD COLUMN joinedSeq INTEGER NOT NULL DEFAULT 0;
                """)
        }
        // API.md 1.1's group chats and message lifecycle.
        // - messages: what is shown (`body`, `editedAt`, `deletedAt`, with this device's unconfirmed edits and
        //   deletions on top) and what the server confirmed (`confirmedBody`, NULL when it is `body`; the seq of the
        //   last change it reflects); an edit or deletion's target; an own message's per-member counts.
        // - conversations: left (the seq of this user's removal), to be fetched from the server, and the seqs the
        //   member list is known at (a snapshot from the server, the last change applied).
        // - the full-text index holds the app's messages only: a `pigeon.*` body is JSON, and an edit's body
        //   carries the text it replaced.
        migrator.registerMigration("v3") { db in
            try db.execute(sql: """
                ALTER TABLE messages ADD COLUMN editedAt INTEGER;
                ALTER TABLE messages ADD COLUMN deletedAt INTEGER;
                ALTER TABLE messages ADD COLUMN confirmedBody TEXT;
                ALTER TABLE messages ADD COLUMN confirmedEditedAt INTEGER;
                ALTER TABLE messages ADD COLUMN confirmedDeletedAt INTEGER;
                ALTER TABLE messages ADD COLUMN changeSeq INTEGER NOT NULL DEFAULT 0;
                ALTER TABLE messages ADD COLUMN targetServerId TEXT;
                ALTER TABLE messages ADD COLUMN targetLocalId INTEGER;
                ALTER TABLE messages ADD COLUMN recipientCount INTEGER;
                ALTER TABLE messages ADD COLUMN deliveredCount INTEGER;
                ALTER TABLE messages ADD COLUMN readCount INTEGER;
                CREATE INDEX messages_by_target_server ON messages(targetServerId) WHERE targetServerId IS NOT NULL;
                CREATE INDEX messages_by_target_local ON messages(targetLocalId) WHERE targetLocalId IS NOT NULL;
                ALTER TABLE conversations ADD COLUMN leftSeq INTEGER;
                ALTER TABLE conversations ADD COLUMN needsFetch INTEGER NOT NULL DEFAULT 0;
                ALTER TABLE conversations ADD COLUMN membersSnapshotSeq INTEGER NOT NULL DEFAULT 0;
                ALTER TABLE conversations ADD COLUMN membersChangeSeq INTEGER NOT NULL DEFAULT 0;
                INSERT INTO messages_fts(messages_fts, rowid, body) SELECT 'delete', localId, body FROM messages WHERE type LIKE 'pigeon.%';
                DROP TRIGGER messages_fts_insert;
                DROP TRIGGER messages_fts_delete;
                DROP TRIGGER messages_fts_update;
                CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages WHEN new.type NOT LIKE 'pigeon.%' BEGIN
                    INSERT INTO messages_fts(rowid, body) VALUES (new.localId, new.body);
                END;
                CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages WHEN old.type NOT LIKE 'pigeon.%' BEGIN
                    INSERT INTO messages_fts(messages_fts, rowid, body) VALUES ('delete', old.localId, old.body);
                END;
                CREATE TRIGGER messages_fts_update AFTER UPDATE OF body ON messages WHEN old.type NOT LIKE 'pigeon.%' BEGIN
                    INSERT INTO messages_fts(messages_fts, rowid, body) VALUES ('delete', old.localId, old.body);
                    INSERT INTO messages_fts(rowid, body) VALUES (new.localId, new.body);
                END;
                """)
        }
        // API.md 1.2's reactions, replies and threads.
        // - messages: the reactions shown (`reactions`: the server's aggregate in `confirmedReactions` with this
        //   device's unanswered reactions on top; JSON, NULL when none), the quoted message and its preview, the
        //   thread a message is in and, on a root, its summary with the `storedAt` of the newest reply it counts
        //   (`threadAt`: a reply stored later is new to it). A quote or thread root sent from this device may wait for
        //   its serverId: its local id is kept beside.
        // - reactionOutbox: this device's reactions not yet answered, in the order they were made. Their ids come from
        //   the messages' local id sequence, so that one outbox line orders messages and reactions together.
        migrator.registerMigration("v4") { db in
            try db.execute(sql: """
                ALTER TABLE messages ADD COLUMN reactions TEXT;
                ALTER TABLE messages ADD COLUMN confirmedReactions TEXT;
                ALTER TABLE messages ADD COLUMN replyTo TEXT;
                ALTER TABLE messages ADD COLUMN replyToLocalId INTEGER;
                ALTER TABLE messages ADD COLUMN replyPreview TEXT;
                ALTER TABLE messages ADD COLUMN threadRoot TEXT;
                ALTER TABLE messages ADD COLUMN threadRootLocalId INTEGER;
                ALTER TABLE messages ADD COLUMN thread TEXT;
                ALTER TABLE messages ADD COLUMN threadAt INTEGER NOT NULL DEFAULT 0;
                CREATE INDEX messages_by_reply_to ON messages(replyTo) WHERE replyTo IS NOT NULL;
                CREATE INDEX messages_by_reply_to_local ON messages(replyToLocalId) WHERE replyToLocalId IS NOT NULL;
                CREATE INDEX messages_by_thread_root ON messages(threadRoot) WHERE threadRoot IS NOT NULL;
                CREATE INDEX messages_by_thread_root_local ON messages(threadRootLocalId) WHERE threadRootLocalId IS NOT NULL;
                CREATE TABLE reactionOutbox (
                    id INTEGER PRIMARY KEY NOT NULL,
                    conversationId TEXT NOT NULL,
                    targetLocalId INTEGER NOT NULL REFERENCES messages(localId) ON DELETE CASCADE,
                    key TEXT NOT NULL,
                    action TEXT NOT NULL,
                    clientMessageId TEXT NOT NULL,
                    attempts INTEGER NOT NULL DEFAULT 0
                );
                CREATE INDEX reactionOutbox_by_target ON reactionOutbox(targetLocalId, key);
                """)
        }
        // API.md 1.2's attachments.
        // - messages: the attachments a message carries (JSON, NULL when none), for this device's own with the file
        //   name of its copy and, until uploaded, no id: the outbox uploads those before the message goes.
        // - attachmentCache: the downloads kept in the cache directory, with when each was last used (a counter: the
        //   least recently used go first when the cache is over its limit).
        migrator.registerMigration("v5") { db in
            try db.execute(sql: """
                ALTER TABLE messages ADD COLUMN attachments TEXT;
                CREATE TABLE attachmentCache (
                    id TEXT PRIMARY KEY NOT NULL,
                    size INTEGER NOT NULL,
                    lastUsed INTEGER NOT NULL
                ) WITHOUT ROWID;
                CREATE INDEX attachmentCache_by_use ON attachmentCache(lastUsed);
                """)
        }
        // API.md 1.2's consent and blocking.
        // - members: whether each member joined or is only invited (every member known before was joined).
        // - conversations: who added this user (the `by` of the change that added it, else the creator), what an
        //   invitation names as its sender.
        // - blocks: the users this user blocked, as the server last listed them.
        migrator.registerMigration("v6") { db in
            try db.execute(sql: """
                ALTER TABLE members ADD COLUMN membership TEXT NOT NULL DEFAULT 'joined';
                ALTER TABLE conversations ADD COLUMN addedBy TEXT;
                CREATE TABLE blocks (
                    userId TEXT PRIMARY KEY NOT NULL,
                    blockedAt INTEGER NOT NULL
                ) WITHOUT ROWID;
                """)
        }
        // This user's messages withheld from members who block it (the server's `withheldFrom`, a JSON array): their
        // counts never count those members as delivered or read.
        migrator.registerMigration("v7") { db in
            try db.execute(sql: "ALTER TABLE messages ADD COLUMN withheldFrom TEXT")
        }
        return migrator
    }

    /// An unsent message read back from a database that is being rebuilt.
    struct SalvagedOutboxItem: Sendable {
        var conversationId: String
        var clientMessageId: String
        var type: String
        var body: String
        var clientTimestamp: Int64
        /// Its attachments column (their copies stay in the `sent` directory, which the rebuild leaves alone).
        var attachments: String?
    }

    /// Opens (creating or migrating) the database at `path`. A file that is not a readable Pigeon database
    /// (corrupt, not SQLite, or migrated by a newer SDK) is moved aside and replaced by an empty one; its unsent
    /// messages are read back when possible. Other failures (permissions, a full disk) are thrown: they say nothing
    /// about the file, which is left alone.
    static func open(path: String) throws -> (DatabasePool, LocalDatabaseRecovery?, [SalvagedOutboxItem]) {
        do {
            return (try openAndMigrate(path: path), nil, [])
        } catch let error where isUnreadable(error) {
            let movedTo = path + ".unreadable-\(Int64(Date().timeIntervalSince1970 * 1000))"
            let fileManager = FileManager.default
            for suffix in ["", "-wal", "-shm"] where fileManager.fileExists(atPath: path + suffix) {
                try fileManager.moveItem(atPath: path + suffix, toPath: movedTo + suffix)
            }
            let (salvaged, lost) = salvageOutbox(path: movedTo)
            let pool = try openAndMigrate(path: path)
            let recovery = LocalDatabaseRecovery(
                movedTo: movedTo, reason: String(describing: error), recoveredOutboxItems: salvaged.count, lostOutboxItems: lost)
            return (pool, recovery, salvaged)
        }
    }

    private static func openAndMigrate(path: String) throws -> DatabasePool {
        let pool = try DatabasePool(path: path, configuration: configuration())
        do {
            let migrator = self.migrator
            if try pool.read({ try migrator.hasBeenSuperseded($0) }) {
                throw DatabaseError(resultCode: .SQLITE_NOTADB, message: "the database was migrated by a newer PigeonKit")
            }
            try migrator.migrate(pool)
            // Touch every table, so a damaged schema or root page shows now rather than at the first send.
            try pool.read { db in
                for table in ["device", "conversations", "members", "messages", "outbox", "reactionOutbox", "attachmentCache", "blocks"] {
                    _ = try Int.fetchOne(db, sql: "SELECT count(*) FROM \(table)")
                }
            }
            return pool
        } catch {
            try? pool.close()
            throw error
        }
    }

    private static func isUnreadable(_ error: any Error) -> Bool {
        guard let error = error as? DatabaseError else { return false }
        return error.resultCode == .SQLITE_CORRUPT || error.resultCode == .SQLITE_NOTADB || error.extendedResultCode == .SQLITE_CORRUPT_VTAB
    }

    /// Reads the unsent messages of an unreadable database, as far as it can: the items read and how many could
    /// not be (`nil` when not even the outbox's size could be read).
    private static func salvageOutbox(path: String) -> ([SalvagedOutboxItem], Int?) {
        guard let queue = try? DatabaseQueue(path: path, configuration: configuration(readonly: true)) else {
            return ([], nil)
        }
        defer { try? queue.close() }
        let total = try? queue.read { try Int.fetchOne($0, sql: "SELECT count(*) FROM outbox") ?? 0 }
        // A message edited while it waited goes out with the text it was sent with (v3 keeps it in confirmedBody);
        // its edit follows as an outbox item of its own. A message's attachments (v5) go with it. The newest schema is
        // tried first: an older database lacks the later columns.
        let queries = [
            "m.type, coalesce(m.confirmedBody, m.body), m.clientTimestamp, m.attachments",
            "m.type, coalesce(m.confirmedBody, m.body), m.clientTimestamp, NULL",
            "m.type, m.body, m.clientTimestamp, NULL",
        ]
        var rows: [Row] = []
        for columns in queries {
            let sql = "SELECT m.conversationId, m.clientMessageId, \(columns) FROM outbox o JOIN messages m ON m.localId = o.localId ORDER BY o.localId"
            if let read = try? queue.read({ try Row.fetchAll($0, sql: sql) }) {
                rows = read
                break
            }
        }
        let items = rows.map {
            SalvagedOutboxItem(conversationId: $0[0], clientMessageId: $0[1], type: $0[2], body: $0[3], clientTimestamp: $0[4], attachments: $0[5])
        }
        return (items, total.map { max($0 - items.count, 0) })
    }
}
