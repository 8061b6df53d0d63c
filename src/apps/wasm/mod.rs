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
//!   most [`MAX_MEMORIES`] memories, [`MAX_TABLES`] tables, [`MAX_CORE_INSTANCES`] core
//!   instances), a CPU deadline (epoch interruption), a wall-clock timeout, a cap on result size
//!   and on concurrent instances.
//! - Async: guests run on wasmtime's async API, a call in a tokio task of its own (a caller that
//!   hangs up does not cut it short), on a runtime of their own (`DATANOTES_WASM_THREADS`
//!   threads, nice 10): spinning guests do not hold up HTTP, feed streams or writes. A running guest yields to the executor at every epoch
//!   tick; the wall-clock timeout drops the call's future, which cancels the guest wherever it is
//!   (spinning, or blocked in a host call such as a sleep or an HTTP request). The cancelled
//!   instance is thrown away and its slot is free at once.
//! - Fast: compiled once at install into a cache keyed by the component's SHA-256 and the engine
//!   configuration; instances are kept warm and reused, and thrown away after a trap or limit.

use super::backend::{AppBackend, BackendError, CallContext, Listing};
use crate::auth::{AppScope, Caller};
use crate::engine::{Actor, Engine};
use crate::error::{Error, Result};
use crate::ops::{self, Ctx};
use futures_util::future::BoxFuture;
use net::{Allowed, Outgoing};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use wasmtime::Store;
use wasmtime::component::{Component, HasSelf, Linker, ResourceTable};
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

pub mod net;

mod bindings {
    wasmtime::component::bindgen!({
        path: "wit",
        world: "app",
        // Engine calls may wait on the writer: they run in a blocking thread, awaited.
        imports: { "datanotes:app/engine.call": async },
        exports: { default: async },
    });
}

use bindings::datanotes::app::types::{EngineError, Level};
use bindings::exports::datanotes::app::tools::CallContext as WitContext;

/// The world every WASM app targets.
pub const WORLD: &str = "datanotes:app/app@0.1.0";

/// Epoch ticks: the CPU deadline is counted in these.
const TICK: Duration = Duration::from_millis(10);

/// The owner-set limits of a WASM app.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Memory of one instance, in MiB: all its linear memories and tables together (a table
    /// element counted as 8 bytes).
    pub memory_mb: u64,
    /// How long one call may run guest code, in ms: counted in epoch ticks (10 ms) that pass
    /// while the guest runs, so a guest that spins is stopped with a trap. Time blocked in a host
    /// call (an engine call, a sleep, an HTTP request) is not counted: `timeout_ms` bounds it.
    pub cpu_ms: u64,
    /// Wall-clock time one call may take, in ms.
    pub timeout_ms: u64,
    /// The largest result a call may answer, in bytes.
    pub max_result_bytes: u64,
    /// Instances that may run at once (concurrent calls beyond wait).
    pub max_instances: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            memory_mb: 128,
            cpu_ms: 10_000,
            timeout_ms: 180_000,
            max_result_bytes: 1 << 20,
            max_instances: 4,
        }
    }
}

impl Limits {
    pub fn merged(&self, change: &Value) -> Result<Limits> {
        let mut cur = serde_json::to_value(self).unwrap_or_default();
        let Some(obj) = change.as_object() else {
            return Err(Error::invalid("limits must be an object")
                .column("limits")
                .hint("e.g. {\"memory_mb\": 64}"));
        };
        for (k, v) in obj {
            cur[k] = v.clone();
        }
        let l: Limits = serde_json::from_value(cur).map_err(|e| {
            Error::invalid(format!("invalid limits: {e}"))
                .column("limits")
                .hint("limits are memory_mb, cpu_ms, timeout_ms, max_result_bytes, max_instances (positive integers)")
        })?;
        if l.memory_mb == 0
            || l.cpu_ms == 0
            || l.timeout_ms == 0
            || l.max_instances == 0
            || l.max_result_bytes == 0
        {
            return Err(Error::invalid("limits must be positive")
                .column("limits")
                .rule("min")
                .hint("use values of 1 or more"));
        }
        // A wasm32 memory holds at most 4 GiB; a larger number (shifted into bytes) could wrap
        // around to a tiny limit. The other bounds keep a typo from pinning the host.
        let max = [
            ("memory_mb", l.memory_mb, 4096),
            ("cpu_ms", l.cpu_ms, 86_400_000),
            ("timeout_ms", l.timeout_ms, 86_400_000),
            ("max_result_bytes", l.max_result_bytes, 1 << 30),
            ("max_instances", u64::from(l.max_instances), 1024),
        ];
        for (name, v, most) in max {
            if v > most {
                return Err(
                    Error::invalid(format!("{name} {v} is above the maximum {most}"))
                        .column("limits")
                        .rule("max")
                        .hint(format!("give {name} at most {most}")),
                );
            }
        }
        Ok(l)
    }
}

/// What the registry keeps of a WASM app.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WasmInfo {
    pub sha256: String,
    pub size: u64,
    #[serde(default)]
    pub limits: Limits,
    /// The hosts the app may send HTTP requests to (owner-granted; none by default).
    #[serde(default)]
    pub allow_hosts: Vec<String>,
}

/// A store's data: WASI with nothing granted, wasi:http behind the app's `allow_hosts`, the
/// app's scope, the current call's actor.
pub struct Host {
    wasi: WasiCtx,
    http: WasiHttpCtx,
    outgoing: Outgoing,
    table: ResourceTable,
    limits: GuestLimits,
    engine: Arc<Engine>,
    /// The server's runtime: engine calls run in its blocking threads, like the HTTP door's.
    server: tokio::runtime::Handle,
    scope: Arc<AppScope>,
    actor: Actor,
    /// The epoch ticks the current call may still run guest code for (`cpu_ms`).
    ticks_left: u64,
    /// Set when an engine call returns: the tick seen next passed (at least partly) while the
    /// guest waited for it, and is not charged.
    waited: bool,
    stdout: LogPipe,
    stderr: LogPipe,
}

/// The most memories, tables and core instances one instance of an app (one store) may create.
/// The example apps need 1 memory, 2 tables and 3 to 14 core instances (a Python app links a
/// dozen core modules); a component beyond these fails to instantiate.
pub const MAX_MEMORIES: usize = 4;
pub const MAX_TABLES: usize = 20;
pub const MAX_CORE_INSTANCES: usize = 100;

/// What one table element costs the host: a `funcref` is a pointer.
const TABLE_ELEMENT_BYTES: usize = std::mem::size_of::<usize>();

/// `memory_mb` for a whole instance: every linear memory and table it creates (at
/// instantiation or by growing one) is counted against one budget, so a component that
/// declares many memories or a huge table gets no more than the owner granted. Counts are per
/// store, and a store holds one instance of the app: all is released when it is dropped.
pub struct GuestLimits {
    /// `memory_mb` in bytes.
    budget: usize,
    /// What the instance's memories and tables hold now, in bytes.
    used: usize,
    /// Set when a growth was refused: the call fails with this message.
    refused: Option<String>,
    memory_mb: u64,
}

impl GuestLimits {
    fn new(memory_mb: u64) -> GuestLimits {
        GuestLimits {
            budget: (memory_mb as usize) << 20,
            used: 0,
            refused: None,
            memory_mb,
        }
    }

    /// Charges `more` bytes, or refuses (a trap: the call fails naming `memory_mb`).
    fn charge(&mut self, what: &str, more: usize) -> wasmtime::Result<bool> {
        let want = self.used.saturating_add(more);
        if want > self.budget {
            let msg = format!(
                "the call hit the memory limit ({} MiB): growing {what} would take the app's memories and tables to {:.1} MiB; the owner can raise memory_mb",
                self.memory_mb,
                want as f64 / f64::from(1 << 20)
            );
            self.refused = Some(msg.clone());
            return Err(wasmtime::Error::msg(msg));
        }
        self.used = want;
        Ok(true)
    }
}

impl wasmtime::ResourceLimiter for GuestLimits {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        // Beyond the memory's own maximum the growth fails anyway (memory.grow answers -1).
        if maximum.is_some_and(|m| desired > m) {
            return Ok(false);
        }
        self.charge("a memory", desired.saturating_sub(current))
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if maximum.is_some_and(|m| desired > m) {
            return Ok(false);
        }
        let more = desired
            .saturating_sub(current)
            .saturating_mul(TABLE_ELEMENT_BYTES);
        self.charge("a table", more)
    }

    fn instances(&self) -> usize {
        MAX_CORE_INSTANCES
    }

    fn tables(&self) -> usize {
        MAX_TABLES
    }

    fn memories(&self) -> usize {
        MAX_MEMORIES
    }
}

/// wasmtime's error for a count over [`GuestLimits`]' caps, said plainly.
fn describe_count(e: &str) -> Option<String> {
    let (what, most) = if e.contains("memory count too high") {
        ("linear memories", MAX_MEMORIES)
    } else if e.contains("table count too high") {
        ("tables", MAX_TABLES)
    } else if e.contains("instance count too high") {
        ("core instances", MAX_CORE_INSTANCES)
    } else {
        return None;
    };
    let n = e
        .rsplit("too high at ")
        .next()
        .and_then(|n| n.split(|c: char| !c.is_ascii_digit()).next())
        .unwrap_or("more");
    Some(format!(
        "the app needs {n} {what}, more than the {most} an app may have"
    ))
}

/// A guest's stdout or stderr: kept for the log (the first [`LogPipe::KEEP`] bytes of a call),
/// never refusing a write. (wasmtime's `MemoryOutputPipe` fails writes past its capacity: a guest
/// that printed more than that in one call trapped, Rust's `println!` panicking on a broken pipe.)
#[derive(Clone, Default)]
pub struct LogPipe(Arc<Mutex<(Vec<u8>, usize)>>);

impl LogPipe {
    const KEEP: usize = 64 << 10;

    fn keep(&self, bytes: &[u8]) {
        let mut g = self.0.lock().unwrap();
        let room = Self::KEEP.saturating_sub(g.0.len());
        let n = room.min(bytes.len());
        g.0.extend_from_slice(&bytes[..n]);
        g.1 += bytes.len() - n;
    }

    /// What was kept since the last take, and how many bytes were dropped after it; empties it.
    fn take(&self) -> (Vec<u8>, usize) {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

impl wasmtime_wasi::cli::IsTerminal for LogPipe {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl wasmtime_wasi::cli::StdoutStream for LogPipe {
    fn p2_stream(&self) -> Box<dyn wasmtime_wasi::p2::OutputStream> {
        Box::new(self.clone())
    }
    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

impl wasmtime_wasi::p2::OutputStream for LogPipe {
    fn write(&mut self, bytes: bytes::Bytes) -> wasmtime_wasi::p2::StreamResult<()> {
        self.keep(&bytes);
        Ok(())
    }
    fn flush(&mut self) -> wasmtime_wasi::p2::StreamResult<()> {
        Ok(())
    }
    fn check_write(&mut self) -> wasmtime_wasi::p2::StreamResult<usize> {
        Ok(Self::KEEP)
    }
}

#[wasmtime_wasi::async_trait]
impl wasmtime_wasi::p2::Pollable for LogPipe {
    async fn ready(&mut self) {}
}

impl tokio::io::AsyncWrite for LogPipe {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        self.keep(buf);
        std::task::Poll::Ready(Ok(buf.len()))
    }
    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }
    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }
}

impl WasiView for Host {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl WasiHttpView for Host {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView {
            ctx: &mut self.http,
            table: &mut self.table,
            hooks: &mut self.outgoing,
        }
    }
}

impl bindings::datanotes::app::types::Host for Host {}

impl bindings::datanotes::app::engine::Host for Host {
    async fn call(&mut self, op: String, args: String) -> std::result::Result<String, EngineError> {
        let ctx = Ctx {
            caller: Caller::App(self.scope.clone()),
            actor: self.actor.clone(),
        };
        let engine = self.engine.clone();
        // `ops::call` reads SQLite and waits on the writer: not on an executor thread. If the
        // guest's call is cancelled meanwhile, the operation still finishes (it is atomic).
        let r = self
            .server
            .spawn_blocking(move || {
                serde_json::from_str::<Value>(&args)
                    .map_err(|e| {
                        Error::invalid(format!("the arguments are not JSON: {e}"))
                            .hint("pass JSON text, e.g. {\"table\": \"a.b.c\"}")
                    })
                    .and_then(|a| ops::call(&engine, &ctx, &op, a))
            })
            .await
            .unwrap_or_else(|_| Err(Error::internal("the operation panicked")));
        self.waited = true;
        r.map(|v| v.to_string()).map_err(|e| EngineError {
            status: e.status,
            code: e.code.to_string(),
            message: e.message.clone(),
            json: e.to_json()["error"].to_string(),
        })
    }
}

impl bindings::datanotes::app::log::Host for Host {
    fn log(&mut self, level: Level, message: String) {
        let app = &self.scope.name;
        match level {
            Level::Trace => tracing::trace!(app = %app, "{message}"),
            Level::Debug => tracing::debug!(app = %app, "{message}"),
            Level::Info => tracing::info!(app = %app, "{message}"),
            Level::Warn => tracing::warn!(app = %app, "{message}"),
            Level::Error => tracing::error!(app = %app, "{message}"),
        }
    }
}

/// The shared wasmtime engine, linker and compile cache.
pub struct WasmRuntime {
    engine: wasmtime::Engine,
    linker: Linker<Host>,
    /// Where installed components live (`.datanotes/apps/<sha256>.wasm`).
    pub apps_dir: PathBuf,
    cache_dir: PathBuf,
    db: Arc<Engine>,
    /// Where guest code runs: a runtime of its own, so that spinning guests never hold up the
    /// server's threads (HTTP, feed streams, the writer's callers).
    guests: Guests,
    server: tokio::runtime::Handle,
}

/// The guests' runtime: `DATANOTES_WASM_THREADS` worker threads (2 by default), at a lower
/// scheduling priority (nice 10) than the server's; `0` runs guests on the server's own runtime
/// (no thread hop per call, but spinning guests then share the server's threads).
struct Guests(Option<tokio::runtime::Runtime>, tokio::runtime::Handle);

impl Guests {
    fn new(server: &tokio::runtime::Handle) -> std::io::Result<Guests> {
        let n = std::env::var("DATANOTES_WASM_THREADS")
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
            .filter(|n| *n <= 64)
            .unwrap_or(2);
        if n == 0 {
            return Ok(Guests(None, server.clone()));
        }
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(n)
            .thread_name("datanotes-wasm")
            .on_thread_start(|| {
                // SAFETY: setpriority on this thread's own id (Linux: a thread's nice value).
                #[cfg(target_os = "linux")]
                unsafe {
                    libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t, 10);
                }
            })
            .enable_all()
            .build()?;
        let handle = rt.handle().clone();
        Ok(Guests(Some(rt), handle))
    }

    fn handle(&self) -> &tokio::runtime::Handle {
        &self.1
    }
}

impl Drop for Guests {
    fn drop(&mut self) {
        // Dropped inside the server's runtime: a runtime may not block there.
        if let Some(rt) = self.0.take() {
            rt.shutdown_background();
        }
    }
}

impl WasmRuntime {
    /// The WASM host of `db`. Called inside the server's tokio runtime (guests' engine calls
    /// run on its blocking threads); outside one, it says so instead of panicking.
    pub fn new(db: Arc<Engine>) -> anyhow::Result<Arc<WasmRuntime>> {
        let server = tokio::runtime::Handle::try_current()
            .map_err(|_| anyhow::anyhow!("the WASM host must be made inside a tokio runtime"))?;
        // wasi:http's https asks rustls for the process's crypto provider; with two providers
        // built in (aws-lc-rs for reqwest, ring for wasmtime-wasi-http) there is none unless one
        // is installed: reqwest's own (an error only says one is there already).
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
        let mut config = wasmtime::Config::new();
        config.wasm_component_model(true).epoch_interruption(true);
        let wt = |e: wasmtime::Error| anyhow::anyhow!("{e:#}");
        let engine = wasmtime::Engine::new(&config).map_err(wt)?;
        let mut linker = Linker::<Host>::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker).map_err(wt)?;
        // Every request is checked against the app's allow_hosts (`net::Outgoing`).
        wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker).map_err(wt)?;
        bindings::App::add_to_linker::<Host, HasSelf<Host>>(&mut linker, |h| h).map_err(wt)?;
        let apps_dir = db.meta_dir.join("apps");
        let cache_dir = std::env::var_os("DATANOTES_CACHE_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| db.meta_dir.join("cache"));
        std::fs::create_dir_all(&apps_dir)?;
        std::fs::create_dir_all(&cache_dir)?;
        // The epoch ticker: CPU deadlines are counted in its ticks.
        let weak = engine.weak();
        std::thread::Builder::new()
            .name("datanotes-epoch".into())
            .spawn(move || {
                while let Some(e) = weak.upgrade() {
                    e.increment_epoch();
                    drop(e);
                    std::thread::sleep(TICK);
                }
            })?;
        Ok(Arc::new(WasmRuntime {
            engine,
            linker,
            apps_dir,
            cache_dir,
            db,
            guests: Guests::new(&server)?,
            server,
        }))
    }

    fn cache_path(&self, sha: &str) -> PathBuf {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        self.engine.precompile_compatibility_hash().hash(&mut h);
        env!("CARGO_PKG_VERSION").hash(&mut h);
        self.cache_dir
            .join(format!("{sha}-{:016x}.cwasm", h.finish()))
    }

    /// The component for an installed file: from the compile cache, or compiled (and cached).
    pub fn load(&self, sha: &str) -> std::result::Result<Component, String> {
        let cached = self.cache_path(sha);
        if cached.exists() {
            // SAFETY: the cache holds only artifacts this engine configuration produced (the file
            // name carries the configuration's hash), written atomically by `load` below.
            match unsafe { Component::deserialize_file(&self.engine, &cached) } {
                Ok(c) => return Ok(c),
                Err(e) => tracing::warn!("compile cache entry unusable, recompiling: {e}"),
            }
        }
        let path = self.apps_dir.join(format!("{sha}.wasm"));
        let bytes =
            std::fs::read(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let artifact = self
            .engine
            .precompile_component(&bytes)
            .map_err(|e| format!("not a valid component: {e:#}"))?;
        if let Err(e) = write_cache(&cached, &artifact) {
            tracing::warn!("cannot write the compile cache: {e}");
        }
        // SAFETY: `artifact` was produced just above by this engine.
        unsafe { Component::deserialize(&self.engine, &artifact) }
            .map_err(|e| format!("cannot load the compiled component: {e:#}"))
    }

    /// Stores a component file (content-addressed) and checks it: compiles, matches the world,
    /// instantiates, lists its tools. Answers its info and its tool names.
    pub async fn install(
        self: &Arc<Self>,
        bytes: Vec<u8>,
        scope: AppScope,
        limits: Limits,
    ) -> Result<(WasmInfo, Listing)> {
        use sha2::Digest;
        if bytes.len() as u64 > MAX_COMPONENT_BYTES {
            return Err(too_large());
        }
        let size = bytes.len() as u64;
        let sha = hex::encode(sha2::Sha256::digest(&bytes));
        let path = self.apps_dir.join(format!("{sha}.wasm"));
        // Blocking: store the file, compile (seconds for Python or JavaScript), check the world.
        let (me, p, s, l) = (self.clone(), path.clone(), sha.clone(), limits.clone());
        let (existed, app, loaded) = tokio::task::spawn_blocking(move || -> Result<_> {
            let existed = p.exists();
            if !existed {
                crate::engine::files::write_atomic(&p, &bytes)?;
            }
            // No allow_hosts while installing: listing tools needs no network.
            let app = WasmApp::new(me, scope, &s, l, &[]);
            let loaded = app.0.pre().as_ref().err().cloned();
            Ok((existed, app, loaded))
        })
        .await
        .map_err(|_| Error::internal("installing panicked"))??;
        let forget = || {
            if !existed {
                let _ = std::fs::remove_file(&path);
            }
        };
        if let Some(e) = loaded {
            forget();
            return Err(
                Error::invalid(format!("the component cannot be installed: {e}"))
                    .column("wasm")
                    .rule("world")
                    .hint(format!(
                        "build a component for the world {WORLD} (see wit/datanotes-app.wit)"
                    )),
            );
        }
        // Its tools, listed like any call: in a slot, within timeout_ms.
        match app.list().await {
            Ok(l) => Ok((
                WasmInfo {
                    sha256: sha,
                    size,
                    limits,
                    allow_hosts: vec![],
                },
                l,
            )),
            Err(e) => {
                forget();
                let err = Error::invalid(format!("the component cannot be installed: {}", e.0))
                    .column("wasm");
                // Too much memory, or more memories, tables or instances than an app may have.
                Err(if e.0.contains("an app may have") {
                    err.rule("limits").hint(format!(
                        "an app may have at most {MAX_MEMORIES} linear memories, {MAX_TABLES} tables and {MAX_CORE_INSTANCES} core instances: build it with fewer"
                    ))
                } else if e.0.contains("memory_mb") {
                    err.rule("limits").hint(
                        "give it a larger memory_mb in limits (at most 4096), or build it smaller",
                    )
                } else {
                    err.rule("list_tools").hint(
                        "list-tools and instructions must answer within timeout_ms, with JSON input schemas",
                    )
                })
            }
        }
    }
}

struct Instance {
    store: Store<Host>,
    app: bindings::App,
}

/// A WASM app: an [`AppBackend`] over warm instances of one component.
#[derive(Clone)]
pub struct WasmApp(Arc<Inner>);

struct Inner {
    rt: Arc<WasmRuntime>,
    scope: Arc<AppScope>,
    limits: Limits,
    allowed: Arc<[Allowed]>,
    sha: String,
    /// The component, ready to instantiate: loaded (or compiled) on first use, in a blocking
    /// thread, so that starting the server never waits for a compilation.
    pre: std::sync::OnceLock<std::result::Result<bindings::AppPre<Host>, String>>,
    warm: Mutex<Vec<Instance>>,
    slots: Arc<tokio::sync::Semaphore>,
}

impl WasmApp {
    pub fn new(
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
            pre: std::sync::OnceLock::new(),
            warm: Mutex::new(vec![]),
            slots,
        }))
    }
}

impl Inner {
    /// The component ready to instantiate (blocking: may compile it).
    fn pre(&self) -> &std::result::Result<bindings::AppPre<Host>, String> {
        self.pre.get_or_init(|| {
            let rt = &self.rt;
            let pre = rt.load(&self.sha).and_then(|c| {
                check_world(&rt.engine, &c)?;
                let ipre = rt.linker.instantiate_pre(&c).map_err(|e| {
                    format!("the component does not match the world {WORLD}: {e:#}")
                })?;
                bindings::AppPre::new(ipre)
                    .map_err(|e| format!("the component does not match the world {WORLD}: {e:#}"))
            });
            if let Err(e) = &pre {
                tracing::error!(app = %self.scope.name, "{e}");
            }
            pre
        })
    }

    /// The component ready to instantiate, loaded (or compiled) in a blocking thread if needed.
    async fn loaded(self: &Arc<Self>) -> std::result::Result<&bindings::AppPre<Host>, String> {
        if self.pre.get().is_none() {
            let me = self.clone();
            tokio::task::spawn_blocking(move || {
                me.pre();
            })
            .await
            .map_err(|_| "loading the component panicked".to_string())?;
        }
        self.pre().as_ref().map_err(Clone::clone)
    }

    async fn instantiate(self: &Arc<Self>) -> std::result::Result<Instance, String> {
        let pre = self.loaded().await?;
        let (stdout, stderr) = (LogPipe::default(), LogPipe::default());
        let wasi = WasiCtxBuilder::new()
            .stdout(stdout.clone())
            .stderr(stderr.clone())
            .allow_ip_name_lookup(false)
            .build();
        let limits = GuestLimits::new(self.limits.memory_mb);
        let host = Host {
            wasi,
            http: WasiHttpCtx::new(),
            outgoing: Outgoing {
                app: self.scope.name.as_str().into(),
                allowed: self.allowed.clone(),
                deadline: std::time::Instant::now() + Duration::from_millis(self.limits.timeout_ms),
            },
            table: ResourceTable::new(),
            limits,
            engine: self.rt.db.clone(),
            server: self.rt.server.clone(),
            scope: self.scope.clone(),
            actor: Actor::default(),
            ticks_left: self.ticks(),
            waited: false,
            stdout,
            stderr,
        };
        let mut store = Store::new(&self.rt.engine, host);
        store.limiter(|h| &mut h.limits);
        // Called at the first epoch tick that passes while guest code runs: the call has used
        // one more tick of its CPU time. Trap once all are used, else yield to the executor (so
        // a spinning guest shares its thread, and a timeout can cancel it) and count the next.
        // A guest blocked in a host call runs no code: a wait in an engine call costs it
        // nothing (the tick seen after it is not charged), one in a WASI sleep or an HTTP
        // request at most one tick; `timeout_ms` bounds them.
        store.set_epoch_deadline(1);
        store.epoch_deadline_callback(|mut ctx| {
            let h = ctx.data_mut();
            if std::mem::take(&mut h.waited) {
                return Ok(wasmtime::UpdateDeadline::Yield(1));
            }
            Ok(if h.ticks_left <= 1 {
                wasmtime::UpdateDeadline::Interrupt
            } else {
                h.ticks_left -= 1;
                wasmtime::UpdateDeadline::Yield(1)
            })
        });
        let app = match pre.instantiate_async(&mut store).await {
            Ok(app) => app,
            Err(e) => {
                let text = format!("{e:#}");
                return Err(
                    match (store.data().limits.refused.clone(), describe_count(&text)) {
                        (Some(m), _) | (None, Some(m)) => format!("cannot instantiate: {m}"),
                        (None, None) => format!("cannot instantiate: {text}"),
                    },
                );
            }
        };
        Ok(Instance { store, app })
    }

    /// The epoch ticks one call may run guest code for (`cpu_ms`, at most `timeout_ms`).
    fn ticks(&self) -> u64 {
        (self.limits.cpu_ms.min(self.limits.timeout_ms) / TICK.as_millis() as u64).max(1)
    }

    /// A warm instance (or a fresh one), ready for a call made for `actor`. Hand it back with
    /// [`Inner::checkin`]; an instance dropped instead (a cancelled call) is simply gone.
    async fn checkout(
        self: &Arc<Self>,
        actor: Actor,
        deadline: tokio::time::Instant,
    ) -> std::result::Result<Instance, String> {
        let inst = self.warm.lock().unwrap().pop();
        let mut inst = match inst {
            Some(i) => i,
            None => self.instantiate().await?,
        };
        let h = inst.store.data_mut();
        h.actor = actor;
        h.ticks_left = self.ticks();
        h.waited = false;
        h.outgoing.deadline = deadline.into_std();
        inst.store.set_epoch_deadline(1);
        Ok(inst)
    }

    /// After a call: its output goes to the log; the instance is kept warm unless the call
    /// trapped or hit a limit (then it is thrown away).
    fn checkin<T>(&self, inst: Instance, r: wasmtime::Result<T>) -> std::result::Result<T, String> {
        let h = inst.store.data();
        // The call's output goes to the log, and the pipes start empty for the next call.
        let (stdout, stderr) = (h.stdout.take(), h.stderr.take());
        let refused = h.limits.refused.clone();
        for (name, (c, dropped)) in [("stdout", &stdout), ("stderr", &stderr)] {
            if !c.is_empty() {
                let more = if *dropped > 0 {
                    format!(" […{dropped} more bytes dropped]")
                } else {
                    String::new()
                };
                tracing::info!(app = %self.scope.name, stream = name, "{}{more}", String::from_utf8_lossy(c).trim_end());
            }
        }
        match r {
            Ok(v) => {
                self.warm.lock().unwrap().push(inst);
                Ok(v)
            }
            // A growth the limiter refused: its own message (what, how much, memory_mb).
            Err(_) if refused.is_some() => Err(refused.unwrap_or_default()),
            // What the guest said last (a Rust panic message, a Python traceback) tells why it
            // trapped far better than "unreachable instruction executed".
            Err(e) => Err(match stderr_tail(&stderr.0) {
                Some(t) => format!(
                    "{}; its stderr ended with: {t}",
                    describe_trap(&e, &self.limits)
                ),
                None => describe_trap(&e, &self.limits),
            }),
        }
    }

    async fn list_tools(
        self: &Arc<Self>,
        deadline: tokio::time::Instant,
    ) -> std::result::Result<Listing, BackendError> {
        let mut inst = self
            .checkout(Actor::default(), deadline)
            .await
            .map_err(BackendError)?;
        let t = inst.app.datanotes_app_tools();
        let r = match t.call_list_tools(&mut inst.store).await {
            Ok(tools) => t
                .call_instructions(&mut inst.store)
                .await
                .map(|ins| (tools, ins)),
            Err(e) => Err(e),
        };
        let (tools, instructions) = self.checkin(inst, r).map_err(BackendError)?;
        let mut out = vec![];
        for t in tools {
            let schema: Value = serde_json::from_str(&t.input_schema).map_err(|e| {
                BackendError(format!(
                    "tool {}: its input schema is not JSON: {e}",
                    t.name
                ))
            })?;
            let mut tool =
                json!({"name": t.name, "description": t.description, "inputSchema": schema});
            if !t.tables.is_empty() {
                tool["_meta"] = json!({"datanotes/tables": t.tables});
            }
            out.push(
                serde_json::from_value(tool)
                    .map_err(|e| BackendError(format!("tool {}: {e}", t.name)))?,
            );
        }
        Ok(Listing {
            tools: out,
            instructions: Some(instructions).filter(|s| !s.is_empty()),
        })
    }

    async fn call_tool(
        self: &Arc<Self>,
        tool: &str,
        args: &str,
        cc: &CallContext,
        deadline: tokio::time::Instant,
    ) -> std::result::Result<Value, String> {
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
        );
        let wctx = WitContext {
            harness,
            model,
            session: cc.session.clone(),
        };
        let mut inst = self.checkout(actor, deadline).await?;
        let r = inst
            .app
            .datanotes_app_tools()
            .call_call_tool(&mut inst.store, tool, args, &wctx)
            .await;
        let r = self.checkin(inst, r)?;
        let max = self.limits.max_result_bytes as usize;
        let text = match r {
            Ok(t) | Err(t) if t.len() > max => {
                return Err(format!(
                    "the result of {tool} is {} bytes, over the limit of {max}",
                    t.len()
                ));
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
}

/// The interface every app exports, and its functions as the world declares them: name,
/// parameters, result.
const TOOLS_INTERFACE: &str = "datanotes:app/tools@0.1.0";
type FuncSig = (
    &'static str,
    &'static [(&'static str, &'static str)],
    &'static str,
);
const TOOLS_FUNCS: &[FuncSig] = &[
    (
        "list-tools",
        &[],
        "list<record { name: string, description: string, input-schema: string, tables: list<string> }>",
    ),
    ("instructions", &[], "string"),
    (
        "call-tool",
        &[
            ("name", "string"),
            ("arguments", "string"),
            (
                "ctx",
                "record { harness: option<string>, model: option<string>, session: option<string> }",
            ),
        ],
        "result<string, string>",
    ),
];

/// A function type written as WIT.
fn wit_func(params: &[(String, String)], results: &[String]) -> String {
    let p: Vec<String> = params.iter().map(|(n, t)| format!("{n}: {t}")).collect();
    let r = match results {
        [] => String::new(),
        [one] => format!(" -> {one}"),
        many => format!(" -> ({})", many.join(", ")),
    };
    format!("func({}){r}", p.join(", "))
}

/// Checks a component's `tools` export against the world, so that a component built for another
/// world is refused with an error that names what differs (wasmtime's own error at
/// instantiation says only "type mismatch with parameters", not which function).
fn check_world(engine: &wasmtime::Engine, c: &Component) -> std::result::Result<(), String> {
    use wasmtime::component::types::ComponentItem;
    let ty = c.component_type();
    let exports: Vec<String> = ty.exports(engine).map(|(n, _)| n.to_string()).collect();
    // Any 0.1.x release of the interface serves (wasmtime matches semver-compatible names).
    let prefix = TOOLS_INTERFACE.trim_end_matches('0');
    let Some(name) = exports
        .iter()
        .find(|n| *n == TOOLS_INTERFACE)
        .or_else(|| exports.iter().find(|n| n.starts_with(prefix)))
    else {
        let listed = if exports.is_empty() {
            "nothing".to_string()
        } else {
            exports.join(", ")
        };
        return Err(format!(
            "the component does not export the interface {TOOLS_INTERFACE} (it exports {listed})"
        ));
    };
    let Some(ComponentItem::ComponentInstance(inst)) = ty.get_export(engine, name).map(|e| e.ty)
    else {
        return Err(format!("the component's export {name} is not an interface"));
    };
    let mut problems = vec![];
    for (func, want_params, want_result) in TOOLS_FUNCS {
        let want_params: Vec<(String, String)> = want_params
            .iter()
            .map(|(n, t)| (n.to_string(), t.to_string()))
            .collect();
        let want_results = vec![want_result.to_string()];
        let want = wit_func(&want_params, &want_results);
        match inst.get_export(engine, func).map(|e| e.ty) {
            None => problems.push(format!("it has no function {func}: {want}")),
            Some(ComponentItem::ComponentFunc(f)) => {
                let params: Vec<(String, String)> = f
                    .params()
                    .map(|(n, t)| (n.to_string(), wit_type(&t)))
                    .collect();
                let results: Vec<String> = f.results().map(|t| wit_type(&t)).collect();
                // Parameter names do not matter to callers; types do.
                let types =
                    |p: &[(String, String)]| p.iter().map(|x| x.1.clone()).collect::<Vec<_>>();
                if types(&params) != types(&want_params) || results != want_results {
                    problems.push(format!(
                        "{func} is {}, the world wants {want}",
                        wit_func(&params, &results)
                    ));
                }
            }
            Some(_) => problems.push(format!("its export {func} is not a function")),
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "its {name} does not match the world {WORLD}: {}",
            problems.join("; ")
        ))
    }
}

/// A component type written as WIT.
fn wit_type(t: &wasmtime::component::Type) -> String {
    use wasmtime::component::Type as T;
    let opt = |t: Option<T>| t.map(|t| wit_type(&t)).unwrap_or_else(|| "_".into());
    match t {
        T::Bool => "bool".into(),
        T::S8 => "s8".into(),
        T::U8 => "u8".into(),
        T::S16 => "s16".into(),
        T::U16 => "u16".into(),
        T::S32 => "s32".into(),
        T::U32 => "u32".into(),
        T::S64 => "s64".into(),
        T::U64 => "u64".into(),
        T::Float32 => "f32".into(),
        T::Float64 => "f64".into(),
        T::Char => "char".into(),
        T::String => "string".into(),
        T::List(l) => format!("list<{}>", wit_type(&l.ty())),
        T::FixedLengthList(l) => format!("list<{}, {}>", wit_type(&l.ty()), l.len()),
        T::Map(m) => format!("map<{}, {}>", wit_type(&m.key()), wit_type(&m.value())),
        T::Record(r) => format!(
            "record {{ {} }}",
            r.fields()
                .map(|f| format!("{}: {}", f.name, wit_type(&f.ty)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        T::Tuple(t) => format!(
            "tuple<{}>",
            t.types()
                .map(|t| wit_type(&t))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        T::Variant(v) => format!(
            "variant {{ {} }}",
            v.cases()
                .map(|c| match c.ty {
                    Some(t) => format!("{}({})", c.name, wit_type(&t)),
                    None => c.name.to_string(),
                })
                .collect::<Vec<_>>()
                .join(", ")
        ),
        T::Enum(e) => format!("enum {{ {} }}", e.names().collect::<Vec<_>>().join(", ")),
        T::Flags(f) => format!("flags {{ {} }}", f.names().collect::<Vec<_>>().join(", ")),
        T::Option(o) => format!("option<{}>", wit_type(&o.ty())),
        T::Result(r) => match (r.ok(), r.err()) {
            (None, None) => "result".into(),
            (ok, err) => format!("result<{}, {}>", opt(ok), opt(err)),
        },
        T::Own(_) => "own<resource>".into(),
        T::Borrow(_) => "borrow<resource>".into(),
        T::Future(f) => format!("future<{}>", opt(f.ty())),
        T::Stream(s) => format!("stream<{}>", opt(s.ty())),
        T::ErrorContext => "error-context".into(),
    }
}

/// The end of a guest's stderr (at most 600 bytes), without Rust's backtrace advice.
fn stderr_tail(bytes: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(bytes);
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim_end)
        .filter(|l| !l.is_empty() && !l.starts_with("note: run with `RUST_BACKTRACE"))
        .collect();
    let mut out = lines.join("\n");
    if out.len() > 600 {
        let mut cut = out.len() - 600;
        while !out.is_char_boundary(cut) {
            cut += 1;
        }
        out = format!("…{}", &out[cut..]);
    }
    Some(out).filter(|s| !s.is_empty())
}

fn describe_trap(e: &wasmtime::Error, limits: &Limits) -> String {
    if let Some(t) = e.downcast_ref::<wasmtime::Trap>() {
        return match t {
            wasmtime::Trap::Interrupt => format!(
                "the call ran out of its CPU time ({} ms)",
                limits.cpu_ms.min(limits.timeout_ms)
            ),
            wasmtime::Trap::StackOverflow => "the call overflowed its stack".into(),
            other => format!("the app trapped: {other}"),
        };
    }
    format!("the app failed: {e:#}")
}

impl AppBackend for WasmApp {
    fn list(&self) -> BoxFuture<'_, std::result::Result<Listing, BackendError>> {
        let me = self.clone();
        let task = self.0.rt.guests.handle().spawn(async move {
            let timeout = Duration::from_millis(me.0.limits.timeout_ms);
            let deadline = tokio::time::Instant::now() + timeout;
            let _permit = me.slot(deadline).await?;
            // A timeout drops the listing's future: the guest is cancelled wherever it is, its
            // instance thrown away, and the slot freed with `_permit`.
            match until(deadline, me.0.list_tools(deadline)).await {
                None => Err(BackendError(format!(
                    "timed out listing tools ({} ms)",
                    timeout.as_millis()
                ))),
                Some(Err(_)) => Err(BackendError("the listing panicked".into())),
                Some(Ok(r)) => r,
            }
        });
        Box::pin(async move {
            task.await
                .unwrap_or_else(|_| Err(BackendError("the listing panicked".into())))
        })
    }

    fn call<'a>(
        &'a self,
        tool: &'a str,
        args: Value,
        ctx: &'a CallContext,
    ) -> BoxFuture<'a, std::result::Result<Value, BackendError>> {
        Box::pin(async move {
            // A component that cannot be loaded makes the app unreachable (not a failed call).
            if let Err(e) = self.0.loaded().await {
                return Err(BackendError(e));
            }
            let timeout = Duration::from_millis(self.0.limits.timeout_ms);
            let deadline = tokio::time::Instant::now() + timeout;
            let (me, name, text, cc) = (
                self.clone(),
                tool.to_string(),
                args.to_string(),
                ctx.clone(),
            );
            // The call runs in a task of its own: a caller that goes away (a closed connection)
            // does not cancel it half-way; its timeout does.
            let guests = self.0.rt.guests.handle().clone();
            let task = guests.spawn(async move {
                let tool = name.as_str();
                // Waiting for a free instance counts in the call's time too.
                let _permit = match me.slot(deadline).await {
                    Ok(p) => p,
                    Err(e) => return error(format!("calling {tool}: {}", e.0)),
                };
                // A timeout drops the call's future, which cancels the guest even when it is
                // blocked in a host call (a sleep): its instance is thrown away (a cancelled
                // store is never reused) and the slot is free as soon as this returns.
                match until(deadline, me.0.call_tool(tool, &text, &cc, deadline)).await {
                    None => error(format!(
                        "timed out calling {tool} ({} ms)",
                        timeout.as_millis()
                    )),
                    Some(Err(_)) => error(format!("calling {tool} panicked")),
                    // A trap or a limit fails this call only: the app stays usable.
                    Some(Ok(Err(msg))) => error(msg),
                    Some(Ok(Ok(v))) => Ok(v),
                }
            });
            task.await
                .unwrap_or_else(|_| error(format!("calling {tool} panicked")))
        })
    }
}

/// A failed call's answer: an error result the caller sees (the app stays reachable).
fn error(msg: String) -> std::result::Result<Value, BackendError> {
    Ok(json!({"content": [{"type": "text", "text": msg}], "isError": true}))
}

/// Runs `fut` until `deadline`; `None` when the deadline came first, `Some(Err)` if it panicked
/// (a host function's panic: the call fails, not the request that made it). The deadline wins a
/// tie: a guest woken after it (by a host call that ended then, its HTTP request bounded by the
/// same deadline, say) is cancelled, not resumed.
async fn until<T>(
    deadline: tokio::time::Instant,
    fut: impl Future<Output = T>,
) -> Option<std::thread::Result<T>> {
    use futures_util::FutureExt;
    let fut = std::panic::AssertUnwindSafe(fut).catch_unwind();
    tokio::select! {
        biased;
        _ = tokio::time::sleep_until(deadline) => None,
        r = fut => Some(r),
    }
}

impl WasmApp {
    /// A slot to run an instance in, waited for until `deadline`.
    async fn slot(
        &self,
        deadline: tokio::time::Instant,
    ) -> std::result::Result<tokio::sync::OwnedSemaphorePermit, BackendError> {
        let n = self.0.limits.max_instances;
        match tokio::time::timeout_at(deadline, self.0.slots.clone().acquire_owned()).await {
            Err(_) => Err(BackendError(format!(
                "timed out waiting for one of its {n} instances (max_instances) to be free"
            ))),
            Ok(Err(_)) => Err(BackendError("the app is closed".into())),
            Ok(Ok(p)) => Ok(p),
        }
    }
}

/// Writes a compile cache entry atomically. The temporary file's name is unique to this write:
/// two threads may compile the same component at once (two installs of it), and with a name
/// per process (`files::write_atomic`) one could rename the other's half-written file into
/// place, for another process (the cache folder may be shared) to load.
fn write_cache(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let tmp = path.with_extension(format!(
        "{}-{:016x}.tmp",
        std::process::id(),
        rand::random::<u64>()
    ));
    let r = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if r.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    r
}

/// The largest component installed.
const MAX_COMPONENT_BYTES: u64 = 256 << 20;

fn too_large() -> Error {
    Error::invalid("the component is larger than 256 MiB")
        .column("wasm")
        .rule("max")
        .hint("build it smaller")
}

/// Reads a component given as a path on the server's machine or as base64.
pub fn component_bytes(path: Option<&str>, b64: Option<&str>) -> Result<Vec<u8>> {
    use base64::Engine as _;
    match (path, b64) {
        (Some(p), None) => {
            use std::io::Read;
            let cannot = |e: &dyn std::fmt::Display| {
                Error::invalid(format!("cannot read wasm_path {p:?}: {e}"))
                    .column("wasm_path")
                    .hint("give the absolute path of a .wasm file on the server's machine")
            };
            // Its size is checked before a byte is read, and no more than the limit is read.
            let f = std::fs::File::open(Path::new(p)).map_err(|e| cannot(&e))?;
            let meta = f.metadata().map_err(|e| cannot(&e))?;
            if !meta.is_file() {
                return Err(cannot(&"not a regular file"));
            }
            if meta.len() > MAX_COMPONENT_BYTES {
                return Err(too_large());
            }
            let mut bytes = Vec::with_capacity(meta.len() as usize);
            f.take(MAX_COMPONENT_BYTES + 1)
                .read_to_end(&mut bytes)
                .map_err(|e| cannot(&e))?;
            if bytes.len() as u64 > MAX_COMPONENT_BYTES {
                return Err(too_large());
            }
            Ok(bytes)
        }
        (None, Some(b)) => base64::engine::general_purpose::STANDARD
            .decode(b.trim())
            .map_err(|e| {
                Error::invalid(format!("wasm_base64 is not base64: {e}"))
                    .column("wasm_base64")
                    .hint("send the component's bytes in standard base64")
            }),
        (Some(_), Some(_)) => Err(Error::invalid("give wasm_path or wasm_base64, not both")
            .column("wasm_path")
            .hint("drop one of them")),
        (None, None) => Err(Error::invalid("no component given")
            .column("wasm_path")
            .hint("give wasm_path or wasm_base64")),
    }
}
