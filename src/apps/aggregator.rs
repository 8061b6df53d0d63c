//! The tool aggregator: one namespace for agents. Engine operations come first (catalog order),
//! then each app's tools (apps in registration order, each app's own order). A tool whose name
//! is taken (by an operation or an earlier app) or does not fit MCP clients is skipped and shown
//! in the app's `skippedTools`. Listing never waits on an app: it serves the last known tools.
//! Written once, above [`AppBackend`], for every kind of app.
//!
//! An app's owner-set `tool_prefix` goes in front of its tools' names; the app is still asked by
//! its own. Tools over the caps are skipped and instructions cut. Reachability is one log line per
//! change, with probes backing off while an app stays down. The last known tools are saved in
//! `.datanotes/app-tools/<app>.json` and loaded at start. A version changes with the namespace's
//! tools (MCP `list_changed`). Here too: the tools `describe_table` shows, the calling token sent
//! with an app call (`CallContext::caller`), and the one rule for a non-object `structuredContent`
//! (moved into the text, on both doors: `backend::structured_as_object`).

mod call;
mod lifecycle;
mod namespace;
mod reads;
pub mod resources;
mod saved;
mod shared_subscriptions;
mod shown;
mod tasks;
mod tool_index;
mod view;

use lifecycle::{EVENTS_QUEUE, record};
pub use namespace::{CALL_TOOL, declared_tables, valid_tool_name};
use namespace::{Namespace, operation_tools, tool_json};
pub use view::ToolList;

use super::backend::{AppBackend, AppEvent, BackendError, Listing};
use super::limits::{ListingCaps, backoff};
use super::remote::{RemoteApp, Timeouts};
use super::wasm::{WasmApp, WasmRuntime};
use super::{AppRecord, Registry};
use crate::engine::Engine;
use crate::error::Result;
use crate::ops;
use rmcp::model::Tool;
use serde_json::value::RawValue;
use serde_json::{Value, json};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

/// What a call answers: `{ok, value, servedBy}`.
#[derive(Debug, Clone)]
pub struct CallOutcome {
    /// Whether the call succeeded.
    pub ok: bool,
    /// For an app tool: its MCP `CallToolResult` (intact). For an operation: its JSON answer or
    /// error. For an unreachable app: a sentence saying so.
    pub value: Value,
    /// Who answered: the app's name, or `engine` for an engine operation.
    pub served_by: String,
    /// The result is an MCP `CallToolResult` (app tools).
    pub is_mcp_result: bool,
    /// The caller cancelled the call before its answer.
    pub cancelled: bool,
}

impl CallOutcome {
    /// The outcome of a call its caller cancelled.
    pub fn cancelled() -> CallOutcome {
        CallOutcome {
            ok: false,
            value: Value::String(BackendError::cancelled().0),
            served_by: "engine".into(),
            is_mcp_result: false,
            cancelled: true,
        }
    }

    /// The outcome of an engine operation (or of the engine's refusal to call a tool): its
    /// answer, or its error as JSON.
    pub fn of_engine(r: crate::error::Result<Value>) -> CallOutcome {
        let (ok, value) = match r {
            Ok(v) => (true, v),
            Err(e) => (false, e.to_json()),
        };
        CallOutcome {
            ok,
            value,
            served_by: "engine".into(),
            is_mcp_result: false,
            cancelled: false,
        }
    }

    /// The answer of `apps/call/`: `{ok, value, servedBy}`.
    pub fn to_json(&self) -> Value {
        json!({"ok": self.ok, "value": self.value, "servedBy": self.served_by})
    }
}

struct Slot {
    name: String,
    backend: Arc<dyn AppBackend>,
    /// What the backend was built from: a change means a new backend.
    fingerprint: String,
    listing: Option<Listing>,
    reachable: Option<bool>,
    /// The error while unreachable, and when; on recovery it becomes `previous_error`.
    last_error: Option<(String, String)>,
    previous_error: Option<(String, String)>,
    /// When the app last answered (Unix milliseconds; 0: never): set by every call, so kept as
    /// a number, written out when an entry is read.
    last_seen: AtomicI64,
    /// Listings failed in a row, and when the next probe is due (exponential backoff).
    failures: u32,
    next_probe: Option<tokio::time::Instant>,
}

/// The one aggregator above `AppBackend`: every app's tools in one namespace after the engine's operations, their reachability and calls.
pub struct Aggregator {
    engine: Arc<Engine>,
    registry: Arc<Registry>,
    timeouts: Timeouts,
    caps: ListingCaps,
    /// The probes' base interval and longest interval.
    probe: (Duration, Duration),
    slots: RwLock<Vec<Slot>>,
    ns: RwLock<Arc<Namespace>>,
    op_tools: Vec<Tool>,
    /// Each operation's tool as `tools/list` writes it.
    op_json: Vec<Box<RawValue>>,
    /// The WASM apps' runtime (shared by every WASM app).
    pub wasm: Arc<WasmRuntime>,
    /// Bumped whenever the namespace's tools change (MCP `notifications/tools/list_changed`).
    changed: tokio::sync::watch::Sender<u64>,
    /// One recomputation of the namespace at a time: the last one reads the latest slots (two
    /// at once, as under concurrent installs, could end with the older one's namespace).
    resolving: std::sync::Mutex<()>,
    /// Bumped whenever the apps' resources, templates or prompts change (MCP
    /// `notifications/resources/list_changed` and `notifications/prompts/list_changed`).
    content_changed: tokio::sync::watch::Sender<u64>,
    /// The apps' events outside calls, tagged with the app (bounded: a flood is dropped).
    events: tokio::sync::mpsc::Sender<(String, AppEvent)>,
    events_rx: std::sync::Mutex<Option<tokio::sync::mpsc::Receiver<(String, AppEvent)>>>,
    /// Resources of apps that changed (their served URIs), for the subscribed agents.
    updated: tokio::sync::broadcast::Sender<resources::ResourceUpdate>,
    /// The tools each set of agents' capabilities is not shown (`shown.rs`).
    shown: shown::Shown,
    /// The subscriptions callers without a session hold on apps' shared sessions.
    shared_subscriptions: shared_subscriptions::SharedSubscriptions,
}

impl Aggregator {
    /// How long an app's call may take.
    pub fn call_timeout(&self) -> Duration {
        self.timeouts.call
    }
}

impl Aggregator {
    /// Starts the aggregator over the registry: last known tools listed at once, apps probed in the background.
    pub fn new(
        engine: Arc<Engine>,
        registry: Arc<Registry>,
        wasm: Arc<WasmRuntime>,
    ) -> Arc<Aggregator> {
        let op_tools = operation_tools();
        let (events, events_rx) = tokio::sync::mpsc::channel(EVENTS_QUEUE);
        let agg = Arc::new(Aggregator {
            content_changed: tokio::sync::watch::Sender::new(0),
            events,
            events_rx: std::sync::Mutex::new(Some(events_rx)),
            updated: tokio::sync::broadcast::channel(EVENTS_QUEUE).0,
            shown: Default::default(),
            shared_subscriptions: Default::default(),
            wasm,
            engine,
            registry,
            timeouts: Timeouts::from_env(),
            caps: ListingCaps::from_env(),
            probe: (
                crate::knobs::ms("DATANOTES_APP_PROBE_MS", 10_000),
                crate::knobs::ms("DATANOTES_APP_PROBE_MAX_MS", 300_000),
            ),
            slots: RwLock::new(vec![]),
            ns: RwLock::new(Arc::new(Namespace::default())),
            op_json: op_tools.iter().map(tool_json).collect(),
            op_tools,
            changed: tokio::sync::watch::Sender::new(0),
            resolving: std::sync::Mutex::new(()),
        });
        agg.sync();
        agg
    }

    /// Changes whenever the tools of the namespace change (an app created, updated, deleted,
    /// refreshed with a difference, a skip released...).
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// Each app's gauges for the metrics: whether its last request found it reachable, and a
    /// WASM app's instances (in a call, warm) and the memory they hold.
    pub fn gauges(&self) -> Vec<crate::telemetry::metrics::AppGauge> {
        use crate::telemetry::metrics::{AppGauge, WasmGauge};
        let slots = self.slots.read().unwrap();
        slots
            .iter()
            .map(|s| AppGauge {
                name: s.name.clone(),
                reachable: s.reachable == Some(true),
                wasm: s.backend.stats().map(|st| {
                    let n = |k: &str| st[k].as_u64().unwrap_or(0);
                    let (all, warm) = (n("instances"), n("warm"));
                    WasmGauge {
                        live: all.saturating_sub(warm),
                        warm,
                        memory: n("memoryBytes"),
                    }
                }),
            })
            .collect()
    }

    /// The registry entry, with the aggregator's view of the app.
    pub fn entry(&self, rec: &AppRecord) -> Value {
        let mut e = rec.entry();
        let ns = self.ns.read().unwrap().clone();
        e["tools"] = json!(self.app_tool_names(&rec.name));
        e["skippedTools"] = json!(ns.skipped.get(&rec.name).cloned().unwrap_or_default());
        self.content_entry(&rec.name, &ns, &mut e);
        if let Some(s) = self
            .slots
            .read()
            .unwrap()
            .iter()
            .find(|s| s.name == rec.name)
        {
            // Not reachable until a probe (or a call) says it is: after a start, the last known
            // tools are listed before the app was reached.
            e["reachable"] = json!(s.reachable == Some(true));
            e["lastError"] = json!(s.last_error.as_ref().map(|x| &x.0));
            e["lastErrorAt"] = json!(s.last_error.as_ref().map(|x| &x.1));
            e["previousError"] = json!(
                s.previous_error
                    .as_ref()
                    .map(|(m, at)| json!({"message": m, "at": at}))
            );
            e["lastSeen"] = json!(
                Some(s.last_seen.load(Ordering::Relaxed))
                    .filter(|&ms| ms != 0)
                    .map(crate::engine::journal::time_of_ms)
            );
            if let Some(st) = s.backend.stats() {
                e["runtime"] = st;
            }
            if let Some(si) = s.backend.sign_in() {
                e["signIn"] = si;
            }
        }
        e
    }
}
