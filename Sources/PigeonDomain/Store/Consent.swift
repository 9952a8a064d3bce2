import PigeonProtocol

/// Blocking and the consent rules (API.md 1.2, "Consent and blocking").
///
/// Where a block acts, the same on every store:
/// - **At write time, in the transaction that stores a message.** A message whose sender a member blocks (except the
///   server's `pigeon.members` changes) writes no `message.new` for that member and a *hidden* record (member,
///   conversation, seq, sender) instead. Stream, sync, replay and push read the event log, so nothing of it reaches
///   the blocker's devices; history, thread pages, `lastMessage` and unread counts leave out the blocker's hidden
///   records. The decision is taken once, under the store's own ordering (SQLite's one writer; PostgreSQL's
///   transaction, which reads the committed blocks), so it is the same on every node and every read; an unblock
///   deletes the block, never the hidden records: what was hidden stays hidden.
/// - **Ticks.** A blocker's watermarks, as a user whose messages are hidden from it sees them (`receipt` events and
///   the members of a `Conversation`), stop just below that user's first hidden message in the conversation
///   (``WatermarkFloors``): the hidden message never shows ✓✓, and nor does a later one of that user there.
/// - **Reactions and typing** of a blocked user do not reach the blocker (no `reaction` event, no typing frame); the
///   aggregate counts every member's reactions.
/// - **Adds.** A user cannot add a user who blocks it (`403`); strangers and invitations follow ``ConsentRules``.
public protocol BlockStore: Sendable {
    /// Records that `blocker` blocks `blocked` from `at` on; a repeat keeps the first time and changes nothing.
    /// `invalid_request` past ``BlockLimits/perUser`` blocks. Caches of every node learn of it at once.
    func block(_ blocked: String, by blocker: String, at: Int64) async throws
    /// Ends the block, if any (idempotent). What was hidden stays hidden.
    func unblock(_ blocked: String, by blocker: String) async throws
    /// The users `blocker` blocks, oldest block first (ties by user id).
    func blocks(of blocker: String) async throws -> [Block]
    /// The users who block `blocked` now. Cheap: served from memory when possible, forgotten on every node when a
    /// block of `blocked` is made or ended.
    func blockers(of blocked: String) async throws -> Set<String>
    /// The consent rules conversation creations and member adds by users apply from now on (the server sets its
    /// configuration's at start; a store starts with ``ConsentRules/open``).
    func setConsentRules(_ rules: ConsentRules)
    /// Turns an invitation of `userId` into membership (`membership` joined) and writes a `conversation.created` event
    /// carrying the conversation as it is now to every device of `userId`; answers the conversation as `userId` sees it.
    /// A joined member gets the conversation unchanged (nothing written); `not_found` for anyone else.
    func acceptInvitation(conversationId: String, userId: String) async throws -> Conversation
}

/// What a conversation creation or a member add by a user is held to (configured by `--consent` and
/// `--stranger-adds-per-hour`).
public struct ConsentRules: Sendable, Equatable {
    /// Whether a stranger's add makes an invitation (`--consent invites`) or a member (`open`).
    public var invitations: Bool
    /// Strangers a user may add in an hour (0: no limit).
    public var strangerAddsPerHour: Int

    public init(invitations: Bool, strangerAddsPerHour: Int) {
        self.invitations = invitations
        self.strangerAddsPerHour = strangerAddsPerHour
    }

    /// API.md 1.1's behaviour: no invitation, no limit (a store's rules until the server sets its own).
    public static let open = ConsentRules(invitations: false, strangerAddsPerHour: 0)

    /// How long a stranger add counts against the limit.
    public static let window: Int64 = 3_600_000

    /// The SQL expression both stores set a stranger add's `added` to when the invitation it made ends unaccepted (a
    /// decline, or a removal while invited): `added#at`, a key no user id can be (`#` is not allowed in one). The add
    /// keeps counting against its adder for the rest of its hour, but no longer counts the user as added, so a
    /// re-invitation counts again: a stranger cannot re-invite a user who declined without limit.
    package static let endedInvitationKey = "added || '#' || at"
}

/// Who decides how added members join: a user's route (the ``ConsentRules``), or the app's own backend (the server
/// API), whose adds join everyone and are held to no consent rule.
public enum MemberAdmission: Sendable, Equatable {
    case consentRules
    case everyoneJoins
}

/// The consent decision of an add, pure: the same on every store, which reads its inputs in the writing transaction.
package enum ConsentCheck {
    /// The outcome for the users `added` by `adder` (not yet members, the adder not among them).
    package struct Admission: Equatable {
        /// The strangers to record against the adder's hourly limit (not counted already in the window).
        package var newStrangers: [String] = []
        /// The added users who start as `invited`.
        package var invited: Set<String> = []

        package init(newStrangers: [String] = [], invited: Set<String> = []) {
            self.newStrangers = newStrangers
            self.invited = invited
        }
    }

    /// Decides an add: `forbidden` when one of `added` blocks the adder (`blockers`), `rate_limited` with
    /// `retryAfter` when the strangers among them (`added` minus `contacts`, the users that share a joined
    /// conversation with the adder) would pass the hourly limit counting `recent` (the strangers the adder added in the
    /// last hour, with when), else which of them are new strangers and which are invited. The server API
    /// (``MemberAdmission/everyoneJoins``) passes every check.
    package static func admit(
        _ added: [String], blockers: Set<String>, contacts: Set<String>, recent: [(userId: String, at: Int64)], rules: ConsentRules,
        admission: MemberAdmission, now: Int64
    ) throws -> Admission {
        guard admission == .consentRules, !added.isEmpty else { return Admission() }
        if let blocker = added.first(where: blockers.contains) {
            throw PigeonError(.forbidden, "this user does not accept invitations from you: \(blocker)")
        }
        let strangers = added.filter { !contacts.contains($0) }
        var result = Admission(invited: rules.invitations ? Set(strangers) : [])
        guard rules.strangerAddsPerHour > 0 else { return result }
        let cutoff = now - ConsentRules.window
        let counted = recent.filter { $0.at > cutoff }.sorted { $0.at < $1.at }
        let countedUsers = Set(counted.map(\.userId))
        result.newStrangers = strangers.filter { !countedUsers.contains($0) }
        let over = counted.count + result.newStrangers.count - rules.strangerAddsPerHour
        guard over > 0 else { return result }
        // Enough of the oldest adds must leave the window; more new strangers than the limit never fit.
        let wait: Int64 =
            result.newStrangers.count > rules.strangerAddsPerHour ? ConsentRules.window : counted[over - 1].at + ConsentRules.window - now
        throw PigeonError(
            .rateLimited,
            "you may add at most \(rules.strangerAddsPerHour) users you share no conversation with in an hour (\(counted.count) added, \(result.newStrangers.count) more asked)",
            retryAfter: Int(max(1, (wait + 999) / 1_000)))
    }
}

/// How far a member's watermarks are shown to the users whose messages are hidden from it: just below each such
/// user's first hidden message in the conversation, for good (a watermark covers every lower seq, so a higher one
/// would show the hidden message ✓✓).
package struct WatermarkFloors: Sendable, Equatable {
    /// Viewer (the blocked sender) → the seq of its first message hidden from the member.
    package var firstHidden: [String: Int64] = [:]

    package init(firstHidden: [String: Int64] = [:]) {
        self.firstHidden = firstHidden
    }

    package var isEmpty: Bool { firstHidden.isEmpty }

    /// The watermark `seq` as `viewer` is shown it.
    package func shown(_ seq: Int64, to viewer: String) -> Int64 {
        guard let first = firstHidden[viewer] else { return seq }
        return min(seq, first - 1)
    }

    /// Who gets a `receipt` event, and with which `upToSeq`, when the member's watermark moves from `old` to `new`:
    /// the members without a floor get `new` (one shared payload), each with a floor the shown value when that moved.
    package func receiptRecipients(members: [String], old: Int64, new: Int64) -> [(upToSeq: Int64, members: [String])] {
        guard !firstHidden.isEmpty else { return [(new, members)] }
        var plain: [String] = []
        var clamped: [Int64: [String]] = [:]
        for member in members {
            guard firstHidden[member] != nil else {
                plain.append(member)
                continue
            }
            let shownNew = shown(new, to: member)
            if shownNew > shown(old, to: member) { clamped[shownNew, default: []].append(member) }
        }
        var result: [(upToSeq: Int64, members: [String])] = plain.isEmpty ? [] : [(new, plain)]
        for seq in clamped.keys.sorted() { result.append((seq, clamped[seq]!)) }
        return result
    }
}

extension Conversation {
    /// The members' watermarks as `viewer` is shown them, given each member's floors in this conversation.
    package mutating func showWatermarks(to viewer: String, floors: [String: WatermarkFloors]) {
        guard !floors.isEmpty else { return }
        for index in members.indices {
            guard let memberFloors = floors[members[index].userId], members[index].userId != viewer else { continue }
            members[index].deliveredSeq = memberFloors.shown(members[index].deliveredSeq, to: viewer)
            members[index].readSeq = memberFloors.shown(members[index].readSeq, to: viewer)
        }
    }
}
