import Foundation
import PigeonProtocol

extension HTTPTransport {
    /// `GET /v1/devices`: the user's devices, oldest first.
    func devices() async throws -> [DeviceInfo] {
        let list: DeviceList = try await call(.GET, "/v1/devices", body: Empty?.none)
        return list.devices
    }

    /// `DELETE /v1/devices/{deviceId}`.
    func revokeDevice(_ deviceId: String) async throws {
        let encoded = deviceId.addingPercentEncoding(withAllowedCharacters: .urlPathAllowed.subtracting(CharacterSet(charactersIn: "/"))) ?? deviceId
        let _: Empty = try await call(.DELETE, "/v1/devices/\(encoded)", body: Empty?.none)
    }
}
