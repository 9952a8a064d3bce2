import PigeonProtocol
import PigeonTestSupport
import Testing

/// API.md 1.2: a reaction key is one emoji (one extended grapheme cluster) or an app token `[a-z0-9_:+-]{1,32}`, at
/// most 64 bytes; it is stored in one canonical form, and invisible characters are refused. The cases are the ones
/// PigeonJS's browser test checks its `canonicalReactionKey` against (`Clients/vectors/reaction-keys.json`).
@Suite struct ReactionKeyTests {
    @Test(arguments: SharedVectors.reactionKeys.valid)
    func valid(_ key: String) {
        #expect(Validation.isValidReactionKey(key))
    }

    @Test(arguments: SharedVectors.reactionKeys.invalid)
    func invalid(_ key: String) {
        #expect(!Validation.isValidReactionKey(key))
    }

    /// One form per emoji: variation selectors dropped, one U+FE0F after an emoji not drawn as one by default (not
    /// before a skin tone); tokens as they are.
    @Test(arguments: SharedVectors.reactionKeys.canonical.map { ($0.given, $0.canonical) })
    func canonical(_ pair: (String, String)) {
        #expect(Validation.canonicalReactionKey(pair.0) == pair.1, "\(pair.0.unicodeScalars.map { String($0.value, radix: 16) })")
    }

    /// The vectors still hold the cases that matter most (a vector file emptied by mistake would pass every case).
    @Test func theVectorsAreThere() {
        #expect(SharedVectors.reactionKeys.valid.count >= 10 && SharedVectors.reactionKeys.invalid.count >= 20)
        #expect(SharedVectors.reactionKeys.canonical.contains { $0.given == "\u{2764}" && $0.canonical == "\u{2764}\u{FE0F}" })
    }
}
