/// The demo's screen as a pure function: a title with the step, two chat panes side by side (each a
/// ``ChatScreen``), and the narration below them.
public enum DemoScreen {
    public static func render(
        title: String, left: ChatScreenState, right: ChatScreenState, narration: String, width: Int, height: Int
    ) -> [StyledLine] {
        let width = max(41, width)
        let narrationLines = TextWidth.wrapped(TextWidth.sanitized(narration), width: width - 2).prefix(4)
        let paneHeight = max(6, height - 2 - narrationLines.count)
        let paneWidth = (width - 1) / 2
        let leftLines = ChatScreen.render(left, width: paneWidth, height: paneHeight).lines
        let rightLines = ChatScreen.render(right, width: width - 1 - paneWidth, height: paneHeight).lines
        var lines = [StyledLine(TextWidth.padded(" " + title, to: width), TextStyle(foreground: .magenta, bold: true, inverse: true))]
        for (leftLine, rightLine) in zip(leftLines, rightLines) {
            var line = leftLine
            line.append(String(repeating: " ", count: max(0, paneWidth - leftLine.width)))
            line.append("│", TextStyle(foreground: .gray))
            line.append(rightLine)
            lines.append(line)
        }
        lines.append(StyledLine(String(repeating: "─", count: width), TextStyle(foreground: .gray)))
        for text in narrationLines { lines.append(StyledLine(" " + text, TextStyle(bold: true))) }
        return Array(lines.prefix(max(height, 1))).map { $0.truncated(to: width) }
    }
}
