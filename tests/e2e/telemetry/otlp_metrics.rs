//! Metrics over OTLP: the engine's periodic export, received by an OTLP/HTTP receiver that
//! decodes each request with the OpenTelemetry project's own generated classes (PyPI
//! `opentelemetry-proto`, `otlp_receiver.py`), in both protocols.

use super::{Kid, call, tools};
use crate::kit::mcp::RawSession;
use crate::kit::*;
use serde_json::{Value, json};
use std::path::Path;
use std::process::{Command, Stdio};

/// The receiver on a free port: the process and its base URL.
pub(super) fn receiver() -> (Kid, String) {
    let (_, python) = tools();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/e2e/telemetry/otlp_receiver.py");
    let mut child = Command::new(&python)
        .arg(script)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("the OTLP receiver");
    let port = process::wait_line(&mut child, "listening on ", "the OTLP receiver");
    (Kid(child), format!("http://127.0.0.1:{}", port.trim()))
}

/// The data points of metric `name` in the newest export that has it, with the export's
/// content type and the metric itself.
fn newest(receiver: &str, name: &str) -> Option<(String, Value)> {
    let all: Value = reqwest::blocking::get(format!("{receiver}/received"))
        .ok()?
        .json()
        .ok()?;
    all.as_array()?.iter().rev().find_map(|export| {
        let metric = export["request"]["resourceMetrics"]
            .as_array()?
            .iter()
            .flat_map(|r| r["scopeMetrics"].as_array().cloned().unwrap_or_default())
            .flat_map(|s| s["metrics"].as_array().cloned().unwrap_or_default())
            .find(|m| m["name"] == name)?;
        let kind = export["contentType"].as_str()?.to_string();
        Some((kind, metric))
    })
}

/// A data point's attribute `key`, as a string.
fn attr(point: &Value, key: &str) -> Option<String> {
    point["attributes"].as_array()?.iter().find_map(|a| {
        (a["key"] == key).then(|| {
            let v = &a["value"];
            v["stringValue"]
                .as_str()
                .map(String::from)
                .or_else(|| v["intValue"].as_str().map(String::from))
        })?
    })
}

#[test]
fn the_metrics_go_over_otlp_in_both_protocols_under_the_conventions_names() {
    let (_rx, base) = receiver();
    for protocol in ["http/protobuf", "http/json"] {
        let s = Server::start_with_env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", base.as_str()),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", protocol),
            ("OTEL_TRACES_EXPORTER", "none"),
            ("OTEL_METRIC_EXPORT_INTERVAL", "300"),
            ("OTEL_SERVICE_NAME", "notes-under-test"),
        ]);
        let session = RawSession::open(&s, &s.token, "2025-11-25");
        let tool = if protocol == "http/json" {
            "get_engine_settings"
        } else {
            "list_tables"
        };
        for i in 0..3 {
            let m = call(&session, i, tool, json!({}), json!({}));
            assert!(m[0]["result"].is_object(), "{m:?}");
        }
        let m = call(
            &session,
            9,
            "select_rows",
            json!({"table": "no.such.table"}),
            json!({}),
        );
        assert_eq!(m[0]["result"]["isError"], true, "{m:?}");
        // A request to the HTTP API.
        s.ok("list_tables", json!({}));

        // mcp.server.operation.duration: a histogram in seconds, in the Prometheus buckets, a
        // point per tool and error type; cumulative counts.
        let (kind, metric) = eventually_ok(&format!("{protocol}: the calls exported"), || {
            let (kind, metric) = newest(&base, "mcp.server.operation.duration")
                .ok_or("no export of mcp.server.operation.duration yet")?;
            let points = metric["histogram"]["dataPoints"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            let ours = points
                .iter()
                .any(|p| attr(p, "gen_ai.tool.name").as_deref() == Some(tool) && p["count"] == "3");
            ours.then_some((kind, metric.clone()))
                .ok_or(format!("{metric}"))
        });
        let want = if protocol == "http/json" {
            "application/json"
        } else {
            "application/x-protobuf"
        };
        assert!(kind.starts_with(want), "{protocol}: sent as {kind}");
        assert_eq!(metric["unit"], "s", "{metric}");
        let points = metric["histogram"]["dataPoints"].as_array().unwrap();
        let ours = points
            .iter()
            .find(|p| attr(p, "gen_ai.tool.name").as_deref() == Some(tool))
            .unwrap();
        assert_eq!(attr(ours, "mcp.method.name").as_deref(), Some("tools/call"));
        assert_eq!(
            attr(ours, "error.type"),
            None,
            "a success has no error.type"
        );
        assert_eq!(
            ours["explicitBounds"].as_array().map(Vec::len),
            Some(18),
            "{ours}"
        );
        assert_eq!(ours["explicitBounds"][0], 0.0005);
        let failed = points
            .iter()
            .find(|p| attr(p, "gen_ai.tool.name").as_deref() == Some("select_rows"))
            .expect("the failed call's point");
        assert_eq!(attr(failed, "error.type").as_deref(), Some("tool_error"));
        assert_eq!(failed["count"], "1");

        // A gauge read from the server's state; the HTTP door's histogram, by route pattern.
        let (_, sessions) = newest(&base, "datanotes.mcp.sessions.open").expect("sessions");
        assert_eq!(
            sessions["gauge"]["dataPoints"][0]["asInt"], "1",
            "{sessions}"
        );
        let (_, http) = newest(&base, "http.server.request.duration").expect("the HTTP API");
        let route = http["histogram"]["dataPoints"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| attr(p, "http.route").as_deref() == Some("/datanotes/{op}/"))
            .unwrap_or_else(|| panic!("no point for /datanotes/{{op}}/: {http}"));
        assert_eq!(attr(route, "http.request.method").as_deref(), Some("POST"));
        assert_eq!(
            attr(route, "http.response.status_code").as_deref(),
            Some("200")
        );
        // The resource: OTEL_SERVICE_NAME, and the engine's version.
        let all: Value = reqwest::blocking::get(format!("{base}/received"))
            .unwrap()
            .json()
            .unwrap();
        let resource =
            &all.as_array().unwrap().last().unwrap()["request"]["resourceMetrics"][0]["resource"];
        assert!(
            resource.to_string().contains("notes-under-test"),
            "{resource}"
        );
        drop(session);
    }
}
