//! Warm instances: the component made ready once (loaded or compiled in a blocking thread), an
//! instance per concurrent call, kept for the next call unless it trapped, hit a limit or was
//! cancelled, and dropped once it has been idle for the app's `idle_ms`: an app nobody calls
//! holds no instance, only its compiled code (mapped from the compile cache).
//!
//! Idle instances are dropped by the epoch ticker's thread when due, so keeping an instance warm
//! wakes no thread on the call's path; `idle_ms` 0 drops it after each call. With the component's
//! last instance the code's pages are released (`madvise`), so an idle app holds only its
//! component's metadata. `runtime` in `apps/get` (`AppBackend::stats`: instances, their memory, how
//! long the last fresh one took to make), the owner's `/datanotes/health` (RSS) and the console's
//! Apps view show it.

use super::Inner;
use super::error::WasmError;
use super::host::{Host, LogPipe, stderr_tail};
use super::limits::{self, GuestLimits, describe_count, describe_trap};
use super::net::Outgoing;
use super::typed::{Guest, Pre};
use crate::apps::backend::CallContext;
use crate::engine::Actor;
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use wasmtime::Store;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::WasiCtxBuilder;
use wasmtime_wasi_http::WasiHttpCtx;

/// One instance of an app, in a store of its own.
pub(super) struct Instance {
    pub(super) store: Store<Host>,
    pub(super) app: Guest,
    /// When it was last handed back (warm since).
    since: Instant,
    /// While it is checked out: the epoch ticker ticks (guest code may run).
    ticking: Option<limits::Ticking>,
    /// Handed out warm (made for an earlier call), for the run's span.
    warm: bool,
}

impl Inner {
    /// The component ready to instantiate (blocking: may compile it), loaded once: of our world
    /// or typed. Its code is mapped from the compile cache; with the app's last idle instance
    /// its pages leave the RSS (see [`reap`]).
    pub(super) fn pre(&self) -> Result<Pre, WasmError> {
        let mut slot = self.pre.lock().unwrap();
        if let Some(p) = &*slot {
            return p.clone();
        }
        let rt = &self.rt;
        let pre = rt
            .shared(&self.sha)
            .and_then(|shared| Pre::new(rt, shared, &self.sha, &self.scope.name));
        if let Err(e) = &pre {
            tracing::error!(app = %self.scope.name, "{e}");
        }
        *slot = Some(pre.clone());
        pre
    }

    /// The component ready to instantiate, loaded (or compiled) in a blocking thread if needed.
    pub(super) async fn loaded(self: &Arc<Self>) -> Result<Pre, WasmError> {
        // Not waiting here while another thread loads it (seconds, if it compiles).
        if let Ok(slot) = self.pre.try_lock()
            && let Some(p) = &*slot
        {
            return p.clone();
        }
        let me = self.clone();
        tokio::task::spawn_blocking(move || me.pre())
            .await
            .map_err(|_| WasmError::Panicked("loading the component".into()))?
    }

    /// A fresh instance: a store of its own, under the app's limits. When the instance pool
    /// is full, every app's warm instances are dropped (their slots freed) and it is tried once
    /// more.
    async fn instantiate(self: &Arc<Self>) -> Result<Instance, WasmError> {
        let pre = self.loaded().await?;
        match self.instantiate_in(&pre).await {
            Err(Fresh::PoolFull(why)) => {
                tracing::warn!(app = %self.scope.name, "{why}: dropping every warm instance");
                self.rt.ticker.reap_all();
                self.instantiate_in(&pre).await
            }
            r => r,
        }
        .map_err(|e| match e {
            Fresh::Failed(e) => e,
            Fresh::PoolFull(why) => WasmError::Instantiate(Box::new(WasmError::Wasmtime(why))),
        })
    }

    /// [`Inner::instantiate`], once.
    async fn instantiate_in(self: &Arc<Self>, pre: &Pre) -> Result<Instance, Fresh> {
        let t0 = Instant::now();
        let (stdout, stderr) = (LogPipe::default(), LogPipe::default());
        let wasi = WasiCtxBuilder::new()
            .stdout(stdout.clone())
            .stderr(stderr.clone())
            .allow_ip_name_lookup(false)
            .build();
        let limits = GuestLimits::new(
            self.limits.memory_mb,
            [
                self.meter.clone(),
                pre.shared().meter.clone(),
                self.rt.meter.clone(),
            ],
        );
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
            client: None,
            cancel: Default::default(),
            trace: None,
            stdout,
            stderr,
        };
        let mut store = Store::new(&self.rt.engine, host);
        limit(&mut store);
        let app = match pre.instantiate_async(&mut store).await {
            Ok(app) => app,
            Err(e)
                if e.downcast_ref::<wasmtime::PoolConcurrencyLimitError>()
                    .is_some() =>
            {
                return Err(Fresh::PoolFull(format!("{e:#}")));
            }
            Err(e) => {
                let text = format!("{e:#}");
                let why = match (store.data().limits.refused.clone(), describe_count(&text)) {
                    (Some(m), _) => WasmError::Memory(m),
                    (None, Some(count)) => count,
                    (None, None) => WasmError::Wasmtime(text),
                };
                return Err(Fresh::Failed(WasmError::Instantiate(Box::new(why))));
            }
        };
        let now = Instant::now();
        let us = now.duration_since(t0).as_micros();
        self.made_us
            .store(u64::try_from(us).unwrap_or(u64::MAX - 1), Ordering::Relaxed);
        Ok(Instance {
            store,
            app,
            since: now,
            ticking: None,
            warm: false,
        })
    }

    /// A warm instance (or a fresh one), ready for a call made for `actor`. Hand it back with
    /// [`Inner::checkin`]; an instance dropped instead (a cancelled call) is simply gone.
    pub(super) async fn checkout(
        self: &Arc<Self>,
        actor: Actor,
        cc: Option<&CallContext>,
        deadline: tokio::time::Instant,
    ) -> Result<Instance, WasmError> {
        // From here until the instance is handed back (or dropped), guest code may run: its
        // instantiation (start functions) too.
        let ticking = limits::Ticking::new(&self.rt.ticker);
        let inst = self.warm.lock().unwrap().pop();
        let warm = inst.is_some();
        let mut inst = match inst {
            Some(i) => i,
            None => {
                // Making an instance is a span of its own (export on); taking a warm one is
                // no work worth one (the run's span says which it was).
                let span = cc.and_then(|c| c.trace.as_ref()).and_then(|parent| {
                    crate::telemetry::trace::start_span(
                        Some(parent),
                        "wasm instance",
                        opentelemetry::trace::SpanKind::Internal,
                        vec![opentelemetry::KeyValue::new(
                            "datanotes.wasm.instance",
                            "new",
                        )],
                    )
                });
                crate::telemetry::metrics::metrics().wasm_started(&self.scope.name);
                let r = self.instantiate().await;
                if let Some(span) = span {
                    span.end(r.as_ref().err().map(|_| "instantiate"));
                }
                r?
            }
        };
        inst.warm = warm;
        let h = inst.store.data_mut();
        h.actor = actor;
        // What `engine.progress` and `engine.cancelled` (0.2) answer to.
        h.client = cc.and_then(|c| c.client.clone());
        h.cancel = cc.map(|c| c.cancel.clone()).unwrap_or_default();
        h.trace = cc.and_then(|c| c.trace.clone());
        h.ticks_left = self.limits.ticks();
        h.waited = false;
        h.outgoing.deadline = deadline.into_std();
        inst.store.set_epoch_deadline(1);
        inst.ticking = Some(ticking);
        Ok(inst)
    }

    /// The span of a guest's run (export on), under the call's, with whether its instance
    /// was warm or made for it (`datanotes.wasm.instance`); the engine operations the guest
    /// calls meanwhile are traced under it.
    pub(super) fn run_span(
        &self,
        cc: &CallContext,
        inst: &mut Instance,
    ) -> Option<crate::telemetry::trace::Span> {
        let span = crate::telemetry::trace::start_span(
            Some(cc.trace.as_ref()?),
            "wasm run",
            opentelemetry::trace::SpanKind::Internal,
            // With room for the two that `end_run` adds.
            {
                let mut a = Vec::with_capacity(3);
                a.push(opentelemetry::KeyValue::new(
                    "datanotes.wasm.instance",
                    if inst.warm { "warm" } else { "new" },
                ));
                a
            },
        )?;
        inst.store.data_mut().trace = Some(span.context().clone());
        Some(span)
    }

    /// Ends a run's span with what the run used: CPU ticks of its budget
    /// (`datanotes.wasm.cpu_ms`, at the epoch's granularity) and its limit.
    pub(super) fn end_run(
        &self,
        span: Option<crate::telemetry::trace::Span>,
        inst: &Instance,
        trapped: bool,
    ) {
        let Some(mut span) = span else { return };
        let budget = self.limits.ticks();
        let used = budget.saturating_sub(inst.store.data().ticks_left);
        let tick = limits::TICK.as_millis() as i64;
        span.set_attribute(opentelemetry::KeyValue::new(
            "datanotes.wasm.cpu_ms",
            used as i64 * tick,
        ));
        span.set_attribute(opentelemetry::KeyValue::new(
            "datanotes.wasm.cpu_limit_ms",
            budget as i64 * tick,
        ));
        span.end(trapped.then_some("trap"));
    }

    /// After a call: its output goes to the log; the instance is kept warm unless the call
    /// trapped or hit a limit (then it is thrown away).
    pub(super) fn checkin<T>(
        self: &Arc<Self>,
        inst: Instance,
        r: wasmtime::Result<T>,
    ) -> Result<T, WasmError> {
        // The call's caller is not kept with a warm instance.
        let mut inst = inst;
        let h = inst.store.data_mut();
        h.client = None;
        h.cancel = Default::default();
        h.trace = None;
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
                self.keep_warm(inst);
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

impl Inner {
    /// How long an instance stays warm after a call.
    fn idle(&self) -> Duration {
        self.limits.idle(self.rt.idle)
    }

    /// Keeps an instance for the next call, until it has been idle for [`Inner::idle`] (the
    /// ticker thread drops it then, see [`Inner::reap`]).
    fn keep_warm(self: &Arc<Self>, mut inst: Instance) {
        let idle = self.idle();
        if idle.is_zero() {
            // Dropped at once; what the app held goes as after an idle time (off the call's
            // path): nothing stays per call.
            drop(inst);
            let me = self.clone();
            drop(self.rt.guests.handle().spawn_blocking(move || me.release()));
            return;
        }
        let since = Instant::now();
        inst.since = since;
        inst.ticking = None;
        self.warm.lock().unwrap().push(inst);
        // `Inner::reap` clears `reaping` under the lock when it finds no warm instance: either
        // it saw this one, or this sees `false` and asks for a reap again. The ticker thread
        // runs it (awake now: it ticked for this call), so that no thread is woken here, on the
        // call's path.
        if !self.reaping.swap(true, Ordering::SeqCst) {
            self.rt.ticker.reap_at(since + idle, Arc::downgrade(self));
        }
    }

    /// What the app holds now: its live instances (in a call or warm) and the bytes of their
    /// memories and tables, whether its compiled code is loaded, and how long its last fresh
    /// instance took to make (null: none since the server started).
    pub(super) fn stats(&self) -> Value {
        let made = Some(self.made_us.load(Ordering::Relaxed)).filter(|&us| us != u64::MAX);
        json!({
            "instances": self.meter.instances(),
            "warm": self.warm.lock().unwrap().len(),
            "memoryBytes": self.meter.bytes(),
            "codeLoaded": matches!(self.pre.try_lock().as_deref(), Ok(Some(Ok(_)))),
            "idleMs": self.idle().as_millis() as u64,
            "instantiateUs": made,
        })
    }
}

impl Inner {
    /// After instances were dropped (blocking): with the last live instance of its component
    /// (of any app installed from the same file), the resident pages of its code go, and the
    /// heap's free memory goes back to the system.
    fn release(&self) {
        // A load under way (the lock held) is for a call about to run. The lock is not held
        // while the pages go: a call (or the app's `runtime`) meanwhile finds its code loaded.
        let pre = match self.pre.try_lock().as_deref() {
            Ok(Some(Ok(pre))) => Some(pre.clone()),
            _ => None,
        };
        if let Some(pre) = pre
            && pre.shared().mapped
            && pre.shared().meter.instances() == 0
        {
            super::runtime::release_code(pre.shared().component());
        }
        super::runtime::trim_heap();
    }
}

/// Why [`Inner::instantiate_in`] made no instance.
enum Fresh {
    /// The instance pool has no free slot (of a kind): wasmtime's message.
    PoolFull(String),
    Failed(WasmError),
}

impl Inner {
    /// Drops every warm instance of the app now (the instance pool is full, see
    /// [`Inner::instantiate`]).
    pub(super) fn drop_warm(&self) {
        let gone = std::mem::take(&mut *self.warm.lock().unwrap());
        drop(gone);
    }

    /// Drops the app's instances idle for its `idle_ms` (called by the ticker thread, see
    /// [`limits::Ticker::reap_at`]): their memories are unmapped, and with the last one the
    /// resident pages of its code go too, in a blocking thread. Answers when the next warm
    /// instance is due, or `None` (and clears `reaping`) when none is left: an app nobody calls
    /// holds its code mapped, not in memory.
    pub(super) fn reap(self: &Arc<Self>) -> Option<Instant> {
        let idle = self.idle();
        let now = Instant::now();
        let mut warm = self.warm.lock().unwrap();
        let (gone, kept): (Vec<Instance>, Vec<Instance>) = warm
            .drain(..)
            .partition(|i| now.duration_since(i.since) >= idle);
        *warm = kept;
        let next = warm.iter().map(|i| i.since + idle).min();
        if next.is_none() {
            self.reaping.store(false, Ordering::SeqCst);
        }
        drop(warm);
        if !gone.is_empty() {
            let me = self.clone();
            drop(self.rt.guests.handle().spawn_blocking(move || {
                drop(gone);
                me.release();
            }));
        }
        next
    }
}

/// Puts a new store under its limits: the memory budget, and `cpu_ms` counted in epoch ticks.
fn limit(store: &mut Store<Host>) {
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
}
