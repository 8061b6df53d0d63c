//! WASM apps: components targeting `wit/datanotes-app.wit`, run in-process under wasmtime.
//!
//! The second implementation of [`AppBackend`]: the aggregator above treats it exactly like a
//! remote app. A component's engine calls go through `ops::call` with the app's own scope, so the
//! one permission check applies to them as to its token over HTTP.
//!
//! - Sandbox: WASI p2 is linked with nothing granted (no preopened folder, no environment, no
//!   sockets, no inherited stdio); guest stdout/stderr go to the log. wasi:http is linked too,
//!   but a request goes out only to a host the owner listed in the app's `allow_hosts`
//!   (`net.rs`); without it every request is denied.
//! - Limits per app: memory (every memory and table of an instance against one budget, and at
//!   most [`limits::MAX_MEMORIES`] memories, [`limits::MAX_TABLES`] tables,
//!   [`limits::MAX_CORE_INSTANCES`] core
//!   instances), a CPU deadline (epoch interruption), a wall-clock timeout, a cap on result size
//!   and on concurrent instances.
//! - Async: guests run on wasmtime's async API. A call's first step runs on the caller's task
//!   (a call that ends before the next epoch tick and waits on no host call, most calls, takes
//!   no thread hop); a call that yields goes on in a tokio task of its own (a caller that
//!   hangs up does not cut it short), on a runtime of their own (`DATANOTES_WASM_THREADS`
//!   threads, nice 10): a spinning guest holds a server thread for at most one epoch tick
//!   (10 ms), then no longer holds up HTTP, feed streams or writes. A running guest yields to
//!   the executor at every epoch tick; the wall-clock timeout, or the caller's cancellation
//!   (`CallContext::cancel`: MCP `notifications/cancelled`, a closed MCP request; never on
//!   HTTP `apps/call/`), drops the call's future, which cancels the guest wherever it is
//!   (spinning: at its next tick; blocked in a host call such as a sleep or an HTTP request:
//!   at once). The cancelled instance is thrown away and its slot is free at once; a cancelled
//!   call answers `BackendError::cancelled`.
//! - Fast: compiled once at install into a cache keyed by the component's SHA-256 and the engine
//!   configuration; instances are kept warm and reused, and thrown away after a trap or limit.
//!
//! One file per concern, as in wasmtime-wasi's `p2/`:
//! - `mod.rs`: [`WasmApp`], the backend (listing, calls, their deadlines and slots);
//! - `runtime.rs`: [`WasmRuntime`]: the engine's configuration and linker, the guests' threads,
//!   the compile cache, installing a component;
//! - `pool.rs`: warm instances (made, checked out, checked in or thrown away);
//! - `limits.rs`: the owner's [`Limits`], the memory budget (a `ResourceLimiter`), CPU time in
//!   epoch ticks;
//! - `host/`: the store's data (WASI and wasi:http views), the world's imports
//!   (`engine.call`, `log`), the guest's stdout and stderr;
//! - `net.rs`: `allow_hosts`, the wasi:http hook that lets a request out;
//! - `world.rs`: the check of a component's exports against the world; `precheck.rs`: the
//!   part of it that needs no compile (names and parameters), which `apps install` does first;
//! - `typed/`: typed components (any other component): its exported functions as tools, their
//!   JSON Schemas from the WIT types, arguments and results converted;
//! - `error.rs`: [`WasmError`], mapped to the aggregator's error in one place.

mod error;
mod host;
mod limits;
pub(crate) mod net;
mod pool;
mod precheck;
mod runtime;
mod typed;
mod world;

pub use limits::Limits;
pub use precheck::{check_before_compile, not_a_component};
pub use runtime::{COMPILE_COMMAND, WasmRuntime, compile_in_child, compile_main};
pub(crate) use runtime::{MAX_COMPONENT_BYTES, component_bytes};

use super::backend::{AppBackend, AppRequest, BackendError, CallContext, Listing, RPC_ERROR_META};
use crate::auth::AppScope;
use crate::engine::Actor;
use error::WasmError;
use futures_util::future::BoxFuture;

use net::Allowed;
use pool::Instance;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::Duration;

mod bindings {
    wasmtime::component::bindgen!({
        path: "wit",
        world: "app",
        // Engine calls may wait on the writer: they run in a blocking thread, awaited.
        imports: { "datanotes:app/engine.call": async },
        exports: { default: async },
    });
}

/// Version 0.2 of the world (`wit/0.2/`): its imports add `engine.progress` and
/// `engine.cancelled`; its exports add `resources` and `prompts`, each optional (a component's
/// exports are looked up one interface at a time, see `typed::Shared`).
mod bindings_v2 {
    wasmtime::component::bindgen!({
        path: "wit/0.2",
        world: "app-with-content",
        imports: {
            "datanotes:app/engine.call": async,
            "datanotes:app/engine.progress": async,
        },
        exports: { default: async },
    });
}

use bindings::exports::datanotes::app::tools::CallContext as WitContext;

/// The world every WASM app targets.
pub(crate) const WORLD: &str = "datanotes:app/app@0.1.0";

/// What the registry keeps of a WASM app.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WasmInfo {
    /// The component's SHA-256 (hex): its file is `.datanotes/apps/<sha256>.wasm`.
    pub sha256: String,
    /// The component's size in bytes.
    pub size: u64,
    /// The owner-set limits.
    #[serde(default)]
    pub limits: Limits,
    /// The hosts the app may send HTTP requests to (owner-granted; none by default).
    #[serde(default)]
    pub allow_hosts: Vec<String>,
    /// Where the component came from when it was installed by reference (null: a file or an
    /// upload).
    #[serde(default)]
    pub origin: Option<crate::apps::source::Origin>,
    /// The version before it, kept for `apps/rollback`.
    #[serde(default)]
    pub previous: Option<Box<crate::apps::source::Previous>>,
}

/// A WASM app: an [`AppBackend`] over warm instances of one component.
#[derive(Clone)]
pub(crate) struct WasmApp(Arc<Inner>);

/// A [`WasmApp`]'s state, shared by its calls.
struct Inner {
    rt: Arc<WasmRuntime>,
    scope: Arc<AppScope>,
    limits: Limits,
    allowed: Arc<[Allowed]>,
    sha: String,
    /// The component, ready to instantiate: loaded (or compiled) on first use, in a blocking
    /// thread, so that starting the server never waits for a compilation.
    pre: Mutex<Option<Result<typed::Pre, WasmError>>>,
    warm: Mutex<Vec<Instance>>,
    /// Whether a task drops the warm instances once idle (see `pool.rs`).
    reaping: std::sync::atomic::AtomicBool,
    /// The app's live instances and their memory.
    meter: Arc<limits::Meter>,
    slots: Arc<tokio::sync::Semaphore>,
    /// How long the last fresh instance took to make, in µs (`u64::MAX`: none yet).
    made_us: std::sync::atomic::AtomicU64,
}

impl WasmApp {
    /// The app of an installed component (`sha`), with its scope, limits and `allow_hosts`.
    /// Nothing is loaded until its first listing or call.
    pub(crate) fn new(
        rt: Arc<WasmRuntime>,
        scope: AppScope,
        sha: &str,
        limits: Limits,
        allow_hosts: &[String],
    ) -> WasmApp {
        let slots = Arc::new(tokio::sync::Semaphore::new(limits.max_instances as usize));
        WasmApp(Arc::new(Inner {
            rt,
            allowed: net::parse_list(&scope.name, allow_hosts),
            scope: Arc::new(scope),
            limits,
            sha: sha.to_string(),
            pre: Mutex::new(None),
            warm: Mutex::new(vec![]),
            reaping: Default::default(),
            meter: Arc::default(),
            slots,
            made_us: u64::MAX.into(),
        }))
    }
}

/// A tool as either version of the world lists it.
struct ToolRec {
    name: String,
    description: String,
    input_schema: String,
    tables: Vec<String>,
}

/// What a 0.2 component lists besides its tools (as MCP JSON).
#[derive(Default)]
struct ContentLists {
    resources: Vec<Value>,
    templates: Vec<Value>,
    prompts: Vec<Value>,
}

/// `{key: value}` added to `v` when `value` is some.
fn with(mut v: Value, key: &str, value: Option<String>) -> Value {
    if let Some(x) = value {
        v[key] = x.into();
    }
    v
}

/// What a 0.2 instance lists: its tools, instructions, resources, templates and prompts.
async fn list_v2(
    v: &typed::V2,
    store: &mut wasmtime::Store<host::Host>,
) -> wasmtime::Result<(Vec<ToolRec>, String, ContentLists)> {
    let tools = v.tools.call_list_tools(&mut *store).await?;
    let instructions = v.tools.call_instructions(&mut *store).await?;
    let tools = tools
        .into_iter()
        .map(|t| ToolRec {
            name: t.name,
            description: t.description,
            input_schema: t.input_schema,
            tables: t.tables,
        })
        .collect();
    let mut c = ContentLists::default();
    if let Some(r) = &v.resources {
        for x in r.call_list_resources(&mut *store).await? {
            let e = json!({"uri": x.uri, "name": x.name});
            let e = with(e, "description", x.description);
            c.resources.push(with(e, "mimeType", x.mime_type));
        }
        for x in r.call_list_resource_templates(&mut *store).await? {
            let e = json!({"uriTemplate": x.uri_template, "name": x.name});
            let e = with(e, "description", x.description);
            c.templates.push(with(e, "mimeType", x.mime_type));
        }
    }
    if let Some(p) = &v.prompts {
        for x in p.call_list_prompts(&mut *store).await? {
            let e = with(json!({"name": x.name}), "description", x.description);
            let args: Vec<Value> = x
                .arguments
                .into_iter()
                .map(|a| {
                    let e = json!({"name": a.name, "required": a.required});
                    with(e, "description", a.description)
                })
                .collect();
            let mut e = e;
            if !args.is_empty() {
                e["arguments"] = args.into();
            }
            c.prompts.push(e);
        }
    }
    Ok((tools, instructions, c))
}

impl Inner {
    /// The app's tools and instructions (and, of a 0.2 component, its resources, templates and
    /// prompts), from an instance.
    async fn list_tools(
        self: &Arc<Self>,
        deadline: tokio::time::Instant,
    ) -> Result<Listing, WasmError> {
        let mut inst = self.checkout(Actor::default(), None, deadline).await?;
        let pre = self.loaded().await?;
        let r = match (&inst.app, &pre) {
            (typed::Guest::World(app), _) => {
                let t = app.datanotes_app_tools();
                match t.call_list_tools(&mut inst.store).await {
                    Ok(tools) => t.call_instructions(&mut inst.store).await.map(|ins| {
                        let tools = tools
                            .into_iter()
                            .map(|t| ToolRec {
                                name: t.name,
                                description: t.description,
                                input_schema: t.input_schema,
                                tables: t.tables,
                            })
                            .collect();
                        (tools, ins, ContentLists::default())
                    }),
                    Err(e) => Err(e),
                }
            }
            (typed::Guest::World2(v), _) => list_v2(v, &mut inst.store).await,
            // A typed component's tools come from its types; the instance is made (and kept
            // warm) to check that it instantiates.
            (typed::Guest::Typed(_), typed::Pre::Typed(_, t)) => {
                self.checkin(inst, Ok(()))?;
                return Ok(t.listing.clone());
            }
            _ => return Err(WasmError::Wasmtime("the component changed kind".into())),
        };
        let (tools, instructions, content) = self.checkin(inst, r)?;
        let mut out = vec![];
        for t in tools {
            let schema: Value =
                serde_json::from_str(&t.input_schema).map_err(|e| WasmError::BadSchema {
                    tool: t.name.clone(),
                    why: e.to_string(),
                })?;
            let mut tool =
                json!({"name": t.name, "description": t.description, "inputSchema": schema});
            if !t.tables.is_empty() {
                tool["_meta"] = json!({"datanotes/tables": t.tables});
            }
            out.push(
                serde_json::from_value(tool).map_err(|e| WasmError::BadTool {
                    tool: t.name.clone(),
                    why: e.to_string(),
                })?,
            );
        }
        Ok(Listing {
            tools: out,
            instructions: Some(instructions).filter(|s| !s.is_empty()),
            skipped: vec![],
            resources: content.resources,
            templates: content.templates,
            prompts: content.prompts,
            fields: Default::default(),
        })
    }

    /// The actor of a call made for `cc`, and the context the guest is passed.
    fn actor_of(&self, cc: &CallContext) -> (Actor, WitContext) {
        let (harness, model) = match cc.actor.as_deref().map(|a| a.split_once('/')) {
            Some(Some((h, m))) => (Some(h.trim().to_string()), Some(m.trim().to_string())),
            Some(None) => (cc.actor.clone(), None),
            None => (None, None),
        };
        let actor = Actor::new(
            harness.clone(),
            model.clone(),
            Some(self.scope.name.clone()),
            cc.session.clone(),
            Some(format!("app:{}", self.scope.name)),
        )
        .with_caller(cc.caller.clone());
        let wctx = WitContext {
            harness,
            model,
            session: cc.session.clone(),
        };
        (actor, wctx)
    }

    /// Calls `tool` in an instance: its answer as an MCP `CallToolResult`, or why the call
    /// failed (a trap, a limit).
    async fn call_tool(
        self: &Arc<Self>,
        tool: &str,
        args: &Value,
        cc: &CallContext,
        deadline: tokio::time::Instant,
    ) -> Result<Value, WasmError> {
        let (actor, wctx) = self.actor_of(cc);
        if let typed::Pre::Typed(_, t) = self.loaded().await? {
            return self.call_typed(&t, tool, args, actor, cc, deadline).await;
        }
        let args = &args.to_string();
        let mut inst = self.checkout(actor, Some(cc), deadline).await?;
        let r = match &inst.app {
            typed::Guest::World(app) => {
                app.datanotes_app_tools()
                    .call_call_tool(&mut inst.store, tool, args, &wctx)
                    .await
            }
            typed::Guest::World2(v) => {
                v.tools
                    .call_call_tool(&mut inst.store, tool, args, &v2_context(wctx))
                    .await
            }
            typed::Guest::Typed(_) => {
                return Err(WasmError::Wasmtime("the component changed kind".into()));
            }
        };
        let r = self.checkin(inst, r)?;
        let max = self.limits.max_result_bytes as usize;
        let text = match r {
            Ok(t) | Err(t) if t.len() > max => {
                return Err(WasmError::TooLarge {
                    tool: tool.to_string(),
                    bytes: t.len(),
                    max,
                });
            }
            Ok(t) => t,
            Err(msg) => {
                return Ok(json!({"content": [{"type": "text", "text": msg}], "isError": true}));
            }
        };
        Ok(match serde_json::from_str::<Value>(&text) {
            Ok(v) if v.get("content").is_some_and(Value::is_array) => v,
            Ok(Value::String(s)) => json!({"content": [{"type": "text", "text": s}]}),
            Ok(v) => {
                json!({"content": [{"type": "text", "text": v.to_string()}], "structuredContent": v})
            }
            Err(_) => json!({"content": [{"type": "text", "text": text}]}),
        })
    }

    /// A request beside the tools (0.2: `resources/read`, `prompts/get`) in an instance: the
    /// guest's MCP result, or a JSON-RPC error it answered (as the aggregator passes it on).
    async fn serve(
        self: &Arc<Self>,
        req: AppRequest,
        params: &Value,
        cc: &CallContext,
        deadline: tokio::time::Instant,
    ) -> Result<Value, WasmError> {
        let (actor, wctx) = self.actor_of(cc);
        let wctx = v2_context(wctx);
        let mut inst = self.checkout(actor, Some(cc), deadline).await?;
        let text = |k: &str| params.get(k).and_then(Value::as_str).unwrap_or_default();
        let (r, code, want) = match (&inst.app, req) {
            (typed::Guest::World2(v), AppRequest::ReadResource) if v.resources.is_some() => {
                let g = v.resources.as_ref().expect("checked");
                let r = g
                    .call_read_resource(&mut inst.store, text("uri"), &wctx)
                    .await;
                (r, -32002, "contents")
            }
            (typed::Guest::World2(v), AppRequest::GetPrompt) if v.prompts.is_some() => {
                let g = v.prompts.as_ref().expect("checked");
                let args: Vec<(String, String)> = match params.get("arguments") {
                    Some(Value::Object(m)) => m
                        .iter()
                        .map(|(k, v)| {
                            let v = v.as_str().map_or_else(|| v.to_string(), str::to_string);
                            (k.clone(), v)
                        })
                        .collect(),
                    _ => vec![],
                };
                let r = g
                    .call_get_prompt(&mut inst.store, text("name"), &args, &wctx)
                    .await;
                (r, -32602, "messages")
            }
            _ => {
                self.checkin(inst, Ok(()))?;
                return Ok(rpc_error(
                    -32601,
                    format!("the app does not answer {}", req.method()),
                ));
            }
        };
        let r = self.checkin(inst, r)?;
        let max = self.limits.max_result_bytes as usize;
        let what = || {
            format!(
                "{} ({})",
                req.method(),
                text(if want == "contents" { "uri" } else { "name" })
            )
        };
        match r {
            Ok(t) | Err(t) if t.len() > max => Err(WasmError::TooLarge {
                tool: what(),
                bytes: t.len(),
                max,
            }),
            Err(msg) => Ok(rpc_error(code, msg)),
            Ok(t) => match serde_json::from_str::<Value>(&t) {
                Ok(v) if v.get(want).is_some_and(Value::is_array) => Ok(v),
                _ => Ok(rpc_error(
                    -32603,
                    format!(
                        "the app's answer to {} is not JSON with an array \"{want}\"",
                        what()
                    ),
                )),
            },
        }
    }
}

/// The call context of 0.2 (the same fields as 0.1's).
fn v2_context(c: WitContext) -> bindings_v2::exports::datanotes::app::tools::CallContext {
    bindings_v2::exports::datanotes::app::tools::CallContext {
        harness: c.harness,
        model: c.model,
        session: c.session,
    }
}

/// An answer that stands for a JSON-RPC error (see [`RPC_ERROR_META`]).
fn rpc_error(code: i64, message: String) -> Value {
    json!({"_meta": {RPC_ERROR_META: {"code": code, "message": message}}})
}

impl WasmApp {
    /// The app's tools, listed like any call: in a slot, within `timeout_ms`, in a task on the
    /// guests' runtime (started at once: a caller that goes away does not cut it short).
    pub(super) fn list_checked(
        &self,
    ) -> impl Future<Output = Result<Listing, WasmError>> + Send + 'static {
        let me = self.clone();
        let task = self.0.rt.guests.handle().spawn(async move {
            let timeout = Duration::from_millis(me.0.limits.timeout_ms);
            let deadline = tokio::time::Instant::now() + timeout;
            let _permit = me.slot(deadline).await?;
            // A timeout drops the listing's future: the guest is cancelled wherever it is, its
            // instance thrown away, and the slot freed with `_permit`.
            match until(deadline, me.0.list_tools(deadline)).await {
                None => Err(WasmError::Timeout {
                    what: "listing tools".into(),
                    ms: timeout.as_millis(),
                }),
                Some(Err(_)) => Err(WasmError::Panicked("the listing".into())),
                Some(Ok(r)) => r,
            }
        });
        async move {
            task.await
                .unwrap_or_else(|_| Err(WasmError::Panicked("the listing".into())))
        }
    }

    /// A slot to run an instance in, waited for until `deadline`.
    async fn slot(
        &self,
        deadline: tokio::time::Instant,
    ) -> Result<tokio::sync::OwnedSemaphorePermit, WasmError> {
        let n = self.0.limits.max_instances;
        // A free slot is taken without arming a timer.
        if let Ok(p) = self.0.slots.clone().try_acquire_owned() {
            return Ok(p);
        }
        match tokio::time::timeout_at(deadline, self.0.slots.clone().acquire_owned()).await {
            Err(_) => Err(WasmError::Busy { n }),
            Ok(Err(_)) => Err(WasmError::Closed),
            Ok(Ok(p)) => Ok(p),
        }
    }
}

impl AppBackend for WasmApp {
    fn list(&self) -> BoxFuture<'_, Result<Listing, BackendError>> {
        // Kept with the compiled code since the component first listed its tools (at install):
        // no instance is made for it.
        let rt = self.0.rt.clone();
        if let Some(l) = rt.cached_listing(&self.0.sha, &self.0.scope.name) {
            return Box::pin(async move { Ok(l) });
        }
        let (listing, sha) = (self.list_checked(), self.0.sha.clone());
        let app = self.0.scope.name.clone();
        Box::pin(async move {
            let l = listing.await?;
            rt.save_listing(&sha, &app, &l);
            Ok(l)
        })
    }

    fn stats(&self) -> Option<Value> {
        let mut s = self.0.stats();
        s["listingUs"] = self.0.rt.listing_us(&self.0.sha);
        Some(s)
    }

    /// A guest reads the vault through the host when a resource is read; it sends nothing.
    fn resources_follow_the_vault(&self) -> bool {
        true
    }

    fn call<'a>(
        &'a self,
        tool: &'a str,
        args: Value,
        ctx: &'a CallContext,
    ) -> BoxFuture<'a, Result<Value, BackendError>> {
        Box::pin(async move {
            let name = tool.to_string();
            let r = self
                .run(format!("calling {tool}"), ctx, move |me, cc, deadline| {
                    Box::pin(async move { me.call_tool(&name, &args, &cc, deadline).await })
                })
                .await?;
            // A trap or a limit fails this call only: the app stays usable.
            r.or_else(error)
        })
    }

    fn request<'a>(
        &'a self,
        req: AppRequest,
        params: Value,
        ctx: &'a CallContext,
    ) -> BoxFuture<'a, Result<Value, BackendError>> {
        Box::pin(async move {
            match req {
                AppRequest::ReadResource | AppRequest::GetPrompt => {}
                // No completions: none to offer (not an unreachable app).
                AppRequest::Complete => {
                    return Ok(json!({"completion": {"values": [], "hasMore": false}}));
                }
                // Accepted: its resources are read from the vault, so the door follows a
                // subscription through the change feed (`resources_follow_the_vault`).
                AppRequest::Subscribe | AppRequest::Unsubscribe => return Ok(json!({})),
                // No tasks: its tools run within the call.
                AppRequest::CallAsTask
                | AppRequest::GetTask
                | AppRequest::TaskResult
                | AppRequest::ListTasks
                | AppRequest::CancelTask => {
                    return Ok(rpc_error(-32601, "a WASM app runs no tasks".to_string()));
                }
                // Its tools are the same for every caller: the aggregator's listing.
                AppRequest::ListTools => {
                    return Ok(rpc_error(
                        -32601,
                        "a WASM app lists the same tools to every caller".to_string(),
                    ));
                }
            }
            let r = self
                .run(
                    format!("answering {}", req.method()),
                    ctx,
                    move |me, cc, deadline| {
                        Box::pin(async move { me.serve(req, &params, &cc, deadline).await })
                    },
                )
                .await?;
            r.map_err(BackendError)
        })
    }
}

/// The work of one call or request in an instance of the app.
type Work<T> = BoxFuture<'static, Result<T, WasmError>>;

impl WasmApp {
    /// Runs `work` (a tool call, a read) like every call: in a slot, within the app's
    /// `timeout_ms`, unless its caller cancels it. Answers its result or why it failed (the
    /// text the caller reads); `Err` only when the caller cancelled it.
    ///
    /// The work starts on the caller's task and, if it does not end in its first step, goes on
    /// in a task of its own on the guests' runtime: a caller that goes away (a closed
    /// connection) does not cancel it half-way; its timeout does, and so does its caller's
    /// cancellation (`ctx.cancel`: MCP `notifications/cancelled`, a closed MCP request), which
    /// the task watches itself (the caller no longer awaits it then). A component that imports
    /// `engine.cancelled` (0.2) is given [`GRACE`] to return once cancelled, before it is
    /// interrupted: its instance is kept when it does.
    async fn run<T: Send + 'static>(
        &self,
        what: String,
        ctx: &CallContext,
        work: impl FnOnce(Arc<Inner>, CallContext, tokio::time::Instant) -> Work<T> + Send + 'static,
    ) -> Result<Result<T, String>, BackendError> {
        // A component that cannot be loaded makes the app unreachable (not a failed call).
        let grace = match self.0.loaded().await {
            Ok(p) => p.shared().grace.then_some(GRACE),
            Err(e) => return Err(e.into()),
        };
        let timeout = Duration::from_millis(self.0.limits.timeout_ms);
        let deadline = tokio::time::Instant::now() + timeout;
        let (me, cc, panicked) = (self.clone(), ctx.clone(), what.clone());
        let mut work = Box::pin(async move {
            let run = async {
                // Waiting for a free instance counts in the call's time too.
                let _permit = match me.slot(deadline).await {
                    Ok(p) => p,
                    Err(e) => return Err(format!("{what}: {e}")),
                };
                // A timeout drops the call's future, which cancels the guest even when it
                // is blocked in a host call (a sleep): its instance is thrown away (a
                // cancelled store is never reused) and the slot is free as soon as this
                // returns.
                match until(deadline, work(me.0.clone(), cc.clone(), deadline)).await {
                    None => Err(WasmError::Timeout {
                        what: what.clone(),
                        ms: timeout.as_millis(),
                    }
                    .to_string()),
                    Some(Err(_)) => Err(WasmError::Panicked(what.clone()).to_string()),
                    Some(Ok(Err(e))) => Err(e.to_string()),
                    Some(Ok(Ok(v))) => Ok(v),
                }
            };
            // A cancellation drops `run` the same way, wherever it is: waiting for a slot,
            // making the instance, spinning (seen at the next epoch tick, when the guest
            // yields) or blocked in a host call (seen at once); after the grace, if any.
            unless_cancelled(&cc.cancel, grace, run)
                .await
                .ok_or_else(BackendError::cancelled)
        });
        // The first step, here: a call that needs no wait (most: a warm instance, guest
        // code that ends before the next epoch tick, at most 10 ms, and no host call that
        // waits) is answered without a hop to the guests' threads and back. A guest that
        // yields (an epoch tick, an engine call, a sleep, an HTTP request) goes on there.
        let first = std::future::poll_fn(|cx| std::task::Poll::Ready(work.as_mut().poll(cx))).await;
        if let std::task::Poll::Ready(r) = first {
            return r;
        }
        let task = self.0.rt.guests.handle().spawn(work);
        task.await
            .unwrap_or_else(|_| Ok(Err(WasmError::Panicked(panicked).to_string())))
    }
}

/// How long a cancelled call of a component that imports `engine.cancelled` may go on, to see
/// it and return, before it is interrupted.
const GRACE: Duration = Duration::from_millis(50);

/// A failed call's answer: an error result the caller sees (the app stays reachable).
fn error(msg: impl std::fmt::Display) -> Result<Value, BackendError> {
    Ok(json!({"content": [{"type": "text", "text": msg.to_string()}], "isError": true}))
}

/// Runs `fut` unless `cancel` fires first: `None` then, and `fut` is dropped at once (a guest
/// stopped wherever it is, its instance thrown away). Nothing is armed until `fut` waits: a
/// call that ends in its first step only polls it. Once armed, the token is checked before
/// `fut` is polled again, so a guest woken after the cancellation (its epoch tick's yield)
/// does not run another tick. With a `grace`, `fut` goes on for that long after the
/// cancellation (a guest that asks `engine.cancelled` sees it and returns), then is dropped;
/// its answer is `None` all the same.
async fn unless_cancelled<T>(
    cancel: &tokio_util::sync::CancellationToken,
    grace: Option<Duration>,
    fut: impl Future<Output = T>,
) -> Option<T> {
    use std::task::Poll;
    let mut fut = std::pin::pin!(fut);
    let mut cancelled = std::pin::pin!(cancel.cancelled());
    let mut armed = false;
    // Set once cancelled, with a grace: when `fut` is dropped.
    let mut ends: Option<std::pin::Pin<Box<tokio::time::Sleep>>> = None;
    std::future::poll_fn(|cx| {
        if armed && ends.is_none() && cancelled.as_mut().poll(cx).is_ready() {
            let Some(g) = grace else {
                return Poll::Ready(None);
            };
            ends = Some(Box::pin(tokio::time::sleep(g)));
        }
        if let Some(e) = ends.as_mut()
            && e.as_mut().poll(cx).is_ready()
        {
            return Poll::Ready(None);
        }
        if let Poll::Ready(r) = fut.as_mut().poll(cx) {
            return Poll::Ready(ends.is_none().then_some(r));
        }
        if !armed {
            armed = true;
            if cancelled.as_mut().poll(cx).is_ready() {
                let Some(g) = grace else {
                    return Poll::Ready(None);
                };
                let mut e = Box::pin(tokio::time::sleep(g));
                if e.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(None);
                }
                ends = Some(e);
            }
        }
        Poll::Pending
    })
    .await
}

/// Runs `fut` until `deadline`; `None` when the deadline came first, `Some(Err)` if it panicked
/// (a host function's panic: the call fails, not the request that made it). The deadline wins a
/// tie: a guest woken after it (by a host call that ended then, its HTTP request bounded by the
/// same deadline, say) is cancelled, not resumed. The timer is only armed once `fut` waits (a
/// call that ends in its first step registers none).
async fn until<T>(
    deadline: tokio::time::Instant,
    fut: impl Future<Output = T>,
) -> Option<std::thread::Result<T>> {
    use futures_util::FutureExt;
    use std::task::Poll;
    let mut fut = std::pin::pin!(std::panic::AssertUnwindSafe(fut).catch_unwind());
    let mut sleep = std::pin::pin!(tokio::time::sleep_until(deadline));
    std::future::poll_fn(|cx| {
        if tokio::time::Instant::now() >= deadline {
            return Poll::Ready(None);
        }
        if let Poll::Ready(r) = fut.as_mut().poll(cx) {
            return Poll::Ready(Some(r));
        }
        sleep.as_mut().poll(cx).map(|()| None)
    })
    .await
}
