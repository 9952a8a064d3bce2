import NIOConcurrencyHelpers

/// A node's memory of conversations' member lists, kept right while members change.
///
/// A reader that fetched a list from the database stores it only if no change of that conversation was recorded
/// since it started reading (``generation(of:)`` before, ``store(_:for:ifGeneration:)`` after), so a read that
/// raced a change can never put the old list back.
package final class MembersCache: Sendable {
    private struct State {
        var members: [String: [String]] = [:]
        var generations: [String: UInt64] = [:]
        var clock: UInt64 = 0
        /// The generation of every conversation without one of its own: the clock at the last start-over.
        var floor: UInt64 = 0

        /// Forgets everything; a read that started before cannot store its list (its generation is below `floor`).
        mutating func startOver() {
            clock += 1
            floor = clock
            members.removeAll(keepingCapacity: true)
            generations.removeAll(keepingCapacity: true)
        }
    }

    private let state = NIOLockedValueBox(State())
    /// Most conversations (lists, and recorded changes) kept: the cache starts over when it would hold more.
    package let limit: Int

    package init(limit: Int = 200_000) {
        self.limit = limit
    }

    package subscript(conversationId: String) -> [String]? {
        state.withLockedValue { $0.members[conversationId] }
    }

    package func contains(_ conversationId: String) -> Bool {
        state.withLockedValue { $0.members[conversationId] != nil }
    }

    /// The change count of a conversation, to pass to ``store(_:for:ifGeneration:)``.
    package func generation(of conversationId: String) -> UInt64 {
        state.withLockedValue { $0.generations[conversationId] ?? $0.floor }
    }

    /// Keeps a list read from the database, unless the conversation changed since `generation`.
    package func store(_ members: [String], for conversationId: String, ifGeneration generation: UInt64) {
        state.withLockedValue { state in
            guard (state.generations[conversationId] ?? state.floor) == generation else { return }
            if state.members.count >= limit { state.startOver() }
            state.members[conversationId] = members
        }
    }

    /// Records a change: the list is `members` from now on (nil or empty: forgotten, read again when needed).
    package func changed(_ conversationId: String, members: [String]?) {
        state.withLockedValue { state in
            if state.generations.count >= limit || state.members.count >= limit { state.startOver() }
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
