//! The OAuth 2.1 door of `/mcp` (the MCP authorization specification): the metadata documents
//! (RFC 9728, RFC 8414), the consent page (`GET /oauth/authorize`) and the owner's decision
//! (`POST /oauth/authorize`), the token, registration (RFC 7591) and revocation (RFC 7009)
//! endpoints, and the owner's grants (`grants/list`, `grants/revoke`). What they mean is
//! [`crate::auth::oauth`]; here only their wire shapes.
//!
//! The consent page is the owner's: it signs in with the owner token (sent as a bearer header
//! by the page's script, never a cookie), cannot be framed, and its decision is accepted only
//! as a same-origin JSON request, so a cross-site form cannot post one.
//!
//! The consent page is `ui/consent.html`, filled HTML-escaped. The token, registration and
//! revocation endpoints answer RFC 6749 error bodies, with CORS open.
//!
//! The protected-resource metadata is served at `/.well-known/oauth-protected-resource` and at
//! `/.well-known/oauth-protected-resource/mcp`.

use super::headers::{self, open_to_all};
use super::{Authed, json_body};
use crate::auth::oauth::{AuthRequest, OAuthError, Refusal, Ticked};
use crate::auth::{Access, Target, authorize};
use crate::error::Error;
use crate::server::{Shared, base_url};
use axum::Json;
use axum::extract::{ConnectInfo, Query, Request, State};
use axum::http::{Extensions, HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use base64::Engine as _;
use serde::Deserialize;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};

/// The consent page's template (placeholders `{{name}}`, filled HTML-escaped).
const CONSENT: &str = include_str!("ui/consent.html");

/// The largest form the token and revocation endpoints read.
const MAX_FORM: usize = 16 << 10;

/// The OAuth routes.
pub(super) fn register(r: super::Routes<Shared>) -> super::Routes<Shared> {
    r.route(
        "/.well-known/oauth-protected-resource",
        get(resource_metadata).options(preflight),
    )
    .route(
        "/.well-known/oauth-protected-resource/mcp",
        get(resource_metadata).options(preflight),
    )
    .route(
        "/.well-known/oauth-authorization-server",
        get(server_metadata).options(preflight),
    )
    .route("/oauth/authorize", get(consent_page).post(decide))
    .route("/oauth/token", post(token).options(preflight))
    .route("/oauth/register", post(register_client).options(preflight))
    .route("/oauth/revoke", post(revoke).options(preflight))
    .route("/datanotes/grants/list/", post(grants_list))
    .route("/datanotes/grants/list", post(grants_list))
    .route("/datanotes/grants/revoke/", post(grants_revoke))
    .route("/datanotes/grants/revoke", post(grants_revoke))
}

async fn preflight() -> Response {
    headers::set(
        StatusCode::NO_CONTENT.into_response(),
        &[
            (header::ACCESS_CONTROL_ALLOW_ORIGIN, "*"),
            (header::ACCESS_CONTROL_ALLOW_METHODS, "GET, POST, OPTIONS"),
            (
                header::ACCESS_CONTROL_ALLOW_HEADERS,
                "authorization, content-type, mcp-protocol-version",
            ),
            (header::ACCESS_CONTROL_MAX_AGE, "600"),
        ],
    )
}

/// RFC 9728: `/mcp` is a protected resource, and this server is its authorization server.
async fn resource_metadata(headers: HeaderMap) -> Response {
    let base = base_url(&headers);
    open_to_all(
        Json(json!({
            "resource": format!("{base}/mcp"),
            "authorization_servers": [base],
            "bearer_methods_supported": ["header"],
            "resource_name": "datanotes",
            "resource_documentation": format!("{base}/datanotes/ui/"),
        }))
        .into_response(),
    )
}

/// RFC 8414.
async fn server_metadata(headers: HeaderMap) -> Response {
    let base = base_url(&headers);
    open_to_all(
        Json(json!({
            "issuer": base,
            "authorization_endpoint": format!("{base}/oauth/authorize"),
            "token_endpoint": format!("{base}/oauth/token"),
            "registration_endpoint": format!("{base}/oauth/register"),
            "revocation_endpoint": format!("{base}/oauth/revoke"),
            "response_types_supported": ["code"],
            "response_modes_supported": ["query"],
            "grant_types_supported": ["authorization_code", "refresh_token"],
            "code_challenge_methods_supported": ["S256"],
            "token_endpoint_auth_methods_supported": ["none", "client_secret_post", "client_secret_basic"],
            "revocation_endpoint_auth_methods_supported": ["none", "client_secret_post", "client_secret_basic"],
            "client_id_metadata_document_supported": true,
            "authorization_response_iss_parameter_supported": true,
        }))
        .into_response(),
    )
}

fn escape(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            _ => o.push(c),
        }
    }
    o
}

/// An HTML page with the consent page's headers (never cached).
fn page(status: StatusCode, html: String) -> Response {
    let r = (status, html).into_response();
    headers::page(r, "text/html; charset=utf-8", "no-store")
}

/// The peer's address, as the listener saw it (none when the router is served without it).
fn peer(extensions: &Extensions) -> Option<IpAddr> {
    extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip())
}

/// `Retry-After` on an answer, when the error says when.
fn retry_after(mut r: Response, e: &OAuthError) -> Response {
    if let Some(secs) = e.retry_after {
        r.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(secs));
    }
    r
}

/// `GET /oauth/authorize`: the consent page, or why not (a page when the client or its
/// redirect URI cannot be trusted, the client was never granted anything, or too many requests
/// wait; else back to the client with `error`).
async fn consent_page(
    State(s): State<Shared>,
    headers: HeaderMap,
    extensions: Extensions,
    Query(q): Query<AuthRequest>,
) -> Response {
    let base = base_url(&headers);
    let from = peer(&extensions);
    match s.oauth.begin(&q, &format!("{base}/mcp"), &base, from).await {
        Ok(c) => {
            let registration = if c.client.origin.is_some() {
                "by its client ID metadata document"
            } else {
                "by dynamic registration"
            };
            let fill = [
                ("request", c.request.as_str()),
                ("client_name", c.client.client_name.as_str()),
                ("client_id", c.client.client_id.as_str()),
                ("redirect_uri", c.redirect_uri.as_str()),
                (
                    "client_origin",
                    c.client
                        .origin
                        .as_deref()
                        .unwrap_or("none (registered here)"),
                ),
                ("registration", registration),
                ("resource", c.resource.as_str()),
            ];
            let mut html = CONSENT.to_string();
            for (k, v) in fill {
                html = html.replace(&format!("{{{{{k}}}}}"), &escape(v));
            }
            page(StatusCode::OK, html)
        }
        Err(Refusal::Redirect(url)) => Redirect::to(&url).into_response(),
        Err(Refusal::Page(e)) => {
            let (status, next) = if e.status == 429 {
                (
                    StatusCode::TOO_MANY_REQUESTS,
                    "Try again later from the agent.",
                )
            } else {
                (StatusCode::BAD_REQUEST, "Start again from the agent.")
            };
            let html = format!(
                "<!doctype html><meta charset=\"utf-8\"><title>Cannot connect this client</title>\
                 <link rel=\"stylesheet\" href=\"/datanotes/ui/app.css\"><main><h1>Cannot connect this client</h1>\
                 <p class=\"error\" role=\"alert\">{}: {}</p><p>Nothing was granted. {next}</p></main>",
                escape(e.error),
                escape(&e.description)
            );
            retry_after(page(status, html), &e)
        }
    }
}

/// The consent page's decision.
#[derive(Deserialize)]
struct Decision {
    request: String,
    decision: String,
    /// What the owner ticked (its keys beside these two).
    #[serde(flatten)]
    consent: Ticked,
}

/// `POST /oauth/authorize`: the owner's decision, as the consent page sends it: same origin,
/// JSON, the owner's bearer token. Answers `{"redirect": url}`.
async fn decide(State(s): State<Shared>, req: Request) -> Result<Json<Value>, Error> {
    let headers = req.headers().clone();
    let cross = || {
        Error::forbidden("the consent must come from the consent page of this server")
            .rule("same_origin")
            .hint("open the authorization link in the browser and decide on that page")
    };
    if let Some(site) = headers.get("sec-fetch-site").and_then(|v| v.to_str().ok())
        && !matches!(site, "same-origin" | "none")
    {
        return Err(cross());
    }
    if let Some(origin) = headers.get(header::ORIGIN) {
        let own = base_url(&headers);
        let o = origin.to_str().unwrap_or("");
        // The page's origin is this server's as the browser reached it (a proxy may have
        // changed the scheme it saw).
        let host = |u: &str| u.split_once("://").map(|(_, h)| h.to_ascii_lowercase());
        if host(o).is_none() || host(o) != host(&own) {
            return Err(cross());
        }
    }
    let json_body_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| {
            t.trim_start()
                .to_ascii_lowercase()
                .starts_with("application/json")
        });
    if !json_body_type {
        return Err(cross());
    }
    let ctx = s.caller(&headers)?;
    authorize(&ctx.caller, Access::Owner, Target::None)
        .map_err(|e| e.with_message("only the owner can answer a consent request"))?;
    let body = json_body(req).await?;
    let known = [&["request", "decision"][..], &Ticked::KEYS[..]].concat();
    crate::error::known_fields("oauth/authorize", &body, &known)?;
    let d: Decision = crate::error::parse("oauth/authorize", body)?;
    let allow = match d.decision.as_str() {
        "allow" => true,
        "deny" => false,
        _ => {
            return Err(Error::invalid("decision must be \"allow\" or \"deny\"").column("decision"));
        }
    };
    let mut consent = d.consent;
    // Kept as the grant reads: none chosen, what its tools imply.
    consent.read = consent.reads();
    let redirect = s.oauth.decide(&d.request, allow, consent)?;
    Ok(Json(json!({ "redirect": redirect })))
}

/// An OAuth error answer (RFC 6749 §5.2), with `WWW-Authenticate` for a 401.
fn oauth_error(e: OAuthError) -> Response {
    let status = StatusCode::from_u16(e.status).unwrap_or(StatusCode::BAD_REQUEST);
    let mut r = retry_after((status, Json(e.to_json())).into_response(), &e);
    if e.status == 401 {
        r.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Basic realm=\"datanotes\""),
        );
    }
    open_to_all(r)
}

/// Reads a form body (bounded), and the client's Basic credentials.
async fn form(
    req: Request,
) -> Result<(HashMap<String, String>, Option<(String, String)>), OAuthError> {
    let basic = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            let (scheme, rest) = v.trim().split_once(' ')?;
            scheme.eq_ignore_ascii_case("basic").then_some(rest.trim())
        })
        .map(|b| {
            let raw = base64::engine::general_purpose::STANDARD
                .decode(b)
                .ok()
                .and_then(|v| String::from_utf8(v).ok())
                .ok_or_else(|| {
                    OAuthError::new(
                        401,
                        "invalid_client",
                        "the Basic credentials are not base64 of id:secret",
                    )
                })?;
            let (id, secret) = raw.split_once(':').ok_or_else(|| {
                OAuthError::new(
                    401,
                    "invalid_client",
                    "the Basic credentials are not id:secret",
                )
            })?;
            Ok::<_, OAuthError>((percent_decode(id), percent_decode(secret)))
        })
        .transpose()?;
    let form_type = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| {
            t.to_ascii_lowercase()
                .starts_with("application/x-www-form-urlencoded")
        });
    if !form_type {
        return Err(OAuthError::new(
            400,
            "invalid_request",
            "send the parameters as application/x-www-form-urlencoded",
        ));
    }
    let bytes = axum::body::to_bytes(req.into_body(), MAX_FORM)
        .await
        .map_err(|_| {
            OAuthError::new(
                400,
                "invalid_request",
                format!("the form is larger than {MAX_FORM} bytes"),
            )
        })?;
    let mut map = HashMap::new();
    for (k, v) in form_urlencoded::parse(&bytes).into_owned() {
        if map.insert(k.clone(), v).is_some() {
            return Err(OAuthError::new(
                400,
                "invalid_request",
                format!("the parameter {k} is repeated"),
            ));
        }
    }
    Ok((map, basic))
}

/// A percent-encoded part of Basic credentials (RFC 6749 §2.3.1), decoded.
fn percent_decode(s: &str) -> String {
    percent_encoding::percent_decode_str(s)
        .decode_utf8_lossy()
        .into_owned()
}

/// `POST /oauth/token`.
async fn token(State(s): State<Shared>, req: Request) -> Response {
    let (f, basic) = match form(req).await {
        Ok(x) => x,
        Err(e) => return oauth_error(e),
    };
    match s.oauth.token(&f, basic).await {
        Ok(v) => {
            let mut r = open_to_all(Json(v).into_response());
            r.headers_mut()
                .insert(header::PRAGMA, HeaderValue::from_static("no-cache"));
            r
        }
        Err(e) => oauth_error(e),
    }
}

/// `POST /oauth/register` (RFC 7591): `201` and the client's information.
async fn register_client(State(s): State<Shared>, req: Request) -> Response {
    let from = peer(req.extensions());
    let body = match json_body(req).await {
        Ok(v) => v,
        Err(e) => {
            return oauth_error(OAuthError::new(
                400,
                "invalid_client_metadata",
                e.message.clone(),
            ));
        }
    };
    match s.oauth.register(&body, from) {
        Ok(v) => open_to_all((StatusCode::CREATED, Json(v)).into_response()),
        Err(e) => oauth_error(e),
    }
}

/// `POST /oauth/revoke` (RFC 7009): `200` whether the token was known or not.
async fn revoke(State(s): State<Shared>, req: Request) -> Response {
    let (f, basic) = match form(req).await {
        Ok(x) => x,
        Err(e) => return oauth_error(e),
    };
    match s.oauth.revoke_token(&f, basic).await {
        Ok(()) => open_to_all(StatusCode::OK.into_response()),
        Err(e) => oauth_error(e),
    }
}

/// `POST /datanotes/grants/list/` (owner): every grant and its rights.
async fn grants_list(State(s): State<Shared>, Authed(ctx): Authed) -> Result<Json<Value>, Error> {
    authorize(&ctx.caller, Access::Owner, Target::None)?;
    Ok(Json(json!({ "grants": s.oauth.grants() })))
}

/// `POST /datanotes/grants/revoke/ {"id"}` (owner): the grant and its tokens are gone at the
/// next request.
async fn grants_revoke(
    State(s): State<Shared>,
    Authed(ctx): Authed,
    req: Request,
) -> Result<Json<Value>, Error> {
    authorize(&ctx.caller, Access::Owner, Target::None)?;
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Args {
        id: String,
    }
    let a: Args = crate::error::parse("grants/revoke", json_body(req).await?)?;
    s.oauth.revoke_grant(&a.id)?;
    Ok(Json(json!({ "revoked": a.id })))
}
