//! The headers the server sets on answers of its own: its pages (the console and the consent
//! page) and the answers any site may read (the OAuth metadata, token and registration).

use axum::http::{HeaderName, HeaderValue, header};
use axum::response::Response;

/// What the server's pages may load and do: this server's script and style only (no inline
/// script), no request elsewhere, never framed by another site.
const PAGE_CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
                        img-src 'self' data:; connect-src 'self'; form-action 'self'; \
                        frame-ancestors 'none'; base-uri 'none'";

/// Sets these headers on `r`.
pub(super) fn set(mut r: Response, headers: &[(HeaderName, &'static str)]) -> Response {
    let h = r.headers_mut();
    for (name, value) in headers {
        h.insert(name.clone(), HeaderValue::from_static(value));
    }
    r
}

/// One of the server's pages or their files: of this type, cached as `cache` says, under the
/// pages' CSP, not framed, not sniffed, and sending no referrer.
pub(super) fn page(r: Response, content_type: &'static str, cache: &'static str) -> Response {
    set(
        r,
        &[
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, cache),
            (header::CONTENT_SECURITY_POLICY, PAGE_CSP),
            (header::X_FRAME_OPTIONS, "DENY"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::REFERRER_POLICY, "no-referrer"),
        ],
    )
}

/// An answer any site may read (browser-based agents call these), never cached.
pub(super) fn open_to_all(r: Response) -> Response {
    set(
        r,
        &[
            (header::ACCESS_CONTROL_ALLOW_ORIGIN, "*"),
            (header::CACHE_CONTROL, "no-store"),
        ],
    )
}
