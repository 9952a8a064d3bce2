import Foundation
import Logging
import NIOConcurrencyHelpers
import PigeonDomain
import PigeonPostgres
import PigeonProtocol
import PigeonSQLite
@testable import PigeonServer
import PigeonTestSupport
import Testing

/// The ``Fanout`` contract, checked against both implementations: ``LocalFanout`` (one node, the embedded store) and
/// ``PostgresFanout`` (two nodes on one PostgreSQL schema, a device on the node that did not commit).
@Suite struct FanoutContractTests {
    enum Kind: String, CaseIterable, Sendable { case local, postgres }

    /// A server node as the fan-out sees it: its stream hub and its store.
    struct Node: Sendable {
        var hub: StreamHub
        var store: any MessageStore
        var fanout: any Fanout
        /// The node's own fan-out into its hub (where its revocation observers, the authenticator's caches, hang).
        var local: LocalFanout
    }

    /// Runs `body` with one node (local) or two nodes sharing a schema (postgres).
    static func withNodes(_ kind: Kind, _ body: @Sendable ([Node]) async throws -> Void) async throws {
        var logger = Logger(label: "fanout-contract")
        logger.logLevel = .error
        switch kind {
        case .local:
            let directory = makeTemporaryDirectory()
            defer { try? FileManager.default.removeItem(atPath: directory) }
            let hub = StreamHub()
            let fanout = LocalFanout(hub: hub)
            let store = try SQLiteMessageStore(path: directory + "/store.sqlite", durable: false, fanout: fanout)
            try await body([Node(hub: hub, store: store, fanout: fanout, local: fanout)])
        case .postgres:
            let schema = EventPartitionTests.newSchema()
            let url = try TestBackend.environmentURL("PIGEON_TEST_POSTGRES_URL") + "?schema=\(schema)"
            var nodes: [Node] = []
            var stores: [PostgresMessageStore] = []
            for index in 0..<2 {
                let hub = StreamHub()
                let local = LocalFanout(hub: hub)
                let store = try await PostgresMessageStore.open(
                    url: url, local: local, logger: logger, maxConnections: 4, nodeId: "fanout-node-\(index)")
                hub.observePresence { [fanout = store.fanout] device, online in fanout.devicePresence(device, online: online) }
                stores.append(store)
                nodes.append(Node(hub: hub, store: store, fanout: store.fanout, local: local))
            }
            let ready = nodes
            let result = await StoreContractTests.whileRunning(stores) { try await body(ready) }
            try? await TestPostgres.execute("DROP SCHEMA IF EXISTS \(schema) CASCADE")
            try result.get()
        }
    }

    /// A stream of `device` on `hub`, opened with a token issued at `issuedAt` (seconds; `nil`: an opaque token).
    static func connect(_ device: DeviceIdentity, issuedAt: Int64? = nil, to hub: StreamHub) -> StreamSession {
        let session = hub.makeSession(device: device, tokenIssuedAt: issuedAt, transport: "test", limits: StreamLimits(), limitHit: { _ in })
        hub.register(session, maxStreamsPerDevice: 8)
        return session
    }

    /// What `session` receives within `timeout`, until `done` holds.
    static func receive(_ session: StreamSession, timeout: Duration = .seconds(10), until done: ([StreamSession.Item]) -> Bool) async
        -> [StreamSession.Item]
    {
        var items: [StreamSession.Item] = []
        let deadline = ContinuousClock.now + timeout
        while !done(items), ContinuousClock.now < deadline {
            if case .items(let more) = await session.next(timeout: .milliseconds(100)) {
                for item in more {
                    if case .event(_, let cost) = item { session.release(cost: cost) }
                    if case .frame(_, _, let cost) = item { session.release(cost: cost) }
                }
                items.append(contentsOf: more)
            }
        }
        return items
    }

    static func events(_ items: [StreamSession.Item]) -> [StoredEvent] {
        items.compactMap { if case .event(let event, _) = $0 { event } else { nil } }
    }

    @Test(arguments: Kind.allCases) func committedEventsReachEveryNodesDevicesOnceInOrder(_ kind: Kind) async throws {
        try await Self.withNodes(kind) { nodes in
            let bob = DeviceIdentity(userId: "bob", deviceId: "phone")
            let session = Self.connect(bob, to: nodes.last!.hub)
            let writer = nodes[0].store
            let conversation = try await writer.createConversation(creator: "alice", members: ["bob"], name: nil)
            for round in 0..<10 {
                _ = try await writer.process([
                    StoreContractTests.item(conversation: conversation.id, body: "a\(round)"),
                    StoreContractTests.item(conversation: conversation.id, body: "b\(round)"),
                ])
            }
            let items = await Self.receive(session) { Self.events($0).count >= 21 }
            let events = Self.events(items)
            #expect(events.map(\.type) == ["conversation.created"] + Array(repeating: "message.new", count: 20))
            // One partition (a conversation's): bob's share of its offsets, ascending, each once.
            #expect(Set(events.map(\.partition)).count == 1)
            #expect(zip(events, events.dropFirst()).allSatisfy { $0.id < $1.id }, "\(events.map(\.id))")
            let extra = Self.events(await Self.receive(session, timeout: .milliseconds(1500)) { _ in false })
            #expect(extra.isEmpty, "\(extra.count) events came twice")
        }
    }

    @Test(arguments: Kind.allCases) func presenceIsSeenFromEveryNodeAndForgottenWhenTheStreamCloses(_ kind: Kind) async throws {
        try await Self.withNodes(kind) { nodes in
            // Two users whose devices share an id: presence keeps them apart.
            let bob = DeviceIdentity(userId: "bob", deviceId: "phone")
            let carol = DeviceIdentity(userId: "carol", deviceId: "phone")
            let bobSession = Self.connect(bob, to: nodes.last!.hub)
            let carolSession = Self.connect(carol, to: nodes.last!.hub)
            for node in nodes {
                let seen = await eventually(within: .seconds(10)) { node.fanout.onlineDevices(of: ["bob", "carol", "dave"]) == [bob, carol] }
                #expect(seen, "\(node.fanout.onlineDevices(of: ["bob", "carol", "dave"]))")
                #expect(node.fanout.onlineDeviceCount(of: ["bob", "carol"], excluding: bob) == 1)
            }
            nodes.last!.hub.unregister(bobSession)
            for node in nodes {
                let gone = await eventually(within: .seconds(10)) { node.fanout.onlineDevices(of: ["bob", "carol"]) == [carol] }
                #expect(gone, "\(node.fanout.onlineDevices(of: ["bob", "carol"]))")
            }
            nodes.last!.hub.unregister(carolSession)
        }
    }

    @Test(arguments: Kind.allCases) func broadcastFramesReachTheUsersDevicesOnEveryNode(_ kind: Kind) async throws {
        try await Self.withNodes(kind) { nodes in
            let bob = DeviceIdentity(userId: "bob", deviceId: "phone")
            let dave = DeviceIdentity(userId: "dave", deviceId: "phone")
            let bobSession = Self.connect(bob, to: nodes.last!.hub)
            let daveSession = Self.connect(dave, to: nodes.last!.hub)
            // The other node's LISTEN may still be connecting: broadcast until a frame arrives (best effort by contract).
            var frames: [StreamSession.Item] = []
            for _ in 0..<20 where frames.isEmpty {
                nodes[0].fanout.broadcast(type: "typing", json: "{\"type\":\"typing\"}", to: ["bob"])
                frames = await Self.receive(bobSession, timeout: .milliseconds(500)) { !$0.isEmpty }
            }
            #expect(frames.contains { if case .frame("typing", _, _) = $0 { true } else { false } })
            let leaked = await Self.receive(daveSession, timeout: .milliseconds(500)) { !$0.isEmpty }
            #expect(leaked.isEmpty, "a frame for bob reached dave")
        }
    }

    /// A revocation committed on one node is acted on by every node: its observers (the authenticators' caches) hear of
    /// it and the device's streams of tokens issued up to the revocation's second end (`revoked`), on the node that
    /// revoked at once and on the others within about a second; a stream of a token issued after it stays, and acting
    /// on it twice is harmless.
    @Test(arguments: Kind.allCases) func aRevocationIsActedOnByEveryNode(_ kind: Kind) async throws {
        try await Self.withNodes(kind) { nodes in
            let bob = DeviceIdentity(userId: "bob", deviceId: "phone")
            let now = WallClock.nowMillis()
            let issuedBefore = now / 1000 - 60
            _ = try await nodes[0].store.recordJWTDevice(bob, issuedAt: issuedBefore, at: now)
            let heard = NIOLockedValueBox([Int: [DeviceRevocation]]())
            for (index, node) in nodes.enumerated() {
                node.local.observeRevocations { revocation in heard.withLockedValue { $0[index, default: []].append(revocation) } }
            }
            let old = Self.connect(bob, issuedAt: issuedBefore, to: nodes.last!.hub)
            let revocation = try #require(try await nodes[0].store.revokeDevice(bob, at: WallClock.nowMillis()))
            nodes[0].fanout.deviceRevoked(revocation)
            let newer = Self.connect(bob, issuedAt: revocation.tokensIssuedThrough + 1, to: nodes.last!.hub)

            let ended = await eventually(within: .seconds(5)) { old.endReason == .revoked }
            #expect(ended, "the stream of a token issued before the revocation ended: \(String(describing: old.endReason))")
            for index in nodes.indices {
                let told = await eventually(within: .seconds(5)) { heard.withLockedValue { $0[index]?.contains(revocation) ?? false } }
                #expect(told, "node \(index) acted on the revocation")
            }
            nodes.last!.fanout.deviceRevoked(revocation)
            #expect(newer.endReason == nil, "a token issued after the revocation keeps its stream")
            nodes.last!.hub.unregister(newer)
        }
    }
}
