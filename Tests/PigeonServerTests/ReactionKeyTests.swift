import PigeonProtocol
import Testing

/// API.md 1.2: a reaction key is one emoji (one extended grapheme cluster) or an app token `[a-z0-9_:+-]{1,32}`, at
/// most 64 bytes.
@Suite struct ReactionKeyTests {
    @Test(arguments: ["👍", "❤️", "👍🏽", "👨‍👩‍👧", "🇫🇷", "1️⃣", "🏳️‍🌈", "party_parrot", "+1", "a:b", "1", String(repeating: "x", count: 32)])
    func valid(_ key: String) {
        #expect(Validation.isValidReactionKey(key))
    }

    @Test(arguments: ["", "👍👍", "A", "é", "a b", "ok!", String(repeating: "x", count: 33), "e\u{301}", "#", "©", "\u{0}", "👍 "])
    func invalid(_ key: String) {
        #expect(!Validation.isValidReactionKey(key))
    }
}
