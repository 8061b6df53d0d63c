//! What an app may use: the owner-set [`Limits`], the memory budget of an instance
//! ([`GuestLimits`], wasmtime's `ResourceLimiter`), and CPU time counted in epoch ticks.
//!
//! `memory_mb` is one budget per instance: the `ResourceLimiter` sums every memory and table, and
//! counts of memories, tables and core instances are capped. It is released with the instance and
//! counted in a [`Meter`] per app and one for the runtime. `cpu_ms` is counted in epoch ticks (10
//! ms); `idle_ms` says when a warm instance goes.

use super::error::WasmError;
use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

/// Epoch ticks: the CPU deadline is counted in these.
pub(super) const TICK: Duration = Duration::from_millis(10);

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
    /// How long an instance is kept warm after a call, in ms, before it is dropped (an idle app
    /// then holds only its compiled code). Unset: the server's default
    /// (`DATANOTES_WASM_IDLE_MS`, 60 s); 0 keeps no instance between calls.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idle_ms: Option<u64>,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            memory_mb: 128,
            cpu_ms: 10_000,
            timeout_ms: 180_000,
            max_result_bytes: 1 << 20,
            max_instances: 4,
            idle_ms: None,
        }
    }
}

impl Limits {
    /// These limits with the fields of `change` (a JSON object) set, checked: positive, and
    /// below each field's maximum.
    pub(crate) fn merged(&self, change: &Value) -> Result<Limits> {
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
                .hint("limits are memory_mb, cpu_ms, timeout_ms, max_result_bytes, max_instances (positive integers) and idle_ms (0 or more; null for the server's default)")
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
            ("idle_ms", l.idle_ms.unwrap_or(0), 86_400_000),
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

    /// The epoch ticks one call may run guest code for (`cpu_ms`, at most `timeout_ms`).
    pub(super) fn ticks(&self) -> u64 {
        (self.cpu_ms.min(self.timeout_ms) / TICK.as_millis() as u64).max(1)
    }

    /// How long an instance stays warm after a call: `idle_ms`, or `default`.
    pub(super) fn idle(&self, default: Duration) -> Duration {
        self.idle_ms.map_or(default, Duration::from_millis)
    }
}

/// What live instances hold: how many there are and the bytes of their linear memories and
/// tables (what [`GuestLimits`] charges). One per app, and one for the whole runtime.
#[derive(Debug, Default)]
pub(crate) struct Meter {
    instances: AtomicUsize,
    bytes: AtomicUsize,
}

impl Meter {
    /// Live instances.
    pub(crate) fn instances(&self) -> usize {
        self.instances.load(Ordering::Relaxed)
    }

    /// Bytes of their memories and tables.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes.load(Ordering::Relaxed)
    }
}

/// The most linear memories one instance of an app (one store) may create. The example apps
/// need 1 memory, 2 tables and 3 to 14 core instances (a Python app links a dozen core
/// modules); a component beyond these caps fails to instantiate.
pub(crate) const MAX_MEMORIES: usize = 4;
/// The most tables one instance of an app may create (see [`MAX_MEMORIES`]).
pub(crate) const MAX_TABLES: usize = 20;
/// The most core instances one instance of an app may create (see [`MAX_MEMORIES`]).
pub(crate) const MAX_CORE_INSTANCES: usize = 100;

/// What one table element costs the host: a `funcref` is a pointer.
const TABLE_ELEMENT_BYTES: usize = std::mem::size_of::<usize>();

/// `memory_mb` for a whole instance: every linear memory and table it creates (at
/// instantiation or by growing one) is counted against one budget, so a component that
/// declares many memories or a huge table gets no more than the owner granted. Counts are per
/// store, and a store holds one instance of the app: all is released when it is dropped.
pub(crate) struct GuestLimits {
    /// `memory_mb` in bytes.
    budget: usize,
    /// What the instance's memories and tables hold now, in bytes.
    used: usize,
    /// Set when a growth was refused: the call fails with this message.
    pub(super) refused: Option<String>,
    memory_mb: u64,
    /// The app's meter, its component's (shared by the apps of one file) and the runtime's:
    /// this instance counts in each while it lives.
    meters: [Arc<Meter>; 3],
}

impl GuestLimits {
    /// The budget of one instance: `memory_mb` MiB; it counts in `meters` while it lives.
    pub(super) fn new(memory_mb: u64, meters: [Arc<Meter>; 3]) -> GuestLimits {
        for m in &meters {
            m.instances.fetch_add(1, Ordering::Relaxed);
        }
        GuestLimits {
            budget: (memory_mb as usize) << 20,
            used: 0,
            refused: None,
            memory_mb,
            meters,
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
        for m in &self.meters {
            m.bytes.fetch_add(more, Ordering::Relaxed);
        }
        self.used = want;
        Ok(true)
    }
}

impl Drop for GuestLimits {
    /// The instance (its store) is gone: so are its memories and tables.
    fn drop(&mut self) {
        for m in &self.meters {
            m.instances.fetch_sub(1, Ordering::Relaxed);
            m.bytes.fetch_sub(self.used, Ordering::Relaxed);
        }
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
pub(super) fn describe_count(e: &str) -> Option<WasmError> {
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
    Some(WasmError::Count {
        n: n.to_string(),
        what,
        most,
    })
}

/// A trap (or another failure of a guest call), said plainly: which limit ran out, or what the
/// guest did.
pub(super) fn describe_trap(e: &wasmtime::Error, limits: &Limits) -> String {
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

/// The epoch ticker: CPU deadlines are counted in its ticks. It ticks while guest code may run
/// (an instance is checked out: instantiating, in a call or a listing) and sleeps otherwise, so
/// that a server whose apps are idle is not woken 100 times a second. Its thread also drops
/// the apps' idle instances when they are due (see [`Ticker::reap_at`]): keeping an instance
/// warm after a call wakes no thread on the call's path (the ticker is awake then: it ticked
/// for the call), and an idle server has one sleeping thread for both.
pub(super) struct Ticker {
    /// Instances checked out now.
    running: AtomicUsize,
    thread: std::thread::Thread,
    due: std::sync::Mutex<Due>,
}

/// The apps whose warm instances the ticker thread drops, and until when it sleeps.
#[derive(Default)]
struct Due {
    /// When an app's first warm instance has been idle long enough (`pool::reap`).
    apps: Vec<(Instant, Weak<super::Inner>)>,
    /// While the ticker thread sleeps (no instance checked out): until when.
    parked_until: Option<Instant>,
}

impl Ticker {
    /// Drops `app`'s idle instances at `at` (or soon after): the ticker thread runs
    /// `Inner::reap` then. Wakes it only if it sleeps past `at`.
    pub(super) fn reap_at(&self, at: Instant, app: Weak<super::Inner>) {
        let mut due = self.due.lock().unwrap();
        due.apps.push((at, app));
        let wake = due.parked_until.is_some_and(|p| at < p);
        drop(due);
        if wake {
            self.thread.unpark();
        }
    }

    /// Drops every warm instance of every app now, wherever this is called (the instance
    /// pool is full and a call needs a slot).
    pub(super) fn reap_all(&self) {
        let apps: Vec<Weak<super::Inner>> = self
            .due
            .lock()
            .unwrap()
            .apps
            .iter()
            .map(|(_, a)| a.clone())
            .collect();
        for app in apps.iter().filter_map(Weak::upgrade) {
            app.drop_warm();
        }
    }

    /// Reaps the apps that are due (their instances are dropped off this thread).
    fn reap_due(&self) {
        let now = Instant::now();
        let ready: Vec<Weak<super::Inner>> = {
            let mut due = self.due.lock().unwrap();
            if !due.apps.iter().any(|(at, _)| *at <= now) {
                return;
            }
            let (ready, kept) = due.apps.drain(..).partition(|(at, _)| *at <= now);
            due.apps = kept;
            ready.into_iter().map(|(_, app)| app).collect()
        };
        for app in ready {
            let Some(app) = app.upgrade() else { continue };
            if let Some(next) = app.reap() {
                self.due
                    .lock()
                    .unwrap()
                    .apps
                    .push((next, Arc::downgrade(&app)));
            }
        }
    }
}

/// Keeps the ticker ticking while it is held (one per checked-out instance).
pub(super) struct Ticking(Arc<Ticker>);

impl Ticking {
    /// Starts the ticker if it was asleep: its first tick comes one [`TICK`] later.
    pub(super) fn new(t: &Arc<Ticker>) -> Ticking {
        if t.running.fetch_add(1, Ordering::SeqCst) == 0 {
            // Cheap when the thread is not parked (no system call).
            t.thread.unpark();
        }
        Ticking(t.clone())
    }
}

impl Drop for Ticking {
    fn drop(&mut self) {
        self.0.running.fetch_sub(1, Ordering::SeqCst);
    }
}

/// How long the ticker thread sleeps at most while nothing runs and nothing is due: it checks
/// then whether the engine is gone.
const IDLE_CHECK: Duration = Duration::from_secs(1);

/// Starts the epoch ticker of `engine`. It stops when the engine is dropped (within a second
/// while it sleeps).
pub(super) fn start_ticker(engine: &wasmtime::Engine) -> std::io::Result<Arc<Ticker>> {
    let weak = engine.weak();
    let (tx, rx) = std::sync::mpsc::sync_channel::<Arc<Ticker>>(1);
    let thread = std::thread::Builder::new()
        .name("datanotes-epoch".into())
        .spawn(move || {
            let Ok(ticker) = rx.recv() else { return };
            loop {
                ticker.reap_due();
                if ticker.running.load(Ordering::SeqCst) == 0 {
                    // Asleep until an instance is checked out (`Ticking::new` unparks it) or
                    // an app's idle instances are due (`Ticker::reap_at`). Its time is set under
                    // the lock `reap_at` takes: a reap registered meanwhile is counted in, or
                    // sees it and wakes the thread.
                    let now = Instant::now();
                    let until = {
                        let mut due = ticker.due.lock().unwrap();
                        let first = due.apps.iter().map(|(at, _)| *at).min();
                        let until = first.map_or(now + IDLE_CHECK, |f| f.min(now + IDLE_CHECK));
                        due.parked_until = Some(until);
                        until
                    };
                    if ticker.running.load(Ordering::SeqCst) == 0 {
                        std::thread::park_timeout(until.saturating_duration_since(now));
                    }
                    ticker.due.lock().unwrap().parked_until = None;
                    if weak.upgrade().is_none() {
                        return;
                    }
                    continue;
                }
                std::thread::sleep(TICK);
                let Some(e) = weak.upgrade() else { return };
                e.increment_epoch();
            }
        })?;
    let ticker = Arc::new(Ticker {
        running: AtomicUsize::new(0),
        thread: thread.thread().clone(),
        due: Default::default(),
    });
    let _ = tx.send(ticker.clone());
    Ok(ticker)
}
