import Foundation
import GRDB
import NIOConcurrencyHelpers
import PigeonDomain
import PigeonProtocol

/// Whether the disk under an embedded SQLite file (the store or the buffer) took the last write.
///
/// A write SQLite refuses because the disk is full (`SQLITE_FULL`) or failed (`SQLITE_IOERR`) is answered with a
/// generic `503 overloaded`, never SQLite's own text, and the file is not ready until a write succeeds again.
package final class SQLiteDiskHealth: Sendable {
    /// The answer a client gets while the disk refuses writes.
    package static let refusal = PigeonError.overloaded("the server's disk is full; retry later")

    private let refusing = NIOLockedValueBox(false)
    /// The directory of the file: its file system's free space decides when to try writing again.
    private let directory: String
    /// Free space below which a refusing disk is not tried again: room for a few of the largest writes, so that
    /// the few kilobytes a rolled-back write frees do not make the node look ready.
    package static let headroomBytes: UInt64 = 1 << 20

    /// Watches the disk under the SQLite file at `path`.
    package init(path: String) {
        self.directory = (path as NSString).deletingLastPathComponent
    }

    /// Whether the file system has ``headroomBytes`` free for an unprivileged writer (`statvfs`); `true` when
    /// it cannot tell.
    package func hasHeadroom() -> Bool {
        var stats = statvfs()
        guard statvfs(directory.isEmpty ? "." : directory, &stats) == 0 else { return true }
        return UInt64(stats.f_bavail) * UInt64(stats.f_frsize) >= Self.headroomBytes
    }

    /// Whether the last write was refused by the disk.
    package var isRefusingWrites: Bool { refusing.withLockedValue { $0 } }

    /// Whether `error` is the disk refusing a write.
    package static func isDiskFault(_ error: any Error) -> Bool {
        guard let error = error as? DatabaseError else { return false }
        return error.resultCode == .SQLITE_FULL || error.resultCode == .SQLITE_IOERR
    }

    /// `error` as the client sees it: ``refusal`` for a disk fault (remembered until ``recordSuccess()``), else
    /// unchanged.
    package func translate(_ error: any Error) -> any Error {
        guard Self.isDiskFault(error) else { return error }
        refusing.withLockedValue { $0 = true }
        return Self.refusal
    }

    /// Whether the file can serve: while the disk refuses writes, only with headroom and once `probe` (a tiny
    /// write, which clears the refusal when it commits) succeeds; otherwise whenever `read` succeeds.
    package func isReady(probe: () async throws -> Void, read: () async throws -> Void) async -> Bool {
        if isRefusingWrites {
            guard hasHeadroom() else { return false }
            return (try? await probe()) != nil
        }
        return (try? await read()) != nil
    }

    package func recordSuccess() {
        refusing.withLockedValue { if $0 { $0 = false } }
    }

    /// Runs `write`, translating a disk fault (``translate(_:)``) and recording a success.
    package func guarding<T>(_ write: () async throws -> T) async throws -> T {
        do {
            let value = try await write()
            recordSuccess()
            return value
        } catch {
            throw translate(error)
        }
    }
}
