import PigeonBenchSupport

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A push gateway that never answers: a loopback socket that listens and never accepts, so every request the server
/// sends it waits for its timeout (the kernel completes the handshakes up to its backlog, then holds the rest). What
/// the push path costs accept, delivery and receipts when the gateway hangs is measured against it.
final class HangingPushGateway: Sendable {
    let port: Int
    private let descriptor: Int32

    init() throws {
        #if canImport(Glibc)
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        #else
        let fd = socket(AF_INET, SOCK_STREAM, 0)
        #endif
        guard fd >= 0 else { throw BenchError("socket() failed for the hanging push gateway") }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = 0
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let named = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        guard bound == 0, named == 0, listen(fd, 4096) == 0 else {
            close(fd)
            throw BenchError("cannot listen on loopback for the hanging push gateway")
        }
        descriptor = fd
        port = Int(UInt16(bigEndian: address.sin_port))
    }

    /// The one gateway of a run (every spawned server points at it; it lives as long as the process).
    static let shared = Result { try HangingPushGateway() }

    /// The `pigeon-server` arguments that point it here (with a long timeout, so requests pile up).
    var serverArguments: [String] {
        ["--push-gateway", "http://127.0.0.1:\(port)", "--push-timeout-seconds", "30"]
    }

    deinit {
        close(descriptor)
    }
}
