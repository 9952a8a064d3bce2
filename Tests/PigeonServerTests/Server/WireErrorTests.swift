import Hummingbird
import Logging
import NIOCore
import PigeonDomain
import PigeonProtocol
import Testing

@testable import PigeonServer

/// ``WireError``: the one mapping of an error to the wire, for HTTP answers and WebSocket error frames alike.
@Suite struct WireErrorTests {
    static let logger = Logger(label: "wire-error-test")

    static func wire(_ error: any Error) -> (code: ErrorCode, message: String) {
        let mapped = WireError.of(error, logger: logger, what: "a test")
        return (mapped.code, mapped.message)
    }

    struct Unexpected: Error, CustomStringConvertible {
        var description: String { "secret detail of the database" }
    }

    @Test func eachKindOfErrorMapsToItsWireError() {
        #expect(Self.wire(PigeonError(.rateLimited, "slow down", retryAfter: 3)) == (.rateLimited, "slow down"))
        #expect(WireError.of(PigeonError(.rateLimited, "slow down", retryAfter: 3), logger: Self.logger, what: "x").retryAfter == 3)
        #expect(Self.wire(HTTPError(.notFound)) == (.notFound, "no such route"))
        #expect(Self.wire(HTTPError(.methodNotAllowed)) == (.methodNotAllowed, "405 Method Not Allowed"))
        #expect(Self.wire(HTTPError(.badRequest, message: "bad head")) == (.invalidRequest, "bad head"))
        #expect(Self.wire(HTTPError(.contentTooLarge)).code == .payloadTooLarge)
        #expect(Self.wire(NIOTooManyBytesError(maxBytes: 10)) == (.payloadTooLarge, "request body too large"))
        // Anything else is an internal error whose detail stays in the log.
        #expect(Self.wire(Unexpected()) == (.internalError, "internal error"))
    }
}
