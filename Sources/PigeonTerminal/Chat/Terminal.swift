import Foundation

#if canImport(Glibc)
import Glibc
private let systemWrite = Glibc.write
#elseif canImport(Darwin)
import Darwin
private let systemWrite = Darwin.write
#endif

/// The terminal's settings before full-screen mode, for the signal handler (set once, before the handler is installed).
nonisolated(unsafe) private var settingsToRestore = termios()

/// The controlling terminal in full-screen mode: raw input (keys arrive as bytes, Ctrl-C included), the alternate
/// screen (what was on the terminal comes back on exit), and its size.
package final class Terminal: Sendable {
    private let original: termios

    /// Fails unless stdin and stdout are a terminal.
    package init() throws {
        guard isatty(STDIN_FILENO) == 1, isatty(STDOUT_FILENO) == 1 else {
            throw CLIError("this needs a terminal (stdin and stdout); scripts use `pigeon ls`, `send` and `sync`")
        }
        var settings = termios()
        guard tcgetattr(STDIN_FILENO, &settings) == 0 else { throw CLIError("cannot read the terminal's settings") }
        original = settings
    }

    package func enterFullScreen() {
        var raw = original
        cfmakeraw(&raw)
        tcsetattr(STDIN_FILENO, TCSAFLUSH, &raw)
        Self.write("\u{1B}[?1049h\u{1B}[H\u{1B}[2J")
        // Killed or hung up: give the terminal back as it was before exiting.
        settingsToRestore = original
        for signalNumber in [SIGTERM, SIGHUP] {
            signal(signalNumber) { signalNumber in
                let reset = "\u{1B}[0m\u{1B}[?25h\u{1B}[?1049l"
                _ = reset.withCString { systemWrite(STDOUT_FILENO, $0, strlen($0)) }
                tcsetattr(STDIN_FILENO, TCSAFLUSH, &settingsToRestore)
                _exit(128 + signalNumber)
            }
        }
    }

    package func restore() {
        Self.write("\u{1B}[0m\u{1B}[?25h\u{1B}[?1049l")
        var settings = original
        tcsetattr(STDIN_FILENO, TCSAFLUSH, &settings)
    }

    /// Rows and columns (24 × 80 when the terminal does not say).
    package var size: (rows: Int, columns: Int) {
        var size = winsize()
        guard ioctl(STDOUT_FILENO, UInt(TIOCGWINSZ), &size) == 0, size.ws_row > 0, size.ws_col > 0 else { return (24, 80) }
        return (Int(size.ws_row), Int(size.ws_col))
    }

    /// Draws `lines` over the whole screen and puts the cursor at (`cursorRow`, `cursorColumn`), in one write.
    package func draw(_ lines: [StyledLine], cursorRow: Int?, cursorColumn: Int, colors: Bool = true) {
        var out = "\u{1B}[?25l\u{1B}[H"
        for (index, line) in lines.enumerated() {
            out += line.ansi(colors: colors) + "\u{1B}[K"
            if index < lines.count - 1 { out += "\r\n" }
        }
        out += "\u{1B}[J"
        if let cursorRow {
            out += "\u{1B}[\(cursorRow + 1);\(cursorColumn + 1)H\u{1B}[?25h"
        }
        Self.write(out)
    }

    /// The bytes typed, read by a thread of their own; ends at end of input.
    func input() -> AsyncStream<[UInt8]> {
        let (stream, continuation) = AsyncStream<[UInt8]>.makeStream()
        let thread = Thread {
            var buffer = [UInt8](repeating: 0, count: 1024)
            while true {
                let count = read(STDIN_FILENO, &buffer, buffer.count)
                if count < 0, errno == EINTR { continue }
                guard count > 0 else { break }
                if case .terminated = continuation.yield(Array(buffer[0..<count])) { break }
            }
            continuation.finish()
        }
        thread.start()
        return stream
    }

    static func write(_ text: String) {
        var bytes = Array(text.utf8)[...]
        while !bytes.isEmpty {
            let written = bytes.withUnsafeBytes { systemWrite(STDOUT_FILENO, $0.baseAddress, $0.count) }
            if written < 0 {
                if errno == EINTR { continue }
                return
            }
            bytes = bytes.dropFirst(written)
        }
    }
}
