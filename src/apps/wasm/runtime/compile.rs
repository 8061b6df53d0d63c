//! Components compiled once and cached by their SHA-256 (`.datanotes/cache/`): compiled in a
//! child process (`datanotes compile-wasm`, so that a component that makes Cranelift use
//! gigabytes cannot take the server with it), checked, stored, loaded, and their code released
//! when no app holds them.

use super::*;

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
pub(in crate::apps::wasm) const COMPILE_FAILED: i32 = 3;

/// How its stderr starts when the component could not be read.
pub(in crate::apps::wasm) const READ_FAILED: &str = "read:";

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
pub(in crate::apps::wasm) fn release_code(c: &Component) {
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
pub(in crate::apps::wasm) fn trim_heap() {
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
pub(in crate::apps::wasm) fn write_cache(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
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

impl WasmRuntime {
    /// The compile cache entry of a component: its SHA-256 and this engine's configuration.
    pub(in crate::apps::wasm) fn cache_path(&self, sha: &str) -> PathBuf {
        self.cache_dir
            .join(format!("{sha}-{:016x}.cwasm", self.code_key))
    }

    /// The component for an installed file: mapped from the compile cache (compiled into it
    /// first if needed, by a child process), and whether it is mapped from the file. Mapped, not
    /// read: its code and its memories' initial images are pages of the cache file, shared,
    /// never copied, and never written (see [`release_code`]).
    pub(in crate::apps::wasm) fn load(
        &self,
        sha: &str,
    ) -> std::result::Result<(Component, bool), WasmError> {
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
    pub(in crate::apps::wasm) fn compile(
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

    /// [`WasmRuntime::install`], but for giving the heap back.
    pub(in crate::apps::wasm) async fn check_and_store(
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
