import Hummingbird

/// `GET /admin`: the operator's page, one self-contained HTML document (no build step, nothing fetched from elsewhere:
/// its script and style are inline, its charts inline SVG): Pages/admin.html with admin.css and admin.js inline
/// (``InlinePage``). It asks for the admin token (kept in the tab's `sessionStorage`), polls `GET /v1/admin/stats` once
/// a second, lists and replays dead letters, and looks up a conversation's delivery state. Served only when an admin
/// token is configured.
///
/// Its Content-Security-Policy allows only the page's own inline script and style (by hash) and requests to its own
/// origin; it may not be framed, cached or send a referrer.
enum AdminPage {
    static let page = InlinePage(document: PackageResources.admin_html, style: PackageResources.admin_css, script: PackageResources.admin_js)
    static let contentSecurityPolicy = page.contentSecurityPolicy(connect: ["'self'"], images: ["'self'", "data:"])

    static func response() -> Response {
        page.response(contentSecurityPolicy: contentSecurityPolicy)
    }
}
