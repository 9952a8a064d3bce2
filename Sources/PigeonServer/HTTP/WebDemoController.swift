import Hummingbird

/// `GET /` with `--web` (``ServerConfiguration/webDemo``): the web demo page (``WebDemoPage``). Without it `/` is not
/// a route: `404`, as any unknown path.
///
/// The page is answered `200` as `text/html; charset=utf-8`, never cached (`Cache-Control: no-store`: a reload gets
/// the page of the server that runs now), with a Content-Security-Policy that allows its own inline style and script,
/// images from `blob:` URLs (the attachments it fetched) and connections to this origin, and to the `api` origin when
/// the page is asked for with `?api=` (a malformed one: `400 invalid_request`; an empty one is the page's own origin).
struct WebDemoController: Sendable {
    func addRoutes(to router: Router<PigeonRequestContext>) {
        router.get("/", use: page)
    }

    @Sendable func page(_ request: Request, context: PigeonRequestContext) throws -> Response {
        // `?api=` empty is the page's own origin, as the page reads it.
        let api = try request.uri.queryParameters.get("api").flatMap { $0.isEmpty ? nil : $0 }.map(WebDemoPage.apiOrigin)
        return WebDemoPage.page.response(contentSecurityPolicy: WebDemoPage.contentSecurityPolicy(api: api))
    }
}
