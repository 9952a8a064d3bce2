import NIOCore

/// Follows the bytes of one HTTP/1 request head as they arrive, to enforce ``ConnectionLimits`` before the HTTP
/// parser buffers anything: where the head ends (the blank line), and whether its request line, header section
/// or header count went past a limit. It only counts lines; the HTTP parser behind it judges the syntax.
struct ConnectionHeadScanner {
    /// What the bytes scanned so far amount to.
    enum Outcome: Equatable {
        /// The head goes on.
        case incomplete
        /// The head ended at this index of the last buffer (the byte after its blank line).
        case complete(endIndex: Int)
        /// The request line is longer than the limit.
        case requestLineTooLong
        /// The header section is larger than the limit.
        case headersTooLarge
        /// There are more header fields than the limit.
        case tooManyHeaders
    }

    private enum Section {
        /// Empty lines before the request line (a server ignores them).
        case leadingLines
        case requestLine
        case headers
    }

    let maxRequestLineBytes: Int
    let maxHeaderBytes: Int
    let maxHeaderCount: Int
    private var section = Section.leadingLines
    /// Bytes of the current line, its CR and LF excluded.
    private var lineBytes = 0
    /// Bytes of the header section so far, line ends included.
    private var headerBytes = 0
    private var headerCount = 0

    init(limits: ConnectionLimits) {
        self.maxRequestLineBytes = limits.maxRequestLineBytes
        self.maxHeaderBytes = limits.maxHeaderBytes
        self.maxHeaderCount = limits.maxHeaderCount
    }

    /// Scans the next bytes of the head.
    mutating func scan(_ buffer: ByteBuffer) -> Outcome {
        buffer.withUnsafeReadableBytes { bytes in
            for (index, byte) in bytes.enumerated() {
                if let outcome = scan(byte, at: index) { return outcome }
            }
            return .incomplete
        }
    }

    /// The outcome when this byte ends the head or breaks a limit, else `nil`.
    private mutating func scan(_ byte: UInt8, at index: Int) -> Outcome? {
        let isLineEnd = byte == UInt8(ascii: "\n")
        let countsInLine = !isLineEnd && byte != UInt8(ascii: "\r")
        switch section {
        case .leadingLines:
            guard countsInLine else { return nil }
            section = .requestLine
            lineBytes = 1
        case .requestLine:
            if isLineEnd {
                section = .headers
                lineBytes = 0
            } else if countsInLine {
                lineBytes += 1
                if lineBytes > maxRequestLineBytes { return .requestLineTooLong }
            }
        case .headers:
            headerBytes += 1
            if isLineEnd {
                if lineBytes == 0 { return .complete(endIndex: index + 1) }
                headerCount += 1
                lineBytes = 0
                if headerCount > maxHeaderCount { return .tooManyHeaders }
            } else if countsInLine {
                lineBytes += 1
            }
            if headerBytes > maxHeaderBytes { return .headersTooLarge }
        }
        return nil
    }
}
