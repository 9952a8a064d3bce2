import Hummingbird
import NIOCore
import PigeonContract

/// `GET /openapi.json` and `GET /asyncapi.json`: the contract documents (``ContractDocument``) of this server as
/// configured (no route of an option that is off), without authentication, with CORS like the `/v1` routes when
/// `--cors-origin` is set (``PigeonResponder``), so a browser-based tool on an allowed origin can read them.
struct ContractController: Sendable {
    /// What the server's options turn on.
    let availabilities: Set<ContractRoute.Availability>

    func addRoutes(to router: Router<PigeonRequestContext>) {
        for document in ContractDocument.allCases {
            let bytes = ByteBuffer(string: document.text(serving: availabilities))
            router.get(RouterPath(document.path)) { _, _ -> Response in
                Response(status: .ok, headers: [.contentType: "application/json"], body: .init(byteBuffer: bytes))
            }
        }
    }
}

extension ServerConfiguration {
    /// The contract's route availabilities these options turn on: what the served OpenAPI document lists.
    var contractAvailabilities: Set<ContractRoute.Availability> {
        var availabilities: Set<ContractRoute.Availability> = [.always]
        if adminToken != nil { availabilities.insert(.adminToken) }
        if webDemo { availabilities.insert(.web) }
        return availabilities
    }
}
