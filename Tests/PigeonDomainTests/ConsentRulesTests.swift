import PigeonDomain
@testable import PigeonServer
import PigeonProtocol
import Testing

/// The pure rules of consent (``ConsentCheck``) and of the sender's copies of a hidden message (``MessageEvents``), without a store.
@Suite struct ConsentRulesTests {
    static let limit3 = ConsentRules(invitations: false, strangerAddsPerHour: 3)
    static let hour = ConsentRules.window

    @Test func aBlockerRefusesItsAdderAndTheServerAPIPassesEverything() throws {
        #expect(throws: PigeonError.self) {
            try ConsentCheck.admit(["alice", "bob"], blockers: ["alice"], contacts: [], recent: [], rules: .open, admission: .consentRules, now: 0)
        }
        let api = try ConsentCheck.admit(
            (1...99).map { "s\($0)" }, blockers: ["s1"], contacts: [], recent: [], rules: Self.limit3, admission: .everyoneJoins, now: 0)
        #expect(api == ConsentCheck.Admission())
    }

    /// Strangers count once each in the hour; contacts never; past the limit `rate_limited` with the wait until enough
    /// of the hour's adds leave it (an hour when the request alone is over the limit).
    @Test(arguments: [
        // (recent adds at, new users, contacts among them, expected retryAfter or nil when admitted)
        ([Int64](), ["a", "b", "c"], Set<String>(), Int?.none),
        ([Int64](), ["a", "b", "c", "d"], Set<String>(), Int?.some(3_600)),
        ([Int64](), ["a", "b", "c", "d"], Set(["d"]), Int?.none),
        ([1_000, 2_000], ["a"], Set<String>(), Int?.none),
        ([1_000, 2_000], ["a", "b"], Set<String>(), Int?.some(3_600 - 9)),
        ([1_000, 2_000, 3_000], ["a", "b"], Set<String>(), Int?.some(3_600 - 8)),
    ])
    func theStrangersLimit(recentAt: [Int64], added: [String], contacts: Set<String>, retryAfter: Int?) throws {
        let now: Int64 = 10_000
        let recent = recentAt.enumerated().map { (userId: "old\($0.offset)", at: $0.element) }
        do {
            let admitted = try ConsentCheck.admit(added, blockers: [], contacts: contacts, recent: recent, rules: Self.limit3, admission: .consentRules, now: now)
            #expect(retryAfter == nil, "admitted \(admitted)")
            #expect(admitted.newStrangers == added.filter { !contacts.contains($0) })
        } catch let error as PigeonError {
            #expect(error.code == .rateLimited)
            #expect(error.retryAfter == retryAfter)
        }
    }

    @Test func aStrangerAlreadyCountedInTheHourIsNotCountedAgainAndOldAddsLeaveIt() throws {
        let recent = [(userId: "a", at: Int64(5_000)), (userId: "b", at: Int64(6_000)), (userId: "c", at: Int64(7_000) - Self.hour)]
        let admitted = try ConsentCheck.admit(["a", "b", "d"], blockers: [], contacts: [], recent: recent, rules: Self.limit3, admission: .consentRules, now: 8_000)
        #expect(admitted.newStrangers == ["d"])
        let invites = ConsentRules(invitations: true, strangerAddsPerHour: 0)
        #expect(try ConsentCheck.admit(["a", "b"], blockers: [], contacts: ["b"], recent: [], rules: invites, admission: .consentRules, now: 0).invited == ["a"])
    }

    /// A message hidden from some members: the sender's `message.stored` and its other devices' `message.new` name
    /// them (`withheldFrom`); the other members' copies do not, and the hidden members get none.
    @Test func theSendersCopiesOfAHiddenMessageNameWhomItIsWithheldFrom() throws {
        let message = BatchPlanTests.message("g", sender: "mallory", device: "m")
        let presence = LocalFanout(hub: StreamHub())
        let stored = MessageEvents.stored(message, seq: 7, storedAt: 3)
        let writes = MessageEvents.writes(
            of: message, stored: stored, members: ["alice", "bob", "mallory"], withheld: ["alice"], hidden: ["alice"], presence: presence,
            payloads: EventPayload())
        #expect(writes.newRecipients.map(\.userId) == ["bob", "mallory"])
        #expect(writes.storedPayload.contains(#""withheldFrom":["alice"]"#))
        #expect(writes.newPayload(for: "mallory").contains(#""withheldFrom":["alice"]"#))
        #expect(!writes.newPayload(for: "bob").contains("withheldFrom"))
        let plain = MessageEvents.writes(of: message, stored: stored, members: ["bob", "mallory"], presence: presence, payloads: EventPayload())
        #expect(!plain.storedPayload.contains("withheldFrom") && !plain.newPayload(for: "mallory").contains("withheldFrom"))
    }
}
