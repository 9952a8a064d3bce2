import GRDB

/// The embedded store's schema, one migration per version.
///
/// Messages are unique by `server_id` and by (sender, sender device, clientMessageId): the embedded buffer
/// de-duplicates first, the store's index is the last word (a message that hits it is `.alreadyStored`).
///
/// v2 (issue 11): an event written for every member (`conversation.created`, `receipt`) keeps its payload once in
/// `event_payloads` and its rows point at it (`payload_id`). Those rows are consecutive events, so pruning knows
/// without an index which payloads lost their last event.
/// Conversations gain `updated_at` (the store time of their newest message, else their creation), the order of
/// the paginated conversation list.
///
/// v3 (API.md 1.1): conversations gain `kind` (direct or group; existing unnamed two-member ones are direct), members
/// a `role` (the creator is the owner) and `joined_seq` (0 for founding members).
///
/// v4 (API.md 1.1, devices): a device is the pair (user, device id), so that JWT `did`s of different users never
/// collide; devices seen through a JWT have no token hash. Devices gain `last_seen_at` (existing ones: their
/// creation), `revoked_at` (set while revoked; a revoked device keeps its row, so its user still counts as having had
/// a device) and `last_revoked_at` (the latest revocation, kept when a JWT device is seen again with a newer token:
/// older tokens stay refused).
///
/// v7 (API.md 1.2): replies, threads and reactions (see the migration).
///
/// v5 (API.md 1.1, edit and delete): messages gain `edited_at` and `deleted_at`, and `target_id` (the serverId a
/// `pigeon.edit` or `pigeon.delete` names, indexed: a delete erases the text of the target's earlier edits).
///
/// v8 (API.md 1.2, attachments): uploads (`attachments`, the bytes themselves are files named by their SHA-256,
/// ``SQLiteAttachmentStore``), which stored messages carry them (`message_attachments`, what a reader's right to an
/// upload and the sweep read), and the attachments' metadata on the message and on its dead letter.
///
/// v9 (API.md 1.2, webhooks): the webhook outbox, `webhook_events` (see the migration).
/// v10 (API.md 1.2, consent and blocking): who blocks whom (`blocks`), which messages are hidden from whom
/// (`hidden_messages`, written with the message: ``BlockStore``), the strangers each user added in the last hour
/// (`stranger_adds`), and members' `membership` (invited or joined).
/// v11 (blocks and edits): `message_views`, the version of an edited message a member from whom the edit was hidden
/// is shown (``SQLiteMessageStore`` reads it for that member wherever the message's text is read).
package enum SQLiteSchema {
    package static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1") { db in
            try db.execute(
                sql: """
                    CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
                    CREATE TABLE devices(
                        id TEXT PRIMARY KEY,
                        user_id TEXT NOT NULL,
                        name TEXT,
                        token_hash TEXT NOT NULL UNIQUE,
                        created_at INTEGER NOT NULL);
                    CREATE INDEX devices_user ON devices(user_id);
                    CREATE TABLE conversations(
                        id TEXT PRIMARY KEY,
                        name TEXT,
                        created_by TEXT NOT NULL,
                        created_at INTEGER NOT NULL,
                        last_seq INTEGER NOT NULL DEFAULT 0);
                    CREATE TABLE members(
                        conversation_id TEXT NOT NULL REFERENCES conversations(id),
                        user_id TEXT NOT NULL,
                        delivered_seq INTEGER NOT NULL DEFAULT 0,
                        read_seq INTEGER NOT NULL DEFAULT 0,
                        PRIMARY KEY(conversation_id, user_id)) WITHOUT ROWID;
                    CREATE INDEX members_user ON members(user_id, conversation_id);
                    CREATE TABLE messages(
                        conversation_id TEXT NOT NULL,
                        seq INTEGER NOT NULL,
                        server_id TEXT NOT NULL UNIQUE,
                        client_message_id TEXT NOT NULL,
                        sender_id TEXT NOT NULL,
                        sender_device_id TEXT NOT NULL,
                        type TEXT NOT NULL,
                        body TEXT NOT NULL,
                        client_timestamp INTEGER NOT NULL,
                        accepted_at INTEGER NOT NULL,
                        stored_at INTEGER NOT NULL,
                        PRIMARY KEY(conversation_id, seq));
                    CREATE TABLE events(
                        id INTEGER PRIMARY KEY AUTOINCREMENT,
                        user_id TEXT NOT NULL,
                        device_id TEXT,
                        excluded_device_id TEXT,
                        type TEXT NOT NULL,
                        created_at INTEGER NOT NULL,
                        -- message.new refers to its message instead of copying it: payload is NULL then.
                        conversation_id TEXT,
                        seq INTEGER,
                        payload TEXT);
                    CREATE INDEX events_user ON events(user_id, id);
                    CREATE TABLE dead_letters(
                        server_id TEXT PRIMARY KEY,
                        conversation_id TEXT NOT NULL,
                        client_message_id TEXT NOT NULL,
                        sender_id TEXT NOT NULL,
                        sender_device_id TEXT NOT NULL,
                        type TEXT NOT NULL,
                        body TEXT NOT NULL,
                        client_timestamp INTEGER NOT NULL,
                        accepted_at INTEGER NOT NULL,
                        failed_at INTEGER NOT NULL,
                        error_code TEXT NOT NULL,
                        error_message TEXT NOT NULL);
                    """)
        }
        migrator.registerMigration("v2") { db in
            try db.execute(
                sql: """
                    CREATE TABLE event_payloads(id INTEGER PRIMARY KEY, payload TEXT NOT NULL);
                    ALTER TABLE events ADD COLUMN payload_id INTEGER;
                    CREATE UNIQUE INDEX messages_client_id ON messages(sender_id, sender_device_id, client_message_id);
                    ALTER TABLE conversations ADD COLUMN updated_at INTEGER NOT NULL DEFAULT 0;
                    UPDATE conversations SET updated_at = COALESCE(
                        (SELECT MAX(stored_at) FROM messages WHERE messages.conversation_id = conversations.id), created_at);
                    """)
        }
        migrator.registerMigration("v3") { db in
            try db.execute(
                sql: """
                    ALTER TABLE conversations ADD COLUMN kind TEXT NOT NULL DEFAULT 'group';
                    UPDATE conversations SET kind = 'direct' WHERE name IS NULL
                        AND (SELECT COUNT(*) FROM members WHERE members.conversation_id = conversations.id) = 2;
                    ALTER TABLE members ADD COLUMN role TEXT NOT NULL DEFAULT 'member';
                    ALTER TABLE members ADD COLUMN joined_seq INTEGER NOT NULL DEFAULT 0;
                    UPDATE members SET role = 'owner'
                        WHERE user_id = (SELECT created_by FROM conversations WHERE conversations.id = members.conversation_id);
                    """)
        }
        migrator.registerMigration("v4") { db in
            try db.execute(
                sql: """
                    CREATE TABLE devices_v4(
                        user_id TEXT NOT NULL,
                        id TEXT NOT NULL,
                        name TEXT,
                        token_hash TEXT UNIQUE,
                        created_at INTEGER NOT NULL,
                        last_seen_at INTEGER NOT NULL,
                        revoked_at INTEGER,
                        last_revoked_at INTEGER,
                        PRIMARY KEY(user_id, id)) WITHOUT ROWID;
                    INSERT INTO devices_v4(user_id, id, name, token_hash, created_at, last_seen_at)
                        SELECT user_id, id, name, token_hash, created_at, created_at FROM devices;
                    DROP TABLE devices;
                    ALTER TABLE devices_v4 RENAME TO devices;
                    """)
        }
        migrator.registerMigration("v5") { db in
            try db.execute(
                sql: """
                    ALTER TABLE messages ADD COLUMN target_id TEXT;
                    ALTER TABLE messages ADD COLUMN edited_at INTEGER;
                    ALTER TABLE messages ADD COLUMN deleted_at INTEGER;
                    CREATE INDEX messages_target ON messages(target_id) WHERE target_id IS NOT NULL;
                    """)
        }
        migrator.registerMigration("v6") { db in
            // API.md 1.1, push: a device's registration (one per device; a pushkey belongs to one device of an app),
            // the push owed to each device (one row, the newest message: bursts coalesce), and how far the
            // dispatcher has read the event log (from the log's head at this migration: history is never pushed).
            try db.execute(
                sql: """
                    CREATE TABLE push_registrations(
                        user_id TEXT NOT NULL,
                        device_id TEXT NOT NULL,
                        kind TEXT NOT NULL,
                        app_id TEXT NOT NULL,
                        pushkey TEXT NOT NULL,
                        data TEXT,
                        updated_at INTEGER NOT NULL,
                        last_pushed_at INTEGER,
                        PRIMARY KEY(user_id, device_id)) WITHOUT ROWID;
                    CREATE UNIQUE INDEX push_registrations_pushkey ON push_registrations(app_id, pushkey);
                    CREATE TABLE push_pending(
                        user_id TEXT NOT NULL,
                        device_id TEXT NOT NULL,
                        conversation_id TEXT NOT NULL,
                        seq INTEGER NOT NULL,
                        stored_at INTEGER NOT NULL,
                        owed_since INTEGER NOT NULL,
                        due_at INTEGER NOT NULL,
                        attempts INTEGER NOT NULL DEFAULT 0,
                        claimed_until INTEGER NOT NULL DEFAULT 0,
                        claimed_by TEXT,
                        PRIMARY KEY(user_id, device_id)) WITHOUT ROWID;
                    CREATE INDEX push_pending_due ON push_pending(due_at);
                    INSERT INTO meta(key, value) VALUES ('push_cursor', COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'events'), 0));
                    """)
        }
        migrator.registerMigration("v7") { db in
            // API.md 1.2, reactions, replies and threads: a message names the message it quotes (`reply_to`) and the
            // thread it is in (`thread_root`); a thread root keeps its thread's summary (count of replies not deleted,
            // the newest one's store time, its newest distinct senders, comma-joined), updated in the reply's
            // transaction. A reaction is a row per (message, key, user); it is never a message.
            try db.execute(
                sql: """
                    ALTER TABLE messages ADD COLUMN reply_to TEXT;
                    ALTER TABLE messages ADD COLUMN thread_root TEXT;
                    ALTER TABLE messages ADD COLUMN thread_count INTEGER NOT NULL DEFAULT 0;
                    ALTER TABLE messages ADD COLUMN thread_last_at INTEGER;
                    ALTER TABLE messages ADD COLUMN thread_senders TEXT;
                    CREATE INDEX messages_thread ON messages(conversation_id, thread_root, seq) WHERE thread_root IS NOT NULL;
                    ALTER TABLE dead_letters ADD COLUMN reply_to TEXT;
                    ALTER TABLE dead_letters ADD COLUMN thread_root TEXT;
                    CREATE TABLE reactions(
                        conversation_id TEXT NOT NULL,
                        seq INTEGER NOT NULL,
                        key TEXT NOT NULL,
                        user_id TEXT NOT NULL,
                        at INTEGER NOT NULL,
                        PRIMARY KEY(conversation_id, seq, key, user_id)) WITHOUT ROWID;
                    """)
        }
        migrator.registerMigration("v8") { db in
            // API.md 1.2, attachments: an upload is a row here and its bytes a file named by their SHA-256 (equal
            // bytes, one file). `linked` says a stored message carried it once: with no message left carrying it, it
            // goes at the next sweep instead of a day after its upload. A message keeps its attachments' metadata as
            // their wire JSON (NULL: none), and so does its dead letter.
            try db.execute(
                sql: """
                    CREATE TABLE attachments(
                        id TEXT PRIMARY KEY,
                        owner_id TEXT NOT NULL,
                        name TEXT NOT NULL,
                        content_type TEXT NOT NULL,
                        size INTEGER NOT NULL,
                        sha256 TEXT NOT NULL,
                        created_at INTEGER NOT NULL,
                        linked INTEGER NOT NULL DEFAULT 0) WITHOUT ROWID;
                    CREATE INDEX attachments_owner ON attachments(owner_id, size);
                    CREATE INDEX attachments_sha256 ON attachments(sha256);
                    CREATE TABLE message_attachments(
                        attachment_id TEXT NOT NULL,
                        conversation_id TEXT NOT NULL,
                        seq INTEGER NOT NULL,
                        PRIMARY KEY(attachment_id, conversation_id, seq)) WITHOUT ROWID;
                    CREATE INDEX message_attachments_message ON message_attachments(conversation_id, seq);
                    ALTER TABLE messages ADD COLUMN attachments TEXT;
                    ALTER TABLE dead_letters ADD COLUMN attachments TEXT;
                    """)
        }
        migrator.registerMigration("v9") { db in
            // API.md 1.2, webhooks: the outbox. A row is written by the transaction that commits what it reports
            // (SQLiteMessageStore+Webhooks) and deleted once the app's backend answered it 2xx. `position` orders each
            // key's events (a conversation, or a user's devices); only a key's oldest pending one is sent. `state`: 0
            // pending, 1 dead letter. The lease (`claimed_by`, `claimed_until`) is the dispatcher's.
            try db.execute(
                sql: """
                    CREATE TABLE webhook_events(
                        position INTEGER PRIMARY KEY AUTOINCREMENT,
                        id TEXT NOT NULL,
                        ordering_key TEXT NOT NULL,
                        type TEXT NOT NULL,
                        created_at INTEGER NOT NULL,
                        body TEXT NOT NULL,
                        state INTEGER NOT NULL DEFAULT 0,
                        attempts INTEGER NOT NULL DEFAULT 0,
                        next_attempt_at INTEGER NOT NULL,
                        retry_from INTEGER NOT NULL,
                        claimed_until INTEGER NOT NULL DEFAULT 0,
                        claimed_by TEXT,
                        last_error TEXT,
                        dead_at INTEGER);
                    CREATE INDEX webhook_events_key ON webhook_events(ordering_key, position) WHERE state = 0;
                    CREATE INDEX webhook_events_due ON webhook_events(next_attempt_at) WHERE state = 0;
                    CREATE INDEX webhook_events_dead ON webhook_events(id) WHERE state = 1;
                    """)
        }
        migrator.registerMigration("v10") { db in
            // API.md 1.2, consent and blocking. A block is a row while it lasts; a message hidden from a member by a block
            // is a row for good (an unblock shows what follows, never what was hidden). A stranger add counts for an
            // hour against its adder (`--stranger-adds-per-hour`); rows older than that are deleted as the adder adds.
            try db.execute(
                sql: """
                    CREATE TABLE blocks(
                        blocker TEXT NOT NULL,
                        blocked TEXT NOT NULL,
                        at INTEGER NOT NULL,
                        PRIMARY KEY(blocker, blocked)) WITHOUT ROWID;
                    CREATE INDEX blocks_blocked ON blocks(blocked, blocker);
                    CREATE TABLE hidden_messages(
                        conversation_id TEXT NOT NULL,
                        seq INTEGER NOT NULL,
                        user_id TEXT NOT NULL,
                        sender_id TEXT NOT NULL,
                        PRIMARY KEY(conversation_id, seq, user_id)) WITHOUT ROWID;
                    CREATE INDEX hidden_messages_user ON hidden_messages(conversation_id, user_id, seq);
                    CREATE INDEX hidden_messages_sender ON hidden_messages(sender_id, conversation_id);
                    CREATE TABLE stranger_adds(
                        adder TEXT NOT NULL,
                        added TEXT NOT NULL,
                        at INTEGER NOT NULL,
                        PRIMARY KEY(adder, added)) WITHOUT ROWID;
                    ALTER TABLE members ADD COLUMN membership TEXT NOT NULL DEFAULT 'joined';
                    CREATE INDEX members_invited ON members(conversation_id, user_id) WHERE membership = 'invited';
                    """)
        }
        migrator.registerMigration("v11") { db in
            // What a member is shown of a message that was edited by an edit hidden from it (its sender is blocked by
            // the member): the text and edit time the member last saw, sealed like `messages.body`. A later edit the
            // member gets, or a delete, removes the row.
            try db.execute(
                sql: """
                    CREATE TABLE message_views(
                        conversation_id TEXT NOT NULL,
                        seq INTEGER NOT NULL,
                        user_id TEXT NOT NULL,
                        body TEXT NOT NULL,
                        edited_at INTEGER,
                        PRIMARY KEY(conversation_id, seq, user_id)) WITHOUT ROWID;
                    """)
        }
        return migrator
    }
}
