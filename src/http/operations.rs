//! The catalog's operations over HTTP: `POST /datanotes/<op>/`, `GET /datanotes/operations/`,
//! and `GET /datanotes/health`.

use super::{Authed, json_body};
use crate::error::Error;
use crate::ops;
use crate::server::Shared;
use axum::Json;
use axum::extract::{Path, Request, State};
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// `POST /datanotes/<op>/`: token, known operation, body, then `ops::call` (which authorizes).
pub(super) async fn run(
    State(s): State<Shared>,
    Path(op): Path<String>,
    Authed(ctx): Authed,
    req: Request,
) -> Result<Response, Error> {
    if ops::find(&op).is_none() {
        return Err(ops::unknown_op(&op));
    }
    let args = json_body(req).await?;
    let engine = s.engine.clone();
    let v = tokio::task::spawn_blocking(move || ops::call(&engine, &ctx, &op, args))
        .await
        .map_err(|_| Error::internal("the operation panicked"))??;
    Ok(Json(v).into_response())
}

/// `GET /datanotes/health`: no token needed. The owner also gets the server's memory: its
/// resident set (RSS) and what the WASM apps' live instances hold.
pub(super) async fn health(State(s): State<Shared>, headers: axum::http::HeaderMap) -> Response {
    let owner = s.is_owner(&headers);
    let mut v = json!({"ok": true, "seq": s.engine.last_seq(), "semantic": s.engine.semantic.status(owner)});
    if owner {
        // The rows the semantic index has still to embed (null while it is not ready).
        v["semantic"]["pending"] = json!(s.engine.semantic_pending());
        let m = &s.agg.wasm.meter;
        v["memory"] = json!({
            "rssBytes": rss_bytes(),
            "wasmInstances": m.instances(),
            "wasmMemoryBytes": m.bytes(),
        });
        v["feed"] = json!({"waiting": crate::feed::waiting()});
    }
    Json(v).into_response()
}

/// `GET /datanotes/metrics`: every metric as Prometheus text, for the owner and the metrics
/// tokens the owner made (the names of apps and tools are the owner's business). The gauges
/// are read from the server's state now (the source [`crate::server::Server::new`] set).
pub(super) async fn metrics(
    super::Authed(ctx): super::Authed,
) -> Result<Response, crate::error::Error> {
    use crate::telemetry::metrics;
    crate::auth::authorize(
        &ctx.caller,
        crate::auth::Access::Metrics,
        crate::auth::Target::None,
    )?;
    let text = tokio::task::spawn_blocking(metrics::scrape)
        .await
        .map_err(|_| crate::error::Error::internal("reading the metrics failed"))?;
    Ok((
        [(axum::http::header::CONTENT_TYPE, metrics::CONTENT_TYPE)],
        text,
    )
        .into_response())
}

/// The server's resident set size in bytes (Linux: `VmRSS` of `/proc/self/status`), or `null`
/// where it cannot be read.
fn rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// `GET /datanotes/operations/`: the catalog, for any token that reads.
pub(super) async fn list(Authed(ctx): Authed) -> Result<Response, crate::error::Error> {
    crate::auth::authorize(
        &ctx.caller,
        crate::auth::Access::Read,
        crate::auth::Target::None,
    )?;
    Ok(Json(json!({"operations": ops::describe_all()})).into_response())
}
