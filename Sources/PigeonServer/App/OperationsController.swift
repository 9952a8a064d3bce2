import Hummingbird
import PigeonProtocol

extension PigeonCore {
    /// `/healthz`, `/readyz`, `/metrics` (behind `metricsToken` when one is set).
    func addOperationsRoutes(to router: Router<PigeonRequestContext>) {
        router.get("/healthz") { _, _ -> Response in
            try JSONBody.response(["status": "ok"])
        }

        router.get("/readyz") { _, _ -> Response in
            let storeReady = await self.store.isReady()
            let bufferReady = await self.buffer.isReady()
            guard storeReady, bufferReady else {
                let down = [storeReady ? nil : "store", bufferReady ? nil : "buffer"].compactMap { $0 }.joined(separator: " and ")
                throw PigeonError.overloaded(self.store.isDiskFull || self.buffer.isDiskFull ? "the server's disk is full (\(down))" : "\(down) not reachable")
            }
            return try JSONBody.response(["status": "ready"])
        }

        let metricsToken = configuration.metricsToken.map(OperatorToken.init)
        router.get("/metrics") { request, _ -> Response in
            try metricsToken?.authorize(request)
            self.metrics.bufferDepth.set(Int64(self.buffer.depth))
            if let deadLetters = try? await self.store.deadLetterCount() { self.metrics.deadLetters.set(Int64(deadLetters)) }
            let streams = self.hub.openStreams
            self.metrics.wsStreams.set(Int64(streams["ws"] ?? 0))
            self.metrics.sseStreams.set(Int64(streams["sse"] ?? 0))
            return Response(
                status: .ok, headers: [.contentType: "text/plain; version=0.0.4; charset=utf-8"],
                body: .init(byteBuffer: .init(bytes: self.metrics.registry.emitToBuffer())))
        }
    }
}
