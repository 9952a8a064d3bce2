import Hummingbird
import PigeonProtocol

extension PigeonCore {
    /// Conversations, messages, receipts, typing and sync: the request/response part of API.md.
    func addRoutes(to router: Router<PigeonRequestContext>) {
        let limit = configuration.maxBodyBytes

        router.post("/v1/conversations") { request, _ -> Response in
            let device = try await self.authenticate(request)
            let body = try await JSONBody.decode(CreateConversationRequest.self, from: request, limit: limit)
            if let invalid = body.members.first(where: { !Validation.isValidUserId($0) }) {
                throw PigeonError.invalid("member \"\(invalid.prefix(80))\" is not a valid userId (1-64 characters of [A-Za-z0-9._@-])")
            }
            let members = Set(body.members + [device.userId])
            guard members.count <= self.configuration.maxMembers else {
                throw PigeonError.invalid("a conversation has at most \(self.configuration.maxMembers) members")
            }
            if let name = body.name, name.count > 256 { throw PigeonError.invalid("name is longer than 256 characters") }
            if let name = body.name, !Validation.isStorableText(name) { throw PigeonError.invalid("name must not contain the character U+0000") }
            try self.abuse.checkStorage(of: device.userId)
            try self.abuse.admitConversation(by: device.userId)
            let conversation = try await self.store.createConversation(creator: device.userId, members: Array(members), name: body.name)
            // The conversation's rows and its `conversation.created` payload once, then an event row per member.
            let payloadBytes = members.reduce(256 + (body.name?.utf8.count ?? 0)) { $0 + $1.utf8.count + 48 }
            self.abuse.chargeStorage(of: device.userId, bytes: self.abuse.storageCost(bytes: payloadBytes, members: members.count))
            return try JSONBody.response(conversation, status: .created)
        }

        router.get("/v1/conversations") { request, _ -> Response in
            let device = try await self.authenticate(request)
            let query = request.uri.queryParameters
            let pageLimit = try Self.integerParameter(query.get("limit"), name: "limit", range: 1...500) ?? 100
            let before = try query.get("before").map(ConversationCursor.init(parameter:))
            return try JSONBody.response(try await self.store.conversations(of: device.userId, before: before, limit: Int(pageLimit)))
        }

        router.get("/v1/conversations/:id") { request, context -> Response in
            let device = try await self.authenticate(request)
            let conversation = try await self.memberConversation(context.parameters.get("id"), device: device)
            guard let found = try await self.store.conversation(id: conversation.id, for: device.userId) else {
                throw PigeonError.conversationNotFound
            }
            return try JSONBody.response(found)
        }

        router.post("/v1/conversations/:id/messages") { request, context -> Response in
            let device = try await self.authenticate(request)
            let body = try await JSONBody.decodeSend(from: request, limit: limit)
            let accepted = try await self.ingest.send(body, from: device, to: context.parameters.get("id") ?? "")
            return try JSONBody.response(accepted.response, status: accepted.created ? .accepted : .ok)
        }

        router.get("/v1/conversations/:id/messages") { request, context -> Response in
            let device = try await self.authenticate(request)
            let conversation = try await self.memberConversation(context.parameters.get("id"), device: device)
            let query = request.uri.queryParameters
            let after = try Self.integerParameter(query.get("after"), name: "after", range: 0...Int64.max)
            let before = try Self.integerParameter(query.get("before"), name: "before", range: 1...Int64.max)
            if after != nil, before != nil { throw PigeonError.invalid("give either after or before, not both") }
            let pageLimit = try Self.integerParameter(query.get("limit"), name: "limit", range: 1...500) ?? 100
            let page = try await self.store.messages(conversationId: conversation.id, after: after, before: before, limit: Int(pageLimit))
            return try JSONBody.response(page)
        }

        router.post("/v1/conversations/:id/receipts") { request, context -> Response in
            let device = try await self.authenticate(request)
            let body = try await JSONBody.decode(ReceiptRequest.self, from: request, limit: limit)
            return try JSONBody.response(try await self.recordReceipt(body, conversationId: context.parameters.get("id") ?? "", device: device))
        }

        router.post("/v1/conversations/:id/typing") { request, context -> Response in
            let device = try await self.authenticate(request)
            let body = try await JSONBody.decode(TypingRequest.self, from: request, limit: limit)
            try await self.recordTyping(active: body.active, conversationId: context.parameters.get("id") ?? "", device: device)
            return Response(status: .noContent)
        }

        router.get("/v1/sync") { request, _ -> Response in
            let device = try await self.authenticate(request)
            let cursor = try self.cursorParameter(request, allowHeader: false)
            let pageLimit = Int(try Self.integerParameter(request.uri.queryParameters.get("limit"), name: "limit", range: 1...1000) ?? 100)
            let start = try await self.store.resolveStart(cursor)
            var events = try await self.store.events(for: device, after: start.after, limit: pageLimit + 1)
            let hasMore = events.count > pageLimit
            if hasMore { events.removeLast() }
            var position = start.after
            var frames: [String] = []
            frames.reserveCapacity(events.count + 1)
            if start.reset { frames.append("{\"type\":\"reset\",\"cursor\":\"\(self.store.cursor(position))\"}") }
            for event in events {
                position.advance(past: event)
                frames.append(event.frame(cursor: self.store.cursor(position)))
            }
            let next = self.store.cursor(position)
            let json = "{\"events\":[\(frames.joined(separator: ","))],\"cursor\":\"\(next)\",\"hasMore\":\(hasMore)}"
            return Response(status: .ok, headers: [.contentType: "application/json"], body: .init(byteBuffer: .init(string: json)))
        }
    }

    /// An optional integer query parameter within `range`; anything else is a clear 400.
    static func integerParameter(_ raw: String?, name: String, range: ClosedRange<Int64>) throws -> Int64? {
        guard let raw else { return nil }
        guard let value = Int64(raw), range.contains(value) else {
            let upper = range.upperBound == Int64.max ? "" : " to \(range.upperBound)"
            throw PigeonError.invalid("\(name) must be an integer from \(range.lowerBound)\(upper)")
        }
        return value
    }
}
