import PigeonProtocol

/// An authenticated device: who is calling.
public struct DeviceIdentity: Sendable, Hashable {
    public var userId: String
    public var deviceId: String

    public init(userId: String, deviceId: String) {
        self.userId = userId
        self.deviceId = deviceId
    }
}

/// What must hold for a device registration to be written.
public struct DeviceRegistrationRule: Sendable {
    /// Refuse (`401 unauthorized`) when the user already has a device: the caller did not prove it is that user.
    public var onlyFirstDevice: Bool
    /// Refuse (`403 forbidden`) when the user already has this many devices, counting those revoked since
    /// ``revokedSince``.
    public var maxDevices: Int
    /// Devices revoked at or after this time (milliseconds since the epoch) still count toward ``maxDevices``: a user
    /// cannot register and revoke devices without end to get fresh per-device budgets.
    public var revokedSince: Int64

    /// How long a revoked device still counts toward the cap.
    public static let revocationWindow: Int64 = 3_600_000

    public init(onlyFirstDevice: Bool, maxDevices: Int, revokedSince: Int64 = Int64.max) {
        self.onlyFirstDevice = onlyFirstDevice
        self.maxDevices = maxDevices
        self.revokedSince = revokedSince
    }

    /// The refusal for a user that has ever had `everHad` devices (revoked ones included: a userId whose devices were
    /// all revoked is still taken) of which `active` are not revoked or were revoked since ``revokedSince``, or `nil`
    /// when the registration may be written.
    package func refusal(everHad: Int, active: Int) -> PigeonError? {
        if onlyFirstDevice && everHad > 0 {
            return PigeonError(.unauthorized, "this userId already has devices: register another one with the token of one of them")
        }
        if active >= maxDevices {
            return PigeonError(
                .forbidden,
                "this user has \(active) devices (counting those revoked in the last hour), the most allowed; revoke one and wait, or reuse a device")
        }
        return nil
    }
}

/// A device of a user as the store keeps it: registered, or seen through a JWT (API.md 1.1, "Devices: list and
/// revoke").
public struct DeviceRecord: Sendable, Equatable {
    public var deviceId: String
    /// The name it registered with; `nil` for none (always for a device seen through a JWT).
    public var name: String?
    /// When it registered, or was first seen through a JWT (milliseconds since the epoch).
    public var createdAt: Int64
    /// When it last made an authenticated request, as last written (``DeviceActivity`` writes it at most once a
    /// minute per device).
    public var lastSeenAt: Int64

    public init(deviceId: String, name: String?, createdAt: Int64, lastSeenAt: Int64) {
        self.deviceId = deviceId
        self.name = name
        self.createdAt = createdAt
        self.lastSeenAt = lastSeenAt
    }
}

/// A committed revocation of a device.
public struct DeviceRevocation: Sendable, Hashable {
    public var device: DeviceIdentity
    /// When it was revoked (milliseconds since the epoch).
    public var revokedAt: Int64

    public init(device: DeviceIdentity, revokedAt: Int64) {
        self.device = device
        self.revokedAt = revokedAt
    }

    /// The last second (of a JWT's `iat`) whose tokens the revocation refuses: a token of the device issued in a later
    /// second is accepted; one issued in this second or before, or without `iat`, is not. Opaque tokens are gone.
    public var tokensIssuedThrough: Int64 { revokedAt / 1000 }

    /// Whether a token of this device issued at `issuedAt` (a JWT's `iat` in seconds; `nil`: an opaque token or a
    /// JWT without `iat`) is refused by this revocation.
    public func refuses(tokenIssuedAt issuedAt: Int64?) -> Bool {
        guard let issuedAt else { return true }
        return issuedAt <= tokensIssuedThrough
    }
}

/// What the store knows of a device seen through a JWT (``MessageStore/recordJWTDevice(_:issuedAt:at:)``).
public struct JWTDeviceState: Sendable, Equatable {
    /// Its latest revocation, if it was ever revoked: tokens issued up to that second stay refused.
    public var lastRevokedAt: Int64?
    /// Whether it is listed in `GET /v1/devices` (not revoked, or seen again with a token issued after its
    /// revocation).
    public var isListed: Bool

    public init(lastRevokedAt: Int64?, isListed: Bool) {
        self.lastRevokedAt = lastRevokedAt
        self.isListed = isListed
    }

    /// Whether a token issued at `issuedAt` (seconds; `nil`: no `iat`) is refused by the device's latest revocation.
    public func refuses(tokenIssuedAt issuedAt: Int64?) -> Bool {
        guard let lastRevokedAt else { return false }
        guard let issuedAt else { return true }
        return issuedAt <= lastRevokedAt / 1000
    }
}
