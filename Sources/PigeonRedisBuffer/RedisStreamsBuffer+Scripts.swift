import Foundation
import NIOCore
import PigeonDomain
import PigeonProtocol
import PigeonRedis

extension RedisStreamsBuffer {
    /// The consumer group every partition stream has.
    package static let group = "processors"

    /// The Lua scripts of the buffer, each atomic in Redis. Every one touches keys of one hash slot only.
    package enum Scripts {
        /// KEYS: dedupe key, stream. ARGV: "serverId acceptedAt", dedupe TTL in seconds, encoded message.
        /// Returns nil when appended, or the original's "serverId acceptedAt" for a duplicate.
        package static let append = RedisScript(
            """
            local original = redis.call('GET', KEYS[1])
            if original then return original end
            redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])
            redis.call('XADD', KEYS[2], '*', 'm', ARGV[3])
            return false
            """)

        /// KEYS: nodes sorted set. ARGV: node id, lease TTL in milliseconds.
        /// Registers the node's heartbeat (Redis's clock, shared by all nodes), forgets nodes silent for three lease
        /// TTLs, and returns how many nodes beat within one lease TTL.
        package static let heartbeat = RedisScript(
            """
            local time = redis.call('TIME')
            local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
            local ttl = tonumber(ARGV[2])
            redis.call('ZADD', KEYS[1], now, ARGV[1])
            redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - 3 * ttl)
            return redis.call('ZCOUNT', KEYS[1], now - ttl, '+inf')
            """)

        /// KEYS: lease. ARGV: node id, TTL in milliseconds. Extends the lease if the node still holds it: 1, else 0.
        package static let renewLease = RedisScript(
            """
            if redis.call('GET', KEYS[1]) == ARGV[1] then
                return redis.call('PEXPIRE', KEYS[1], ARGV[2])
            end
            return 0
            """)

        /// KEYS: lease. ARGV: node id. Deletes the lease if the node holds it: 1, else 0.
        package static let releaseLease = RedisScript(
            """
            if redis.call('GET', KEYS[1]) == ARGV[1] then
                return redis.call('DEL', KEYS[1])
            end
            return 0
            """)

        /// KEYS: stream, attempts hash. ARGV: stream ids.
        /// Acknowledges the entries, deletes them from the stream and forgets their attempt counts; returns how many
        /// entries were deleted.
        package static let acknowledge = RedisScript(
            """
            redis.call('XACK', KEYS[1], '\(RedisStreamsBuffer.group)', unpack(ARGV))
            local deleted = redis.call('XDEL', KEYS[1], unpack(ARGV))
            redis.call('HDEL', KEYS[2], unpack(ARGV))
            return deleted
            """)

        package static let all = [append, heartbeat, renewLease, releaseLease, acknowledge]
    }

    /// The Redis keys of one buffer (one prefix). A partition's keys share a hash tag, so they live in one slot of a
    /// Redis Cluster and its scripts can touch them together.
    package struct Keys: Sendable {
        package let prefix: String

        package func stream(_ partition: Int) -> String { "\(prefix):{\(partition)}:s" }
        /// The de-duplication record of (sender, device, clientMessageId): a device id is unique only within its user
        /// (JWT `did` claims are chosen by the identity provider). The user and device ids are length-prefixed, so no
        /// two triples share a key, and `u:` keeps these keys apart from the `d:<device>:<clientMessageId>` keys of
        /// earlier versions (which expire with their TTL).
        package func dedupe(_ partition: Int, senderId: String, deviceId: String, clientMessageId: String) -> String {
            "\(prefix):{\(partition)}:u:\(senderId.utf8.count):\(senderId):\(deviceId.utf8.count):\(deviceId):\(clientMessageId)"
        }
        package func lease(_ partition: Int) -> String { "\(prefix):{\(partition)}:lease" }
        package func attempts(_ partition: Int) -> String { "\(prefix):{\(partition)}:attempts" }
        package var nodes: String { "\(prefix):nodes" }
        package var meta: String { "\(prefix):meta" }
    }
}

/// The compact, exact encoding of a ``BufferedMessage`` in the stream entry's one field: a version, then each field
/// in order, strings as `<UTF-8 byte count>:<bytes>` and integers as `<decimal>;`. Any string round-trips exactly.
///
/// Version 1 holds the fields every message has; version 2 adds `replyTo` and `threadRoot` (API.md 1.2), each a
/// string or `-1:` for none; version 3 adds, after those, the attachments (API.md 1.2) as their wire JSON (the message
/// row's column, ``AttachmentColumn``). A message is written in the lowest version that holds it, so that a node of an
/// earlier release still reads every message it could before; an entry of an earlier version reads back without the
/// later fields.
package enum BufferedMessageCodec {
    package static func encode(_ message: BufferedMessage) -> ByteBuffer {
        let attachments = AttachmentColumn.encode(message.attachments)
        let replies = message.replyTo != nil || message.threadRoot != nil
        var buffer = ByteBuffer()
        buffer.reserveCapacity(64 + message.body.utf8.count + 8 * 40 + (attachments?.utf8.count ?? 0))
        writeInteger(attachments != nil ? 3 : replies ? 2 : 1, into: &buffer)
        for text in [message.serverId, message.conversationId, message.senderId, message.senderDeviceId, message.clientMessageId, message.type]
        {
            writeString(text, into: &buffer)
        }
        writeString(message.body, into: &buffer)
        writeInteger(message.clientTimestamp, into: &buffer)
        writeInteger(message.acceptedAt, into: &buffer)
        if replies || attachments != nil {
            writeOptionalString(message.replyTo, into: &buffer)
            writeOptionalString(message.threadRoot, into: &buffer)
        }
        if let attachments { writeString(attachments, into: &buffer) }
        return buffer
    }

    /// The message, or `nil` if the bytes are not a message of a known version.
    package static func decode(_ encoded: ByteBuffer) -> BufferedMessage? {
        var buffer = encoded
        guard let version = readInteger(from: &buffer, terminator: ";"), (1...3).contains(version),
            let serverId = readString(from: &buffer),
            let conversationId = readString(from: &buffer),
            let senderId = readString(from: &buffer),
            let senderDeviceId = readString(from: &buffer),
            let clientMessageId = readString(from: &buffer),
            let type = readString(from: &buffer),
            let body = readString(from: &buffer),
            let clientTimestamp = readInteger(from: &buffer, terminator: ";"),
            let acceptedAt = readInteger(from: &buffer, terminator: ";")
        else { return nil }
        var message = BufferedMessage(
            serverId: serverId, conversationId: conversationId, senderId: senderId, senderDeviceId: senderDeviceId,
            clientMessageId: clientMessageId, type: type, body: body, clientTimestamp: clientTimestamp, acceptedAt: acceptedAt)
        if version >= 2 {
            guard let replyTo = readOptionalString(from: &buffer), let threadRoot = readOptionalString(from: &buffer) else { return nil }
            message.replyTo = replyTo
            message.threadRoot = threadRoot
        }
        if version >= 3 {
            guard let json = readString(from: &buffer), let attachments = try? JSONDecoder().decode([Attachment].self, from: Data(json.utf8)),
                !attachments.isEmpty
            else { return nil }
            message.attachments = attachments
        }
        guard buffer.readableBytes == 0 else { return nil }
        return message
    }

    private static func writeOptionalString(_ text: String?, into buffer: inout ByteBuffer) {
        if let text {
            writeString(text, into: &buffer)
        } else {
            buffer.writeString("-1:")
        }
    }

    /// `.some(nil)` for an absent string (`-1:`), `nil` when the bytes are neither.
    private static func readOptionalString(from buffer: inout ByteBuffer) -> String?? {
        if buffer.readableBytesView.starts(with: "-1:".utf8) {
            buffer.moveReaderIndex(forwardBy: 3)
            return .some(nil)
        }
        return readString(from: &buffer).map { .some($0) }
    }

    private static func writeInteger(_ value: Int64, into buffer: inout ByteBuffer) {
        buffer.writeString(String(value))
        buffer.writeInteger(UInt8(ascii: ";"))
    }

    private static func writeString(_ text: String, into buffer: inout ByteBuffer) {
        buffer.writeString(String(text.utf8.count))
        buffer.writeInteger(UInt8(ascii: ":"))
        buffer.writeString(text)
    }

    private static func readInteger(from buffer: inout ByteBuffer, terminator: Unicode.Scalar) -> Int64? {
        let view = buffer.readableBytesView
        guard let end = view.firstIndex(of: UInt8(ascii: terminator)), end - view.startIndex <= 20,
            let value = Int64(String(decoding: view[view.startIndex..<end], as: UTF8.self))
        else { return nil }
        buffer.moveReaderIndex(to: end + 1)
        return value
    }

    private static func readString(from buffer: inout ByteBuffer) -> String? {
        guard let length = readInteger(from: &buffer, terminator: ":"), length >= 0, length <= buffer.readableBytes else { return nil }
        return buffer.readString(length: Int(length))
    }
}
