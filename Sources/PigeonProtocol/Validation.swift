/// The syntactic rules of the wire contract, shared by the server and clients so both refuse the same input.
public enum Validation {
    /// `userId`: 1–64 characters of `[A-Za-z0-9._@-]`.
    public static func isValidUserId(_ value: String) -> Bool {
        let utf8 = value.utf8
        guard (1...64).contains(utf8.count) else { return false }
        return utf8.allSatisfy { byte in
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "@"), UInt8(ascii: "-"):
                true
            default: false
            }
        }
    }

    /// Message `type`: 1–32 characters of `[a-z0-9._-]`.
    /// Whether `type` is one of the server's own message types (`pigeon.members`, `pigeon.edit`, `pigeon.delete`, and
    /// any later `pigeon.*`): the server writes them, a client sending one is refused (API.md 1.1).
    public static func isServerMessageType(_ type: String) -> Bool {
        type.hasPrefix("pigeon.")
    }

    public static func isValidMessageType(_ value: String) -> Bool {
        let utf8 = value.utf8
        guard (1...32).contains(utf8.count) else { return false }
        return utf8.allSatisfy { byte in
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "-"):
                true
            default: false
            }
        }
    }

    /// Whether free text (a message body, a conversation or device name) can be stored: no U+0000, which
    /// PostgreSQL's text type cannot hold (refused by every backend, so all behave alike).
    public static func isStorableText(_ value: String) -> Bool {
        !value.utf8.contains(0)
    }

    /// The lowercase form of a UUID string, or `nil` if it is not one.
    public static func canonicalUUID(_ value: String) -> String? {
        let utf8 = Array(value.utf8)
        guard utf8.count == 36 else { return nil }
        var out = [UInt8]()
        out.reserveCapacity(36)
        for (index, byte) in utf8.enumerated() {
            switch index {
            case 8, 13, 18, 23:
                guard byte == UInt8(ascii: "-") else { return nil }
                out.append(byte)
            default:
                switch byte {
                case UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "a")...UInt8(ascii: "f"): out.append(byte)
                case UInt8(ascii: "A")...UInt8(ascii: "F"): out.append(byte + 32)
                default: return nil
                }
            }
        }
        return String(decoding: out, as: UTF8.self)
    }
}
