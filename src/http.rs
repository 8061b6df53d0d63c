//! The HTTP door: `POST /datanotes/<op>/` for every catalog operation, behind bearer tokens.

use crate::auth::{self, Caller};
use crate::engine::{Actor, Engine};
use crate::error::Error;
use crate::ops::{self, Ctx};
use axum::body::Bytes;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{Value, json};
use std::sync::Arc;

/// The largest request body accepted.
pub const MAX_BODY: usize = 8 << 20;

/// What every handler shares.
pub struct Server {
    pub engine: Arc<Engine>,
    owner_hash: String,
}

pub type Shared = Arc<Server>;

impl Server {
    pub fn new(engine: Arc<Engine>, owner_hash: String) -> Shared {
        Arc::new(Server { engine, owner_hash })
    }

    /// Who holds this token, if anyone.
    pub fn identify(&self, token: &str) -> Option<Caller> {
        if token.starts_with(auth::OWNER_PREFIX) && auth::matches(token, &self.owner_hash) {
            return Some(Caller::Owner);
        }
        None
    }

    /// The caller of a request: its bearer token, then its actor header.
    pub fn ctx(&self, headers: &HeaderMap) -> Result<Ctx, Error> {
        let token = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim);
        let Some(token) = token else {
            return Err(Error::unauthorized("no token").hint(
                "send Authorization: Bearer <token> (the owner token is in .datanotes/owner-token)",
            ));
        };
        let caller = self.identify(token).ok_or_else(|| {
            Error::unauthorized("invalid token")
                .hint("the token is unknown, was rotated or its app was deleted")
        })?;
        Ok(ctx_for(caller, headers))
    }
}

/// The actor of a call: `X-Datanotes-Actor: harness / model`, `X-Datanotes-Session`, and the caller.
pub fn ctx_for(caller: Caller, headers: &HeaderMap) -> Ctx {
    let h = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
            .filter(|s| !s.is_empty())
    };
    let (harness, model) = match h("x-datanotes-actor") {
        Some(a) => match a.split_once('/') {
            Some((x, y)) => (
                Some(x.trim().to_string()),
                Some(y.trim().to_string()).filter(|s| !s.is_empty()),
            ),
            None => (Some(a.to_string()), None),
        },
        None => (None, None),
    };
    let clip = |s: Option<String>| s.map(|s| s.chars().take(200).collect::<String>());
    let actor = Actor::new(
        clip(harness),
        clip(model),
        caller.app().map(Into::into),
        clip(h("x-datanotes-session").map(Into::into)),
        Some(caller.token_name()),
    );
    Ctx { caller, actor }
}

pub fn error_response(e: &Error) -> Response {
    let status = StatusCode::from_u16(e.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (status, Json(e.to_json())).into_response()
}

/// Reads a JSON object body with a size limit; every failure is a JSON error.
pub async fn json_body(req: Request) -> Result<Value, Error> {
    let bytes: Bytes = axum::body::to_bytes(req.into_body(), MAX_BODY)
        .await
        .map_err(|_| {
            Error::new(
                413,
                "payload_too_large",
                format!("the request body is larger than {} bytes", MAX_BODY),
            )
            .hint("send less at once: split the call, or shorten the body")
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

async fn run_op(State(s): State<Shared>, Path(op): Path<String>, req: Request) -> Response {
    let ctx = match s.ctx(req.headers()) {
        Ok(c) => c,
        Err(e) => return error_response(&e),
    };
    if ops::find(&op).is_none() {
        return error_response(&ops::unknown_op(&op));
    }
    let args = match json_body(req).await {
        Ok(v) => v,
        Err(e) => return error_response(&e),
    };
    let engine = s.engine.clone();
    let r = tokio::task::spawn_blocking(move || ops::call(&engine, &ctx, &op, args)).await;
    match r {
        Ok(Ok(v)) => Json(v).into_response(),
        Ok(Err(e)) => error_response(&e),
        Err(_) => error_response(&Error::internal("the operation panicked")),
    }
}

async fn health(State(s): State<Shared>) -> Response {
    Json(json!({"ok": true, "seq": s.engine.last_seq()})).into_response()
}

async fn operations(State(s): State<Shared>, headers: HeaderMap) -> Response {
    match s.ctx(&headers) {
        Ok(_) => Json(json!({"operations": ops::describe_all()})).into_response(),
        Err(e) => error_response(&e),
    }
}

async fn not_found() -> Response {
    error_response(
        &Error::not_found("no such route").hint(
            "operations are POST /datanotes/<operation>/; GET /datanotes/operations/ lists them",
        ),
    )
}

pub fn router(s: Shared) -> Router {
    Router::new()
        .route("/datanotes/health", get(health))
        .route("/datanotes/operations/", get(operations))
        .route("/datanotes/operations", get(operations))
        .route("/datanotes/{op}/", post(run_op))
        .route("/datanotes/{op}", post(run_op))
        .fallback(not_found)
        .with_state(s)
}

/// Serves until ctrl-c / SIGTERM.
pub async fn serve(s: Shared, listener: tokio::net::TcpListener) -> std::io::Result<()> {
    let app = router(s);
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown_signal())
        .await
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("signal handler");
    tokio::select! {
        _ = ctrl_c => {},
        _ = term.recv() => {},
    }
}
