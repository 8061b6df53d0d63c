//! The shared runtime: wasmtime's engine configuration and linker, the guests' threads, the
//! compile cache, and installing a component.

use super::error::WasmError;
use super::host::Host;
use super::limits::{self, Limits, MAX_CORE_INSTANCES, MAX_MEMORIES, MAX_TABLES};
use super::{WORLD, WasmApp, WasmInfo, bindings};
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
        limits::start_ticker(&engine)?;
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

    /// The compile cache entry of a component: its SHA-256 and this engine's configuration.
    fn cache_path(&self, sha: &str) -> PathBuf {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        self.engine.precompile_compatibility_hash().hash(&mut h);
        env!("CARGO_PKG_VERSION").hash(&mut h);
        self.cache_dir
            .join(format!("{sha}-{:016x}.cwasm", h.finish()))
    }

    /// The component for an installed file: from the compile cache, or compiled (and cached).
    pub(super) fn load(&self, sha: &str) -> std::result::Result<Component, WasmError> {
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
        let bytes = std::fs::read(&path).map_err(|e| WasmError::Read {
            path: path.clone(),
            why: e.to_string(),
        })?;
        let artifact = self
            .engine
            .precompile_component(&bytes)
            .map_err(|e| WasmError::Compile(format!("{e:#}")))?;
        if let Err(e) = write_cache(&cached, &artifact) {
            tracing::warn!("cannot write the compile cache: {e}");
        }
        // SAFETY: `artifact` was produced just above by this engine.
        unsafe { Component::deserialize(&self.engine, &artifact) }
            .map_err(|e| WasmError::Deserialize(format!("{e:#}")))
    }

    /// Stores a component file (content-addressed) and checks it: compiles, matches the world,
    /// instantiates, lists its tools. Answers its info and its tool names.
    pub(crate) async fn install(
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
                        "build a component for the world {WORLD} (see wit/datanotes-app.wit), or one exporting typed functions importing only datanotes:app/engine, log and WASI (docs/apps.md, \"Any component\")"
                    )),
            );
        }
        // Its tools, listed like any call: in a slot, within timeout_ms.
        match app.list_checked().await {
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
