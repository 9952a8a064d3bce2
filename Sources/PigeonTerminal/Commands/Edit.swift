import ArgumentParser
import Foundation
import PigeonKit
import PigeonProtocol

extension PigeonCommand {
    struct Edit: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Replace the text of one of your messages (by its #seq, as `ls` shows it); everyone's copy changes.",
            discussion: "Like `send`: saved here at once, sent through the outbox; with --wait, exit status 75 means the time ran out.")

        @ParentCommand var root: PigeonCommand
        @Argument(help: "A conversation id (or its first characters).") var conversation: String
        @Argument(help: "The message's seq (its #number).") var seq: Int64
        @Argument(help: "The new text (several words are joined with spaces).") var text: [String]
        @Option(help: "Seconds to stay connected until the server has stored the edit.") var wait: Double?

        func validate() throws {
            try validateWait(wait)
            guard !text.isEmpty else { throw ValidationError("give the new text") }
        }

        func run() async throws {
            try await MessageChange.run(root, conversation: conversation, seq: seq, wait: wait) { client, target in
                try client.edit(localId: target.localId, body: text.joined(separator: " "))
            }
        }
    }

    struct Delete: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Delete one of your messages for everyone (by its #seq): its text is erased here and on the server.",
            discussion: "Like `send`: saved here at once, sent through the outbox; with --wait, exit status 75 means the time ran out.")

        @ParentCommand var root: PigeonCommand
        @Argument(help: "A conversation id (or its first characters).") var conversation: String
        @Argument(help: "The message's seq (its #number).") var seq: Int64
        @Option(help: "Seconds to stay connected until the server has stored the deletion.") var wait: Double?

        func validate() throws { try validateWait(wait) }

        func run() async throws {
            try await MessageChange.run(root, conversation: conversation, seq: seq, wait: wait) { client, target in
                try client.delete(localId: target.localId)
            }
        }
    }
}

/// What `edit` and `delete` share.
enum MessageChange {
    static func run(
        _ root: PigeonCommand, conversation: String, seq: Int64, wait: Double?, _ make: (PigeonClient, PigeonMessage) throws -> PigeonMessage
    ) async throws {
        let session = try DeviceSession(root.global)
        // Not here yet (or its seq not known yet, like a message sent without waiting for the server): synced first.
        let (_, target) = try await MessageBySeq.find(session, conversation: conversation, seq: seq, wait: wait)
        let change: PigeonMessage
        do {
            change = try make(session.client, target)
        } catch {
            throw CLIError.from(error, server: session.server)
        }
        let what = change.type == ServerMessageType.delete ? "deletion" : "edit"
        guard let wait else {
            printLine("⏰ \(what) of #\(seq) saved; it goes with the next `pigeon sync`")
            return
        }
        let deadline = ContinuousClock.now + seconds(wait)
        let settled = try await session.online { () -> PigeonMessage? in
            while ContinuousClock.now < deadline {
                if let current = try session.client.message(localId: change.localId), current.status == .failed || current.seq != nil { return current }
                try await Task.sleep(for: .milliseconds(10))
            }
            return nil
        }
        guard let settled else {
            throw CLIError("the \(what) was not stored within \(wait) s; it stays queued and goes with the next `pigeon sync`", status: .notYet)
        }
        if settled.status == .failed {
            throw CLIError("\(what) refused: \(settled.failure?.message ?? "failed"); the message reads as before")
        }
        printLine("✓ \(what) of #\(seq) stored")
    }
}
