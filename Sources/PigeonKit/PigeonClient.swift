import Foundation
import NIOConcurrencyHelpers
import PigeonProtocol

/// A Pigeon device: a local-first message store kept in sync with a Pigeon server.
///
/// Every read (``conversations()``, ``messages(in:before:limit:)``, ``search(_:in:limit:)``) comes from the local
/// database and works offline. ``send(_:type:to:replyTo:threadRoot:attachments:)`` saves the message and its outbox entry in one transaction and
/// returns at once; the message goes out when the client is online, and its ``PigeonMessage/status`` moves
/// forward only on evidence: ✓ on the server's accept answer, ✓✓ and blue ✓✓ on the other members' receipts.
///
/// The network side runs inside ``run()`` (or between ``start()`` and ``stop()``): the event stream with resume by
/// cursor, the outbox with ACK timeouts and retries, delivered receipts, gap recovery and periodic catch-up.
/// Observe with ``events()`` or a ``PigeonListener``.
///
/// ```swift
/// let credentials = try await PigeonClient.registerDevice(serverURL: url, userId: "alice", deviceName: "phone")
/// let client = try PigeonClient(configuration: .init(serverURL: url, databasePath: path, credentials: credentials))
/// client.start()
/// let message = try client.send("hello", to: conversationId)   // ⏰ now, ✓ when the server has it
/// ```
public final class PigeonClient: Sendable {
    /// What the client was opened with.
    public let configuration: Configuration
    let store: LocalStore
    let engine: ClientEngine
    let hub: EventHub
    /// The attachments' downloads, bounded by ``Configuration-swift.struct/attachmentCacheLimit``.
    let attachmentCache: AttachmentCache
    /// Who wants the network side running: the app (``start()`` until ``stop()``) and the push handlings in progress
    /// (``handlePush(_:deadline:)``), which share one ``run()`` task.
    struct RunSlot {
        var task: Task<Void, Never>?
        /// ``start()`` was called and ``stop()`` not since: the task outlives the push handlings.
        var startedByApp = false
        /// ``handlePush(_:deadline:)`` calls in progress.
        var pushHandlings = 0
    }

    let runSlot = NIOLockedValueBox(RunSlot())
    /// Serialises ``react(_:to:)`` and ``unreact(_:from:)`` from saving to queueing.
    let reactionLock = NIOLock()

    /// Opens (or creates) the local database and loads the outbox; no network yet.
    ///
    /// A database that cannot be opened is moved aside and rebuilt from the server: ``localDatabaseRecovery``
    /// says where it went and whether unsent messages were lost (also sent as the first event). Throws
    /// ``PigeonClientError/Code-swift.struct/wrongDatabase`` when the file belongs to other credentials.
    public convenience init(configuration: Configuration) throws {
        let transport = HTTPTransport(
            baseURL: configuration.serverURL, token: configuration.credentials.token, requestTimeout: configuration.requestTimeout,
            connectTimeout: configuration.connectTimeout, liveness: configuration.livenessInterval, logger: configuration.logger,
            trustedCertificates: configuration.trustedCertificates)
        try self.init(configuration: configuration, transport: transport)
    }

    /// With a transport of the caller's (tests inject faults through it).
    package init(configuration: Configuration, transport: any PigeonTransport) throws {
        self.configuration = configuration
        let store = try LocalStore(
            path: configuration.databasePath, userId: configuration.credentials.userId, deviceId: configuration.credentials.deviceId,
            durability: configuration.flushEveryWrite ? .survivesPowerLoss : .survivesAppCrash)
        let hub = EventHub()
        self.store = store
        self.hub = hub
        self.engine = try ClientEngine(store: store, transport: transport, hub: hub, settings: configuration, logger: configuration.logger)
        self.attachmentCache = AttachmentCache(store: store, limit: configuration.attachmentCacheLimit)
        if store.recovery != nil { try store.setNeedsFullSync(true) }
        // Copies that no message names: an app killed between copying a file and saving its message.
        store.files.removeSent(try store.unreferencedCopies(among: store.files.sentFiles(before: Date() - 3600)))
    }

    deinit {
        runSlot.withLockedValue { $0.task }?.cancel()
    }

    // MARK: Identity

    /// Registers a new device for `userId` (open registration, `POST /v1/devices`). Keep the credentials: the
    /// token is shown only once.
    ///
    /// The server registers a user's first device for anyone (on a server with open registration), and further
    /// devices only for a caller that proves it is that user: pass the credentials of one of its devices as
    /// `existingDevice` (else the server answers `401`). `trustedCertificates`: as
    /// ``Configuration-swift.struct/trustedCertificates``, for a server whose certificate the system does not trust.
    public static func registerDevice(
        serverURL: URL, userId: String, deviceName: String? = nil, existingDevice: Credentials? = nil, timeout: Duration = .seconds(30),
        trustedCertificates: [String] = []
    ) async throws -> Credentials {
        guard Validation.isValidUserId(userId) else { throw PigeonClientError.invalid("userId must be 1–64 characters of [A-Za-z0-9._@-]") }
        if let existingDevice, existingDevice.userId != userId {
            throw PigeonClientError.invalid("existingDevice must be a device of \(userId), not of \(existingDevice.userId)")
        }
        let registration = try await HTTPTransport.registerDevice(
            baseURL: serverURL, RegisterDeviceRequest(userId: userId, deviceName: deviceName), existingToken: existingDevice?.token,
            timeout: timeout, trustedCertificates: trustedCertificates)
        return Credentials(userId: registration.userId, deviceId: registration.deviceId, token: registration.token)
    }

    /// The user of this device (from the credentials).
    public var userId: String { configuration.credentials.userId }
    /// This device (from the credentials).
    public var deviceId: String { configuration.credentials.deviceId }

    /// The writer's `PRAGMA synchronous` (1 NORMAL, 2 FULL): what ``Configuration-swift.struct/flushEveryWrite`` chose.
    package func localDatabaseSynchronousSetting() throws -> Int {
        try store.writerSynchronousSetting()
    }

    /// Set when the local database could not be opened and was rebuilt.
    public var localDatabaseRecovery: LocalDatabaseRecovery? { store.recovery }

    // MARK: Running

    /// Runs the network side until the task is cancelled. Reads and `send` work without it; messages then wait in
    /// the outbox. (In a swift-service-lifecycle `ServiceGroup`, run it as
    /// `try await cancelWhenGracefulShutdown { try await client.run() }`: PigeonKit does not link that library.)
    public func run() async throws {
        if let recovery = store.recovery { hub.emit(.localDatabaseRebuilt(recovery)) }
        await engine.run()
    }

    /// Starts ``run()`` in a task of its own (for code that is not structured around tasks); ``stop()`` ends it.
    public func start() {
        runSlot.withLockedValue { slot in
            slot.startedByApp = true
            guard slot.task == nil else { return }
            slot.task = Task { try? await self.run() }
        }
    }

    /// Stops what ``start()`` started and waits until the connection is closed. Unsent messages stay in the outbox.
    /// A ``handlePush(_:deadline:)`` in progress loses its connection too and reports what it could not do.
    public func stop() async {
        let task = runSlot.withLockedValue { slot in
            defer {
                slot.task = nil
                slot.startedByApp = false
            }
            return slot.task
        }
        task?.cancel()
        await task?.value
    }

    /// Switches the network on or off (a user's "offline mode", or the terminal client's `/offline`). Off closes
    /// the stream at once; sends wait (⏰) until it is switched on again, which flushes the outbox.
    public func setNetworkEnabled(_ enabled: Bool) {
        engine.setNetworkEnabled(enabled)
    }

    /// Whether the event stream is open now; every change is also sent as ``PigeonEvent/connectionStateChanged(_:)``.
    public var connectionState: ConnectionState { engine.connectionState }

    /// Why the last connection attempt failed (`nil` while connected or before any attempt); a 401
    /// `unauthorized` here means the token is no longer valid.
    public var lastConnectionError: PigeonClientError? { engine.lastConnectionError }

    // MARK: Observing

    /// A new stream of every event from now on. Buffered without limit; end the iteration to unsubscribe.
    public func events() -> AsyncStream<PigeonEvent> {
        hub.makeStream()
    }

    /// Adds a delegate-style listener (held weakly).
    public func addListener(_ listener: any PigeonListener) {
        hub.add(listener)
    }

    /// Stops calling `listener`; events already being delivered may still reach it.
    public func removeListener(_ listener: any PigeonListener) {
        hub.remove(listener)
    }

    // MARK: Sending

    /// Saves a message for sending and returns it (status ``MessageStatus/pending``, ⏰). It goes out as soon as
    /// the client is online, after the earlier messages of the same conversation.
    ///
    /// When it returns, the message and its outbox entry are committed in one transaction: they survive the app
    /// being killed (and a power loss with ``Configuration-swift.struct/flushEveryWrite``), and the next client
    /// opened on the database sends them. It never waits for the network.
    ///
    /// A reply quotes `replyTo` (its ``PigeonMessage/replyPreview`` is there at once, from this device's copy); with
    /// `threadRoot` the message goes into that message's thread (see ``fetchThread(of:after:before:limit:)``). Both
    /// must be app messages of the same conversation on this device, not deleted; a thread's root must not itself be
    /// in a thread. Either may be a message of this device that still waits: the reply goes out after it.
    ///
    /// `attachments` (at most 10; the body may then be empty) are copied into the client's storage before it returns,
    /// and listed in the message's ``PigeonMessage/attachments`` with their ``PigeonAttachment/localPath`` at once.
    /// When the client is online they are uploaded, in order, streamed from those copies
    /// (``PigeonEvent/uploadProgress(localId:attachmentIndex:sent:total:)`` as they go), and the message goes once
    /// every one has its id: it stays ⏰ until then. An upload cut by the network starts again when online; one the
    /// app was killed during starts again with the next client opened on the database; one already answered is never
    /// made again. An upload the server refuses (too large, over the user's quota) or whose tries run out fails the
    /// message (⚠️, ``PigeonMessage/failure`` says why); ``retry(localId:)`` tries again.
    ///
    /// Throws only local errors, and then writes nothing: ``PigeonClientError/Code-swift.struct/invalidArgument``
    /// (a `type` outside `[a-z0-9._-]{1,32}` or one of the server's own `pigeon.*`, an empty (without attachments) or
    /// oversized body, U+0000, a quote or root that cannot be one, more than 10 attachments, a file that cannot be
    /// read or is empty, a bad name, media type or dimension), ``PigeonClientError/Code-swift.struct/unknownConversation``,
    /// ``PigeonClientError/Code-swift.struct/unknownMessage`` (a quote or root not on this device),
    /// ``PigeonClientError/Code-swift.struct/notMember`` (this user was removed from the conversation, or left it), or
    /// a database error (also when a copy cannot be written).
    @discardableResult
    public func send(
        _ body: String = "", type: String = "text", to conversationId: String, replyTo: PigeonMessage? = nil, threadRoot: PigeonMessage? = nil,
        attachments: [PigeonAttachmentSource] = []
    ) throws -> PigeonMessage {
        guard Validation.isValidMessageType(type) else { throw PigeonClientError.invalid("type must be 1–32 characters of [a-z0-9._-]") }
        guard !Validation.isServerMessageType(type) else {
            throw PigeonClientError.invalid("types beginning with \"pigeon.\" are the server's; \"\(type)\" cannot be sent")
        }
        guard !body.isEmpty || !attachments.isEmpty else { throw PigeonClientError.invalid("the body is empty") }
        try Self.validate(attachments)
        guard body.utf8.count <= configuration.maxBodyBytes else {
            throw PigeonClientError.invalid("the body is \(body.utf8.count) bytes; the limit is \(configuration.maxBodyBytes)")
        }
        guard Validation.isStorableText(body) else { throw PigeonClientError.invalid("the body contains U+0000") }
        guard let conversationId = Validation.canonicalUUID(conversationId) else {
            throw PigeonClientError.invalid("\"\(conversationId)\" is not a conversation id")
        }
        var copies: [LocalAttachment] = []
        let message: PigeonMessage
        do {
            for source in attachments { copies.append(try store.files.saveCopy(of: source)) }
            message = try store.insertOutgoing(
                conversationId: conversationId, type: type, body: body, clientMessageId: UUID().uuidString.lowercased(),
                clientTimestamp: Int64(Date().timeIntervalSince1970 * 1000), replyToLocalId: replyTo?.localId, threadRootLocalId: threadRoot?.localId,
                attachments: copies)
        } catch {
            store.files.removeSent(copies.compactMap(\.file))
            throw error
        }
        hub.emit(.messageStatusChanged(message))
        engine.enqueue(OutboxItem(
            localId: message.localId, conversationId: conversationId, clientMessageId: message.clientMessageId, uploadsPending: !copies.isEmpty))
        return message
    }

    /// Sends a failed message (⚠️) again: back to ⏰ with fresh tries, committed before it returns (a failed edit or
    /// deletion shows on its message again). Throws
    /// ``PigeonClientError/Code-swift.struct/notRetryable`` for a message that has not failed or was sent from
    /// another device, ``PigeonClientError/Code-swift.struct/unknownMessage`` for no such message.
    @discardableResult
    public func retry(localId: Int64) throws -> PigeonMessage {
        let (message, item, outcome) = try store.markRetry(localId: localId)
        hub.emit(.messageStatusChanged(message))
        hub.emit(outcome)
        engine.requeue(item)
        return message
    }

    /// Marks the conversation's main chat read up to `upToSeq` (default: every message on the device; never past the
    /// contiguous seq), committed before it returns: call it for what the screen shows. A read receipt means "shown
    /// to the user": thread replies count only once their thread was shown (``markThreadRead(conversationId:threadRoot:upToSeq:)``)
    /// or with `includingThreadReplies`, and the watermark the server gets stops below the first incoming message not
    /// shown. The read receipt goes out when online and turns the senders' ticks blue. The watermark only moves up.
    /// Throws ``PigeonClientError/Code-swift.struct/unknownConversation`` for a conversation not on this device.
    public func markRead(conversationId: String, upToSeq: Int64? = nil, includingThreadReplies: Bool = false) throws {
        if let conversation = try store.markRead(
            conversationId: Validation.canonicalUUID(conversationId) ?? conversationId, upToSeq: upToSeq, includingThreadReplies: includingThreadReplies)
        {
            hub.emit(.conversationUpdated(conversation))
            engine.receiptsChanged()
        }
    }

    /// Marks the replies of the thread of `threadRoot` (the root's serverId) read up to `upToSeq` (default: every one on
    /// the device): call it while the thread is shown. See ``markRead(conversationId:upToSeq:includingThreadReplies:)``.
    public func markThreadRead(conversationId: String, threadRoot: String, upToSeq: Int64? = nil) throws {
        if let conversation = try store.markRead(
            conversationId: Validation.canonicalUUID(conversationId) ?? conversationId, upToSeq: upToSeq, threadRoot: threadRoot)
        {
            hub.emit(.conversationUpdated(conversation))
            engine.receiptsChanged()
        }
    }

    /// Tells the other members this user is (or stopped) typing: on the open stream, or over HTTP while there is
    /// none. Ephemeral: never stored nor retried; throws the network's or the server's error.
    public func setTyping(_ active: Bool, in conversationId: String) async throws {
        try await engine.setTyping(conversationId: conversationId, active: active)
    }

    // MARK: Conversations (network)

    /// Creates a conversation on the server with this user and `members` and saves it locally. Needs the network.
    public func createConversation(members: [String], name: String? = nil) async throws -> PigeonConversation {
        for member in members where !Validation.isValidUserId(member) {
            throw PigeonClientError.invalid("\"\(member)\" is not a user id (1–64 characters of [A-Za-z0-9._@-])")
        }
        let conversation = try await engine.createConversation(CreateConversationRequest(members: members, name: name))
        guard let local = try await store.conversation(id: conversation.id) else {
            throw PigeonClientError(.localDatabase, "conversation \(conversation.id) was not saved")
        }
        return local
    }

    /// Writes what arrived from the server as the network side would (persist, then announce): for tests of what
    /// the SDK makes of events and history without a server.
    package func apply(_ batch: [Incoming]) async throws {
        try await engine.apply(batch)
    }

    /// Fetches the conversation list and every missing message now (what the periodic catch-up does), instead
    /// of waiting for it. Needs the network.
    public func catchUp() async throws {
        try await engine.catchUp()
    }

    /// Brings this device up to date and waits until it is: connected, the conversation list and every missing
    /// message fetched, the outbox flushed (each waiting message accepted ✓ or failed ⚠️, each reaction answered or
    /// dropped), and the delivered and read receipts this device owes confirmed by the server's echo. For
    /// command-line tools and background refresh; the client must be running (``start()`` or ``run()``).
    ///
    /// Throws ``PigeonClientError/Code-swift.struct/timeout`` when `timeout` passes first (saying which step was
    /// left, and why the last connection attempt failed); nothing is lost then: the outbox and the receipts wait
    /// for the next connection. ``PigeonClientError/Code-swift.struct/closed`` when the client is not running.
    @discardableResult
    public func sync(timeout: Duration = .seconds(30)) async throws -> SyncReport {
        // `start()` returns before its task is inside `run()`: a started client counts as running.
        guard engine.isRunning || runSlot.withLockedValue({ $0.task != nil }) else {
            throw PigeonClientError(.closed, "the client is not running: call start() first")
        }
        // The deadline is on the client's clock (``Configuration-swift.struct/clock``), like every other wait of the network side.
        let deadline = engine.clock.now + timeout
        let server = configuration.serverURL.absoluteString
        try await waitUntil(deadline, timeout: timeout, { () -> String in
            let reason = self.lastConnectionError.map { ": \($0.message)" } ?? ""
            return self.engine.isNetworkEnabled ? "not connected to \(server)\(reason)" : "the network is switched off"
        }) { self.engine.isNetworkEnabled && self.connectionState == .online }
        try await withDeadline(deadline, timeout: timeout, "fetching the conversations and missing messages from \(server)") {
            try await self.engine.catchUp()
        }
        // A failed message stays (⚠️, for `retry`); a failed reaction is on its way out (dropped and undone): wait for it.
        try await waitUntil(deadline, timeout: timeout, { () -> String in
            let waiting = self.engine.outbox.withLockedValue { $0.items.values.filter { !$0.isFailed || $0.kind == .reaction }.count }
            return "\(waiting) message\(waiting == 1 ? "" : "s") or reaction\(waiting == 1 ? "" : "s") still waiting for the server's answer"
        }) { self.engine.outbox.withLockedValue { queue in !queue.items.values.contains { !$0.isFailed || $0.kind == .reaction } } }
        engine.receiptsChanged()
        try await waitUntil(deadline, timeout: timeout, { "receipts not yet confirmed by \(server)" }) {
            try await self.store.pendingReceipts().isEmpty
        }
        let failed = try unsentMessages().filter { $0.status == .failed }
        return SyncReport(failed: failed)
    }

    /// Polls `condition` until it holds, or throws a timeout once the client's clock reaches `deadline`. The polling
    /// itself is on real time: it only looks again at state other tasks change, and on a test's manual clock it
    /// would stall until the test moved the time.
    private func waitUntil(
        _ deadline: ElapsedClock.Instant, timeout: Duration, _ what: @Sendable () -> String, _ condition: () async throws -> Bool
    ) async throws {
        while try await !condition() {
            guard engine.clock.now < deadline else {
                throw PigeonClientError(.timeout, "sync did not finish within \(timeout): \(what())")
            }
            try await Task.sleep(for: .milliseconds(10))
        }
    }

    private func withDeadline(
        _ deadline: ElapsedClock.Instant, timeout: Duration, _ what: String, _ body: @escaping @Sendable () async throws -> Void
    ) async throws {
        let clock = engine.clock
        try await withThrowingTaskGroup(of: Bool.self) { group in
            group.addTask { try await body(); return true }
            group.addTask { try await clock.sleep(until: deadline); return false }
            defer { group.cancelAll() }
            guard try await group.next() == true else {
                throw PigeonClientError(.timeout, "sync did not finish within \(timeout): \(what)")
            }
        }
    }

    // MARK: Reading (local)

    /// This device's conversations, most recently active first.
    public func conversations() throws -> [PigeonConversation] {
        try store.conversations()
    }

    /// One conversation from the local database, `nil` when it is not on this device.
    public func conversation(id: String) throws -> PigeonConversation? {
        try store.conversation(id: Validation.canonicalUUID(id) ?? id)
    }

    /// A page of messages, oldest first and newest last, from the local database. Without `before`: the newest
    /// `limit` (unsent messages last); with `before` (a seq, e.g. the first one of the previous page): the page
    /// just before it, for scrolling back.
    public func messages(in conversationId: String, before: Int64? = nil, limit: Int = 50) throws -> MessagePageResult {
        guard limit > 0 else { throw PigeonClientError.invalid("limit must be positive") }
        let page = try store.messages(conversationId: Validation.canonicalUUID(conversationId) ?? conversationId, beforeSeq: before, limit: limit)
        return MessagePageResult(messages: page.messages, hasMore: page.hasMore)
    }

    /// One message from the local database as it is now (its latest status), `nil` when there is none.
    public func message(localId: Int64) throws -> PigeonMessage? {
        try store.message(localId: localId)
    }

    /// Full-text search of message bodies on this device (FTS5), newest first. Each word matches as a prefix;
    /// FTS syntax in `query` is taken literally.
    public func search(_ query: String, in conversationId: String? = nil, limit: Int = 50) throws -> [PigeonMessage] {
        try store.search(query, conversationId: conversationId.map { Validation.canonicalUUID($0) ?? $0 }, limit: limit)
    }

    /// Unsent messages of this device (⏰, spinner, ⚠️), oldest first.
    public func unsentMessages() throws -> [PigeonMessage] {
        try engine.outbox.withLockedValue { Array($0.items.keys) }.sorted().compactMap { try store.message(localId: $0) }
    }
}

/// A page of ``PigeonClient/messages(in:before:limit:)``.
public struct MessagePageResult: Sendable, Equatable {
    /// Oldest first, newest last.
    public var messages: [PigeonMessage]
    /// Older messages exist on the device: pass the first message's seq as `before`.
    public var hasMore: Bool
}

/// What ``PigeonClient/sync(timeout:)`` left undone on purpose.
public struct SyncReport: Sendable, Equatable {
    /// This device's messages that failed (⚠️, oldest first): they wait for ``PigeonClient/retry(localId:)``.
    public var failed: [PigeonMessage]
}
