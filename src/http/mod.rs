//! The HTTP door: `POST /datanotes/<op>/` for every catalog operation ([`operations`]), the
//! routes beside them (apps registry, change feed, webhooks, tool-call records: [`routes`]) and
//! the feed as Server-Sent Events ([`sse`]), behind bearer tokens. Every route names its access
//! class, and `auth::authorize` decides.
//!
//! Here too: the caller of a request as an extractor ([`Authed`], built on
//! [`Server::caller`](crate::server::Server::caller)), every [`Error`] as a JSON answer
//! (`impl IntoResponse for Error`), and the JSON body reader.
//!
//! The router puts static paths first, then `/datanotes/{op}` for the operations; a two-part path
//! that is no route is 404, a known path with another method 405.

mod app_connect;
mod headers;
mod oauth;
mod operations;
mod paths;
mod routes;
mod sse;
mod ui;

use crate::error::Error;
use crate::ops::Ctx;
use crate::server::{MAX_BODY, Shared};
use axum::body::Bytes;
use axum::extract::{FromRequestParts, Request};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
pub(crate) use paths::Routes;
use serde_json::{Value, json};

/// The largest body of the owner's `apps/create` and `apps/update`: a component in base64
/// (a Python or JavaScript app is 12 to 18 MB, 16 to 24 MB in base64).
pub(crate) const MAX_COMPONENT_BODY: usize = 64 << 20;

/// An error answers with its status and `{"error": {...}}`.
impl IntoResponse for Error {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        (status, Json(self.to_json())).into_response()
    }
}

/// The caller of a request (its bearer token, then its actor headers); a request without a
/// valid token is answered 401 before its handler runs.
pub(crate) struct Authed(pub Ctx);

impl FromRequestParts<Shared> for Authed {
    type Rejection = Error;

    async fn from_request_parts(parts: &mut Parts, s: &Shared) -> Result<Self, Error> {
        let mut ctx = s.caller(&parts.headers)?;
        if let Some(o) = parts.extensions.get::<crate::telemetry::Observed>() {
            ctx.observed = o.clone();
        }
        Ok(Authed(ctx))
    }
}

/// Reads a JSON object body with the size limit; every failure is a JSON error.
async fn json_body(req: Request) -> Result<Value, Error> {
    json_body_max(req, MAX_BODY).await
}

async fn json_body_max(req: Request, max: usize) -> Result<Value, Error> {
    let bytes: Bytes = axum::body::to_bytes(req.into_body(), max)
        .await
        .map_err(|_| {
            let hint = if max == MAX_COMPONENT_BODY {
                "give the component as wasm_path (a file on the server's machine) instead of wasm_base64"
            } else {
                "send less at once: split the call, or shorten the body"
            };
            Error::new(
                413,
                "payload_too_large",
                format!("the request body is larger than {max} bytes"),
            )
            .hint(hint)
        })?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(json!({}));
    }
    let v: Value = serde_json::from_slice(&bytes).map_err(|e| {
        Error::invalid(format!("malformed JSON: {e}"))
            .rule("json")
            .hint("send a JSON object, e.g. {\"table\": \"personal.tasks.items\"}")
    })?;
    if !v.is_object() {
        return Err(Error::invalid("the request body must be a JSON object")
            .rule("json")
            .hint("wrap the arguments in {...}"));
    }
    Ok(v)
}

async fn not_found() -> Error {
    Error::not_found("no such route")
        .hint("operations are POST /datanotes/<operation>/; GET /datanotes/operations/ lists them")
}

async fn method_not_allowed() -> Error {
    Error::new(
        405,
        "method_not_allowed",
        "this route does not take that method",
    )
    .hint("operations and routes are POST with a JSON body; health and operations/ are GET")
}

/// The HTTP door's routes. Every path is served with and without a trailing slash. Static
/// paths take precedence over `{op}` and `{a}/{b}`: `POST /datanotes/<op>/` is an operation
/// (an unknown one is `unknown_operation`), a two-part path that is no route is `no such
/// route`, and a known path with another method is `method_not_allowed`.
pub(crate) fn router(s: Shared) -> Router {
    routes()
        .router
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(axum::middleware::from_fn(observe))
        .with_state(s)
}

/// Each request to the HTTP API observed (see [`crate::telemetry::Observed::http`]): timed
/// until its answer is made, under the `traceparent` it carries. An operation's span goes under
/// it through the caller's context ([`Authed`]).
async fn observe(mut req: Request, next: axum::middleware::Next) -> Response {
    let route = req
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .map(|p| p.as_str().to_string());
    let o = crate::telemetry::Observed::http(req.method(), route.as_deref(), req.headers());
    req.extensions_mut().insert(o.clone());
    let r = next.run(req).await;
    o.finish(r.status());
    r
}

/// Every path the HTTP door serves, as its routes were put on the router (patterns such as
/// `/datanotes/{op}` as they are written).
pub fn paths() -> Vec<String> {
    routes().paths
}

fn routes() -> paths::Routes<Shared> {
    let r = paths::Routes::new()
        .route("/datanotes/health", get(operations::health))
        .route("/datanotes/metrics", get(operations::metrics))
        .route("/datanotes/operations/", get(operations::list))
        .route("/datanotes/operations", get(operations::list))
        .route("/datanotes/changes/stream", get(sse::stream))
        .route("/datanotes/{op}/", post(operations::run))
        .route("/datanotes/{op}", post(operations::run))
        .route("/datanotes/{a}/{b}/", post(not_found))
        .route("/datanotes/{a}/{b}", post(not_found));
    app_connect::register(ui::register(oauth::register(routes::register(r))))
}
