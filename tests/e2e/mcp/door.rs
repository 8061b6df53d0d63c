//! The door itself: list changes coalesced (also through stdio), the lean path answering what
//! rmcp answers, the last known tools across a restart, tool-call events after a clean stop,
//! a wrong token at the stdio door.

use super::*;

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
