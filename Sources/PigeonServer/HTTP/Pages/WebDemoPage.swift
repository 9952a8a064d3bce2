import PigeonDomain

/// The web demo page of `GET /` (with `--web`): Pages/demo.html, which says what the page does, with demo.css and
/// demo.js inline (``InlinePage``), so that the Content-Security-Policy can allow exactly its inline style and script by
/// their SHA-256 hashes (``contentSecurityPolicy(api:)``), and the one module the script imports: PigeonJS, from the
/// server it talks to (`/sdk/pigeon.js`, ``SDKController``). docs/API.md "From a browser" describes it.
enum WebDemoPage {
    static let page = InlinePage(document: PackageResources.demo_html, style: PackageResources.demo_css, script: PackageResources.demo_js)

    /// Images only from `blob:` URLs: the page fetches an attachment with its token (never in a URL) and shows the
    /// bytes it got.
    private static let images = ["blob:"]

    /// The policy without `?api=`, computed once: the SDK comes from this origin.
    private static let ownOriginPolicy = page.contentSecurityPolicy(connect: ["'self'"], images: images, scripts: ["'self'"])

    /// The `Content-Security-Policy` of the page: nothing but its own inline style and script (by hash) and scripts of
    /// its own origin (the SDK module), images from `blob:` URLs (the attachments it fetched), and connections to its
    /// own origin, plus, when the page is asked for with `?api=`, to that origin (`http(s):` and the matching `ws(s):`),
    /// from which it then imports the SDK too. `api` is a validated origin (``apiOrigin(_:)``).
    static func contentSecurityPolicy(api: String?) -> String {
        guard let api else { return ownOriginPolicy }
        var connect = ["'self'"]
        var scripts = ["'self'"]
        let secure = api.hasPrefix("https://")
        let authority = api.dropFirst(secure ? "https://".count : "http://".count)
        if authority.hasPrefix("[") {
            // A host-source cannot name an IPv6 literal: the schemes of that origin, then.
            connect += secure ? ["https:", "wss:"] : ["http:", "ws:"]
            scripts.append(secure ? "https:" : "http:")
        } else {
            connect += [api, (secure ? "wss://" : "ws://") + authority]
            scripts.append(api)
        }
        return page.contentSecurityPolicy(connect: connect, images: images, scripts: scripts)
    }

    /// The `api` query parameter as the origin the page will call, lowercased: `http://` or `https://`, a host, an
    /// optional port, nothing else (one trailing `/` is forgiven); anything else is `400 invalid_request`.
    static func apiOrigin(_ text: String) throws -> String {
        let origin = text.hasSuffix("/") ? String(text.dropLast()) : text
        let lowercased = origin.lowercased()
        guard origin != "*", CORSPolicy.isValidOrigin(origin), lowercased.hasPrefix("http://") || lowercased.hasPrefix("https://") else {
            throw PigeonError.invalid("api must be the origin of a Pigeon server, like http://127.0.0.1:8080 (http or https, no path)")
        }
        return lowercased
    }
}
