//! Remote apps through the one address: listing order and collisions, JSON and SSE answers,
//! an app killed and restarted, timeouts, sessions and connections kept, the token and actor
//! passed on.

use super::*;

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
