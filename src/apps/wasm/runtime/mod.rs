//! The shared runtime: wasmtime's engine configuration and linker, the guests' threads, the
//! compile cache, and installing a component.
//!
//! Compiling runs in a child process (`datanotes compile-wasm`, hidden, the server's own binary)
//! that exits, so what it allocates never stays in the server; components are mapped from the cache
//! file (`deserialize_file`): code and memory images (copy-on-write) are its pages. Instances come
//! from wasmtime's pooling allocator (slots of reserved address space, capped per instance at what
//! an app's limits allow, so the limiter still decides): a fresh instance reuses a slot instead of
//! mapping its memory and fiber stack anew; a memory or table slot given back keeps no resident
//! pages (a fiber stack keeps what its calls touched). A full pool drops every app's warm instances
//! and tries again; where the pool cannot be reserved, instances are allocated one by one. A loaded
//! component (its metadata and its linking, `typed::Shared`) is kept by SHA-256 while an app holds
//! it: apps installed from the same file share one.

mod compile;
mod listings;

use compile::write_cache;
pub use compile::{COMPILE_COMMAND, compile_in_child, compile_main};
pub(super) use compile::{release_code, trim_heap};

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
        for d in [&apps_dir, &cache_dir] {
            std::fs::create_dir_all(d)?;
            crate::engine::lock::set_mode(d, 0o700)?;
        }
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
