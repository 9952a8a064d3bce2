/// The text of a message at one moment: what an edit replaces and a deletion erases. Pure.
package struct MessageRevision: Sendable, Equatable {
    package var body: String
    package var editedAt: Int64?
    package var deletedAt: Int64?

    package init(body: String, editedAt: Int64? = nil, deletedAt: Int64? = nil) {
        self.body = body
        self.editedAt = editedAt
        self.deletedAt = deletedAt
    }

    /// An edit or a deletion, with when it was made.
    package enum Change: Sendable, Equatable {
        case edit(body: String, at: Int64)
        case delete(at: Int64)
    }

    /// The revision after `change`: an edit replaces the text of a message that is not deleted (the server refuses
    /// an edit of a deleted message), a deletion erases the text for good.
    package func applying(_ change: Change) -> MessageRevision {
        switch change {
        case .edit(let body, let at):
            guard deletedAt == nil else { return self }
            return MessageRevision(body: body, editedAt: at, deletedAt: nil)
        case .delete(let at):
            return MessageRevision(body: "", editedAt: editedAt, deletedAt: deletedAt ?? at)
        }
    }

    /// What this device shows: the confirmed revision with this device's own changes that the server has not
    /// stored yet on top, oldest first (the optimistic state: an edit shows at once, and a refused one drops out).
    package func showing(pending changes: [Change]) -> MessageRevision {
        changes.reduce(self) { $0.applying($1) }
    }
}

/// A message's revision as the server confirmed it, and the seq of the last change it reflects. Changes may arrive
/// out of their order (one beyond a gap comes live, the one before it with the gap's fetch): only a change with a
/// later seq replaces the text, and a deletion always wins. Pure.
package struct ConfirmedRevision: Sendable, Equatable {
    package var revision: MessageRevision
    /// The seq of the newest change reflected in ``revision`` (for a copy from the server: a seq it was read at or
    /// after, so that no change it already reflects is applied again over a later one).
    package var changeSeq: Int64

    package init(revision: MessageRevision, changeSeq: Int64) {
        self.revision = revision
        self.changeSeq = changeSeq
    }

    /// Applies a stored change; whether the revision changed.
    @discardableResult
    package mutating func apply(_ change: MessageRevision.Change, seq: Int64) -> Bool {
        let before = revision
        switch change {
        case .edit:
            guard seq > changeSeq else { return false }
            revision = revision.applying(change)
        case .delete:
            revision = revision.applying(change)
        }
        changeSeq = max(changeSeq, seq)
        return revision != before
    }
}
