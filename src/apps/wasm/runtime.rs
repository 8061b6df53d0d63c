//! The shared runtime: wasmtime's engine configuration and linker, the guests' threads, the
//! compile cache, and installing a component.

use super::error::WasmError;
use super::host::Host;
use super::limits::{self, Limits, MAX_CORE_INSTANCES, MAX_MEMORIES, MAX_TABLES, Meter};
use super::typed::{self, Shared};
use super::{WORLD, WasmApp, WasmInfo, bindings, bindings_v2};
use crate::apps::backend::Listing;
use crate::auth::AppScope;
use crate::engine::Engine;
use crate::error::{Error, Result};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use wasmtime::component::{Component, HasSelf, Linker};

/// The shared wasmtime engine, linker and compile cache.
pub struct WasmRuntime {
    pub(super) engine: wasmtime::Engine,
    pub(super) linker: Linker<Host>,
    /// Where installed components live (`.datanotes/apps/<sha256>.wasm`).
    pub(crate) apps_dir: PathBuf,
    cache_dir: PathBuf,
    pub(super) db: Arc<Engine>,
    /// Where guest code runs: a runtime of its own, so that spinning guests never hold up the
    /// server's threads (HTTP, feed streams, the writer's callers).
    pub(super) guests: Guests,
    pub(super) server: tokio::runtime::Handle,
    /// How long an instance stays warm after a call unless the app's `idle_ms` says otherwise
    /// (`DATANOTES_WASM_IDLE_MS`, 60 s).
    pub(super) idle: std::time::Duration,
    /// Every live instance of every app.
    pub(crate) meter: Arc<Meter>,
    /// The epoch ticker, ticking while an instance is checked out.
    pub(super) ticker: Arc<limits::Ticker>,
    /// Part of a cached listing's name: a listing is kept per component (and per app, for a
    /// typed one) and per build of the server (the conversion of a component's answers into
    /// tools belongs to the build).
    listing_key: u64,
    /// Part of a compile cache entry's name: this engine's configuration and version (made
    /// once: hashing the configuration is not free).
    code_key: u64,
    /// How long listing each component's tools took without running it, by SHA-256 (shown in
    /// an app's `runtime`, see [`WasmRuntime::listing_us`]).
    listing_times: std::sync::Mutex<std::collections::HashMap<String, ListingTimes>>,
    /// The components loaded now, by SHA-256, while an app holds one: apps installed from the
    /// same file share its code, metadata and linking (see [`WasmRuntime::shared`]).
    loaded: std::sync::Mutex<std::collections::HashMap<String, std::sync::Weak<Shared>>>,
}

/// The last times (µs) the engine spent on a component's listing: deriving a typed
/// component's tools from its types (at install, and when it is loaded for a call), and reading
/// the listing kept in the compile cache (at start, at a refresh).
#[derive(Default, Clone, Copy)]
struct ListingTimes {
    derived: Option<u64>,
    cached: Option<u64>,
}

/// The engine's configuration: one place, so that the compiling child (see [`compile_main`])
/// produces artifacts the server can load.
fn engine_config() -> wasmtime::Config {
    let mut config = wasmtime::Config::new();
    config.wasm_component_model(true).epoch_interruption(true);
    // A fresh instance maps its memory's initial image copy-on-write from the compile cache
    // file (loaded with `deserialize_file`, which maps it rather than reading it): instances
    // come and go (dropped when idle), and a new one costs a mapping, not a copy of the heap.
    config.memory_init_cow(true);
    config
}

/// The slots of the instance pool (of each kind: memories, tables, fiber stacks, component
/// instances; ten times as many core instances): how many instances, in calls or warm, all
/// apps may have at once before warm ones are dropped to make room.
const POOL_SLOTS: u32 = 1000;

/// The engine: [`engine_config`] with the pooling allocator. Its slots are reserved address
/// space, not memory: a fresh instance takes a free slot (its memory's reservation, its
/// copy-on-write image if the slot last held the same component, a fiber stack) instead of
/// mapping new ones, which took five system calls and their page faults on the path of a call
/// after eviction. A memory or table slot given back keeps no resident pages (they are
/// decommitted); a fiber stack given back keeps the pages its calls touched (wasmtime decommits
/// stacks only with `async_stack_zeroing`, not set here: see BENCHMARKS.md). Each cap per
/// instance is what an app's limits allow at most (4 GiB of memory, a table of 512 Mi elements,
/// the counts well above [`MAX_MEMORIES`], [`MAX_TABLES`], [`MAX_CORE_INSTANCES`]): the limiter
/// still decides, and says why. Where the address space cannot be reserved, instances are
/// allocated one by one (wasmtime's default).
/// `DATANOTES_WASM_POOL=0` turns the pool off (instances allocated one by one).
fn new_engine() -> wasmtime::Result<wasmtime::Engine> {
    if crate::knobs::num("DATANOTES_WASM_POOL", 1) == 0 {
        return wasmtime::Engine::new(&engine_config());
    }
    let mut pool = wasmtime::PoolingAllocationConfig::new();
    pool.total_memories(POOL_SLOTS)
        .total_tables(POOL_SLOTS)
        .total_stacks(POOL_SLOTS)
        .total_component_instances(POOL_SLOTS)
        .total_core_instances(POOL_SLOTS * 10)
        .max_memories_per_component(POOL_SLOTS)
        .max_tables_per_component(POOL_SLOTS)
        .max_core_instances_per_component(POOL_SLOTS)
        .max_memories_per_module(POOL_SLOTS)
        .max_tables_per_module(POOL_SLOTS)
        .max_memory_size(4 << 30)
        .table_elements(1 << 29);
    let mut config = engine_config();
    config.allocation_strategy(wasmtime::InstanceAllocationStrategy::Pooling(pool));
    wasmtime::Engine::new(&config).or_else(|e| {
        tracing::warn!(
            "cannot reserve the WASM instance pool ({e:#}): instances are allocated one by one"
        );
        wasmtime::Engine::new(&engine_config())
    })
}

/// The guests' runtime: `DATANOTES_WASM_THREADS` worker threads (2 by default), at a lower
/// scheduling priority (nice 10) than the server's; `0` runs guests on the server's own runtime
/// (no thread hop per call, but spinning guests then share the server's threads).
pub(super) struct Guests(Option<tokio::runtime::Runtime>, tokio::runtime::Handle);

impl Guests {
    /// The guests' runtime (`DATANOTES_WASM_THREADS`), or `server` with `0`.
    fn new(server: &tokio::runtime::Handle) -> std::io::Result<Guests> {
        let n = match crate::knobs::num("DATANOTES_WASM_THREADS", 2) {
            n @ 0..=64 => n as usize,
            _ => 2,
        };
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

    /// Where guest code runs.
    pub(super) fn handle(&self) -> &tokio::runtime::Handle {
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
        // Large buffers (a component's bytes, an artifact) are mapped and unmapped by the
        // allocator, not kept in its arenas after use: glibc raises this threshold after the
        // first such buffer is freed, and memory at the top of a thread's arena is never given
        // back (not even by `malloc_trim`), which left a server tens of MiB larger per install.
        // SAFETY: mallopt only tunes the allocator.
        // Nor is free memory kept at the top of a heap when it shrinks (glibc keeps 128 KiB by
        // default): `malloc_trim` gives back the top of the main heap only, and a thread's heap
        // shrinks only when a free leaves its top free, down to this pad. What loading a
        // component left free at the top of the loading thread's heap (~170 KiB for a Python
        // app) otherwise stayed with an idle app.
        #[cfg(all(target_os = "linux", target_env = "gnu"))]
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 20);
            libc::mallopt(libc::M_TOP_PAD, 0);
        }
        let wt = |e: wasmtime::Error| anyhow::anyhow!("{e:#}");
        let engine = new_engine().map_err(wt)?;
        let mut linker = Linker::<Host>::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker).map_err(wt)?;
        // Every request is checked against the app's allow_hosts (`net::Outgoing`).
        wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker).map_err(wt)?;
        // Both versions of the world: a 0.1 guest imports datanotes:app/engine@0.1.0, a 0.2 one
        // @0.2.0 (two names to the linker, as 0.x minors are not semver-compatible).
        bindings::App::add_to_linker::<Host, HasSelf<Host>>(&mut linker, |h| h).map_err(wt)?;
        bindings_v2::AppWithContent::add_to_linker::<Host, HasSelf<Host>>(&mut linker, |h| h)
            .map_err(wt)?;
        let apps_dir = db.meta_dir.join("apps");
        let cache_dir = std::env::var_os("DATANOTES_CACHE_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| db.meta_dir.join("cache"));
        std::fs::create_dir_all(&apps_dir)?;
        std::fs::create_dir_all(&cache_dir)?;
        // The epoch ticker: CPU deadlines are counted in its ticks.
        let ticker = limits::start_ticker(&engine)?;
        let listing_key = {
            use std::hash::{Hash, Hasher};
            let mut h = std::collections::hash_map::DefaultHasher::new();
            let exe = std::env::current_exe().and_then(std::fs::metadata).ok();
            exe.map(|m| (m.len(), m.modified().ok())).hash(&mut h);
            h.finish()
        };
        let code_key = {
            use std::hash::{Hash, Hasher};
            let mut h = std::collections::hash_map::DefaultHasher::new();
            engine.precompile_compatibility_hash().hash(&mut h);
            env!("CARGO_PKG_VERSION").hash(&mut h);
            h.finish()
        };
        Ok(Arc::new(WasmRuntime {
            code_key,
            ticker,
            idle: crate::knobs::ms("DATANOTES_WASM_IDLE_MS", 60_000),
            meter: Arc::default(),
            listing_key,
            listing_times: Default::default(),
            loaded: Default::default(),
            engine,
            linker,
            apps_dir,
            cache_dir,
            db,
            guests: Guests::new(&server)?,
            server,
        }))
    }

    /// The compile cache entry of a component: its SHA-256 and this engine's configuration.
    fn cache_path(&self, sha: &str) -> PathBuf {
        self.cache_dir
            .join(format!("{sha}-{:016x}.cwasm", self.code_key))
    }

    /// The component installed as `sha`, loaded and linked: the one every app of that file
    /// holds now, or loaded (compiled first if needed, see [`WasmRuntime::load`]). Blocking.
    pub(super) fn shared(&self, sha: &str) -> std::result::Result<Arc<Shared>, WasmError> {
        if let Some(s) = self
            .loaded
            .lock()
            .unwrap()
            .get(sha)
            .and_then(|w| w.upgrade())
        {
            return Ok(s);
        }
        // Loaded without the lock (it may compile, for seconds): two apps of one file loading
        // at the same moment may both load it; the first one kept is the one shared.
        let (c, mapped) = self.load(sha)?;
        let new = Arc::new(Shared::new(self, &c, mapped)?);
        let mut loaded = self.loaded.lock().unwrap();
        if let Some(s) = loaded.get(sha).and_then(|w| w.upgrade()) {
            return Ok(s);
        }
        loaded.retain(|_, w| w.strong_count() > 0);
        loaded.insert(sha.to_string(), Arc::downgrade(&new));
        Ok(new)
    }

    /// The component for an installed file: mapped from the compile cache (compiled into it
    /// first if needed, by a child process), and whether it is mapped from the file. Mapped, not
    /// read: its code and its memories' initial images are pages of the cache file, shared,
    /// never copied, and never written (see [`release_code`]).
    pub(super) fn load(&self, sha: &str) -> std::result::Result<(Component, bool), WasmError> {
        let cached = self.cache_path(sha);
        if cached.exists() {
            // SAFETY: the cache holds only artifacts this engine configuration produced (the file
            // name carries the configuration's hash), written atomically by `write_cache`, and
            // never changed in place.
            match unsafe { Component::deserialize_file(&self.engine, &cached) } {
                Ok(c) => return Ok((c, true)),
                Err(e) => tracing::warn!("compile cache entry unusable, recompiling: {e}"),
            }
        }
        let path = self.apps_dir.join(format!("{sha}.wasm"));
        if let Some(artifact) = self.compile(&path, &cached)? {
            // Compiled here (no child could), and the cache is not writable: from memory.
            // SAFETY: `artifact` was produced by this engine.
            return unsafe { Component::deserialize(&self.engine, &artifact) }
                .map(|c| (c, false))
                .map_err(|e| WasmError::Deserialize(format!("{e:#}")));
        }
        // SAFETY: as above: written just now, atomically, for this configuration.
        unsafe { Component::deserialize_file(&self.engine, &cached) }
            .map(|c| (c, true))
            .map_err(|e| WasmError::Deserialize(format!("{e:#}")))
    }

    /// Compiles the component at `path` into the cache file `cached`. In a child process (this
    /// server's own binary, `compile-wasm`) that exits when done: what compiling a large
    /// component allocates (hundreds of MiB for Python or JavaScript) goes with it, instead of
    /// staying in the server's heap. If no child can run (another binary embeds the server), it
    /// compiles here. Answers the artifact only when it could not be written to the cache.
    fn compile(
        &self,
        path: &Path,
        cached: &Path,
    ) -> std::result::Result<Option<Vec<u8>>, WasmError> {
        let exe = COMPILE_IN_CHILD
            .load(std::sync::atomic::Ordering::Relaxed)
            .then(std::env::current_exe)
            .and_then(std::result::Result::ok);
        if let Some(exe) = exe {
            let out = std::process::Command::new(&exe)
                .arg(COMPILE_COMMAND)
                .arg(path)
                .arg(cached)
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::piped())
                .output();
            match out {
                Ok(o) if o.status.success() && cached.exists() => return Ok(None),
                Ok(o) if o.status.code() == Some(COMPILE_FAILED) => {
                    let why = String::from_utf8_lossy(&o.stderr).trim().to_string();
                    return Err(match why.strip_prefix(READ_FAILED) {
                        Some(w) => WasmError::Read {
                            path: path.to_path_buf(),
                            why: w.trim().to_string(),
                        },
                        None => WasmError::Compile(why),
                    });
                }
                Ok(o) => tracing::warn!(
                    "compiling in a child process did not work ({}): compiling in the server",
                    o.status
                ),
                Err(e) => tracing::warn!(
                    "cannot start a child process to compile ({e}): compiling in the server"
                ),
            }
        }
        let bytes = std::fs::read(path).map_err(|e| WasmError::Read {
            path: path.to_path_buf(),
            why: e.to_string(),
        })?;
        let artifact = self
            .engine
            .precompile_component(&bytes)
            .map_err(|e| WasmError::Compile(format!("{e:#}")))?;
        match write_cache(cached, &artifact) {
            Ok(()) => Ok(None),
            Err(e) => {
                tracing::warn!("cannot write the compile cache: {e}");
                Ok(Some(artifact))
            }
        }
    }

    /// Where the tools a component lists are kept: next to its compiled code, for this build.
    /// A typed component's tools carry the app's name ([`typed::names_the_app`]), so its
    /// listing is kept per app (`Some(app)`): two apps of one component, in one server or in
    /// two sharing the cache, must not list each other's. Another's is kept once (`None`).
    fn listing_path(&self, sha: &str, app: Option<&str>) -> PathBuf {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (self.listing_key, app.unwrap_or("")).hash(&mut h);
        let code = self.cache_path(sha);
        code.with_extension(format!("tools-{:016x}.json", h.finish()))
    }

    /// The tools a component listed (once, from an instance), if kept: listing an app needs no
    /// instance.
    pub(super) fn cached_listing(&self, sha: &str, app: &str) -> Option<Listing> {
        let t0 = std::time::Instant::now();
        let bytes = std::fs::read(self.listing_path(sha, None))
            .or_else(|_| std::fs::read(self.listing_path(sha, Some(app))))
            .ok()?;
        let l = serde_json::from_slice(&bytes).ok()?;
        self.note_listing(sha, false, t0.elapsed());
        Some(l)
    }

    /// Notes how long a component's listing took: `derived` from its types, or read from the
    /// cache.
    pub(super) fn note_listing(&self, sha: &str, derived: bool, took: std::time::Duration) {
        let us = took.as_micros() as u64;
        let how = if derived {
            "derived from its types"
        } else {
            "read from the cache"
        };
        tracing::debug!(component = %sha.get(..12).unwrap_or(sha), us, "tool listing {how}");
        let mut times = self.listing_times.lock().unwrap();
        let t = times.entry(sha.to_string()).or_default();
        if derived {
            t.derived = Some(us);
        } else {
            t.cached = Some(us);
        }
    }

    /// The last times (µs) listing a component's tools took without running it:
    /// `{"derived": …, "cached": …}` (null when it was not done since the server started).
    pub(super) fn listing_us(&self, sha: &str) -> serde_json::Value {
        let t = self
            .listing_times
            .lock()
            .unwrap()
            .get(sha)
            .copied()
            .unwrap_or_default();
        serde_json::json!({"derived": t.derived, "cached": t.cached})
    }

    /// Keeps the tools a component listed (see [`WasmRuntime::cached_listing`]), unless kept
    /// already.
    pub(super) fn save_listing(&self, sha: &str, app: &str, l: &Listing) {
        let path = self.listing_path(sha, typed::names_the_app(l).then_some(app));
        let r = serde_json::to_vec(l)
            .map_err(std::io::Error::other)
            .and_then(|b| match std::fs::read(&path) {
                Ok(kept) if kept == b => Ok(()),
                _ => write_cache(&path, &b),
            });
        if let Err(e) = r {
            tracing::warn!("cannot keep the listing in the compile cache: {e}");
        }
    }

    /// Stores a component file (content-addressed) and checks it: compiles, matches the world,
    /// instantiates, lists its tools. Answers its info and its tool names.
    pub(crate) async fn install(
        self: &Arc<Self>,
        bytes: Vec<u8>,
        scope: AppScope,
        limits: Limits,
    ) -> Result<(WasmInfo, Listing)> {
        let r = self.check_and_store(bytes, scope, limits).await;
        // What the install left in the heap (the component's bytes, the instance that listed
        // its tools) goes back to the system.
        tokio::task::spawn_blocking(trim_heap);
        r
    }

    /// [`WasmRuntime::install`], but for giving the heap back.
    async fn check_and_store(
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
            drop(bytes);
            // No allow_hosts while installing: listing tools needs no network.
            let app = WasmApp::new(me, scope, &s, l, &[]);
            let loaded = app.0.pre().err();
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
                        "build a component for the world {WORLD} (see wit/datanotes-app.wit) or a world of datanotes:app@0.2.0 (wit/0.2/), or one exporting typed functions importing only datanotes:app/engine, log and WASI (docs/apps.md, \"Any component\")"
                    )),
            );
        }
        // Its tools, listed like any call: in a slot, within timeout_ms.
        match app.list_checked().await {
            Ok(l) => {
                // Kept with the compiled code: listing the app again needs no instance.
                self.save_listing(&sha, &app.0.scope.name, &l);
                Ok((
                    WasmInfo {
                        sha256: sha,
                        size,
                        limits,
                        allow_hosts: vec![],
                        origin: None,
                        previous: None,
                    },
                    l,
                ))
            }
            Err(e) => {
                forget();
                let err = Error::invalid(format!("the component cannot be installed: {e}"))
                    .column("wasm");
                // Too much memory, or more memories, tables or instances than an app may have.
                Err(if e.is_count() {
                    err.rule("limits").hint(format!(
                        "an app may have at most {MAX_MEMORIES} linear memories, {MAX_TABLES} tables and {MAX_CORE_INSTANCES} core instances: build it with fewer"
                    ))
                } else if e.is_memory() {
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

/// Whether this process's binary answers [`COMPILE_COMMAND`] (the `datanotes` binary says so
/// with [`compile_in_child`]; a program embedding the server compiles in-process).
static COMPILE_IN_CHILD: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Called by a binary that runs [`compile_main`] for the arguments `COMPILE_COMMAND <input>
/// <output>`: components are then compiled in a child process running it.
pub fn compile_in_child() {
    COMPILE_IN_CHILD.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// The hidden subcommand the server runs itself as to compile a component (see
/// [`WasmRuntime::compile`]).
pub const COMPILE_COMMAND: &str = "compile-wasm";
/// Its exit status when the component cannot be read or compiled (the reason on stderr).
const COMPILE_FAILED: i32 = 3;
/// How its stderr starts when the component could not be read.
const READ_FAILED: &str = "read:";

/// The child's side of [`WasmRuntime::compile`]: compiles the component at `input` with the
/// server's engine configuration into the cache file `output`. Answers the exit status.
pub fn compile_main(input: &Path, output: &Path) -> i32 {
    let fail = |msg: String| {
        eprintln!("{msg}");
        COMPILE_FAILED
    };
    let engine = match new_engine() {
        Ok(e) => e,
        Err(e) => return fail(format!("{e:#}")),
    };
    let bytes = match std::fs::read(input) {
        Ok(b) => b,
        Err(e) => return fail(format!("{READ_FAILED} {e}")),
    };
    match engine.precompile_component(&bytes) {
        Ok(artifact) => match write_cache(output, &artifact) {
            Ok(()) => 0,
            // Not a fault of the component: the server compiles in-process instead.
            Err(e) => {
                eprintln!("cannot write {}: {e}", output.display());
                1
            }
        },
        Err(e) => fail(format!("{e:#}")),
    }
}

/// Lets the system take back the resident pages of a component's code, `mapped` from its
/// compile cache file (by [`WasmRuntime::load`]): the pages stay mapped, and a later call
/// faults them in again from the page cache. An idle app so holds its code without its RSS.
pub(super) fn release_code(c: &Component) {
    #[cfg(target_os = "linux")]
    {
        let r = c.image_range();
        // SAFETY: sysconf reads a constant of the system.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as usize;
        let start = (r.start as usize).div_ceil(page) * page;
        let end = r.end as usize;
        if end <= start {
            return;
        }
        // SAFETY: the range is part of a private, read-only mapping of the cache file that no one
        // ever wrote to (wasmtime applies no relocations to a loaded artifact and makes it read-only
        // before it runs), so dropping its pages loses nothing: each reads back the same bytes from
        // the file at its next use, even while a call runs this code.
        unsafe {
            libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED);
        }
    }
}

/// Gives the heap's free memory back to the system (glibc keeps it otherwise): after an
/// install, and after idle instances are dropped.
pub(super) fn trim_heap() {
    // SAFETY: malloc_trim only releases free memory of the allocator.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    unsafe {
        libc::malloc_trim(0);
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
pub(crate) const MAX_COMPONENT_BYTES: u64 = 256 << 20;

/// The refusal of a component over [`MAX_COMPONENT_BYTES`].
fn too_large() -> Error {
    Error::invalid("the component is larger than 256 MiB")
        .column("wasm")
        .rule("max")
        .hint("build it smaller")
}

/// Reads a component given as a path on the server's machine or as base64.
pub(crate) fn component_bytes(path: Option<&str>, b64: Option<&str>) -> Result<Vec<u8>> {
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
