import PigeonPostgres
import Testing

/// The notifications PostgreSQL nodes send each other on their one channel: every kind survives the trip as a
/// `NOTIFY` payload, a payload of a kind this version does not know (a newer node's) is ignored, and nothing over
/// PostgreSQL's 8,000-byte limit is sent.
@Suite struct NodeNotificationTests {
    @Test func everyKindSurvivesThePayloadRoundTrip() throws {
        let notifications: [NodeNotification] = [
            .committed(node: "node-a"),
            .committed(node: "node-a", partitions: PartitionMask(partitionsOf: [0, 5, 15])),
            .committed(node: "node-a", partitions: .none),
            .revoked(node: "node-b"),
            .frame(EphemeralFrame(type: "typing", json: "{\"type\":\"typing\",\"active\":true}", users: ["bob", "carol"], node: "node-a")),
            .membersChanged(node: "node-c", conversationId: "0193a5c2-0000-7000-8000-000000000001"),
            .presence(PresenceChange(node: "node-a", version: 7, reset: false, online: [["bob", "phone"]], offline: [["carol", "tablet"]])),
        ]
        for notification in notifications {
            let payload = try #require(notification.payload)
            #expect(NodeNotification(payload: payload) == notification, "\(payload)")
        }
        #expect(NodeNotification.committed(node: "node-a").payload == #"{"k":"c","n":"node-a"}"#)
        #expect(NodeNotification.committed(node: "node-a", partitions: PartitionMask(partitionsOf: [0, 3])).payload == #"{"k":"c","m":9,"n":"node-a"}"#)
    }

    @Test func anOlderNodesCommitNotificationNamesEveryPartition() {
        #expect(NodeNotification(payload: #"{"k":"c","n":"node-a"}"#) == .committed(node: "node-a", partitions: .all))
    }

    @Test func aPartitionMaskNamesPartitionsBelow64AndOtherwiseAll() {
        var mask = PartitionMask.none
        #expect(mask.isEmpty && mask.partitions(below: 16) == [])
        mask.insert(2)
        mask.insert(9)
        mask.insert(20)
        #expect(mask.partitions(below: 16) == [2, 9], "partitions past the log's count are not read")
        #expect(mask.partitions(below: 32) == [2, 9, 20])
        var merged = mask
        merged.formUnion(PartitionMask(partitionsOf: [0]))
        #expect(merged.partitions(below: 16) == [0, 2, 9])
        merged.formUnion(.all)
        #expect(merged == .all && merged.partitions(below: 4) == [0, 1, 2, 3])
        mask.insert(64)
        #expect(mask == .all, "a partition a mask cannot name makes it every partition")
    }

    @Test func anUnknownOrMalformedPayloadIsIgnored() {
        #expect(NodeNotification(payload: #"{"k":"z","n":"node-a"}"#) == nil)
        #expect(NodeNotification(payload: "node-a") == nil, "the old bare node id")
        #expect(NodeNotification(payload: #"{"k":"c"}"#) == nil)
    }

    @Test func aPayloadOverPostgresLimitIsNotSent() {
        let users = (0..<2_000).map { "user-\($0)" }
        #expect(NodeNotification.frame(EphemeralFrame(type: "typing", json: "{}", users: users, node: "node-a")).payload == nil)
    }
}
