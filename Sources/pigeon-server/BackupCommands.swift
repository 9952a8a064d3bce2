import ArgumentParser
import Foundation
import PigeonSQLite

/// `pigeon-server backup`: a consistent copy of an embedded data directory, taken while its server runs.
struct Backup: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Copy an embedded data directory (store, buffer, attachments) into one archive file, while its server runs.",
        discussion: "The archive is a tar file whose manifest.json lists every entry's size and SHA-256; `restore` checks it all.")

    @Option(name: .customLong("data-dir"), help: "The data directory to copy (the server's --data-dir).")
    var dataDir: String

    @Option(name: .customLong("to"), help: "The archive file to create; it must not exist.")
    var to: String

    func run() throws {
        do {
            let summary = try EmbeddedBackup.backup(dataDirectory: dataDir, to: to)
            print("backed up \(dataDir) to \(to): \(summary.files) files, \(summary.bytes) bytes, \(summary.attachments) attachments")
        } catch {
            throw failure(error)
        }
    }
}

/// `pigeon-server restore`: an archive of `backup` back into a data directory.
struct Restore: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Restore an archive made by `backup` into a data directory (no server may run on it).",
        discussion: "The archive is checked whole before the data directory is touched; a corrupt one changes nothing.")

    @Option(name: .customLong("from"), help: "The archive file made by `backup`.")
    var from: String

    @Option(name: .customLong("data-dir"), help: "The data directory to restore into: missing or empty, unless --replace.")
    var dataDir: String

    @Flag(help: "Replace a data directory that is not empty (its server must be stopped).")
    var replace = false

    func run() throws {
        do {
            let manifest = try EmbeddedBackup.restore(from: from, to: dataDir, replace: replace)
            print("restored \(from) (taken \(Date(timeIntervalSince1970: Double(manifest.createdAt) / 1000).formatted(.iso8601))) into \(dataDir): \(manifest.entries.count) files")
        } catch {
            throw failure(error)
        }
    }
}

/// Prints why a backup or restore was refused, as one line on standard error; the command then exits with status 1.
private func failure(_ error: any Error) -> ExitCode {
    FileHandle.standardError.write(Data("error: \(error)\n".utf8))
    return .failure
}
