import HTTPTypes
import Hummingbird
import PigeonProtocol

extension PigeonCore {
    /// `POST /v1/devices`: registration of a device (API.md 1.1, "Registration and identity").
    func addDeviceRoutes(to router: Router<PigeonRequestContext>) {
        let limit = configuration.maxBodyBytes

        router.post("/v1/devices") { request, context -> Response in
            guard self.configuration.isOpenRegistrationEnabled else {
                throw PigeonError(.unauthorized, "open device registration is disabled on this server")
            }
            // A token proves who the caller is: only then may a user that has devices get another one.
            let caller = request.headers[.authorization] == nil ? nil : try await self.authenticate(request)
            try self.abuse.admitRegistration(from: ClientAddress.limitKey(self.clientAddress(request, context)))
            let body = try await JSONBody.decode(RegisterDeviceRequest.self, from: request, limit: limit)
            guard Validation.isValidUserId(body.userId) else {
                throw PigeonError.invalid("userId must be 1-64 characters of [A-Za-z0-9._@-]")
            }
            if let name = body.deviceName, name.count > 128 { throw PigeonError.invalid("deviceName is longer than 128 characters") }
            if let name = body.deviceName, !Validation.isStorableText(name) {
                throw PigeonError.invalid("deviceName must not contain the character U+0000")
            }
            if let caller, caller.userId != body.userId {
                throw PigeonError(.forbidden, "a device's token registers devices of its own user only")
            }
            let registration: DeviceRegistration
            do {
                registration = try await self.authenticator.register(
                    userId: body.userId, deviceName: body.deviceName, rule: self.abuse.registrationRule(authenticated: caller != nil))
            } catch let error as PigeonError where error.code == .forbidden {
                self.metrics.limitHit("devices_per_user")
                throw error
            }
            return try JSONBody.response(registration, status: .created)
        }
    }

    /// The warning logged at start while open registration is on.
    func warnOpenRegistration() {
        logger.warning(
            "open registration is on: anyone who reaches this server can register a new userId's first device (further devices need a token of the user's devices); turn it off with --no-open-registration and mint JWTs in your backend",
            metadata: ["address": "\(configuration.host):\(configuration.port)"])
    }

    /// The client address of a request, for the per-address limits (``ClientAddress``).
    func clientAddress(_ request: Request, _ context: PigeonRequestContext) -> String {
        let forwarded = request.headers[values: HTTPField.Name("X-Forwarded-For")!]
        return ClientAddress.resolve(
            peer: context.remoteAddress, forwardedFor: forwarded.isEmpty ? nil : forwarded.joined(separator: ","),
            trustedProxies: configuration.trustedProxies)
    }
}
