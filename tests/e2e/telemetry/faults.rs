//! A collector unreachable, slow or failing costs calls nothing and is said once; an app of
//! thousands of tools or huge names keeps the metrics' label sets bounded.

use super::{call, get};
use crate::kit::mcp::RawSession;
use crate::kit::*;
use serde_json::{Value, json};

/// A collector that takes connections and answers each request `answer` (None: never answers).
fn bad_collector(answer: Option<&'static str>) -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for c in l.incoming().flatten() {
            match answer {
                Some(a) => {
                    std::thread::spawn(move || {
                        use std::io::{Read, Write};
                        let mut c = c;
                        let mut buf = vec![0u8; 1 << 16];
                        while let Ok(n) = c.read(&mut buf) {
                            if n == 0 {
                                break;
                            }
                            let _ = c.write_all(a.as_bytes());
                        }
                    });
                }
                None => held.push(c),
            }
        }
    });
    url
}

fn metric(s: &Server, name: &str) -> f64 {
    let (_, text) = get(&format!("{}/datanotes/metrics", s.url), Some(&s.token));
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or(0.0)
}

#[test]
fn a_collector_unreachable_slow_or_failing_costs_calls_nothing_and_is_said_once() {
    let closed = format!("http://127.0.0.1:{}", registry::free_port());
    let failing = bad_collector(Some(
        "HTTP/1.1 500 Internal Server Error\r\ncontent-length: 0\r\n\r\n",
    ));
    let slow = bad_collector(None);
    for (what, url) in [("unreachable", closed), ("500", failing), ("slow", slow)] {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("log");
        let s = Server::start_logging(
            &log,
            &[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", url.as_str()),
                ("OTEL_BSP_SCHEDULE_DELAY", "50"),
                ("OTEL_BSP_MAX_QUEUE_SIZE", "16"),
                ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "4"),
                ("OTEL_EXPORTER_OTLP_TIMEOUT", "10000"),
                ("OTEL_METRIC_EXPORT_INTERVAL", "100"),
            ],
        );
        let session = RawSession::open(&s, &s.token, "2025-11-25");
        for i in 0..200 {
            let m = call(&session, i, "list_tables", json!({}), json!({}));
            assert!(m[0]["result"].is_object(), "{what}: {m:?}");
        }
        if what == "slow" {
            // The export thread waits on the collector: the queue fills, spans are dropped.
            assert!(
                metric(&s, "datanotes_trace_spans_dropped_total") > 0.0,
                "{what}"
            );
        } else {
            eventually(&format!("{what}: failed exports are counted"), || {
                metric(&s, "datanotes_trace_export_failures_total") >= 2.0
                    && metric(&s, "datanotes_metrics_export_failures_total") >= 2.0
            });
        }
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let said = |needle: &str| text.matches(needle).count();
        assert!(
            said("trace export failed") <= 1
                && said("trace export queue is full") <= 1
                && said("metrics export failed") <= 1,
            "{what}: said more than once:\n{text}"
        );
        if what != "slow" {
            assert_eq!(said("trace export failed"), 1, "{what}:\n{text}");
            assert_eq!(said("metrics export failed"), 1, "{what}:\n{text}");
        }
    }
}

#[test]
fn an_app_of_thousands_of_tools_or_huge_names_keeps_the_label_sets_bounded() {
    use crate::kit::fake_app::{tool, tool_app};
    let s = Server::start();
    let rt = runtime();
    let mut tools: Vec<Value> = (0..1000)
        .map(|i| tool(&format!("t{i:04}"), "A tool", &[]))
        .collect();
    let huge = "h".repeat(100_000);
    tools.push(tool(&huge, "A tool with a 100 KB name", &[]));
    let url = tool_app(&rt, std::sync::Arc::new(std::sync::Mutex::new(tools)));
    create_app(&s, json!({"name": "many", "mcp_url": url}));
    eventually("many's tools are listed", || {
        let a = s.ok_route("apps/get", json!({"name": "many"}));
        a["app"]["tools"]
            .as_array()
            .is_some_and(|t| t.len() >= 1000)
    });
    let session = RawSession::open(&s, &s.token, "2025-11-25");
    let names: Vec<String> = (0..300).map(|i| format!("t{i:04}")).collect();
    for (i, n) in names.iter().chain(std::iter::once(&huge)).enumerate() {
        let m = call(&session, i as u64, n, json!({}), json!({}));
        assert!(
            m[0].get("result").is_some() || m[0].get("error").is_some(),
            "{n:.40}: {m:?}"
        );
    }
    let (_, text) = get(&format!("{}/datanotes/metrics", s.url), Some(&s.token));
    let series: Vec<&str> = text
        .lines()
        .filter(|l| {
            l.starts_with(
                "mcp_server_operation_duration_seconds_count{mcp_method_name=\"tools/call\"",
            )
        })
        .collect();
    // 100 names kept for the app, the other 200 as one `other`; the 100 KB name is no tool of
    // the namespace (not a valid name: skipped), so its call counts without a name.
    assert_eq!(series.len(), 102, "{series:#?}");
    let other = series
        .iter()
        .find(|l| l.contains("gen_ai_tool_name=\"other\""))
        .expect("the other series");
    assert!(other.ends_with(" 200"), "{other}");
    assert!(
        series
            .iter()
            .any(|l| l
                .contains("gen_ai_tool_name=\"\",datanotes_app=\"\",error_type=\"tool_error\"} 1")),
        "{series:#?}"
    );
    assert!(!text.contains("hhhhhhhh"), "a huge name became a label");
    assert!(
        text.len() < 1 << 20,
        "the metrics' text is {} bytes",
        text.len()
    );
}
