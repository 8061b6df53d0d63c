//! The metrics over OTLP, when configured ([`super::otlp`]: `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`
//! or `OTEL_EXPORTER_OTLP_ENDPOINT`, or `serve --otlp-endpoint`; `OTEL_METRICS_EXPORTER=none`
//! keeps them off), every `OTEL_METRIC_EXPORT_INTERVAL` ms (60,000 by default; the SDK's
//! periodic reader reads it), on the reader's own thread.
//!
//! The same figures as `GET /datanotes/metrics`, under the conventions' names:
//! [`super::metrics::Metrics`] records each histogram and counter here too (only when this is
//! on), and the gauges are observed from the same source as a scrape's
//! ([`super::metrics::gauge_values`]). Off, nothing here is made and recording costs one check.
//!
//! A request's duration is not recorded on the request's path: the SDK makes and hashes its
//! attributes and locks its map, about 1.5 % of a traced server's samples in a profile
//! (BENCHMARKS.md, "Tracing's cost", stop 58). The request leaves it in a queue ([`Instruments::defer`]: one lock,
//! one push), and the recorder thread, at a lower priority, records what is queued every
//! quarter of the export interval (at most a second) and before the last export. A full
//! queue ([`MOST_PENDING`]) is recorded where it is: nothing is lost.

use super::metrics::{BUCKETS, HttpLabels, OpLabels, gauge_values, metrics};
use opentelemetry::KeyValue;
use opentelemetry::metrics::{Counter, Histogram, Meter, MeterProvider};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::metrics::data::ResourceMetrics;
use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider, Temporality};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

/// The instruments recorded where the Prometheus ones are.
pub(super) struct Instruments {
    provider: SdkMeterProvider,
    pub server: Histogram<f64>,
    pub client: Histogram<f64>,
    pub http: Histogram<f64>,
    pub commit: Histogram<f64>,
    pub commits: Counter<u64>,
    pub wasm_starts: Counter<u64>,
    pub webhook_failures: Counter<u64>,
    pub spans_dropped: Counter<u64>,
    pub span_export_failures: Counter<u64>,
    /// The durations requests left for the recorder thread.
    pending: Mutex<Vec<Timed>>,
}

/// A duration a request took, with its labels, to record.
pub(super) enum Timed {
    Server(OpLabels, f64),
    Client(OpLabels, f64),
    Http(HttpLabels, f64),
}

/// The most durations queued; beyond, the request records its own.
const MOST_PENDING: usize = 1 << 16;

impl Instruments {
    /// Leaves a duration for the recorder thread (recorded here if the queue is full).
    pub(super) fn defer(&self, t: Timed) {
        let mut pending = self.pending.lock().unwrap();
        if pending.len() < MOST_PENDING {
            pending.push(t);
            return;
        }
        drop(pending);
        self.record(t);
    }

    fn record(&self, t: Timed) {
        match t {
            Timed::Server(l, secs) => self.server.record(secs, &op_attributes(&l)),
            Timed::Client(l, secs) => self.client.record(secs, &op_attributes(&l)),
            Timed::Http(l, secs) => self.http.record(secs, &http_attributes(&l)),
        }
    }

    /// Records every duration queued.
    fn record_pending(&self) {
        let batch = {
            let mut pending = self.pending.lock().unwrap();
            let room = pending.len();
            std::mem::replace(&mut *pending, Vec::with_capacity(room))
        };
        for t in batch {
            self.record(t);
        }
    }
}

/// How often the recorder thread records the queued durations: a quarter of the export
/// interval (`OTEL_METRIC_EXPORT_INTERVAL`, ms, 60,000 by default), between 10 ms and 1 s.
fn recording_period() -> Duration {
    let interval = std::env::var("OTEL_METRIC_EXPORT_INTERVAL")
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|v| *v > 0)
        .unwrap_or(60_000);
    Duration::from_millis((interval / 4).clamp(10, 1000))
}

static OTLP: OnceLock<Instruments> = OnceLock::new();

/// The instruments, when the export is on.
pub(super) fn get() -> Option<&'static Instruments> {
    OTLP.get()
}

/// Starts the export if configured: the endpoint, or `Ok(None)` (off).
pub fn start(config: &super::otlp::Config) -> anyhow::Result<Option<String>> {
    let Some(t) = super::otlp::target(config, super::otlp::Signal::Metrics)? else {
        return Ok(None);
    };
    let client = crate::outbound::collector_client(t.timeout)?;
    use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
    let exporter = opentelemetry_otlp::MetricExporter::builder()
        .with_http()
        .with_protocol(t.protocol)
        .with_endpoint(t.endpoint.clone())
        .with_timeout(t.timeout)
        .with_http_client(client)
        .build()
        .map_err(|e| anyhow::anyhow!("the OTLP metrics exporter could not be made: {e}"))?;
    let reader = PeriodicReader::builder(Counted {
        inner: exporter,
        failing: AtomicBool::new(false),
    })
    .build();
    let provider = SdkMeterProvider::builder()
        .with_reader(reader)
        .with_resource(super::otlp::resource())
        .build();
    let instruments = instruments(provider);
    if OTLP.set(instruments).is_ok() {
        let period = recording_period();
        std::thread::Builder::new()
            .name("metrics-record".into())
            .spawn(move || {
                super::yield_to_requests();
                loop {
                    std::thread::sleep(period);
                    if let Some(i) = OTLP.get() {
                        i.record_pending();
                    }
                }
            })
            .map_err(|e| anyhow::anyhow!("the metrics recorder could not start: {e}"))?;
    }
    Ok(Some(t.endpoint))
}

/// The instruments of `provider`'s meter, the gauges observed.
fn instruments(provider: SdkMeterProvider) -> Instruments {
    let meter = provider.meter("datanotes");
    let seconds = |name: &'static str, help: &'static str| {
        meter
            .f64_histogram(name)
            .with_unit("s")
            .with_description(help)
            .with_boundaries(BUCKETS.to_vec())
            .build()
    };
    let counter = |name: &'static str, help: &'static str| {
        meter.u64_counter(name).with_description(help).build()
    };
    let instruments = Instruments {
        server: seconds(
            "mcp.server.operation.duration",
            "MCP requests served at /mcp: how long each took",
        ),
        client: seconds(
            "mcp.client.operation.duration",
            "The engine's calls to apps' tools: how long each took",
        ),
        http: seconds(
            "http.server.request.duration",
            "Requests to the HTTP API: how long each took",
        ),
        commit: seconds(
            "datanotes.journal.commit.duration",
            "How long a batch of writes took to commit",
        ),
        commits: counter(
            "datanotes.journal.commits",
            "Batches of writes committed to the journal",
        ),
        wasm_starts: counter(
            "datanotes.wasm.instance.starts",
            "WASM app instances created (a call that found no warm instance)",
        ),
        webhook_failures: counter(
            "datanotes.webhook.delivery.failures",
            "Webhook deliveries that failed (each attempt)",
        ),
        spans_dropped: counter(
            "datanotes.trace.spans.dropped",
            "Spans dropped because the export queue was full",
        ),
        span_export_failures: counter(
            "datanotes.trace.export.failures",
            "Batches of spans the collector did not take",
        ),
        provider,
        pending: Mutex::new(Vec::new()),
    };
    observe_gauges(&meter);
    instruments
}

/// Exports what was recorded since the last export (at shutdown), waiting a few seconds.
pub fn stop() {
    if let Some(i) = OTLP.get() {
        i.record_pending();
        let _ = i.provider.shutdown_with_timeout(Duration::from_secs(3));
    }
}

/// A gauge of one value: its name, its description, how it is read.
type Plain = (&'static str, &'static str, fn() -> i64);

/// The gauges, observed at each export from the server's state (as a scrape reads them).
fn observe_gauges(meter: &Meter) {
    let app = |name: &str| KeyValue::new("datanotes.app.name", name.to_string());
    meter
        .i64_observable_gauge("datanotes.app.reachable")
        .with_description("Whether each app answered its last request (1) or not (0)")
        .with_callback(move |o| {
            for a in gauge_values().apps {
                o.observe(i64::from(a.reachable), &[app(&a.name)]);
            }
        })
        .build();
    meter
        .i64_observable_gauge("datanotes.wasm.instances")
        .with_description("WASM app instances alive: in a call (live) or ready for the next (warm)")
        .with_callback(move |o| {
            for a in gauge_values().apps {
                if let Some(w) = a.wasm {
                    o.observe(
                        w.live as i64,
                        &[app(&a.name), KeyValue::new("state", "live")],
                    );
                    o.observe(
                        w.warm as i64,
                        &[app(&a.name), KeyValue::new("state", "warm")],
                    );
                }
            }
        })
        .build();
    meter
        .u64_observable_gauge("datanotes.wasm.memory")
        .with_unit("By")
        .with_description("Linear memory and tables held by each WASM app's instances")
        .with_callback(move |o| {
            for a in gauge_values().apps {
                if let Some(w) = a.wasm {
                    o.observe(w.memory, &[app(&a.name)]);
                }
            }
        })
        .build();
    let plain: [Plain; 4] = [
        (
            "datanotes.semantic.index.lag",
            "Rows written but not yet in the semantic index",
            || gauge_values().semantic_lag,
        ),
        (
            "datanotes.feed.subscribers",
            "Consumers of the change feed: open streams and webhook subscriptions",
            || gauge_values().feed_subscribers,
        ),
        (
            "datanotes.oauth.grants.active",
            "OAuth grants not revoked",
            || gauge_values().grants_active,
        ),
        (
            "datanotes.mcp.sessions.open",
            "MCP sessions open at /mcp",
            || metrics().sessions_open.get(),
        ),
    ];
    for (name, help, read) in plain {
        meter
            .i64_observable_gauge(name)
            .with_description(help)
            .with_callback(move |o| o.observe(read(), &[]))
            .build();
    }
}

/// An MCP operation's attributes, as the conventions name them (empty values left out).
pub(super) fn op_attributes(l: &OpLabels) -> Vec<KeyValue> {
    let mut a = vec![KeyValue::new("mcp.method.name", l.mcp_method_name)];
    if !l.gen_ai_tool_name.is_empty() {
        a.push(KeyValue::new(
            "gen_ai.tool.name",
            l.gen_ai_tool_name.clone(),
        ));
    }
    if !l.datanotes_app.is_empty() {
        a.push(KeyValue::new("datanotes.app.name", l.datanotes_app.clone()));
    }
    if !l.error_type.is_empty() {
        a.push(KeyValue::new("error.type", l.error_type));
    }
    a
}

/// An HTTP request's attributes, as the conventions name them.
pub(super) fn http_attributes(l: &HttpLabels) -> Vec<KeyValue> {
    let mut a = vec![
        KeyValue::new("http.request.method", l.http_request_method),
        KeyValue::new(
            "http.response.status_code",
            i64::from(l.http_response_status_code),
        ),
    ];
    if !l.http_route.is_empty() {
        a.push(KeyValue::new("http.route", l.http_route.clone()));
    }
    a
}

/// The OTLP exporter, its failures counted and logged once per episode.
struct Counted {
    inner: opentelemetry_otlp::MetricExporter,
    failing: AtomicBool,
}

impl PushMetricExporter for Counted {
    async fn export(&self, m: &ResourceMetrics) -> OTelSdkResult {
        let r = self.inner.export(m).await;
        match &r {
            Ok(()) => {
                if self.failing.swap(false, Ordering::Relaxed) {
                    tracing::info!("metrics export works again");
                }
            }
            Err(e) => {
                metrics().metrics_export_failures.inc();
                if !self.failing.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        "metrics export failed: {e}; further failures are counted in \
                         datanotes_metrics_export_failures_total, not logged"
                    );
                }
            }
        }
        r
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn temporality(&self) -> Temporality {
        self.inner.temporality()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData};
    use std::sync::Arc;
    use std::sync::atomic::AtomicU64;

    /// An exporter that keeps how many durations `mcp.server.operation.duration` held at its
    /// last export (cumulative), over its points.
    #[derive(Debug, Clone, Default)]
    struct Counting(Arc<AtomicU64>);

    impl PushMetricExporter for Counting {
        async fn export(&self, m: &ResourceMetrics) -> OTelSdkResult {
            let n = m
                .scope_metrics()
                .flat_map(|s| s.metrics())
                .filter(|m| m.name() == "mcp.server.operation.duration")
                .map(|m| match m.data() {
                    AggregatedMetrics::F64(MetricData::Histogram(h)) => {
                        h.data_points().map(|p| p.count()).sum()
                    }
                    _ => 0,
                })
                .sum();
            self.0.store(n, Ordering::SeqCst);
            Ok(())
        }
        fn force_flush(&self) -> OTelSdkResult {
            Ok(())
        }
        fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
            Ok(())
        }
        fn temporality(&self) -> Temporality {
            Temporality::Cumulative
        }
    }

    #[test]
    fn a_duration_is_recorded_by_the_recorder_and_none_is_lost_when_the_queue_is_full() {
        let exported = Counting::default();
        let reader = PeriodicReader::builder(exported.clone())
            .with_interval(Duration::from_secs(3600))
            .build();
        let i = instruments(SdkMeterProvider::builder().with_reader(reader).build());
        let count = || {
            i.provider.force_flush().unwrap();
            exported.0.load(Ordering::SeqCst)
        };
        let labels = OpLabels {
            mcp_method_name: "tools/call",
            gen_ai_tool_name: "list_tables".into(),
            datanotes_app: String::new(),
            error_type: "",
        };
        let n = MOST_PENDING + 10;
        for _ in 0..n {
            i.defer(Timed::Server(labels.clone(), 0.001));
        }
        // Queued until the recorder records them; beyond the queue's room, recorded at once.
        assert_eq!(count(), 10);
        i.record_pending();
        assert_eq!(count(), n as u64);
        i.record_pending();
        assert_eq!(count(), n as u64, "each recorded once");
    }
}
