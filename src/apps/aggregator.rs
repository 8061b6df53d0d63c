//! The tool aggregator: one namespace for agents. Engine operations come first (catalog order),
//! then each app's tools (apps in registration order, each app's own order). A tool whose name
//! is taken (by an operation or an earlier app) or does not fit MCP clients is skipped and shown
//! in the app's `skippedTools`. Listing never waits on an app: it serves the last known tools.
//! Written once, above [`AppBackend`], for every kind of app.

mod call;
mod reads;
pub mod resources;
mod shared_subscriptions;
mod shown;
mod tasks;
mod view;

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

/// The resolved namespace: app tools that made it, and those that did not.
#[derive(Default)]
struct Namespace {
    /// (app, tool) in listing order.
    tools: Vec<(String, Tool)>,
    /// Each tool of `tools` as `tools/list` writes it, written once per namespace.
    json: Vec<Box<RawValue>>,
    by_name: HashMap<String, usize>,
    skipped: HashMap<String, Vec<Value>>,
    /// The fields of a tool of `tools` (by index) that the engine does not model, as its app
    /// wrote them (`execution`).
    fields: HashMap<usize, serde_json::Map<String, Value>>,
    /// Each app's section of the instructions, in registration order.
    instructions: Vec<(String, String)>,
    /// The apps' resources, templates and prompts.
    content: resources::Content,
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

/// The longest an app's [`AppBackend::keep_up`] runs at a probe.
const KEEP_UP: Duration = Duration::from_secs(10);

/// The most app events waiting to be handled; more are dropped (a flood of updates).
const EVENTS_QUEUE: usize = 1024;

/// A tool name an MCP client accepts: 1 to 64 of `[A-Za-z0-9_-]`.
pub fn valid_tool_name(n: &str) -> bool {
    !n.is_empty()
        && n.len() <= 64
        && n.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// The tables a tool declares in `_meta["datanotes/tables"]`.
pub fn declared_tables(t: &Tool) -> Vec<String> {
    t.meta
        .as_ref()
        .and_then(|m| m.get("datanotes/tables"))
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(String::from)
                .collect()
        })
        .unwrap_or_default()
}

/// A tool as `tools/list` writes it.
fn tool_json(t: &Tool) -> Box<RawValue> {
    serde_json::value::to_raw_value(t).expect("a tool is JSON")
}

/// A tool as `tools/list` writes it, with the fields its app wrote that the engine does not
/// model (`execution`): after the modelled ones, which they never replace.
fn tool_json_with(t: &Tool, fields: &serde_json::Map<String, Value>) -> Box<RawValue> {
    let mut v = serde_json::to_value(t).expect("a tool is JSON");
    if let Some(o) = v.as_object_mut() {
        for (k, f) in fields {
            o.entry(k.clone()).or_insert_with(|| f.clone());
        }
    }
    serde_json::value::to_raw_value(&v).expect("a tool is JSON")
}

/// The engine's operations as MCP tools.
fn operation_tools() -> Vec<Tool> {
    ops::describe_all()
        .iter()
        .filter_map(|o| {
            let mut t = json!({"name": o["name"], "description": o["description"], "inputSchema": o["inputSchema"]});
            if o["inputSchema"].get("type").is_none() {
                t["inputSchema"]["type"] = json!("object");
            }
            serde_json::from_value(t).ok()
        })
        .collect()
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

    /// Starts the background refreshes: every app now, then every app every 5 minutes
    /// (`DATANOTES_APP_REFRESH_MS`), and unreachable apps when their probe is due: after
    /// `DATANOTES_APP_PROBE_MS` (10 s), doubled at each failure in a row up to
    /// `DATANOTES_APP_PROBE_MAX_MS` (5 minutes), back to the base on recovery.
    pub fn start(self: &Arc<Self>) {
        self.follow_events();
        let probe = self.probe.0;
        let full = crate::knobs::ms("DATANOTES_APP_REFRESH_MS", 300_000);
        let me = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut last_full = tokio::time::Instant::now();
            let mut first = true;
            loop {
                let Some(agg) = me.upgrade() else { return };
                let all = first || last_full.elapsed() >= full;
                if all {
                    last_full = tokio::time::Instant::now();
                }
                first = false;
                let now = tokio::time::Instant::now();
                let names: Vec<String> = agg
                    .slots
                    .read()
                    .unwrap()
                    .iter()
                    .filter(|s| {
                        all || (s.reachable != Some(true) && s.next_probe.is_none_or(|t| now >= t))
                    })
                    .map(|s| s.name.clone())
                    .collect();
                let tasks: Vec<_> = names
                    .into_iter()
                    .map(|n| agg.clone().refresh_owned(n))
                    .collect();
                futures_util::future::join_all(tasks).await;
                // What the reachable apps hold for callers, kept up (their subscriptions).
                let reachable: Vec<Arc<dyn AppBackend>> = {
                    let slots = agg.slots.read().unwrap();
                    let up = slots.iter().filter(|s| s.reachable == Some(true));
                    up.map(|s| s.backend.clone()).collect()
                };
                let kept = reachable
                    .iter()
                    .map(|b| tokio::time::timeout(KEEP_UP, b.keep_up()));
                futures_util::future::join_all(kept).await;
                drop(agg);
                tokio::time::sleep(probe).await;
            }
        });
    }

    async fn refresh_owned(self: Arc<Self>, name: String) {
        let _ = self.refresh(&name).await;
    }

    fn backend_for(&self, rec: &AppRecord) -> Option<(String, Arc<dyn AppBackend>)> {
        if let Some(w) = &rec.wasm {
            // The scope is part of it: a WASM app's engine calls are checked against the scope
            // its backend holds, so a changed `write`, `ddl` or `maintain` needs a new backend;
            // and so are its allow_hosts, held by its instances.
            let fp = format!(
                "wasm {} {} allow_hosts={:?} write={:?} ddl={} maintain={}",
                w.sha256,
                serde_json::to_string(&w.limits).unwrap_or_default(),
                w.allow_hosts,
                rec.write,
                rec.ddl,
                rec.maintain
            );
            let scope = rec.scope();
            return Some((
                fp,
                Arc::new(WasmApp::new(
                    self.wasm.clone(),
                    scope,
                    &w.sha256,
                    w.limits.clone(),
                    &w.allow_hosts,
                )),
            ));
        }
        let url = rec.mcp_url.clone()?;
        let policy = super::self_url::policy(rec, &url);
        let fp = format!(
            "remote {url} {policy:?} {}",
            rec.mcp_token
                .as_deref()
                .map(crate::auth::token_hash)
                .unwrap_or_default()
        );
        Some((
            fp,
            Arc::new(RemoteApp::new(
                url.clone(),
                policy,
                rec.mcp_token.clone(),
                // Without a static token: its OAuth sign-in, used if the app asks for one.
                rec.mcp_token
                    .is_none()
                    .then(|| super::remote::oauth::for_app(&self.engine.meta_dir, &rec.name, &url)),
                self.timeouts,
                self.caps,
                Some(self.events_of(&rec.name)),
            )),
        ))
    }

    /// Brings the slots in line with the registry (after create, update, delete). Returns the
    /// apps whose backend is new and should be refreshed.
    pub fn sync(&self) -> Vec<String> {
        let mut fresh = vec![];
        {
            let mut slots = self.slots.write().unwrap();
            // Read under the lock: of two syncs at once, the later one sees the later registry
            // (an app created meanwhile is not taken for deleted).
            let recs = self.registry.list();
            let mut old: HashMap<String, Slot> =
                slots.drain(..).map(|s| (s.name.clone(), s)).collect();
            // The apps given a new backend whose resources follow the vault.
            let mut followers_replaced = vec![];
            for rec in &recs {
                let Some((fp, backend)) = self.backend_for(rec) else {
                    continue;
                };
                match old.remove(&rec.name) {
                    // A registry change (a restarted remote app registers its address again)
                    // makes the next probe of an app that is down due at once.
                    Some(mut s) if s.fingerprint == fp => {
                        s.failures = 0;
                        s.next_probe = None;
                        slots.push(s)
                    }
                    prev => {
                        fresh.push(rec.name.clone());
                        // What callers subscribed to at the app goes on at its new backend.
                        if let Some(p) = &prev {
                            backend.adopt(p.backend.subscriptions());
                            if backend.resources_follow_the_vault() {
                                followers_replaced.push(rec.name.clone());
                            }
                        }
                        // Keep the last known tools until the new backend answers; at start,
                        // those saved with the app.
                        let listing = match prev {
                            Some(p) => p.listing,
                            None => self.load_listing(&rec.name),
                        };
                        slots.push(Slot {
                            name: rec.name.clone(),
                            backend,
                            fingerprint: fp,
                            listing,
                            reachable: None,
                            last_error: None,
                            previous_error: None,
                            last_seen: AtomicI64::new(0),
                            failures: 0,
                            next_probe: None,
                        });
                    }
                }
            }
            // A new version of an app whose resources follow the vault: its subscribers are
            // told (the door keeps their subscriptions; the app is not asked).
            for app in followers_replaced {
                let _ = self.updated.send(resources::ResourceUpdate::App(app));
            }
            // What is left was deleted.
            for name in old.keys() {
                let _ = std::fs::remove_file(self.listing_path(name));
                super::remote::oauth::forget(&self.engine.meta_dir, name);
            }
        }
        self.resolve();
        fresh
    }

    /// Where an app's last known tools are kept: `.datanotes/app-tools/<app>.json` (0600).
    fn listing_path(&self, app: &str) -> std::path::PathBuf {
        self.engine
            .meta_dir
            .join("app-tools")
            .join(format!("{app}.json"))
    }

    fn load_listing(&self, app: &str) -> Option<Listing> {
        let bytes = std::fs::read(self.listing_path(app)).ok()?;
        match serde_json::from_slice(&bytes) {
            Ok(l) => Some(l),
            Err(e) => {
                tracing::warn!(app, "the last known tools of app {app} are unreadable: {e}");
                None
            }
        }
    }

    /// Saves an app's listing (after it changed), so that a restart lists its tools at once.
    fn save_listing(&self, app: &str, l: &Listing) {
        let path = self.listing_path(app);
        let r = (|| {
            if let Some(d) = path.parent() {
                std::fs::create_dir_all(d)?;
                crate::engine::lock::set_mode(d, 0o700)?;
            }
            let bytes = serde_json::to_vec(l).map_err(std::io::Error::other)?;
            crate::auth::write_private(&path, &bytes)
        })();
        if let Err(e) = r {
            tracing::warn!(app, "cannot save the last known tools of app {app}: {e}");
        }
    }

    /// Recomputes the namespace from the last known listings.
    fn resolve(&self) {
        self.resolve_with(None)
    }

    /// Recomputes the namespace. A name an app holds stays with it while it lists it; a name
    /// nobody holds goes to the first app in registration order, and so does a name in the
    /// first listing of a `newcomer` (an app listed for the first time).
    fn resolve_with(&self, newcomer: Option<&str>) {
        let _one = self.resolving.lock().unwrap_or_else(|e| e.into_inner());
        let slots = self.slots.read().unwrap();
        let mut taken: HashMap<String, String> = ops::CATALOG
            .iter()
            .map(|o| (o.name.to_string(), "engine".to_string()))
            .collect();
        // Why each tool of each app cannot be listed whoever holds its name (name, size).
        let unfit: Vec<Vec<Option<Value>>> = slots
            .iter()
            .map(|s| {
                let tools = s.listing.as_ref().map_or(&[][..], |l| &l.tools[..]);
                tools.iter().map(|t| self.unfit(t)).collect()
            })
            .collect();
        let held = self.held(&slots, &unfit, newcomer);
        let mut ns = Namespace::default();
        let mut instructions = vec![];
        for (s, unfit) in slots.iter().zip(&unfit) {
            let Some(l) = &s.listing else { continue };
            // What the app itself could not offer (a typed function with a resource, say).
            for v in &l.skipped {
                ns.skipped
                    .entry(s.name.clone())
                    .or_default()
                    .push(v.clone());
            }
            if let Some(i) = l.instructions.as_ref().filter(|i| !i.trim().is_empty()) {
                let i = self.caps.instructions(&s.name, i.trim());
                instructions.push((s.name.clone(), format!("## App {}\n{i}", s.name)));
            }
            let mut seen = HashSet::new();
            for (t, unfit) in l.tools.iter().zip(unfit) {
                let name = t.name.to_string();
                let skip = if let Some(v) = unfit {
                    Some(v.clone())
                } else if let Some(by) = held.get(&name).filter(|by| **by != s.name) {
                    Some(json!({"name": name, "takenBy": by}))
                } else if let Some(by) = taken.get(&name) {
                    Some(json!({"name": name, "takenBy": by}))
                } else if !seen.insert(name.clone()) {
                    Some(
                        json!({"name": name, "takenBy": s.name, "reason": "listed twice by the app"}),
                    )
                } else {
                    None
                };
                match skip {
                    Some(v) => ns.skipped.entry(s.name.clone()).or_default().push(v),
                    None => {
                        if let Some(f) = l.fields.get(&name) {
                            ns.fields.insert(ns.tools.len(), f.clone());
                        }
                        taken.insert(name.clone(), s.name.clone());
                        ns.by_name.insert(name, ns.tools.len());
                        let mut t = t.clone();
                        if let Some(m) = t.meta.as_mut() {
                            resources::name_tool_ui(&s.name, m);
                        }
                        ns.tools.push((s.name.clone(), t));
                    }
                }
            }
        }
        ns.instructions = instructions;
        ns.content = resources::resolve(&slots, &self.caps);
        ns.json = ns
            .tools
            .iter()
            .enumerate()
            .map(|(i, (_, t))| match ns.fields.get(&i) {
                None => tool_json(t),
                Some(f) => tool_json_with(t, f),
            })
            .collect();
        // describe_table shows the tools that declare each table.
        let mut per_table: HashMap<String, Vec<Value>> = HashMap::new();
        for (app, t) in &ns.tools {
            // A tool the MCP Apps extension marks as its view's only is not the model's.
            if !resources::for_the_model(t) {
                continue;
            }
            for table in declared_tables(t) {
                per_table
                    .entry(table)
                    .or_default()
                    .push(json!({"name": t.name, "app": app, "description": t.description}));
            }
        }
        self.engine.set_table_tools(per_table);
        let mut cur = self.ns.write().unwrap();
        let changed = cur.tools != ns.tools;
        let content_changed = cur.content != ns.content;
        *cur = Arc::new(ns);
        drop(cur);
        if changed {
            self.changed.send_modify(|v| *v += 1);
        }
        if content_changed {
            self.content_changed.send_modify(|v| *v += 1);
        }
    }

    /// Why a tool cannot be listed, as its `skippedTools` entry: a name MCP clients refuse, or
    /// a description or schema over the caps.
    fn unfit(&self, t: &Tool) -> Option<Value> {
        let name = t.name.to_string();
        if !valid_tool_name(&name) {
            return Some(
                json!({"name": name, "takenBy": null, "reason": "the name must match ^[a-zA-Z0-9_-]{1,64}$"}),
            );
        }
        let why = self.caps.tool_over(t)?;
        Some(json!({"name": name, "takenBy": null, "reason": why}))
    }

    /// The names apps hold in the namespace now and still list (fit): they stay theirs.
    fn held(
        &self,
        slots: &[Slot],
        unfit: &[Vec<Option<Value>>],
        newcomer: Option<&str>,
    ) -> HashMap<String, String> {
        let cur = self.ns.read().unwrap().clone();
        let mut held = HashMap::new();
        for (s, unfit) in slots.iter().zip(unfit) {
            let Some(l) = &s.listing else { continue };
            for (t, unfit) in l.tools.iter().zip(unfit) {
                if unfit.is_some() {
                    continue;
                }
                let name = t.name.as_ref();
                if cur
                    .by_name
                    .get(name)
                    .is_some_and(|&i| cur.tools[i].0 == s.name)
                {
                    held.insert(name.to_string(), s.name.clone());
                }
            }
        }
        // A newcomer's first listing: registration order decides against later holders.
        let pos = |app: &str| slots.iter().position(|s| s.name == app);
        if let Some(c) = newcomer.and_then(|c| pos(c).map(|i| (i, &slots[i])))
            && let Some(l) = &c.1.listing
        {
            for (t, unfit) in l.tools.iter().zip(&unfit[c.0]) {
                let name = t.name.as_ref();
                if unfit.is_none() && held.get(name).and_then(|h| pos(h)).is_some_and(|h| c.0 < h) {
                    held.remove(name);
                }
            }
        }
        held
    }

    /// Changes whenever the tools of the namespace change (an app created, updated, deleted,
    /// refreshed with a difference, a skip released...).
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// Whether a call of this tool may send notifications or requests before its result (its
    /// app's backend says so): such a call is answered as a stream.
    pub fn streams(&self, tool: &str) -> bool {
        let ns = self.ns.read().unwrap().clone();
        let Some(&i) = ns.by_name.get(tool) else {
            return false;
        };
        let app = &ns.tools[i].0;
        self.slots
            .read()
            .unwrap()
            .iter()
            .find(|s| &s.name == app)
            .is_some_and(|s| s.backend.streams())
    }

    /// Re-reads one app's tools. Answers what changed: tools added, removed, skipped.
    pub async fn refresh(&self, name: &str) -> Result<Value> {
        let backend = {
            let slots = self.slots.read().unwrap();
            slots
                .iter()
                .find(|s| s.name == name)
                .map(|s| (s.backend.clone(), s.fingerprint.clone()))
        };
        let Some((backend, fp)) = backend else {
            return Ok(json!({"added": [], "removed": [], "skipped": []}));
        };
        let before: HashSet<String> = self.app_tool_names(name).into_iter().collect();
        let caps = self.caps;
        let r = backend.list().await.and_then(|mut l| {
            let bytes = serde_json::to_vec(&l.tools).map_or(0, |v| v.len());
            if let Some(why) = caps.listing_over(l.tools.len(), bytes, 1) {
                return Err(BackendError(why));
            }
            if let Some(why) = caps.bound_content(&mut l) {
                tracing::warn!(app = name, "{why}");
            }
            Ok(l)
        });
        let mut changed = None;
        let mut first = false;
        {
            let mut slots = self.slots.write().unwrap();
            let Some(s) = slots
                .iter_mut()
                .find(|s| s.name == name && s.fingerprint == fp)
            else {
                return Ok(json!({"added": [], "removed": [], "skipped": []}));
            };
            record(s, r.as_ref().err());
            if r.is_ok() {
                s.failures = 0;
                s.next_probe = None;
            } else {
                s.failures = s.failures.saturating_add(1);
                let wait = backoff(self.probe.0, self.probe.1, s.failures);
                s.next_probe = Some(tokio::time::Instant::now() + wait);
            }
            if let Ok(l) = r
                && s.listing.as_ref() != Some(&l)
            {
                first = s.listing.is_none();
                changed = Some(l.clone());
                s.listing = Some(l);
            }
        }
        if let Some(l) = changed {
            self.save_listing(name, &l);
        }
        self.resolve_with(first.then_some(name));
        let after: HashSet<String> = self.app_tool_names(name).into_iter().collect();
        let ns = self.ns.read().unwrap().clone();
        Ok(json!({
            "added": after.difference(&before).collect::<Vec<_>>(),
            "removed": before.difference(&after).collect::<Vec<_>>(),
            "skipped": ns.skipped.get(name).cloned().unwrap_or_default(),
        }))
    }

    fn app_tool_names(&self, app: &str) -> Vec<String> {
        let ns = self.ns.read().unwrap().clone();
        ns.tools
            .iter()
            .filter(|(a, _)| a == app)
            .map(|(_, t)| t.name.to_string())
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

impl Slot {
    /// Notes that the app answered now.
    fn seen_now(&self) {
        self.last_seen
            .store(chrono::Utc::now().timestamp_millis(), Ordering::Relaxed);
    }
}

/// Notes an app's answer (or failure): one log line per change of reachability, naming the app.
fn record(s: &mut Slot, err: Option<&BackendError>) {
    match err {
        None => {
            if s.reachable == Some(false) {
                tracing::info!(app = %s.name, "app {} is reachable again", s.name);
            }
            s.reachable = Some(true);
            s.seen_now();
            if let Some(e) = s.last_error.take() {
                s.previous_error = Some(e);
            }
        }
        Some(e) => {
            if s.reachable != Some(false) {
                tracing::warn!(app = %s.name, "app {} is not reachable: {e}", s.name);
            }
            s.reachable = Some(false);
            s.last_error = Some((e.0.clone(), crate::engine::journal::now()));
        }
    }
}
