//! One MCP for agents, end to end: the real server binary, real remote apps (the
//! `examples/remote_app` binary, which `cargo test` builds) and real MCP over 127.0.0.1, spoken
//! with rmcp's client.

mod cancel;
mod everything;
mod exact;
mod headers;
mod hostile_content;
mod list_changed;
mod relay;
mod resources;
mod resubscribe;
mod rounds;
mod search_tools;
mod shown;
mod skills;
mod tasks;
use crate::kit::*;
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::RunningService;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value, json};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

// ---------------------------------------------------------------------------------------------
// Helpers

fn tasks_table(s: &Server) {
    s.ok(
        "create_table",
        json!({
            "table": "personal.tasks.items",
            "description": "Things to do",
            "columns": {
                "title": {"type": "text", "required": true},
                "status": {"type": "enum", "values": ["todo", "doing", "done"], "default": "todo"},
                "estimate": {"type": "integer", "min": 0, "max": 100},
                "due": {"type": "date"},
                "tags": {"type": "list"}
            }
        }),
    );
}

fn owner_post(s: &Server, path: &str, body: Value) -> Value {
    let (st, v) = s.post(path, Some(&s.token), &body);
    assert_eq!(st, 200, "{path} {body}: {v}");
    v
}

fn entry(s: &Server, name: &str) -> Value {
    owner_post(s, "/datanotes/apps/get/", json!({"name": name}))["app"].clone()
}

/// Waits until the engine has listed the app's tools (after the app updated its entry).
fn wait_listed(s: &Server, name: &str) -> Value {
    let mut last = Value::Null;
    eventually(&format!("app {name} listed"), || {
        last = entry(s, name);
        last["reachable"] == true && last["tools"].as_array().is_some_and(|t| !t.is_empty())
    });
    last
}

/// `POST /datanotes/apps/call/` with a token and an optional actor.
fn http_call(s: &Server, token: &str, actor: Option<&str>, tool: &str, args: Value) -> Value {
    let headers: Vec<(&str, &str)> = actor
        .map(|a| vec![("x-datanotes-actor", a)])
        .unwrap_or_default();
    let body = json!({"tool": tool, "arguments": args});
    let (st, v) = s.post_raw(
        "/datanotes/apps/call/",
        Some(token),
        &headers,
        serde_json::to_vec(&body).unwrap(),
    );
    assert_eq!(st, 200, "apps/call {body}: {v}");
    v
}

fn operation_names(s: &Server) -> Vec<String> {
    let v: Value = s
        .http
        .get(format!("{}/datanotes/operations/", s.url))
        .bearer_auth(&s.token)
        .send()
        .unwrap()
        .json()
        .unwrap();
    v["operations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["name"].as_str().unwrap().to_string())
        .collect()
}

fn seq(s: &Server) -> i64 {
    s.get("/datanotes/health").1["seq"].as_i64().unwrap()
}

fn changes(s: &Server, since: i64, ops: Option<&[&str]>) -> Vec<Value> {
    let mut body = json!({"since": since, "limit": 1000});
    if let Some(o) = ops {
        body["ops"] = json!(o);
    }
    owner_post(s, "/datanotes/changes/", body)["changes"]
        .as_array()
        .unwrap()
        .clone()
}

// ---------------------------------------------------------------------------------------------
// Tests

#[test]
fn tools_are_listed_in_order_and_collisions_are_skipped_then_freed() {
    let s = Server::start();
    let ta = create_app(&s, json!({"name": "alpha"}));
    let tb = create_app(&s, json!({"name": "beta"}));
    // Started in the other order: the registration order decides, not who came first.
    let b = App::start(
        &s,
        "beta",
        &tb,
        &["--tool", "shared", "--tool", "beta_only"],
    );
    let a = App::start(
        &s,
        "alpha",
        &ta,
        &["--tool", "list_tables", "--tool", "shared"],
    );
    wait_listed(&s, "alpha");
    wait_listed(&s, "beta");

    // Each app's own listing, asked directly.
    let own_a = Agent::connect(&a.url, None, None).names();
    let own_b = Agent::connect(&b.url, None, None).names();
    assert!(own_a.contains(&"list_tables".to_string()) && own_a.contains(&"shared".to_string()));
    assert!(own_b.contains(&"shared".to_string()));

    // Engine operations first (catalog order), then alpha's tools, then beta's, each in its own
    // order, without the names already taken.
    let ops = operation_names(&s);
    let mut want = ops.clone();
    want.extend(own_a.iter().filter(|n| *n != "list_tables").cloned());
    want.extend(own_b.iter().filter(|n| *n != "shared").cloned());
    let agent = Agent::engine(&s, &s.token, None);
    assert_eq!(agent.names(), want);

    // The same namespace over HTTP, with who serves each tool.
    let v = owner_post(&s, "/datanotes/apps/tools/", json!({}));
    let tools = v["tools"].as_array().unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, want);
    for t in tools {
        let n = t["name"].as_str().unwrap();
        let by = if ops.iter().any(|o| o == n) {
            "engine"
        } else if n.starts_with("alpha_") || n == "shared" {
            "alpha"
        } else {
            "beta"
        };
        assert_eq!(t["app"], by, "{n}");
    }

    assert_eq!(
        entry(&s, "alpha")["skippedTools"],
        json!([{"name": "list_tables", "takenBy": "engine"}])
    );
    assert_eq!(
        entry(&s, "beta")["skippedTools"],
        json!([{"name": "shared", "takenBy": "alpha"}])
    );
    // The operation keeps its name; the earlier app keeps `shared`.
    let r = agent.call("list_tables", json!({}));
    assert!(!is_error(&r));
    assert_eq!(r.structured_content.as_ref().unwrap()["tables"], json!([]));
    assert_eq!(
        text(&agent.call("shared", json!({}))),
        "shared served by alpha"
    );

    // Deleting alpha frees `shared` for beta.
    owner_post(&s, "/datanotes/apps/delete/", json!({"name": "alpha"}));
    let r = owner_post(&s, "/datanotes/apps/refresh/", json!({"name": "beta"}));
    assert_eq!(r["skipped"], json!([]), "{r}");
    assert_eq!(r["app"]["skippedTools"], json!([]), "{r}");
    assert_eq!(r["app"]["tools"], json!(own_b), "{r}");
    let mut want = ops.clone();
    want.extend(own_b.iter().cloned());
    assert_eq!(agent.names(), want);
    assert_eq!(
        text(&agent.call("shared", json!({}))),
        "shared served by beta"
    );
    let v = http_call(&s, &s.token, None, "shared", json!({}));
    assert_eq!(v["ok"], true);
    assert_eq!(v["servedBy"], "beta");
}

/// Sends an MCP `initialize` by hand; answers the response's content type.
fn initialize_content_type(url: &str) -> String {
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"probe","version":"1"}}}"#;
    let resp = reqwest::blocking::Client::new()
        .post(url)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .body(body)
        .send()
        .unwrap();
    assert_eq!(resp.status(), 200);
    resp.headers()["content-type"].to_str().unwrap().to_string()
}

#[test]
fn an_app_answering_json_and_one_answering_sse_both_serve() {
    let s = Server::start();
    tasks_table(&s);
    let tj = create_app(
        &s,
        json!({"name": "jsonapp", "write": ["personal.tasks.items"]}),
    );
    let te = create_app(&s, json!({"name": "sseapp"}));
    let j = App::start(&s, "jsonapp", &tj, &["--json", "--prefix", "j"]);
    let e = App::start(&s, "sseapp", &te, &["--bare", "--tool", "sse_ping"]);
    assert!(initialize_content_type(&j.url).starts_with("application/json"));
    assert!(initialize_content_type(&e.url).starts_with("text/event-stream"));
    wait_listed(&s, "jsonapp");
    wait_listed(&s, "sseapp");

    let agent = Agent::engine(&s, &s.token, Some("json-test / m"));
    assert_eq!(
        text(&agent.call("sse_ping", json!({}))),
        "sse_ping served by sseapp"
    );
    let r = agent.call("j_add_task", json!({"title": "Over JSON"}));
    assert!(!is_error(&r), "{r:?}");
    assert_eq!(r.structured_content.as_ref().unwrap()["id"], "over-json");
    let r = agent.call("j_echo", json!({"text": "hello"}));
    let sc = r.structured_content.unwrap();
    assert_eq!(sc["actor"], "json-test / m");
    assert_eq!(sc["text"], "hello");
    // A stateless app answering JSON: its calls too are posted by the engine itself.
    assert!(
        sc["requestId"]
            .as_str()
            .is_some_and(|i| i.starts_with("datanotes-")),
        "{sc}"
    );
    assert_eq!(
        s.ok(
            "get_row",
            json!({"table": "personal.tasks.items", "id": "over-json"})
        )["values"]["title"],
        "Over JSON"
    );

    for (tool, app) in [("sse_ping", "sseapp"), ("j_list_tasks", "jsonapp")] {
        let v = http_call(&s, &s.token, None, tool, json!({}));
        assert_eq!(v["ok"], true, "{v}");
        assert_eq!(v["servedBy"], app);
    }
}

#[test]
fn a_killed_app_stays_listed_answers_not_reachable_and_recovers_on_restart() {
    let s = Server::start_with_env(&[("DATANOTES_APP_PROBE_MS", "100")]);
    let t = create_app(&s, json!({"name": "planning"}));
    let mut app = App::start(&s, "planning", &t, &[]);
    wait_listed(&s, "planning");
    let agent_a = Agent::engine(&s, &s.token, Some("harness-a / m"));
    let agent_b = Agent::engine(&s, &s.token, Some("harness-b / m"));
    // Opens the engine's session to the app for actor a.
    assert!(!is_error(&agent_a.call("planning_echo", json!({}))));
    let before = agent_a.names();

    app.kill();
    // Still listed: listing serves the last known tools.
    assert_eq!(agent_b.names(), before);
    let v = http_call(&s, &s.token, None, "planning_echo", json!({}));
    assert_eq!(v["ok"], false, "{v}");
    assert_eq!(v["servedBy"], "planning");
    let msg = v["value"].as_str().unwrap();
    assert!(msg.starts_with("app planning is not reachable: "), "{msg}");
    let r = agent_b.call("planning_echo", json!({}));
    assert!(is_error(&r), "{r:?}");
    assert!(
        text(&r).starts_with("app planning is not reachable: "),
        "{r:?}"
    );
    let e = entry(&s, "planning");
    assert_eq!(e["reachable"], false, "{e}");
    assert!(
        e["lastError"].as_str().is_some_and(|m| !m.is_empty()),
        "{e}"
    );
    let app_tools: Vec<&String> = before
        .iter()
        .filter(|n| n.starts_with("planning_"))
        .collect();
    assert_eq!(e["tools"], json!(app_tools), "{e}");

    // Back on the same port: the background probe finds it, without restarting the engine.
    app.restart();
    eventually("app reachable again", || {
        entry(&s, "planning")["reachable"] == true
    });
    let r = agent_b.call("planning_echo", json!({}));
    assert!(!is_error(&r), "{r:?}");
    assert_eq!(r.structured_content.unwrap()["actor"], "harness-b / m");
    // Actor a's session was opened before the kill, and is used again now.
    let r = agent_a.call("planning_echo", json!({}));
    assert!(!is_error(&r), "{r:?}");
    assert_eq!(r.structured_content.unwrap()["actor"], "harness-a / m");
    let v = http_call(&s, &s.token, None, "planning_echo", json!({}));
    assert_eq!(v["ok"], true, "{v}");
    assert_eq!(entry(&s, "planning")["reachable"], true);
}

#[test]
fn each_app_timeout_names_the_limit_that_ran_out() {
    let s = Server::start_with_env(&[
        ("DATANOTES_APP_OPEN_TIMEOUT_MS", "1000"),
        ("DATANOTES_APP_LIST_TIMEOUT_MS", "1000"),
        ("DATANOTES_APP_CALL_TIMEOUT_MS", "1000"),
        ("DATANOTES_APP_PROBE_MS", "60000"),
    ]);
    let to = create_app(&s, json!({"name": "slowopen"}));
    let tl = create_app(&s, json!({"name": "slowlist"}));
    let tc = create_app(&s, json!({"name": "slowcall"}));
    let slow = "4000";
    let _o = App::start(
        &s,
        "slowopen",
        &to,
        &["--bare", "--tool", "o_tool", "--slow-open-ms", slow],
    );
    let _l = App::start(
        &s,
        "slowlist",
        &tl,
        &["--bare", "--tool", "l_tool", "--slow-list-ms", slow],
    );
    let _c = App::start(
        &s,
        "slowcall",
        &tc,
        &["--bare", "--tool", "slow_tool", "--slow-call-ms", slow],
    );

    let r = owner_post(&s, "/datanotes/apps/refresh/", json!({"name": "slowopen"}));
    assert_eq!(r["app"]["reachable"], false, "{r}");
    assert_eq!(
        r["app"]["lastError"], "timed out opening a session (1 s)",
        "{r}"
    );
    assert_eq!(r["app"]["tools"], json!([]));

    let r = owner_post(&s, "/datanotes/apps/refresh/", json!({"name": "slowlist"}));
    assert_eq!(r["app"]["reachable"], false, "{r}");
    assert_eq!(
        r["app"]["lastError"], "timed out listing tools (1 s)",
        "{r}"
    );
    assert_eq!(r["app"]["tools"], json!([]));

    wait_listed(&s, "slowcall");
    let want = "app slowcall is not reachable: timed out calling slow_tool (1 s)";
    let v = http_call(&s, &s.token, None, "slow_tool", json!({}));
    assert_eq!(v["ok"], false, "{v}");
    assert_eq!(v["value"], want);
    let agent = Agent::engine(&s, &s.token, None);
    let r = agent.call("slow_tool", json!({}));
    assert!(is_error(&r));
    assert_eq!(text(&r), want);
    let e = entry(&s, "slowcall");
    assert_eq!(e["lastError"], "timed out calling slow_tool (1 s)", "{e}");
}

/// A restarted app no longer knows the engine's session: the next call is made on a new one,
/// not answered with the app's 404.
#[test]
fn a_call_after_the_app_forgot_the_session_opens_a_new_one() {
    let s = Server::start();
    let t = create_app(&s, json!({"name": "planning"}));
    let mut app = App::start(&s, "planning", &t, &[]);
    wait_listed(&s, "planning");
    let agent = Agent::engine(&s, &s.token, None);
    let echo = |text: &str| {
        let r = agent.call("planning_echo", json!({ "text": text }));
        assert!(!is_error(&r), "{r:?}");
        r.structured_content.unwrap()
    };
    echo("one");
    let before = echo("two");
    assert!(
        before["requestId"]
            .as_str()
            .is_some_and(|i| i.starts_with("datanotes-")),
        "{before}"
    );
    app.restart();
    let after = echo("three");
    assert_eq!(after["text"], "three");
    assert_ne!(after["session"], before["session"], "{after}");
    // And the new session's calls are posted directly again.
    let next = echo("four");
    assert!(
        next["requestId"]
            .as_str()
            .is_some_and(|i| i.starts_with("datanotes-")),
        "{next}"
    );
}

/// The engine keeps its connection to a remote app between calls; one the app closed (it
/// restarted on the same port) fails no call and runs none twice; an app whose answers come
/// slowly (maybe a delayed-ACK stall on a kept connection) gets a new connection per call.
#[test]
fn calls_keep_their_connection_to_an_app_and_survive_its_restart() {
    // A slow answer is one of 250 ms here (30 ms by default): a loaded machine's debug build
    // does not turn the kept connections off by chance.
    let s = Server::start_with_env(&[("DATANOTES_APP_SLOW_ANSWER_MS", "250")]);
    let t = create_app(&s, json!({"name": "planning"}));
    let mut app = App::start(&s, "planning", &t, &[]);
    wait_listed(&s, "planning");
    let echo = |tool: &str, text: &str| {
        let v = http_call(&s, &s.token, None, tool, json!({ "text": text }));
        assert_eq!(v["ok"], true, "{v}");
        let r = v["value"]["structuredContent"].clone();
        assert_eq!(r["text"], text, "{v}");
        r
    };
    let peers = |tool: &str, n: usize| {
        let mut seen: Vec<String> = vec![];
        for i in 0..n {
            let p = echo(tool, &format!("call {i}"))["peer"]
                .as_str()
                .unwrap()
                .to_string();
            if !seen.contains(&p) {
                seen.push(p);
            }
        }
        seen.len()
    };
    echo("planning_echo", "warm");
    // A new connection per call would show 8 peers.
    let n = peers("planning_echo", 8);
    assert!(n <= 3, "8 calls came on {n} connections");
    let before = echo("planning_echo", "before");

    // Killed (its connections closed) and back on the same port: the next call answers, and
    // ran once.
    app.restart();
    let after = echo("planning_echo", "after");
    assert_eq!(after["calls"], 1, "{after}");
    assert_ne!(after["session"], before["session"], "{after}");
    let next = echo("planning_echo", "next");
    assert_eq!(next["calls"], 2, "{next}");

    // Answers that take 300 ms: a new connection for each call.
    let t = create_app(&s, json!({"name": "slow"}));
    let _slow = App::start(&s, "slow", &t, &["--slow-call-ms", "300"]);
    wait_listed(&s, "slow");
    echo("slow_echo", "warm");
    echo("slow_echo", "warm again");
    assert_eq!(peers("slow_echo", 3), 3);
}

#[test]
fn the_bearer_token_and_the_actor_reach_the_app() {
    let s = Server::start();
    let t = create_app(&s, json!({"name": "planning"}));
    let app = App::start(&s, "planning", &t, &["--mcp-token", "app-secret-1"]);
    let e = wait_listed(&s, "planning");
    assert_eq!(e["hasMcpToken"], true);
    // The registry listing shows the same entry as apps/get.
    assert_eq!(
        owner_post(&s, "/datanotes/apps/", json!({}))["apps"],
        json!([e])
    );
    assert!(!e.to_string().contains("app-secret-1"), "{e}");

    // The app refuses MCP requests without its bearer.
    let resp = reqwest::blocking::Client::new()
        .post(&app.url)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .body("{}")
        .send()
        .unwrap();
    assert_eq!(resp.status(), 401);

    let agent = Agent::engine(&s, &s.token, Some("test-harness / test-model"));
    let r = agent.call("planning_echo", json!({"text": "hi"}));
    let sc = r.structured_content.unwrap();
    assert_eq!(sc["bearerMatched"], true, "{sc}");
    assert_eq!(sc["actor"], "test-harness / test-model", "{sc}");
    assert_eq!(sc["text"], "hi");
    // Once the call session is open, calls are posted by the engine itself (its own request
    // ids), not through rmcp's session tasks; the actor still travels with each.
    let r = agent.call("planning_echo", json!({"text": "again"}));
    let sc = r.structured_content.unwrap();
    assert!(
        sc["requestId"]
            .as_str()
            .is_some_and(|i| i.starts_with("datanotes-")),
        "{sc}"
    );
    assert_eq!(sc["actor"], "test-harness / test-model", "{sc}");
    assert_eq!(sc["text"], "again");

    let v = http_call(
        &s,
        &s.token,
        Some("curl-harness / other-model"),
        "planning_echo",
        json!({}),
    );
    assert_eq!(v["ok"], true, "{v}");
    assert_eq!(v["value"]["structuredContent"]["bearerMatched"], true);
    assert_eq!(
        v["value"]["structuredContent"]["actor"],
        "curl-harness / other-model"
    );

    // A wrong mcp_token (set by the owner) is refused by the app: the engine says so.
    owner_post(
        &s,
        "/datanotes/apps/update/",
        json!({"name": "planning", "mcp_token": "wrong"}),
    );
    let v = http_call(&s, &s.token, None, "planning_echo", json!({}));
    assert_eq!(v["ok"], false, "{v}");
    let msg = v["value"].as_str().unwrap();
    assert!(msg.starts_with("app planning is not reachable: "), "{msg}");
    assert!(
        !msg.contains("app-secret-1") && !msg.contains("wrong"),
        "{msg}"
    );
    assert!(
        msg.contains("HTTP 401") && msg.contains("mcp_token"),
        "{msg}"
    );
    assert_plain(msg);
    let e = entry(&s, "planning");
    assert_plain(e["lastError"].as_str().unwrap());
    assert!(e["lastErrorAt"].is_string(), "{e}");

    // A wrong path: HTTP 404, in plain words.
    let wrong = app.url.replace("/mcp", "/nope");
    owner_post(
        &s,
        "/datanotes/apps/update/",
        json!({"name": "planning", "mcp_url": wrong, "mcp_token": "app-secret-1"}),
    );
    let e = entry(&s, "planning");
    let msg = e["lastError"].as_str().unwrap_or_default().to_string();
    assert!(msg.contains("HTTP 404") && msg.contains("/mcp"), "{e}");
    assert_plain(&msg);

    // Back on the right path: the error is cleared and kept as previousError.
    owner_post(
        &s,
        "/datanotes/apps/update/",
        json!({"name": "planning", "mcp_url": app.url}),
    );
    let e = wait_listed(&s, "planning");
    assert_eq!(e["lastError"], Value::Null, "{e}");
}

/// What an agent or an owner reads names no Rust type.
fn assert_plain(msg: &str) {
    for bad in ["::", "<", "Transport", "Client error", "reqwest", "Os {"] {
        assert!(!msg.contains(bad), "{bad:?} in {msg:?}");
    }
}

/// An MCP client that counts `notifications/tools/list_changed`.
#[derive(Clone, Default)]
struct Counting(Arc<AtomicUsize>);

impl rmcp::ClientHandler for Counting {
    async fn on_tool_list_changed(&self, _c: rmcp::service::NotificationContext<RoleClient>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

impl Counting {
    fn n(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

/// Many small MCP servers on one address (on `rt`): `BASE/<n>/mcp` lists one tool,
/// `burst_<n>`, answered as JSON. Answers BASE.
fn many_apps(rt: &tokio::runtime::Runtime) -> String {
    use axum::extract::Path;
    let post = |Path(n): Path<u32>, body: axum::body::Bytes| async move {
        let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let result = match v["method"].as_str() {
            Some("initialize") => json!({"protocolVersion": "2025-06-18",
                "capabilities": {"tools": {}}, "serverInfo": {"name": "burst", "version": "1"}}),
            Some("tools/list") => json!({"tools": [{"name": format!("burst_{n}"),
                "inputSchema": {"type": "object", "properties": {}}}]}),
            _ => return (axum::http::StatusCode::ACCEPTED, String::new()),
        };
        let answer = json!({"jsonrpc": "2.0", "id": v["id"], "result": result});
        (axum::http::StatusCode::OK, answer.to_string())
    };
    let router = axum::Router::new().route(
        "/{n}/mcp",
        axum::routing::post(move |p, b| async move {
            let (st, body) = post(p, b).await;
            let json = [("content-type", "application/json")];
            axum::response::IntoResponse::into_response((st, json, body))
        })
        .get(|| async { axum::http::StatusCode::METHOD_NOT_ALLOWED }),
    );
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let addr = listener.local_addr().unwrap();
    rt.spawn(async move { axum::serve(listener, router).await });
    format!("http://{addr}")
}

#[test]
fn open_sessions_get_list_changed_coalesced_also_through_stdio() {
    let s = Server::start();
    let rt = runtime();
    let http = Counting::default();
    let cfg = transport_config(&format!("{}/mcp", s.url), Some(&s.token), None);
    let agent = rt
        .block_on(async {
            http.clone()
                .serve(StreamableHttpClientTransport::from_config(cfg))
                .await
        })
        .unwrap();
    let caps = agent.peer_info().unwrap().capabilities.clone();
    assert_eq!(caps.tools.unwrap().list_changed, Some(true));
    let stdio = Counting::default();
    let (desk, mut child) = rt.block_on(async {
        let mut child = tokio::process::Command::new(bin())
            .args(["mcp", "--url", &s.url, "--token", &s.token])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("start datanotes mcp");
        let (i, o) = (child.stdin.take().unwrap(), child.stdout.take().unwrap());
        (stdio.clone().serve((o, i)).await.unwrap(), child)
    });
    let caps = desk.peer_info().unwrap().capabilities.clone();
    assert_eq!(caps.tools.unwrap().list_changed, Some(true));

    // An app installed after the sessions opened.
    let t = create_app(&s, json!({"name": "planning"}));
    let _app = App::start(&s, "planning", &t, &[]);
    wait_listed(&s, "planning");
    eventually("list_changed over HTTP and stdio", || {
        http.n() >= 1 && stdio.n() >= 1
    });
    for c in [&agent.peer().clone(), &desk.peer().clone()] {
        let tools = rt.block_on(c.list_all_tools()).unwrap();
        assert!(tools.iter().any(|t| t.name == "planning_echo"));
    }

    // A burst of 50 installs (50 app entries created at once, each with a tool of its own)
    // gives a few notifications, not 50 (the first at once, then one a second while the burst
    // lasts, and one when it is over); then the session lists every
    // one of the 50 tools: the final namespace.
    let base = many_apps(&rt);
    let quiet = std::time::Duration::from_millis(500);
    let before = settled("list_changed", quiet, || http.n());
    let t0 = std::time::Instant::now();
    std::thread::scope(|sc| {
        for t in 0..5 {
            let (s, base) = (&s, &base);
            sc.spawn(move || {
                for i in t * 10..t * 10 + 10 {
                    let url = format!("{base}/{i}/mcp");
                    create_app(s, json!({"name": format!("burst-{i}"), "mcp_url": url}));
                }
            });
        }
    });
    let took = t0.elapsed();
    let got = settled("list_changed", quiet, || http.n()) - before;
    // The first, one a second, the last.
    let most = 3 + took.as_secs() as usize;
    assert!(
        got >= 1 && got <= most,
        "{got} notifications for 50 installs over {took:?}"
    );
    let namespace: Vec<String> = owner_post(&s, "/datanotes/apps/tools/", json!({}))["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect();
    let listed: Vec<String> = rt
        .block_on(agent.peer().list_all_tools())
        .unwrap()
        .iter()
        .map(|t| t.name.to_string())
        .collect();
    for i in 0..50 {
        assert!(listed.contains(&format!("burst_{i}")), "{listed:?}");
    }
    assert_eq!(listed, namespace);

    rt.block_on(async {
        let _ = desk.cancel().await;
        let status = tokio::time::timeout(std::time::Duration::from_secs(10), child.wait())
            .await
            .unwrap()
            .unwrap();
        assert!(status.success());
        let mut err = String::new();
        use tokio::io::AsyncReadExt;
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut err)
            .await
            .unwrap();
        assert_eq!(err, "", "datanotes mcp is silent on a clean exit");
        let _ = agent.cancel().await;
    });
}

/// A raw session on the engine's `/mcp` (reqwest, no MCP client) of protocol 2025-06-18:
/// `initialize` and `notifications/initialized` sent.
pub(crate) struct RawSession<'a> {
    s: &'a Server,
    http: reqwest::blocking::Client,
    pub(crate) sid: String,
    version: &'static str,
    /// The server's answer to `initialize`.
    pub(crate) initialized: Value,
}

impl RawSession<'_> {
    pub(crate) fn open(s: &Server) -> RawSession<'_> {
        RawSession::open_with(s, json!({}), "2025-06-18")
    }

    /// A session of a client that declares `capabilities`, at protocol `version`.
    pub(crate) fn open_with<'a>(
        s: &'a Server,
        capabilities: Value,
        version: &'static str,
    ) -> RawSession<'a> {
        let http = reqwest::blocking::Client::new();
        let r = RawSession::request(
            s,
            &http,
            None,
            version,
            json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": version, "capabilities": capabilities,
                "clientInfo": {"name": "raw", "version": "9.9"}}}),
        );
        let sid = r.headers()["mcp-session-id"].to_str().unwrap().to_string();
        let initialized = answer_of(r);
        let raw = RawSession {
            s,
            http,
            sid,
            version,
            initialized,
        };
        raw.post(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        raw
    }

    fn request(
        s: &Server,
        http: &reqwest::blocking::Client,
        sid: Option<&str>,
        version: &str,
        body: Value,
    ) -> reqwest::blocking::Response {
        let mut r = http
            .post(format!("{}/mcp", s.url))
            .bearer_auth(&s.token)
            .header("accept", "application/json, text/event-stream")
            .json(&body);
        if let Some(id) = sid {
            r = r
                .header("mcp-session-id", id)
                .header("mcp-protocol-version", version);
        }
        r.send().unwrap()
    }

    /// A POST on the session.
    pub(crate) fn post(&self, body: Value) -> reqwest::blocking::Response {
        RawSession::request(self.s, &self.http, Some(&self.sid), self.version, body)
    }

    /// A request on the session: its JSON-RPC answer (one JSON answer, or an SSE stream's).
    pub(crate) fn ask(&self, id: u64, method: &str, params: Value) -> Value {
        answer_of(
            self.post(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})),
        )
    }
}

/// The JSON-RPC answer of a POST: one JSON answer, or the last message of its SSE stream.
pub(crate) fn answer_of(r: reqwest::blocking::Response) -> Value {
    let mut all = crate::kit::mcp::messages_of(r);
    all.pop().expect("a message in the answer")
}

#[test]
fn delete_ends_a_session_with_204() {
    let s = Server::start();
    let raw = RawSession::open(&s);
    let sid = raw.sid.clone();
    // A call on the lean path: one JSON answer.
    let mut r = None;
    eventually("the session is open", || {
        let x = raw.post(json!({"jsonrpc": "2.0", "id": 2, "method": "ping"}));
        let json = x.headers()["content-type"] == "application/json";
        r = Some(x);
        json
    });
    let v: Value = r.unwrap().json().unwrap();
    assert_eq!(v, json!({"jsonrpc": "2.0", "id": 2, "result": {}}));
    let since = seq(&s);
    let r = raw.post(json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
               "params": {"name": "list_tables", "arguments": {}}}));
    let v: Value = r.json().unwrap();
    assert_eq!(v["result"]["structuredContent"]["tables"], json!([]), "{v}");
    let mut ev = vec![];
    eventually("the tool_call event", || {
        ev = changes(&s, since, Some(&["tool_call"]));
        !ev.is_empty()
    });
    // The client's name is the harness; its version is not a model.
    assert_eq!(ev[0]["actor"]["harness"], "raw", "{ev:?}");
    assert_eq!(ev[0]["actor"]["model"], Value::Null, "{ev:?}");

    let r = raw
        .http
        .delete(format!("{}/mcp", s.url))
        .bearer_auth(&s.token)
        .header("mcp-session-id", &sid)
        .send()
        .unwrap();
    assert!(matches!(r.status().as_u16(), 200 | 204), "{}", r.status());
    let r = raw.post(json!({"jsonrpc": "2.0", "id": 4, "method": "ping"}));
    assert_eq!(r.status(), 404);
}

/// The lean path (one JSON answer for `tools/list` and `tools/call` on an open session) answers
/// what rmcp's own path answers the same session: a listing with a cursor and a call that asks
/// for progress stay on rmcp's path (an SSE stream), and their results are the lean ones, to
/// the field (no `resultType` for a peer of a version before 2026-07-28).
#[test]
fn the_lean_path_answers_what_rmcp_answers() {
    let s = Server::start();
    tasks_table(&s);
    let raw = RawSession::open(&s);
    // The JSON-RPC answer of a POST, as one JSON answer or as the data of an SSE event; and
    // whether it came as JSON.
    let answer = |r: reqwest::blocking::Response| -> (bool, Value) {
        let json = r.headers()["content-type"] == "application/json";
        let text = r.text().unwrap();
        if json {
            return (true, serde_json::from_str(&text).unwrap());
        }
        let data = text
            .lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .find(|d| d.starts_with('{'))
            .unwrap_or_else(|| panic!("no JSON-RPC answer in {text}"));
        (false, serde_json::from_str(data).unwrap())
    };
    eventually("the session is open", || {
        let r = raw.post(json!({"jsonrpc": "2.0", "id": 2, "method": "ping"}));
        answer(r).0
    });
    let list = |params: Value| {
        answer(
            raw.post(json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": params})),
        )
    };
    let (lean_json, lean) = list(json!({}));
    let (rmcp_json, rmcp) = list(json!({"cursor": "0"}));
    assert!(lean_json && !rmcp_json, "one answer on each path");
    assert!(
        lean["result"]["tools"].as_array().unwrap().len() > 10,
        "{lean}"
    );
    assert_eq!(lean["result"], rmcp["result"]);

    let call = |meta: Value| {
        answer(raw.post(
            json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {
                "name": "select_rows", "arguments": {"table": "personal.tasks.items"},
                "_meta": meta}}),
        ))
    };
    let (lean_json, lean) = call(json!({}));
    let (rmcp_json, rmcp) = call(json!({"progressToken": 7}));
    assert!(lean_json && !rmcp_json, "one answer on each path");
    assert_eq!(lean["result"]["structuredContent"]["total"], 0, "{lean}");
    assert!(lean["result"].get("resultType").is_none(), "{lean}");
    assert_eq!(lean["result"], rmcp["result"]);
}

#[test]
fn last_known_tools_survive_a_restart_with_the_app_down() {
    let env = [("DATANOTES_APP_PROBE_MS", "100")];
    let s = Server::start_with_env(&env);
    let t = create_app(&s, json!({"name": "planning"}));
    let mut app = App::start(&s, "planning", &t, &[]);
    let before = wait_listed(&s, "planning")["tools"].clone();
    let saved = s.dir.join(".datanotes/app-tools/planning.json");
    use std::os::unix::fs::PermissionsExt;
    eventually("the last known tools saved", || saved.exists());
    let mode = std::fs::metadata(&saved).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let mode = std::fs::metadata(saved.parent().unwrap())
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o700);

    let mut s = s;
    let addr = s.url.trim_start_matches("http://").to_string();
    s.stop();
    app.kill();
    // The same address: the app's process finds the engine where it was.
    let s2 = Server::start_opts(&s.dir.clone(), &["--listen", &addr], &env);
    // Listed at once, from what was saved.
    let e = entry(&s2, "planning");
    assert_eq!(e["tools"], before, "{e}");
    assert_eq!(e["reachable"], false, "not reachable until probed: {e}");
    let agent = Agent::engine(&s2, &s2.token, None);
    assert!(agent.names().contains(&"planning_echo".to_string()));
    let r = agent.call("planning_echo", json!({}));
    assert!(is_error(&r));
    let msg = text(&r);
    assert!(
        msg.starts_with("app planning is not reachable: connection refused at"),
        "{msg}"
    );
    assert_plain(&msg);
    eventually("probed: not reachable", || {
        entry(&s2, "planning")["reachable"] == false
    });
    // Back by itself once the app is.
    app.restart();
    eventually("reachable again", || {
        entry(&s2, "planning")["reachable"] == true
    });
    assert!(!is_error(&agent.call("planning_echo", json!({}))));
    let e = entry(&s2, "planning");
    assert!(e["previousError"]["message"].is_string(), "{e}");
    drop(agent);
    drop(s2);
    drop(s);
}

#[test]
fn tool_call_events_are_all_there_in_order_after_a_clean_stop() {
    let s = Server::start();
    let url = s.url.clone();
    let token = s.token.clone();
    let threads: Vec<_> = (0..4)
        .map(|k| {
            let (url, token) = (url.clone(), token.clone());
            std::thread::spawn(move || {
                let a = Agent::connect(
                    &format!("{url}/mcp"),
                    Some(&token),
                    Some(&format!("thread{k} / m")),
                );
                for i in 0..25 {
                    a.call(
                        "describe_table",
                        json!({"table": format!("t.k{k}.n{i:02}")}),
                    );
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let s = s.restart();
    let ev = changes(&s, 0, Some(&["tool_call"]));
    assert_eq!(ev.len(), 100);
    for k in 0..4 {
        let mine: Vec<String> = ev
            .iter()
            .filter(|e| e["actor"]["harness"] == format!("thread{k}"))
            .map(|e| e["call"]["args"].as_str().unwrap().to_string())
            .collect();
        let want: Vec<String> = (0..25)
            .map(|i| format!("{{\"table\":\"t.k{k}.n{i:02}\"}}"))
            .collect();
        assert_eq!(mine, want);
    }
}

#[test]
fn the_stdio_door_with_a_wrong_token_says_it_was_refused() {
    let s = Server::start();
    let rt = runtime();
    rt.block_on(async {
        let mut child = tokio::process::Command::new(bin())
            .args(["mcp", "--url", &s.url, "--token", "dn_app_wrong"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("start datanotes mcp");
        let (i, o) = (child.stdin.take().unwrap(), child.stdout.take().unwrap());
        let e = match ().serve((o, i)).await {
            Ok(_) => panic!("a wrong token was accepted"),
            Err(e) => e.to_string(),
        };
        assert!(e.contains("refused the token"), "{e}");
        assert!(!e.contains("WorkerTransport") && !e.contains("::"), "{e}");
    });
}

#[test]
fn an_app_token_writing_outside_its_scope_over_mcp_is_refused() {
    let s = Server::start();
    tasks_table(&s);
    s.ok(
        "create_table",
        json!({"table": "work.crm.leads", "columns": {"name": {"type": "text", "required": true}}}),
    );
    let t = create_app(
        &s,
        json!({"name": "planning", "write": ["personal.tasks.items"]}),
    );
    let before = snapshot(&s.dir);
    let seq_before = seq(&s);

    let agent = Agent::engine(&s, &t, Some("scoped / m"));
    let r = agent.call(
        "insert_row",
        json!({"table": "work.crm.leads", "values": {"name": "Ada"}}),
    );
    assert!(is_error(&r), "{r:?}");
    let t0 = text(&r);
    assert!(
        t0.contains("app planning may not write work.crm.leads"),
        "{t0}"
    );
    assert_eq!(
        r.structured_content.as_ref().unwrap()["error"]["code"],
        "forbidden"
    );
    let r = agent.call(
        "create_table",
        json!({"table": "work.crm.other", "columns": {"x": {"type": "text"}}}),
    );
    assert!(is_error(&r), "{r:?}");
    assert!(text(&r).contains("no ddl right"), "{}", text(&r));
    let r = agent.call("drop_table", json!({"table": "personal.tasks.items"}));
    assert!(is_error(&r), "{r:?}");

    // Nothing changed: no file, no migration (tool-call events aside).
    assert_eq!(snapshot(&s.dir), before);
    let writes: Vec<Value> = changes(&s, seq_before, None);
    assert_eq!(writes, Vec::<Value>::new());
    assert_eq!(
        s.ok("select_rows", json!({"table": "work.crm.leads"}))["total"],
        0
    );

    // Reading is allowed, and so is writing inside the scope.
    assert!(!is_error(&agent.call("list_tables", json!({}))));
    let r = agent.call(
        "insert_row",
        json!({"table": "personal.tasks.items", "values": {"title": "In scope"}}),
    );
    assert!(!is_error(&r), "{r:?}");
    let m = s.ok(
        "list_migrations",
        json!({"table": "personal.tasks.items", "limit": 1}),
    );
    assert_eq!(m["migrations"][0]["actor"]["app"], "planning");
    assert_eq!(m["migrations"][0]["actor"]["harness"], "scoped");

    // The same refusal over HTTP apps/call.
    let v = http_call(
        &s,
        &t,
        None,
        "insert_row",
        json!({"table": "work.crm.leads", "values": {"name": "Alan"}}),
    );
    assert_eq!(v["ok"], false, "{v}");
    assert_eq!(v["value"]["error"]["code"], "forbidden");
}

#[test]
fn tool_calls_are_recorded_in_the_feed_with_their_fields_and_cuts() {
    let s = Server::start();
    tasks_table(&s);
    let t = create_app(
        &s,
        json!({"name": "planning", "write": ["personal.tasks.items"]}),
    );
    let _app = App::start(&s, "planning", &t, &[]);
    wait_listed(&s, "planning");
    let since = seq(&s);

    let agent = Agent::engine(&s, &s.token, Some("feed-harness / feed-model"));
    let r1 = agent.call("list_tables", json!({}));
    let long = "é".repeat(2000);
    let r2 = agent.call("planning_echo", json!({"text": long}));
    let r3 = agent.call(
        "insert_row",
        json!({"table": "no.such.table", "values": {}}),
    );
    // An app's error result (the engine refused its write).
    let r4 = agent.call(
        "planning_add_task",
        json!({"title": "Too big", "estimate": 500}),
    );
    assert!(!is_error(&r1) && !is_error(&r2) && is_error(&r3) && is_error(&r4));

    let mut ev = vec![];
    eventually("four tool_call events", || {
        ev = changes(&s, since, Some(&["tool_call"]));
        ev.len() >= 4
    });
    assert_eq!(ev.len(), 4, "{ev:?}");
    let calls: Vec<&Value> = ev.iter().map(|e| &e["call"]).collect();
    for (e, c) in ev.iter().zip(&calls) {
        assert_eq!(e["op"], "tool_call");
        assert_eq!(e["actor"]["harness"], "feed-harness", "{e}");
        assert_eq!(e["actor"]["model"], "feed-model", "{e}");
        assert!(c["durationMs"].as_f64().is_some_and(|d| d >= 0.0), "{c}");
        assert!(c["summary"].is_string(), "{c}");
        let chars = c["resultChars"].as_u64().unwrap();
        assert!(chars > 0);
        assert_eq!(
            c["resultTokens"].as_u64().unwrap(),
            chars.div_ceil(4),
            "{c}"
        );
        assert!(c["session"].as_str().is_some_and(|x| !x.is_empty()), "{c}");
        assert_eq!(c["session"], calls[0]["session"]);
    }
    let content_chars =
        |r: &CallToolResult| serde_json::to_string(&r.content).unwrap().len() as u64;
    assert_eq!(calls[0]["tool"], "list_tables");
    assert_eq!(calls[0]["ok"], true);
    assert_eq!(calls[0]["servedBy"], "engine");
    assert_eq!(calls[0]["args"], "{}");
    assert_eq!(calls[0]["resultChars"], content_chars(&r1));

    assert_eq!(calls[1]["tool"], "planning_echo");
    assert_eq!(calls[1]["ok"], true);
    assert_eq!(calls[1]["servedBy"], "planning");
    assert_eq!(calls[1]["args"].as_str().unwrap().chars().count(), 300);
    assert!(
        calls[1]["args"]
            .as_str()
            .unwrap()
            .starts_with("{\"text\":\"éé")
    );
    assert_eq!(calls[1]["value"].as_str().unwrap().chars().count(), 1000);
    assert_eq!(calls[1]["resultChars"], content_chars(&r2));

    assert_eq!(calls[2]["tool"], "insert_row");
    assert_eq!(calls[2]["ok"], false);
    assert_eq!(calls[2]["servedBy"], "engine");
    let summary = calls[2]["summary"].as_str().unwrap();
    assert!(
        summary.contains("no.such.table") || summary.contains("no table"),
        "{summary}"
    );

    assert_eq!(calls[3]["tool"], "planning_add_task");
    assert_eq!(calls[3]["ok"], false);
    assert_eq!(calls[3]["servedBy"], "planning");
    let summary = calls[3]["summary"].as_str().unwrap();
    assert!(summary.contains("above the maximum 100"), "{summary}");

    // Consumers that do not ask for tool_call do not see them.
    assert!(
        changes(&s, since, None)
            .iter()
            .all(|c| c["op"] != "tool_call")
    );
}

#[test]
fn app_results_pass_through_intact() {
    let s = Server::start();
    let t = create_app(&s, json!({"name": "planning"}));
    let app = App::start(&s, "planning", &t, &[]);
    wait_listed(&s, "planning");
    let direct = Agent::connect(&app.url, None, None);
    let agent = Agent::engine(&s, &s.token, None);
    for fail in [false, true] {
        let args = json!({"fail": fail});
        let mut d = serde_json::to_value(direct.call("planning_mixed", args.clone())).unwrap();
        let v = serde_json::to_value(agent.call("planning_mixed", args.clone())).unwrap();
        // Modulo the app's name in its resource URIs (the vault's are left as they are).
        assert_eq!(
            v["content"][4]["resource"]["uri"], "file://planning//blob.bin",
            "{v}"
        );
        d["content"][4]["resource"]["uri"] = json!("file://planning//blob.bin");
        assert_eq!(v, d, "through /mcp");
        let kinds: Vec<&str> = v["content"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["type"].as_str().unwrap())
            .collect();
        assert_eq!(kinds, ["text", "image", "audio", "resource", "resource"]);
        assert_eq!(v["isError"], fail);
        assert_eq!(v["structuredContent"]["nested"]["ok"], !fail);
        assert_eq!(v["_meta"]["example/trace"], "mixed-1");
        assert_eq!(v["content"][0]["annotations"]["audience"], json!(["user"]));
        assert_eq!(v["content"][4]["resource"]["blob"], "AAECAw==");

        let h = http_call(&s, &s.token, None, "planning_mixed", args);
        assert_eq!(h["ok"], !fail, "{h}");
        assert_eq!(h["value"], d, "through apps/call");
    }
}

#[test]
fn the_planning_app_reads_writes_follows_the_feed_and_declares_its_table() {
    let s = Server::start();
    tasks_table(&s);
    let t = create_app(
        &s,
        json!({"name": "planning", "write": ["personal.tasks.items"]}),
    );
    let _app = App::start(&s, "planning", &t, &[]);
    wait_listed(&s, "planning");

    // describe_table shows the tools that declare the table, with their app.
    let d = s.ok("describe_table", json!({"table": "personal.tasks.items"}));
    let mut tools: Vec<(String, String)> = d["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["name"].as_str().unwrap().to_string(),
                t["app"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    tools.sort();
    let p = |n: &str| (n.to_string(), "planning".to_string());
    assert_eq!(
        tools,
        [
            p("planning_add_task"),
            p("planning_complete_task"),
            p("planning_list_tasks")
        ]
    );
    let listed = Agent::engine(&s, &s.token, None).tools();
    let add = listed
        .iter()
        .find(|t| t.name == "planning_add_task")
        .unwrap();
    assert_eq!(
        add.meta.as_ref().unwrap().0["datanotes/tables"],
        json!(["personal.tasks.items"])
    );

    let agent = Agent::engine(&s, &s.token, Some("plan-harness / plan-model"));
    let r = agent.call(
        "planning_add_task",
        json!({"title": "Call Ada", "estimate": 2}),
    );
    assert!(!is_error(&r), "{r:?}");
    assert_eq!(r.structured_content.unwrap()["id"], "call-ada");
    // The engine's refusal passes through the app as an error result.
    let r = agent.call(
        "planning_add_task",
        json!({"title": "Too big", "estimate": 500}),
    );
    assert!(is_error(&r), "{r:?}");
    assert!(text(&r).contains("above the maximum 100"), "{}", text(&r));
    let r = agent.call("planning_list_tasks", json!({"status": "todo"}));
    assert_eq!(r.structured_content.unwrap()["rows"][0]["id"], "call-ada");
    let r = agent.call("planning_complete_task", json!({"id": "call-ada"}));
    assert!(!is_error(&r), "{r:?}");
    let row = s.ok(
        "get_row",
        json!({"table": "personal.tasks.items", "id": "call-ada"}),
    );
    assert_eq!(row["values"]["status"], "done");
    // Journaled as the app, for the agent that called it.
    let m = s.ok(
        "list_migrations",
        json!({"table": "personal.tasks.items", "limit": 1}),
    );
    let actor = &m["migrations"][0]["actor"];
    assert_eq!(actor["app"], "planning", "{actor}");
    assert_eq!(actor["harness"], "plan-harness", "{actor}");
    assert_eq!(actor["model"], "plan-model", "{actor}");

    // A hand-made change is seen by the app's feed follower too.
    s.ok(
        "insert_row",
        json!({"table": "personal.tasks.items", "values": {"title": "By the owner"}}),
    );
    eventually("the app saw 3 changes", || {
        let r = agent.call("planning_changes_seen", json!({}));
        r.structured_content.unwrap()["seen"] == 3
    });
    let r = agent.call("planning_changes_seen", json!({}));
    assert_eq!(
        r.structured_content.unwrap()["ops"],
        json!(["insert", "update", "insert"])
    );
}

#[test]
fn the_stdio_door_lists_and_calls_tools() {
    let s = Server::start();
    let t = create_app(&s, json!({"name": "planning"}));
    let _app = App::start(&s, "planning", &t, &[]);
    wait_listed(&s, "planning");
    let want = Agent::engine(&s, &s.token, None).names();
    let since = seq(&s);

    let rt = runtime();
    rt.block_on(async {
        let mut child = tokio::process::Command::new(bin())
            .args(["mcp", "--url", &s.url, "--token", &s.token])
            .env("DATANOTES_LOG", "warn")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("start datanotes mcp");
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        // A desktop client whose name has a slash and whose version looks like a model's.
        let mut hello = rmcp::model::ClientConfig::default();
        hello.client_info = rmcp::model::Implementation::new("desk/top", "opus-9");
        let client = hello.serve((stdout, stdin)).await.expect("stdio handshake");
        let info = client.peer_info().unwrap();
        assert_eq!(info.server_info.as_ref().unwrap().name, "datanotes-mcp");
        let names: Vec<String> = client
            .list_all_tools()
            .await
            .unwrap()
            .iter()
            .map(|t| t.name.to_string())
            .collect();
        assert_eq!(names, want);
        let r = client
            .call_tool(CallToolRequestParams::new("list_tables"))
            .await
            .unwrap();
        assert!(!is_error(&r), "{r:?}");
        let mut a = serde_json::Map::new();
        a.insert("text".into(), json!("via stdio"));
        let r = client
            .call_tool(CallToolRequestParams::new("planning_echo").with_arguments(a))
            .await
            .unwrap();
        assert!(!is_error(&r), "{r:?}");
        let sc = r.structured_content.unwrap();
        assert_eq!(sc["text"], "via stdio");
        // The stdio client's name is the harness, whole; its version is not a model.
        assert_eq!(sc["actor"], "desk/top", "{sc}");
        client.cancel().await.unwrap();
        let status = tokio::time::timeout(std::time::Duration::from_secs(10), child.wait())
            .await
            .expect("datanotes mcp exits when its client goes away")
            .unwrap();
        assert!(status.success(), "{status}");
    });
    // Tool-call events are committed with the writer's next batch, after the answer.
    let mut ev = vec![];
    eventually("both tool_call events", || {
        ev = changes(&s, since, Some(&["tool_call"]));
        ev.len() >= 2
    });
    let tools: Vec<&str> = ev
        .iter()
        .map(|e| e["call"]["tool"].as_str().unwrap())
        .collect();
    assert_eq!(tools, ["list_tables", "planning_echo"]);
    assert_eq!(ev[1]["call"]["servedBy"], "planning");
    // The same actor as a client of /mcp with that name (delete_ends_a_session_with_204).
    for e in &ev {
        assert_eq!(e["actor"]["harness"], "desk/top", "{e}");
        assert_eq!(e["actor"]["model"], Value::Null, "{e}");
        assert_eq!(e["actor"]["label"], "desk/top", "{e}");
    }
}

#[test]
fn the_agent_example_lists_and_calls_tools() {
    let s = Server::start();
    let run = |args: &[&str]| {
        let out = Command::new(example("agent"))
            .args(["--url", &s.url])
            .args(args)
            .env("DATANOTES_TOKEN", &s.token)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).to_string(),
        )
    };
    let (code, out) = run(&["list"]);
    assert_eq!(code, Some(0));
    let names: Vec<&str> = out.lines().map(|l| l.split('\t').next().unwrap()).collect();
    assert_eq!(names, operation_names(&s));

    let (code, out) = run(&["--actor", "example / m", "call", "list_tables", "{}"]);
    assert_eq!(code, Some(0), "{out}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["structuredContent"]["tables"], json!([]));

    let (code, out) = run(&["call", "insert_row", r#"{"table": "a.b.c", "values": {}}"#]);
    assert_eq!(code, Some(2), "{out}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["isError"], true);
}

#[test]
fn the_stdio_door_survives_an_engine_restart() {
    let mut s = Server::start();
    let t = create_app(&s, json!({"name": "planning"}));
    let _app = App::start(&s, "planning", &t, &[]);
    wait_listed(&s, "planning");
    let addr = s.url.trim_start_matches("http://").to_string();
    let url = s.url.clone();
    let token = s.token.clone();

    let rt = runtime();
    let mut child = rt.block_on(async {
        tokio::process::Command::new(bin())
            .args(["mcp", "--url", &url, "--token", &token])
            .env("DATANOTES_LOG", "warn")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("start datanotes mcp")
    });
    let stdin = child.stdin.take().unwrap();
    let stdout = child.stdout.take().unwrap();
    let client = rt
        .block_on(async { ().serve((stdout, stdin)).await })
        .expect("stdio handshake");
    let echo = |client: &RunningService<RoleClient, ()>| {
        let mut a = serde_json::Map::new();
        a.insert("text".into(), json!("via stdio"));
        rt.block_on(client.call_tool(CallToolRequestParams::new("planning_echo").with_arguments(a)))
    };
    let r = echo(&client).unwrap();
    assert!(!is_error(&r), "{r:?}");
    let actor = r.structured_content.unwrap()["actor"].clone();
    assert!(
        actor.as_str().is_some_and(|a| a.starts_with("rmcp")),
        "{actor}"
    );

    // The engine restarts on the same address; the desktop client keeps its stdio door.
    // SIGTERM: the server stops promptly although the proxy holds an MCP stream open and the
    // app a long poll on the feed.
    let t0 = std::time::Instant::now();
    s.stop();
    assert!(
        t0.elapsed() < std::time::Duration::from_secs(4),
        "stopping took {:?}",
        t0.elapsed()
    );
    let dir = s.dir.clone();
    let s2 = Server::start_opts(&dir, &["--listen", &addr], &[]);
    wait_listed(&s2, "planning");
    let r = echo(&client).expect("a call after the engine restarted");
    assert!(!is_error(&r), "{r:?}");
    assert_eq!(r.structured_content.unwrap()["actor"], actor);
    rt.block_on(client.cancel()).unwrap();
    drop(s);
}

// ---------------------------------------------------------------------------------------------
// The apps host under hostile load: bounded listings, probes, sessions; stable names.

/// How many `initialize` and `tools/list` requests a remote_app served.
fn app_stats(app: &App) -> Value {
    let direct = Agent::connect(&app.url, None, None);
    let r = direct.call("datanotes_test_stats", json!({}));
    r.structured_content.unwrap()
}

/// Waits until the app's lastError contains `what`; answers the entry.
fn wait_error(s: &Server, name: &str, what: &str) -> Value {
    let mut e = Value::Null;
    eventually(&format!("app {name}'s lastError names {what}"), || {
        e = entry(s, name);
        e["lastError"].as_str().is_some_and(|m| m.contains(what))
    });
    e
}

#[test]
fn a_hostile_listing_stops_at_its_caps_and_the_previous_tools_stay_listed() {
    let s = Server::start();
    let t = create_app(&s, json!({"name": "planning"}));
    let _good = App::start(&s, "planning", &t, &[]);
    let before = wait_listed(&s, "planning")["tools"].clone();
    let rss0 = s.mib("VmRSS");

    // An endless nextCursor chain (200 tools a page): stopped at 2,000 tools.
    let endless = App::start(
        &s,
        "planning",
        &t,
        &["--endless-listing", "--page-tools", "200"],
    );
    let e = wait_error(&s, "planning", "DATANOTES_APP_MAX_TOOLS");
    let msg = e["lastError"].as_str().unwrap();
    assert!(msg.contains("more than 2000 tools"), "{msg}");
    assert_plain(msg);
    assert_eq!(e["tools"], before, "the previous tools stay listed");
    let lists = app_stats(&endless)["lists"].as_u64().unwrap();
    assert!(lists <= 2000 / 200 + 2, "{lists} pages asked");

    // Padded tools (4 KB descriptions): stopped at 4 MiB.
    let padded = App::start(
        &s,
        "planning",
        &t,
        &[
            "--endless-listing",
            "--page-tools",
            "100",
            "--pad-bytes",
            "4000",
        ],
    );
    wait_error(&s, "planning", "DATANOTES_APP_MAX_LISTING_BYTES");
    let lists = app_stats(&padded)["lists"].as_u64().unwrap();
    assert!(lists <= (4 << 20) / (100 * 4000) + 2, "{lists} pages asked");

    // 100,000 tools in one answer (about 15 MB): refused at the byte cap before it is parsed.
    let _huge = App::start(&s, "planning", &t, &["--huge-listing", "100000"]);
    let e = wait_error(&s, "planning", "over 4194304 bytes");
    assert!(
        e["lastError"]
            .as_str()
            .unwrap()
            .contains("DATANOTES_APP_MAX_LISTING_BYTES"),
        "{e}"
    );
    assert_eq!(e["tools"], before, "the previous tools stay listed");
    let agent = Agent::engine(&s, &s.token, None);
    assert!(agent.names().len() < 200);
    let rss1 = s.mib("VmRSS");
    eprintln!("hostile listings: VmRSS {rss0} -> {rss1} MiB");
    assert!(rss1 < rss0 + 64, "VmRSS {rss0} -> {rss1} MiB");
}

#[test]
fn tools_and_instructions_over_the_caps_are_skipped_or_cut() {
    let s = Server::start();
    let t = create_app(&s, json!({"name": "planning"}));
    let _app = App::start(
        &s,
        "planning",
        &t,
        &[
            "--big-description",
            "20000",
            "--big-schema",
            "70000",
            "--instructions-bytes",
            "30000",
        ],
    );
    let e = wait_listed(&s, "planning");
    let skipped = e["skippedTools"].as_array().unwrap();
    let reason = |n: &str| {
        skipped
            .iter()
            .find(|x| x["name"] == n)
            .unwrap_or_else(|| panic!("{n} not skipped: {e}"))["reason"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let r = reason("planning_big_description");
    assert!(
        r.contains("20000 bytes") && r.contains("DATANOTES_APP_MAX_DESCRIPTION_BYTES"),
        "{r}"
    );
    let r = reason("planning_big_schema");
    assert!(r.contains("DATANOTES_APP_MAX_SCHEMA_BYTES"), "{r}");
    let names = Agent::engine(&s, &s.token, None).names();
    assert!(names.contains(&"planning_echo".to_string()));
    assert!(!names.iter().any(|n| n.starts_with("planning_big")));
    let v = owner_post(&s, "/datanotes/apps/tools/", json!({}));
    let i = v["instructions"].as_str().unwrap();
    assert!(i.contains("App planning: plan tasks"), "{i}");
    assert!(
        i.contains("cut at 16384 bytes of 30000 (DATANOTES_APP_MAX_INSTRUCTIONS_BYTES)"),
        "{}",
        &i[i.len().saturating_sub(300)..]
    );
    assert!(i.len() < 16384 + 2000, "{}", i.len());
}

#[test]
fn probes_of_a_failing_app_back_off() {
    // Probes every 100 ms without backoff would list 60 times in 6 s.
    let s = Server::start_with_env(&[("DATANOTES_APP_PROBE_MS", "100")]);
    let t = create_app(&s, json!({"name": "planning"}));
    let app = App::start(&s, "planning", &t, &["--fail-list"]);
    eventually("the failing app is not reachable", || {
        entry(&s, "planning")["reachable"] == false
    });
    // Its refusal in its own words.
    let e = entry(&s, "planning");
    assert!(
        e["lastError"].as_str().is_some_and(
            |m| m.contains("answered with an error: this app refuses to list its tools")
        ),
        "{e}"
    );
    let n0 = app_stats(&app)["lists"].as_u64().unwrap();
    // A rate: the probes counted over 6 s of time (no state marks the end of a window).
    std::thread::sleep(std::time::Duration::from_secs(6));
    let n1 = app_stats(&app)["lists"].as_u64().unwrap();
    eprintln!("probes of a failing app: {n0} then {n1} after 6 s");
    // 100, 200, 400, 800, 1600, 3200 ms...: at most 7 more in 6 s, and at least one.
    assert!(n1 > n0, "{n0} -> {n1}: no more probes");
    assert!(n1 - n0 <= 7, "{n0} -> {n1}: probes do not back off");
    assert_eq!(entry(&s, "planning")["reachable"], false);
}

#[test]
fn distinct_actors_share_one_session_with_the_app() {
    let s = Server::start();
    let t = create_app(&s, json!({"name": "planning"}));
    let app = App::start(&s, "planning", &t, &[]);
    wait_listed(&s, "planning");
    for i in 0..200 {
        let actor = format!("harness-{i} / model-{i}");
        let v = http_call(&s, &s.token, Some(&actor), "planning_echo", json!({}));
        assert_eq!(v["ok"], true, "{v}");
        assert_eq!(v["value"]["structuredContent"]["actor"], actor.as_str());
    }
    // Over MCP too: the actor travels with each call.
    let agent = Agent::engine(&s, &s.token, Some("mcp-harness / mcp-model"));
    let r = agent.call("planning_echo", json!({}));
    assert_eq!(
        r.structured_content.unwrap()["actor"],
        "mcp-harness / mcp-model"
    );
    // One listing session, one call session (HTTP), one for the MCP agent's session, and
    // this test's own.
    let n = app_stats(&app)["initializes"].as_u64().unwrap();
    assert!(n <= 4, "{n} sessions opened with the app for 201 actors");
    // A second agent gets a session of its own; the first keeps its.
    let other = Agent::engine(&s, &s.token, Some("other / model"));
    other.call("planning_echo", json!({}));
    agent.call("planning_echo", json!({}));
    other.call("planning_echo", json!({}));
    let m = app_stats(&app)["initializes"].as_u64().unwrap();
    // (Reading the app's stats opens a session of the test's own each time.)
    assert_eq!(m, n + 2, "one more session, for the second agent");
}

/// `initialize` then `notifications/initialized` on `/mcp`, raw; answers the session id.
fn raw_session(s: &Server, token: &str) -> String {
    mcp::RawSession::open(s, token, "2025-06-18").id
}

fn raw_post(
    s: &Server,
    http: &reqwest::blocking::Client,
    token: &str,
    sid: &str,
    body: Value,
) -> (u16, String) {
    let r = http
        .post(format!("{}/mcp", s.url))
        .bearer_auth(token)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-session-id", sid)
        .json(&body)
        .send()
        .unwrap();
    (r.status().as_u16(), r.text().unwrap_or_default())
}

fn ping(s: &Server, http: &reqwest::blocking::Client, token: &str, sid: &str) -> (u16, String) {
    raw_post(
        s,
        http,
        token,
        sid,
        json!({"jsonrpc": "2.0", "id": 9, "method": "ping"}),
    )
}

#[test]
fn mcp_sessions_are_capped_per_token_and_in_all_and_expire_when_idle() {
    let s = Server::start_with_env(&[
        ("DATANOTES_MCP_SESSIONS_PER_TOKEN", "4"),
        ("DATANOTES_MCP_SESSIONS", "6"),
        ("DATANOTES_MCP_SESSION_IDLE_MS", "3000"),
    ]);
    let nobody = create_app(&s, json!({"name": "nobody"}));
    let http = reqwest::blocking::Client::new();
    let rss0 = s.mib("VmRSS");
    // 500 sessions from a token with no rights: only the last 4 stay open.
    let ids: Vec<String> = (0..500).map(|_| raw_session(&s, &nobody)).collect();
    let rss1 = s.mib("VmRSS");
    eprintln!("500 MCP sessions: VmRSS {rss0} -> {rss1} MiB");
    assert!(rss1 < rss0 + 32, "VmRSS {rss0} -> {rss1} MiB");
    let open: Vec<bool> = ids
        .iter()
        .map(|id| ping(&s, &http, &nobody, id).0 == 200)
        .collect();
    assert_eq!(open.iter().filter(|o| **o).count(), 4);
    assert!(open[496..].iter().all(|o| *o));
    let (st, body) = ping(&s, &http, &nobody, &ids[0]);
    assert_eq!(st, 404);
    assert!(
        body.contains("expired or was closed") && body.contains("initialize"),
        "{body}"
    );

    // The owner's 4 sessions: 8 in all, over 6: the least recently used (nobody's) go first.
    let mine: Vec<String> = (0..4).map(|_| raw_session(&s, &s.token)).collect();
    for id in &mine {
        assert_eq!(ping(&s, &http, &s.token, id).0, 200);
    }
    let still: usize = ids[496..]
        .iter()
        .filter(|id| ping(&s, &http, &nobody, id).0 == 200)
        .count();
    assert_eq!(still, 2);

    // Idle for longer than 3 s: expired, and said so. Time itself: a poll would use the session
    // and keep it alive.
    std::thread::sleep(std::time::Duration::from_millis(3500));
    let (st, body) = ping(&s, &http, &s.token, &mine[3]);
    assert_eq!(st, 404);
    assert!(body.contains("idle for more than 3 s"), "{body}");
}

#[test]
fn a_name_an_app_holds_stays_with_it_whatever_the_registration_order() {
    let s = Server::start();
    let ta = create_app(&s, json!({"name": "alpha"}));
    let tb = create_app(&s, json!({"name": "beta"}));
    let _a = App::start(&s, "alpha", &ta, &[]);
    let _b = App::start(&s, "beta", &tb, &["--tool", "shared"]);
    wait_listed(&s, "alpha");
    wait_listed(&s, "beta");
    let agent = Agent::engine(&s, &s.token, None);
    assert_eq!(
        text(&agent.call("shared", json!({}))),
        "shared served by beta"
    );

    // alpha, registered earlier, adds beta's name at a refresh: beta keeps it.
    let _a2 = App::start(&s, "alpha", &ta, &["--tool", "shared"]);
    let r = owner_post(&s, "/datanotes/apps/refresh/", json!({"name": "alpha"}));
    assert_eq!(
        r["app"]["skippedTools"],
        json!([{"name": "shared", "takenBy": "beta"}]),
        "{r}"
    );
    assert_eq!(
        text(&agent.call("shared", json!({}))),
        "shared served by beta"
    );
    let v = http_call(&s, &s.token, None, "shared", json!({}));
    assert_eq!(v["servedBy"], "beta");

    // The other order: beta, registered later, adds alpha's tool name: alpha keeps it.
    let _b2 = App::start(
        &s,
        "beta",
        &tb,
        &["--tool", "shared", "--tool", "alpha_echo"],
    );
    let r = owner_post(&s, "/datanotes/apps/refresh/", json!({"name": "beta"}));
    assert_eq!(
        r["app"]["skippedTools"],
        json!([{"name": "alpha_echo", "takenBy": "alpha"}]),
        "{r}"
    );
    assert_eq!(
        entry(&s, "alpha")["skippedTools"],
        json!([{"name": "shared", "takenBy": "beta"}])
    );

    // beta stops listing `shared`: alpha gets it at its next refresh.
    let _b3 = App::start(&s, "beta", &tb, &[]);
    owner_post(&s, "/datanotes/apps/refresh/", json!({"name": "beta"}));
    let r = owner_post(&s, "/datanotes/apps/refresh/", json!({"name": "alpha"}));
    assert_eq!(r["app"]["skippedTools"], json!([]), "{r}");
    assert_eq!(
        text(&agent.call("shared", json!({}))),
        "shared served by alpha"
    );
}

/// Each engine operation is listed with annotations from its access class, as rmcp's client
/// reads them: reads are read-only and idempotent, deletes and maintenance may destroy, and
/// none reaches beyond the vault.
#[test]
fn engine_operations_carry_annotations_from_their_access_class() {
    let s = Server::start();
    let agent = Agent::owner(&s);
    let tools = agent.tools();
    let ann = |name: &str| {
        let t = tools
            .iter()
            .find(|t| t.name == name)
            .unwrap_or_else(|| panic!("{name}"));
        serde_json::to_value(t.annotations.as_ref().expect("annotations")).unwrap()
    };
    assert_eq!(
        ann("list_tables"),
        json!({"title": "List tables", "readOnlyHint": true, "destructiveHint": false,
               "idempotentHint": true, "openWorldHint": false})
    );
    assert_eq!(ann("insert_row")["readOnlyHint"], false);
    assert_eq!(ann("insert_row")["destructiveHint"], false);
    assert_eq!(ann("delete_row")["destructiveHint"], true);
    assert_eq!(ann("drop_table")["destructiveHint"], true);
    assert_eq!(ann("vacuum")["destructiveHint"], true);
    assert!(
        tools
            .iter()
            .filter(|t| ops_names().contains(&t.name.to_string()))
            .all(|t| t.annotations.as_ref().is_some_and(|a| a.title.is_some())),
        "every operation has a title"
    );
}

/// The engine's operations, by name.
fn ops_names() -> Vec<String> {
    datanotes::ops::describe_all()
        .iter()
        .map(|o| o["name"].as_str().unwrap().to_string())
        .collect()
}
