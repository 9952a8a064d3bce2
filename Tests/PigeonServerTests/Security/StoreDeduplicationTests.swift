import Crypto
import Foundation
import PigeonProtocol
import PigeonTestSupport
import Testing

/// Issue 11, item 8: de-duplication is by (sender, device, clientMessageId). With JWTs the device id is the
/// identity provider's `did` claim, unique only within its user: two users whose tokens both say "phone" are two
/// devices, and the same clientMessageId from each is two messages (on every backend: the buffer's records and the
/// store's unique index both include the sender).
@Suite struct StoreDeduplicationTests {
    static let secret = "store-deduplication-test-secret-0123456789"

    static func base64URL(_ data: Data) -> String {
        data.base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    /// An HS256 token for `sub` and `did`, valid for an hour, as an app backend mints it.
    static func device(_ userId: String, did: String) -> TestDevice {
        let header = #"{"alg":"HS256","typ":"JWT"}"#
        let claims = #"{"sub":"\#(userId)","did":"\#(did)","exp":\#(Int64(Date().timeIntervalSince1970) + 3600)}"#
        let signingInput = base64URL(Data(header.utf8)) + "." + base64URL(Data(claims.utf8))
        let signature = HMAC<SHA256>.authenticationCode(for: Data(signingInput.utf8), using: SymmetricKey(data: Data(secret.utf8)))
        return TestDevice(userId: userId, deviceId: did, token: signingInput + "." + base64URL(Data(signature)))
    }

    @Test func twoUsersWhoseTokensShareADidAreNotDuplicatesOfEachOther() async throws {
        try await withTestServer(configure: { $0.auth.jwtSecret = Self.secret }) { client in
            let alice = Self.device("alice", did: "phone")
            let bob = Self.device("bob", did: "phone")
            let conversation = try await client.createConversation(alice, members: ["bob"])
            let clientMessageId = newId()
            let fromAlice = try await client.send(alice, to: conversation.id, body: "from alice", clientMessageId: clientMessageId)
            #expect(fromAlice.status == 202, "\(fromAlice.text)")
            let fromBob = try await client.send(bob, to: conversation.id, body: "from bob", clientMessageId: clientMessageId)
            #expect(fromBob.status == 202, "\(fromBob.text)")
            let aliceAccepted = try fromAlice.decode(SendMessageResponse.self)
            let bobAccepted = try fromBob.decode(SendMessageResponse.self)
            #expect(aliceAccepted.serverId != bobAccepted.serverId)
            let stored = try await client.waitForCount(alice, conversation.id, 2)
            #expect(stored.map(\.body).sorted() == ["from alice", "from bob"])
            #expect(Set(stored.map(\.senderId)) == ["alice", "bob"])
            #expect(stored.allSatisfy { $0.senderDeviceId == "phone" && $0.clientMessageId == clientMessageId })
            // Each one's resend is still its own duplicate: 200 with its original serverId.
            let again = try await client.send(bob, to: conversation.id, body: "from bob", clientMessageId: clientMessageId)
            #expect(again.status == 200, "\(again.text)")
            #expect(try again.decode(SendMessageResponse.self).serverId == bobAccepted.serverId)
            // The resend stored nothing. Not a wait: a message accepted after the resend in the same conversation is
            // stored after anything the resend could have put in the buffer (a conversation's messages are stored
            // in the order accepted; on the direct path a 200 or 202 is answered after the write), so once it is
            // stored the count is final. (The store write this waits for is real I/O that no clock governs.)
            let after = try await client.sendAccepted(alice, to: conversation.id, body: "after the resend")
            let all = try await client.waitForMessages(alice, conversation.id) { $0.contains { $0.serverId == after.serverId } }
            #expect(all.last?.serverId == after.serverId, "\(all.map(\.body))")
            #expect(try await client.allMessages(alice, conversation.id).filter { $0.serverId != after.serverId }.count == 2)
        }
    }
}
