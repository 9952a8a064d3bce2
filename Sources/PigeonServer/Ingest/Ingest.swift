import PigeonDomain
import PigeonProtocol

/// The accept path: validate, authorise, rate-limit, append durably, answer.
///
/// ``prepare(_:from:to:)`` runs the checks; ``append(_:completion:)`` starts the durable append without
/// waiting for it, so one WebSocket can keep many sends in flight and still have them stored in its order.
final class Ingest: Sendable {
    /// A send's answer: the accept response and whether it created the message (`202`) or found it (`200`).
    struct Accepted: Sendable {
        var response: SendMessageResponse
        var created: Bool
    }

    private let buffer: any AcceptPath
    private let store: any ConversationStore & MessageHistory
    private let attachments: any AttachmentStore
    private let metrics: PigeonMetrics
    private let abuse: AbuseGuard
    private let rateLimiter: RateLimiter?
    /// Sends per user: ``AbuseLimits/devicesPerUserBudget`` devices' worth of `--rate-limit`.
    private let userRateLimiter: RateLimiter?
    private let maxBuffered: Int
    private let maxBodyBytes: Int
    /// `--consent invites`: an invited member reads the conversation but sends nothing until it accepts.
    private let invitesExist: Bool
    /// The app's before-send hook (`--before-send-hook`), asked about every send and edit of a device.
    private let hook: BeforeSendHook?

    init(
        buffer: any AcceptPath, store: any ConversationStore & MessageHistory, attachments: any AttachmentStore, metrics: PigeonMetrics,
        abuse: AbuseGuard, configuration: ServerConfiguration, hook: BeforeSendHook? = nil
    ) {
        self.hook = hook
        self.attachments = attachments
        self.buffer = buffer
        self.store = store
        self.metrics = metrics
        self.abuse = abuse
        self.rateLimiter =
            configuration.rateLimitPerDevice > 0
            ? RateLimiter(rate: configuration.rateLimitPerDevice, burst: configuration.rateLimitBurst) : nil
        self.userRateLimiter =
            configuration.rateLimitPerDevice > 0
            ? RateLimiter(
                rate: configuration.rateLimitPerDevice * AbuseLimits.devicesPerUserBudget,
                burst: configuration.rateLimitBurst * AbuseLimits.devicesPerUserBudget) : nil
        self.maxBuffered = configuration.maxBufferedMessages
        self.maxBodyBytes = configuration.maxBodyBytes
        self.invitesExist = configuration.appBackend.consent == .invites
    }

    /// Whether sends and edits wait for the app's before-send hook.
    var asksHook: Bool { hook != nil }

    /// A prepared send: the message to append and what storing it will cost its sender's stored-bytes budget.
    struct Prepared: Sendable {
        var message: BufferedMessage
        var storageCost: Int
        /// Why the message may not be stored (the before-send hook rejected it), though a resend of one accepted before
        /// is still answered with the original: the append refuses new messages only.
        var refusal: PigeonError?
        /// The before-send hook replaced the body (the answer says `bodyReplaced`).
        var bodyReplaced = false
        /// The hook's body (for an edit, the new text), which the answer carries with `bodyReplaced`.
        var replacedBody: String?
        /// Sent through the server API: the app's backend is trusted with rates and storage (no per-device rate, no
        /// stored-bytes budget) and is not asked its own before-send hook.
        var fromService = false
    }

    /// Checks a send; throws (and nothing is appended) if it is refused. Cheap: membership comes from memory; with a
    /// before-send hook, the hook's answer is waited for here (so a WebSocket's sends still append in its order).
    ///
    /// `fromService`: a send of the server API (``Prepared/fromService``); its `device` may be a system sender
    /// (``SystemSender``), which needs no membership.
    func prepare(_ request: SendMessageRequest, from device: DeviceIdentity, to conversationId: String, fromService: Bool = false) async throws
        -> Prepared
    {
        do {
            var prepared = try await check(request, from: device, to: conversationId)
            try await checkRelations(prepared.message, device: device)
            if let references = request.attachments, !references.isEmpty {
                prepared.message.attachments = try await resolve(references, of: prepared.message, device: device)
            }
            prepared.fromService = fromService
            if !fromService { try await consultHook(&prepared, edit: nil) }
            return prepared
        } catch {
            metrics.messageRejected()
            throw error
        }
    }

    /// Starts the durable append of a prepared message; `completion` runs with the answer once it is durable.
    /// Appends started one after the other are buffered in that order.
    func append(_ prepared: Prepared, completion: @escaping @Sendable (Result<Accepted, PigeonError>) -> Void) {
        let message = prepared.message
        // Over the rate or a full buffer still answers resends: the buffer refuses only new messages.
        var refusal = prepared.refusal
        if refusal != nil {
            // Rejected by the hook: refused unless it is a resend of an accepted message.
        } else if !prepared.fromService, let userRateLimiter, let wait = userRateLimiter.check(message.senderId) {
            refusal = PigeonError(.rateLimited, "too many messages from this user's devices; retry in \(wait) s", retryAfter: wait)
        } else if !prepared.fromService, let rateLimiter, let wait = rateLimiter.take(message.senderId + "\u{0}" + message.senderDeviceId) {
            refusal = PigeonError(.rateLimited, "too many messages from this device; retry in \(wait) s", retryAfter: wait)
        } else if !prepared.fromService, userRateLimiter?.take(message.senderId) != nil {
            refusal = PigeonError(.rateLimited, "too many messages from this user's devices; retry in 1 s", retryAfter: 1)
        } else if buffer.depth >= maxBuffered {
            refusal = .overloaded("the ingest buffer is full; retry shortly")
        } else if !prepared.fromService {
            do { try abuse.checkStorage(of: message.senderId) } catch let error as PigeonError { refusal = error } catch {}
        }
        buffer.append(message, refusal: refusal) { [metrics, store, abuse] result in
            switch result {
            case .success(.accepted), .success(.stored):
                metrics.messageAccepted()
                if case .success(.stored) = result {
                    metrics.messageStored(acceptedAt: message.acceptedAt, nowMillis: WallClock.nowMillis())
                }
                if !prepared.fromService { abuse.chargeStorage(of: message.senderId, bytes: prepared.storageCost) }
                let response = SendMessageResponse(
                    serverId: message.serverId, clientMessageId: message.clientMessageId, status: .queued, acceptedAt: message.acceptedAt,
                    bodyReplaced: prepared.bodyReplaced ? true : nil, body: prepared.bodyReplaced ? prepared.replacedBody : nil)
                completion(.success(Accepted(response: response, created: true)))
            case .success(.duplicate(let serverId, let acceptedAt)):
                metrics.duplicates.increment()
                // Rare (a resend): where the original is now needs a store read, which cannot wait here.
                Task { [store] in
                    let found = try? await store.status(ofMessage: serverId)
                    let response = SendMessageResponse(
                        serverId: serverId, clientMessageId: message.clientMessageId, status: found?.status ?? .queued,
                        acceptedAt: acceptedAt, seq: found?.seq)
                    completion(.success(Accepted(response: response, created: false)))
                }
            case .failure(let error):
                metrics.messageRejected()
                completion(.failure(error as? PigeonError ?? .overloaded("the ingest buffer could not take the message: \(error)")))
            }
        }
    }

    /// What an edit or a delete does to its target.
    enum Change: Sendable {
        case edit(String)
        case delete
    }

    /// Checks an edit or a delete of the message `serverId` (API.md 1.1) and builds its `pigeon.edit` / `pigeon.delete`
    /// message. Refused at once when the target is stored and may not change (`403` another user's, `400` deleted or
    /// the server's own); a target not stored yet is decided when the change is processed. A resend of a change
    /// already stored is answered with it (`200`), even when its target has changed since.
    func prepareChange(
        _ change: Change, serverId rawServerId: String, clientMessageId: String, clientTimestamp: Int64, from device: DeviceIdentity,
        to conversationId: String
    ) async throws -> Prepared {
        do {
            guard let serverId = Validation.canonicalUUID(rawServerId) else { throw PigeonError.invalid("serverId must be a UUID") }
            let type: String
            let body: String
            switch change {
            case .edit(let text):
                (type, body) = (ServerMessageType.edit, MessageLifecycle.editText(serverId: serverId, body: text))
                guard text.utf8.count <= maxBodyBytes else { throw PigeonError(.payloadTooLarge, "body is larger than \(maxBodyBytes) bytes") }
                guard Validation.isStorableText(text) else { throw PigeonError.invalid("body must not contain the character U+0000") }
            case .delete:
                let by = device.userId == SystemSender.service ? SystemSender.serviceActor : device.userId
                (type, body) = (ServerMessageType.delete, MessageLifecycle.deleteText(serverId: serverId, by: by))
            }
            let request = SendMessageRequest(clientMessageId: clientMessageId, type: type, body: body, clientTimestamp: clientTimestamp)
            var prepared = try await check(request, from: device, to: conversationId, serverType: true)
            prepared.fromService = SystemSender.isSystem(device.userId)
            let target = try await store.messageTarget(conversationId: prepared.message.conversationId, serverId: serverId)
            if target != nil, let refusal = MessageLifecycle.refusal(prepared.message, target: target) {
                if try await store.storedMessage(senderId: device.userId, deviceId: device.deviceId, clientMessageId: prepared.message.clientMessageId) != nil {
                    // A resend of a change that was stored: the append finds it and answers with it.
                    return prepared
                }
                throw refusal
            }
            if case .edit(let text) = change, !prepared.fromService {
                try await consultHook(&prepared, edit: (serverId, text))
            }
            return prepared
        } catch {
            metrics.messageRejected()
            throw error
        }
    }

    /// Asks the before-send hook (if any) about a prepared send or edit (`edit`: the target and the new text) and
    /// applies its answer: a rejection becomes the message's refusal, a replacement its body.
    private func consultHook(_ prepared: inout Prepared, edit: (serverId: String, text: String)?) async throws {
        guard let hook else { return }
        // A user over its stored-bytes budget is refused before the app is asked (the append would refuse it anyway).
        do {
            try abuse.checkStorage(of: prepared.message.senderId)
        } catch let error as PigeonError {
            prepared.refusal = error
            return
        }
        do {
            switch try await hook.check(prepared.message, edit: edit) {
            case .allow:
                break
            case .replace(let body):
                prepared.message.body = edit.map { MessageLifecycle.editText(serverId: $0.serverId, body: body) } ?? body
                prepared.bodyReplaced = true
                prepared.replacedBody = body
            }
        } catch let error as PigeonError where error.code == .rejected || error.code == .rateLimited {
            // The refusal of this message, unless it is a resend of one accepted already (the append decides).
            prepared.refusal = error
        }
    }

    /// Checks a reply's quoted message and a thread reply's root (API.md 1.2): messages of the conversation the sender
    /// can see (`404`), not deleted (`409`), a root not itself in a thread (`400`). Costs store reads only for a reply.
    /// A resend of a reply already stored is answered with it (`200`), even when its target has changed since.
    private func checkRelations(_ message: BufferedMessage, device: DeviceIdentity) async throws {
        guard message.replyTo != nil || message.threadRoot != nil else { return }
        let conversationId = message.conversationId
        // A system sender of the server API is no member and sees the whole conversation.
        let joinedSeq: Int64
        if SystemSender.isSystem(device.userId) {
            joinedSeq = 0
        } else {
            guard let member = try await store.member(device.userId, of: conversationId) else { throw PigeonError.conversationNotFound }
            joinedSeq = member.joinedSeq
        }
        let replyTarget = try await message.replyTo.asyncMap { try await store.messageTarget(conversationId: conversationId, serverId: $0) }
        let threadTarget = try await message.threadRoot.asyncMap { try await store.messageTarget(conversationId: conversationId, serverId: $0) }
        guard
            let refusal = ReplyRules.refusal(
                replyTo: message.replyTo, replyTarget: replyTarget ?? nil, threadRoot: message.threadRoot, threadTarget: threadTarget ?? nil,
                joinedSeq: joinedSeq)
        else { return }
        if try await store.storedMessage(senderId: device.userId, deviceId: device.deviceId, clientMessageId: message.clientMessageId) != nil {
            return
        }
        throw refusal
    }

    /// The attachments a send names (API.md 1.2): at most ``AttachmentLimits/perMessage``, each an upload of the
    /// sender's user named once, its dimensions in range; `400` otherwise, the same for an unknown id and another
    /// user's upload (the answer tells nothing of other users' uploads). The upload's metadata is copied into the
    /// message. A resend of a message already stored is answered with it, even when an upload has gone since.
    private func resolve(_ references: [AttachmentReference], of message: BufferedMessage, device: DeviceIdentity) async throws -> [Attachment] {
        guard references.count <= AttachmentLimits.perMessage else {
            throw PigeonError.invalid("a message carries at most \(AttachmentLimits.perMessage) attachments")
        }
        var ids: [String] = []
        for reference in references {
            guard let id = Validation.canonicalUUID(reference.id) else { throw PigeonError.invalid("attachments[].id must be an upload's id (a UUID)") }
            guard !ids.contains(id) else { throw PigeonError.invalid("attachment \(id) is named twice") }
            for (field, value) in [("width", reference.width), ("height", reference.height)] {
                if let value, !(0...AttachmentLimits.maxDimension).contains(value) {
                    throw PigeonError.invalid("attachments[].\(field) must be 0 to \(AttachmentLimits.maxDimension)")
                }
            }
            if let duration = reference.durationMs, !(0...AttachmentLimits.maxDurationMs).contains(duration) {
                throw PigeonError.invalid("attachments[].durationMs must be 0 to \(AttachmentLimits.maxDurationMs)")
            }
            ids.append(id)
        }
        let found = try await attachments.attachments(ids: ids)
        var resolved: [Attachment] = []
        for (id, reference) in zip(ids, references) {
            guard let upload = found.first(where: { $0.id == id }), upload.ownerId == device.userId else {
                if try await store.storedMessage(senderId: device.userId, deviceId: device.deviceId, clientMessageId: message.clientMessageId) != nil {
                    return []
                }
                throw PigeonError.invalid("attachment \(id) is not an upload of \(device.userId)")
            }
            resolved.append(Attachment(upload.upload, reference))
        }
        return resolved
    }

    /// Prepares and appends an edit or a delete, answering once durable (like a send).
    func change(
        _ change: Change, serverId: String, clientMessageId: String, clientTimestamp: Int64, from device: DeviceIdentity, to conversationId: String
    ) async throws -> Accepted {
        let prepared = try await prepareChange(
            change, serverId: serverId, clientMessageId: clientMessageId, clientTimestamp: clientTimestamp, from: device, to: conversationId)
        return try await withCheckedThrowingContinuation { continuation in
            append(prepared) { continuation.resume(with: $0.mapError { $0 as any Error }) }
        }
    }

    /// Prepares and appends, answering once durable.
    func send(_ request: SendMessageRequest, from device: DeviceIdentity, to conversationId: String, fromService: Bool = false) async throws
        -> Accepted
    {
        let prepared = try await prepare(request, from: device, to: conversationId, fromService: fromService)
        return try await withCheckedThrowingContinuation { continuation in
            append(prepared) { continuation.resume(with: $0.mapError { $0 as any Error }) }
        }
    }

    /// `serverType`: the request is an edit or a delete the server built (its `pigeon.*` type is allowed).
    private func check(_ request: SendMessageRequest, from device: DeviceIdentity, to conversationId: String, serverType: Bool = false) async throws
        -> Prepared
    {
        let fields = try checkFields(request, to: conversationId, serverType: serverType)
        // A system sender (`system:<name>`, only ever made by the server API: no userId holds a `:`) needs no membership.
        guard let members = try await store.members(of: fields.conversationId), members.contains(device.userId) || SystemSender.isSystem(device.userId)
        else {
            throw PigeonError.conversationNotFound
        }
        // Only where invitations exist: one more read of the store per send.
        if invitesExist, !SystemSender.isSystem(device.userId), try await store.member(device.userId, of: fields.conversationId)?.membership == .invited {
            throw PigeonError.invitationPending
        }
        return prepared(request, fields, from: device, memberCount: members.count)
    }

    /// ``prepare(_:from:to:fromService:)`` for a device's send that needs nothing but memory: no before-send hook, no
    /// reply, thread or attachment to look up, no invitations, and the conversation's members cached. `nil` when it
    /// needs more (the caller prepares it the full way); else the prepared send, or why it is refused.
    func prepareFromMemory(_ request: SendMessageRequest, from device: DeviceIdentity, to conversationId: String) -> Result<Prepared, PigeonError>? {
        guard hook == nil, !invitesExist, request.replyTo == nil, request.threadRoot == nil, request.attachments?.isEmpty ?? true else { return nil }
        do {
            let fields = try checkFields(request, to: conversationId, serverType: false)
            guard let members = store.cachedMembers(of: fields.conversationId) else { return nil }
            guard members.contains(device.userId) || SystemSender.isSystem(device.userId) else { throw PigeonError.conversationNotFound }
            return .success(prepared(request, fields, from: device, memberCount: members.count))
        } catch {
            metrics.messageRejected()
            return .failure(error as? PigeonError ?? .invalid("\(error)"))
        }
    }

    /// A send's fields in their canonical form.
    private struct CheckedFields {
        var conversationId: String
        var clientMessageId: String
        var replyTo: String?
        var threadRoot: String?
    }

    /// The checks of a send that need no store: ids, type, size, U+0000.
    private func checkFields(_ request: SendMessageRequest, to conversationId: String, serverType: Bool) throws -> CheckedFields {
        guard let conversationId = Validation.canonicalUUID(conversationId) else {
            throw PigeonError.invalid("conversationId must be a UUID")
        }
        guard let clientMessageId = Validation.canonicalUUID(request.clientMessageId) else {
            throw PigeonError.invalid("clientMessageId must be a UUID")
        }
        guard Validation.isValidMessageType(request.type) else {
            throw PigeonError.invalid("type must be 1-32 characters of [a-z0-9._-]")
        }
        guard serverType || !Validation.isServerMessageType(request.type) else {
            throw PigeonError.invalid("types beginning with \"pigeon.\" are the server's; a client cannot send \"\(request.type)\"")
        }
        // An edit's body is its new text wrapped with the target's id: the text's own limit was checked.
        guard serverType || request.body.utf8.count <= maxBodyBytes else {
            throw PigeonError(.payloadTooLarge, "body is larger than \(maxBodyBytes) bytes")
        }
        guard Validation.isStorableText(request.body) else {
            throw PigeonError.invalid("body must not contain the character U+0000")
        }
        let replyTo = try request.replyTo.map { try Self.messageId($0, field: "replyTo") }
        let threadRoot = try request.threadRoot.map { try Self.messageId($0, field: "threadRoot") }
        return CheckedFields(conversationId: conversationId, clientMessageId: clientMessageId, replyTo: replyTo, threadRoot: threadRoot)
    }

    /// The message of a checked send, with its serverId and acceptedAt.
    private func prepared(_ request: SendMessageRequest, _ fields: CheckedFields, from device: DeviceIdentity, memberCount: Int) -> Prepared {
        let now = WallClock.nowMillis()
        let message = BufferedMessage(
            serverId: Identifiers.uuidV7(nowMillis: now), conversationId: fields.conversationId, senderId: device.userId,
            senderDeviceId: device.deviceId, clientMessageId: fields.clientMessageId, type: request.type, body: request.body,
            clientTimestamp: request.clientTimestamp, acceptedAt: now, replyTo: fields.replyTo, threadRoot: fields.threadRoot)
        // The message's row and its body, then one event row per member (message.new, message.stored).
        let cost = abuse.storageCost(bytes: 256 + request.body.utf8.count + request.type.utf8.count, members: memberCount)
        return Prepared(message: message, storageCost: cost)
    }

    /// A serverId named by a send (`replyTo`, `threadRoot`): a UUID, in its canonical lowercase form.
    private static func messageId(_ value: String, field: String) throws -> String {
        guard let id = Validation.canonicalUUID(value) else { throw PigeonError.invalid("\(field) must be a message's serverId (a UUID)") }
        return id
    }
}

extension Optional {
    /// `map` for an async transform.
    fileprivate func asyncMap<T>(_ transform: (Wrapped) async throws -> T) async rethrows -> T? {
        guard let self else { return nil }
        return try await transform(self)
    }
}
