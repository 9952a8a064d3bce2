import NIOConcurrencyHelpers

/// A node's memory of conversations' member lists, kept right while members change.
///
/// A reader that fetched a list from the database stores it only if no change of that conversation was recorded
/// since it started reading (``generation(of:)`` before, ``store(_:for:ifGeneration:)`` after), so a read that
/// raced a change can never put the old list back.
final class MembersCache: Sendable {
    private struct State {
        var members: [String: [String]] = [:]
        var generations: [String: UInt64] = [:]
        var clock: UInt64 = 0
    }

    private let state = NIOLockedValueBox(State())
    /// Most conversations kept (the cache starts over when it would hold more).
    static let limit = 200_000

    subscript(conversationId: String) -> [String]? {
        state.withLockedValue { $0.members[conversationId] }
    }

    func contains(_ conversationId: String) -> Bool {
        state.withLockedValue { $0.members[conversationId] != nil }
    }

    /// The change count of a conversation, to pass to ``store(_:for:ifGeneration:)``.
    func generation(of conversationId: String) -> UInt64 {
        state.withLockedValue { $0.generations[conversationId] ?? 0 }
    }

    /// Keeps a list read from the database, unless the conversation changed since `generation`.
    func store(_ members: [String], for conversationId: String, ifGeneration generation: UInt64) {
        state.withLockedValue { state in
            guard (state.generations[conversationId] ?? 0) == generation else { return }
            if state.members.count >= Self.limit { state.members.removeAll(keepingCapacity: true) }
            state.members[conversationId] = members
        }
    }

    /// Records a change: the list is `members` from now on (nil or empty: forgotten, read again when needed).
    func changed(_ conversationId: String, members: [String]?) {
        state.withLockedValue { state in
            state.clock += 1
            state.generations[conversationId] = state.clock
            if let members, !members.isEmpty {
                state.members[conversationId] = members
            } else {
                state.members[conversationId] = nil
            }
        }
    }
}
