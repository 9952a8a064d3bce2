/// An incremental `text/event-stream` parser (the WHATWG rules PigeonKit needs): lines end with LF, CR or CRLF;
/// `data:` lines join with LF; `id:` and `event:` set the event's fields; a blank line dispatches; lines starting
/// with `:` are comments (keep-alives). Bytes may arrive split anywhere, even inside a CRLF or a UTF-8 sequence.
package struct ServerSentEventParser: Sendable {
    package struct Event: Sendable, Equatable {
        package var id: String?
        package var event: String?
        package var data: String
    }

    private var line: [UInt8] = []
    private var lastWasCR = false
    private var data: [UInt8] = []
    private var hasData = false
    private var id: String?
    private var event: String?

    package init() {}

    /// Feeds bytes; returns the events they completed.
    package mutating func feed<Bytes: Sequence>(_ bytes: Bytes) -> [Event] where Bytes.Element == UInt8 {
        var events: [Event] = []
        for byte in bytes {
            if lastWasCR {
                lastWasCR = false
                if byte == UInt8(ascii: "\n") { continue }
            }
            switch byte {
            case UInt8(ascii: "\r"):
                lastWasCR = true
                if let event = endLine() { events.append(event) }
            case UInt8(ascii: "\n"):
                if let event = endLine() { events.append(event) }
            default:
                line.append(byte)
            }
        }
        return events
    }

    private mutating func endLine() -> Event? {
        defer { line.removeAll(keepingCapacity: true) }
        if line.isEmpty {
            guard hasData else {
                event = nil
                return nil
            }
            let out = Event(id: id, event: event, data: String(decoding: data, as: UTF8.self))
            data.removeAll(keepingCapacity: true)
            hasData = false
            event = nil
            return out
        }
        if line.first == UInt8(ascii: ":") { return nil }
        let colon = line.firstIndex(of: UInt8(ascii: ":")) ?? line.endIndex
        let field = String(decoding: line[..<colon], as: UTF8.self)
        var valueStart = colon < line.endIndex ? line.index(after: colon) : colon
        if valueStart < line.endIndex, line[valueStart] == UInt8(ascii: " ") { valueStart = line.index(after: valueStart) }
        let value = line[valueStart...]
        switch field {
        case "data":
            if hasData { data.append(UInt8(ascii: "\n")) }
            data.append(contentsOf: value)
            hasData = true
        case "id":
            if !value.contains(0) { id = String(decoding: value, as: UTF8.self) }
        case "event":
            event = String(decoding: value, as: UTF8.self)
        default:
            break
        }
        return nil
    }
}
