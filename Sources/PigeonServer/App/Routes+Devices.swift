import Hummingbird
import PigeonProtocol

extension PigeonCore {
    /// `POST /v1/devices`: registration of a device.
    func addDeviceRoutes(to router: Router<PigeonRequestContext>) {
        let limit = configuration.maxBodyBytes

        router.post("/v1/devices") { request, _ -> Response in
            guard self.configuration.isOpenRegistrationEnabled else {
                throw PigeonError(.unauthorized, "open device registration is disabled on this server")
            }
            let body = try await JSONBody.decode(RegisterDeviceRequest.self, from: request, limit: limit)
            guard Validation.isValidUserId(body.userId) else {
                throw PigeonError.invalid("userId must be 1-64 characters of [A-Za-z0-9._@-]")
            }
            if let name = body.deviceName, name.count > 128 { throw PigeonError.invalid("deviceName is longer than 128 characters") }
            if let name = body.deviceName, !Validation.isStorableText(name) {
                throw PigeonError.invalid("deviceName must not contain the character U+0000")
            }
            return try JSONBody.response(try await self.authenticator.register(userId: body.userId, deviceName: body.deviceName), status: .created)
        }
    }
}
