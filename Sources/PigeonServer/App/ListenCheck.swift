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
        let bootstrap = ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(ChannelOptions.socketOption(.so_reuseaddr), value: 1)
        let channel: any Channel
        do {
            channel = try await bootstrap.bind(host: host, port: port).get()
        } catch {
            throw refusal(for: error, host: host, port: port) ?? error
        }
        try? await channel.close()
    }

    /// The clear refusal for a failed bind (an address in use, a port that needs privileges, an address this machine
    /// does not have), or `nil` for another error.
    public static func refusal(for error: any Error, host: String, port: Int) -> ListenRefusal? {
        guard let io = error as? IOError else {
            if error is SocketAddressError { return ListenRefusal(description: "cannot listen on \(host): no such address on this machine") }
            return nil
        }
        switch io.errnoCode {
        case EADDRINUSE: return ListenRefusal(description: "port \(port) on \(host) is in use (another pigeon-server?)")
        case EACCES: return ListenRefusal(description: "port \(port) on \(host) needs privileges this process does not have (choose a port above 1023)")
        case EADDRNOTAVAIL: return ListenRefusal(description: "cannot listen on \(host): no such address on this machine")
        default: return nil
        }
    }
}
