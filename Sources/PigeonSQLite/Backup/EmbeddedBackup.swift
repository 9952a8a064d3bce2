import Foundation
import GRDB
import PigeonDomain

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Online backup and restore of an embedded data directory (`store.sqlite`, `buffer.sqlite`, `node-id` and the
/// content-addressed `attachments/`), into and out of one ``BackupArchive`` file.
///
/// The copy is taken while the server runs, from another process. Each SQLite file is copied with SQLite's online
/// backup API, in steps, inside one read transaction: in WAL mode a reader holds a snapshot and never blocks the
/// writer, so accepts go on (the WAL grows meanwhile; the checkpointer catches up afterwards), and the copy is that
/// snapshot exactly (the steps never restart, since the snapshot does not move under them). A separate buffer is
/// copied before the store: a message that moves from one to the other in between is then in both copies (the
/// processor recognises it by its serverId and stores it once), never in neither.
///
/// Attachments: every content file there is hard-linked aside before the store is copied, so that a sweep erasing one
/// meanwhile cannot take it from the copy; the archive then holds exactly the contents the copied store's
/// `attachments` rows name, and the backup fails rather than leave one out.
package enum EmbeddedBackup {
    /// A refusal of bad input, or a failure, with the sentence to show.
    package struct Failure: Error, CustomStringConvertible {
        package let description: String
        init(_ description: String) { self.description = description }
    }

    /// What a backup wrote.
    package struct Summary: Sendable {
        package var files: Int
        package var bytes: Int64
        package var attachments: Int
    }

    static let storeFile = "store.sqlite"
    static let bufferFile = "buffer.sqlite"
    static let nodeIdFile = "node-id"
    static let pagesPerStep: CInt = 1024

    // MARK: Backup

    /// Copies the data directory `dataDirectory` (of a running server or a stopped one) into a new archive file at
    /// `archive`. Refuses a directory without a store and an existing `archive`; writes `archive` whole or not at all.
    package static func backup(dataDirectory: String, to archive: String) throws -> Summary {
        let data = URL(fileURLWithPath: dataDirectory).standardizedFileURL.path
        let target = URL(fileURLWithPath: archive).standardizedFileURL.path
        guard FileManager.default.fileExists(atPath: data + "/" + storeFile) else {
            throw Failure("\(data) is not a Pigeon data directory (it has no \(storeFile))")
        }
        guard !FileManager.default.fileExists(atPath: target) else { throw Failure("\(target) exists already; choose a new file") }
        // Never into a data directory: not the one copied (the archive would be part of what it copies), nor one that
        // a running server holds (its files are the server's alone).
        let targetDirectory = (target as NSString).deletingLastPathComponent
        if targetDirectory == data || targetDirectory.hasPrefix(data + "/") {
            throw Failure("\(target) is inside the data directory \(data) being backed up; write the archive elsewhere")
        }
        if let held = DataDirectoryLock.heldAncestor(of: targetDirectory) {
            throw Failure("\(target) is inside the data directory \(held.directory), in use by \(held.holder); write the archive elsewhere")
        }
        let partial = target + ".partial-" + Identifiers.randomHex(bytes: 4)
        let descriptor = open(partial, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else { throw Failure("cannot create \(partial): \(String(cString: strerror(errno)))") }
        let handle = FileHandle(fileDescriptor: descriptor, closeOnDealloc: true)
        let staging = partial + ".d"
        let links = data + "/attachments/tmp/backup-" + Identifiers.randomHex(bytes: 4)
        defer {
            try? FileManager.default.removeItem(atPath: staging)
            try? FileManager.default.removeItem(atPath: links)
        }
        do {
            try FileManager.default.createDirectory(atPath: staging, withIntermediateDirectories: false)
            let linked = try linkAttachments(of: data, into: links)
            let writer = BackupArchive.Writer(handle: handle)
            if FileManager.default.fileExists(atPath: data + "/" + bufferFile) {
                try copyDatabase(data + "/" + bufferFile, to: staging + "/" + bufferFile)
                try writer.addFile(at: staging + "/" + bufferFile, as: bufferFile)
            }
            try copyDatabase(data + "/" + storeFile, to: staging + "/" + storeFile)
            try writer.addFile(at: staging + "/" + storeFile, as: storeFile)
            if FileManager.default.fileExists(atPath: data + "/" + nodeIdFile) {
                try writer.addFile(at: data + "/" + nodeIdFile, as: nodeIdFile)
            }
            let contents = try referencedContents(ofStore: staging + "/" + storeFile)
            for sha256 in contents {
                let path = linked.contains(sha256) ? links + "/" + sha256 : data + "/attachments/" + contentPath(sha256)
                guard FileManager.default.fileExists(atPath: path) else {
                    throw Failure("the attachment \(sha256) that the copied store names is not in \(data)/attachments (erased meanwhile?); try again")
                }
                try writer.addFile(at: path, as: "attachments/" + contentPath(sha256))
            }
            try writer.finish(createdAt: WallClock.nowMillis())
            try handle.close()
            // link(2), unlike rename(2), never replaces a file that appeared at `target` meanwhile.
            guard link(partial, target) == 0 else { throw Failure("cannot create \(target): \(String(cString: strerror(errno)))") }
            unlink(partial)
            return Summary(files: writer.entries.count, bytes: writer.entries.reduce(0) { $0 + $1.size }, attachments: contents.count)
        } catch {
            try? handle.close()
            unlink(partial)
            throw error
        }
    }

    /// `attachments/<first 2 hex>/<sha256>` relative to the data directory, as ``AttachmentFiles`` lays them out.
    static func contentPath(_ sha256: String) -> String { String(sha256.prefix(2)) + "/" + sha256 }

    static func isContentName(_ name: String) -> Bool {
        name.utf8.count == 64 && name.utf8.allSatisfy { (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains($0) }
    }

    /// Hard-links every content file of `<data>/attachments` into `links` (content files are never rewritten, only
    /// erased, so a link keeps the bytes a sweep would erase); answers their names.
    static func linkAttachments(of data: String, into links: String) throws -> Set<String> {
        let attachments = data + "/attachments"
        guard FileManager.default.fileExists(atPath: attachments) else { return [] }
        try FileManager.default.createDirectory(atPath: links, withIntermediateDirectories: true)
        var linked = Set<String>()
        for prefix in try FileManager.default.contentsOfDirectory(atPath: attachments) where prefix.utf8.count == 2 {
            for name in (try? FileManager.default.contentsOfDirectory(atPath: attachments + "/" + prefix)) ?? [] where isContentName(name) {
                if link(attachments + "/" + prefix + "/" + name, links + "/" + name) == 0 { linked.insert(name) }
            }
        }
        return linked
    }

    /// Copies the live SQLite database at `source` into a new file at `destination`: SQLite's backup API, in steps of
    /// ``pagesPerStep`` pages, all inside one read transaction of the source (one snapshot; the writer is never held).
    static func copyDatabase(_ source: String, to destination: String) throws {
        var configuration = Configuration()
        configuration.busyMode = .timeout(10)
        let reader = try DatabaseQueue(path: source, configuration: configuration)
        let writer = try DatabaseQueue(path: destination)
        try writer.writeWithoutTransaction { destinationDatabase in
            try reader.read { sourceDatabase in
                // The first read takes the snapshot every step then copies from.
                _ = try Int.fetchOne(sourceDatabase, sql: "SELECT count(*) FROM sqlite_master")
                try sourceDatabase.backup(to: destinationDatabase, pagesPerStep: pagesPerStep)
            }
            // A copy of a WAL database is one too: back to a rollback journal, so that the one file is the whole copy.
            try destinationDatabase.execute(sql: "PRAGMA journal_mode = DELETE")
        }
        try writer.close()
        try reader.close()
    }

    /// The contents (SHA-256) that the store at `path` has attachment rows of.
    static func referencedContents(ofStore path: String) throws -> [String] {
        let queue = try DatabaseQueue(path: path)
        defer { try? queue.close() }
        return try queue.read { db in
            guard try db.tableExists("attachments") else { return [] }
            return try String.fetchAll(db, sql: "SELECT DISTINCT sha256 FROM attachments ORDER BY sha256")
        }
    }

    // MARK: Restore

    /// Restores the archive at `archive` into `dataDirectory`. Refuses a data directory that is not empty unless
    /// `replace`; unpacks into a new directory beside it and checks everything (``BackupArchive/read(_:into:)``, entry
    /// names, attachments' digests against their names, the store's integrity and that every attachment it names is
    /// there) before the data directory is touched; then puts the new directory in its place. On any refusal nothing
    /// is changed. The restored store gets a new epoch (``SQLiteMessageStore/markRestored(path:)``).
    package static func restore(from archive: String, to dataDirectory: String, replace: Bool) throws -> BackupArchive.Manifest {
        let target = URL(fileURLWithPath: dataDirectory).standardizedFileURL
        let manager = FileManager.default
        guard manager.isReadableFile(atPath: archive) else { throw Failure("cannot read \(archive)") }
        var isDirectory: ObjCBool = false
        let exists = manager.fileExists(atPath: target.path, isDirectory: &isDirectory)
        // Claimed for the whole restore: a server running on it refuses this, and one starting meanwhile is refused.
        var claim: DataDirectoryLock?
        defer { claim?.release() }
        if exists {
            guard isDirectory.boolValue else { throw Failure("\(target.path) exists and is not a directory") }
            do {
                claim = try DataDirectoryLock(directory: target.path, holder: "pigeon-server restore")
            } catch let held as DataDirectoryLock.Held {
                throw Failure("\(held); stop that server first")
            }
            let contents = try manager.contentsOfDirectory(atPath: target.path).filter { $0 != DataDirectoryLock.fileName }
            guard contents.isEmpty || replace else {
                throw Failure("\(target.path) is not empty; stop its server and pass --replace to overwrite it, or restore into a new directory")
            }
        }
        let parent = target.deletingLastPathComponent().path
        guard manager.fileExists(atPath: parent) else { throw Failure("\(parent) does not exist") }
        let staging = parent + "/." + target.lastPathComponent + ".restore-" + Identifiers.randomHex(bytes: 4)
        do {
            try manager.createDirectory(atPath: staging, withIntermediateDirectories: false)
        } catch {
            throw Failure("cannot create \(staging): \(error.localizedDescription)")
        }
        do {
            let manifest = try BackupArchive.read(archive) { name in
                guard isRestorable(name) else { throw BackupArchive.Corrupt(reason: "unexpected entry \(name)") }
                let path = staging + "/" + name
                try manager.createDirectory(atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
                guard manager.createFile(atPath: path, contents: nil, attributes: [.posixPermissions: 0o600]),
                    let handle = FileHandle(forWritingAtPath: path)
                else { throw Failure("cannot write \(path)") }
                return handle
            }
            try check(manifest: manifest, unpackedIn: staging)
            try SQLiteMessageStore.markRestored(path: staging + "/" + storeFile)
            try putInPlace(staging, at: target.path, replacing: exists)
            return manifest
        } catch {
            try? manager.removeItem(atPath: staging)
            throw error
        }
    }

    /// The entry names a data directory can hold (nothing else is ever written, so `..` or absolute paths cannot be).
    static func isRestorable(_ name: String) -> Bool {
        if [storeFile, bufferFile, nodeIdFile].contains(name) { return true }
        let parts = name.split(separator: "/", omittingEmptySubsequences: false)
        return parts.count == 3 && parts[0] == "attachments" && isContentName(String(parts[2])) && parts[1] == parts[2].prefix(2)
    }

    /// What the archive's own digests cannot tell: a store is there and sound, each attachment is the content its name
    /// says, and every content the store names came along.
    static func check(manifest: BackupArchive.Manifest, unpackedIn staging: String) throws {
        guard manifest.entries.contains(where: { $0.path == storeFile }) else { throw BackupArchive.Corrupt(reason: "it holds no \(storeFile)") }
        for entry in manifest.entries where entry.path.hasPrefix("attachments/") {
            guard entry.path.hasSuffix("/" + entry.sha256) else {
                throw BackupArchive.Corrupt(reason: "attachment \(entry.path) does not hold the content its name says")
            }
        }
        let queue = try DatabaseQueue(path: staging + "/" + storeFile)
        defer { try? queue.close() }
        let integrity = try queue.read { try String.fetchAll($0, sql: "PRAGMA integrity_check") }
        guard integrity == ["ok"] else { throw BackupArchive.Corrupt(reason: "\(storeFile) fails SQLite's integrity check: \(integrity.prefix(3))") }
        try queue.close()
        let present = Set(manifest.entries.map(\.path))
        if let missing = try referencedContents(ofStore: staging + "/" + storeFile).first(where: { !present.contains("attachments/" + contentPath($0)) }) {
            throw BackupArchive.Corrupt(reason: "the attachment \(missing) that \(storeFile) names is not in it")
        }
    }

    /// Moves the unpacked `staging` to `target`: an empty or missing target is replaced by one rename; a full one
    /// (with `--replace`) is renamed aside first and deleted once the new directory is in place.
    static func putInPlace(_ staging: String, at target: String, replacing exists: Bool) throws {
        let aside = staging.replacingOccurrences(of: ".restore-", with: ".replaced-")
        if exists {
            guard rename(target, aside) == 0 else { throw Failure("cannot move \(target) aside: \(String(cString: strerror(errno)))") }
        }
        guard rename(staging, target) == 0 else {
            let reason = String(cString: strerror(errno))
            if exists { rename(aside, target) }
            throw Failure("cannot move the restored directory to \(target): \(reason)")
        }
        if exists { try? FileManager.default.removeItem(atPath: aside) }
    }
}
