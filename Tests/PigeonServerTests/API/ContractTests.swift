import Foundation
import Hummingbird
import HummingbirdTesting
import Logging
import NIOHTTP1
import PigeonContract
import PigeonDomain
import PigeonProtocol
@testable import PigeonServer
import PigeonTestSupport
import Testing

/// The machine-readable contract (docs/API.md, "The machine-readable contract"): the OpenAPI document names exactly
/// the routes the real router registers, the committed documents are what the server serves, the AsyncAPI document
/// names every event and operation PigeonProtocol knows, and real frames and answers validate against the schemas.
@Suite struct ContractTests {
    /// The repository's docs/ folder.
    static let docs = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("docs")

    static func parsed(_ document: ContractDocument) throws -> [String: Any] {
        try #require(try JSONSerialization.jsonObject(with: Data(document.text.utf8)) as? [String: Any])
    }

    /// Turns on what `availability` needs (a new option's route adds its case here).
    static func enable(_ availability: ContractRoute.Availability, in configuration: inout ServerConfiguration) {
        switch availability {
        case .always: break
        case .adminToken: configuration.adminToken = "contract-admin-token"
        case .web: configuration.webDemo = true
        }
    }

    /// The routes the real application registers with `configure`, as "METHOD /path".
    static func registeredRoutes(_ configure: (inout ServerConfiguration) -> Void) async throws -> Set<String> {
        let directory = makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        var configuration = ServerConfiguration()
        configuration.port = 0
        configuration.dataDirectory = directory
        configuration.durable = false
        configure(&configuration)
        var logger = Logger(label: "contract-test")
        logger.logLevel = .warning
        let app = try await PigeonApplication.make(configuration: configuration, logger: logger)
        let routes = Set(app.responder.registeredRoutes.map { "\($0.method.rawValue) \($0.path)" })
        // Run it once, so its services start and shut down cleanly (and the documents are served).
        try await app.test(.live) { client in
            let answer = try await client.execute(uri: "/openapi.json", method: .get)
            #expect(answer.status == .ok)
        }
        return routes
    }

    /// Every registered route is documented and every documented route is registered: with no option, and with every
    /// option that adds routes turned on. A failure names each route missing on either side.
    @Test func theDocumentNamesExactlyTheRoutesTheRouterRegisters() async throws {
        let everyOption = ContractRoute.Availability.allCases
        for options in [[ContractRoute.Availability.always], everyOption] {
            let registered = try await Self.registeredRoutes { configuration in
                for option in options { Self.enable(option, in: &configuration) }
            }
            let documented = Set(ContractRoute.all.filter { options.contains($0.availability) }.map { "\($0.method.rawValue) \($0.path)" })
            let context = "with \(options.compactMap(\.option).joined(separator: " ").isEmpty ? "no option" : options.compactMap(\.option).joined(separator: " "))"
            for route in registered.subtracting(documented).sorted() {
                Issue.record("\(context): the server registers \(route), which the contract does not document: add its row to ContractRoute.all")
            }
            for route in documented.subtracting(registered).sorted() {
                Issue.record("\(context): the contract documents \(route), which the server does not register")
            }
        }
        // The OpenAPI document holds every row, once.
        let paths = try #require(try Self.parsed(.openapi)["paths"] as? [String: [String: Any]])
        let inDocument = paths.flatMap { path, operations in operations.keys.map { "\($0.uppercased()) \(path)" } }
        #expect(Set(inDocument) == Set(ContractRoute.all.map { "\($0.method.rawValue) \($0.path)" }))
        #expect(inDocument.count == ContractRoute.all.count)
        #expect(Set(ContractRoute.all.map(\.operationId)).count == ContractRoute.all.count, "operationIds are unique")
        // Every {parameter} of a path is a path parameter of its route, and the reverse.
        for route in ContractRoute.all {
            let inPath = Set(route.path.split(separator: "/").filter { $0.hasPrefix("{") }.map { String($0.dropFirst().dropLast()) })
            let declared = Set(route.parameters.filter { $0.location == .path }.map(\.name))
            #expect(inPath == declared, "\(route.method) \(route.path): path parameters \(declared), in the path \(inPath)")
        }
    }

    /// docs/openapi.json and docs/asyncapi.json are byte for byte what the server serves and prints.
    @Test func theCommittedDocumentsAreTheServedOnes() async throws {
        for document in ContractDocument.allCases {
            let committed = try? String(contentsOf: Self.docs.appendingPathComponent("\(document.rawValue).json"), encoding: .utf8)
            #expect(
                committed == document.text,
                "docs/\(document.rawValue).json is not what the server serves: run `swift run pigeon-server contract \(document.rawValue) > docs/\(document.rawValue).json`"
            )
        }
        // With every option that adds routes on, the server serves the committed documents.
        try await withTestServer(configure: { for option in ContractRoute.Availability.allCases { Self.enable(option, in: &$0) } }) { client in
            for document in ContractDocument.allCases {
                let answer = try await client.request(.GET, document.path)
                #expect(answer.status == 200)
                #expect(answer.headers["content-type"] == "application/json")
                #expect(answer.text == document.text, "\(document.path)")
                #expect(BrowserTests.corsHeaders(answer.headers).isEmpty, "no CORS header without --cors-origin")
            }
        }
    }

    /// A server's own /openapi.json describes it as configured: without --web it has no `GET /`, without --admin-token
    /// no admin route (schemathesis met `GET /` documented and answering 404); every route it lists answers.
    @Test func theServedDocumentListsOnlyTheRoutesOfTheServersOptions() async throws {
        let everyOption = ContractRoute.Availability.allCases
        for options in [[ContractRoute.Availability.always], [.always, .adminToken], [.always, .web], everyOption] {
            try await withTestServer(configure: { for option in options { Self.enable(option, in: &$0) } }) { client in
                let answer = try await client.request(.GET, "/openapi.json")
                #expect(answer.text == ContractDocument.openapi.text(serving: Set(options)))
                let served = try #require(try JSONSerialization.jsonObject(with: Data(answer.text.utf8)) as? [String: Any])
                let paths = try #require(served["paths"] as? [String: [String: Any]])
                let listed = Set(paths.flatMap { path, operations in operations.keys.map { "\($0.uppercased()) \(path)" } })
                let expected = Set(ContractRoute.all.filter { options.contains($0.availability) }.map { "\($0.method.rawValue) \($0.path)" })
                #expect(listed == expected, "with \(options)")
                #expect(paths["/"] == nil || options.contains(.web), "GET / is listed only with --web")
                #expect(!paths.keys.contains { $0.hasPrefix("/v1/admin") } || options.contains(.adminToken))
                // The pages and admin routes it lists exist: GET / answers 200 with --web, and 404 (unlisted) without.
                #expect(try await client.request(.GET, "/").status == (options.contains(.web) ? 200 : 404))
            }
        }
    }

    /// What OpenAPI cannot say in parameters is said beside them: `after` and `before` exclude each other (a `400`
    /// the operation documents), and the SSE answer names the schema of each of its events.
    @Test func exclusiveParametersAndTheServerSentEventsAreDescribed() throws {
        let paths = try #require(try Self.parsed(.openapi)["paths"] as? [String: [String: [String: Any]]])
        for path in ["/v1/conversations/{id}/messages", "/v1/conversations/{id}/threads/{serverId}/messages"] {
            let operation = try #require(paths[path]?["get"])
            #expect(operation["x-pigeon-exclusive-parameters"] as? [[String]] == [["after", "before"]], "\(path)")
            let parameters = try #require(operation["parameters"] as? [[String: Any]])
            for name in ["after", "before"] {
                let description = try #require(parameters.first { $0["name"] as? String == name }?["description"] as? String)
                #expect(description.contains("400"), "\(path) \(name): \(description)")
            }
            #expect((operation["responses"] as? [String: Any])?["400"] != nil, "\(path) documents its 400")
        }
        let events = try #require(paths["/v1/events"]?["get"])
        let ok = try #require((events["responses"] as? [String: Any])?["200"] as? [String: Any])
        let stream = try #require((ok["content"] as? [String: Any])?["text/event-stream"] as? [String: Any])
        let schema = try #require(stream["schema"] as? [String: Any])
        // The schema of each event (how tools read a 3.1 document's text/event-stream schema).
        #expect(schema["$ref"] as? String == "#/components/schemas/ServerSentEvent")
        let schemas = try #require((try Self.parsed(.openapi)["components"] as? [String: Any])?["schemas"] as? [String: [String: Any]])
        let item = try #require(schemas["ServerSentEvent"])
        let properties = try #require(item["properties"] as? [String: [String: Any]])
        // `data` is the event's JSON as text: a string whose content is an Event.
        #expect(properties["data"]?["type"] as? String == "string")
        #expect(properties["data"]?["contentMediaType"] as? String == "application/json")
        #expect((properties["data"]?["contentSchema"] as? [String: Any])?["$ref"] as? String == "#/components/schemas/Event")
        #expect(Set(properties["event"]?["enum"] as? [String] ?? []) == Set(ServerEvent.Kind.allCases.map(\.rawValue)))
    }

    /// With --cors-origin the documents answer like the /v1 routes: a page of an allowed origin may read them.
    @Test func theDocumentsCarryCORSLikeTheAPI() async throws {
        try await withTestServer(configure: { $0.corsOrigins = [BrowserTests.page] }) { client in
            for document in ContractDocument.allCases {
                let answer = try await client.request(.GET, document.path, headers: ["Origin": BrowserTests.page])
                #expect(answer.status == 200)
                #expect(answer.headers["access-control-allow-origin"] == BrowserTests.page, "\(document.path): \(answer.headers)")
                #expect(answer.headers["vary"]?.contains("Origin") == true)
                let preflight = try await BrowserTests.preflight(client, document.path, origin: BrowserTests.page, method: "GET")
                BrowserTests.expectPreflightAllowed(preflight, allowOrigin: BrowserTests.page, methods: "GET", "preflight of \(document.path)")
                let stranger = try await client.request(.GET, document.path, headers: ["Origin": BrowserTests.stranger])
                #expect(stranger.status == 200 && stranger.headers["access-control-allow-origin"] == nil)
            }
        }
    }

    /// Every event type and client operation PigeonProtocol knows (its enums, not a copied list) is in the AsyncAPI
    /// document, on the right channels, and every event type is a branch of /v1/sync's events in the OpenAPI one.
    @Test func theAsyncAPIDocumentNamesEveryEventOperationAndCloseCode() throws {
        let document = try Self.parsed(.asyncapi)
        let components = try #require(document["components"] as? [String: Any])
        let messages = try #require(components["messages"] as? [String: [String: Any]])
        let schemas = try #require(components["schemas"] as? [String: [String: Any]])
        /// The `type` or `op` constant of each message of a channel.
        func constants(_ channel: String, _ key: String) throws -> Set<String> {
            let channels = try #require(document["channels"] as? [String: [String: Any]])
            let references = try #require(channels[channel]?["messages"] as? [String: [String: String]])
            return Set(
                references.values.compactMap { reference -> String? in
                    guard let name = reference["$ref"]?.split(separator: "/").last, let message = messages[String(name)],
                        let payload = (message["payload"] as? [String: String])?["$ref"]?.split(separator: "/").last,
                        let schema = schemas[String(payload)], let properties = schema["properties"] as? [String: [String: Any]]
                    else { return nil }
                    return properties[key]?["const"] as? String
                })
        }
        let eventTypes = Set(ServerEvent.Kind.allCases.map(\.rawValue))
        let ops = Set(ClientOperation.Op.allCases.map(\.rawValue))
        #expect(try constants("webSocket", "type") == eventTypes.union(["ack", "error"]))
        #expect(try constants("webSocket", "op") == ops)
        #expect(try constants("serverSentEvents", "type") == eventTypes)
        let operations = try #require(document["operations"] as? [String: [String: Any]])
        let received = operations.values.filter { $0["action"] as? String == "receive" }.count
        #expect(received == ops.count, "one receive operation per client operation")
        let codes = try #require((document["channels"] as? [String: [String: Any]])?["webSocket"]?["x-pigeon-close-codes"] as? [[String: Any]])
        let closeCodes = Set(codes.compactMap { $0["code"] as? Int })
        for reason in StreamSession.EndReason.allCases { #expect(closeCodes.contains(reason.webSocketClose.code), "\(reason)") }
        #expect(closeCodes.isSuperset(of: [1000, 1007, 1009]))

        // The OpenAPI document's events are the same schemas.
        let openAPISchemas = try #require((try Self.parsed(.openapi)["components"] as? [String: Any])?["schemas"] as? [String: [String: Any]])
        let branches = try #require(openAPISchemas["Event"]?["oneOf"] as? [[String: String]])
        #expect(branches.count == ServerEvent.Kind.allCases.count)
        for kind in ServerEvent.Kind.allCases {
            let name = ContractSchemas.eventName(kind)
            #expect(branches.contains { $0["$ref"] == "#/components/schemas/\(name)" }, "\(kind) in /v1/sync's events")
            #expect(NSDictionary(dictionary: openAPISchemas[name] ?? [:]).isEqual(to: schemas[name] ?? [:]), "\(name): one schema in both documents")
        }
    }

    /// A sample of every client operation, as PigeonKit encodes it (exhaustive over the protocol's operations).
    static func sample(_ op: ClientOperation.Op) -> ClientOperation {
        let conversationId = newId()
        switch op {
        case .send: return .send(conversationId: conversationId, SendMessageRequest(clientMessageId: newId(), type: "text", body: "hi", clientTimestamp: 1))
        case .receipt: return .receipt(conversationId: conversationId, ReceiptRequest(kind: .read, upToSeq: 3))
        case .typing: return .typing(conversationId: conversationId, active: true)
        case .edit: return .edit(conversationId: conversationId, serverId: newId(), EditMessageRequest(clientMessageId: newId(), body: "b", clientTimestamp: 2))
        case .delete: return .delete(conversationId: conversationId, serverId: newId(), DeleteMessageRequest(clientMessageId: newId(), clientTimestamp: 2))
        case .react: return .react(conversationId: conversationId, ReactRequest(serverId: newId(), key: "👍", action: .add, clientMessageId: newId()))
        }
    }

    @Test func everyClientOperationAsEncodedValidates() throws {
        let validator = JSONSchemaSubset(document: try Self.parsed(.asyncapi))
        for op in ClientOperation.Op.allCases {
            let operation = Self.sample(op)
            #expect(operation.op == op)
            let json = try JSONSerialization.jsonObject(with: JSONEncoder().encode(operation))
            #expect(validator.problems(json, against: "ClientOperation").isEmpty, "\(op): \(validator.problems(json, against: "ClientOperation"))")
            #expect(validator.problems(json, against: ContractSchemas.operationName(op)).isEmpty)
        }
        // And the validator refuses what the schemas refuse.
        let bad: [String] = [
            #"{"op":"send","conversationId":"not-a-uuid","clientMessageId":"6f1e2a4c-8f0e-4a51-9c5b-0d8f1e2a4c8f","type":"text","body":"x","clientTimestamp":1}"#,
            #"{"op":"receipt","conversationId":"6f1e2a4c-8f0e-4a51-9c5b-0d8f1e2a4c8f","kind":"seen","upToSeq":1}"#,
            #"{"op":"typing","conversationId":"6f1e2a4c-8f0e-4a51-9c5b-0d8f1e2a4c8f"}"#,
            #"{"op":"shout","conversationId":"6f1e2a4c-8f0e-4a51-9c5b-0d8f1e2a4c8f"}"#,
            #"{"op":"react","conversationId":"6f1e2a4c-8f0e-4a51-9c5b-0d8f1e2a4c8f","serverId":"6f1e2a4c-8f0e-4a51-9c5b-0d8f1e2a4c8f","key":"👍","action":"toggle","clientMessageId":"6f1e2a4c-8f0e-4a51-9c5b-0d8f1e2a4c8f"}"#,
            #"{"op":"react","conversationId":"6f1e2a4c-8f0e-4a51-9c5b-0d8f1e2a4c8f","serverId":"6f1e2a4c-8f0e-4a51-9c5b-0d8f1e2a4c8f","key":"Thumbs Up","action":"add","clientMessageId":"6f1e2a4c-8f0e-4a51-9c5b-0d8f1e2a4c8f"}"#,
            #"{"op":"send","conversationId":"6f1e2a4c-8f0e-4a51-9c5b-0d8f1e2a4c8f","clientMessageId":"6f1e2a4c-8f0e-4a51-9c5b-0d8f1e2a4c8f","type":"text","body":"x","clientTimestamp":1,"replyTo":"the first"}"#,
        ]
        for text in bad {
            let json = try JSONSerialization.jsonObject(with: Data(text.utf8))
            #expect(!validator.problems(json, against: "ClientOperation").isEmpty, "\(text) should not validate")
        }
    }

    /// A message with every field of version 1.2 (reactions, a quote, a thread and its summary), and one without any,
    /// as PigeonProtocol encodes them, validate against Message; a message without the new fields (an older encoding)
    /// does not, since a reader relies on them being there.
    @Test func messagesWithReactionsRepliesAndThreadsValidate() throws {
        let openAPI = JSONSchemaSubset(document: try Self.parsed(.openapi))
        let conversationId = newId()
        let root = Message(
            serverId: newId(), clientMessageId: newId(), conversationId: conversationId, seq: 3, senderId: "alice", senderDeviceId: newId(),
            type: "text", body: "the root", clientTimestamp: 1, acceptedAt: 2, storedAt: 3,
            reactions: [Reaction(key: "👍", count: 2, me: true), Reaction(key: "party_parrot", count: 1, me: false), Reaction(key: "👨‍👩‍👧", count: 1, me: false)],
            thread: ThreadSummary(replyCount: 2, lastReplyAt: 9, lastReplySenders: ["bob", "alice"]))
        let reply = Message(
            serverId: newId(), clientMessageId: newId(), conversationId: conversationId, seq: 4, senderId: "bob", senderDeviceId: "jwt-device.1",
            type: "text", body: "a reply", clientTimestamp: 4, acceptedAt: 5, storedAt: 6, editedAt: 7, replyTo: root.serverId,
            replyPreview: ReplyPreview(serverId: root.serverId, senderId: "alice", type: "text", body: String(repeating: "é", count: 150), deleted: false),
            threadRoot: root.serverId)
        let deletedReply = Message(
            serverId: newId(), clientMessageId: newId(), conversationId: conversationId, seq: 5, senderId: "alice", senderDeviceId: newId(),
            type: "text", body: "", clientTimestamp: 4, acceptedAt: 5, storedAt: 6, deletedAt: 8, threadRoot: root.serverId)
        let plain = Message(
            serverId: newId(), clientMessageId: newId(), conversationId: conversationId, seq: 1, senderId: "alice", senderDeviceId: newId(),
            type: "pigeon.members", body: "{}", clientTimestamp: 1, acceptedAt: 1, storedAt: 1)
        for message in [root, reply, deletedReply, plain] {
            let json = try JSONSerialization.jsonObject(with: JSONEncoder().encode(message))
            #expect(openAPI.problems(json, against: "Message").isEmpty, "\(openAPI.problems(json, against: "Message"))")
        }
        let encoded = try #require(try JSONSerialization.jsonObject(with: JSONEncoder().encode(plain)) as? [String: Any])
        #expect(encoded["replyTo"] is NSNull && encoded["thread"] is NSNull && (encoded["reactions"] as? [Any])?.isEmpty == true)
        for field in ["reactions", "replyTo", "replyPreview", "threadRoot", "thread"] {
            var older = encoded
            older[field] = nil
            #expect(!openAPI.problems(older, against: "Message").isEmpty, "a Message without \(field) validates")
        }
        // A count of 0 is never sent (the key is left out), nor a thread summary without replies.
        var zero = encoded
        zero["reactions"] = [["key": "👍", "count": 0, "me": false]]
        #expect(!openAPI.problems(zero, against: "Message").isEmpty)

        // The answers of the new routes.
        let answers: [(String, any Encodable)] = [
            ("ThreadPage", ThreadPage(root: root, messages: [reply, deletedReply], hasMore: false)),
            ("ReactionsResponse", ReactionsResponse(serverId: root.serverId, reactions: root.reactions)),
            ("ReactionsResponse", ReactionsResponse(serverId: root.serverId, reactions: [])),
            (
                "ReactionUsersPage",
                ReactionUsersPage(
                    users: [ReactionUser(userId: "alice", key: "👍", at: 1), ReactionUser(userId: "alice", key: "+1", at: 2), ReactionUser(userId: "bob", key: "👍", at: 3)],
                    hasMore: true)
            ),
            ("SendMessageRequest", SendMessageRequest(clientMessageId: newId(), type: "text", body: "x", clientTimestamp: 1, replyTo: root.serverId, threadRoot: root.serverId)),
            ("MessagePage", MessagePage(messages: [root, reply], hasMore: false)),
        ]
        for (schema, value) in answers {
            let json = try JSONSerialization.jsonObject(with: JSONEncoder().encode(value))
            #expect(openAPI.problems(json, against: schema).isEmpty, "\(schema): \(openAPI.problems(json, against: schema))")
        }
        // An explicit null replyTo and threadRoot are a plain send.
        let nulls = try JSONSerialization.jsonObject(
            with: Data(#"{"clientMessageId":"6f1e2a4c-8f0e-4a51-9c5b-0d8f1e2a4c8f","type":"text","body":"x","clientTimestamp":1,"replyTo":null,"threadRoot":null}"#.utf8))
        #expect(openAPI.problems(nulls, against: "SendMessageRequest").isEmpty)
    }

    /// The reaction event as PigeonProtocol encodes it is an Event and a ServerFrame in both documents.
    @Test func theReactionEventValidates() throws {
        let event = ServerEvent.reaction(
            cursor: "1-42",
            ReactionEvent(
                conversationId: newId(), serverId: newId(), key: "🎉", userId: "bob", action: .remove, reactions: [Reaction(key: "👍", count: 1, me: true)],
                at: 12))
        let json = try JSONSerialization.jsonObject(with: JSONEncoder().encode(event))
        for document in ContractDocument.allCases {
            let validator = JSONSchemaSubset(document: try Self.parsed(document))
            #expect(validator.problems(json, against: "Event").isEmpty, "\(document): \(validator.problems(json, against: "Event"))")
            #expect(validator.problems(json, against: ContractSchemas.eventName(.reaction)).isEmpty)
        }
        let asyncAPI = JSONSchemaSubset(document: try Self.parsed(.asyncapi))
        #expect(asyncAPI.problems(json, against: "ServerFrame").isEmpty)
        var noCursor = try #require(json as? [String: Any])
        noCursor["cursor"] = nil
        #expect(!asyncAPI.problems(noCursor, against: "Event").isEmpty, "a reaction event carries a cursor")
        // The react op's ack: the message's serverId, stored, no seq.
        let ack = try JSONSerialization.jsonObject(
            with: JSONEncoder().encode(AckFrame(clientMessageId: newId(), serverId: newId(), status: .stored, acceptedAt: 5)))
        #expect(asyncAPI.problems(ack, against: "ServerFrame").isEmpty, "\(asyncAPI.problems(ack, against: "ServerFrame"))")
    }

    /// The reaction key's pattern (of the key parameter, the react op and the reactions list's filter) allows what the
    /// server takes and refuses what it refuses: every emoji of one scalar it names, alone, with U+FE0F or with a skin
    /// tone, is a valid key (``Validation/isValidReactionKey(_:)``), and neither tokens out of their alphabet nor text
    /// pass it.
    @Test func theReactionKeyPatternAllowsOnlyValidKeys() throws {
        let document = try Self.parsed(.openapi)
        let paths = try #require(document["paths"] as? [String: [String: Any]])
        let put = try #require(paths["/v1/conversations/{id}/messages/{serverId}/reactions/{key}"]?["put"] as? [String: Any])
        let parameter = try #require((put["parameters"] as? [[String: Any]])?.first { $0["name"] as? String == "key" })
        let pattern = try #require((parameter["schema"] as? [String: Any])?["pattern"] as? String)
        let schemas = try #require((document["components"] as? [String: Any])?["schemas"] as? [String: [String: Any]])
        let react = try #require((schemas["ReactOperation"]?["properties"] as? [String: [String: Any]])?["key"]?["pattern"] as? String)
        #expect(react == pattern)
        let regex = try NSRegularExpression(pattern: pattern)
        func allowed(_ key: String) -> Bool { regex.firstMatch(in: key, range: NSRange(key.startIndex..., in: key)) != nil }
        let valid = [
            "👍", "🎉", "❤", "❤️", "☕", "👍🏽", "🇫", "1️⃣", "#⃣", "thumbs_up", "+1", "a:b-c", String(repeating: "z", count: 32),
        ]
        for key in valid {
            #expect(allowed(key), "\(key)")
            #expect(Validation.isValidReactionKey(key), "\(key)")
        }
        // The sequences the pattern leaves out (its description names them) are still keys the server takes.
        for key in ["🇫🇷", "👨‍👩‍👧", "🏴\u{E0067}\u{E0062}\u{E0065}\u{E006E}\u{E0067}\u{E007F}"] {
            #expect(!allowed(key) && Validation.isValidReactionKey(key), "\(key)")
        }
        for key in ["", "A", "a b", "é", "ab👍", "👍👍", "🇫🇷🇫", "<", String(repeating: "z", count: 33), "a\u{301}", "👍\u{301}"] {
            #expect(!allowed(key), "\(key)")
        }
        // Every scalar of the class is a key the server takes, also with U+FE0F and with a skin tone.
        let open = try #require(pattern.range(of: "|["))
        let close = try #require(pattern.range(of: "](", range: open.upperBound..<pattern.endIndex))
        let scalars = Array(pattern[open.upperBound..<close.lowerBound].unicodeScalars)
        var index = 0
        var count = 0
        while index < scalars.count {
            let first = scalars[index].value
            var last = first
            if index + 2 < scalars.count, scalars[index + 1] == "-" {
                last = scalars[index + 2].value
                index += 3
            } else {
                index += 1
            }
            for value in first...last {
                let key = String(Character(try #require(Unicode.Scalar(value))))
                for form in [key, key + "\u{FE0F}", key + "\u{1F3FD}"] {
                    #expect(Validation.isValidReactionKey(form) && allowed(form), "U+\(String(value, radix: 16)): \(form) is in the pattern and refused")
                }
                count += 1
            }
        }
        #expect(count > 1_000, "the pattern names \(count) emoji")
    }

    /// Real frames from a live server (WebSocket, SSE, /v1/sync) validate against the documents' schemas, and every
    /// event type the protocol knows is among them (reactions, a quote and a thread among them, with the answers of
    /// their routes and a 409) (`message.failed`, which a healthy embedded server never sends, is
    /// the store's own encoding of one).
    @Test func realFramesValidateAgainstTheSchemas() async throws {
        let asyncAPI = JSONSchemaSubset(document: try Self.parsed(.asyncapi))
        let openAPI = JSONSchemaSubset(document: try Self.parsed(.openapi))
        try await withTestServer { client in
            let alice = try await client.register("alice")
            let bob = try await client.register("bob")
            let start = try await client.headCursor(alice)
            // Bob's WebSocket from an unknown cursor (a reset first), alice's live, and bob's SSE.
            let unknown = try TestCursor.moved(try await client.headCursor(bob)) { $0 + 1_000_000 }
            let bobSocket = try await TestWebSocket.connect(port: client.port, token: bob.token, cursor: unknown)
            let aliceSocket = try await TestWebSocket.connect(port: client.port, token: alice.token)
            let bobSSE = try await TestSSE.open(port: client.port, token: bob.token)
            let conversation = try await client.createConversation(alice, members: ["bob"], name: "contract")
            aliceSocket.sendMessage(to: conversation.id, body: "over the socket")
            let sent = try await client.sendAccepted(alice, to: conversation.id, body: "over HTTP")
            // Stored first (asynchronously on the production backends): a receipt beyond lastSeq is clamped and moves nothing.
            _ = try await client.waitForCount(bob, conversation.id, 1)
            _ = try await client.receipt(bob, conversation.id, kind: .read, upToSeq: 1)
            _ = await aliceSocket.firstEvent { if case .receipt = $0 { true } else { false } }
            _ = try await client.typing(alice, conversation.id, active: true)
            let edit = try await client.request(
                .POST, "/v1/conversations/\(conversation.id)/messages/\(sent.serverId)/edit", token: alice.token,
                body: client.json(EditMessageRequest(clientMessageId: newId(), body: "edited", clientTimestamp: 2)))
            #expect(edit.status == 202)
            aliceSocket.send(.delete(conversationId: conversation.id, serverId: sent.serverId, DeleteMessageRequest(clientMessageId: newId(), clientTimestamp: 3)))
            aliceSocket.sendRaw(#"{"op":"send","conversationId":"nope"}"#)
            _ = await aliceSocket.first { if case .error = $0 { true } else { false } }
            _ = await bobSocket.firstEvent { if case .typing = $0 { true } else { false } }
            _ = await bobSocket.firstEvent { event in
                if case .messageNew(_, let message) = event { message.type == ServerMessageType.delete } else { false }
            }
            _ = await bobSSE.first { $0.event == "typing" }

            // Reactions, a quote and a thread: over HTTP and the WebSocket, and the answers of their routes.
            let root = try await client.sendAccepted(bob, to: conversation.id, body: "a thread's root")
            _ = try await client.waitForMessages(alice, conversation.id) { $0.contains { $0.serverId == root.serverId } }
            let reactions = "/v1/conversations/\(conversation.id)/messages/\(root.serverId)/reactions"
            let thumbs = try await client.request(.PUT, reactions + "/%F0%9F%91%8D", token: bob.token)
            #expect(thumbs.status == 200, "\(thumbs.text)")
            let reacted = try JSONSerialization.jsonObject(with: thumbs.body)
            #expect(openAPI.problems(reacted, against: "ReactionsResponse").isEmpty, "\(thumbs.text): \(openAPI.problems(reacted, against: "ReactionsResponse"))")
            aliceSocket.send(.react(conversationId: conversation.id, ReactRequest(serverId: root.serverId, key: "party_parrot", action: .add, clientMessageId: newId())))
            aliceSocket.send(.react(conversationId: conversation.id, ReactRequest(serverId: sent.serverId, key: "🎉", action: .add, clientMessageId: newId())))
            let reply = newId()
            aliceSocket.send(
                .send(
                    conversationId: conversation.id,
                    SendMessageRequest(clientMessageId: reply, type: "text", body: "a quote in the thread", clientTimestamp: 4, replyTo: root.serverId, threadRoot: root.serverId)))
            _ = await bobSocket.firstEvent { event in
                if case .messageNew(_, let message) = event { message.clientMessageId == reply } else { false }
            }
            _ = await bobSocket.firstEvent { if case .reaction(_, let event) = $0 { event.key == "party_parrot" } else { false } }
            _ = await bobSSE.first { $0.event == "reaction" && $0.data.contains("party_parrot") }
            let conflict = try await client.request(.DELETE, "/v1/conversations/\(conversation.id)/messages/\(sent.serverId)/reactions/x", token: bob.token)
            #expect(conflict.status == 409, "a deleted message's reaction: \(conflict.text)")
            let documented = try #require(try Self.parsed(.openapi)["paths"] as? [String: [String: Any]])
            let removeReaction = documented["/v1/conversations/{id}/messages/{serverId}/reactions/{key}"]?["delete"] as? [String: Any]
            #expect((removeReaction?["responses"] as? [String: Any])?["409"] != nil, "409 is a documented answer of removeReaction")
            #expect(openAPI.problems(try JSONSerialization.jsonObject(with: conflict.body), against: "Error").isEmpty)
            let pages: [(String, String)] = [
                ("/v1/conversations/\(conversation.id)/threads/\(root.serverId)/messages", "ThreadPage"),
                (reactions + "?limit=1", "ReactionUsersPage"),
                ("/v1/conversations/\(conversation.id)/messages", "MessagePage"),
            ]
            for (path, schema) in pages {
                let page = try await client.request(.GET, path, token: alice.token)
                #expect(page.status == 200, "\(path): \(page.text)")
                let json = try JSONSerialization.jsonObject(with: page.body)
                #expect(openAPI.problems(json, against: schema).isEmpty, "\(path): \(page.text): \(openAPI.problems(json, against: schema))")
            }
            let thread = try await client.request(.GET, pages[0].0, token: alice.token).decode(ThreadPage.self)
            #expect(thread.root.thread?.replyCount == 1 && thread.root.reactions.count == 2 && thread.messages.map(\.clientMessageId) == [reply])
            #expect(thread.messages.first?.replyPreview?.body == "a thread's root")

            var frames = await aliceSocket.rawInbox.drain(for: .milliseconds(300)) + bobSocket.rawInbox.drain(for: .milliseconds(300))
            var seen = Set<String>()
            for text in frames {
                let json = try JSONSerialization.jsonObject(with: Data(text.utf8))
                let problems = asyncAPI.problems(json, against: "ServerFrame")
                #expect(problems.isEmpty, "WebSocket frame \(text): \(problems)")
                if let type = (json as? [String: Any])?["type"] as? String { seen.insert(type) }
            }
            #expect(
                seen.isSuperset(of: ["reset", "conversation.created", "message.new", "message.stored", "receipt", "typing", "reaction", "ack", "error"]),
                "\(seen)")

            // SSE: the data of each event is its event schema; its id is the cursor, its event the type.
            frames = []
            for event in await bobSSE.events.drain(for: .milliseconds(300)) {
                let json = try JSONSerialization.jsonObject(with: Data(event.data.utf8))
                let object = json as? [String: Any]
                #expect(event.event == object?["type"] as? String)
                #expect(event.id == object?["cursor"] as? String)
                let problems = asyncAPI.problems(json, against: "Event")
                #expect(problems.isEmpty, "SSE event \(event.data): \(problems)")
                frames.append(event.data)
            }
            #expect(frames.count >= 4, "\(frames)")

            // /v1/sync, against the OpenAPI document (the same event schemas).
            let answer = try await client.request(.GET, "/v1/sync?cursor=\(start)", token: alice.token)
            let sync = try JSONSerialization.jsonObject(with: answer.body)
            #expect(openAPI.problems(sync, against: "SyncResponse").isEmpty, "\(answer.text): \(openAPI.problems(sync, against: "SyncResponse"))")
            for event in (sync as? [String: Any])?["events"] as? [[String: Any]] ?? [] {
                if let type = event["type"] as? String { seen.insert(type) }
            }

            // message.failed as the store writes it into the event log.
            let failed = try EventPayload().messageFailed(
                MessageFailedEvent(
                    conversationId: conversation.id, serverId: newId(), clientMessageId: newId(),
                    error: ErrorDetail(code: .notFound, message: "the conversation no longer accepts the sender")))
            let failedFrame = try JSONSerialization.jsonObject(with: Data(("{\"cursor\":\"\(start)\"," + failed.dropFirst()).utf8))
            #expect(asyncAPI.problems(failedFrame, against: "ServerFrame").isEmpty, "\(failed)")
            seen.insert("message.failed")
            for kind in ServerEvent.Kind.allCases { #expect(seen.contains(kind.rawValue), "no real \(kind.rawValue) frame was checked") }

            await aliceSocket.close()
            await bobSocket.close()
            await bobSSE.close()
        }
    }
}
