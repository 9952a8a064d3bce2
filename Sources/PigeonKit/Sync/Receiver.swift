import PigeonProtocol

/// Applies what arrives from the server, one batch at a time: persist, then announce (in seq order per
/// conversation), so the app never hears of a message the database does not hold.
actor Receiver {
    private let store: LocalStore
    private let hub: EventHub
    private var order = ReceiveOrder<PigeonMessage>()

    init(store: LocalStore, hub: EventHub) {
        self.store = store
        self.hub = hub
    }

    /// Messages persisted but not yet announced, because an earlier seq is still missing.
    var heldCount: Int { order.heldCount }

    func apply(_ batch: [Incoming]) throws -> ApplyOutcome {
        let outcome = try store.apply(batch)
        let received = outcome.received.sorted { ($0.conversationId, $0.seq ?? 0) < ($1.conversationId, $1.seq ?? 0) }
        var announced: [PigeonMessage] = []
        for message in received {
            let contiguous = outcome.contiguous[message.conversationId] ?? 0
            announced += order.receive(message, seq: message.seq ?? 0, conversationId: message.conversationId, contiguous: contiguous)
        }
        for (conversationId, contiguous) in outcome.contiguous.sorted(by: { $0.key < $1.key }) {
            announced += order.release(conversationId: conversationId, contiguous: contiguous)
        }
        for message in announced { hub.emit(.messageReceived(message)) }
        for message in outcome.statusChanged { hub.emit(.messageStatusChanged(message)) }
        var changed = outcome.conversationsChanged
        for message in received where !changed.contains(message.conversationId) { changed.append(message.conversationId) }
        for conversationId in changed {
            if let conversation = try store.conversation(id: conversationId) { hub.emit(.conversationUpdated(conversation)) }
        }
        for typing in outcome.typing {
            hub.emit(.typing(conversationId: typing.conversationId, userId: typing.userId, active: typing.active))
        }
        return outcome
    }
}
