import PigeonBenchSupport

/// What the servers and brokers under load can answer outside their protocols.
extension BenchError {
    /// An HTTP answer the wire contract does not allow for this request.
    static func unexpectedResponse(request: String, status: UInt, body: String) -> BenchError {
        BenchError("\(request) answered \(status): \(body)")
    }

    /// A WebSocket message that is not a server frame of the wire contract.
    static func unexpectedFrame(_ text: String) -> BenchError {
        BenchError("unexpected WebSocket message: \(text)")
    }

    /// An MQTT broker answered outside the protocol.
    static func mqttProtocol(_ detail: String) -> BenchError {
        BenchError("MQTT: \(detail)")
    }

    /// A NATS server answered outside the protocol, or JetStream refused a request (the detail has its answer).
    static func natsProtocol(_ detail: String) -> BenchError {
        BenchError("NATS: \(detail)")
    }

    /// Redis answered a command of the Redis Streams peer with something the bench does not expect.
    static func redisProtocol(_ detail: String) -> BenchError {
        BenchError("Redis: \(detail)")
    }

    /// A connection of a scenario failed.
    static func connectionFailed(_ detail: String) -> BenchError {
        BenchError("connection failed: \(detail)")
    }
}
