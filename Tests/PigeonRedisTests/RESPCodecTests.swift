import NIOCore
import NIOEmbedded
import NIOTestUtils
import Testing

@testable import PigeonRedis

@Suite struct RESPCodecTests {
    private func bulk(_ text: String) -> RESPValue { .bulkString(ByteBuffer(string: text)) }

    @Test func decodesEveryTypeWhateverTheChunking() throws {
        let pairs: [(String, [RESPValue])] = [
            ("+OK\r\n", [.simpleString("OK")]),
            ("+\r\n", [.simpleString("")]),
            ("-ERR unknown command 'FOO'\r\n", [.error("ERR unknown command 'FOO'")]),
            (":0\r\n", [.integer(0)]),
            (":42\r\n", [.integer(42)]),
            (":-17\r\n", [.integer(-17)]),
            (":9223372036854775807\r\n", [.integer(.max)]),
            (":-9223372036854775808\r\n", [.integer(.min)]),
            ("$5\r\nhello\r\n", [bulk("hello")]),
            ("$0\r\n\r\n", [bulk("")]),
            ("$-1\r\n", [.bulkString(nil)]),
            ("$4\r\na\r\nb\r\n", [bulk("a\r\nb")]),
            ("$5\r\nété\r\n", [bulk("été")]),
            ("*-1\r\n", [.array(nil)]),
            ("*0\r\n", [.array([])]),
            ("*2\r\n$3\r\nfoo\r\n:1\r\n", [.array([bulk("foo"), .integer(1)])]),
            (
                "*3\r\n*2\r\n+a\r\n*1\r\n$-1\r\n*0\r\n*-1\r\n",
                [.array([.array([.simpleString("a"), .array([.bulkString(nil)])]), .array([]), .array(nil)])]
            ),
            (
                "*2\r\n-WRONGTYPE bad\r\n+QUEUED\r\n:1\r\n",
                [.array([.error("WRONGTYPE bad"), .simpleString("QUEUED")]), .integer(1)]
            ),
        ]
        try ByteToMessageDecoderVerifier.verifyDecoder(stringInputOutputPairs: pairs) { RESPDecoder() }
    }

    @Test func decodesANestedStreamReply() throws {
        // The shape of XREADGROUP: [[stream, [[id, [field, value]]]]].
        let input = "*1\r\n*2\r\n$3\r\nkey\r\n*2\r\n*2\r\n$3\r\n1-0\r\n*2\r\n$1\r\nm\r\n$2\r\nhi\r\n*2\r\n$3\r\n2-0\r\n*2\r\n$1\r\nm\r\n$0\r\n\r\n"
        let expected = RESPValue.array([
            .array([
                bulk("key"),
                .array([
                    .array([bulk("1-0"), .array([bulk("m"), bulk("hi")])]),
                    .array([bulk("2-0"), .array([bulk("m"), bulk("")])]),
                ]),
            ])
        ])
        try ByteToMessageDecoderVerifier.verifyDecoder(stringInputOutputPairs: [(input, [expected])]) { RESPDecoder() }
    }

    @Test func decodesAFiveMegabyteBulkStringArrivingInChunks() throws {
        let size = 5 * 1024 * 1024
        // A prime-length pattern, so that no chunk boundary lines up with it.
        let pattern = (0..<251).map { UInt8(truncatingIfNeeded: $0 &* 31) }
        var payload = ByteBuffer()
        payload.reserveCapacity(size)
        while payload.readableBytes < size { payload.writeBytes(pattern.prefix(size - payload.readableBytes)) }
        var input = ByteBuffer(string: "*2\r\n$\(size)\r\n")
        input.writeImmutableBuffer(payload)
        input.writeString("\r\n:7\r\n")

        let channel = EmbeddedChannel(handler: ByteToMessageHandler(RESPDecoder()))
        defer { _ = try? channel.finish() }
        // Uneven chunks, so that boundaries fall in the length line, the payload and the CRLFs.
        var offset = 0
        var chunkSize = 1
        while offset < input.readableBytes {
            let length = min(chunkSize, input.readableBytes - offset)
            try channel.writeInbound(input.getSlice(at: input.readerIndex + offset, length: length)!)
            offset += length
            chunkSize = chunkSize < 3 ? chunkSize + 1 : 65_537
            if offset < input.readableBytes { #expect(try channel.readInbound(as: RESPValue.self) == nil) }
        }
        let value = try #require(try channel.readInbound(as: RESPValue.self))
        #expect(value == .array([.bulkString(payload), .integer(7)]))
    }

    @Test(arguments: [
        ("!5\r\n", "unexpected type byte"),
        ("$abc\r\nxyz\r\n", "invalid bulk string length"),
        ("$-2\r\n", "invalid bulk string length"),
        ("$3\r\nabcd\r\n", "not followed by CRLF"),
        (":12a\r\n", "invalid integer"),
        (":\r\n", "invalid integer"),
        (":99999999999999999999\r\n", "invalid integer"),
        ("*x\r\n", "invalid array length"),
        ("*-5\r\n", "invalid array length"),
        ("+OK\rX\n", "CR not followed by LF"),
        ("\r\n", "unexpected type byte"),
    ])
    func rejectsMalformedInput(input: String, reason: String) throws {
        var decoder = RESPDecoder()
        var buffer = ByteBuffer(string: input)
        #expect {
            while try decoder.decode(buffer: &buffer) != nil {}
        } throws: { error in
            guard case .protocolError(let message) = error as? RedisError else { return false }
            return message.contains(reason)
        }
    }

    @Test func rejectsBulkStringsAndLinesOverTheLimits() throws {
        var decoder = RESPDecoder(maximumBulkLength: 10, maximumLineLength: 16)
        var bulk = ByteBuffer(string: "$11\r\n")
        #expect(throws: RedisError.self) { try decoder.decode(buffer: &bulk) }
        var decoder2 = RESPDecoder(maximumBulkLength: 10, maximumLineLength: 16)
        var line = ByteBuffer(string: "+" + String(repeating: "x", count: 40))
        #expect(throws: RedisError.self) { try decoder2.decode(buffer: &line) }
    }

    @Test func aMalformedReplyFailsTheDecoder() throws {
        let channel = EmbeddedChannel(handler: ByteToMessageHandler(RESPDecoder()))
        // Rejected at the type byte, without waiting for the end of the line.
        #expect(throws: RedisError.protocolError("unexpected type byte 0x3f in \"?garbage\"")) {
            try channel.writeInbound(ByteBuffer(string: "?garbage"))
        }
        _ = try? channel.finish()
    }

    @Test func encodesCommandsExactly() {
        var command = RESPCommand("SET", "key", "vålue")
        command.append(Int64(-42))
        command.append(0)
        command.append(ByteBuffer(bytes: [0, 13, 10]))
        command.append([UInt8]([0xFF]))
        command.append("sub-string".dropFirst(4))
        command.append("")
        var buffer = ByteBuffer()
        command.encode(into: &buffer)
        var want = ByteBuffer(string: "*9\r\n$3\r\nSET\r\n$3\r\nkey\r\n$6\r\nvålue\r\n$3\r\n-42\r\n$1\r\n0\r\n$3\r\n")
        want.writeBytes([0, 13, 10])
        want.writeString("\r\n$1\r\n")
        want.writeBytes([0xFF])
        want.writeString("\r\n$6\r\nstring\r\n$0\r\n\r\n")
        #expect(buffer == want)
        #expect(command.argumentCount == 9)
        #expect(command.encodedSize == want.readableBytes)
    }

    @Test func encodesIntegersAtTheExtremes() {
        for value: Int64 in [0, 9, 10, -1, -10, 1_000_000, .max, .min] {
            var buffer = ByteBuffer()
            RESPCommand("X", value).encode(into: &buffer)
            let text = "\(value)"
            #expect(String(buffer: buffer) == "*2\r\n$1\r\nX\r\n$\(text.utf8.count)\r\n\(text)\r\n")
        }
    }

    @Test func anEncodedCommandDecodesBackToItsArguments() throws {
        let command = RESPCommand("EVALSHA", "abc", 2, "k1", "k2", "a\"b\u{1F600}")
        var buffer = ByteBuffer()
        command.encode(into: &buffer)
        var decoder = RESPDecoder()
        let value = try #require(try decoder.decode(buffer: &buffer))
        #expect(value == .array(["EVALSHA", "abc", "2", "k1", "k2", "a\"b\u{1F600}"].map(bulk)))
        #expect(command.description == "EVALSHA abc 2 k1 k2 a\"b\u{1F600}")
    }

    @Test func valueConveniences() {
        #expect(RESPValue.simpleString("OK").string == "OK")
        #expect(bulk("12").string == "12")
        #expect(bulk("12").int == 12)
        #expect(RESPValue.integer(-3).int == -3)
        #expect(RESPValue.integer(-3).string == nil)
        #expect(RESPValue.bulkString(nil).isNull)
        #expect(RESPValue.array(nil).isNull)
        #expect(!RESPValue.array([]).isNull)
        #expect(RESPValue.array([.integer(1)]).array == [.integer(1)])
        #expect(RESPValue.bulkString(nil).string == nil)
    }

    @Test func errorCodes() {
        #expect(RedisError.server("NOSCRIPT No matching script. Please use EVAL.").code == "NOSCRIPT")
        #expect(RedisError.server("WRONGTYPE Operation against a key").code == "WRONGTYPE")
        #expect(RedisError.connectionClosed.code == nil)
    }

    @Test func sha1MatchesKnownDigests() {
        #expect(SHA1.hexDigest("".utf8) == "da39a3ee5e6b4b0d3255bfef95601890afd80709")
        #expect(SHA1.hexDigest("abc".utf8) == "a9993e364706816aba3e25717850c26c9cd0d89d")
        #expect(
            SHA1.hexDigest("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq".utf8)
                == "84983e441c3bd26ebaae4aa1f95129e5e54670f1")
        #expect(SHA1.hexDigest(Array(repeating: UInt8(ascii: "a"), count: 1_000_000)) == "34aa973cd4c4daa4f61eeb2bdbad27316534016f")
    }
}

@Suite struct RedisConfigurationTests {
    @Test func parsesAFullURL() throws {
        let configuration = try RedisConfiguration(url: "redis://user:p%40ss@cache.example:6380/3?prefix=chat&partitions=32")
        #expect(configuration.host == "cache.example")
        #expect(configuration.port == 6380)
        #expect(configuration.database == 3)
        #expect(configuration.username == "user")
        #expect(configuration.password == "p@ss")
        #expect(configuration.queryItems == ["prefix": "chat", "partitions": "32"])
        #expect(configuration.description == "redis://cache.example:6380/3")
    }

    @Test func defaultsAndShortForms() throws {
        let plain = try RedisConfiguration(url: "redis://localhost")
        #expect(plain.host == "localhost")
        #expect(plain.port == 6379)
        #expect(plain.database == 0)
        #expect(plain.username == nil)
        #expect(plain.password == nil)
        let passwordOnly = try RedisConfiguration(url: "redis://:secret@127.0.0.1:7000/")
        #expect(passwordOnly.username == nil)
        #expect(passwordOnly.password == "secret")
        #expect(passwordOnly.port == 7000)
        let ipv6 = try RedisConfiguration(url: "redis://[::1]:6390/2")
        #expect(ipv6.host == "::1")
        #expect(ipv6.port == 6390)
        #expect(ipv6.database == 2)
    }

    @Test(arguments: [
        ("http://localhost", "expected redis://"),
        ("rediss://localhost", "TLS"),
        ("redis://", "missing host"),
        ("redis://localhost:0", "port"),
        ("redis://localhost:99999", "port"),
        ("redis://localhost:abc", "port"),
        ("redis://localhost/x", "database"),
        ("redis://localhost/-1", "database"),
        ("redis://u:%zz@localhost", "percent"),
        ("redis://[::1", "unclosed"),
    ])
    func rejectsInvalidURLs(url: String, reason: String) {
        #expect {
            _ = try RedisConfiguration(url: url)
        } throws: { error in
            guard case .invalidURL(let message) = error as? RedisError else { return false }
            return message.contains(reason)
        }
    }
}
