import Hummingbird
import NIOCore
import PigeonContract

/// `GET /openapi.json` and `GET /asyncapi.json`: the contract documents (``ContractDocument``), without
/// authentication, with CORS like the `/v1` routes when `--cors-origin` is set (``PigeonResponder``), so a
/// browser-based tool on an allowed origin can read them.
struct ContractController: Sendable {
    func addRoutes(to router: Router<PigeonRequestContext>) {
        for document in ContractDocument.allCases {
            let bytes = ByteBuffer(string: document.text)
            router.get(RouterPath(document.path)) { _, _ -> Response in
                Response(status: .ok, headers: [.contentType: "application/json"], body: .init(byteBuffer: bytes))
            }
        }
    }
}
