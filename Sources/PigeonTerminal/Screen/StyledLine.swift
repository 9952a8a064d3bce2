/// A colour of the terminal's 16 (what every terminal shows the same way).
public enum TerminalColor: Int, Sendable, Hashable {
    case red = 31, green = 32, yellow = 33, blue = 34, magenta = 35, cyan = 36, gray = 90, brightBlue = 94
}

/// How a piece of text is shown.
public struct TextStyle: Sendable, Hashable {
    public var foreground: TerminalColor?
    public var bold = false
    public var dim = false
    public var inverse = false

    public init(foreground: TerminalColor? = nil, bold: Bool = false, dim: Bool = false, inverse: Bool = false) {
        self.foreground = foreground
        self.bold = bold
        self.dim = dim
        self.inverse = inverse
    }

    public static let plain = TextStyle()

    /// The SGR parameters, empty for plain text.
    var sgr: [Int] {
        var codes: [Int] = []
        if bold { codes.append(1) }
        if dim { codes.append(2) }
        if inverse { codes.append(7) }
        if let foreground { codes.append(foreground.rawValue) }
        return codes
    }
}

/// One screen line as styled pieces; ``text`` is what a reader of the screen sees, ``ansi(colors:)`` what is
/// written to a terminal. Text in it is already sanitised (no control characters).
public struct StyledLine: Sendable, Hashable, CustomStringConvertible {
    public struct Span: Sendable, Hashable {
        public var text: String
        public var style: TextStyle
    }

    public private(set) var spans: [Span] = []

    public init() {}

    public init(_ text: String, _ style: TextStyle = .plain) {
        append(text, style)
    }

    public mutating func append(_ text: String, _ style: TextStyle = .plain) {
        guard !text.isEmpty else { return }
        if let last = spans.last, last.style == style {
            spans[spans.count - 1].text += text
        } else {
            spans.append(Span(text: text, style: style))
        }
    }

    public mutating func append(_ line: StyledLine) {
        for span in line.spans { append(span.text, span.style) }
    }

    public var text: String { spans.map(\.text).joined() }
    public var width: Int { TextWidth.of(text) }
    public var description: String { text }

    /// The style of the first span that contains `substring` (for tests: "is the ✓✓ blue?").
    public func style(of substring: String) -> TextStyle? {
        spans.first { $0.text.contains(substring) }?.style
    }

    /// The line cut to `width` cells; the span that does not fit ends in "…".
    public func truncated(to width: Int) -> StyledLine {
        guard self.width > width else { return self }
        var out = StyledLine()
        var used = 0
        for span in spans {
            let spanWidth = TextWidth.of(span.text)
            if used + spanWidth < width {
                out.append(span.text, span.style)
                used += spanWidth
            } else {
                out.append(TextWidth.truncated(span.text, to: width - used), span.style)
                break
            }
        }
        return out
    }

    /// What to write to a terminal: SGR sequences around the styled spans (none when `colors` is off).
    public func ansi(colors: Bool) -> String {
        guard colors else { return text }
        var out = ""
        for span in spans {
            let codes = span.style.sgr
            if codes.isEmpty {
                out += span.text
            } else {
                out += "\u{1B}[" + codes.map(String.init).joined(separator: ";") + "m" + span.text + "\u{1B}[0m"
            }
        }
        return out
    }
}
