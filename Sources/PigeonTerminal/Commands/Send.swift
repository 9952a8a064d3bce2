import ArgumentParser
import Foundation
import PigeonKit
import PigeonProtocol

extension PigeonCommand {
    struct Send: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Save a message for sending and print it (⏰); with --wait, stay connected until it is on the server (✓).",
            discussion: """
                Without --wait the message waits in the outbox for the next `pigeon sync`, `chat` or `send --wait`. \
                With --wait, exit status 75 means the time ran out: the message stays queued for the next run. \
                Each --file is copied at once and uploaded before the message goes (the text may then be left out); \
                the message stays ⏰ until every file is on the server.
                """)

        @ParentCommand var root: PigeonCommand
        @Argument(help: "A conversation id (or its first characters).") var conversation: String
        @Argument(help: "The text (several words are joined with spaces; \"-\" reads it from stdin).") var text: [String] = []
        @Option(name: .customLong("file"), help: ArgumentHelp("A file to attach (repeat for more, at most 10).", valueName: "path"))
        var files: [String] = []
        @Option(help: "Seconds to stay connected until the message is ✓.") var wait: Double?
        @Flag(help: "Print the message as JSON.") var json = false

        func validate() throws {
            try validateWait(wait)
            guard !text.isEmpty || !files.isEmpty else { throw ValidationError("give the text to send, or a --file") }
        }

        func run() async throws {
            let session = try DeviceSession(root.global)
            let found = try await session.conversation(conversation, fetch: true)
            var body = text.joined(separator: " ")
            if body == "-" {
                body = String(decoding: FileHandle.standardInput.readDataToEndOfFile(), as: UTF8.self)
                if body.hasSuffix("\n") { body.removeLast() }
            }
            var message: PigeonMessage
            do {
                message = try session.client.send(body, to: found.id, attachments: try files.map(Self.attachment))
            } catch {
                throw CLIError.from(error, server: session.server)
            }
            guard let wait else {
                try report(message)
                return
            }
            let localId = message.localId
            let deadline = ContinuousClock.now + seconds(wait)
            let settled = try await session.online { () -> PigeonMessage? in
                while ContinuousClock.now < deadline {
                    if let current = try session.client.message(localId: localId), current.status >= .sent { return current }
                    try await Task.sleep(for: .milliseconds(10))
                }
                return nil
            }
            guard let settled else {
                try report(try session.client.message(localId: localId) ?? message)
                let reason = session.client.lastConnectionError.map { " (\(CLIError.from($0, server: session.server).message))" } ?? ""
                throw CLIError(
                    "not on the server within \(wait) s\(reason); the message stays queued and goes with the next `pigeon sync`",
                    status: .notYet)
            }
            message = settled
            try report(message)
            if message.status == .failed {
                throw CLIError("not sent: \(message.failure?.message ?? "refused"); `pigeon chat` and Ctrl-R retries it")
            }
        }

        private func report(_ message: PigeonMessage) throws {
            if json {
                try printJSON(MessageJSON(message))
                return
            }
            var line = StyledLine(Ticks.symbol(for: message.status) + " ", Ticks.style(for: message.status))
            line.append(TextWidth.sanitized(MessageFormat.preview(of: message, me: message.senderId)))
            line.append("  (\(Ticks.label(for: message.status)))", TextStyle(foreground: .gray))
            printLine(line.ansi(colors: standardOutputIsColorTerminal))
        }

        /// A `--file` as PigeonKit attaches it (`~` is the home directory).
        static func attachment(_ path: String) throws -> PigeonAttachmentSource {
            let url = URL(fileURLWithPath: (path as NSString).expandingTildeInPath)
            var isDirectory: ObjCBool = false
            guard FileManager.default.fileExists(atPath: url.path, isDirectory: &isDirectory), !isDirectory.boolValue else {
                throw CLIError("\(path): no such file")
            }
            return .file(url)
        }
    }

    struct Sync: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Connect, send what waits in the outbox, fetch what was missed, send delivered receipts, exit.",
            discussion: "Exit status 75 means the time ran out; nothing is lost, the next run carries on.")

        @ParentCommand var root: PigeonCommand
        @Option(help: "Seconds it may take.") var wait: Double = 30
        @Flag(help: "Print the result as JSON.") var json = false

        func validate() throws { try validateWait(wait) }

        func run() async throws {
            let session = try DeviceSession(root.global)
            let waitingBefore = try session.client.unsentMessages().filter { $0.status != .failed }.count
            let report = try await session.online { try await session.sync(timeout: seconds(wait)) }
            let conversations = try session.client.conversations()
            let unread = conversations.reduce(0) { $0 + $1.unreadCount }
            let sent = waitingBefore - (try session.client.unsentMessages().filter { $0.status != .failed }.count)
            if json {
                struct Output: Encodable {
                    var conversations, unread, sent: Int
                    var failed: [MessageJSON]
                }
                try printJSON(Output(conversations: conversations.count, unread: unread, sent: max(0, sent), failed: report.failed.map(MessageJSON.init)))
            } else {
                printLine("Synced with \(session.server): \(conversations.count) conversation\(conversations.count == 1 ? "" : "s"), \(unread) unread, \(max(0, sent)) sent")
            }
            if !report.failed.isEmpty {
                let me = session.device.userId
            let list = report.failed.map {
                "\"\(TextWidth.truncated(TextWidth.sanitized(MessageFormat.preview(of: $0, me: me)), to: 30))\" (\($0.failure?.message ?? "failed"))"
            }
                throw CLIError("\(report.failed.count) message\(report.failed.count == 1 ? "" : "s") not sent: \(list.joined(separator: ", ")); `pigeon chat` and Ctrl-R retries")
            }
        }
    }

    struct Read: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Mark every message of a conversation read (the senders' ticks turn blue).",
            discussion: "Without a server the messages are marked read here and the receipt goes with the next sync (exit status 75).")

        @ParentCommand var root: PigeonCommand
        @Argument(help: "A conversation id (or its first characters).") var conversation: String
        @Option(help: "Seconds it may take.") var wait: Double = 10

        func validate() throws { try validateWait(wait) }

        func run() async throws {
            let session = try DeviceSession(root.global)
            let found = try await session.conversation(conversation, fetch: true)
            do {
                try await session.online {
                    let start = ContinuousClock.now
                    _ = try await session.sync(timeout: seconds(wait))
                    try session.client.markRead(conversationId: found.id, includingThreadReplies: true)
                    _ = try await session.client.sync(timeout: max(.milliseconds(100), seconds(wait) - (ContinuousClock.now - start)))
                }
            } catch {
                try session.client.markRead(conversationId: found.id, includingThreadReplies: true)
                throw CLIError(
                    "marked read on this device only: \(CLIError.from(error, server: session.server).message); the receipt goes with the next sync",
                    status: .notYet)
            }
            let title = MessageFormat.title(of: found, me: session.device.userId)
            printLine("Read everything in \(title) (\(found.id))")
        }
    }
}
