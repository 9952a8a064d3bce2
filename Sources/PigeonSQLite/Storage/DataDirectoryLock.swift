import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The claim of one process (one server, in-process ones included) on an embedded data directory: an exclusive
/// `flock` on `<data-dir>/pigeon.lock`, held while the server runs, and by `restore` while it replaces the directory.
///
/// Without it `restore --replace` could swap the files under a running server (which went on writing into deleted
/// files: a message acknowledged with ✓ was gone after the next restart, and its seq given again), and two servers
/// could write one store. The lock is the kernel's: it goes with the process however that ends (a crash or SIGKILL
/// leaves no stale lock), and `flock` locks belong to an open file, so a second server in the same process is refused
/// too. The file holds a line naming the holder (what, pid, since when) for the refusal's message.
package final class DataDirectoryLock: @unchecked Sendable {
    package static let fileName = "pigeon.lock"

    /// Why the directory could not be claimed.
    package struct Held: Error, CustomStringConvertible {
        package let directory: String
        /// The holder's own line (`pigeon-server serve, pid 1234, since …`), or a placeholder when it wrote none.
        package let holder: String
        package var description: String { "the data directory \(directory) is in use by \(holder)" }
    }

    package let directory: String
    private let lock = NSLock()
    private var descriptor: Int32

    /// Claims `directory` (creating it when missing) for `holder` (such as `pigeon-server serve`), or throws ``Held``
    /// naming the process that holds it.
    package init(directory: String, holder: String) throws {
        let path = URL(fileURLWithPath: directory).standardizedFileURL.path
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        let file = path + "/" + Self.fileName
        let descriptor = open(file, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else {
            throw CocoaError(.fileWriteUnknown, userInfo: [NSLocalizedDescriptionKey: "cannot open \(file): \(String(cString: strerror(errno)))"])
        }
        guard flock(descriptor, LOCK_EX | LOCK_NB) == 0 else {
            let reason = errno
            close(descriptor)
            if reason == EWOULDBLOCK { throw Held(directory: path, holder: Self.holder(of: file)) }
            throw CocoaError(.fileWriteUnknown, userInfo: [NSLocalizedDescriptionKey: "cannot lock \(file): \(String(cString: strerror(reason)))"])
        }
        let line = "\(holder), pid \(getpid()), since \(Date().formatted(.iso8601))\n"
        _ = ftruncate(descriptor, 0)
        _ = line.withCString { pwrite(descriptor, $0, strlen($0), 0) }
        self.directory = path
        self.descriptor = descriptor
    }

    /// Whether some process holds `directory` now; the holder's line if so. Holds nothing itself.
    package static func holder(ofDirectory directory: String) -> String? {
        let file = URL(fileURLWithPath: directory).standardizedFileURL.path + "/" + fileName
        let descriptor = open(file, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return nil }
        defer { close(descriptor) }
        guard flock(descriptor, LOCK_SH | LOCK_NB) != 0, errno == EWOULDBLOCK else { return nil }
        return holder(of: file)
    }

    /// The nearest directory at or above `path` that a running process holds as its data directory, and its holder.
    package static func heldAncestor(of path: String) -> (directory: String, holder: String)? {
        var directory = URL(fileURLWithPath: path).standardizedFileURL
        while true {
            if let holder = holder(ofDirectory: directory.path) { return (directory.path, holder) }
            let parent = directory.deletingLastPathComponent()
            if parent.path == directory.path { return nil }
            directory = parent
        }
    }

    /// Lets the directory go (idempotent; also when this object goes away).
    package func release() {
        lock.withLock {
            guard descriptor >= 0 else { return }
            close(descriptor)
            descriptor = -1
        }
    }

    deinit { release() }

    private static func holder(of file: String) -> String {
        let text = (try? String(contentsOfFile: file, encoding: .utf8))?.trimmingCharacters(in: .whitespacesAndNewlines) ?? ""
        return text.isEmpty ? "another process" : text
    }
}
