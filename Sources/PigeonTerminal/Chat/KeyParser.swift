/// A key press, decoded from what a terminal in raw mode sends.
public enum Key: Sendable, Equatable {
    case text(String)
    case enter, backspace, delete, tab, escape
    case up, down, left, right, home, end, pageUp, pageDown
    /// Ctrl + a letter ("a"…"z"), other than those above (Ctrl-H is backspace, Ctrl-I tab, Ctrl-M enter).
    case control(Character)
}

/// Turns the bytes read from a raw-mode terminal into keys: UTF-8 text (a character split across reads is put
/// back together), control keys, and the escape sequences of xterm-compatible terminals (CSI and SS3). A lone
/// ESC at the end of a read is the Escape key. Pure.
public struct KeyParser: Sendable {
    private var pending: [UInt8] = []

    public init() {}

    public mutating func feed(_ bytes: [UInt8]) -> [Key] {
        pending += bytes
        var keys: [Key] = []
        var text: [UInt8] = []
        var index = 0
        func flushText() {
            if !text.isEmpty {
                keys.append(.text(String(decoding: text, as: UTF8.self)))
                text.removeAll()
            }
        }
        while index < pending.count {
            let byte = pending[index]
            switch byte {
            case 0x1B:
                flushText()
                guard let (key, length) = Self.escapeSequence(pending[index...]) else {
                    // Incomplete sequence: keep it for the next read, unless nothing follows the ESC at all.
                    if index + 1 == pending.count {
                        keys.append(.escape)
                        index += 1
                        continue
                    }
                    pending.removeFirst(index)
                    return keys
                }
                if let key { keys.append(key) }
                index += length
            case 0x0D, 0x0A:
                flushText()
                keys.append(.enter)
                index += 1
            case 0x7F, 0x08:
                flushText()
                keys.append(.backspace)
                index += 1
            case 0x09:
                flushText()
                keys.append(.tab)
                index += 1
            case 0x01...0x1A:
                flushText()
                keys.append(.control(Character(UnicodeScalar(byte + 0x60))))
                index += 1
            case 0x00, 0x1C...0x1F:
                index += 1
            default:
                let length = Self.utf8Length(byte)
                guard index + length <= pending.count else {
                    flushText()
                    pending.removeFirst(index)
                    return keys
                }
                text += pending[index..<index + length]
                index += length
            }
        }
        flushText()
        pending.removeAll()
        return keys
    }

    private static func utf8Length(_ lead: UInt8) -> Int {
        switch lead {
        case 0xF0...0xF7: 4
        case 0xE0...0xEF: 3
        case 0xC0...0xDF: 2
        default: 1
        }
    }

    /// The key an escape sequence at the start of `bytes` stands for (nil key: a sequence we ignore) and its
    /// length; nil when the sequence is not complete yet.
    private static func escapeSequence(_ bytes: ArraySlice<UInt8>) -> (Key?, Int)? {
        let start = bytes.startIndex
        guard bytes.count >= 2 else { return nil }
        let introducer = bytes[start + 1]
        switch introducer {
        case UInt8(ascii: "["):
            // CSI: parameters 0x30–0x3F, intermediates 0x20–0x2F, final 0x40–0x7E.
            var index = start + 2
            while index < bytes.endIndex, (0x20...0x3F).contains(bytes[index]) { index += 1 }
            guard index < bytes.endIndex else { return nil }
            let final = bytes[index]
            let parameters = String(decoding: bytes[(start + 2)..<index], as: UTF8.self)
            let length = index - start + 1
            switch final {
            case UInt8(ascii: "A"): return (.up, length)
            case UInt8(ascii: "B"): return (.down, length)
            case UInt8(ascii: "C"): return (.right, length)
            case UInt8(ascii: "D"): return (.left, length)
            case UInt8(ascii: "H"): return (.home, length)
            case UInt8(ascii: "F"): return (.end, length)
            case UInt8(ascii: "~"):
                switch parameters.split(separator: ";").first {
                case "1", "7": return (.home, length)
                case "4", "8": return (.end, length)
                case "3": return (.delete, length)
                case "5": return (.pageUp, length)
                case "6": return (.pageDown, length)
                default: return (nil, length)
                }
            default:
                return (nil, length)
            }
        case UInt8(ascii: "O"):
            guard bytes.count >= 3 else { return nil }
            switch bytes[start + 2] {
            case UInt8(ascii: "A"): return (.up, 3)
            case UInt8(ascii: "B"): return (.down, 3)
            case UInt8(ascii: "C"): return (.right, 3)
            case UInt8(ascii: "D"): return (.left, 3)
            case UInt8(ascii: "H"): return (.home, 3)
            case UInt8(ascii: "F"): return (.end, 3)
            default: return (nil, 3)
            }
        case 0x1B:
            return (.escape, 1)
        default:
            // Alt + key: treat as Escape followed by the key.
            return (.escape, 1)
        }
    }
}
