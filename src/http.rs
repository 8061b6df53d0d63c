//! The HTTP door: `POST /datanotes/<op>/` for every catalog operation, the apps registry, the
//! change feed and webhooks, behind bearer tokens. Every route names its access class, and
//! `auth::authorize` decides.

use crate::apps::aggregator::Aggregator;
use crate::apps::{self, AppFields, Registry};
use crate::auth::{self, Caller, Target};
use crate::engine::{Actor, Engine};
use crate::error::Error;
use crate::feed::{self, Filter, webhooks::Webhooks};
use crate::ops::Access;
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

/// The largest body of the owner's `apps/create` and `apps/update`: a component in base64
/// (a Python or JavaScript app is 12 to 18 MB, 16 to 24 MB in base64).
pub const MAX_COMPONENT_BODY: usize = 64 << 20;

/// What every handler shares.
pub struct Server {
    pub engine: Arc<Engine>,
    pub apps: Arc<Registry>,
    pub agg: Arc<Aggregator>,
    pub webhooks: Arc<Webhooks>,
    /// Set when the server begins to shut down: open streams end so that it can.
    pub closing: tokio::sync::watch::Sender<bool>,
    owner_hash: String,
}

pub type Shared = Arc<Server>;

impl Server {
    /// Builds the server state (inside the tokio runtime: webhook deliveries start here).
    pub fn new(engine: Arc<Engine>, owner_hash: String) -> anyhow::Result<Shared> {
        let apps = Registry::open(&engine.meta_dir)?;
        let webhooks = Webhooks::start(engine.clone())?;
        let wasm = crate::apps::wasm::WasmRuntime::new(engine.clone())?;
        let agg = Aggregator::new(engine.clone(), apps.clone(), wasm);
        agg.start();
        Ok(Arc::new(Server {
            engine,
            apps,
            agg,
            webhooks,
            closing: tokio::sync::watch::Sender::new(false),
            owner_hash,
        }))
    }

    /// After a registry change: new backends are listed in the background (a listing never
    /// waits on an app).
    fn resync(self: &Arc<Self>) {
        for name in self.agg.sync() {
            let agg = self.agg.clone();
            tokio::spawn(async move {
                let _ = agg.refresh(&name).await;
            });
        }
    }

    /// Who holds this token, if anyone.
    pub fn identify(&self, token: &str) -> Option<Caller> {
        if token.starts_with(auth::OWNER_PREFIX) && auth::matches(token, &self.owner_hash) {
            return Some(Caller::Owner);
        }
        self.apps.identify(token)
    }

    /// The caller of a request: its bearer token, then its actor header.
    pub fn ctx(&self, headers: &HeaderMap) -> Result<Ctx, Error> {
        let Some(token) = bearer(headers) else {
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

/// The bearer token of a request, if any.
pub fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            // The scheme is case-insensitive (RFC 9110): `Bearer`, `bearer`, `BEARER`.
            let (scheme, token) = v.trim_start().split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then_some(token)
        })
        .map(str::trim)
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
                Some(x.trim().to_string()).filter(|s| !s.is_empty()),
                Some(y.trim().to_string()).filter(|s| !s.is_empty()),
            ),
            None => (Some(a.to_string()), None),
        },
        None => (None, None),
    };
    // Actor::new cuts each field at 200 characters.
    let actor = Actor::new(
        harness,
        model,
        caller.app().map(Into::into),
        h("x-datanotes-session").map(Into::into),
        Some(caller.token_name()),
    );
    Ctx { caller, actor }
}

pub fn error_response(e: &Error) -> Response {
    let status = StatusCode::from_u16(e.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (status, Json(e.to_json())).into_response()
}

/// Reads a JSON object body with the size limit; every failure is a JSON error.
pub async fn json_body(req: Request) -> Result<Value, Error> {
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

async fn method_not_allowed() -> Response {
    error_response(
        &Error::new(
            405,
            "method_not_allowed",
            "this route does not take that method",
        )
        .hint("operations and routes are POST with a JSON body; health and operations/ are GET"),
    )
}

type Answer = std::pin::Pin<Box<dyn std::future::Future<Output = Result<Response, Error>> + Send>>;

/// A route beside the operations: its path under /datanotes/, its access class, its handler.
struct Route {
    path: &'static str,
    access: Access,
    run: fn(Shared, Ctx, Value) -> Answer,
}

fn blocking(f: impl FnOnce() -> Result<Value, Error> + Send + 'static) -> Answer {
    Box::pin(async move {
        let v = tokio::task::spawn_blocking(f)
            .await
            .map_err(|_| Error::internal("the handler panicked"))??;
        Ok(Json(v).into_response())
    })
}

/// Installs the component a create or update names (compiling it: seconds for Python or JS).
async fn install_component(
    s: &Shared,
    f: &AppFields,
) -> Result<Option<crate::apps::wasm::WasmInfo>, Error> {
    use crate::apps::wasm::component_bytes;
    // Every field is checked before a component is stored or compiled: a refusal changes nothing.
    crate::apps::check(f)?;
    if f.wasm_path.is_none() && f.wasm_base64.is_none() {
        let Some(change) = &f.limits else {
            return Ok(None);
        };
        // New limits for an installed component: the same component, without sending it again.
        let installed = f
            .name
            .as_deref()
            .and_then(|n| s.apps.get(n))
            .and_then(|p| p.wasm);
        let Some(mut w) = installed else {
            return Err(Error::invalid("limits apply to WASM apps")
                .column("limits")
                .hint("give wasm_path or wasm_base64 too"));
        };
        w.limits = w.limits.merged(change)?;
        return Ok(Some(w));
    }
    if f.mcp_url.as_ref().is_some_and(Option::is_some) {
        return Err(Error::invalid(
            "an app is either remote (mcp_url) or WASM (a component), not both",
        )
        .column("mcp_url")
        .hint("drop mcp_url, or the component"));
    }
    let name = f.name.clone().unwrap_or_default();
    let prev = s.apps.get(&name);
    let base = prev
        .as_ref()
        .and_then(|p| p.wasm.as_ref())
        .map(|w| w.limits.clone())
        .unwrap_or_default();
    let limits = match &f.limits {
        Some(l) => base.merged(l)?,
        None => base,
    };
    let bytes = component_bytes(f.wasm_path.as_deref(), f.wasm_base64.as_deref())?;
    let mut scope = prev.map(|p| p.scope()).unwrap_or_default();
    scope.name = name;
    scope.write = f.write.clone().unwrap_or(scope.write);
    scope.ddl = f.ddl.unwrap_or(scope.ddl);
    scope.maintain = f.maintain.unwrap_or(scope.maintain);
    let rt = s.agg.wasm.clone();
    let (info, _) = rt.install(bytes, scope, limits).await?;
    Ok(Some(info))
}

/// Removes a replaced or deleted app's component file when no app uses it any more.
fn forget_component(s: &Shared, old: Option<&crate::apps::AppRecord>) {
    if let Some(w) = old.and_then(|o| o.wasm.as_ref())
        && !s.apps.uses_component(&w.sha256)
    {
        let _ = std::fs::remove_file(s.agg.wasm.apps_dir.join(format!("{}.wasm", w.sha256)));
    }
}

fn fields(v: Value) -> Result<AppFields, Error> {
    ops::parse("this route", v)
}

fn name_of(v: &Value) -> Result<String, Error> {
    v.get("name")
        .and_then(Value::as_str)
        .map(str::to_string)
        .ok_or_else(|| {
            Error::invalid("missing `name`")
                .column("name")
                .rule("required")
                .hint("add \"name\": \"<app name>\"")
        })
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct CallArgs {
    tool: String,
    #[serde(default)]
    arguments: Value,
}

static ROUTES: &[Route] = &[
    Route {
        path: "apps/create",
        access: Access::Owner,
        run: |s, _, v| {
            Box::pin(async move {
                let f = fields(v)?;
                let wasm = install_component(&s, &f).await?;
                let (rec, token) = s.apps.create(f, wasm)?;
                // A new remote app is listed before the answer (bounded by the app timeouts).
                if s.agg.sync().contains(&rec.name) {
                    let _ = s.agg.refresh(&rec.name).await;
                }
                Ok(Json(json!({"app": s.agg.entry(&rec), "token": token})).into_response())
            })
        },
    },
    Route {
        path: "apps",
        access: Access::Owner,
        run: |s, _, v| {
            blocking(move || {
                ops::parse::<crate::engine::args::Empty>("apps", v)?;
                Ok(
                    json!({"apps": s.apps.list().iter().map(|a| s.agg.entry(a)).collect::<Vec<_>>()}),
                )
            })
        },
    },
    Route {
        path: "apps/get",
        access: Access::SelfService,
        run: |s, _, v| {
            blocking(move || {
                let name = name_of(&v)?;
                let rec = s.apps.get(&name).ok_or_else(|| apps::no_app(&name))?;
                Ok(json!({"app": s.agg.entry(&rec)}))
            })
        },
    },
    Route {
        path: "apps/update",
        access: Access::SelfService,
        run: |s, c, v| {
            Box::pin(async move {
                let name = name_of(&v)?;
                let f = fields(v)?;
                let by_owner = matches!(c.caller, Caller::Owner);
                let wasm = if by_owner {
                    install_component(&s, &f).await?
                } else {
                    None
                };
                let old = s.apps.get(&name);
                let rec = s.apps.update(&name, f, by_owner, wasm)?;
                forget_component(&s, old.as_ref());
                // The new backend takes over; calls in flight finish on the old one.
                if s.agg.sync().contains(&rec.name) {
                    let _ = s.agg.refresh(&rec.name).await;
                }
                Ok(Json(json!({"app": s.agg.entry(&rec)})).into_response())
            })
        },
    },
    Route {
        path: "apps/refresh",
        access: Access::SelfService,
        run: |s, _, v| {
            Box::pin(async move {
                let name = name_of(&v)?;
                s.apps.get(&name).ok_or_else(|| apps::no_app(&name))?;
                s.agg.sync();
                let mut diff = s.agg.refresh(&name).await?;
                let rec = s.apps.get(&name).ok_or_else(|| apps::no_app(&name))?;
                diff["app"] = s.agg.entry(&rec);
                Ok(Json(diff).into_response())
            })
        },
    },
    Route {
        path: "apps/rotate-token",
        access: Access::Owner,
        run: |s, _, v| blocking(move || Ok(json!({"token": s.apps.rotate_token(&name_of(&v)?)?}))),
    },
    Route {
        path: "apps/delete",
        access: Access::Owner,
        run: |s, _, v| {
            blocking(move || {
                let rec = s.apps.delete(&name_of(&v)?)?;
                forget_component(&s, Some(&rec));
                s.resync();
                Ok(json!({"deleted": rec.name}))
            })
        },
    },
    Route {
        path: "apps/tools",
        access: Access::Read,
        run: |s, _, v| {
            blocking(move || {
                ops::parse::<crate::engine::args::Empty>("apps/tools", v)?;
                Ok(s.agg.tools_json())
            })
        },
    },
    Route {
        path: "apps/call",
        access: Access::Read,
        run: |s, c, v| {
            Box::pin(async move {
                let a: CallArgs = ops::parse("apps/call", v)?;
                let out = s.agg.call(&a.tool, a.arguments, c).await;
                Ok(Json(out.to_json()).into_response())
            })
        },
    },
    Route {
        path: "webhooks/create",
        access: Access::Owner,
        run: |s, _, v| blocking(move || s.webhooks.create(ops::parse("webhooks/create", v)?)),
    },
    Route {
        path: "webhooks",
        access: Access::Read,
        run: |s, c, v| {
            blocking(move || {
                ops::parse::<crate::engine::args::Empty>("webhooks", v)?;
                Ok(s.webhooks.list(&c.caller))
            })
        },
    },
    Route {
        path: "webhooks/delete",
        access: Access::Owner,
        run: |s, _, v| blocking(move || s.webhooks.delete(ops::parse("webhooks/delete", v)?)),
    },
    Route {
        path: "changes",
        access: Access::Read,
        run: |s, _, v| {
            Box::pin(async move {
                let a: feed::ChangesArgs = ops::parse("changes", v)?;
                let limit = a.limit.unwrap_or(100);
                if !(1..=feed::MAX_LIMIT).contains(&limit) {
                    return Err(Error::invalid(format!("limit {limit} is out of range"))
                        .column("limit")
                        .rule("max")
                        .hint(format!("use a limit from 1 to {}", feed::MAX_LIMIT)));
                }
                let filter = Filter::new(a.ops, a.tables)?;
                let wait =
                    feed::read_wait(s.engine.clone(), a.since, limit as usize, filter, a.wait_ms);
                // A server shutting down answers a waiting poll at once, with nothing yet.
                let mut closing = s.closing.subscribe();
                let page = tokio::select! {
                    page = wait => page?,
                    _ = closing.wait_for(|c| *c) => feed::Page { changes: vec![], next: a.since },
                };
                Ok(([(header::CONTENT_TYPE, "application/json")], page.to_json()).into_response())
            })
        },
    },
    Route {
        path: "tool-calls/record",
        access: Access::Read,
        run: |s, c, v| {
            blocking(move || {
                // Not waited for: committed with the writer's next batch, in order.
                feed::ToolCallRecord::parse(v)?.record(&s.engine, c.actor)?;
                Ok(json!({"queued": true}))
            })
        },
    },
];

/// Runs a route: token, access check (the one function), body, handler.
async fn run_route(s: Shared, path: &str, req: Request) -> Response {
    let Some(route) = ROUTES.iter().find(|r| r.path == path.trim_end_matches('/')) else {
        return not_found().await;
    };
    let ctx = match s.ctx(req.headers()) {
        Ok(c) => c,
        Err(e) => return error_response(&e),
    };
    // Only the owner installs components: only the owner may send one in base64.
    let max = match (route.path, &ctx.caller) {
        ("apps/create" | "apps/update", Caller::Owner) => MAX_COMPONENT_BODY,
        _ => MAX_BODY,
    };
    let args = match json_body_max(req, max).await {
        Ok(v) => v,
        Err(e) => return error_response(&e),
    };
    let target = match args.get("name").and_then(Value::as_str) {
        Some(n) if route.access == Access::SelfService => Target::App(n),
        _ => Target::None,
    };
    if let Err(e) = auth::authorize(&ctx.caller, route.access, target) {
        return error_response(&e);
    }
    match (route.run)(s, ctx, args).await {
        Ok(r) => r,
        Err(e) => error_response(&e),
    }
}

async fn route2(
    State(s): State<Shared>,
    Path((a, b)): Path<(String, String)>,
    req: Request,
) -> Response {
    run_route(s, &format!("{a}/{b}"), req).await
}

/// `/datanotes/<x>/`: an operation, or a route such as `apps/` or `changes/`.
async fn route1(State(s): State<Shared>, Path(op): Path<String>, req: Request) -> Response {
    if ROUTES.iter().any(|r| r.path == op) {
        return run_route(s, &op, req).await;
    }
    run_op(State(s), Path(op), req).await
}

pub fn router(s: Shared) -> Router {
    Router::new()
        .route("/datanotes/health", get(health))
        .route("/datanotes/operations/", get(operations))
        .route("/datanotes/operations", get(operations))
        .route("/datanotes/changes/stream", get(crate::feed::sse::stream))
        .route("/datanotes/{op}/", post(route1))
        .route("/datanotes/{op}", post(route1))
        .route("/datanotes/{a}/{b}/", post(route2))
        .route("/datanotes/{a}/{b}", post(route2))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(s.clone())
        .merge(crate::mcp::router(s))
}

/// How long requests still running at ctrl-c / SIGTERM may take to finish.
const STOP_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// Serves until ctrl-c / SIGTERM, connections bounded by `limits` (see [`crate::listen`]).
/// Open MCP sessions are ended at once; other requests (feed streams, long polls) get
/// [`STOP_GRACE`] to finish, then the server stops anyway: a client holding a stream open must
/// not keep the server from stopping.
pub async fn serve(
    s: Shared,
    listener: tokio::net::TcpListener,
    limits: crate::listen::Limits,
) -> std::io::Result<()> {
    let app = router(s.clone());
    let mut closing = s.closing.subscribe();
    {
        let s = s.clone();
        tokio::spawn(async move {
            shutdown_signal().await;
            s.closing.send_replace(true);
        });
    }
    let server = crate::listen::serve(listener, app, s.clone(), limits, s.closing.subscribe());
    let grace = async move {
        let _ = closing.wait_for(|v| *v).await;
        tokio::time::sleep(STOP_GRACE).await;
    };
    tokio::select! {
        _ = server => Ok(()),
        _ = grace => {
            tracing::warn!("requests still open {} s after the stop signal: stopping anyway", STOP_GRACE.as_secs());
            Ok(())
        }
    }
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
