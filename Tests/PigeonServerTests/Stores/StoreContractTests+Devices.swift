import Foundation
import PigeonDomain
import PigeonPostgres
import PigeonProtocol
@testable import PigeonServer
import PigeonTestSupport
import Testing

/// The ``MessageStore`` device contract (API.md 1.1, "Devices: list and revoke") on both stores.
extension StoreContractTests {
    static let openRule = DeviceRegistrationRule(onlyFirstDevice: true, maxDevices: 10)
    static let tokenRule = DeviceRegistrationRule(onlyFirstDevice: false, maxDevices: 10)

    /// A user's devices are listed oldest first, another user's never; a revocation takes the device out of the list,
    /// makes its token unknown and is refused a second time, and nothing else changes.
    @Test(arguments: Kind.allCases) func devicesAreListedAndRevokedOncePerUser(_ kind: Kind) async throws {
        try await Self.withStores(kind) { stores, _ in
            let store = stores[0]
            let laptop = try await store.registerDevice(userId: "alice", name: "laptop", tokenHash: "h-laptop", rule: Self.openRule)
            try await Task.sleep(for: .milliseconds(2))
            let phone = try await store.registerDevice(userId: "alice", name: nil, tokenHash: "h-phone", rule: Self.tokenRule)
            let bob = try await store.registerDevice(userId: "bob", name: "bob's", tokenHash: "h-bob", rule: Self.openRule)

            let listed = try await store.devices(of: "alice")
            #expect(listed.map(\.deviceId) == [laptop.deviceId, phone.deviceId])
            #expect(listed.map(\.name) == ["laptop", nil])
            #expect(listed.allSatisfy { $0.lastSeenAt == $0.createdAt })
            #expect(listed[0].createdAt <= listed[1].createdAt)

            // Another user's device id, under this user: nothing to revoke, nothing changes.
            #expect(try await store.revokeDevice(DeviceIdentity(userId: "alice", deviceId: bob.deviceId), at: WallClock.nowMillis()) == nil)
            #expect(try await store.device(tokenHash: "h-bob") == bob)
            #expect(try await store.devices(of: "bob").map(\.deviceId) == [bob.deviceId])

            let now = WallClock.nowMillis()
            let revocation = try #require(try await store.revokeDevice(phone, at: now))
            #expect(revocation == DeviceRevocation(device: phone, revokedAt: now))
            #expect(try await store.device(tokenHash: "h-phone") == nil)
            #expect(try await store.device(tokenHash: "h-laptop") == laptop)
            #expect(try await store.devices(of: "alice").map(\.deviceId) == [laptop.deviceId])
            #expect(try await store.revokeDevice(phone, at: now + 1) == nil, "a revoked device is not revoked twice")
        }
    }

    /// A revoked device keeps counting as one the user has had (open registration stays closed for that userId), but
    /// not against the most devices a user may have.
    @Test(arguments: Kind.allCases) func aRevokedDeviceStillCountsForOpenRegistrationButNotForTheLimit(_ kind: Kind) async throws {
        try await Self.withStores(kind) { stores, _ in
            let store = stores[0]
            let only = try await store.registerDevice(userId: "carol", name: nil, tokenHash: "h-only", rule: Self.openRule)
            #expect(try await store.revokeDevice(only, at: WallClock.nowMillis()) != nil)
            #expect(try await store.devices(of: "carol").isEmpty)
            await #expect(throws: PigeonError.self) {
                _ = try await store.registerDevice(userId: "carol", name: nil, tokenHash: "h-stranger", rule: Self.openRule)
            }
            #expect(try await store.device(tokenHash: "h-stranger") == nil)

            let limited = DeviceRegistrationRule(onlyFirstDevice: false, maxDevices: 1)
            let again = try await store.registerDevice(userId: "carol", name: nil, tokenHash: "h-again", rule: limited)
            #expect(try await store.devices(of: "carol").map(\.deviceId) == [again.deviceId])
            await #expect(throws: PigeonError.self) {
                _ = try await store.registerDevice(userId: "carol", name: nil, tokenHash: "h-third", rule: limited)
            }
        }
    }

    /// lastSeenAt only moves up, for the devices named; unknown devices are skipped.
    @Test(arguments: Kind.allCases) func lastSeenOnlyMovesUp(_ kind: Kind) async throws {
        try await Self.withStores(kind) { stores, _ in
            let store = stores[0]
            let device = try await store.registerDevice(userId: "dan", name: nil, tokenHash: "h-dan", rule: Self.openRule)
            _ = try await store.registerDevice(userId: "erin", name: nil, tokenHash: "h-erin", rule: Self.openRule)
            let created = try #require(try await store.devices(of: "dan").first).createdAt
            try await store.recordDevicesSeen([device: created + 60_000, DeviceIdentity(userId: "dan", deviceId: "unknown"): created + 1])
            #expect(try await store.devices(of: "dan").map(\.lastSeenAt) == [created + 60_000])
            try await store.recordDevicesSeen([device: created + 30_000])
            #expect(try await store.devices(of: "dan").map(\.lastSeenAt) == [created + 60_000], "never moves back")
            #expect(try await store.devices(of: "erin").map(\.lastSeenAt) == [try #require(try await store.devices(of: "erin").first).createdAt])
        }
    }

    /// A JWT device is recorded on first sight (listed, no name) once; two users' equal `did`s are two devices; after
    /// a revocation, tokens issued up to its second stay refused, and a later one lists the device again without
    /// letting the older tokens back in.
    @Test(arguments: Kind.allCases) func jwtDevicesAreRecordedAndRevokedByIssueTime(_ kind: Kind) async throws {
        try await Self.withStores(kind) { stores, _ in
            let store = stores[0]
            let device = DeviceIdentity(userId: "fay", deviceId: "shared-did")
            let sameDid = DeviceIdentity(userId: "gus", deviceId: "shared-did")
            let now = WallClock.nowMillis()
            #expect(try await store.recordJWTDevice(device, issuedAt: now / 1000, at: now) == JWTDeviceState(lastRevokedAt: nil, isListed: true))
            #expect(try await store.recordJWTDevice(device, issuedAt: now / 1000, at: now + 5) == JWTDeviceState(lastRevokedAt: nil, isListed: true))
            _ = try await store.recordJWTDevice(sameDid, issuedAt: nil, at: now)
            let listed = try await store.devices(of: "fay")
            #expect(listed.map(\.deviceId) == ["shared-did"] && listed.map(\.name) == [nil] && listed.map(\.createdAt) == [now])
            #expect(try await store.devices(of: "gus").map(\.deviceId) == ["shared-did"])

            let revokedAt = now + 1_000
            #expect(try await store.revokeDevice(device, at: revokedAt) != nil)
            #expect(try await store.devices(of: "fay").isEmpty)
            #expect(try await store.devices(of: "gus").count == 1, "the other user's device of the same did stays")
            for issuedAt in [nil, revokedAt / 1000 - 5, revokedAt / 1000] {
                let state = try await store.recordJWTDevice(device, issuedAt: issuedAt, at: revokedAt + 10)
                #expect(state == JWTDeviceState(lastRevokedAt: revokedAt, isListed: false), "iat \(String(describing: issuedAt))")
                #expect(state.refuses(tokenIssuedAt: issuedAt))
            }
            #expect(try await store.devices(of: "fay").isEmpty)

            let newer = revokedAt / 1000 + 1
            let state = try await store.recordJWTDevice(device, issuedAt: newer, at: revokedAt + 2_000)
            #expect(state == JWTDeviceState(lastRevokedAt: revokedAt, isListed: true))
            #expect(!state.refuses(tokenIssuedAt: newer) && state.refuses(tokenIssuedAt: revokedAt / 1000))
            #expect(try await store.devices(of: "fay").map(\.deviceId) == ["shared-did"])
            #expect(try await store.recordJWTDevice(device, issuedAt: nil, at: revokedAt + 3_000).refuses(tokenIssuedAt: nil))
        }
    }

    /// PostgreSQL: every node reads the revocations in commit order after the last one it read; a node that started
    /// later begins after the revocations before it.
    @Test func postgresRevocationsAreReadInOrderByEveryNode() async throws {
        try await Self.withStores(.postgres, nodes: 2) { stores, _ in
            let (a, b) = (try #require(stores[0] as? PostgresMessageStore), try #require(stores[1] as? PostgresMessageStore))
            var devices: [DeviceIdentity] = []
            for index in 0..<3 {
                devices.append(try await a.registerDevice(userId: "hal\(index)", name: nil, tokenHash: "h-hal\(index)", rule: Self.openRule))
            }
            #expect(try await PostgresMessageStore.readRevocations(b.client, after: 0, limit: 10, logger: b.logger).revocations.isEmpty)
            for device in devices { _ = try await a.revokeDevice(device, at: WallClock.nowMillis()) }
            let all = try await PostgresMessageStore.readRevocations(b.client, after: 0, limit: 10, logger: b.logger)
            #expect(all.revocations.map(\.device) == devices)
            let firstTwo = try await PostgresMessageStore.readRevocations(b.client, after: 0, limit: 2, logger: b.logger)
            #expect(firstTwo.revocations.map(\.device) == Array(devices.prefix(2)))
            let rest = try await PostgresMessageStore.readRevocations(b.client, after: firstTwo.through, limit: 10, logger: b.logger)
            #expect(rest.revocations.map(\.device) == [devices[2]] && rest.through == all.through)
        }
    }
}
