import ArgumentParser
import Foundation
import PigeonKit

extension PigeonCommand {
    struct Export: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Write a conversation's history as this device holds it: JSON for programs, or text for people.",
            discussion: """
                Every message in seq order as it now reads (edits applied, deletions as "message deleted", member \
                changes in words), with replies, threads, file names and reactions; messages not sent yet come last. \
                Refreshes from the server first (unless --local). Writes to stdout, or to --out FILE (never over an \
                existing file unless --force).
                """)

        @ParentCommand var root: PigeonCommand
        @Argument(help: "A conversation id (or its first characters).") var conversation: String
        @Option(help: "json or text.") var format: String = "text"
        @Option(help: ArgumentHelp("Write to this file instead of stdout.", valueName: "file")) var out: String?
        @Flag(help: "Replace --out's file when it exists.") var force = false
        @Flag(help: "Do not refresh from the server.") var local = false
        @Option(help: "Seconds the refresh may take.") var wait: Double = 10

        func validate() throws {
            try validateWait(wait)
            guard ExportFormat(rawValue: format) != nil else { throw ValidationError("--format must be json or text, not \"\(format)\"") }
            if force, out == nil { throw ValidationError("--force goes with --out") }
        }

        func run() async throws {
            let session = try DeviceSession(root.global)
            let target = out.map { URL(fileURLWithPath: ($0 as NSString).expandingTildeInPath) }
            if let target, !force, FileManager.default.fileExists(atPath: target.path) {
                throw CLIError("\(target.path) exists; pass --force to replace it")
            }
            if !local {
                do {
                    _ = try await session.online { try await session.sync(timeout: seconds(wait)) }
                } catch {
                    printWarning("exporting this device's copy: \(CLIError.from(error, server: session.server).message)")
                }
            }
            let found = try await session.conversation(conversation, fetch: false)
            let data: Data
            do {
                data = try session.client.export(conversation: found.id, format: ExportFormat(rawValue: format) ?? .text)
            } catch {
                throw CLIError.from(error, server: session.server)
            }
            guard let target else {
                FileHandle.standardOutput.write(data)
                return
            }
            do {
                try data.write(to: target, options: .atomic)
            } catch {
                throw CLIError("cannot write \(target.path): \(error.localizedDescription)")
            }
        }
    }
}
