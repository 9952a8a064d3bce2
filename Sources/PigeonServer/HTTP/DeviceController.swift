import HTTPTypes
import Hummingbird
import Logging
import PigeonDomain
import PigeonProtocol

/// `POST /v1/devices`: registration of a device (API.md 1.1, "Registration and identity"). A token, when given,
/// proves who the caller is: only then may a user that has devices get another one.
///
/// `GET /v1/devices` and `DELETE /v1/devices/{deviceId}` (API.md 1.1, "Devices: list and revoke"): the caller's
/// user's devices, and their revocation. A revocation is committed, then acted on by every node through the
/// ``Fanout`` (this one before the answer): the device's tokens answer `401`, its streams end.
struct DeviceController: Sendable {
    let authenticator: Authenticator
    let store: any DeviceStore
    let pushStore: any PushStore
    let fanout: any EventFanout
    let abuse: AbuseGuard
    let metrics: PigeonMetrics
    let openRegistration: Bool
    let trustedProxies: [AddressBlock]
    let maxBodyBytes: Int
    let logger: Logger

    /// `POST /v1/devices` (a token is optional there).
    func addRoutes(to group: RouterGroup<PigeonRequestContext>) {
        group.post("/devices", use: register)
    }

    /// `GET /v1/devices` and `DELETE /v1/devices/{deviceId}`, for an authenticated device.
    func addDeviceRoutes(to group: RouterGroup<DeviceRequestContext>) {
        group.get("/devices", use: list)
        group.delete("/devices/{deviceId}", use: revoke)
        group.put("/devices/current/push", use: registerPush)
        group.get("/devices/current/push", use: pushRegistration)
        group.delete("/devices/current/push", use: unregisterPush)
    }

    /// `PUT /v1/devices/current/push` (API.md 1.1): where the push gateway wakes the calling device. `204`; bad
    /// input is `400` and changes nothing.
    @Sendable func registerPush(_ request: Request, context: DeviceRequestContext) async throws -> Response {
        let body = try await JSONBody.decode(PushRegistrationRequest.self, from: request, limit: maxBodyBytes)
        if let problem = body.problem { throw PigeonError.invalid(problem) }
        let data = try PushPayload.encodeData(body.data)
        if let data, data.utf8.count > PushRegistrationRequest.maxDataBytes {
            throw PigeonError.invalid("data is larger than \(PushRegistrationRequest.maxDataBytes) bytes of JSON")
        }
        try await pushStore.setPushRegistration(body, data: data, for: context.device, at: WallClock.nowMillis())
        return Response(status: .noContent)
    }

    /// `GET /v1/devices/current/push` (docs/API.md, beyond API.md 1.1): the calling device's registration, `404` when
    /// it has none.
    @Sendable func pushRegistration(_ request: Request, context: DeviceRequestContext) async throws -> Response {
        guard let info = try await pushStore.pushRegistration(of: context.device) else {
            throw PigeonError(.notFound, "this device has no push registration")
        }
        return try JSONBody.response(info, status: .ok)
    }

    /// `DELETE /v1/devices/current/push` (API.md 1.1): `204`, also when there was none (a retried unregistration).
    @Sendable func unregisterPush(_ request: Request, context: DeviceRequestContext) async throws -> Response {
        try await pushStore.removePushRegistration(of: context.device)
        return Response(status: .noContent)
    }

    @Sendable func list(_ request: Request, context: DeviceRequestContext) async throws -> Response {
        let caller = context.device
        let records = try await store.devices(of: caller.userId)
        let devices = records.map { record in
            DeviceInfo(
                deviceId: record.deviceId, deviceName: record.name, createdAt: record.createdAt, lastSeenAt: record.lastSeenAt,
                current: record.deviceId == caller.deviceId)
        }
        return try JSONBody.response(DeviceList(devices: devices), status: .ok)
    }

    /// Revokes one of the caller's user's devices (itself included). An unknown id, another user's device, a revoked
    /// one and a malformed id are all `404` and change nothing (docs/API.md).
    @Sendable func revoke(_ request: Request, context: DeviceRequestContext) async throws -> Response {
        let caller = context.device
        guard let deviceId = context.parameters.decoded("deviceId"), JWTClaimRules.isValidDeviceId(deviceId) else {
            throw PigeonError(.notFound, "no such device: a device id is 1-128 printable ASCII characters without spaces")
        }
        let device = DeviceIdentity(userId: caller.userId, deviceId: deviceId)
        guard let revocation = try await store.revokeDevice(device, at: WallClock.nowMillis()) else {
            throw PigeonError(.notFound, "no device \(deviceId) among this user's devices")
        }
        fanout.deviceRevoked(revocation)
        logger.info(
            "device revoked",
            metadata: ["userId": "\(device.userId)", "deviceId": "\(device.deviceId)", "byDeviceId": "\(caller.deviceId)"])
        return Response(status: .noContent)
    }

    @Sendable func register(_ request: Request, context: PigeonRequestContext) async throws -> Response {
        guard openRegistration else { throw PigeonError(.unauthorized, "open device registration is disabled on this server") }
        let caller = request.headers[.authorization] == nil ? nil : try await authenticator.device(request, allowQuery: false)
        try abuse.admitRegistration(from: ClientAddress.limitKey(clientAddress(request, context)))
        let body = try await JSONBody.decode(RegisterDeviceRequest.self, from: request, limit: maxBodyBytes)
        guard Validation.isValidUserId(body.userId) else { throw PigeonError.invalid("userId must be 1-64 characters of [A-Za-z0-9._@-]") }
        if let name = body.deviceName, name.count > 128 { throw PigeonError.invalid("deviceName is longer than 128 characters") }
        if let name = body.deviceName, !Validation.isStorableText(name) {
            throw PigeonError.invalid("deviceName must not contain the character U+0000")
        }
        if let caller, caller.userId != body.userId {
            throw PigeonError(.forbidden, "a device's token registers devices of its own user only")
        }
        let registration: DeviceRegistration
        do {
            registration = try await authenticator.register(
                userId: body.userId, deviceName: body.deviceName, rule: abuse.registrationRule(authenticated: caller != nil))
        } catch let error as PigeonError where error.code == .forbidden {
            metrics.limitHit("devices_per_user")
            throw error
        }
        return try JSONBody.response(registration, status: .created)
    }

    /// The client address of a request, for the per-address limits (``ClientAddress``).
    private func clientAddress(_ request: Request, _ context: PigeonRequestContext) -> String {
        let forwarded = request.headers[values: HTTPField.Name("X-Forwarded-For")!]
        return ClientAddress.resolve(
            peer: context.remoteAddress, forwardedFor: forwarded.isEmpty ? nil : forwarded.joined(separator: ","),
            trustedProxies: trustedProxies)
    }
}
