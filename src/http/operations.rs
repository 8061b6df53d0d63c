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

/// `GET /datanotes/health`: no token needed.
pub(super) async fn health(State(s): State<Shared>) -> Response {
    Json(json!({"ok": true, "seq": s.engine.last_seq()})).into_response()
}

/// `GET /datanotes/operations/`: the catalog, for any valid token.
pub(super) async fn list(_: Authed) -> Response {
    Json(json!({"operations": ops::describe_all()})).into_response()
}
