import PigeonProtocol

/// A message's reactions as one user sees them (`[Reaction]`, keys in order of first use), changed by that user's own
/// adds and removes. Pure.
///
/// Only this user's own reactions are ever applied here: whether it holds a key is known (``Reaction/me``), so an add
/// or a remove changes a count only when it changes `me`, and applying one twice is applying it once. Other users'
/// reactions are never counted locally: the server's aggregate replaces the whole list.
package enum ReactionAggregate {
    /// `reactions` after this user adds (`.add`) or removes (`.remove`) `key`.
    package static func applying(_ action: ReactionAction, key: String, to reactions: [Reaction]) -> [Reaction] {
        var reactions = reactions
        let index = reactions.firstIndex { $0.key == key }
        switch action {
        case .add:
            guard let index else {
                reactions.append(Reaction(key: key, count: 1, me: true))
                return reactions
            }
            guard !reactions[index].me else { return reactions }
            reactions[index].me = true
            reactions[index].count += 1
        case .remove:
            guard let index, reactions[index].me else { return reactions }
            reactions[index].me = false
            reactions[index].count -= 1
            if reactions[index].count <= 0 { reactions.remove(at: index) }
        }
        return reactions
    }

    /// What a device shows: the server's aggregate with this device's unanswered adds and removes on top, oldest
    /// first.
    package static func showing(_ confirmed: [Reaction], pending: [(action: ReactionAction, key: String)]) -> [Reaction] {
        pending.reduce(confirmed) { applying($1.action, key: $1.key, to: $0) }
    }
}
