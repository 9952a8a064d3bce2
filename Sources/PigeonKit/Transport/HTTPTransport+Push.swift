import Foundation
import PigeonProtocol

extension HTTPTransport {
    /// `PUT /v1/devices/current/push`: `204`.
    func registerPush(_ request: PushRegistrationRequest) async throws {
        let _: Empty = try await call(.PUT, "/v1/devices/current/push", body: request)
    }

    /// `GET /v1/devices/current/push`: this device's registration; the server's `not_found` when it has none.
    func pushRegistration() async throws -> PushRegistrationInfo {
        try await call(.GET, "/v1/devices/current/push", body: Empty?.none)
    }

    /// `DELETE /v1/devices/current/push`: `204`, also when there was none.
    func unregisterPush() async throws {
        let _: Empty = try await call(.DELETE, "/v1/devices/current/push", body: Empty?.none)
    }
}
