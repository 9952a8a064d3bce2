import Foundation
import PigeonProtocol

/// How ``PigeonClient/export(conversation:format:timeZone:)`` writes a conversation.
public enum ExportFormat: String, Sendable, CaseIterable {
    /// `{"conversation": …, "messages": [...]}`, for machines (UTF-8, keys sorted, times in milliseconds since the epoch).
    case json
    /// A transcript for people: a line per message with its time, #seq and sender, quotes, files and reactions under it.
    case text
}

extension PigeonClient {
    /// Every message of a conversation on this device, in seq order (those not sent yet last, as they wait), as it now
    /// reads: edits applied, deletions as "message deleted", member changes in words, each message's reactions, the
    /// message it replies to, its thread and its files' names. Read from the local database only (sync first for the
    /// newest); edits and deletions are not listed apart, they changed the messages they name.
    ///
    /// - Parameter timeZone: the clock the text transcript's times are written in (JSON has milliseconds).
    /// - Throws: ``PigeonClientError`` `unknownConversation` when the conversation is not on this device.
    public func export(conversation conversationId: String, format: ExportFormat, timeZone: TimeZone = .current) throws -> Data {
        guard let conversation = try conversation(id: conversationId) else {
            throw PigeonClientError(.unknownConversation, "conversation \(conversationId) is not on this device")
        }
        let entries = try exportedMessages(of: conversation.id).map { ExportedMessage($0, me: userId) }
        switch format {
        case .json:
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
            return try encoder.encode(ExportDocument(conversation: ExportedConversation(conversation), exportedBy: userId, messages: entries))
        case .text:
            return Data(ExportTranscript(conversation: conversation, me: userId, timeZone: timeZone).render(entries).utf8)
        }
    }

    /// Every message of the conversation on this device, oldest first, paged back from the newest.
    private func exportedMessages(of conversationId: String) throws -> [PigeonMessage] {
        var page = try messages(in: conversationId, limit: 500)
        var all = page.messages
        while page.hasMore, let oldest = all.lazy.compactMap(\.seq).first {
            page = try messages(in: conversationId, before: oldest, limit: 500)
            all = page.messages + all
        }
        return all.filter { message in
            switch message.kind {
            case .edit, .delete: false
            case .message, .membersChange, .unknownServerType: true
            }
        }
    }
}

extension MembersChange {
    /// The change as a line of the conversation: "alice added carol", "bob left", "alice renamed the group to Trip";
    /// `viewer` is "you".
    public func sentence(viewer: String) -> String {
        func person(_ user: String) -> String { user == viewer ? "you" : user }
        func names(_ users: [String]) -> String {
            let all = users.map(person)
            guard all.count > 1 else { return all.first ?? "nobody" }
            return all.dropLast().joined(separator: ", ") + " and " + all.last!
        }
        let actor = person(by)
        switch action {
        case .added: return "\(actor) added \(names(userIds))" + (role == .admin ? " as admin" : "")
        case .removed: return "\(actor) removed \(names(userIds))"
        case .left: return "\(names(userIds)) left"
        case .role:
            if role == .owner { return "\(names(userIds)) \(userIds == [viewer] ? "are" : "is") now the owner" }
            return "\(actor) made \(names(userIds)) \(role == .admin ? "an admin" : "a member")"
        case .renamed:
            guard let newName = self.name else { return "\(actor) removed the group's name" }
            return "\(actor) renamed the group to \(newName)"
        }
    }
}

/// The JSON export's document.
private struct ExportDocument: Encodable {
    var format = "pigeon.export.v1"
    var conversation: ExportedConversation
    var exportedBy: String
    var exportedAt = Int64(Date().timeIntervalSince1970 * 1000)
    var messages: [ExportedMessage]
}

private struct ExportedConversation: Encodable {
    var id: String
    var kind: String
    var name: String?
    var createdAt: Int64
    var members: [String]

    init(_ conversation: PigeonConversation) {
        id = conversation.id
        kind = conversation.kind.rawValue
        name = conversation.name
        createdAt = conversation.createdAt
        members = conversation.members.map(\.userId).sorted()
    }
}

/// One message as exported: what it reads now.
private struct ExportedMessage: Encodable {
    struct Quote: Encodable {
        var serverId: String?
        var senderId: String?
        var text: String?
    }

    struct File: Encodable {
        var name: String
        var size: Int64
        var contentType: String
    }

    struct Reactions: Encodable {
        var key: String
        var count: Int
    }

    /// `nil` until the server stored it.
    var seq: Int64?
    var serverId: String?
    var senderId: String
    var type: String
    /// The server's time once stored, else the sender's clock.
    var time: Int64
    /// The text as it now reads; "message deleted" for a deleted one; the member change in words.
    var text: String
    var edited: Bool
    var deleted: Bool
    /// For the user's own messages: the tick's name (`pending` … `read`, `failed`).
    var status: String?
    var replyTo: Quote?
    /// The thread's root, for a reply in a thread.
    var threadRoot: String?
    var replies: Int?
    var files: [File]
    var reactions: [Reactions]
    var isMemberChange: Bool

    init(_ message: PigeonMessage, me: String) {
        seq = message.seq
        serverId = message.serverId
        senderId = message.senderId
        type = message.type
        time = message.storedAt ?? message.acceptedAt ?? message.clientTimestamp
        deleted = message.deletedAt != nil
        edited = message.editedAt != nil && !deleted
        isMemberChange = false
        switch message.kind {
        case .membersChange(let change):
            text = change.sentence(viewer: me)
            isMemberChange = true
        case .message, .unknownServerType, .edit, .delete:
            text = deleted ? "message deleted" : message.body
        }
        status = message.isOutgoing && !isMemberChange ? message.status.rawValue : nil
        if let preview = message.replyPreview {
            replyTo = Quote(serverId: preview.serverId, senderId: preview.senderId, text: preview.unavailable ? "message unavailable" : preview.deleted ? "message deleted" : preview.body)
        } else if let reference = message.replyTo {
            replyTo = Quote(serverId: reference.serverId, senderId: nil, text: nil)
        }
        threadRoot = message.threadRoot?.serverId
        replies = message.thread?.replyCount
        files = message.attachments.map { File(name: $0.name, size: $0.size, contentType: $0.contentType) }
        reactions = message.reactions.map { Reactions(key: $0.key, count: $0.count) }
    }
}

/// The text export: a header, then a line per message.
private struct ExportTranscript {
    let conversation: PigeonConversation
    let me: String
    let timeZone: TimeZone

    func render(_ messages: [ExportedMessage]) -> String {
        let title = conversation.name ?? conversation.members.map(\.userId).filter { $0 != me }.sorted().joined(separator: ", ")
        var lines = [
            "\(title.isEmpty ? "Conversation" : title) (\(conversation.id))",
            "\(conversation.members.count) members: \(conversation.members.map(\.userId).sorted().joined(separator: ", "))",
            "Exported by \(me) at \(clock(Int64(Date().timeIntervalSince1970 * 1000))), \(messages.count) messages",
            "",
        ]
        for message in messages {
            let seq = message.seq.map { "#\($0)" } ?? "(not sent yet)"
            if message.isMemberChange {
                lines.append("[\(clock(message.time))] \(seq) · \(message.text)")
                continue
            }
            var line = "[\(clock(message.time))] \(seq) \(message.senderId): \(message.text)"
            if message.edited { line += " (edited)" }
            if let status = message.status { line += " [\(status)]" }
            lines.append(line)
            let indent = "    "
            if let quote = message.replyTo {
                lines.append(indent + "↪ replying to \(quote.senderId ?? "a message"): \(quote.text.map { "\"\($0)\"" } ?? quote.serverId ?? "")")
            }
            if let root = message.threadRoot { lines.append(indent + "in the thread of \(root)") }
            if let replies = message.replies, replies > 0 { lines.append(indent + "💬 \(replies) \(replies == 1 ? "reply" : "replies")") }
            for file in message.files { lines.append(indent + "📎 \(file.name) (\(file.contentType), \(file.size) bytes)") }
            if !message.reactions.isEmpty {
                lines.append(indent + message.reactions.map { "\($0.key) \($0.count)" }.joined(separator: "  "))
            }
        }
        return lines.joined(separator: "\n") + "\n"
    }

    /// "2026-11-27 14:05 +01:00": the minute, in `timeZone`, with its offset (one formatter for the whole transcript).
    private let formatter: DateFormatter

    init(conversation: PigeonConversation, me: String, timeZone: TimeZone) {
        self.conversation = conversation
        self.me = me
        self.timeZone = timeZone
        formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = timeZone
        formatter.dateFormat = "yyyy-MM-dd HH:mm xxx"
    }

    private func clock(_ milliseconds: Int64) -> String {
        formatter.string(from: Date(timeIntervalSince1970: Double(milliseconds) / 1000))
    }
}
