import PigeonProtocol

/// Applies what arrives from the server, one batch at a time: persist, then announce (in seq order per
/// conversation), so the app never hears of a message the database does not hold.
///
/// Batches are applied strictly one after another, each written, ordered and announced before the next is
/// written: the database write is awaited (off the cooperative pool), and an actor alone would let the next batch
/// in at that `await`.
actor Receiver {
    private let store: LocalStore
    private let hub: EventHub
    private let serial = AsyncSerialLock()
    private var order = ReceiveOrder<PigeonMessage>()

    init(store: LocalStore, hub: EventHub) {
        self.store = store
        self.hub = hub
    }

    /// Messages persisted but not yet announced, because an earlier seq is still missing.
    var heldCount: Int { order.heldCount }

    func apply(_ batch: [Incoming]) async throws -> ApplyOutcome {
        try await serial.withLock {
            let outcome = try await store.apply(batch)
            let received = Dictionary(grouping: outcome.received, by: \.conversationId)
            var announced: [PigeonMessage] = []
            for (conversationId, contiguous) in outcome.contiguous.sorted(by: { $0.key < $1.key }) {
                let batch = (received[conversationId] ?? []).map { (item: $0, seq: $0.seq ?? 0) }
                announced += order.receive(batch, conversationId: conversationId, contiguous: contiguous)
            }
            for message in announced { hub.emit(.messageReceived(message)) }
            for message in outcome.statusChanged { hub.emit(.messageStatusChanged(message)) }
            var changed = outcome.conversationsChanged
            for conversationId in received.keys.sorted() where !changed.contains(conversationId) { changed.append(conversationId) }
            for conversationId in changed {
                if let conversation: PigeonConversation = try await store.conversation(id: conversationId) {
                    hub.emit(.conversationUpdated(conversation))
                }
            }
            for event in outcome.lifecycleEvents { hub.emit(event) }
            for typing in outcome.typing {
                hub.emit(.typing(conversationId: typing.conversationId, userId: typing.userId, active: typing.active))
            }
            return outcome
        }
    }
}
