import ArgumentParser
import PigeonContract
import PigeonServer

/// `pigeon-server contract openapi|asyncapi`: prints a contract document, the bytes `GET /openapi.json` and
/// `GET /asyncapi.json` serve (docs/openapi.json and docs/asyncapi.json are these, committed).
struct Contract: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Print the machine-readable contract: openapi (OpenAPI 3.1, the HTTP routes) or asyncapi (AsyncAPI 3.0, the WebSocket and SSE).",
        discussion: "The same bytes as GET /openapi.json and GET /asyncapi.json, whatever the configuration. Example: pigeon-server contract openapi > docs/openapi.json")

    @Argument(help: "openapi or asyncapi.")
    var document: ContractDocument

    func run() throws {
        print(document.text, terminator: "")
    }
}

extension ContractDocument: ExpressibleByArgument {}
