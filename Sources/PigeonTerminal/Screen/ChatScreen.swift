import Foundation
import PigeonKit
import PigeonProtocol

/// Everything the chat screen shows, and nothing else: ``ChatScreen/render(_:width:height:)`` turns it into lines.
public struct ChatScreenState: Sendable, Equatable {
    public struct Notice: Sendable, Equatable {
        public var text: String
        public var isError: Bool

        public init(_ text: String, isError: Bool = false) {
            self.text = text
            self.isError = isError
        }
    }

    /// A search in progress (being typed) or done (its results replace the message list).
    public struct Search: Sendable, Equatable {
        public var query: LineEditor
        public var results: [PigeonMessage]?

        public init(query: LineEditor = LineEditor(), results: [PigeonMessage]? = nil) {
            self.query = query
            self.results = results
        }
    }

    /// An invitation of the viewer's (API.md 1.2), shown above the messages until accepted or declined.
    public struct Invitation: Sendable, Equatable {
        public var conversationId: String
        /// "carol invited you to Crew" (``MessageFormat/invitation(_:me:)``).
        public var text: String

        public init(conversationId: String, text: String) {
            self.conversationId = conversationId
            self.text = text
        }
    }

    /// The viewer.
    public var userId: String
    public var title: String
    /// The loaded messages, oldest first.
    public var messages: [PigeonMessage] = []
    /// Older messages exist on the device.
    public var hasOlder = false
    /// Each stored message shows its `#seq` after the sender (`pigeon ls`: what `pigeon edit` and `delete` take).
    public var showsSeqs = false
    public var connection: ConnectionState = .offline
    /// False after `/offline`.
    public var networkEnabled = true
    public var input = LineEditor()
    /// Lines scrolled back from the newest (0: the newest message is at the bottom).
    public var scrollOffset = 0
    public var selected: Int64?
    public var notice: Notice?
    public var typing: [String] = []
    public var search: Search?
    /// Advances the "sending" spinner.
    public var frame = 0
    public var timeZone = TimeZone.current
    /// The input and status lines.
    public var showsInput = true
    /// The status line's text when there is nothing else to say (nil: the keys).
    public var help: String?
    /// A group: one's own messages show per-member counts (``Ticks/tick(for:inGroup:frame:)``).
    public var isGroup = false
    /// This user was removed from the conversation or left it: read-only.
    public var hasLeft = false
    /// Set while a thread is open (`/thread`): the root's local id. ``messages`` then holds the root first and its
    /// replies after it; otherwise thread replies are left out of the conversation (their root says how many).
    public var threadRoot: Int64?
    /// The viewer's invitations, the one `/accept` and `/decline` act on first (the open conversation's, when it is one).
    public var invitations: [Invitation] = []
    /// The open conversation is an invitation: nothing shows nor can be sent until it is accepted.
    public var isInvitation = false

    public init(userId: String, title: String) {
        self.userId = userId
        self.title = title
    }
}

/// What ``ChatScreen/render(_:width:height:)`` produced.
public struct RenderedScreen: Sendable, Equatable {
    /// Exactly `height` lines, each at most `width` cells.
    public var lines: [StyledLine]
    /// Where the terminal's cursor goes (0-based), on the input line.
    public var cursorRow: Int
    public var cursorColumn: Int
    /// The largest useful ``ChatScreenState/scrollOffset`` (every loaded line seen).
    public var maxScrollOffset: Int
    /// Rows of the message area (a page for PgUp/PgDn).
    public var messageRows: Int

    public var text: [String] { lines.map(\.text) }
}

/// The chat screen as a pure function of its state: a header with the connection, the offline banner, the
/// messages with times and live ticks, a status line (notices, typing, hints) and the input line.
public enum ChatScreen {
    public static let offlineBanner = "No connection - messages will send when online"
    static let help = "Enter send · ↑↓ select · /react /reply /thread /edit /delete /file · Ctrl-R retry · PgUp/PgDn · Ctrl-F search · /quit"
    static let threadHelp = "In a thread: /back returns · Enter replies here · ↑↓ select · /react /reply /edit /delete"

    public static func render(_ state: ChatScreenState, width: Int, height: Int) -> RenderedScreen {
        let width = max(20, width)
        let height = max(state.showsInput ? 5 : 3, height)
        var top: [StyledLine] = [header(state, width: width)]
        if state.connection != .online {
            var text = offlineBanner
            if !state.networkEnabled { text += " · /online reconnects" } else if state.connection == .connecting { text += " · connecting…" }
            top.append(StyledLine(TextWidth.padded(" " + text, to: width), TextStyle(foreground: .yellow, bold: true, inverse: true)))
        }
        if let invitation = invitationLine(state) {
            top.append(StyledLine(TextWidth.padded(" " + TextWidth.sanitized(invitation), to: width), TextStyle(foreground: .cyan, bold: true, inverse: true)))
        }
        let bottomCount = state.showsInput ? 2 : 0
        let rows = max(1, height - top.count - bottomCount)

        let body: [StyledLine]
        if let results = state.search?.results {
            body = searchLines(state, results: results, width: width)
        } else {
            body = messageLines(state, width: width)
        }
        let maxScroll = max(0, body.count - rows)
        let offset = min(max(0, state.scrollOffset), maxScroll)
        let end = body.count - offset
        var area = Array(body[max(0, end - rows)..<end])
        // Short histories sit at the bottom, next to the input, like a chat app's.
        area = Array(repeating: StyledLine(), count: rows - area.count) + area

        var lines = top + area
        var cursorRow = 0
        var cursorColumn = 0
        if state.showsInput {
            lines.append(statusLine(state, width: width, linesBelow: offset))
            let (input, column) = inputLine(state, width: width)
            lines.append(input)
            cursorRow = lines.count - 1
            cursorColumn = column
        }
        return RenderedScreen(
            lines: lines.map { $0.truncated(to: width) }, cursorRow: cursorRow, cursorColumn: cursorColumn,
            maxScrollOffset: maxScroll, messageRows: rows)
    }

    /// The invitation line under the header: "carol invited you to Crew: /accept or /decline", and how many others
    /// wait (`nil` without invitations).
    public static func invitationLine(_ state: ChatScreenState) -> String? {
        guard let first = state.invitations.first else { return nil }
        var text = "\(first.text): /accept or /decline"
        if state.invitations.count > 1 { text += " · \(state.invitations.count - 1) more: pigeon invites" }
        return text
    }

    static func header(_ state: ChatScreenState, width: Int) -> StyledLine {
        let (symbol, label, color): (String, String, TerminalColor) =
            switch state.connection {
            case .online: ("●", "online", .green)
            case .connecting: ("◌", "connecting", .yellow)
            case .offline: ("○", state.networkEnabled ? "offline" : "offline (by you)", .red)
            case .signedOut: ("✕", "signed out", .red)
            }
        let right = "\(state.userId) · \(symbol) \(label) "
        let left = TextWidth.truncated(" Pigeon · \(TextWidth.sanitized(state.title))", to: width - TextWidth.of(right) - 1)
        var line = StyledLine(left, TextStyle(bold: true, inverse: true))
        line.append(String(repeating: " ", count: max(1, width - TextWidth.of(left) - TextWidth.of(right))), TextStyle(inverse: true))
        line.append(right, TextStyle(foreground: color, bold: true, inverse: true))
        return line
    }

    /// Every loaded message as screen lines: a day line when the day changes, then "HH:mm name body", wrapped, with
    /// the tick of one's own messages at the right end of its last line; a failed message says why and how to retry.
    static func messageLines(_ state: ChatScreenState, width: Int) -> [StyledLine] {
        let shown = visibleMessages(state)
        let names = shown.map { MessageFormat.sender(of: $0, me: state.userId) }
        let nameWidth = min(12, max(3, names.map { TextWidth.of($0) }.max() ?? 3))
        let seqLabels = shown.map { message in state.showsSeqs ? message.seq.map { "#\($0)" } ?? "" : "" }
        // "#12 " after the name, in a column as wide as the widest (blank for a message not stored yet).
        let seqWidth = state.showsSeqs ? (seqLabels.map(\.count).max() ?? 0) + 1 : 0
        let prefixWidth = 1 + 5 + 1 + nameWidth + 1 + seqWidth
        let ticks = shown.map { message -> (String, TextStyle)? in
            guard message.isOutgoing, message.kind == .message else { return nil }
            return Ticks.tick(for: message, inGroup: state.isGroup, frame: state.frame)
        }
        // Ticks are right-aligned in one column, as wide as the widest (a group's "✓✓ 3/5" is wider than "✓✓").
        let tickWidth = max(2, ticks.compactMap { $0.map { TextWidth.of($0.0) } }.max() ?? 2)
        let bodyWidth = max(8, width - prefixWidth - 1 - tickWidth)
        var lines: [StyledLine] = []
        if state.threadRoot != nil {
            lines.append(StyledLine(" Thread · /back returns to the conversation", TextStyle(foreground: .yellow, bold: true)))
        }
        if state.hasOlder { lines.append(StyledLine("  ↑ older messages: PgUp", TextStyle(foreground: .gray))) }
        var lastDay: DateComponents?
        for (((message, name), tick), seqLabel) in zip(zip(zip(shown, names), ticks), seqLabels) {
            let time = MessageFormat.timestamp(of: message)
            let day = MessageFormat.dayKey(time, timeZone: state.timeZone)
            if day != lastDay {
                let label = " \(MessageFormat.day(time, timeZone: state.timeZone)) "
                let side = max(2, (width - TextWidth.of(label)) / 2)
                lines.append(StyledLine(String(repeating: "─", count: side) + label + String(repeating: "─", count: side), TextStyle(foreground: .gray)))
                lastDay = day
            }
            let selected = state.selected == message.localId
            if case .membersChange(let change) = message.kind {
                var line = StyledLine(selected ? "›" : " ", TextStyle(foreground: .yellow, bold: true))
                line.append(MessageFormat.clock(time, timeZone: state.timeZone), TextStyle(foreground: .gray))
                line.append(String(repeating: " ", count: nameWidth + 2 + seqWidth))
                line.append(TextWidth.sanitized(MessageFormat.describe(change, me: state.userId)), TextStyle(foreground: .gray))
                lines.append(line)
                continue
            }
            let own = message.senderId == state.userId
            let deleted = message.deletedAt != nil
            if let quote = quoteLine(message, me: state.userId, indent: prefixWidth, width: prefixWidth + bodyWidth) { lines.append(quote) }
            let text = deleted ? MessageFormat.deletedText : TextWidth.sanitized(message.body, keepNewlines: true)
            var bodyLines = text.isEmpty && !message.attachments.isEmpty ? [] : TextWidth.wrapped(text, width: bodyWidth)
            var editedMark = message.editedAt != nil && !deleted
            if editedMark, let last = bodyLines.last, TextWidth.of(last) + TextWidth.of(MessageFormat.editedMark) + 1 > bodyWidth {
                bodyLines.append("")
            }
            // Each attachment on a line of its own under the text: "📎 photo.jpg (1.2 MB)".
            let textLineCount = bodyLines.count
            bodyLines += message.attachments.map { TextWidth.truncated(MessageFormat.label(of: $0), to: bodyWidth) }
            for (index, part) in bodyLines.enumerated() {
                var line = StyledLine(selected && index == 0 ? "›" : " ", TextStyle(foreground: .yellow, bold: true))
                if index == 0 {
                    line.append(MessageFormat.clock(time, timeZone: state.timeZone), TextStyle(foreground: .gray))
                    line.append(" ")
                    line.append(TextWidth.padded(TextWidth.sanitized(name), to: nameWidth), TextStyle(foreground: own ? .green : .cyan, bold: true))
                    line.append(" ")
                    if seqWidth > 0 { line.append(TextWidth.padded(seqLabel, to: seqWidth), TextStyle(foreground: .gray)) }
                } else {
                    line.append(String(repeating: " ", count: prefixWidth - 1))
                }
                let bodyStyle = deleted ? TextStyle(foreground: .gray, dim: true) : index >= textLineCount ? TextStyle(foreground: .cyan) : .plain
                line.append(part, selected ? TextStyle(foreground: bodyStyle.foreground, inverse: true) : bodyStyle)
                var used = TextWidth.of(part)
                if index == textLineCount - 1, editedMark {
                    let mark = (part.isEmpty ? "" : " ") + MessageFormat.editedMark
                    line.append(mark, TextStyle(foreground: .gray))
                    used += TextWidth.of(mark)
                    editedMark = false
                }
                if index == bodyLines.count - 1 {
                    if editedMark {
                        let mark = (part.isEmpty ? "" : " ") + MessageFormat.editedMark
                        line.append(mark, TextStyle(foreground: .gray))
                        used += TextWidth.of(mark)
                        editedMark = false
                    }
                    if let (symbol, style) = tick {
                        line.append(String(repeating: " ", count: max(1, bodyWidth - used + 1 + (tickWidth - TextWidth.of(symbol)))))
                        line.append(symbol, style)
                    }
                }
                lines.append(line)
            }
            if let reactions = reactionsLine(message, indent: prefixWidth) { lines.append(reactions) }
            if state.threadRoot == nil, let thread = threadLine(message, me: state.userId, indent: prefixWidth) { lines.append(thread) }
            if state.threadRoot == message.localId, state.messages.count > 1 {
                lines.append(StyledLine(String(repeating: "┄", count: max(2, width - 2)), TextStyle(foreground: .gray)))
            }
            if message.status == .failed, message.isOutgoing {
                let reason = message.failure.map { ": \(TextWidth.sanitized($0.message))" } ?? ""
                let hint = selected ? "Ctrl-R retries" : "↑ selects, Ctrl-R retries"
                lines.append(StyledLine(String(repeating: " ", count: prefixWidth) + "not sent (\(hint))\(reason)", TextStyle(foreground: .red)))
            }
        }
        if state.isInvitation, shown.allSatisfy({ $0.kind != .message }) {
            lines.append(StyledLine("  You are invited here: /accept joins (the conversation comes then), /decline says no.", TextStyle(foreground: .gray)))
        } else if lines.isEmpty || (lines.count == 1 && state.hasOlder) {
            lines.append(StyledLine("  No messages yet. Type one below and press Enter.", TextStyle(foreground: .gray)))
        }
        return lines
    }

    /// The messages the screen lists: the app's and the member changes, not edits and deletions (applied in place);
    /// outside a thread, not the thread replies (their root counts them).
    public static func visibleMessages(_ state: ChatScreenState) -> [PigeonMessage] {
        state.messages.filter {
            switch $0.kind {
            case .message: state.threadRoot != nil || $0.threadRoot == nil
            case .membersChange: state.threadRoot == nil
            case .edit, .delete, .unknownServerType: false
            }
        }
    }

    /// The quote above a reply: "↪ alice: see you at…", on one line (`nil` for a message that quotes none).
    static func quoteLine(_ message: PigeonMessage, me: String, indent: Int, width: Int) -> StyledLine? {
        guard let preview = message.replyPreview else { return nil }
        let who = preview.senderId == me ? "you" : preview.senderId
        let text =
            preview.unavailable
            ? MessageFormat.unavailableText
            : preview.deleted ? MessageFormat.deletedText : TextWidth.sanitized(preview.body).replacingOccurrences(of: "\n", with: " ")
        let quote = TextWidth.truncated("↪ \(TextWidth.sanitized(who)): \(text)", to: max(8, width - indent))
        return StyledLine(String(repeating: " ", count: indent) + quote, TextStyle(foreground: .gray))
    }

    /// A message's reactions under it: "👍 2  ❤️ 1", the viewer's own in inverse (`nil` when it has none).
    static func reactionsLine(_ message: PigeonMessage, indent: Int) -> StyledLine? {
        guard !message.reactions.isEmpty, message.deletedAt == nil else { return nil }
        var line = StyledLine(String(repeating: " ", count: indent))
        for (index, reaction) in message.reactions.enumerated() {
            if index > 0 { line.append("  ") }
            let label = "\(TextWidth.sanitized(reaction.key)) \(reaction.count)"
            line.append(label, reaction.me ? TextStyle(foreground: .yellow, bold: true, inverse: true) : TextStyle(foreground: .gray))
        }
        return line
    }

    /// Under a thread's root: "💬 3 replies · bob, carol · /thread opens" (`nil` for a message without replies).
    static func threadLine(_ message: PigeonMessage, me: String, indent: Int) -> StyledLine? {
        guard let thread = message.thread, thread.replyCount > 0 else { return nil }
        let senders = thread.lastReplySenders.map { $0 == me ? "you" : TextWidth.sanitized($0) }.joined(separator: ", ")
        let count = "\(thread.replyCount) repl\(thread.replyCount == 1 ? "y" : "ies")"
        return StyledLine(String(repeating: " ", count: indent) + "💬 \(count) · \(senders)", TextStyle(foreground: .cyan))
    }

    static func searchLines(_ state: ChatScreenState, results: [PigeonMessage], width: Int) -> [StyledLine] {
        let query = TextWidth.sanitized(state.search?.query.text ?? "")
        var lines = [StyledLine(" Search \"\(query)\": \(results.count) result\(results.count == 1 ? "" : "s") · Esc closes", TextStyle(bold: true))]
        for message in results.reversed() {
            let time = MessageFormat.timestamp(of: message)
            var line = StyledLine(" \(MessageFormat.day(time, timeZone: state.timeZone)) \(MessageFormat.clock(time, timeZone: state.timeZone)) ", TextStyle(foreground: .gray))
            line.append(MessageFormat.sender(of: message, me: state.userId) + " ", TextStyle(foreground: .cyan, bold: true))
            line.append(TextWidth.sanitized(message.body))
            lines.append(line.truncated(to: width))
        }
        return lines
    }

    static func statusLine(_ state: ChatScreenState, width: Int, linesBelow: Int) -> StyledLine {
        if let search = state.search, search.results == nil {
            return StyledLine(" Search (Enter finds, Esc cancels)", TextStyle(foreground: .gray))
        }
        if let notice = state.notice {
            return StyledLine(" " + TextWidth.sanitized(notice.text), TextStyle(foreground: notice.isError ? .red : .green, bold: notice.isError))
        }
        if !state.typing.isEmpty {
            let who = state.typing.sorted().joined(separator: ", ")
            return StyledLine(" \(who) \(state.typing.count == 1 ? "is" : "are") typing…", TextStyle(foreground: .cyan))
        }
        if linesBelow > 0 {
            return StyledLine(" ↓ \(linesBelow) more line\(linesBelow == 1 ? "" : "s") below · End jumps to the newest", TextStyle(foreground: .gray))
        }
        return StyledLine(" " + (state.help ?? (state.threadRoot == nil ? help : threadHelp)), TextStyle(foreground: .gray))
    }

    static func inputLine(_ state: ChatScreenState, width: Int) -> (StyledLine, Int) {
        let isSearching = state.search.map { $0.results == nil } ?? false
        let prompt = isSearching ? "search: " : "> "
        let editor = isSearching ? state.search!.query : state.input
        let (shown, column) = editor.visible(width: width - TextWidth.of(prompt))
        var line = StyledLine(prompt, TextStyle(foreground: isSearching ? .yellow : .green, bold: true))
        line.append(shown)
        return (line, TextWidth.of(prompt) + column)
    }
}
