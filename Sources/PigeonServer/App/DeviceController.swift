import HTTPTypes
import Hummingbird
import PigeonProtocol

/// `POST /v1/devices`: registration of a device (API.md 1.1, "Registration and identity"). A token, when given,
/// proves who the caller is: only then may a user that has devices get another one.
struct DeviceController: Sendable {
    let authenticator: Authenticator
    let abuse: AbuseGuard
    let metrics: PigeonMetrics
    let openRegistration: Bool
    let trustedProxies: [AddressBlock]
    let maxBodyBytes: Int

    func addRoutes(to group: RouterGroup<PigeonRequestContext>) {
        group.post("/devices", use: register)
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
