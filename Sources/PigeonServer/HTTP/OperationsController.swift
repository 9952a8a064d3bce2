import Hummingbird
import PigeonDomain
import PigeonProtocol

/// `/healthz`, `/readyz` and `/metrics` (behind the metrics token when one is set).
struct OperationsController: Sendable {
    let store: any DeadLetterStore & StoreHealth
    let buffer: any AcceptPath
    let hub: StreamHub
    let metrics: PigeonMetrics
    let metricsToken: OperatorToken?

    func addRoutes(to router: Router<PigeonRequestContext>) {
        router.get("/healthz") { _, _ -> Response in try JSONBody.response(["status": "ok"]) }
        router.get("/readyz", use: ready)
        router.get("/metrics", use: metricsText)
    }

    /// Ready when the store and the buffer are reachable; otherwise 503 naming which is not (and a full disk).
    @Sendable func ready(_ request: Request, context: PigeonRequestContext) async throws -> Response {
        let storeReady = await store.isReady()
        let bufferReady = await buffer.isReady()
        guard storeReady, bufferReady else {
            let down = [storeReady ? nil : "store", bufferReady ? nil : "buffer"].compactMap { $0 }.joined(separator: " and ")
            throw PigeonError.overloaded(store.isDiskFull || buffer.isDiskFull ? "the server's disk is full (\(down))" : "\(down) not reachable")
        }
        return try JSONBody.response(["status": "ready"])
    }

    @Sendable func metricsText(_ request: Request, context: PigeonRequestContext) async throws -> Response {
        try metricsToken?.authorize(request)
        metrics.bufferDepth.set(Int64(buffer.depth))
        if let held = buffer.heldPartitionCount { metrics.bufferPartitionsHeld.set(Int64(held)) }
        if let deadLetters = try? await store.deadLetterCount() { metrics.deadLetters.set(Int64(deadLetters)) }
        let streams = hub.openStreams
        metrics.wsStreams.set(Int64(streams["ws"] ?? 0))
        metrics.sseStreams.set(Int64(streams["sse"] ?? 0))
        return Response(
            status: .ok, headers: [.contentType: "text/plain; version=0.0.4; charset=utf-8"],
            body: .init(byteBuffer: .init(bytes: metrics.registry.emitToBuffer())))
    }
}
