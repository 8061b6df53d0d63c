//! Traces over OTLP, configured the standard way ([`super::otlp`]: on when
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or `OTEL_EXPORTER_OTLP_ENDPOINT`, or
//! `serve --otlp-endpoint`, is set), with the sampler of `OTEL_TRACES_SAMPLER` / `_ARG` (the SDK
//! reads them) and the queue of `OTEL_BSP_*` ([`super::span_queue`]). Off, [`tracer`] is `None` and no
//! span is made.
//!
//! Trace context comes in from a request's `params._meta` (`traceparent`, `tracestate`) or
//! its HTTP `traceparent` header, and goes out to a remote app the same two ways
//! ([`inject`]). A malformed or oversized one is ignored: the request starts a new trace.

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{SpanKind, TraceContextExt, Tracer};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::OnceLock;
use std::time::Duration;

pub use super::otlp::Config;

struct Tracing {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
    record_content: bool,
}

static TRACING: OnceLock<Tracing> = OnceLock::new();

/// The tracer, when export is on.
pub fn tracer() -> Option<&'static SdkTracer> {
    TRACING.get().map(|t| &t.tracer)
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
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(protocol)
        .with_endpoint(endpoint.clone())
        .with_timeout(timeout)
        .with_http_client(client)
        .build()
        .map_err(|e| anyhow::anyhow!("the OTLP exporter could not be made: {e}"))?;
    let resource = super::otlp::resource();
    let provider = SdkTracerProvider::builder()
        .with_span_processor(super::span_queue::Queue::start(exporter))
        .with_resource(resource)
        .build();
    let tracer = opentelemetry::trace::TracerProvider::tracer(&provider, "datanotes");
    let _ = TRACING.set(Tracing {
        provider,
        tracer,
        record_content: config.record_content,
    });
    Ok(Some(endpoint))
}

/// Exports what is queued (at shutdown), waiting at most a few seconds.
pub fn stop() {
    if let Some(t) = TRACING.get() {
        let _ = t.provider.shutdown_with_timeout(Duration::from_secs(3));
    }
}

/// The longest `traceparent` read (the W3C form is 55 characters) and `tracestate` (the W3C's
/// 32 members of at most 256 characters each; longer: dropped, as the W3C allows).
const LONGEST_PARENT: usize = 128;
const LONGEST_STATE: usize = 8192;

/// The trace context a request carries: `params._meta` first, else the HTTP headers. None
/// found, or malformed: an empty context (a new trace).
pub fn extract(meta: Option<&Value>, headers: &http::HeaderMap) -> Context {
    let mut carrier = HashMap::new();
    let from_meta = |k: &str| meta.and_then(|m| m.get(k)).and_then(Value::as_str);
    let from_header = |k: &str| headers.get(k).and_then(|v| v.to_str().ok());
    let (parent, state) = match from_meta("traceparent") {
        Some(p) => (Some(p), from_meta("tracestate")),
        None => (from_header("traceparent"), from_header("tracestate")),
    };
    let Some(parent) = parent.filter(|p| p.len() <= LONGEST_PARENT) else {
        return Context::new();
    };
    carrier.insert("traceparent".to_string(), parent.to_string());
    if let Some(s) = state.filter(|s| s.len() <= LONGEST_STATE) {
        carrier.insert("tracestate".to_string(), s.to_string());
    }
    TraceContextPropagator::new().extract(&carrier)
}

/// Whether a request carries a `traceparent` (in `params._meta` or its headers).
pub fn carries_parent(meta: Option<&Value>, headers: &http::HeaderMap) -> bool {
    meta.and_then(|m| m.get("traceparent")).is_some() || headers.contains_key("traceparent")
}

/// The trace ID of a context's span, as 32 hex digits (None: no valid span).
pub fn trace_id(cx: &Context) -> Option<String> {
    let sc = cx.span().span_context().clone();
    sc.is_valid().then(|| sc.trace_id().to_string())
}

/// The `traceparent` and `tracestate` of a span's context, for a request it makes.
pub fn inject(cx: &Context) -> Vec<(&'static str, String)> {
    let mut carrier: HashMap<String, String> = HashMap::new();
    TraceContextPropagator::new().inject_context(cx, &mut carrier);
    let mut out = Vec::new();
    for k in ["traceparent", "tracestate"] {
        if let Some(v) = carrier.remove(k).filter(|v| !v.is_empty()) {
            out.push((k, v));
        }
    }
    out
}

/// A span started under `parent`, of `kind`, in the context it makes; None when export is off.
pub fn start_span(
    parent: &Context,
    name: impl Into<std::borrow::Cow<'static, str>>,
    kind: SpanKind,
    attributes: Vec<KeyValue>,
) -> Option<Context> {
    let tracer = tracer()?;
    let span = tracer
        .span_builder(name)
        .with_kind(kind)
        .with_attributes(attributes)
        .start_with_context(tracer, parent);
    Some(parent.with_span(span))
}

/// The context of the span active on this thread (export on, inside an operation's span): what
/// work handed to another thread is traced under.
pub fn current() -> Option<Context> {
    tracer()?;
    let cx = Context::current();
    cx.has_active_span().then_some(cx)
}

/// A span under `parent` that began at `start` and ends now, failed with `error` if given:
/// work done on another thread for the request of `parent` (the writer's commit of a batch).
pub fn span_since(
    parent: &Context,
    name: &'static str,
    start: std::time::SystemTime,
    attributes: Vec<KeyValue>,
    error: Option<&str>,
) {
    let Some(tracer) = tracer() else { return };
    let span = tracer
        .span_builder(name)
        .with_kind(SpanKind::Internal)
        .with_start_time(start)
        .with_attributes(attributes)
        .start_with_context(tracer, parent);
    end_span(&parent.with_span(span), error);
}

/// Ends the span of `cx`, failed with `error` (its `error.type`) if given.
pub fn end_span(cx: &Context, error: Option<&str>) {
    let span = cx.span();
    if let Some(e) = error {
        span.set_attribute(KeyValue::new("error.type", e.to_string()));
        span.set_status(opentelemetry::trace::Status::error(e.to_string()));
    }
    span.end();
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
        let cx = extract(Some(&meta), &h);
        let sc = cx.span().span_context().clone();
        assert_eq!(
            sc.trace_id().to_string(),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        assert_eq!(sc.trace_state().header(), "congo=t61rcWkgMzE");
        let cx = extract(None, &h);
        assert_eq!(
            cx.span().span_context().trace_id().to_string(),
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
            let cx = extract(Some(&bad), &h);
            assert!(!cx.span().span_context().is_valid(), "{bad}");
        }
        // A 1 MB tracestate is dropped; the parent stays.
        let meta = serde_json::json!({
            "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "tracestate": format!("a={}", "b".repeat(1 << 20)),
        });
        let sc = extract(Some(&meta), &h).span().span_context().clone();
        assert!(sc.is_valid());
        assert_eq!(sc.trace_state().header(), "");
    }

    #[test]
    fn injection_writes_what_extraction_reads() {
        let meta = serde_json::json!({
            "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        });
        let cx = extract(Some(&meta), &http::HeaderMap::new());
        let out = inject(&cx);
        assert_eq!(
            out,
            vec![(
                "traceparent",
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".to_string()
            )]
        );
        assert!(inject(&Context::new()).is_empty());
    }
}
