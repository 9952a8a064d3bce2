/// PigeonJS, the browser SDK, as the server serves it: ES modules (`src/*.js`) that the browser loads as a module graph
/// (the entry, `pigeon.js`, imports the others by relative URL, so no bundler is needed and each file stays readable
/// as served), and the TypeScript declarations of the entry. The modules follow PigeonKit's parts: `errors`, `status`
/// (the status machine), `policy` (retries and timings), `messages` (changes and argument checks), `reactions`,
/// `store` (IndexedDB), `transport` (the HTTP API), `stream` (the WebSocket or SSE stream and its reconnection) and
/// `client` (the tabs' leadership, the outbox, receiving, gap recovery).
package enum PigeonJSFiles {
    /// Each module's file name and bytes, the entry first.
    package static let modules: [(name: String, bytes: [UInt8])] = [
        ("pigeon.js", PackageResources.pigeon_js),
        ("client.js", PackageResources.client_js),
        ("errors.js", PackageResources.errors_js),
        ("messages.js", PackageResources.messages_js),
        ("policy.js", PackageResources.policy_js),
        ("reactions.js", PackageResources.reactions_js),
        ("status.js", PackageResources.status_js),
        ("store.js", PackageResources.store_js),
        ("stream.js", PackageResources.stream_js),
        ("transport.js", PackageResources.transport_js),
    ]

    /// The entry's TypeScript declarations.
    package static let declarations: [UInt8] = PackageResources.pigeon_d_ts
}
