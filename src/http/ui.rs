//! `GET /datanotes/ui/`: the owner's console, static assets compiled into the binary (plain
//! HTML, CSS and JavaScript in `src/http/ui/`, no build step, nothing fetched from elsewhere).
//! The route is public: the page holds no data. Every piece of data it shows comes through the
//! same authorized API calls as any client's (`Authorization: Bearer`, no cookie), so an app
//! token sees in the console what that app may see, and nothing more.
//!
//! The page is served with a Content-Security-Policy that keeps every request on this server, and
//! keeps the signed-in token in `sessionStorage`. It is tested in a real headless Chromium by
//! `scripts/browser` (`scripts/browser-test.js`).

use axum::extract::Path;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;

/// The console's files: name, content type, bytes.
const ASSETS: &[(&str, &str, &str)] = &[
    (
        "index.html",
        "text/html; charset=utf-8",
        include_str!("ui/index.html"),
    ),
    (
        "app.js",
        "text/javascript; charset=utf-8",
        include_str!("ui/app.js"),
    ),
    (
        "dom.js",
        "text/javascript; charset=utf-8",
        include_str!("ui/dom.js"),
    ),
    (
        "search.js",
        "text/javascript; charset=utf-8",
        include_str!("ui/search.js"),
    ),
    (
        "grants.js",
        "text/javascript; charset=utf-8",
        include_str!("ui/grants.js"),
    ),
    (
        "stats.js",
        "text/javascript; charset=utf-8",
        include_str!("ui/stats.js"),
    ),
    (
        "install.js",
        "text/javascript; charset=utf-8",
        include_str!("ui/install.js"),
    ),
    (
        "consent.js",
        "text/javascript; charset=utf-8",
        include_str!("ui/consent.js"),
    ),
    (
        "app.css",
        "text/css; charset=utf-8",
        include_str!("ui/app.css"),
    ),
];

fn asset(name: &str) -> Response {
    let Some((_, ty, body)) = ASSETS.iter().find(|(n, _, _)| *n == name) else {
        return crate::error::Error::not_found(format!("the console has no file {name:?}"))
            .hint("open /datanotes/ui/")
            .into_response();
    };
    let r = (StatusCode::OK, *body).into_response();
    super::headers::page(r, ty, "no-cache")
}

/// The console's routes: `/datanotes/ui` (redirected), `/datanotes/ui/` and its files.
pub(super) fn register<S: Clone + Send + Sync + 'static>(r: super::Routes<S>) -> super::Routes<S> {
    r.route(
        "/datanotes/ui",
        get(|| async { Redirect::permanent("/datanotes/ui/") }),
    )
    .route("/datanotes/ui/", get(|| async { asset("index.html") }))
    .route(
        "/datanotes/ui/{file}",
        get(|Path(file): Path<String>| async move { asset(&file) }),
    )
}

#[cfg(test)]
mod tests {
    /// The whole page stays light: ≤ 300 KB.
    #[test]
    fn the_console_weighs_under_300_kb() {
        let total: usize = super::ASSETS.iter().map(|(_, _, b)| b.len()).sum();
        assert!(total <= 300_000, "{total} bytes");
    }
}
