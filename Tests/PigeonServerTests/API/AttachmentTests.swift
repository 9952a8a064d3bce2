import AsyncHTTPClient
import Crypto
import Foundation
import NIOCore
import NIOHTTP1
import PigeonProtocol
import PigeonServer
import PigeonTestSupport
import Testing

/// API.md 1.2 "Attachments", through the real HTTP stack: upload, send, read by members only, ranges and caching
/// headers, the limits, and erasure with the message.
@Suite struct AttachmentTests {
    /// Uploads `bytes` as one body with its `Content-Length`.
    static func upload(
        _ client: PigeonTestClient, _ device: TestDevice, name: String?, _ bytes: [UInt8], contentType: String? = "image/png"
    ) async throws -> HTTPAnswer {
        let query = name.map { "?name=" + ($0.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? $0) } ?? ""
        var request = HTTPClientRequest(url: client.baseURL + "/v1/attachments" + query)
        request.method = .POST
        request.headers.add(name: "Authorization", value: "Bearer \(device.token)")
        if let contentType { request.headers.add(name: "Content-Type", value: contentType) }
        request.body = .bytes(ByteBuffer(bytes: bytes))
        return try await execute(client, request)
    }

    static func execute(_ client: PigeonTestClient, _ request: HTTPClientRequest) async throws -> HTTPAnswer {
        let response = try await client.http.execute(request, timeout: .seconds(60))
        let bytes = try await response.body.collect(upTo: 64 << 20)
        var headers: [String: String] = [:]
        for header in response.headers { headers[header.name.lowercased()] = header.value }
        return HTTPAnswer(status: Int(response.status.code), headers: headers, body: Data(bytes.readableBytesView))
    }

    static func uploaded(_ answer: HTTPAnswer, sourceLocation: SourceLocation = #_sourceLocation) throws -> AttachmentUpload {
        #expect(answer.status == 201, "\(answer.text)", sourceLocation: sourceLocation)
        return try answer.decode(AttachmentUpload.self)
    }

    static func sendWith(
        _ client: PigeonTestClient, _ device: TestDevice, _ conversationId: String, _ references: [AttachmentReference], body: String = ""
    ) async throws -> HTTPAnswer {
        try await client.request(
            .POST, "/v1/conversations/\(conversationId)/messages", token: device.token,
            body: client.json(
                SendMessageRequest(
                    clientMessageId: newId(), type: "photo", body: body, clientTimestamp: 1_763_700_000_000, attachments: references)))
    }

    static func download(_ client: PigeonTestClient, _ device: TestDevice?, _ id: String, headers: [String: String] = [:], query: String = "")
        async throws -> HTTPAnswer
    {
        try await client.request(.GET, "/v1/attachments/\(id)\(query)", token: device?.token, headers: headers)
    }

    static func bytes(_ count: Int, seed: UInt8 = 7) -> [UInt8] {
        (0..<count).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ Int(seed)) }
    }

    static func hex(_ bytes: [UInt8]) -> String {
        SHA256.hash(data: bytes).map { String(format: "%02x", $0) }.joined()
    }

    @Test func aPhotoGoesFromUploadThroughASendToTheMembersAndNoOneElse() async throws {
        try await withTestServer { client in
            let alice = try await client.register("alice")
            let bob = try await client.register("bob")
            let carol = try await client.register("carol")
            let conversation = try await client.createConversation(alice, members: ["bob"])
            let photo = Self.bytes(300_000)
            let upload = try Self.uploaded(try await Self.upload(client, alice, name: "beach day.png", photo))
            #expect(upload.name == "beach day.png" && upload.size == 300_000 && upload.contentType == "image/png")
            #expect(upload.sha256 == Self.hex(photo) && isLowercaseUUID(upload.id))

            // Before any message carries it, only its uploader reads it.
            #expect(try await Self.download(client, alice, upload.id).body == Data(photo))
            let before = try await Self.download(client, bob, upload.id)
            expectError(before, 404, .notFound, "a member, before a message carries it")

            let sent = try await Self.sendWith(
                client, alice, conversation.id, [AttachmentReference(id: upload.id, width: 640, height: 480)], body: "look")
            #expect(sent.status == 202, "\(sent.text)")
            let messages = try await client.waitForCount(bob, conversation.id, 1)
            let carried = try #require(messages.first?.attachments.first)
            #expect(
                carried
                    == Attachment(
                        id: upload.id, name: "beach day.png", size: 300_000, contentType: "image/png", sha256: upload.sha256, width: 640, height: 480))
            let raw = try await client.request(.GET, "/v1/conversations/\(conversation.id)/messages?after=0", token: bob.token)
            #expect(raw.text.contains("\"durationMs\":null"), "every field of an attachment is on the wire: \(raw.text)")
            #expect(try await client.conversation(bob, conversation.id).lastMessage?.attachments == [carried])

            let read = try await Self.download(client, bob, upload.id)
            #expect(read.status == 200 && read.body == Data(photo))
            #expect(read.headers["content-length"] == "300000")
            #expect(read.headers["etag"] == "\"\(upload.sha256)\"")
            #expect(read.headers["cache-control"] == "private, max-age=31536000, immutable")
            #expect(read.headers["x-content-type-options"] == "nosniff")
            #expect(read.headers["content-type"] == "image/png")
            #expect(read.headers["content-disposition"] == "inline; filename*=UTF-8''beach%20day.png")
            #expect(read.headers["accept-ranges"] == "bytes")

            // Outsiders get what an unknown id gets.
            let outsider = try await Self.download(client, carol, upload.id)
            let unknown = try await Self.download(client, carol, newId())
            expectError(outsider, 404, .notFound, "not a member")
            #expect(outsider.body == unknown.body && outsider.status == unknown.status)
            expectError(try await Self.download(client, carol, "not-a-uuid"), 404, .notFound, "a malformed id")
            expectError(try await Self.download(client, nil, upload.id), 401, .unauthorized, "no token")

            // `<img src>` has no header: the token in the query.
            let viaQuery = try await Self.download(client, nil, upload.id, query: "?access_token=\(bob.token)")
            #expect(viaQuery.status == 200 && viaQuery.body == Data(photo))
        }
    }

    @Test func rangesConditionalRequestsAndTheSafeTypes() async throws {
        try await withTestServer { client in
            let alice = try await client.register("alice")
            let data = Self.bytes(100_000, seed: 3)
            let upload = try Self.uploaded(try await Self.upload(client, alice, name: "clip.bin", data, contentType: nil))
            #expect(upload.contentType == "application/octet-stream")

            let middle = try await Self.download(client, alice, upload.id, headers: ["Range": "bytes=1000-66535"])
            #expect(middle.status == 206 && middle.body == Data(data[1000...66535]))
            #expect(middle.headers["content-range"] == "bytes 1000-66535/100000" && middle.headers["content-length"] == "65536")
            let tail = try await Self.download(client, alice, upload.id, headers: ["Range": "bytes=-10"])
            #expect(tail.status == 206 && tail.body == Data(data[99_990...]))
            let open = try await Self.download(client, alice, upload.id, headers: ["Range": "bytes=99999-"])
            #expect(open.status == 206 && open.body == Data([data[99_999]]))
            let past = try await Self.download(client, alice, upload.id, headers: ["Range": "bytes=100000-"])
            expectError(past, 416, ErrorCode(rawValue: "range_not_satisfiable"), "a range past the end")
            #expect(past.headers["content-range"] == "bytes */100000")
            let several = try await Self.download(client, alice, upload.id, headers: ["Range": "bytes=0-1,5-6"])
            #expect(several.status == 200 && several.body == Data(data), "several ranges: the whole")
            let stale = try await Self.download(client, alice, upload.id, headers: ["Range": "bytes=0-9", "If-Range": "\"other\""])
            #expect(stale.status == 200 && stale.body.count == 100_000, "If-Range of another version: the whole")

            let cached = try await Self.download(client, alice, upload.id, headers: ["If-None-Match": "\"\(upload.sha256)\""])
            #expect(cached.status == 304 && cached.body.isEmpty && cached.headers["etag"] == "\"\(upload.sha256)\"")
            #expect(try await Self.download(client, alice, upload.id, headers: ["If-None-Match": "\"x\""]).status == 200)

            // A page or a script is never served as what it says it is.
            let page = try Self.uploaded(
                try await Self.upload(client, alice, name: "évil.html", Array("<script>alert(1)</script>".utf8), contentType: "text/html; charset=utf-8"))
            #expect(page.contentType == "text/html", "stored canonical: type/subtype, no parameters")
            let served = try await Self.download(client, alice, page.id)
            #expect(served.headers["content-type"] == "application/octet-stream")
            #expect(served.headers["content-disposition"] == "attachment; filename*=UTF-8''%C3%A9vil.html")
            #expect(served.headers["x-content-type-options"] == "nosniff")
            // A name is decoded once: a literal % stays a %.
            let percent = try Self.uploaded(try await Self.upload(client, alice, name: "100% done.txt", [1], contentType: "text/plain"))
            #expect(percent.name == "100% done.txt")
            #expect(try await Self.download(client, alice, percent.id).headers["content-disposition"] == "attachment; filename*=UTF-8''100%25%20done.txt")
            let svg = try Self.uploaded(try await Self.upload(client, alice, name: "a.svg", Array("<svg/>".utf8), contentType: "image/svg+xml"))
            #expect(try await Self.download(client, alice, svg.id).headers["content-type"] == "application/octet-stream")
            let voice = try Self.uploaded(try await Self.upload(client, alice, name: "v.ogg", [1, 2, 3], contentType: "Audio/Ogg"))
            #expect(voice.contentType == "audio/ogg")
            #expect(try await Self.download(client, alice, voice.id).headers["content-disposition"]?.hasPrefix("inline") == true)
            // Parameters that smuggle a second type: stored and served as the canonical type alone.
            let smuggled = try Self.uploaded(
                try await Self.upload(client, alice, name: "p.png", Array("<b>hi</b>".utf8), contentType: "image/png;x=y, text/html"))
            #expect(smuggled.contentType == "image/png")
            let smuggledServed = try await Self.download(client, alice, smuggled.id)
            #expect(smuggledServed.headers["content-type"] == "image/png", "\(smuggledServed.headers)")
            #expect(smuggledServed.headers["content-disposition"]?.hasPrefix("inline") == true)
            let plain = try Self.uploaded(try await Self.upload(client, alice, name: "n.txt", [1], contentType: "text/plain; charset=utf-8"))
            #expect(plain.contentType == "text/plain")
            #expect(try await Self.download(client, alice, plain.id).headers["content-type"] == "application/octet-stream")
        }
    }

    @Test func badUploadsAndBadSendsAreRefusedAndStoreNothing() async throws {
        try await withTestServer(configure: {
            $0.attachments.maxBytes = 10_000
            $0.attachments.quotaBytes = 25_000
            $0.attachments.uploadsPerMinute = 5
        }) { client in
            let alice = try await client.register("alice")
            let bob = try await client.register("bob")
            let conversation = try await client.createConversation(alice, members: ["bob"])
            expectError(try await Self.upload(client, alice, name: nil, [1]), 400, .invalidRequest, "no name")
            expectError(try await Self.upload(client, alice, name: "a/b.png", [1]), 400, .invalidRequest, "a path as a name")
            expectError(try await Self.upload(client, alice, name: "x.png", []), 400, .invalidRequest, "empty")
            expectError(try await Self.upload(client, alice, name: "x.png", [1], contentType: "png"), 400, .invalidRequest, "not a media type")
            let tooBig = try await Self.upload(client, alice, name: "big.png", Self.bytes(10_001))
            expectError(tooBig, 413, .payloadTooLarge, "over --max-attachment-bytes")
            // Answered on the length alone, before the body is read; the connection closes after it.
            let early = try await RawConnection.open(port: client.port)
            try await early.send(
                "POST /v1/attachments?name=huge.bin HTTP/1.1\r\nHost: pig\r\nAuthorization: Bearer \(alice.token)\r\n"
                    + "Content-Type: application/octet-stream\r\nContent-Length: 50000000\r\n\r\n" + String(repeating: "a", count: 20_000))
            let earlyAnswer = try #require(await early.waitForAnswer(within: .seconds(10)))
            expectError(earlyAnswer, 413, .payloadTooLarge, "50 MB announced")
            #expect(earlyAnswer.headers["connection"] == "close")
            #expect(await early.waitForClose(within: .seconds(5)), "the connection closes after an answer given before the body ended")

            // A body streamed without a length (chunked) is refused: the limits are checked on the length.
            var chunked = HTTPClientRequest(url: client.baseURL + "/v1/attachments?name=c.bin")
            chunked.method = .POST
            chunked.headers.add(name: "Authorization", value: "Bearer \(alice.token)")
            chunked.body = .stream(AsyncStream { $0.yield(ByteBuffer(bytes: [1, 2, 3])); $0.finish() }, length: .unknown)
            expectError(try await Self.execute(client, chunked), 400, .invalidRequest, "no Content-Length")

            // A body cut short (the client went away) stores nothing: its 5,000 bytes never count in the quota.
            let cut = try await RawConnection.open(port: client.port)
            try await cut.send(
                "POST /v1/attachments?name=cut.bin HTTP/1.1\r\nHost: pig\r\nAuthorization: Bearer \(alice.token)\r\n"
                    + "Content-Type: application/octet-stream\r\nContent-Length: 5000\r\n\r\n" + String(repeating: "b", count: 1_000))
            try await Task.sleep(for: .milliseconds(200))
            await cut.close()

            // The quota counts what is stored: 2 × 10,000 fit in 25,000, a third does not; 5,000 more still fit.
            let first = try Self.uploaded(try await Self.upload(client, alice, name: "1.png", Self.bytes(10_000)))
            _ = try Self.uploaded(try await Self.upload(client, alice, name: "2.png", Self.bytes(10_000, seed: 9)))
            expectError(try await Self.upload(client, alice, name: "3.png", Self.bytes(10_000, seed: 11)), 403, .forbidden, "over the quota")
            _ = try Self.uploaded(try await Self.upload(client, alice, name: "4.png", Self.bytes(5_000, seed: 13)))
            // Uploads per device: the cut one, 1-4 (the refused one too) make five; the sixth of the minute is refused.
            let limited = try await Self.upload(client, alice, name: "5.png", [1])
            expectError(limited, 429, .rateLimited, "uploads per device per minute")

            // Sends naming what is not the sender's: 400, nothing stored.
            let bobs = try Self.uploaded(try await Self.upload(client, bob, name: "bob.png", [9, 9]))
            for (references, why) in [
                ([AttachmentReference(id: newId())], "an unknown id"),
                ([AttachmentReference(id: bobs.id)], "another user's upload"),
                ([AttachmentReference(id: "nope")], "not a UUID"),
                ([AttachmentReference(id: first.id), AttachmentReference(id: first.id)], "one upload twice"),
                ([AttachmentReference(id: first.id, width: -1)], "a negative width"),
                (Array(repeating: AttachmentReference(id: first.id), count: 11), "eleven"),
            ] {
                expectError(try await Self.sendWith(client, alice, conversation.id, references), 400, .invalidRequest, why)
            }
            #expect(try await client.history(alice, conversation.id).messages.isEmpty)
        }
    }

    @Test func overTheWebSocketTheMessageAndItsEventCarryTheAttachments() async throws {
        try await withTestServer { client in
            let alice = try await client.register("alice")
            let bob = try await client.register("bob")
            let conversation = try await client.createConversation(alice, members: ["bob"])
            let upload = try Self.uploaded(try await Self.upload(client, alice, name: "note.ogg", [1, 2, 3, 4], contentType: "audio/ogg"))
            let bobSocket = try await TestWebSocket.connect(port: client.port, token: bob.token)
            defer { Task { await bobSocket.close() } }
            let aliceSocket = try await TestWebSocket.connect(port: client.port, token: alice.token)
            defer { Task { await aliceSocket.close() } }
            let clientMessageId = newId()
            aliceSocket.send(
                .send(
                    conversationId: conversation.id,
                    SendMessageRequest(
                        clientMessageId: clientMessageId, type: "voice", body: "", clientTimestamp: 1,
                        attachments: [AttachmentReference(id: upload.id, durationMs: 2_500)])))
            let ack = await aliceSocket.first { if case .ack(let ack) = $0 { ack.clientMessageId == clientMessageId } else { false } }
            #expect(ack != nil, "acked")
            let event = await bobSocket.firstEvent { if case .messageNew = $0 { true } else { false } }
            guard case .messageNew(_, let message)? = event else { throw TestFailure("no message.new for bob") }
            #expect(message.attachments.map(\.durationMs) == [2_500] && message.attachments.first?.id == upload.id)
            #expect(try await Self.download(client, bob, upload.id).body == Data([1, 2, 3, 4]))
        }
    }

    @Test func deletingTheMessageForEveryoneErasesItsAttachments() async throws {
        try await withTestServer(configure: { $0.attachments.sweepInterval = .milliseconds(100) }) { client in
            let alice = try await client.register("alice")
            let bob = try await client.register("bob")
            let conversation = try await client.createConversation(alice, members: ["bob"])
            let shared = Self.bytes(5_000)
            let upload = try Self.uploaded(try await Self.upload(client, alice, name: "p.png", shared))
            let kept = try Self.uploaded(try await Self.upload(client, bob, name: "same.png", shared))
            let answer = try await Self.sendWith(client, alice, conversation.id, [AttachmentReference(id: upload.id)])
            let sent = try answer.decode(SendMessageResponse.self)
            _ = try await client.waitForCount(bob, conversation.id, 1)
            #expect(try await Self.download(client, bob, upload.id).status == 200)

            let deleted = try await client.request(
                .POST, "/v1/conversations/\(conversation.id)/messages/\(sent.serverId)/delete", token: alice.token,
                body: client.json(DeleteMessageRequest(clientMessageId: newId(), clientTimestamp: 2)))
            #expect(deleted.status == 202, "\(deleted.text)")
            let deadline = ContinuousClock.now + .seconds(20)
            while ContinuousClock.now < deadline, try await Self.download(client, alice, upload.id).status != 404 {
                try await Task.sleep(for: .milliseconds(100))
            }
            expectError(try await Self.download(client, alice, upload.id), 404, .notFound, "the uploader, after the delete")
            expectError(try await Self.download(client, bob, upload.id), 404, .notFound, "a member, after the delete")
            let history = try await client.history(bob, conversation.id)
            #expect(history.messages.first { $0.serverId == sent.serverId }?.attachments == [], "the metadata is erased with the body")
            // Equal bytes uploaded by someone else are theirs, and stay.
            #expect(try await Self.download(client, bob, kept.id).body == Data(shared))
        }
    }

    /// The body is streamed into storage, never held: a 100 MiB upload (and its download) leave this process (server
    /// and client together) within 24 MiB of where it started.
    @Test func aHundredMebibyteUploadIsStreamedNotHeld() async throws {
        try await withTestServer(configure: { $0.attachments.maxBytes = 128 << 20 }) { client in
            let alice = try await client.register("alice")
            let body = GeneratedBody(count: 100 << 20)
            // A first small upload and download warm the paths up (buffers, pools, statements).
            _ = try await streamUpload(client, alice, name: "warm.bin", GeneratedBody(count: 1 << 20))
            let before = residentBytes()
            var peak = before
            let sampler = Task {
                while !Task.isCancelled {
                    peak = max(peak, residentBytes())
                    try? await Task.sleep(for: .milliseconds(5))
                }
                return peak
            }
            let answer = try await streamUpload(client, alice, name: "big.bin", body)
            let upload = try Self.uploaded(answer)
            #expect(upload.size == 100 << 20 && upload.sha256 == body.sha256)
            // Read back and hashed as it arrives.
            var request = HTTPClientRequest(url: client.baseURL + "/v1/attachments/\(upload.id)")
            request.headers.add(name: "Authorization", value: "Bearer \(alice.token)")
            let response = try await client.http.execute(request, timeout: .seconds(120))
            var hash = SHA256()
            var received = 0
            for try await chunk in response.body {
                hash.update(data: Data(chunk.readableBytesView))
                received += chunk.readableBytes
            }
            sampler.cancel()
            let highest = await sampler.value
            #expect(received == 100 << 20 && hash.finalize().map { String(format: "%02x", $0) }.joined() == upload.sha256)
            let growth = highest - before
            print("attachment memory: resident \(before >> 20) MiB before, peak \(highest >> 20) MiB during a 100 MiB upload and download (+\((growth) >> 20) MiB)")
            #expect(growth < 24 << 20, "peak resident growth \(growth >> 20) MiB")
        }
    }

    /// An upload's body may take as long as it keeps arriving: with a body deadline of 1 s, a body trickled over
    /// several seconds is taken, and one that stalls for longer than the deadline is cut (`408`).
    @Test func aSlowUploadIsTakenWhileItKeepsArrivingAndCutWhenItStalls() async throws {
        try await withTestServer(configure: { $0.connectionLimits.bodyTimeout = .seconds(1) }) { client in
            let alice = try await client.register("alice")
            let slow = GeneratedBody(count: 12 * 32_768, chunk: 32_768, pace: .milliseconds(300))
            let answer = try await streamUpload(client, alice, name: "slow.bin", slow)
            #expect(answer.status == 201, "a body of 3.6 s with no silence over 0.3 s: \(answer.text)")

            let stalled = try await RawConnection.open(port: client.port)
            try await stalled.send(
                "POST /v1/attachments?name=stall.bin HTTP/1.1\r\nHost: pig\r\nAuthorization: Bearer \(alice.token)\r\n"
                    + "Content-Type: application/octet-stream\r\nContent-Length: 5000\r\n\r\n" + String(repeating: "c", count: 1_000))
            #expect(await stalled.waitForClose(within: .seconds(10)), "a stalled upload is cut after the body deadline")
        }
    }
}
