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
//! - `runtime/`: [`WasmRuntime`]: the engine's configuration and linker, the guests' threads,
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
//!
//! Both versions of the world are linked, `wit/datanotes-app.wit` (0.1) and `wit/0.2/` (0.2:
//! `engine.progress`, `engine.cancelled`, optional `resources` and `prompts` exports); a component
//! targets one. A cancelled call of a component that asks `engine.cancelled` gets a 50 ms grace to
//! return before it is dropped. The epoch ticker ticks only while an instance is checked out, and
//! sleeps while every app is idle, waking only to drop idle instances when due. The guest's engine
//! calls run `ops::call` in the server runtime's blocking threads.

mod error;
mod guest;
mod host;
mod limits;
pub(crate) mod net;
mod pool;
mod precheck;
mod run;
mod runtime;
mod typed;
mod world;

use guest::rpc_error;
pub use limits::Limits;
pub use precheck::{check_before_compile, not_a_component};
use run::{error, until};
pub use runtime::{COMPILE_COMMAND, WasmRuntime, compile_in_child, compile_main};
pub(crate) use runtime::{MAX_COMPONENT_BYTES, component_bytes};

use super::backend::{
    AppAnswer, AppBackend, AppRequest, BackendError, CallContext, Listing, RPC_ERROR_META,
};
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

/// The same `tool` record of each version of the world, as a [`ToolRec`].
macro_rules! tool_rec_from {
    ($($tool:ty),*) => {$(
        impl From<$tool> for ToolRec {
            fn from(t: $tool) -> ToolRec {
                let (name, description) = (t.name, t.description);
                let (input_schema, tables) = (t.input_schema, t.tables);
                ToolRec { name, description, input_schema, tables }
            }
        }
    )*};
}
tool_rec_from!(
    bindings::exports::datanotes::app::tools::Tool,
    bindings_v2::exports::datanotes::app::tools::Tool
);

/// What a 0.2 component lists besides its tools (as MCP JSON).
#[derive(Default)]
struct ContentLists {
    resources: Vec<Value>,
    templates: Vec<Value>,
    prompts: Vec<Value>,
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
    fn kind(&self) -> &'static str {
        "wasm"
    }

    fn in_process(&self) -> bool {
        true
    }

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

    fn call<'a>(&'a self, tool: &'a str, args: Value, ctx: &'a CallContext) -> AppAnswer<'a> {
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
    ) -> AppAnswer<'a> {
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
