//! The sampler the owner names (`OTEL_TRACES_SAMPLER`) decides which traces are exported, as
//! OpenTelemetry's samplers decide: the spans are received by the OTLP receiver of
//! `otlp_receiver.py`, which decodes them with the OpenTelemetry project's own classes.

use super::call;
use super::otlp_metrics::receiver;
use crate::kit::mcp::RawSession;
use crate::kit::*;
use base64::Engine as _;
use serde_json::{Value, json};
use std::time::Duration;

/// Every span received, as (trace ID in hex, parent span ID in hex, name).
fn spans(receiver: &str) -> Vec<(String, String, String)> {
    let all: Value = reqwest::blocking::get(format!("{receiver}/received"))
        .and_then(|r| r.json())
        .unwrap_or_default();
    let hex = |v: &Value| {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(v.as_str().unwrap_or_default())
            .unwrap_or_default();
        bytes.iter().map(|b| format!("{b:02x}")).collect::<String>()
    };
    let mut out = vec![];
    for export in all.as_array().into_iter().flatten() {
        for r in export["request"]["resourceSpans"]
            .as_array()
            .into_iter()
            .flatten()
        {
            for s in r["scopeSpans"].as_array().into_iter().flatten() {
                for span in s["spans"].as_array().into_iter().flatten() {
                    out.push((
                        hex(&span["traceId"]),
                        hex(&span["parentSpanId"]),
                        span["name"].as_str().unwrap_or_default().to_string(),
                    ));
                }
            }
        }
    }
    out
}

#[test]
fn the_sampler_of_the_environment_decides_which_traces_are_exported() {
    let (_rx, base) = receiver();
    // Parent-based, roots never: a call is traced only when its caller's trace is sampled.
    let s = Server::start_with_env(&[
        ("OTEL_EXPORTER_OTLP_ENDPOINT", base.as_str()),
        ("OTEL_METRICS_EXPORTER", "none"),
        ("OTEL_TRACES_SAMPLER", "parentbased_always_off"),
        ("OTEL_BSP_SCHEDULE_DELAY", "100"),
    ]);
    let session = RawSession::open(&s, &s.token, "2025-11-25");
    let (unsampled, sampled) = (
        "0af7651916cd43dd8448eb211c80319c",
        "4bf92f3577b34da6a3ce929d0e0e4736",
    );
    let parent = "00f067aa0ba902b7";
    // No parent; a parent not sampled (flags 00); then a sampled one (flags 01), last: the
    // queue exports in order, so once its spans are in, the others would be too.
    for (id, meta) in [
        (1, json!({})),
        (
            2,
            json!({"traceparent": format!("00-{unsampled}-{parent}-00")}),
        ),
        (
            3,
            json!({"traceparent": format!("00-{sampled}-{parent}-01")}),
        ),
    ] {
        let m = call(&session, id, "list_tables", json!({}), meta);
        assert!(m[0]["result"].is_object(), "{m:?}");
    }
    let got = poll(Duration::from_secs(60), Duration::from_millis(200), || {
        let got = spans(&base);
        got.iter()
            .any(|(t, p, _)| t == sampled && p == parent)
            .then_some(got)
    })
    .unwrap_or_else(|| panic!("the sampled call's span: {:?}", spans(&base)));
    // The sampled call: its SERVER span under the caller's, and its operation's span under
    // that; nothing of the other two traces.
    assert!(
        got.iter().all(|(t, _, _)| t == sampled),
        "only the sampled trace is exported: {got:?}"
    );
    let names: Vec<&str> = got.iter().map(|(_, _, n)| n.as_str()).collect();
    assert!(
        names.contains(&"tools/call list_tables") && names.contains(&"list_tables"),
        "{names:?}"
    );
}

#[test]
fn a_sampler_the_engine_does_not_know_is_said_and_the_default_used() {
    let (_rx, base) = receiver();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let s = Server::start_logging(
        &log,
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", base.as_str()),
            ("OTEL_METRICS_EXPORTER", "none"),
            ("OTEL_TRACES_SAMPLER", "sometimes"),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ],
    );
    let session = RawSession::open(&s, &s.token, "2025-11-25");
    let m = call(&session, 1, "list_tables", json!({}), json!({}));
    assert!(m[0]["result"].is_object(), "{m:?}");
    // The default, parent-based always on: a root call is traced.
    poll(Duration::from_secs(60), Duration::from_millis(200), || {
        spans(&base)
            .iter()
            .any(|(_, p, n)| n == "tools/call list_tables" && p.is_empty())
            .then_some(())
    })
    .unwrap_or_else(|| panic!("the root call's span: {:?}", spans(&base)));
    let log = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        log.contains("OTEL_TRACES_SAMPLER \"sometimes\" is not known")
            && log.contains("parentbased_always_on"),
        "{log}"
    );
}
