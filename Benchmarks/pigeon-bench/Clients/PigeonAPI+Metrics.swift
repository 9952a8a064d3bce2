import AsyncHTTPClient
import NIOCore

extension PigeonAPI {
    /// The node's `pigeon_messages_stored_total` from `GET /metrics` (the messages this node's processor stored
    /// since it started), or `nil` if the node does not answer it.
    func storedTotal() async -> Int? {
        guard let response = try? await http.execute(HTTPClientRequest(url: baseURL + "/metrics"), timeout: .seconds(5)),
            let body = try? await response.body.collect(upTo: 1 << 22), response.status == .ok
        else { return nil }
        let text = String(buffer: body)
        for line in text.split(separator: "\n") where line.hasPrefix("pigeon_messages_stored_total ") {
            return line.split(separator: " ").last.flatMap { Double($0) }.map { Int($0) }
        }
        return nil
    }
}
