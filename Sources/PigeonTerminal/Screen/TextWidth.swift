/// How many terminal cells text takes, and cutting or wrapping it to a width: CJK and emoji take two cells,
/// combining marks none. Control characters are never passed to the terminal (``sanitized(_:keepNewlines:)``): a
/// message body is someone else's text, and an escape sequence in it must not move the cursor or change colours.
public enum TextWidth {
    /// The cells one character takes.
    public static func of(_ character: Character) -> Int {
        let scalars = character.unicodeScalars
        guard let first = scalars.first else { return 0 }
        if first.value < 0x20 || (0x7F..<0xA0).contains(first.value) { return 0 }
        if scalars.contains(where: { $0.value == 0xFE0F }) || first.properties.isEmojiPresentation { return 2 }
        if isWide(first.value) { return 2 }
        switch first.properties.generalCategory {
        case .nonspacingMark, .enclosingMark, .format: return 0
        default: return 1
        }
    }

    public static func of(_ text: some StringProtocol) -> Int {
        text.reduce(0) { $0 + of($1) }
    }

    /// East Asian Wide and Fullwidth ranges (Unicode's EastAsianWidth.txt, the blocks a chat meets).
    private static func isWide(_ value: UInt32) -> Bool {
        switch value {
        case 0x1100...0x115F, 0x2E80...0x303E, 0x3041...0x33FF, 0x3400...0x4DBF, 0x4E00...0x9FFF, 0xA000...0xA4CF,
            0xAC00...0xD7A3, 0xF900...0xFAFF, 0xFE30...0xFE4F, 0xFF00...0xFF60, 0xFFE0...0xFFE6, 0x1F300...0x1F64F,
            0x1F900...0x1F9FF, 0x20000...0x3FFFD:
            return true
        default:
            return false
        }
    }

    /// `text` with every control character (escape sequences included) shown as U+FFFD and tabs as a space;
    /// line breaks are kept when `keepNewlines`, else shown as a space.
    public static func sanitized(_ text: String, keepNewlines: Bool = false) -> String {
        var out = String.UnicodeScalarView()
        for scalar in text.unicodeScalars {
            switch scalar.value {
            case 0x0A: out.append(keepNewlines ? scalar : " ")
            case 0x09, 0x0D: out.append(" ")
            case 0x00..<0x20, 0x7F..<0xA0, 0x2028, 0x2029: out.append("\u{FFFD}")
            default: out.append(scalar)
            }
        }
        return String(out)
    }

    /// The longest prefix of `text` that fits in `width` cells, ending in "…" when something was cut.
    public static func truncated(_ text: String, to width: Int) -> String {
        guard width > 0 else { return "" }
        guard of(text) > width else { return text }
        var out = ""
        var used = 0
        for character in text {
            let cells = of(character)
            if used + cells > width - 1 { break }
            out.append(character)
            used += cells
        }
        return out + "…"
    }

    /// `text` padded with spaces (or cut) to exactly `width` cells.
    public static func padded(_ text: String, to width: Int) -> String {
        let cut = truncated(text, to: width)
        return cut + String(repeating: " ", count: max(0, width - of(cut)))
    }

    /// Lines of at most `width` cells: words wrap at spaces, a word longer than a line is broken, and each "\n"
    /// starts a new line. Never returns an empty array.
    public static func wrapped(_ text: String, width: Int) -> [String] {
        let width = max(2, width)
        var lines: [String] = []
        for paragraph in text.split(separator: "\n", omittingEmptySubsequences: false) {
            var line = ""
            var lineWidth = 0
            for word in paragraph.split(separator: " ", omittingEmptySubsequences: false) {
                let wordWidth = of(word)
                let gap = line.isEmpty ? 0 : 1
                if lineWidth + gap + wordWidth <= width {
                    if gap == 1 { line += " " }
                    line += word
                    lineWidth += gap + wordWidth
                    continue
                }
                if !line.isEmpty {
                    lines.append(line)
                    line = ""
                    lineWidth = 0
                }
                for character in word {
                    let cells = of(character)
                    if lineWidth + cells > width, !line.isEmpty {
                        lines.append(line)
                        line = ""
                        lineWidth = 0
                    }
                    line.append(character)
                    lineWidth += cells
                }
            }
            lines.append(line)
        }
        return lines
    }
}
