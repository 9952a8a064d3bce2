import NIOCore
import NIOPosix

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Why the server cannot listen where it was told to, in words that name the address.
public struct ListenRefusal: Error, CustomStringConvertible {
    public let description: String
}

/// Checks, before anything else of a start (no data directory is created, no store opened), that `host:port` can be
/// listened on: binds it (with `SO_REUSEADDR`, as the server does) and lets it go. The server's own bind can still
/// lose a race to another process; ``ListenCheck/refusal(for:host:port:)`` words that failure the same way.
public enum ListenCheck {
    public static func checkFree(host: String, port: Int) async throws {
        guard port != 0 else { return }
        // bind(2) without listen(2): nothing can connect to the check itself (a client, or a test waiting for the port,
        // would otherwise reach a listener that goes away at once).
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        #if canImport(Glibc)
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        #else
        hints.ai_socktype = SOCK_STREAM
        #endif
        hints.ai_flags = AI_PASSIVE
        var found: UnsafeMutablePointer<addrinfo>?
        guard getaddrinfo(host, String(port), &hints, &found) == 0, let address = found else {
            throw ListenRefusal(description: "cannot listen on \(host): no such address on this machine")
        }
        defer { freeaddrinfo(found) }
        let descriptor = socket(address.pointee.ai_family, address.pointee.ai_socktype, address.pointee.ai_protocol)
        guard descriptor >= 0 else { return }
        defer { close(descriptor) }
        var one: Int32 = 1
        setsockopt(descriptor, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        guard bind(descriptor, address.pointee.ai_addr, address.pointee.ai_addrlen) == 0 else {
            let code = errno
            throw refusal(errno: code, host: host, port: port)
                ?? ListenRefusal(description: "cannot listen on \(host):\(port): \(String(cString: strerror(code)))")
        }
    }

    /// The clear refusal for a failed bind (an address in use, a port that needs privileges, an address this machine
    /// does not have), or `nil` for another error.
    public static func refusal(for error: any Error, host: String, port: Int) -> ListenRefusal? {
        guard let io = error as? IOError else {
            if error is SocketAddressError { return ListenRefusal(description: "cannot listen on \(host): no such address on this machine") }
            return nil
        }
        return refusal(errno: io.errnoCode, host: host, port: port)
    }

    static func refusal(errno code: Int32, host: String, port: Int) -> ListenRefusal? {
        switch code {
        case EADDRINUSE: return ListenRefusal(description: "port \(port) on \(host) is in use (another pigeon-server?)")
        case EACCES: return ListenRefusal(description: "port \(port) on \(host) needs privileges this process does not have (choose a port above 1023)")
        case EADDRNOTAVAIL: return ListenRefusal(description: "cannot listen on \(host): no such address on this machine")
        default: return nil
        }
    }
}
