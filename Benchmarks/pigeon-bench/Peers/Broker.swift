import Foundation

/// A broker Pigeon is compared with (mosquitto, NATS JetStream, Redis Streams), which the run starts itself: how it starts and
/// stops, how its run is described, and the load shapes it is measured under (the same as Pigeon's).
protocol Broker: Sendable {
    associatedtype Load: BrokerLoad

    /// How its run is described.
    static var labels: BrokerLabels { get }
    var port: Int { get }
    var pid: pid_t { get }
    /// The version it reported, if any.
    var version: String? { get }

    /// Starts `binary` with its data in `workDirectory`, waits until it is ready, runs `body`, and stops it whatever
    /// happens.
    static func withBroker<T>(binary: String, workDirectory: String, _ body: (Self) async throws -> T) async throws -> T

    func load(settings: BenchSettings) -> Load
}

/// Pigeon's load shapes against a broker.
protocol BrokerLoad: Sendable {
    /// Pipelined publishing with a consuming receiver per publisher (``ThroughputResult/brokerThroughput(settings:brokerPid:receiver:sender:)``).
    func throughput() async throws -> ThroughputResult
    /// Paced publishing at `rate` messages/s in total (``PacedLatencyRun/brokerLatency(rate:settings:brokerPid:receiver:sender:)``).
    func latency(rate: Int) async throws -> LatencyResult
}

/// The words of a broker's run where brokers differ.
struct BrokerLabels: Sendable {
    /// The executable, as the line after its start names it ("mosquitto").
    var executable: String
    /// When its idle RSS was read ("at start").
    var residentWhen: String
    /// The system, in the section titles ("mosquitto", "NATS JetStream").
    var name: String
    /// What a publisher keeps in flight ("QoS 1 publishes").
    var inFlight: String
    /// The receivers of the throughput run ("a consuming subscriber per topic").
    var throughputReceivers: String
    /// The accept answers it counts ("PUBACKs").
    var acks: String
    /// One receiver ("subscriber", "consumer").
    var receiver: String
}
