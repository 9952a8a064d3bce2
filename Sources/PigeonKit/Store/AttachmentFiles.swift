import Foundation
import PigeonProtocol

/// The client's files beside its database (`<database>-attachments/`): `sent/` keeps a copy of every file this
/// device sends, for as long as its message is in the database (the upload reads it, and a chat shows it from
/// there); `cache/` keeps downloads, bounded (``AttachmentCache``).
struct AttachmentFiles: Sendable {
    let root: URL
    let sent: URL
    let cache: URL

    init(databasePath: String) {
        root = URL(fileURLWithPath: databasePath + "-attachments", isDirectory: true)
        sent = root.appendingPathComponent("sent", isDirectory: true)
        cache = root.appendingPathComponent("cache", isDirectory: true)
    }

    /// Copies what `source` names into `sent/` under a new name and describes it; the caller saves the description
    /// with its message, or removes the copy (``removeSent(_:)``) when that fails. Throws `invalidArgument` for a
    /// file that cannot be read (missing, a directory) or is empty, and `localDatabase` when the copy cannot be written.
    func saveCopy(of source: PigeonAttachmentSource) throws -> LocalAttachment {
        let fileManager = FileManager.default
        do {
            try fileManager.createDirectory(at: sent, withIntermediateDirectories: true)
        } catch {
            throw PigeonClientError(.localDatabase, "cannot create \(sent.path): \(error)")
        }
        let ext = (source.name as NSString).pathExtension
        let suffix = !ext.isEmpty && ext.count <= 16 && ext.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber) }) ? "." + ext : ""
        let file = UUID().uuidString.lowercased() + suffix
        let copy = sent.appendingPathComponent(file)
        let size: Int64
        switch source.content {
        case .data(let data):
            do {
                try data.write(to: copy)
            } catch {
                throw PigeonClientError(.localDatabase, "cannot write \(copy.path): \(error)")
            }
            size = Int64(data.count)
        case .file(let url):
            var isDirectory: ObjCBool = false
            guard url.isFileURL, fileManager.fileExists(atPath: url.path, isDirectory: &isDirectory), !isDirectory.boolValue else {
                throw PigeonClientError.invalid("\(url.path) is not a file")
            }
            do {
                try fileManager.copyItem(at: url, to: copy)
            } catch {
                throw PigeonClientError.invalid("cannot copy \(url.path): \(error.localizedDescription)")
            }
            size = ((try? fileManager.attributesOfItem(atPath: copy.path))?[.size] as? NSNumber)?.int64Value ?? 0
        }
        guard size > 0 else {
            try? fileManager.removeItem(at: copy)
            throw PigeonClientError.invalid("\(source.name) is empty: an attachment has at least one byte")
        }
        return LocalAttachment(
            name: source.name, size: size, contentType: source.contentType, width: source.width, height: source.height,
            durationMs: source.durationMs, file: file)
    }

    /// Removes copies in `sent/` (by their file names).
    func removeSent(_ files: [String]) {
        for file in files { try? FileManager.default.removeItem(at: sent.appendingPathComponent(file)) }
    }

    /// The files in `sent/` (names) last written before `date`, for removing those no message names any more (a newer
    /// one may be the copy of a send another client on the same database is saving right now).
    func sentFiles(before date: Date) -> [String] {
        let fileManager = FileManager.default
        return ((try? fileManager.contentsOfDirectory(atPath: sent.path)) ?? []).filter { name in
            let modified = (try? fileManager.attributesOfItem(atPath: sent.appendingPathComponent(name).path))?[.modificationDate] as? Date
            return modified.map { $0 < date } ?? false
        }
    }

    /// Where the download of the attachment `id` is kept in the cache.
    func cached(id: String) -> URL {
        cache.appendingPathComponent(Self.fileName(id: id))
    }

    /// A new file name in `cache/` for a download on its way (renamed into place once checked).
    func downloading(id: String) throws -> URL {
        do {
            try FileManager.default.createDirectory(at: cache, withIntermediateDirectories: true)
        } catch {
            throw PigeonClientError(.localDatabase, "cannot create \(cache.path): \(error)")
        }
        return cache.appendingPathComponent(".\(Self.fileName(id: id)).\(UUID().uuidString.lowercased()).partial")
    }

    /// An id as a file name: the server's ids are UUIDs; anything else is kept to safe characters.
    private static func fileName(id: String) -> String {
        String(id.unicodeScalars.map { CharacterSet.alphanumerics.contains($0) || $0 == "-" ? Character($0) : "_" })
    }
}
