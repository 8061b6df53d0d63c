//! Telemetry through real parts: a real Prometheus (Debian's package) scrapes
//! `GET /datanotes/metrics` with a read-only metrics token and its query API sees the calls; a real
//! OTLP receiver (Arize Phoenix, from PyPI) receives the spans of a call that goes from a client
//! through `/mcp` to a remote app written with the official MCP Python SDK, whose own spans,
//! started from the `traceparent` it was sent, are in the same trace.
//!
//! Both are installed under `target/tools/` by `scripts/fetch-telemetry-tools`, once per run.

mod faults;
mod otlp_metrics;
mod sampling;

use crate::kit::mcp::{RawSession, messages_of};
use crate::kit::*;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

/// Prometheus's binary and Phoenix's python.
fn tools() -> (PathBuf, PathBuf) {
    static T: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    T.get_or_init(|| {
        let mut t = installed("fetch-telemetry-tools", &[]);
        let python = t.pop().unwrap();
        (t.pop().unwrap(), python)
    })
    .clone()
}

/// A child process killed on drop.
struct Kid(Child);

impl Drop for Kid {
    fn drop(&mut self) {
        process::kill(&mut self.0);
    }
}

fn get(url: &str, token: Option<&str>) -> (u16, String) {
    let c = reqwest::blocking::Client::new();
    let mut r = c.get(url);
    if let Some(t) = token {
        r = r.bearer_auth(t);
    }
    match r.send() {
        Ok(r) => (r.status().as_u16(), r.text().unwrap_or_default()),
        Err(_) => (0, String::new()),
    }
}

/// A tools/call on a raw session, with `params._meta`; the answer's messages.
fn call(session: &RawSession, id: u64, tool: &str, args: Value, meta: Value) -> Vec<Value> {
    messages_of(
        session.post(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": tool, "arguments": args, "_meta": meta}})),
    )
}

#[test]
fn the_metrics_are_the_owners_and_a_real_prometheus_scrapes_them() {
    let (prometheus, _) = tools();
    let s = Server::start();
    let app = create_app(&s, json!({"name": "reader", "mcp_url": null}));
    let session = RawSession::open(&s, &s.token, "2025-11-25");
    for i in 0..3 {
        let m = call(&session, 10 + i, "list_tables", json!({}), json!({}));
        assert!(m[0]["result"].is_object(), "{m:?}");
    }
    // A call that fails (a table that is not there): its error type is counted.
    let m = call(
        &session,
        20,
        "select_rows",
        json!({"table": "no.such.table"}),
        json!({}),
    );
    assert_eq!(m[0]["result"]["isError"], true, "{m:?}");
    // A malformed traceparent is no error: a new trace.
    let m = call(
        &session,
        21,
        "list_tables",
        json!({}),
        json!({"traceparent": "00-not-a-trace"}),
    );
    assert!(m[0]["result"].is_object(), "{m:?}");
    // A call in its agent's trace, export off: its tool_call event names that trace (the
    // console's Live view links it), the others name none.
    let trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let m = call(
        &session,
        22,
        "get_engine_settings",
        json!({}),
        json!({"traceparent": format!("00-{trace}-00f067aa0ba902b7-01")}),
    );
    assert!(m[0]["result"].is_object(), "{m:?}");
    let events = eventually_ok("the tool_call events", || {
        let page = s.ok_route("changes", json!({"ops": ["tool_call"], "limit": 100}));
        let calls = page["changes"].as_array().cloned().unwrap_or_default();
        (calls.len() >= 6).then_some(calls).ok_or(format!("{page}"))
    });
    let traced: Vec<&Value> = events
        .iter()
        .filter(|e| e["call"]["traceId"].is_string())
        .collect();
    assert_eq!(traced.len(), 1, "{events:?}");
    assert_eq!(traced[0]["call"]["traceId"], trace);
    assert_eq!(traced[0]["call"]["tool"], "get_engine_settings");
    // A report of a tool call with a trace ID that is not one: refused, naming the field.
    let (status, bad) = s.post(
        "/datanotes/tool-calls/record/",
        Some(&s.token),
        &json!({"tool": "t", "args": {}, "ok": true, "value": "v", "servedBy": "x",
                "durationMs": 1.0, "summary": "s", "resultChars": 1, "resultTokens": 1,
                "traceId": "4BF92F35-not-hex"}),
    );
    assert_eq!(status, 400, "{bad}");
    assert_eq!(bad["error"]["column"], "traceId", "{bad}");

    let url = format!("{}/datanotes/metrics", s.url);
    assert_eq!(get(&url, None).0, 401);
    assert_eq!(get(&url, Some(&app)).0, 403);
    // A read-only metrics token, made with the CLI: it reads the metrics and nothing else.
    let made = Command::new(bin())
        .args(["metrics-tokens", "create", "prometheus", "--database"])
        .arg(&s.dir)
        .output()
        .unwrap();
    assert!(made.status.success(), "{made:?}");
    let scraper = String::from_utf8(made.stdout).unwrap().trim().to_string();
    assert!(scraper.starts_with("dn_metrics_"), "{scraper}");
    let (status, refused) = s.post(
        "/datanotes/select_rows/",
        Some(&scraper),
        &json!({"table": TASKS}),
    );
    assert_eq!(status, 403, "{refused}");
    assert_eq!(refused["error"]["rule"], "metrics", "{refused}");
    let mcp = reqwest::blocking::Client::new()
        .post(format!("{}/mcp", s.url))
        .bearer_auth(&scraper)
        .header("accept", "application/json, text/event-stream")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}))
        .send()
        .unwrap();
    assert_eq!(
        mcp.status().as_u16(),
        403,
        "a metrics token opens no MCP session"
    );
    // The last hour by tool, as the console's Tools view draws it: the metrics token reads it.
    let (status, stats) = s.post("/datanotes/tool-stats/", Some(&scraper), &json!({}));
    assert_eq!(status, 200, "{stats}");
    let of = |tool: &str| {
        stats["tools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["tool"] == tool)
            .cloned()
            .unwrap_or_else(|| panic!("no {tool} in {stats}"))
    };
    let lt = of("list_tables");
    assert_eq!(
        (
            lt["calls"].as_u64(),
            lt["errors"].as_u64(),
            lt["app"].as_str()
        ),
        (Some(4), Some(0), Some("engine")),
        "{lt}"
    );
    assert!(
        lt["p50Ms"].as_f64().unwrap() <= lt["p99Ms"].as_f64().unwrap(),
        "{lt}"
    );
    assert_eq!(lt["perMinute"].as_array().unwrap().len(), 60);
    assert_eq!(of("select_rows")["errors"], 1);
    assert_eq!(
        s.post("/datanotes/tool-stats/", Some(&app), &json!({})).0,
        403
    );
    let (status, text) = get(&url, Some(&scraper));
    assert_eq!(status, 200, "{text}");
    assert!(
        text.contains(r#"mcp_server_operation_duration_seconds_count{mcp_method_name="tools/call",gen_ai_tool_name="list_tables",datanotes_app="",error_type=""} 4"#),
        "{text}"
    );
    assert!(
        text.contains(r#"mcp_server_operation_duration_seconds_count{mcp_method_name="tools/call",gen_ai_tool_name="select_rows",datanotes_app="",error_type="tool_error"} 1"#),
        "{text}"
    );
    assert!(text.contains("datanotes_mcp_sessions_open 1"), "{text}");
    // The HTTP API's requests, by route pattern and status (the refusals above among them).
    assert!(
        text.contains(r#"http_server_request_duration_seconds_count{http_request_method="GET",http_route="/datanotes/metrics",http_response_status_code="403"} 1"#),
        "{text}"
    );
    assert!(text.contains("# TYPE datanotes_journal_commit_duration_seconds histogram"));

    // Prometheus, scraping every second with the metrics token.
    let dir = tempfile::tempdir().unwrap();
    let host = s.url.trim_start_matches("http://");
    let config = format!(
        "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: datanotes\n    \
         metrics_path: /datanotes/metrics\n    authorization:\n      credentials: {}\n    \
         static_configs:\n      - targets: ['{host}']\n",
        scraper
    );
    std::fs::write(dir.path().join("prometheus.yml"), config).unwrap();
    let port = registry::free_port();
    let _prom = Kid(Command::new(&prometheus)
        .arg(format!(
            "--config.file={}",
            dir.path().join("prometheus.yml").display()
        ))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.path().join("data").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("prometheus"));
    let query = format!(
        "http://127.0.0.1:{port}/api/v1/query?query=sum(mcp_server_operation_duration_seconds_count%7Bgen_ai_tool_name%3D%22list_tables%22%7D)"
    );
    let seen = poll(Duration::from_secs(60), Duration::from_millis(500), || {
        let (status, body) = get(&query, None);
        let v: Value = serde_json::from_str(&body).ok()?;
        (status == 200).then_some(())?;
        let n = v["data"]["result"][0]["value"][1].as_str()?.to_string();
        Some(n)
    });
    assert_eq!(seen.as_deref(), Some("4"), "Prometheus saw the 4 calls");
    // Its scrape of the target is up (the token was taken).
    let (_, up) = get(
        &format!("http://127.0.0.1:{port}/api/v1/query?query=up%7Bjob%3D%22datanotes%22%7D"),
        None,
    );
    let up: Value = serde_json::from_str(&up).unwrap();
    assert_eq!(up["data"]["result"][0]["value"][1], "1", "{up}");

    // Revoked, it stops working at once; the owner's token still reads the metrics.
    let revoked = Command::new(bin())
        .args(["metrics-tokens", "revoke", "prometheus", "--database"])
        .arg(&s.dir)
        .output()
        .unwrap();
    assert!(revoked.status.success(), "{revoked:?}");
    assert_eq!(get(&url, Some(&scraper)).0, 401);
    assert_eq!(get(&url, Some(&s.token)).0, 200);
}

/// Phoenix on free ports, its data in `dir`: (the process, its base URL).
fn phoenix(python: &Path, dir: &Path) -> (Kid, String) {
    let port = registry::free_port();
    let grpc = registry::free_port();
    let bin = python.parent().unwrap().join("phoenix");
    let kid = Kid(Command::new(bin)
        .arg("serve")
        .env("PHOENIX_WORKING_DIR", dir)
        .env("PHOENIX_HOST", "127.0.0.1")
        .env("PHOENIX_PORT", port.to_string())
        .env("PHOENIX_GRPC_PORT", grpc.to_string())
        .env("PHOENIX_TELEMETRY_ENABLED", "false")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("phoenix"));
    let url = format!("http://127.0.0.1:{port}");
    let up = poll(Duration::from_secs(120), Duration::from_millis(500), || {
        (get(&format!("{url}/v1/projects"), None).0 == 200).then_some(())
    });
    assert!(up.is_some(), "Phoenix did not start in 120 s");
    (kid, url)
}

/// The spans Phoenix holds of the trace `trace`.
fn spans_of(phoenix: &str, trace: &str) -> Vec<Value> {
    let (_, body) = get(
        &format!("{phoenix}/v1/projects/default/spans?limit=1000"),
        None,
    );
    let v: Value = serde_json::from_str(&body).unwrap_or_default();
    v["data"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|s| s["context"]["trace_id"] == trace)
        .collect()
}

#[test]
fn a_call_through_the_gateway_to_a_python_app_is_one_trace_in_phoenix() {
    let (_, python) = tools();
    let dir = tempfile::tempdir().unwrap();
    let (_phoenix, base) = phoenix(&python, dir.path());
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/e2e/telemetry/app.py");
    let mut child = Command::new(&python)
        .arg(script)
        .env("OTLP_ENDPOINT", &base)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("the Python app");
    let port = process::wait_line(&mut child, "listening on ", "the Python app");
    let _app = Kid(child);
    let s = Server::start_with_env(&[
        ("OTEL_EXPORTER_OTLP_ENDPOINT", base.as_str()),
        ("OTEL_BSP_SCHEDULE_DELAY", "100"),
    ]);
    create_app(
        &s,
        json!({"name": "pyapp", "mcp_url": format!("http://127.0.0.1:{}/mcp", port.trim())}),
    );
    eventually("pyapp's tool is listed", || {
        let a = s.ok_route("apps/get", json!({"name": "pyapp"}));
        a["app"]["tools"].as_array().is_some_and(|t| t.len() == 1)
    });
    // The agent's own trace: its span is the parent of the gateway's.
    let trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let parent = "00f067aa0ba902b7";
    let session = RawSession::open(&s, &s.token, "2025-11-25");
    let m = call(
        &session,
        7,
        "add",
        json!({"a": 2, "b": 3}),
        json!({"traceparent": format!("00-{trace}-{parent}-01")}),
    );
    let text = m[0]["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(text.contains("\"sum\": 5"), "{m:?}");

    // The gateway's SERVER span, its CLIENT span to the app, the app's SERVER span (the MCP
    // SDK's) and the app's own span inside it: one trace, each the parent of the next.
    let spans = poll(Duration::from_secs(60), Duration::from_millis(500), || {
        let spans = spans_of(&base, trace);
        (spans.len() >= 4).then_some(spans)
    })
    .unwrap_or_else(|| panic!("the trace's spans: {:?}", spans_of(&base, trace)));
    let find = |pred: &dyn Fn(&Value) -> bool| -> Value {
        spans
            .iter()
            .find(|s| pred(s))
            .cloned()
            .unwrap_or_else(|| panic!("no such span in {spans:#?}"))
    };
    let server = find(&|s| s["parent_id"] == parent);
    assert_eq!(server["name"], "tools/call add", "{server}");
    let a = &server["attributes"];
    assert_eq!(a["mcp.method.name"], "tools/call", "{server}");
    assert_eq!(a["gen_ai.tool.name"], "add", "{server}");
    assert_eq!(a["gen_ai.operation.name"], "execute_tool", "{server}");
    assert_eq!(a["jsonrpc.request.id"], "7", "{server}");
    assert_eq!(a["mcp.session.id"], session.id.as_str(), "{server}");
    assert_eq!(a["datanotes.app.name"], "pyapp", "{server}");
    assert_eq!(a["datanotes.app.kind"], "remote", "{server}");
    let id = server["context"]["span_id"].clone();
    let client = find(&|s| s["parent_id"] == id);
    assert_eq!(client["name"], "tools/call add", "{client}");
    let id = client["context"]["span_id"].clone();
    let app = find(&|s| s["parent_id"] == id);
    assert_eq!(app["name"], "tools/call add", "{app}");
    let id = app["context"]["span_id"].clone();
    let own = find(&|s| s["parent_id"] == id);
    assert_eq!(own["name"], "adding", "{own}");
    // Arguments and results are not recorded (the owner did not opt in).
    assert!(a["gen_ai.tool.call.arguments"].is_null(), "{server}");

    // A WASM app's call runs in the process: no CLIENT span; the instance made for it and
    // the guest's run are the request's children.
    let planning = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/plugins/planning.wasm");
    s.ok_route(
        "apps/create",
        json!({"name": "planning", "write": ["personal.tasks.*"], "wasm_path": planning}),
    );
    let trace = "5b8aa5a2d2c872e8321cf37308d69df2";
    let parent = "051581bf3cb55c13";
    let m = call(
        &session,
        8,
        "planning_list_tasks",
        json!({}),
        json!({"traceparent": format!("00-{trace}-{parent}-01")}),
    );
    assert!(m[0]["result"].is_object(), "{m:?}");
    let spans = poll(Duration::from_secs(60), Duration::from_millis(500), || {
        let spans = spans_of(&base, trace);
        (spans.len() >= 4).then_some(spans)
    })
    .unwrap_or_else(|| panic!("the WASM trace's spans: {:?}", spans_of(&base, trace)));
    let named = |n: &str| {
        spans
            .iter()
            .find(|s| s["name"] == n)
            .unwrap_or_else(|| panic!("no span {n} in {spans:#?}"))
            .clone()
    };
    let server = spans
        .iter()
        .find(|s| s["parent_id"] == parent)
        .expect("the server span");
    assert_eq!(
        server["attributes"]["datanotes.app.kind"], "wasm",
        "{server}"
    );
    let id = &server["context"]["span_id"];
    let mut children: Vec<&str> = spans
        .iter()
        .filter(|s| &s["parent_id"] == id)
        .filter_map(|s| s["name"].as_str())
        .collect();
    children.sort();
    assert_eq!(children, ["wasm instance", "wasm run"], "{spans:#?}");
    let (instance, run) = (named("wasm instance"), named("wasm run"));
    assert_eq!(&instance["parent_id"], id, "{instance}");
    assert_eq!(
        instance["attributes"]["datanotes.wasm.instance"], "new",
        "{instance}"
    );
    assert_eq!(&run["parent_id"], id, "{run}");
    assert_eq!(run["attributes"]["datanotes.wasm.instance"], "new", "{run}");
    assert!(
        run["attributes"]["datanotes.wasm.cpu_limit_ms"].as_i64() > Some(0),
        "{run}"
    );
    // The engine operation the guest called (through its host import), under its run.
    let op = named("select_rows");
    assert_eq!(op["parent_id"], run["context"]["span_id"], "{op}");

    // A typed component's call: its run is the request's child too.
    let greet = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/plugins/greet.wasm");
    s.ok_route("apps/create", json!({"name": "greet", "wasm_path": greet}));
    let trace = "7d1a0c5e3b2f4a6987c1d2e3f4a5b6c7";
    let m = call(
        &session,
        9,
        "greet_hello",
        json!({"who": {"name": "Ada", "age": 36}}),
        json!({"traceparent": format!("00-{trace}-{parent}-01")}),
    );
    assert!(m[0]["result"]["content"].is_array(), "{m:?}");
    let spans = poll(Duration::from_secs(60), Duration::from_millis(500), || {
        let spans = spans_of(&base, trace);
        spans
            .iter()
            .any(|s| s["name"] == "wasm run")
            .then_some(spans)
    })
    .unwrap_or_else(|| panic!("the typed call's spans: {:?}", spans_of(&base, trace)));
    let server = spans.iter().find(|s| s["parent_id"] == parent).unwrap();
    let run = spans.iter().find(|s| s["name"] == "wasm run").unwrap();
    assert_eq!(run["parent_id"], server["context"]["span_id"], "{spans:#?}");
    assert!(
        run["attributes"]["datanotes.wasm.cpu_limit_ms"].as_i64() > Some(0),
        "{run}"
    );

    // Its instance, warm after the call, in the gauges by app and state, and its memory.
    eventually_ok("the WASM app's warm instance in the metrics", || {
        let (_, text) = get(&format!("{}/datanotes/metrics", s.url), Some(&s.token));
        let ok = text
            .contains(r#"datanotes_wasm_instances{datanotes_app="planning",state="warm"} 1"#)
            && text
                .contains(r#"datanotes_wasm_instances{datanotes_app="planning",state="live"} 0"#)
            // Made to list its tools, and for the call (or one of the two).
            && text.lines().any(|l| {
                l.strip_prefix(r#"datanotes_wasm_instance_starts_total{datanotes_app="planning"} "#)
                    .is_some_and(|n| n == "1" || n == "2")
            })
            && text.lines().any(|l| {
                l.strip_prefix(r#"datanotes_wasm_memory_bytes{datanotes_app="planning"} "#)
                    .and_then(|n| n.parse::<u64>().ok())
                    .is_some_and(|n| n > 0)
            });
        let wasm: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("datanotes_wasm"))
            .collect();
        ok.then_some(()).ok_or(wasm.join("\n"))
    });

    // The HTTP API: a SERVER span per request under its `traceparent` header, the operation's
    // span inside it.
    let trace = "0af7651916cd43dd8448eb211c80319c";
    let parent = "b7ad6b7169203331";
    let (status, _) = s.post_raw(
        "/datanotes/list_tables/",
        Some(&s.token),
        &[
            ("traceparent", &format!("00-{trace}-{parent}-01")),
            ("content-type", "application/json"),
        ],
        b"{}".to_vec(),
    );
    assert_eq!(status, 200);
    let spans = poll(Duration::from_secs(60), Duration::from_millis(500), || {
        let spans = spans_of(&base, trace);
        (spans.len() >= 2).then_some(spans)
    })
    .unwrap_or_else(|| panic!("the HTTP trace's spans: {:?}", spans_of(&base, trace)));
    let http = spans
        .iter()
        .find(|s| s["parent_id"] == parent)
        .expect("the HTTP span");
    assert_eq!(http["name"], "POST /datanotes/{op}/", "{http}");
    assert_eq!(
        http["attributes"]["http.response.status_code"], 200,
        "{http}"
    );
    let op = spans
        .iter()
        .find(|s| s["parent_id"] == http["context"]["span_id"])
        .expect("the operation's span");
    assert_eq!(op["name"], "list_tables", "{op}");

    // A write: the operation's span holds the writer's commit of its batch.
    let trace = "2c4e3a1d9b8f7e6d5c4b3a2918273645";
    let parent = "a1b2c3d4e5f60718";
    let (status, body) = s.post_raw(
        "/datanotes/create_table/",
        Some(&s.token),
        &[
            ("traceparent", &format!("00-{trace}-{parent}-01")),
            ("content-type", "application/json"),
        ],
        serde_json::to_vec(
            &json!({"table": "work.crm.traced", "columns": {"name": {"type": "text"}}}),
        )
        .unwrap(),
    );
    assert_eq!(status, 200, "{body}");
    let spans = poll(Duration::from_secs(60), Duration::from_millis(500), || {
        let spans = spans_of(&base, trace);
        (spans.len() >= 3).then_some(spans)
    })
    .unwrap_or_else(|| panic!("the write's spans: {:?}", spans_of(&base, trace)));
    let by_name = |n: &str| {
        spans
            .iter()
            .find(|s| s["name"] == n)
            .unwrap_or_else(|| panic!("no span {n} in {spans:#?}"))
    };
    let (op, commit) = (by_name("create_table"), by_name("journal commit"));
    assert_eq!(commit["parent_id"], op["context"]["span_id"], "{commit}");
    assert!(
        commit["attributes"]["datanotes.batch.jobs"].as_i64() >= Some(1),
        "{commit}"
    );
}
