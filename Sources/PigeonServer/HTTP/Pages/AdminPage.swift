import Hummingbird

/// `GET /admin`: the operator's page, Pages/admin.html, which says what the page does, with admin.css and admin.js
/// inline (``InlinePage``). Served only when an admin token is configured.
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
