/// Chat-like message bodies: words, so that the full-text index does the work real text gives it.
enum MessageBody {
    private static let words = [
        "hello", "see", "you", "at", "the", "station", "tomorrow", "morning", "bring", "coffee", "please", "running",
        "late", "train", "was", "cancelled", "again", "meeting", "moved", "to", "three", "o'clock", "thanks", "great",
    ]

    /// About `bytes` UTF-8 bytes of text, different for each `index`.
    static func text(index: Int, bytes: Int) -> String {
        var text = "message \(index)"
        var word = index
        while text.utf8.count < bytes {
            word = (word &* 1_103_515_245 &+ 12_345) & 0x7fff_ffff
            text += " " + words[word % words.count]
        }
        return String(text.prefix(bytes))
    }
}
