//! Traces over OTLP, configured the standard way ([`super::otlp`]: on when
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or `OTEL_EXPORTER_OTLP_ENDPOINT`, or
//! `serve --otlp-endpoint`, is set), with the sampler of `OTEL_TRACES_SAMPLER` / `_ARG`
//! ([`super::sampling`]) and the queue of `OTEL_BSP_*` ([`super::span_queue`]). Off, no span is
//! made ([`start_span`] is `None`).
//!
//! Trace context comes in from a request's `params._meta` (`traceparent`, `tracestate`) or
//! its HTTP `traceparent` header, and goes out to a remote app the same two ways
//! ([`inject`]). A malformed or oversized one is ignored: the request starts a new trace.

use super::sampling::Sampler;
use super::span_queue::{Ended, Queue, Record};
use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind, Status, TraceContextExt, TraceFlags, TraceState,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{IdGenerator, RandomIdGenerator, SpanExporter};
use serde_json::Value;
use std::borrow::Cow;
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::OnceLock;
use std::time::{Duration, SystemTime};

pub use super::otlp::Config;

struct Tracing {
    queue: Queue,
    sampler: Sampler,
    record_content: bool,
}

static TRACING: OnceLock<Tracing> = OnceLock::new();

/// Whether traces are exported (spans are made).
pub fn on() -> bool {
    TRACING.get().is_some()
}

/// Whether tool arguments and results go on spans (the owner's opt-in).
pub fn records_content() -> bool {
    TRACING.get().is_some_and(|t| t.record_content)
}

/// Starts the export if configured; `Ok(None)`: off. A bad setting is an error that says which
/// and how to fix it.
pub fn start(config: &Config) -> anyhow::Result<Option<String>> {
    let Some(super::otlp::Target {
        endpoint,
        protocol,
        timeout,
    }) = super::otlp::target(config, super::otlp::Signal::Traces)?
    else {
        return Ok(None);
    };
    let client = crate::outbound::collector_client(timeout)?;
    use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
    let mut exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(protocol)
        .with_endpoint(endpoint.clone())
        .with_timeout(timeout)
        .with_http_client(client)
        .build()
        .map_err(|e| anyhow::anyhow!("the OTLP exporter could not be made: {e}"))?;
    exporter.set_resource(&super::otlp::resource());
    let _ = TRACING.set(Tracing {
        queue: Queue::start(exporter),
        sampler: Sampler::from_env(),
        record_content: config.record_content,
    });
    Ok(Some(endpoint))
}

/// Exports what is queued (at shutdown), waiting at most a few seconds.
pub fn stop() {
    if let Some(t) = TRACING.get() {
        t.queue.shutdown(Duration::from_secs(3));
    }
}

/// The longest `traceparent` read (the W3C form is 55 characters) and `tracestate` (the W3C's
/// 32 members of at most 256 characters each; longer: dropped, as the W3C allows).
const LONGEST_PARENT: usize = 128;
const LONGEST_STATE: usize = 8192;

/// The trace context a request carries: `params._meta` first, else the HTTP headers. None
/// found, or malformed: none (the request starts a new trace).
pub fn extract(meta: Option<&Value>, headers: &http::HeaderMap) -> Option<SpanContext> {
    let from_meta = |k: &str| meta.and_then(|m| m.get(k)).and_then(Value::as_str);
    let from_header = |k: &str| headers.get(k).and_then(|v| v.to_str().ok());
    let (parent, state) = match from_meta("traceparent") {
        Some(p) => (Some(p), from_meta("tracestate")),
        None => (from_header("traceparent"), from_header("tracestate")),
    };
    let parent = parent.filter(|p| p.len() <= LONGEST_PARENT)?;
    let mut carrier = HashMap::new();
    carrier.insert("traceparent".to_string(), parent.to_string());
    if let Some(s) = state.filter(|s| s.len() <= LONGEST_STATE) {
        carrier.insert("tracestate".to_string(), s.to_string());
    }
    let cx = TraceContextPropagator::new().extract(&carrier);
    let sc = cx.span().span_context().clone();
    sc.is_valid().then_some(sc)
}

/// Whether a request carries a `traceparent` (in `params._meta` or its headers).
pub fn carries_parent(meta: Option<&Value>, headers: &http::HeaderMap) -> bool {
    meta.and_then(|m| m.get("traceparent")).is_some() || headers.contains_key("traceparent")
}

/// The `traceparent` and `tracestate` of a span's context, for a request it makes.
pub fn inject(cx: &SpanContext) -> Vec<(&'static str, String)> {
    let mut carrier: HashMap<String, String> = HashMap::new();
    let cx = Context::new().with_remote_span_context(cx.clone());
    TraceContextPropagator::new().inject_context(&cx, &mut carrier);
    let mut out = Vec::new();
    for k in ["traceparent", "tracestate"] {
        if let Some(v) = carrier.remove(k).filter(|v| !v.is_empty()) {
            out.push((k, v));
        }
    }
    out
}

/// A span: its context (what its children and the requests it makes carry) and, when it is
/// sampled, its record. Ended once: by [`Span::end`], or when dropped (work given up, e.g. a
/// cancelled call), as the SDK's spans are.
///
/// The engine records its spans itself rather than through the SDK's tracer: a span is one
/// record moved into the export queue when it ends, with no context, lock or shared handle
/// made for it; the export thread turns the records into the SDK's span data for its OTLP
/// exporter. With the SDK's tracer, telemetry on a traced request's path was 2.0 points of
/// the server's profile above an untraced server's; with these records, 0.8 (`BENCHMARKS.md`).
pub struct Span {
    cx: SpanContext,
    record: Option<Record>,
}

impl Span {
    /// What the span's children and the requests it makes carry.
    pub fn context(&self) -> &SpanContext {
        &self.cx
    }

    /// Adds an attribute (a span not sampled keeps none).
    pub fn set_attribute(&mut self, kv: KeyValue) {
        if let Some(r) = &mut self.record {
            r.attributes.push(kv);
        }
    }

    /// Ends the span, failed with `error` (its `error.type`) if given.
    pub fn end(mut self, error: Option<&'static str>) {
        self.finish(error);
    }

    fn finish(&mut self, error: Option<&'static str>) {
        let Some(mut record) = self.record.take() else {
            return;
        };
        if let Some(e) = error {
            record.attributes.push(KeyValue::new("error.type", e));
            record.status = Status::error(e);
        }
        if let Some(t) = TRACING.get() {
            t.queue.push(Ended {
                context: std::mem::replace(&mut self.cx, SpanContext::empty_context()),
                record,
                end: SystemTime::now(),
            });
        }
    }
}

impl Drop for Span {
    fn drop(&mut self) {
        self.finish(None);
    }
}

/// A span started now under `parent` (none: a new trace), of `kind`; None when export is off.
pub fn start_span(
    parent: Option<&SpanContext>,
    name: impl Into<Cow<'static, str>>,
    kind: SpanKind,
    attributes: Vec<KeyValue>,
) -> Option<Span> {
    start_at(parent, name.into(), kind, attributes, SystemTime::now())
}

fn start_at(
    parent: Option<&SpanContext>,
    name: Cow<'static, str>,
    kind: SpanKind,
    attributes: Vec<KeyValue>,
    start: SystemTime,
) -> Option<Span> {
    let t = TRACING.get()?;
    let ids = RandomIdGenerator::default();
    let parent = parent.filter(|p| p.is_valid());
    let trace_id = parent.map_or_else(|| ids.new_trace_id(), SpanContext::trace_id);
    let sampled = t.sampler.samples(parent, trace_id);
    let flags = parent.map_or(TraceFlags::default(), SpanContext::trace_flags);
    let state = parent.map_or_else(TraceState::default, |p| p.trace_state().clone());
    let cx = SpanContext::new(
        trace_id,
        ids.new_span_id(),
        flags.with_sampled(sampled),
        false,
        state,
    );
    let record = sampled.then(|| Record {
        parent: parent.map_or(SpanId::INVALID, SpanContext::span_id),
        parent_remote: parent.is_some_and(SpanContext::is_remote),
        kind,
        name,
        start,
        attributes,
        status: Status::Unset,
    });
    Some(Span { cx, record })
}

thread_local! {
    /// The span active on this thread: see [`enter`].
    static CURRENT: RefCell<Option<SpanContext>> = const { RefCell::new(None) };
}

/// Makes `cx` the span active on this thread until the guard is dropped (then the one before
/// is again): what work handed to another thread from here is traced under ([`current`]).
pub fn enter(cx: &SpanContext) -> Entered {
    Entered(CURRENT.with(|c| c.replace(Some(cx.clone()))))
}

/// The span that was active before [`enter`], restored when dropped.
pub struct Entered(Option<SpanContext>);

impl Drop for Entered {
    fn drop(&mut self) {
        let before = self.0.take();
        CURRENT.with(|c| *c.borrow_mut() = before);
    }
}

/// The context of the span active on this thread (export on, inside an operation's span): what
/// work handed to another thread is traced under.
pub fn current() -> Option<SpanContext> {
    if !on() {
        return None;
    }
    CURRENT.with(|c| c.borrow().clone())
}

/// A span under `parent` that began at `start` and ends now, failed with `error` if given:
/// work done on another thread for the request of `parent` (the writer's commit of a batch).
pub fn span_since(
    parent: &SpanContext,
    name: &'static str,
    start: SystemTime,
    attributes: Vec<KeyValue>,
    error: Option<&'static str>,
) {
    if let Some(s) = start_at(
        Some(parent),
        name.into(),
        SpanKind::Internal,
        attributes,
        start,
    ) {
        s.end(error);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_well_formed_parent_is_read_from_meta_before_the_header() {
        let meta = serde_json::json!({
            "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "tracestate": "congo=t61rcWkgMzE",
        });
        let mut h = http::HeaderMap::new();
        h.insert(
            "traceparent",
            "00-11111111111111111111111111111111-2222222222222222-01"
                .parse()
                .unwrap(),
        );
        let sc = extract(Some(&meta), &h).unwrap();
        assert_eq!(
            sc.trace_id().to_string(),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        assert_eq!(sc.trace_state().header(), "congo=t61rcWkgMzE");
        assert_eq!(
            extract(None, &h).unwrap().trace_id().to_string(),
            "11111111111111111111111111111111"
        );
    }

    #[test]
    fn malformed_or_huge_context_starts_a_new_trace() {
        let h = http::HeaderMap::new();
        for bad in [
            serde_json::json!({"traceparent": "00-zz-00f067aa0ba902b7-01"}),
            serde_json::json!({"traceparent": 7}),
            serde_json::json!({"traceparent": "00-00000000000000000000000000000000-00f067aa0ba902b7-01"}),
            serde_json::json!({"traceparent": format!("00-{}", "a".repeat(1 << 20))}),
        ] {
            assert!(extract(Some(&bad), &h).is_none(), "{bad}");
        }
        // A 1 MB tracestate is dropped; the parent stays.
        let meta = serde_json::json!({
            "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "tracestate": format!("a={}", "b".repeat(1 << 20)),
        });
        let sc = extract(Some(&meta), &h).unwrap();
        assert_eq!(sc.trace_state().header(), "");
    }

    #[test]
    fn injection_writes_what_extraction_reads() {
        let meta = serde_json::json!({
            "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        });
        let cx = extract(Some(&meta), &http::HeaderMap::new()).unwrap();
        let out = inject(&cx);
        assert_eq!(
            out,
            vec![(
                "traceparent",
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".to_string()
            )]
        );
        assert!(inject(&SpanContext::empty_context()).is_empty());
    }
}
