import Foundation
import NIOConcurrencyHelpers
import NIOCore
@testable import PigeonKit
import PigeonProtocol
import PigeonTestSupport
import Testing

/// The device APIs against a real in-process server: the list, a revocation from another device (the revoked client
/// reports it and stops for good), and logout.
@Suite struct DeviceTests {
    /// The real transport, counting every call that goes out (each one a request to the server).
    final class CountingTransport: PigeonTransport {
        let base: any PigeonTransport
        private let count = NIOLockedValueBox(0)

        init(base: any PigeonTransport) {
            self.base = base
        }

        var calls: Int { count.withLockedValue { $0 } }
        private func counted() { count.withLockedValue { $0 += 1 } }

        func openStream(kind: StreamKind, cursor: String?) async throws -> any EventStreamConnection {
            counted()
            return try await base.openStream(kind: kind, cursor: cursor)
        }
        func sendMessage(conversationId: String, _ request: SendMessageRequest) async throws -> SendMessageResponse {
            counted()
            return try await base.sendMessage(conversationId: conversationId, request)
        }
        func postReceipt(conversationId: String, _ request: ReceiptRequest) async throws -> ReceiptResponse {
            counted()
            return try await base.postReceipt(conversationId: conversationId, request)
        }
        func postTyping(conversationId: String, active: Bool) async throws {
            counted()
            try await base.postTyping(conversationId: conversationId, active: active)
        }
        func createConversation(_ request: CreateConversationRequest) async throws -> Conversation {
            counted()
            return try await base.createConversation(request)
        }
        func conversations() async throws -> [Conversation] {
            counted()
            return try await base.conversations()
        }
        func blockedUsers() async throws -> [BlockedUser] {
            counted()
            return try await base.blockedUsers()
        }
        func messages(conversationId: String, after: Int64, limit: Int) async throws -> MessagePage {
            counted()
            return try await base.messages(conversationId: conversationId, after: after, limit: limit)
        }
        func conversation(id: String) async throws -> Conversation {
            counted()
            return try await base.conversation(id: id)
        }
        func addMembers(conversationId: String, _ request: AddMembersRequest) async throws -> Conversation {
            counted()
            return try await base.addMembers(conversationId: conversationId, request)
        }
        func removeMember(conversationId: String, userId: String) async throws -> Conversation {
            counted()
            return try await base.removeMember(conversationId: conversationId, userId: userId)
        }
        func setRole(conversationId: String, userId: String, _ request: SetRoleRequest) async throws -> Conversation {
            counted()
            return try await base.setRole(conversationId: conversationId, userId: userId, request)
        }
        func renameConversation(conversationId: String, _ request: RenameConversationRequest) async throws -> Conversation {
            counted()
            return try await base.renameConversation(conversationId: conversationId, request)
        }
        func editMessage(conversationId: String, serverId: String, _ request: EditMessageRequest) async throws -> SendMessageResponse {
            counted()
            return try await base.editMessage(conversationId: conversationId, serverId: serverId, request)
        }
        func deleteMessage(conversationId: String, serverId: String, _ request: DeleteMessageRequest) async throws -> SendMessageResponse {
            counted()
            return try await base.deleteMessage(conversationId: conversationId, serverId: serverId, request)
        }
        func react(conversationId: String, serverId: String, key: String, action: ReactionAction) async throws -> ReactionsResponse {
            counted()
            return try await base.react(conversationId: conversationId, serverId: serverId, key: key, action: action)
        }
        func reactionUsers(conversationId: String, serverId: String, key: String?, after: String?, limit: Int) async throws -> ReactionUsersPage {
            counted()
            return try await base.reactionUsers(conversationId: conversationId, serverId: serverId, key: key, after: after, limit: limit)
        }
        func threadPage(conversationId: String, rootServerId: String, after: Int64?, before: Int64?, limit: Int) async throws -> ThreadPage {
            counted()
            return try await base.threadPage(conversationId: conversationId, rootServerId: rootServerId, after: after, before: before, limit: limit)
        }
        func uploadAttachment(
            file path: String, size: Int64, name: String, contentType: String, onChunk: @escaping @Sendable (ByteBuffer) -> Void
        ) async throws -> AttachmentUpload {
            counted()
            return try await base.uploadAttachment(file: path, size: size, name: name, contentType: contentType, onChunk: onChunk)
        }
    }

    @Test func devicesListsTheUsersDevicesWithThisOneMarked() async throws {
        try await withKitTestServer { server in
            let laptop = try await TestDevice.register("alice", on: server.url)
            try await Task.sleep(for: .milliseconds(5))  // two creation times, so the order is theirs, not the ids'
            let phone = try await TestDevice.register("alice", on: server.url, existing: laptop)
            let listed = try await phone.client.devices()
            #expect(listed.map(\.deviceId) == [laptop.credentials.deviceId, phone.credentials.deviceId])
            #expect(listed.map(\.current) == [false, true])
            #expect(listed.map(\.deviceName) == ["test", "test"])
            #expect(try await laptop.client.devices().map(\.current) == [true, false])
        }
    }

    /// Revoked from another device: the client reports `.signedOut` (event and state), and from then on asks the server
    /// nothing, however long its clock runs (no reconnection, no resend); a message sent meanwhile stays pending.
    @Test func aDeviceRevokedElsewhereSignsOutAndStopsRetrying() async throws {
        try await withKitTestServer { server in
            let clock = ManualClock()
            let laptop = try await TestDevice.register("alice", on: server.url)
            let counting = NIOLockedValueBox<CountingTransport?>(nil)
            let phone = try await TestDevice.register(
                "alice", on: server.url, existing: laptop,
                transport: TransportMaker { configuration in
                    let transport = CountingTransport(base: configuration.realTransport)
                    counting.withLockedValue { $0 = transport }
                    return transport
                }
            ) {
                $0.clock = clock
                $0.jitter = { 0 }
            }
            let transport = try #require(counting.withLockedValue { $0 })
            _ = try await TestDevice.register("bob", on: server.url)
            try await startAll(laptop, phone)
            let conversation = try await phone.client.createConversation(members: ["bob"]).id

            try await laptop.client.revokeDevice(phone.credentials.deviceId)
            try await clock.advance(by: .milliseconds(100), until: "the phone reports it was signed out") {
                phone.client.connectionState == .signedOut
            }
            let signedOutEvents = {
                phone.events.compactMap { event -> PigeonClientError? in
                    if case .signedOut(let error) = event { error } else { nil }
                }
            }
            // The state is read at once; the events stream reaches the test's recorder a moment later.
            try await waitUntil("the phone's events say it was signed out") { !signedOutEvents().isEmpty }
            let reported = signedOutEvents()
            #expect(reported.count == 1)
            #expect(reported.first?.httpStatus == 401)
            #expect(phone.events.contains(.connectionStateChanged(.signedOut)))
            #expect(phone.client.lastConnectionError?.httpStatus == 401)

            let callsWhenReported = transport.calls
            let message = try phone.client.send("written after the revocation", to: conversation)
            phone.client.setNetworkEnabled(false)
            phone.client.setNetworkEnabled(true)
            // Ten minutes of the client's clock: every backoff, ACK deadline and catch-up period passes many times over.
            for _ in 0..<200 {
                clock.advance(by: .seconds(3))
                try await Task.sleep(for: .milliseconds(1))
            }
            #expect(transport.calls == callsWhenReported, "the signed-out client still asked the server \(transport.calls - callsWhenReported) times")
            #expect(phone.client.connectionState == .signedOut)
            #expect(signedOutEvents().count == 1, "reported once")
            #expect(try phone.message(message.localId).status == .pending)
            #expect(try phone.client.unsentMessages().map(\.localId) == [message.localId], "nothing is lost locally")
            #expect(try await server.history(conversationId: conversation, token: laptop.credentials.token).isEmpty)
            #expect(try await laptop.client.devices().map(\.deviceId) == [laptop.credentials.deviceId])
            await phone.client.stop()
            #expect(phone.client.connectionState == .signedOut, "stopping does not make it look signed in again")
        }
    }

    /// logout revokes this device, stops the client and, when asked, deletes the database files; with the data kept
    /// they stay.
    @Test func logoutRevokesAndWipesTheLocalDatabase() async throws {
        try await withKitTestServer { server in
            let laptop = try await TestDevice.register("alice", on: server.url)
            let phone = try await TestDevice.register("alice", on: server.url, existing: laptop)
            let tablet = try await TestDevice.register("alice", on: server.url, existing: laptop)
            try await startAll(laptop, phone, tablet)
            let files = { (path: String) in ["", "-wal", "-shm"].filter { FileManager.default.fileExists(atPath: path + $0) } }
            #expect(files(phone.databasePath).contains(""))

            try await phone.client.logout(wipeLocalData: true)
            #expect(files(phone.databasePath).isEmpty, "left: \(files(phone.databasePath))")
            #expect(phone.client.connectionState == .signedOut)

            try await tablet.client.logout(wipeLocalData: false)
            #expect(files(tablet.databasePath).contains(""))
            #expect(tablet.client.connectionState == .signedOut)
            #expect(try await laptop.client.devices().map(\.deviceId) == [laptop.credentials.deviceId])

            // Logging out a device revoked already still signs it out locally.
            let again = try TestDevice.open(credentials: tablet.credentials, serverURL: server.url, databasePath: tablet.databasePath)
            try await again.client.logout(wipeLocalData: true)
            #expect(files(tablet.databasePath).isEmpty)
        }
    }
}
