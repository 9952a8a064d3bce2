import AsyncHTTPClient
import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import PigeonDomain
import PigeonProtocol

/// The keys of a JWKS document (a file or an identity provider's `http(s)` URL), kept current.
///
/// Guarantees: the key set in use is always the last one fetched successfully (a failed or malformed fetch keeps
/// it, and is logged); ``run()`` fetches at once, then every refresh interval, and after a failure again with a
/// backoff (1 s, doubling, at most the refresh interval or a minute); a token naming an unknown `kid` makes
/// ``refreshForUnknownKid()`` fetch at once, at most once per minimum refresh interval, with concurrent callers
/// sharing one fetch. A URL fetch has a timeout and a size cap, and follows no redirect.
actor JWKSKeySource {
    enum Location: Sendable, CustomStringConvertible {
        case file(String)
        case url(String)

        /// `text` as a location: an `http(s)` URL or a file path.
        init(_ text: String) throws {
            let lowercased = text.lowercased()
            if lowercased.hasPrefix("http://") || lowercased.hasPrefix("https://") {
                guard let url = URL(string: text), let host = url.host, !host.isEmpty else {
                    throw PigeonError.invalid("the JWKS URL \(text) is not a valid http(s) URL")
                }
                self = .url(text)
            } else if text.contains("://") {
                throw PigeonError.invalid("the JWKS location \(text) is neither an http(s) URL nor a file path")
            } else if text.isEmpty {
                throw PigeonError.invalid("the JWKS location must not be empty")
            } else {
                self = .file(text)
            }
        }

        var description: String {
            switch self {
            case .file(let path): "JWKS file \(path)"
            case .url(let url): "JWKS \(url)"
            }
        }
    }

    let location: Location
    private let refreshInterval: Duration
    private let minimumRefreshInterval: Duration
    private let fetchTimeout: Duration
    private let maxBytes: Int
    private let logger: Logger
    private let current = NIOLockedValueBox<[JWTVerificationKey]>([])
    /// The node's clock: the refresh interval, the backoff and the minimum refresh interval run on it.
    private let clock: ElapsedClock
    private var lastFetch: ElapsedClock.Instant?
    private var fetching = false
    private var waiters: [CheckedContinuation<Bool, Never>] = []

    init(location: Location, configuration: AuthConfiguration, logger: Logger, clock: any Clock<Duration> = ContinuousClock()) {
        self.location = location
        self.clock = ElapsedClock(clock)
        self.refreshInterval = configuration.jwtJWKSRefreshInterval
        self.minimumRefreshInterval = configuration.jwtJWKSMinimumRefreshInterval
        self.fetchTimeout = configuration.jwtJWKSFetchTimeout
        self.maxBytes = configuration.jwtJWKSMaxBytes
        self.logger = logger
    }

    /// The keys in use (none until a fetch has succeeded).
    nonisolated var keys: [JWTVerificationKey] { current.withLockedValue { $0 } }

    /// Loads a JWKS file now, so a missing or malformed one stops the server at start with a clear error.
    func loadFile() async throws {
        guard case .file = location else { return }
        lastFetch = clock.now
        try await install(fetch())
    }

    /// Fetches at once for a token naming an unknown `kid`, unless a fetch happened within the minimum refresh
    /// interval; `true` when the key set was fetched (possibly by a concurrent caller).
    func refreshForUnknownKid() async -> Bool {
        if fetching { return await withCheckedContinuation { waiters.append($0) } }
        if let lastFetch, clock.now - lastFetch < minimumRefreshInterval { return false }
        return await refresh(reason: "a token names an unknown kid")
    }

    /// Fetches until shutdown (the task is cancelled): at once, then on the interval, with backoff after failures.
    func run() async {
        var delay: Duration = keys.isEmpty ? .zero : refreshInterval
        var backoff = Duration.seconds(1)
        let maxBackoff = min(refreshInterval, .seconds(60))
        var warnedAtStart = false
        while !Task.isCancelled {
            if delay > .zero {
                do { try await clock.sleep(for: delay) } catch { return }
            }
            if await refresh(reason: "scheduled") {
                delay = refreshInterval
                backoff = .seconds(1)
            } else {
                if keys.isEmpty, !warnedAtStart {
                    warnedAtStart = true
                    logger.warning("JWTs get 401 until the \(location) can be fetched (retried with backoff); opaque tokens work")
                }
                delay = backoff
                backoff = min(backoff * 2, maxBackoff)
            }
        }
    }

    /// Fetches and installs the key set, or keeps the current one and logs why not.
    private func refresh(reason: String) async -> Bool {
        if fetching { return await withCheckedContinuation { waiters.append($0) } }
        fetching = true
        lastFetch = clock.now
        let succeeded: Bool
        do {
            try await install(fetch())
            succeeded = true
        } catch {
            logger.warning(
                "fetching the \(location) failed; keeping the last good key set",
                metadata: ["reason": "\(reason)", "error": "\(error)", "keys": "\(keys.count)"])
            succeeded = false
        }
        fetching = false
        let waiting = waiters
        waiters = []
        for waiter in waiting { waiter.resume(returning: succeeded) }
        return succeeded
    }

    private func install(_ data: Data) async throws {
        let (keys, skipped) = try await JWTKeys.jwks(data, source: location.description)
        if !skipped.isEmpty {
            logger.debug("JWKS keys skipped", metadata: ["source": "\(location)", "skipped": "\(skipped.joined(separator: "; "))"])
        }
        let kids = Set(keys.compactMap(\.kid)).sorted()
        let changed = Set(self.keys.compactMap(\.kid)).sorted() != kids
        current.withLockedValue { $0 = keys }
        if changed { logger.info("JWT keys loaded", metadata: ["source": "\(location)", "kids": "\(kids.joined(separator: ","))"]) }
    }

    private func fetch() async throws -> Data {
        switch location {
        case .file(let path):
            guard let handle = FileHandle(forReadingAtPath: path) else {
                throw PigeonError.invalid("the JWKS file \(path) cannot be read")
            }
            defer { try? handle.close() }
            let data = try handle.read(upToCount: maxBytes + 1) ?? Data()
            guard data.count <= maxBytes else { throw PigeonError.invalid("the JWKS file \(path) is larger than \(maxBytes) bytes") }
            return data
        case .url(let url):
            // A client of its own that follows no redirect: the keys that sign every token must come from the URL the
            // operator configured, not from wherever that host (or whoever answers for it) points to. Fetches are
            // rare (minutes apart), so the client lives for one fetch.
            var configuration = HTTPClient.Configuration()
            configuration.redirectConfiguration = .disallow
            let client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
            do {
                let data = try await fetch(url, with: client)
                try await client.shutdown()
                return data
            } catch {
                try? await client.shutdown()
                throw error
            }
        }
    }

    private func fetch(_ url: String, with client: HTTPClient) async throws -> Data {
        var request = HTTPClientRequest(url: url)
        request.headers.add(name: "Accept", value: "application/json")
        let timeout = TimeAmount.nanoseconds(Int64(fetchTimeout.components.seconds) * 1_000_000_000 + fetchTimeout.components.attoseconds / 1_000_000_000)
        let response = try await client.execute(request, timeout: timeout)
        if (300..<400).contains(response.status.code) {
            throw PigeonError.invalid(
                "the JWKS URL answered HTTP \(response.status.code), a redirect: redirects are not followed (configure the final URL)")
        }
        guard response.status == .ok else {
            throw PigeonError.invalid("the JWKS URL answered HTTP \(response.status.code)")
        }
        let body = try await response.body.collect(upTo: maxBytes)
        return Data(body.readableBytesView)
    }
}
