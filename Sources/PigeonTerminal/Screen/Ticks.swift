import Foundation
import PigeonKit
import PigeonProtocol

/// The WhatsApp-style ticks of DESIGN.md's status table, as a terminal shows them.
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
