import ArgumentParser
import Foundation
import PigeonKit
import PigeonProtocol

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Seconds as a `Duration`, for the commands' `--wait` options and the demo's pauses.
package func seconds(_ value: Double) -> Duration { .milliseconds(Int64(value * 1000)) }

func validateWait(_ value: Double?) throws {
    if let value, !(value > 0 && value <= 86_400) { throw ValidationError("--wait takes seconds, more than 0 and at most 86400") }
}

extension PigeonCommand {
    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "ls",
            abstract: "List conversations with unread counts, or a conversation's messages with their ticks.",
            discussion: """
                Refreshes from the server first (which also sends what waits in the outbox and the delivered receipts \
                owed); without a server it says so on stderr and shows this device's copy.
                """)

        @ParentCommand var root: PigeonCommand
        @Argument(help: "A conversation id (or its first characters): list its messages.") var conversation: String?
        @Flag(help: "JSON, with status names, for scripts.") var json = false
        @Flag(help: "Do not refresh from the server.") var local = false
        @Option(help: "Seconds the refresh may take.") var wait: Double = 5
        @Option(help: "How many of the newest messages to list.") var limit: Int = 50

        func validate() throws {
            try validateWait(wait)
            guard limit > 0 else { throw ValidationError("--limit must be positive") }
        }

        func run() async throws {
            let session = try DeviceSession(root.global)
            if !local {
                do {
                    _ = try await session.online { try await session.sync(timeout: seconds(wait)) }
                } catch {
                    printWarning("showing this device's copy: \(CLIError.from(error, server: session.server).message)")
                }
            }
            let me = session.device.userId
            if let conversation {
                let found = try await session.conversation(conversation, fetch: false)
                let page = try session.client.messages(in: found.id, limit: limit)
                if json {
                    try printJSON(page.messages.map(MessageJSON.init))
                    return
                }
                var state = ChatScreenState(userId: me, title: MessageFormat.title(of: found, me: me))
                state.messages = page.messages
                state.hasOlder = page.hasMore
                state.isGroup = found.kind == .group
                state.showsSeqs = true
                let colors = standardOutputIsColorTerminal
                for line in ChatScreen.messageLines(state, width: terminalWidth() ?? 80) { printLine(line.ansi(colors: colors)) }
                return
            }
            let conversations = try session.client.conversations()
            if json {
                try printJSON(conversations.map { ConversationJSON($0, me: me) })
                return
            }
            guard !conversations.isEmpty else {
                printLine("No conversations yet. Start one with `pigeon new <userId>`.")
                return
            }
            let colors = standardOutputIsColorTerminal
            let titleWidth = min(24, conversations.map { TextWidth.of(MessageFormat.title(of: $0, me: me)) }.max() ?? 8)
            for conversation in conversations {
                var line = StyledLine(conversation.id + "  ", TextStyle(foreground: .gray))
                line.append(TextWidth.padded(MessageFormat.title(of: conversation, me: me), to: titleWidth) + "  ", TextStyle(bold: true))
                let unread = conversation.unreadCount > 0 ? "\(conversation.unreadCount) unread" : ""
                line.append(TextWidth.padded(unread, to: 10) + " ", TextStyle(foreground: .green, bold: true))
                if let last = conversation.lastMessage {
                    line.append(MessageFormat.clock(MessageFormat.timestamp(of: last), timeZone: .current) + " ", TextStyle(foreground: .gray))
                    // A member change names who made it ("you added dave") and has no tick.
                    let isChange = if case .membersChange = last.kind { true } else { false }
                    if !isChange { line.append(MessageFormat.sender(of: last, me: me) + ": ", TextStyle(foreground: .cyan)) }
                    line.append(TextWidth.truncated(TextWidth.sanitized(MessageFormat.preview(of: last, me: me)), to: 40))
                    if last.isOutgoing, !isChange { line.append(" " + Ticks.symbol(for: last.status), Ticks.style(for: last.status)) }
                }
                printLine(line.ansi(colors: colors))
            }
        }
    }
}

/// The terminal's width when stdout is one.
func terminalWidth() -> Int? {
    var size = winsize()
    guard isatty(STDOUT_FILENO) == 1, ioctl(STDOUT_FILENO, UInt(TIOCGWINSZ), &size) == 0, size.ws_col > 0 else { return nil }
    return Int(size.ws_col)
}
