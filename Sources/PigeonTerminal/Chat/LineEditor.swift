/// The chat's input line: text and a cursor, edited by keys. Pure.
public struct LineEditor: Sendable, Equatable {
    public private(set) var characters: [Character] = []
    /// Index in `characters` where the next character goes.
    public private(set) var cursor = 0

    public init(_ text: String = "") {
        characters = Array(text)
        cursor = characters.count
    }

    public var text: String { String(characters) }
    public var isEmpty: Bool { characters.isEmpty }

    public mutating func insert(_ text: String) {
        let clean = Array(TextWidth.sanitized(text))
        characters.insert(contentsOf: clean, at: cursor)
        cursor += clean.count
    }

    public mutating func backspace() {
        guard cursor > 0 else { return }
        cursor -= 1
        characters.remove(at: cursor)
    }

    public mutating func deleteForward() {
        guard cursor < characters.count else { return }
        characters.remove(at: cursor)
    }

    public mutating func moveLeft() { cursor = max(0, cursor - 1) }
    public mutating func moveRight() { cursor = min(characters.count, cursor + 1) }
    public mutating func moveToStart() { cursor = 0 }
    public mutating func moveToEnd() { cursor = characters.count }

    /// Deletes the word before the cursor (Ctrl-W).
    public mutating func deleteWordBackward() {
        var start = cursor
        while start > 0, characters[start - 1] == " " { start -= 1 }
        while start > 0, characters[start - 1] != " " { start -= 1 }
        characters.removeSubrange(start..<cursor)
        cursor = start
    }

    /// Empties the line and returns what it held.
    public mutating func take() -> String {
        defer { self = LineEditor() }
        return text
    }

    /// The part of the line shown in `width` cells, scrolled so the cursor is visible, and the cursor's column in it.
    public func visible(width: Int) -> (text: String, cursorColumn: Int) {
        let width = max(1, width)
        var start = 0
        // Scroll right until the text before the cursor (plus the cursor cell) fits.
        while TextWidth.of(String(characters[start..<cursor])) + 1 > width, start < cursor { start += 1 }
        var shown = ""
        var used = 0
        for character in characters[start...] {
            let cells = TextWidth.of(character)
            if used + cells > width { break }
            shown.append(character)
            used += cells
        }
        return (shown, TextWidth.of(String(characters[start..<cursor])))
    }
}
