//! Warm instances: the component made ready once (loaded or compiled in a blocking thread), an
//! instance per concurrent call, kept for the next call unless it trapped, hit a limit or was
//! cancelled.

use super::Inner;
use super::error::WasmError;
use super::host::{Host, LogPipe, stderr_tail};
use super::limits::{self, GuestLimits, describe_count, describe_trap};
use super::net::Outgoing;
use super::typed::{Guest, Pre};
use crate::engine::Actor;
use std::sync::Arc;
use std::time::Duration;
use wasmtime::Store;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::WasiCtxBuilder;
use wasmtime_wasi_http::WasiHttpCtx;

/// One instance of an app, in a store of its own.
pub(super) struct Instance {
    pub(super) store: Store<Host>,
    pub(super) app: Guest,
}

impl Inner {
    /// The component ready to instantiate (blocking: may compile it).
    pub(super) fn pre(&self) -> &Result<Pre, WasmError> {
        self.pre.get_or_init(|| {
            let rt = &self.rt;
            let pre = rt
                .load(&self.sha)
                .and_then(|c| Pre::new(rt, &c, &self.sha, &self.scope.name));
            if let Err(e) = &pre {
                tracing::error!(app = %self.scope.name, "{e}");
            }
            pre
        })
    }

    /// The component ready to instantiate, loaded (or compiled) in a blocking thread if needed.
    pub(super) async fn loaded(self: &Arc<Self>) -> Result<&Pre, WasmError> {
        if self.pre.get().is_none() {
            let me = self.clone();
            tokio::task::spawn_blocking(move || {
                me.pre();
            })
            .await
            .map_err(|_| WasmError::Panicked("loading the component".into()))?;
        }
        self.pre().as_ref().map_err(Clone::clone)
    }

    /// A fresh instance: a store of its own, under the app's limits.
    async fn instantiate(self: &Arc<Self>) -> Result<Instance, WasmError> {
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
            ticks_left: self.limits.ticks(),
            waited: false,
            stdout,
            stderr,
        };
        let mut store = Store::new(&self.rt.engine, host);
        limits::limit(&mut store);
        let app = match pre.instantiate_async(&mut store).await {
            Ok(app) => app,
            Err(e) => {
                let text = format!("{e:#}");
                let why = match (store.data().limits.refused.clone(), describe_count(&text)) {
                    (Some(m), _) => WasmError::Memory(m),
                    (None, Some(count)) => count,
                    (None, None) => WasmError::Wasmtime(text),
                };
                return Err(WasmError::Instantiate(Box::new(why)));
            }
        };
        Ok(Instance { store, app })
    }

    /// A warm instance (or a fresh one), ready for a call made for `actor`. Hand it back with
    /// [`Inner::checkin`]; an instance dropped instead (a cancelled call) is simply gone.
    pub(super) async fn checkout(
        self: &Arc<Self>,
        actor: Actor,
        deadline: tokio::time::Instant,
    ) -> Result<Instance, WasmError> {
        let inst = self.warm.lock().unwrap().pop();
        let mut inst = match inst {
            Some(i) => i,
            None => self.instantiate().await?,
        };
        let h = inst.store.data_mut();
        h.actor = actor;
        h.ticks_left = self.limits.ticks();
        h.waited = false;
        h.outgoing.deadline = deadline.into_std();
        inst.store.set_epoch_deadline(1);
        Ok(inst)
    }

    /// After a call: its output goes to the log; the instance is kept warm unless the call
    /// trapped or hit a limit (then it is thrown away).
    pub(super) fn checkin<T>(
        &self,
        inst: Instance,
        r: wasmtime::Result<T>,
    ) -> Result<T, WasmError> {
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
            Err(_) if refused.is_some() => Err(WasmError::Memory(refused.unwrap_or_default())),
            // What the guest said last (a Rust panic message, a Python traceback) tells why it
            // trapped far better than "unreachable instruction executed".
            Err(e) => Err(WasmError::Trap {
                what: describe_trap(&e, &self.limits),
                stderr: stderr_tail(&stderr.0),
            }),
        }
    }
}
