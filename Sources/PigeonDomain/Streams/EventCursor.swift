/// A place in a store's event log: for each partition, the offset of the last event read (0: none yet).
///
/// A store's log is split in ``MessageStore/eventPartitions`` partitions; everything about one conversation is in
/// one partition, in commit order, numbered 1, 2, 3 … with no gap. A device's stream is the merge of its events
/// from every partition, so where it stands is one offset per partition (Kafka's consumer offsets).
public struct EventPosition: Sendable, Hashable, CustomStringConvertible {
    public var offsets: [Int64]

    public init(offsets: [Int64]) {
        self.offsets = offsets
    }

    /// Before every event of a log with `partitions` partitions.
    public static func start(partitions: Int) -> EventPosition {
        EventPosition(offsets: Array(repeating: 0, count: partitions))
    }

    /// Whether `event` comes after this position (it has not been read yet).
    public func precedes(_ event: StoredEvent) -> Bool {
        event.partition < offsets.count && event.id > offsets[event.partition]
    }

    /// Moves past `event`.
    public mutating func advance(past event: StoredEvent) {
        offsets[event.partition] = max(offsets[event.partition], event.id)
    }

    /// Whether no offset of this position is beyond `other`'s (same partitions).
    public func isWithin(_ other: EventPosition) -> Bool {
        offsets.count == other.offsets.count && zip(offsets, other.offsets).allSatisfy { $0 <= $1 }
    }

    public var description: String { offsets.map(String.init).joined(separator: ",") }
}

/// The opaque cursor of API.md: a store epoch and an ``EventPosition``.
///
/// - One partition (the embedded store): `<epoch>-<offset>`, as it always was.
/// - Several partitions: `<epoch>.<offsets>`, the offsets as unsigned LEB128 varints in unpadded base64url: 16
///   partitions at up to 2^28 events each take at most 86 characters.
///
/// The epoch ties a cursor to one event log and one partition layout, so a cursor from a wiped or different server,
/// or from before the partition count changed, is unknown (reset) rather than silently pointing at other events.
/// A one-partition cursor given to a log of several partitions is honoured as that offset in partition 0 and none
/// elsewhere: exactly where a cursor of the single log stood when the store moved to partitions (migration 4 keeps
/// the old events, with their ids, in partition 0).
package struct EventCursor: Equatable, Sendable {
    package var epoch: String
    package var position: EventPosition

    package var string: String {
        if position.offsets.count == 1 { return "\(epoch)-\(position.offsets[0])" }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(position.offsets.count * 4)
        for offset in position.offsets {
            var value = UInt64(max(0, offset))
            repeat {
                let low = UInt8(value & 0x7F)
                value >>= 7
                bytes.append(value == 0 ? low : low | 0x80)
            } while value != 0
        }
        return "\(epoch).\(Base64URL.encode(bytes))"
    }

    /// Parses a cursor for a log of `partitions` partitions; `nil` for anything that is not one of ours or does not
    /// fit the layout (an unknown cursor, answered with reset).
    package init?(_ string: String, partitions: Int) {
        if let dot = string.firstIndex(of: ".") {
            let epoch = String(string[..<dot])
            guard !epoch.isEmpty, let bytes = Base64URL.decode(string[string.index(after: dot)...]) else { return nil }
            var offsets: [Int64] = []
            var value: UInt64 = 0
            var shift: UInt64 = 0
            for byte in bytes {
                guard shift < 63 else { return nil }
                value |= UInt64(byte & 0x7F) << shift
                if byte & 0x80 == 0 {
                    guard value <= UInt64(Int64.max) else { return nil }
                    offsets.append(Int64(value))
                    (value, shift) = (0, 0)
                } else {
                    shift += 7
                }
            }
            guard shift == 0, offsets.count == partitions else { return nil }
            self.init(epoch: epoch, position: EventPosition(offsets: offsets))
        } else {
            guard let dash = string.lastIndex(of: "-"), let id = Int64(string[string.index(after: dash)...]), id >= 0 else { return nil }
            let epoch = String(string[..<dash])
            guard !epoch.isEmpty, partitions >= 1 else { return nil }
            var position = EventPosition.start(partitions: partitions)
            position.offsets[0] = id
            self.init(epoch: epoch, position: position)
        }
    }

    package init(epoch: String, position: EventPosition) {
        self.epoch = epoch
        self.position = position
    }

    /// The longest cursor parameter the server reads (a 64-partition log's cursor fits).
    package static let maximumLength = 512

    /// A cursor parameter the server refuses with 400 instead of answering reset: empty, too long or not printable ASCII.
    package static func isMalformed(_ string: String) -> Bool {
        string.isEmpty || string.utf8.count > maximumLength || !string.utf8.allSatisfy { $0 > 0x20 && $0 < 0x7F }
    }
}

/// Unpadded base64url (RFC 4648 §5), the cursor's alphabet.
package enum Base64URL {
    private static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)
    private static let values: [UInt8] = {
        var table = [UInt8](repeating: 0xFF, count: 256)
        for (index, character) in alphabet.enumerated() { table[Int(character)] = UInt8(index) }
        return table
    }()

    package static func encode(_ bytes: [UInt8]) -> String {
        var out: [UInt8] = []
        out.reserveCapacity((bytes.count * 4 + 2) / 3)
        var index = 0
        while index < bytes.count {
            let chunk = bytes[index..<min(index + 3, bytes.count)]
            var group: UInt32 = 0
            for (shift, byte) in zip([16, 8, 0], chunk) { group |= UInt32(byte) << UInt32(shift) }
            for position in 0...chunk.count { out.append(alphabet[Int((group >> UInt32(18 - 6 * position)) & 0x3F)]) }
            index += 3
        }
        return String(decoding: out, as: UTF8.self)
    }

    package static func decode(_ text: Substring) -> [UInt8]? {
        let characters = Array(text.utf8)
        guard characters.count % 4 != 1 else { return nil }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(characters.count * 3 / 4)
        var index = 0
        while index < characters.count {
            let chunk = characters[index..<min(index + 4, characters.count)]
            var group: UInt32 = 0
            for (position, character) in chunk.enumerated() {
                let value = values[Int(character)]
                guard value != 0xFF else { return nil }
                group |= UInt32(value) << UInt32(18 - 6 * position)
            }
            for position in 0..<(chunk.count - 1) { bytes.append(UInt8((group >> UInt32(16 - 8 * position)) & 0xFF)) }
            // Bits past the last whole byte must be zero, so that each position has one spelling.
            let unused = group & ((1 << UInt32(24 - 8 * (chunk.count - 1))) - 1)
            guard unused == 0 else { return nil }
            index += 4
        }
        return bytes
    }
}

/// Where a stream or a sync starts.
package struct StreamStart: Sendable {
    /// Deliver events after this position.
    package var after: EventPosition
    /// The client's cursor was unknown or expired: send `reset` first.
    package var reset: Bool
}

extension EventLog {
    /// The cursor of `position` in this store's log.
    package func cursor(_ position: EventPosition) -> String {
        EventCursor(epoch: epoch, position: position).string
    }

    /// Resolves a client's cursor: no cursor → now; ours (or the former log's, up to its head) and retained → after it;
    /// anything else → reset to now.
    package func resolveStart(_ cursor: String?) async throws -> StreamStart {
        let head = try await headPosition()
        guard let cursor else { return StreamStart(after: head, reset: false) }
        guard let parsed = EventCursor(cursor, partitions: eventPartitions), parsed.position.isWithin(head),
            parsed.epoch == epoch || (parsed.epoch == formerLog?.epoch && formerLog.map { parsed.position.isWithin($0.head) } == true),
            try await prunedThrough().isWithin(parsed.position)
        else { return StreamStart(after: head, reset: true) }
        return StreamStart(after: parsed.position, reset: false)
    }
}
