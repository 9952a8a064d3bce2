/// What a shared backend knows of the nodes of a deployment by their heartbeats (the operator's page lists them).
///
/// The PostgreSQL fan-out answers from memory (its `nodes` table as last read, every 2 s, and this node's own last
/// heartbeat); the Redis buffer reads its nodes set (Redis's clock). A node that stopped heart-beating stays listed,
/// with its old heartbeat, until the backend forgets it.
package protocol NodeRoster: Sendable {
    /// The last heartbeat of each node the backend knows (milliseconds since the epoch), by node id.
    func nodeHeartbeats() async throws -> [String: Int64]
}
