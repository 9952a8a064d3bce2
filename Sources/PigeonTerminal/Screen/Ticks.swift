import Foundation
import PigeonKit
import PigeonProtocol

/// The WhatsApp-style ticks of the status table of docs/ARCHITECTURE.md, as a terminal shows them.
public enum Ticks {
    /// The frames of the "sending" spinner (one cell each).
    public static let spinner = ["⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"]

    /// ⏰ pending, a spinner while sending, ✓ sent and stored, ✓✓ delivered and read (read is blue), ⚠️ failed.
    public static func symbol(for status: MessageStatus, frame: Int = 0) -> String {
        switch status {
        case .pending: "⏰"
        case .sending: spinner[((frame % spinner.count) + spinner.count) % spinner.count]
        case .sent, .stored: "✓"
        case .delivered, .read: "✓✓"
        case .failed: "⚠️"
        }
    }

    public static func style(for status: MessageStatus) -> TextStyle {
        switch status {
        case .pending, .sending: TextStyle(foreground: .gray)
        case .sent, .stored, .delivered: TextStyle(foreground: .gray)
        case .read: TextStyle(foreground: .brightBlue, bold: true)
        case .failed: TextStyle(foreground: .red, bold: true)
        }
    }

    /// The tick of one of the viewer's messages. In a group with more than one other member, a stored message
    /// shows how many have it: `✓✓ 3/5` (delivered to 3 of 5), `✓✓ read 2/5` once delivered to all, and blue `✓✓`
    /// once read by all (``PigeonMessage/recipients``).
    public static func tick(for message: PigeonMessage, inGroup: Bool, frame: Int = 0) -> (String, TextStyle) {
        let plain = (symbol(for: message.status, frame: frame), style(for: message.status))
        guard inGroup, let counts = message.recipients, counts.members > 1, [.sent, .stored, .delivered].contains(message.status) else {
            return plain
        }
        let read = counts.read > 0 ? " read \(counts.read)/\(counts.members)" : ""
        if counts.delivered == 0 { return plain }
        if counts.delivered < counts.members { return ("✓✓ \(counts.delivered)/\(counts.members)" + read, TextStyle(foreground: .gray)) }
        return ("✓✓" + read, TextStyle(foreground: .gray))
    }

    /// What a status is called, for people ("sent", "delivered", …) and in JSON (the wire names).
    public static func label(for status: MessageStatus) -> String {
        switch status {
        case .pending: "waiting to send"
        case .sending: "sending"
        case .sent: "sent"
        case .stored: "sent"
        case .delivered: "delivered"
        case .read: "read"
        case .failed: "not sent"
        }
    }
}

/// How messages and conversations are written out, shared by `ls`, `chat` and the demo.
public enum MessageFormat {
    /// The time a message is shown with: the sender's clock for one's own, the server's for the others'.
    public static func timestamp(of message: PigeonMessage) -> Int64 {
        message.isOutgoing ? message.clientTimestamp : (message.storedAt ?? message.acceptedAt ?? message.clientTimestamp)
    }

    /// "HH:mm" in `timeZone`.
    public static func clock(_ milliseconds: Int64, timeZone: TimeZone) -> String {
        let components = calendar(timeZone).dateComponents([.hour, .minute], from: date(milliseconds))
        return String(format: "%02d:%02d", components.hour ?? 0, components.minute ?? 0)
    }

    /// The day a message belongs to, e.g. "Sat 21 Nov 2026".
    public static func day(_ milliseconds: Int64, timeZone: TimeZone) -> String {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = timeZone
        formatter.dateFormat = "EEE d MMM yyyy"
        return formatter.string(from: date(milliseconds))
    }

    static func dayKey(_ milliseconds: Int64, timeZone: TimeZone) -> DateComponents {
        calendar(timeZone).dateComponents([.year, .month, .day], from: date(milliseconds))
    }

    /// The name a conversation is shown with: its name, else the other members, else "just you".
    public static func title(of conversation: PigeonConversation, me: String) -> String {
        if let name = conversation.name, !name.isEmpty { return TextWidth.sanitized(name) }
        let others = conversation.members.map(\.userId).filter { $0 != me }
        return others.isEmpty ? "just you" : others.joined(separator: ", ")
    }

    /// An invitation as one line: "carol invited you to Crew" (the sender may be unknown for a moment after a
    /// catch-up: "You are invited to Crew").
    public static func invitation(_ conversation: PigeonConversation, me: String) -> String {
        let title = title(of: conversation, me: me)
        guard let sender = conversation.invitedBy else { return "You are invited to \(title)" }
        return "\(TextWidth.sanitized(sender)) invited you to \(title)"
    }

    /// What a deleted message shows in its place.
    public static let deletedText = "message deleted"
    /// What a quote of a message the reader may not read shows (API.md: its `replyPreview` is `unavailable`).
    public static let unavailableText = "message unavailable"
    /// What follows an edited message's text.
    public static let editedMark = "(edited)"

    /// A member change as a line of the conversation: "alice added carol", "bob left", "alice renamed the group to
    /// Trip"; the viewer is "you".
    public static func describe(_ change: MembersChange, me: String) -> String {
        change.sentence(viewer: me)
    }

    /// A message in one line of text, for a list: a member change described, a deleted message as such, the
    /// attachments after the text.
    public static func preview(of message: PigeonMessage, me: String) -> String {
        switch message.kind {
        case .membersChange(let change): return describe(change, me: me)
        case .edit(_, let body): return "edit: \(body)"
        case .delete: return "deletion"
        case .message, .unknownServerType:
            guard message.deletedAt == nil else { return deletedText }
            return ([message.body].filter { !$0.isEmpty } + message.attachments.map(label(of:))).joined(separator: " ")
        }
    }

    /// An attachment as a message shows it: "📎 photo.jpg (1.2 MB)".
    public static func label(of attachment: PigeonAttachment) -> String {
        "📎 \(TextWidth.sanitized(attachment.name)) (\(size(attachment.size)))"
    }

    /// A size for people, in decimal units: "532 B", "12.3 kB", "1.2 MB", "250 MB".
    public static func size(_ bytes: Int64) -> String {
        guard bytes >= 1000 else { return "\(max(0, bytes)) B" }
        // One decimal below 100, none above; compared as shown: 999.96 kB is "1.0 MB", not "1000 kB".
        func shown(_ value: Double) -> Double { value < 100 ? (value * 10).rounded() / 10 : value.rounded() }
        var value = Double(bytes) / 1000
        var unit = 0
        let units = ["kB", "MB", "GB", "TB"]
        while unit < units.count - 1, shown(value) >= 1000 {
            value /= 1000
            unit += 1
        }
        let rounded = shown(value)
        return String(format: rounded < 100 ? "%.1f" : "%.0f", rounded) + " " + units[unit]
    }

    /// Who sent a message, as the viewer sees it.
    public static func sender(of message: PigeonMessage, me: String) -> String {
        message.senderId == me ? "you" : message.senderId
    }

    private static func date(_ milliseconds: Int64) -> Date {
        Date(timeIntervalSince1970: Double(milliseconds) / 1000)
    }

    private static func calendar(_ timeZone: TimeZone) -> Calendar {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = timeZone
        return calendar
    }
}
