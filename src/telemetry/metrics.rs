//! The engine's metrics: one registry for the process, its instruments recorded where things
//! happen (an MCP request at the door, a call to an app, a journal commit, a WASM instance
//! start, a webhook delivery; [`Metrics::observe_server`] and its siblings, which record over
//! OTLP too when that is on), and the gauges read from the server's state at each scrape
//! ([`set_gauge_source`]). [`scrape`] writes them as Prometheus text (OpenMetrics 1.0) for
//! `GET /datanotes/metrics`.
//!
//! Label values are bounded: a method outside the protocol's is `other`, a tool is named only
//! once the aggregator found it in its namespace (a tool it lists) and only up to
//! [`TOOLS_PER_APP`] names per app (a longer name or any beyond: `other`), and an error is one
//! of a short vocabulary ([`error_type`]).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::AtomicU64;
use std::sync::{LazyLock, Mutex, RwLock};

/// Tool names kept as label values per app (engine operations included); any further: `other`.
pub const TOOLS_PER_APP: usize = 100;
/// The longest tool name kept as a label value.
const LONGEST_TOOL: usize = 128;
/// What a label value that is not kept reads.
pub const OTHER: &str = "other";

/// The OpenTelemetry MCP conventions' buckets (seconds), with four below 10 ms: a call through
/// the gateway takes well under a millisecond.
pub(crate) const BUCKETS: [f64; 18] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0,
    120.0, 300.0,
];

fn histogram() -> Histogram {
    Histogram::new(BUCKETS)
}

/// The labels of an MCP operation's duration (server side: a request to `/mcp`; client side:
/// the engine's request to an app).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OpLabels {
    /// The method (see [`method_label`]).
    pub mcp_method_name: &'static str,
    /// The tool of a `tools/call` (empty otherwise).
    pub gen_ai_tool_name: String,
    /// The app that served it (empty: the engine itself).
    pub datanotes_app: String,
    /// Empty when it succeeded.
    pub error_type: &'static str,
}

/// The labels of an HTTP API request's duration (the route is the pattern it matched: a
/// bounded set).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HttpLabels {
    /// `GET`, `POST`, ... (`_OTHER` for the rest).
    pub http_request_method: &'static str,
    /// The route's pattern, e.g. `/datanotes/{op}` (empty: no route matched).
    pub http_route: String,
    /// The answer's status.
    pub http_response_status_code: u16,
}

/// The app a series is about.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AppLabel {
    /// Its name.
    pub datanotes_app: String,
}

/// A WASM app's instances in one state.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct InstanceLabels {
    /// The app.
    pub datanotes_app: String,
    /// `live` (in a call) or `warm` (ready for the next).
    pub state: &'static str,
}

/// What the gauges read, from the server's state, at each scrape and OTLP export.
#[derive(Default)]
pub struct GaugeValues {
    /// Each app.
    pub apps: Vec<AppGauge>,
    /// Rows written but not yet in the semantic index.
    pub semantic_lag: i64,
    /// Long polls waiting plus webhook subscriptions.
    pub feed_subscribers: i64,
    /// OAuth grants not revoked.
    pub grants_active: i64,
}

/// An app's gauges.
pub struct AppGauge {
    /// Its name.
    pub name: String,
    /// Whether it answered its last request.
    pub reachable: bool,
    /// A WASM app's instances and memory (`None`: an app that runs elsewhere).
    pub wasm: Option<WasmGauge>,
}

/// A WASM app's instances now.
#[derive(Clone, Copy)]
pub struct WasmGauge {
    /// Instances in a call.
    pub live: u64,
    /// Instances ready for the next call.
    pub warm: u64,
    /// The bytes of their memories and tables.
    pub memory: u64,
}

type Source = Box<dyn Fn() -> Option<GaugeValues> + Send + Sync>;
static SOURCE: RwLock<Option<Source>> = RwLock::new(None);

/// Where the gauges are read from: the server sets it when it starts (it returns `None` once
/// the server is gone).
pub fn set_gauge_source(source: Source) {
    *SOURCE.write().unwrap() = Some(source);
}

/// The gauges now (all zero without a server).
pub(crate) fn gauge_values() -> GaugeValues {
    SOURCE
        .read()
        .unwrap()
        .as_ref()
        .and_then(|f| f())
        .unwrap_or_default()
}

type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

/// Every instrument of the process (see each one's help text in [`Metrics::new`]).
#[allow(missing_docs)]
pub struct Metrics {
    registry: Registry,
    pub server_duration: Histograms<OpLabels>,
    pub client_duration: Histograms<OpLabels>,
    pub http_duration: Histograms<HttpLabels>,
    pub journal_commits: Counter,
    pub commit_duration: Histogram,
    pub wasm_starts: Family<AppLabel, Counter>,
    pub webhook_failures: Counter,
    pub spans_dropped: Counter,
    pub span_export_failures: Counter,
    pub metrics_export_failures: Counter,
    // Read from the server's state at each scrape (see [`Gauges`]).
    pub sessions_open: Gauge,
    pub app_reachable: Family<AppLabel, Gauge>,
    pub wasm_instances: Family<InstanceLabels, Gauge>,
    pub wasm_memory: Family<AppLabel, Gauge<u64, AtomicU64>>,
    pub semantic_lag: Gauge,
    pub feed_subscribers: Gauge,
    pub grants_active: Gauge,
    /// The tool names kept per app (see [`Metrics::tool_label`]).
    tools: Mutex<HashMap<String, HashSet<String>>>,
    /// One scrape at a time: the gauges are set, then encoded.
    scrape: Mutex<()>,
}

/// The process's metrics.
pub fn metrics() -> &'static Metrics {
    static M: LazyLock<Metrics> = LazyLock::new(Metrics::new);
    &M
}

impl Metrics {
    fn new() -> Metrics {
        let mut r = Registry::default();
        let server_duration = Histograms::<OpLabels>::new_with_constructor(histogram as fn() -> _);
        r.register_with_unit(
            "mcp_server_operation_duration",
            "MCP requests served at /mcp: how long each took, by method, tool, app and error",
            Unit::Seconds,
            server_duration.clone(),
        );
        let client_duration = Histograms::<OpLabels>::new_with_constructor(histogram as fn() -> _);
        r.register_with_unit(
            "mcp_client_operation_duration",
            "The engine's calls to apps' tools (remote and WASM): how long each took",
            Unit::Seconds,
            client_duration.clone(),
        );
        let http_duration = Histograms::<HttpLabels>::new_with_constructor(histogram as fn() -> _);
        r.register_with_unit(
            "http_server_request_duration",
            "Requests to the HTTP API (/datanotes/...): how long each took, by method, route and status",
            Unit::Seconds,
            http_duration.clone(),
        );
        let journal_commits = Counter::default();
        r.register(
            "datanotes_journal_commits",
            "Batches of writes committed to the journal",
            journal_commits.clone(),
        );
        let commit_duration = histogram();
        r.register_with_unit(
            "datanotes_journal_commit_duration",
            "How long a batch of writes took to commit (files written, journal, index)",
            Unit::Seconds,
            commit_duration.clone(),
        );
        let wasm_starts = Family::<AppLabel, Counter>::default();
        r.register(
            "datanotes_wasm_instance_starts",
            "WASM app instances created (a call that found no warm instance)",
            wasm_starts.clone(),
        );
        let webhook_failures = Counter::default();
        r.register(
            "datanotes_webhook_delivery_failures",
            "Webhook deliveries that failed (each attempt)",
            webhook_failures.clone(),
        );
        let spans_dropped = Counter::default();
        r.register(
            "datanotes_trace_spans_dropped",
            "Spans dropped because the export queue was full",
            spans_dropped.clone(),
        );
        let span_export_failures = Counter::default();
        r.register(
            "datanotes_trace_export_failures",
            "Batches of spans the collector did not take (unreachable, slow or refusing)",
            span_export_failures.clone(),
        );
        let metrics_export_failures = Counter::default();
        r.register(
            "datanotes_metrics_export_failures",
            "Exports of metrics over OTLP the collector did not take",
            metrics_export_failures.clone(),
        );
        let sessions_open = Gauge::default();
        r.register(
            "datanotes_mcp_sessions_open",
            "MCP sessions open at /mcp",
            sessions_open.clone(),
        );
        let app_reachable = Family::<AppLabel, Gauge>::default();
        r.register(
            "datanotes_app_reachable",
            "Whether each app answered its last request (1) or not (0)",
            app_reachable.clone(),
        );
        let wasm_instances = Family::<InstanceLabels, Gauge>::default();
        r.register(
            "datanotes_wasm_instances",
            "WASM app instances alive, by app and state: in a call (live) or ready for the next (warm)",
            wasm_instances.clone(),
        );
        let wasm_memory = Family::<AppLabel, Gauge<u64, AtomicU64>>::default();
        r.register_with_unit(
            "datanotes_wasm_memory",
            "Linear memory and tables held by each WASM app's instances",
            Unit::Bytes,
            wasm_memory.clone(),
        );
        let semantic_lag = Gauge::default();
        r.register(
            "datanotes_semantic_index_lag",
            "Rows written but not yet in the semantic index",
            semantic_lag.clone(),
        );
        let feed_subscribers = Gauge::default();
        r.register(
            "datanotes_feed_subscribers",
            "Consumers of the change feed: open streams and webhook subscriptions",
            feed_subscribers.clone(),
        );
        let grants_active = Gauge::default();
        r.register(
            "datanotes_oauth_grants_active",
            "OAuth grants not revoked",
            grants_active.clone(),
        );
        Metrics {
            registry: r,
            server_duration,
            client_duration,
            http_duration,
            journal_commits,
            commit_duration,
            wasm_starts,
            webhook_failures,
            spans_dropped,
            span_export_failures,
            metrics_export_failures,
            sessions_open,
            app_reachable,
            wasm_instances,
            wasm_memory,
            semantic_lag,
            feed_subscribers,
            grants_active,
            tools: Mutex::new(HashMap::new()),
            scrape: Mutex::new(()),
        }
    }

    /// An MCP request served at `/mcp` took `secs`.
    pub fn observe_server(&self, l: OpLabels, secs: f64) {
        self.server_duration.get_or_create(&l).observe(secs);
        if let Some(o) = super::otlp_metrics::get() {
            o.defer(super::otlp_metrics::Timed::Server(l, secs));
        }
    }

    /// A call to an app's tool took `secs`.
    pub fn observe_client(&self, l: OpLabels, secs: f64) {
        self.client_duration.get_or_create(&l).observe(secs);
        if let Some(o) = super::otlp_metrics::get() {
            o.defer(super::otlp_metrics::Timed::Client(l, secs));
        }
    }

    /// A request to the HTTP API took `secs`.
    pub fn observe_http(&self, l: HttpLabels, secs: f64) {
        self.http_duration.get_or_create(&l).observe(secs);
        if let Some(o) = super::otlp_metrics::get() {
            o.defer(super::otlp_metrics::Timed::Http(l, secs));
        }
    }

    /// A batch of writes was committed in `secs`.
    pub fn committed(&self, secs: f64) {
        if let Some(o) = super::otlp_metrics::get() {
            o.commits.add(1, &[]);
            o.commit.record(secs, &[]);
        }
        self.journal_commits.inc();
        self.commit_duration.observe(secs);
    }

    /// A WASM app made a new instance.
    pub fn wasm_started(&self, app: &str) {
        if let Some(o) = super::otlp_metrics::get() {
            o.wasm_starts.add(
                1,
                &[opentelemetry::KeyValue::new(
                    "datanotes.app.name",
                    app.to_string(),
                )],
            );
        }
        self.wasm_starts
            .get_or_create(&AppLabel {
                datanotes_app: app.to_string(),
            })
            .inc();
    }

    /// A webhook delivery failed.
    pub fn webhook_failed(&self) {
        if let Some(o) = super::otlp_metrics::get() {
            o.webhook_failures.add(1, &[]);
        }
        self.webhook_failures.inc();
    }

    /// A span was dropped (the export queue was full).
    pub fn span_dropped(&self) {
        if let Some(o) = super::otlp_metrics::get() {
            o.spans_dropped.add(1, &[]);
        }
        self.spans_dropped.inc();
    }

    /// A batch of spans was not taken by the collector.
    pub fn span_export_failed(&self) {
        if let Some(o) = super::otlp_metrics::get() {
            o.span_export_failures.add(1, &[]);
        }
        self.span_export_failures.inc();
    }

    /// The label value of `tool`, a tool the aggregator found in its namespace, served by
    /// `app` (empty: the engine): its name while the app has fewer than [`TOOLS_PER_APP`]
    /// names kept, else `other`.
    pub fn tool_label(&self, app: &str, tool: &str) -> String {
        if tool.len() > LONGEST_TOOL {
            return OTHER.into();
        }
        let mut kept = self.tools.lock().unwrap();
        let names = kept.entry(app.to_string()).or_default();
        if names.contains(tool) {
            return tool.to_string();
        }
        if names.len() >= TOOLS_PER_APP {
            return OTHER.into();
        }
        names.insert(tool.to_string());
        tool.to_string()
    }
}

/// The Prometheus text of every metric, the gauges read now from the server's state.
pub fn scrape() -> String {
    let m = metrics();
    let _one = m.scrape.lock().unwrap();
    let g = gauge_values();
    m.app_reachable.clear();
    m.wasm_instances.clear();
    m.wasm_memory.clear();
    for a in g.apps {
        let app = AppLabel {
            datanotes_app: a.name,
        };
        m.app_reachable
            .get_or_create(&app)
            .set(i64::from(a.reachable));
        if let Some(w) = a.wasm {
            for (state, n) in [("live", w.live), ("warm", w.warm)] {
                m.wasm_instances
                    .get_or_create(&InstanceLabels {
                        datanotes_app: app.datanotes_app.clone(),
                        state,
                    })
                    .set(n as i64);
            }
            m.wasm_memory.get_or_create(&app).set(w.memory);
        }
    }
    m.semantic_lag.set(g.semantic_lag);
    m.feed_subscribers.set(g.feed_subscribers);
    m.grants_active.set(g.grants_active);
    let mut out = String::new();
    // Writing to a String cannot fail.
    let _ = prometheus_client::encoding::text::encode(&mut out, &m.registry);
    out
}

/// The content type of [`scrape`]'s text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The MCP methods named as they are; any other: `other`.
pub fn method_label(method: &str) -> &'static str {
    const KNOWN: &[&str] = &[
        "initialize",
        "ping",
        "tools/list",
        "tools/call",
        "resources/list",
        "resources/templates/list",
        "resources/read",
        "resources/subscribe",
        "resources/unsubscribe",
        "prompts/list",
        "prompts/get",
        "completion/complete",
        "logging/setLevel",
        "tasks/get",
        "tasks/result",
        "tasks/list",
        "tasks/cancel",
        "subscriptions/listen",
    ];
    KNOWN
        .iter()
        .find(|m| **m == method)
        .copied()
        .unwrap_or(OTHER)
}

/// The `error.type` of a JSON-RPC error code: the code as the conventions write it for the
/// codes the protocol defines, else `jsonrpc_error`.
pub fn error_type(code: i64) -> &'static str {
    match code {
        -32700 => "-32700",
        -32600 => "-32600",
        -32601 => "-32601",
        -32602 => "-32602",
        -32603 => "-32603",
        -32002 => "-32002",
        -32042 => "-32042",
        -32800 => "-32800",
        _ => "jsonrpc_error",
    }
}

/// A tool's answer marked `isError` (the conventions' value).
pub const TOOL_ERROR: &str = "tool_error";
/// An app that could not be reached or did not answer in time.
pub const UNREACHABLE: &str = "unreachable";
/// A call the caller gave up on.
pub const CANCELLED: &str = "cancelled";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_labels_are_bounded_per_app() {
        let m = Metrics::new();
        for i in 0..TOOLS_PER_APP {
            assert_eq!(m.tool_label("big", &format!("t{i}")), format!("t{i}"));
        }
        assert_eq!(m.tool_label("big", "one_more"), OTHER);
        // A name kept stays kept; another app has its own room.
        assert_eq!(m.tool_label("big", "t0"), "t0");
        assert_eq!(m.tool_label("small", "one_more"), "one_more");
        assert_eq!(m.tool_label("small", &"x".repeat(100_000)), OTHER);
    }

    #[test]
    fn methods_and_errors_are_a_short_vocabulary() {
        assert_eq!(method_label("tools/call"), "tools/call");
        assert_eq!(method_label("x".repeat(10_000).as_str()), OTHER);
        assert_eq!(error_type(-32602), "-32602");
        assert_eq!(error_type(123_456), "jsonrpc_error");
    }

    #[test]
    fn the_text_names_the_conventions_metrics() {
        let m = Metrics::new();
        m.server_duration
            .get_or_create(&OpLabels {
                mcp_method_name: "tools/call",
                gen_ai_tool_name: "select_rows".into(),
                datanotes_app: String::new(),
                error_type: "",
            })
            .observe(0.002);
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &m.registry).unwrap();
        assert!(out.contains("# TYPE mcp_server_operation_duration_seconds histogram"));
        assert!(out.contains(
            "mcp_server_operation_duration_seconds_count{mcp_method_name=\"tools/call\",gen_ai_tool_name=\"select_rows\",datanotes_app=\"\",error_type=\"\"} 1"
        ), "{out}");
        assert!(out.contains("datanotes_journal_commits_total 0"));
        assert!(out.ends_with("# EOF\n"));
    }
}
