import ArgumentParser
import Foundation
import PigeonKit
import PigeonProtocol

extension PigeonCommand {
    struct Download: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Save every attachment of a message (by its #seq, as `ls` shows it) into a directory.",
            discussion: """
                Each file keeps the name it was sent with; a name already taken in the directory gets " (1)", " (2)"… \
                before its extension: nothing is ever overwritten. Downloads are checked against the attachment's \
                SHA-256; a file this device sent comes from its own copy.
                """)

        @ParentCommand var root: PigeonCommand
        @Argument(help: "A conversation id (or its first characters).") var conversation: String
        @Argument(help: ArgumentHelp("The message's seq: 12 or #12.", valueName: "#seq")) var seq: String
        @Option(help: ArgumentHelp("The directory to save into (created if missing).", valueName: "dir")) var out = "."
        @Option(help: "Seconds it may take.") var wait: Double = 60
        @Flag(help: "Print the saved files as JSON.") var json = false

        func validate() throws {
            try validateWait(wait)
            guard Self.seqNumber(seq) != nil else { throw ValidationError("\"\(seq)\" is not a message's seq (12 or #12)") }
        }

        static func seqNumber(_ text: String) -> Int64? {
            Int64(text.hasPrefix("#") ? String(text.dropFirst()) : text).flatMap { $0 > 0 ? $0 : nil }
        }

        func run() async throws {
            let session = try DeviceSession(root.global)
            let number = Self.seqNumber(seq) ?? 0
            let (_, message) = try await MessageBySeq.find(session, conversation: conversation, seq: number, wait: wait)
            guard !message.attachments.isEmpty else { throw CLIError("message #\(number) has no attachment") }
            let directory = URL(fileURLWithPath: (out as NSString).expandingTildeInPath, isDirectory: true)
            do {
                try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            } catch {
                throw CLIError("cannot create \(directory.path): \(error.localizedDescription)")
            }
            struct Saved: Encodable {
                var id: String
                var name: String
                var size: Int64
                var path: String
            }
            var saved: [Saved] = []
            let deadline = ContinuousClock.now + seconds(wait)
            for attachment in message.attachments {
                guard let id = attachment.id else {
                    throw CLIError("\(attachment.name) is not uploaded yet (the message is still ⏰); `pigeon sync` sends it")
                }
                let target = Self.freeName(for: attachment.name, in: directory)
                do {
                    try await withTimeout(deadline - ContinuousClock.now, "downloading \(attachment.name)") {
                        try await Self.save(id, with: session.client, to: target)
                    }
                } catch {
                    throw CLIError.from(error, server: session.server)
                }
                saved.append(Saved(id: id, name: attachment.name, size: attachment.size, path: target.path))
                if !json { printLine("📎 \(TextWidth.sanitized(target.path)) (\(MessageFormat.size(attachment.size)))") }
            }
            if json { try printJSON(saved) }
        }

        /// Copies the attachment `id` to `target`, which must not exist (a copy never replaces a file).
        static func save(_ id: String, with client: PigeonClient, to target: URL) async throws {
            do {
                try FileManager.default.copyItem(at: try await client.attachmentFile(id: id), to: target)
            } catch let error as PigeonClientError where error.code == .invalidArgument {
                // Larger than the whole cache: read once, not kept.
                try await client.attachmentData(id: id).write(to: target, options: .withoutOverwriting)
            } catch let error as PigeonClientError {
                throw error
            } catch {
                throw CLIError("cannot write \(target.path): \(error.localizedDescription)")
            }
        }

        /// `name` in `directory`, or the first of "name (1).ext", "name (2).ext"… that is free: never a file that exists.
        static func freeName(for name: String, in directory: URL) -> URL {
            let safe = name.replacingOccurrences(of: "/", with: "_")
            let base = (safe as NSString).deletingPathExtension
            let ext = (safe as NSString).pathExtension
            var candidate = directory.appendingPathComponent(safe)
            var index = 1
            while FileManager.default.fileExists(atPath: candidate.path) {
                let numbered = "\(base.isEmpty ? safe : base) (\(index))" + (ext.isEmpty || base.isEmpty ? "" : "." + ext)
                candidate = directory.appendingPathComponent(numbered)
                index += 1
            }
            return candidate
        }
    }
}

/// Runs `body`, or throws a timeout naming `what` once `timeout` has passed.
func withTimeout<T: Sendable>(_ timeout: Duration, _ what: String, _ body: @escaping @Sendable () async throws -> T) async throws -> T {
    try await withThrowingTaskGroup(of: T?.self) { group in
        group.addTask { try await body() }
        group.addTask {
            try await Task.sleep(for: max(.zero, timeout))
            return nil
        }
        defer { group.cancelAll() }
        guard let result = try await group.next() ?? nil else {
            throw CLIError("\(what) did not finish in time", status: .notYet)
        }
        return result
    }
}
