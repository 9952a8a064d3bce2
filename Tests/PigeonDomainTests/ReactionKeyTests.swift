import PigeonProtocol
import Testing

/// API.md 1.2: a reaction key is one emoji (one extended grapheme cluster) or an app token `[a-z0-9_:+-]{1,32}`, at
/// most 64 bytes; it is stored in one canonical form, and invisible characters are refused.
@Suite struct ReactionKeyTests {
    @Test(arguments: [
        "👍", "❤️", "👍🏽", "👨‍👩‍👧", "🇫🇷", "1️⃣", "🏳️‍🌈", "🏴\u{E0067}\u{E0062}\u{E0065}\u{E006E}\u{E0067}\u{E007F}", "party_parrot", "+1", "a:b", "1",
        String(repeating: "x", count: 32),
    ])
    func valid(_ key: String) {
        #expect(Validation.isValidReactionKey(key))
    }

    @Test(arguments: [
        "", "👍👍", "A", "é", "a b", "ok!", String(repeating: "x", count: 33), "e\u{301}", "#", "#\u{FE0F}", "\u{0}", "👍 ",
        // Invisible characters: bidirectional controls, separators, zero-width ones, stray joiners and tags, C1.
        "👍\u{202E}", "\u{202E}👍", "👍\u{2066}", "👍\u{200E}", "👍\u{2028}", "👍\u{2029}", "👍\u{200B}", "👍\u{200C}", "👍\u{2060}", "👍\u{FEFF}",
        "\u{200D}👍", "👍\u{200D}", "👍\u{E0041}", "👍\u{E007F}", "❤\u{85}",
    ])
    func invalid(_ key: String) {
        #expect(!Validation.isValidReactionKey(key))
    }

    /// One form per emoji: variation selectors dropped, one U+FE0F after an emoji not drawn as one by default (not
    /// before a skin tone); tokens as they are.
    @Test(arguments: [
        ("❤", "❤️"), ("❤️", "❤️"), ("❤\u{FE0F}\u{FE0F}\u{FE0F}", "❤️"), ("❤\u{FE0E}", "❤️"), ("👍", "👍"), ("👍\u{FE0F}", "👍"),
        ("©", "©\u{FE0F}"), ("1⃣", "1️⃣"), ("1\u{FE0F}\u{FE0F}⃣", "1️⃣"), ("🏳\u{200D}🌈", "🏳️‍🌈"), ("☝🏻", "☝🏻"), ("☝\u{FE0F}🏻", "☝🏻"), ("party_parrot", "party_parrot"),
    ])
    func canonical(_ pair: (String, String)) {
        #expect(Validation.canonicalReactionKey(pair.0) == pair.1, "\(pair.0.unicodeScalars.map { String($0.value, radix: 16) })")
    }
}
