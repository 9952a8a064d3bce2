import Foundation
import PigeonProtocol
import PigeonTestSupport
import Testing

/// Every node serves every attachment (API.md 1.2): the bytes live in PostgreSQL, not on the node that took the upload.
extension MultiNodeTests {
    @Test func aPhotoUploadedOnOneNodeIsSentAndReadOnAnother() async throws {
        let directory = makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let backend = try await TestBackendInstance.make(.production)
        let nodes = try await Self.startNodes(2, backend: backend, directory: directory)
        let (a, b) = (nodes[0].client, nodes[1].client)
        let alice = try await a.register("alice")
        let bob = try await a.register("bob")
        let carol = try await a.register("carol")
        let conversation = try await a.createConversation(alice, members: ["bob"])
        let body = GeneratedBody(count: 3 << 20)
        let uploaded = try await streamUpload(a, alice, name: "photo.jpg", body)
        #expect(uploaded.status == 201, "\(uploaded.text)")
        let upload = try uploaded.decode(AttachmentUpload.self)

        // Sent through node B, read on node B by bob and by the uploader, in ranges too.
        let sent = try await AttachmentTests.sendWith(b, alice, conversation.id, [AttachmentReference(id: upload.id, width: 4000, height: 3000)])
        #expect(sent.status == 202, "\(sent.text)")
        let messages = try await b.waitForCount(bob, conversation.id, 1)
        #expect(messages.first?.attachments.first?.sha256 == body.sha256)
        let read = try await AttachmentTests.download(b, bob, upload.id)
        #expect(read.status == 200 && read.body.count == 3 << 20)
        #expect(AttachmentTests.hex(Array(read.body)) == body.sha256)
        let range = try await AttachmentTests.download(b, alice, upload.id, headers: ["Range": "bytes=262140-262147"])
        #expect(range.status == 206 && Array(range.body) == (262_140...262_147).map(GeneratedBody.byte), "a range across two chunks")
        expectError(try await AttachmentTests.download(b, carol, upload.id), 404, .notFound, "an outsider on node B")
        for node in nodes { try await node.stop(signal: SIGTERM) }
        await backend.tearDown()
    }
}
