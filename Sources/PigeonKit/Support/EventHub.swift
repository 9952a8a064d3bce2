import NIOConcurrencyHelpers

/// Fans the client's events out to every `AsyncStream` subscriber and every listener, in emission order. Streams
/// buffer without limit: a slow subscriber delays nothing and loses nothing.
final class EventHub: Sendable {
    private struct WeakListener {
        weak var listener: (any PigeonListener)?
    }

    private struct State {
        var continuations: [Int: AsyncStream<PigeonEvent>.Continuation] = [:]
        var listeners: [ObjectIdentifier: WeakListener] = [:]
        var nextId = 0
        /// Events waiting for delivery, and whether a caller is delivering them.
        var queue: [PigeonEvent] = []
        var delivering = false
    }

    private let state = NIOLockedValueBox(State())

    func makeStream() -> AsyncStream<PigeonEvent> {
        let (stream, continuation) = AsyncStream.makeStream(of: PigeonEvent.self, bufferingPolicy: .unbounded)
        let id = state.withLockedValue { state -> Int in
            state.nextId += 1
            state.continuations[state.nextId] = continuation
            return state.nextId
        }
        continuation.onTermination = { [weak self] _ in
            _ = self?.state.withLockedValue { $0.continuations.removeValue(forKey: id) }
        }
        return stream
    }

    func add(_ listener: any PigeonListener) {
        state.withLockedValue { $0.listeners[ObjectIdentifier(listener)] = WeakListener(listener: listener) }
    }

    func remove(_ listener: any PigeonListener) {
        _ = state.withLockedValue { $0.listeners.removeValue(forKey: ObjectIdentifier(listener)) }
    }

    /// Delivers `event` after every event emitted before it. The first emitter delivers the queue while others
    /// (and a listener that emits from its callback) only enqueue, so delivery is in order and never deadlocks.
    func emit(_ event: PigeonEvent) {
        let deliver = state.withLockedValue { state -> Bool in
            state.queue.append(event)
            guard !state.delivering else { return false }
            state.delivering = true
            return true
        }
        guard deliver else { return }
        while true {
            let next = state.withLockedValue { state -> (PigeonEvent, [AsyncStream<PigeonEvent>.Continuation], [any PigeonListener])? in
                guard !state.queue.isEmpty else {
                    state.delivering = false
                    return nil
                }
                state.listeners = state.listeners.filter { $0.value.listener != nil }
                return (state.queue.removeFirst(), Array(state.continuations.values), state.listeners.values.compactMap(\.listener))
            }
            guard let (event, continuations, listeners) = next else { return }
            for continuation in continuations { continuation.yield(event) }
            for listener in listeners {
                switch event {
                case .messageReceived(let message): listener.onMessageReceived(message)
                case .messageStatusChanged(let message): listener.onMessageStatusChanged(message)
                case .conversationUpdated(let conversation): listener.onConversationUpdated(conversation)
                case .connectionStateChanged(let state): listener.onConnectionStateChanged(state)
                case .localDatabaseRebuilt(let recovery): listener.onLocalDatabaseRebuilt(recovery)
                case .signedOut(let error): listener.onSignedOut(error)
                case .typing: break
                case .membersChanged(let conversation, let change), .roleChanged(let conversation, let change),
                    .conversationRenamed(let conversation, let change), .leftConversation(let conversation, let change):
                    listener.onMembersChanged(conversation, change)
                case .messageEdited(let message), .messageDeleted(let message): listener.onMessageChanged(message)
                case .messageChangeFailed(let change, let message): listener.onMessageChangeFailed(change, message: message)
                case .recipientsChanged(let message): listener.onRecipientsChanged(message)
                case .reactionsChanged(let message): listener.onReactionsChanged(message)
                case .reactionFailed(let message, let key, let action, let error):
                    listener.onReactionFailed(message, key: key, action: action, error: error)
                case .threadUpdated(let root): listener.onThreadUpdated(root)
                case .uploadProgress(let localId, let index, let sent, let total):
                    listener.onUploadProgress(localId: localId, attachmentIndex: index, sent: sent, total: total)
                case .invitationReceived(let conversation): listener.onInvitationReceived(conversation)
                case .invitationAccepted(let conversation): listener.onInvitationAccepted(conversation)
                case .invitationRemoved(let conversationId): listener.onInvitationRemoved(conversationId: conversationId)
                }
            }
        }
    }

    /// Announces what a write of the engine's own (an accept answer, a failure, a retry, a change) did.
    func emit(_ outcome: ApplyOutcome) {
        for message in outcome.statusChanged { emit(.messageStatusChanged(message)) }
        for event in outcome.lifecycleEvents { emit(event) }
    }

    func finish() {
        let continuations = state.withLockedValue { state in
            defer { state.continuations.removeAll() }
            return Array(state.continuations.values)
        }
        for continuation in continuations { continuation.finish() }
    }
}
