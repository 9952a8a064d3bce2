import ArgumentParser
import Foundation
import NIOConcurrencyHelpers
import PigeonKit
import PigeonProtocol

extension PigeonCommand {
    struct React: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Add your reaction (an emoji, or a token like +1) to a message by its #seq; --remove takes it back.",
            discussion: """
                Like `send`: saved here at once and sent through the outbox; with --wait, exit status 75 means the time \
                ran out (the reaction stays queued for the next run).
                """)

        @ParentCommand var root: PigeonCommand
        @Argument(help: "A conversation id (or its first characters).") var conversation: String
        @Argument(help: "The message's seq (its #number).") var seq: Int64
        @Argument(help: "The reaction: one emoji, or a token of [a-z0-9_:+-].") var key: String
        @Flag(help: "Remove your reaction instead of adding it.") var remove = false
        @Option(help: "Seconds to stay connected until the server has the reaction.") var wait: Double?
        @Flag(help: "Print the message as JSON.") var json = false

        func validate() throws {
            try validateWait(wait)
            guard Validation.isValidReactionKey(key) else {
                throw ValidationError("\"\(key)\" is not a reaction: one emoji, or a token of 1–32 characters of [a-z0-9_:+-]")
            }
        }

        func run() async throws {
            let session = try DeviceSession(root.global)
            let (found, target) = try await MessageBySeq.find(session, conversation: conversation, seq: seq, wait: wait)
            var message: PigeonMessage
            do {
                message = remove ? try session.client.unreact(key, from: target) : try session.client.react(key, to: target)
            } catch {
                throw CLIError.from(error, server: session.server)
            }
            if let wait {
                let failure = NIOLockedFailure()
                let events = session.client.events()
                let (wanted, targetId) = (key, target.localId)
                let watcher = Task {
                    for await event in events {
                        if case .reactionFailed(let failed, let key, _, let error) = event, failed.localId == targetId, key == wanted {
                            failure.set(error)
                        }
                    }
                }
                defer { watcher.cancel() }
                let deadline = ContinuousClock.now + seconds(wait)
                let settled = try await session.online { () -> Bool in
                    try await session.connected(timeout: seconds(wait))
                    while ContinuousClock.now < deadline {
                        let waiting = try session.client.pendingReactions().contains { $0.messageLocalId == target.localId && $0.key == key }
                        if !waiting { return true }
                        try await Task.sleep(for: .milliseconds(10))
                    }
                    return false
                }
                guard settled else {
                    throw CLIError("the reaction was not on the server within \(wait) s; it stays queued for the next `pigeon sync`", status: .notYet)
                }
                message = try session.client.message(localId: target.localId) ?? message
                if message.reactions.contains(where: { $0.key == key && $0.me }) == remove {
                    // Dropped: the refusal's reason comes with its event.
                    let give = ContinuousClock.now + .seconds(1)
                    while failure.value == nil, ContinuousClock.now < give { try await Task.sleep(for: .milliseconds(10)) }
                    throw CLIError("reaction refused: \(failure.value?.message ?? "the server refused it")")
                }
            }
            if json {
                try printJSON(MessageJSON(message))
                return
            }
            let state = wait == nil ? "⏰ saved; it goes with the next `pigeon sync`" : "✓ on the server"
            let reactions = message.reactions.map { "\($0.key) \($0.count)\($0.me ? "*" : "")" }.joined(separator: "  ")
            printLine("\(remove ? "Removed" : "Added") \(key) on #\(seq) in \(found.id.prefix(8)) (\(state)): \(reactions.isEmpty ? "no reactions" : reactions)")
        }
    }

    struct Reply: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Answer a message by its #seq, quoting it; with --thread, reply in its thread instead.",
            discussion: "Like `send`: saved here at once, sent through the outbox; with --wait, exit status 75 means the time ran out.")

        @ParentCommand var root: PigeonCommand
        @Argument(help: "A conversation id (or its first characters).") var conversation: String
        @Argument(help: "The message's seq (its #number).") var seq: Int64
        @Argument(help: "The text (several words are joined with spaces).") var text: [String]
        @Flag(help: "Post in the message's thread (a reply in a thread goes to its root's thread).") var thread = false
        @Option(help: "Seconds to stay connected until the reply is on the server (✓).") var wait: Double?
        @Flag(help: "Print the reply as JSON.") var json = false

        func validate() throws {
            try validateWait(wait)
            guard !text.isEmpty else { throw ValidationError("give the text of the reply") }
        }

        func run() async throws {
            let session = try DeviceSession(root.global)
            let (found, target) = try await MessageBySeq.find(session, conversation: conversation, seq: seq, wait: wait)
            var message: PigeonMessage
            do {
                if thread {
                    let root = try MessageBySeq.threadRoot(of: target, session: session)
                    message = try session.client.send(text.joined(separator: " "), to: found.id, threadRoot: root)
                } else {
                    message = try session.client.send(text.joined(separator: " "), to: found.id, replyTo: target)
                }
            } catch let error as CLIError {
                throw error
            } catch {
                throw CLIError.from(error, server: session.server)
            }
            if let wait {
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
                    throw CLIError("not on the server within \(wait) s; the reply stays queued and goes with the next `pigeon sync`", status: .notYet)
                }
                message = settled
            }
            if json {
                try printJSON(MessageJSON(message))
            } else {
                var line = StyledLine(Ticks.symbol(for: message.status) + " ", Ticks.style(for: message.status))
                if let quote = ChatScreen.quoteLine(message, me: session.device.userId, indent: 0, width: 60) {
                    line.append(quote.text + " · ", TextStyle(foreground: .gray))
                } else if thread {
                    line.append("in the thread of #\(seq) · ", TextStyle(foreground: .gray))
                }
                line.append(TextWidth.sanitized(message.body))
                line.append("  (\(Ticks.label(for: message.status)))", TextStyle(foreground: .gray))
                printLine(line.ansi(colors: standardOutputIsColorTerminal))
            }
            if message.status == .failed {
                throw CLIError("not sent: \(message.failure?.message ?? "refused"); `pigeon chat` and Ctrl-R retries it")
            }
        }
    }

    struct ThreadCommand: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "thread",
            abstract: "Show a message's thread (by the #seq of its root, or of one of its replies): the root, then the replies.",
            discussion: "Reads the thread from the server first; without a server it says so on stderr and shows this device's copy.")

        @ParentCommand var root: PigeonCommand
        @Argument(help: "A conversation id (or its first characters).") var conversation: String
        @Argument(help: "The seq of the root or of a reply in the thread.") var seq: Int64
        @Flag(help: "JSON: {root, replies}.") var json = false
        @Flag(help: "Do not read from the server.") var local = false
        @Option(help: "Seconds the read may take.") var wait: Double = 5
        @Option(help: "How many of the newest replies to list.") var limit: Int = 100

        func validate() throws {
            try validateWait(wait)
            guard (1...500).contains(limit) else { throw ValidationError("--limit must be 1–500") }
        }

        func run() async throws {
            let session = try DeviceSession(root.global)
            let (found, target) = try await MessageBySeq.find(session, conversation: conversation, seq: seq, wait: local ? nil : wait)
            var threadRoot = try MessageBySeq.threadRoot(of: target, session: session)
            if !local, threadRoot.serverId != nil {
                do {
                    threadRoot = try await session.online {
                        try await session.connected(timeout: seconds(wait))
                        var page = try await session.client.fetchThread(of: threadRoot, limit: limit)
                        while page.hasMore, let last = page.replies.last?.seq {
                            page = try await session.client.fetchThread(of: page.root, after: last, limit: limit)
                        }
                        return page.root
                    }
                } catch {
                    printWarning("showing this device's copy: \(CLIError.from(error, server: session.server).message)")
                }
            }
            let replies = try session.client.thread(of: threadRoot, limit: limit).messages
            if json {
                struct Output: Encodable {
                    var root: MessageJSON
                    var replies: [MessageJSON]
                }
                try printJSON(Output(root: MessageJSON(threadRoot), replies: replies.map(MessageJSON.init)))
                return
            }
            let me = session.device.userId
            var state = ChatScreenState(userId: me, title: MessageFormat.title(of: found, me: me))
            state.messages = [threadRoot] + replies
            state.threadRoot = threadRoot.localId
            state.isGroup = found.kind == .group
            let colors = standardOutputIsColorTerminal
            for line in ChatScreen.messageLines(state, width: terminalWidth() ?? 80).dropFirst() { printLine(line.ansi(colors: colors)) }
        }
    }
}

/// Finding a message by its seq, as `ls` numbers them.
enum MessageBySeq {
    /// The conversation and its message `seq`; when it is not on this device yet, a sync first (within `wait`, or 10 s).
    static func find(_ session: DeviceSession, conversation: String, seq: Int64, wait: Double?) async throws -> (PigeonConversation, PigeonMessage) {
        let found = try await session.conversation(conversation, fetch: true)
        func local() throws -> PigeonMessage? {
            try session.client.messages(in: found.id, before: seq + 1, limit: 1).messages.first.flatMap { $0.seq == seq ? $0 : nil }
        }
        var target = try local()
        if target == nil {
            _ = try? await session.online { try await session.sync(timeout: seconds(wait ?? 10)) }
            target = try local()
        }
        guard let target else {
            throw CLIError("no message #\(seq) in \(found.id) on this device; `pigeon ls \(found.id.prefix(8))` lists them")
        }
        return (found, target)
    }

    /// The root of the thread `message` is in, or `message` itself when it is in none.
    static func threadRoot(of message: PigeonMessage, session: DeviceSession) throws -> PigeonMessage {
        guard let reference = message.threadRoot else { return message }
        if let localId = reference.localId, let root = try session.client.message(localId: localId) { return root }
        if let serverId = reference.serverId,
            let root = try session.client.messages(in: message.conversationId, limit: 100_000).messages.first(where: { $0.serverId == serverId })
        {
            return root
        }
        throw CLIError("the root of this reply's thread is not on this device")
    }
}

/// The first failure an event reported, read after the wait.
private final class NIOLockedFailure: Sendable {
    private let box = NIOLockedValueBox<ErrorDetail?>(nil)
    var value: ErrorDetail? { box.withLockedValue { $0 } }
    func set(_ error: ErrorDetail) { box.withLockedValue { if $0 == nil { $0 = error } } }
}
