//! What an app writes reaches the client as the app wrote it, on every path of `/mcp`: an
//! integer stays an integer (rmcp's types read a tool result's `annotations.priority` and a
//! progress notification's numbers as floats, so `1` would arrive as `1.0`). The paths: the
//! door's own JSON answer, rmcp's SSE answer (a call that asks for progress), a client of
//! protocol 2026-07-28, and `datanotes mcp` on stdio (both eras). And the relay's own work:
//! answers owed when stdin closes, `Mcp-Param-*` headers, a read lost in a restart asked again.

use crate::kit::*;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use std::sync::Arc;

/// The result the app answers, as it writes it.
fn app_result() -> Value {
    json!({"content": [{"type": "text", "text": "ok", "annotations": {"priority": 1, "audience": ["user"]}}],
           "structuredContent": {"n": 1}})
}

/// A text with a priority of 1, as the app writes it in its resources and prompts.
fn ranked(text: &str) -> Value {
    json!({"type": "text", "text": text, "annotations": {"priority": 1}})
}

/// The `resources/read` the app was asked (it answers them in 1.5 s).
static SLOW_READS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// An app whose tool `exact_numbers` sends progress (with the call's token, if it gave one)
/// and answers [`app_result`], on an SSE stream; `exact_json` answers it as one JSON body. Its
/// resource and prompt carry a priority of 1 too.
async fn post(v: Value) -> Response {
    let id = v["id"].clone();
    match v["method"].as_str() {
        Some("initialize") => fake_app::initialized(
            &id,
            "exact",
            json!({"tools": {}, "resources": {}, "prompts": {}}),
            "exact-session",
        ),
        Some("tools/list") => fake_app::rpc(
            &id,
            json!({"tools": [{"name": "exact_numbers", "inputSchema": {"type": "object"}},
                             {"name": "exact_json", "inputSchema": {"type": "object"}},
                             {"name": "exact_slow", "inputSchema": {"type": "object"}}]}),
        ),
        Some("resources/list") => fake_app::rpc(
            &id,
            json!({"resources": [{"uri": "file:///n", "name": "n", "annotations": {"priority": 1}}]}),
        ),
        Some("resources/templates/list") => fake_app::rpc(&id, json!({"resourceTemplates": []})),
        Some("prompts/list") => fake_app::rpc(&id, json!({"prompts": [{"name": "exact_prompt"}]})),
        Some("prompts/get") => fake_app::rpc(
            &id,
            json!({"messages": [{"role": "user", "content": ranked("ask")}]}),
        ),
        // Slow: the engine may go away while it answers.
        Some("resources/read") => {
            SLOW_READS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            fake_app::take_time(std::time::Duration::from_millis(1500)).await;
            fake_app::rpc(
                &id,
                json!({"contents": [{"uri": "file:///n", "text": "slow"}]}),
            )
        }
        Some("tools/call") if v["params"]["name"] == "exact_json" => {
            fake_app::rpc(&id, app_result())
        }
        Some("tools/call") if v["params"]["name"] == "exact_slow" => {
            fake_app::take_time(std::time::Duration::from_millis(700)).await;
            fake_app::rpc(&id, app_result())
        }
        Some("tools/call") => {
            let token = v["params"]["_meta"]["progressToken"].clone();
            let mut out = vec![];
            if !token.is_null() {
                out.push(json!({"jsonrpc": "2.0", "method": "notifications/progress",
                    "params": {"progressToken": token, "progress": 1, "total": 2}}));
            }
            out.push(json!({"jsonrpc": "2.0", "id": id, "result": app_result()}));
            fake_app::sse(futures_util::stream::iter(
                out.into_iter().map(|m| m.to_string()),
            ))
        }
        _ => StatusCode::ACCEPTED.into_response(),
    }
}

/// The numbers of `priority`, `progress` and `total` in `text`, as spelled.
fn spelled(text: &str) -> Vec<String> {
    let mut out = vec![];
    for key in ["priority", "progress", "total"] {
        let pat = format!("\"{key}\":");
        for (at, _) in text.match_indices(&pat) {
            let rest = &text[at + pat.len()..];
            let end = rest.find([',', '}']).unwrap_or(rest.len());
            out.push(format!("{key}: {}", rest[..end].trim()));
        }
    }
    out.sort();
    out
}

/// Serves the app and registers it.
fn exact_app(s: &Server, rt: &tokio::runtime::Runtime) {
    let post: fake_app::Post = Arc::new(|v| Box::pin(post(v)));
    let url = fake_app::serve(rt, post, None);
    create_app(s, json!({"name": "exact", "mcp_url": url}));
    eventually("the app's tool is listed", || {
        s.ok_route("apps/get", json!({"name": "exact"}))["app"]["tools"]
            .as_array()
            .is_some_and(|t| !t.is_empty())
    });
}

#[test]
fn an_apps_numbers_reach_the_client_as_the_app_wrote_them() {
    let s = Server::start();
    let rt = mcp::runtime();
    exact_app(&s, &rt);
    let session = mcp::RawSession::open(&s, &s.token, "2025-11-25");
    let call = |id: u64, meta: Value| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
            "name": "exact_numbers", "arguments": {}, "_meta": meta}})
    };
    let result_of = |text: &str| -> Value {
        let msg = text
            .lines()
            .map(|l| l.strip_prefix("data:").unwrap_or(l).trim())
            .rfind(|l| l.starts_with('{') && l.contains("\"result\""))
            .unwrap_or_else(|| panic!("a result in {text}"));
        serde_json::from_str::<Value>(msg).unwrap()["result"].take()
    };

    // The door's JSON answer.
    let r = session.post(call(2, json!({})));
    assert!(
        r.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("application/json")
    );
    let text = r.text().unwrap();
    assert_eq!(spelled(&text), ["priority: 1"], "{text}");
    assert_eq!(result_of(&text), app_result(), "{text}");

    // rmcp's SSE answer: a call that asks for progress.
    let text = session
        .post(call(3, json!({"progressToken": "p"})))
        .text()
        .unwrap();
    assert_eq!(
        spelled(&text),
        ["priority: 1", "progress: 1", "total: 2"],
        "{text}"
    );
    assert_eq!(result_of(&text), app_result(), "{text}");

    // A client of 2026-07-28: the result gains its `resultType`, nothing else changes.
    let params = json!({"name": "exact_numbers", "arguments": {}});
    let r = mcp::post_2026(&s, &s.token, "tools/call", params, json!({}), Some("q"));
    let text = r.text().unwrap();
    assert_eq!(
        spelled(&text),
        ["priority: 1", "progress: 1", "total: 2"],
        "{text}"
    );
    let mut expected = app_result();
    expected["resultType"] = json!("complete");
    assert_eq!(result_of(&text), expected, "{text}");
}

/// What rmcp's side of the door writes (a client of 2026-07-28 has no session; `prompts/get`
/// is not on the lean path) is written as the app wrote it too: its resources and prompts. So
/// is a tool result the app answers as one JSON body, not a stream.
#[test]
fn an_apps_resources_prompts_and_json_answers_keep_their_numbers() {
    let s = Server::start();
    let rt = mcp::runtime();
    exact_app(&s, &rt);
    let session = mcp::RawSession::open(&s, &s.token, "2025-11-25");
    let r = session.post(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "exact_json", "arguments": {}}}));
    let text = r.text().unwrap();
    assert_eq!(spelled(&text), ["priority: 1"], "{text}");

    let get = json!({"jsonrpc": "2.0", "id": 3, "method": "prompts/get",
        "params": {"name": "exact_prompt"}});
    let text = session.post(get).text().unwrap();
    assert_eq!(spelled(&text), ["priority: 1"], "{text}");
    assert!(text.contains(r#""text":"ask""#), "{text}");

    let params = json!({"name": "exact_prompt"});
    let text = mcp::post_2026(&s, &s.token, "prompts/get", params, json!({}), None)
        .text()
        .unwrap();
    assert_eq!(spelled(&text), ["priority: 1"], "{text}");
    assert!(text.contains(r#""resultType":"complete""#), "{text}");

    // The listing names the app's resource in the namespace and keeps its number.
    let text = mcp::post_2026(&s, &s.token, "resources/list", json!({}), json!({}), None)
        .text()
        .unwrap();
    assert!(text.contains("file://exact//n"), "{text}");
    assert_eq!(spelled(&text), ["priority: 1"], "{text}");
}

/// The `_meta` of a message of protocol 2026-07-28 (which names its version and its client).
fn meta_2026() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "raw-stdio", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {},
    })
}

/// `datanotes mcp`, written to and read from line by line.
struct Stdio {
    child: std::process::Child,
    lines: std::sync::mpsc::Receiver<String>,
}

impl Stdio {
    fn start(s: &Server) -> Stdio {
        Stdio::start_at(&s.url, &s.token)
    }

    /// `datanotes mcp` relaying to the server at `url`.
    fn start_at(url: &str, token: &str) -> Stdio {
        use std::io::BufRead;
        let mut child = std::process::Command::new(bin())
            .args(["mcp", "--url", url, "--token", token])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start datanotes mcp");
        let out = std::io::BufReader::new(child.stdout.take().unwrap());
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for l in out.lines().map_while(Result::ok) {
                let _ = tx.send(l);
            }
        });
        Stdio { child, lines }
    }

    /// Sends `initialize` (protocol 2025-11-25) as request `id`: every line up to its answer.
    fn initialize(&mut self, id: u64) -> Vec<String> {
        self.send(
            json!({"jsonrpc": "2.0", "id": id, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "raw-stdio", "version": "1"}}}),
        );
        self.until_answer(id)
    }

    fn send(&mut self, msg: Value) {
        self.write_line(&msg.to_string());
    }

    /// Writes `line` on the relay's stdin as it is (JSON or not).
    fn write_line(&mut self, line: &str) {
        use std::io::Write;
        let stdin = self.child.stdin.as_mut().unwrap();
        writeln!(stdin, "{line}").unwrap();
        stdin.flush().unwrap();
    }

    /// The next message the relay writes (its line, and as JSON).
    fn next(&self) -> (String, Value) {
        let line = self
            .lines
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("an answer");
        let v = serde_json::from_str(&line).unwrap();
        (line, v)
    }

    /// Every line written up to the answer to `id`, that answer last.
    fn until_answer(&self, id: u64) -> Vec<String> {
        let mut got = vec![];
        loop {
            let l = self
                .lines
                .recv_timeout(std::time::Duration::from_secs(10))
                .unwrap_or_else(|_| panic!("no answer to {id} in {got:?}"));
            let v: Value = serde_json::from_str(&l).unwrap();
            got.push(l);
            if v["id"] == id && v.get("method").is_none() {
                return got;
            }
        }
    }
}

impl Drop for Stdio {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Over stdio too, what the app wrote reaches the client as written, in both protocol eras.
#[test]
fn an_apps_numbers_reach_a_stdio_client_as_the_app_wrote_them() {
    let s = Server::start();
    let rt = mcp::runtime();
    exact_app(&s, &rt);
    let mut io = Stdio::start(&s);
    let init = io.initialize(1);
    assert!(
        init.last()
            .unwrap()
            .contains("\"protocolVersion\":\"2025-11-25\""),
        "{init:?}"
    );
    io.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    io.send(
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "exact_numbers", "arguments": {}, "_meta": {"progressToken": "p"}}}),
    );
    let text = io.until_answer(2).join("\n");
    assert_eq!(
        spelled(&text),
        ["priority: 1", "progress: 1", "total: 2"],
        "{text}"
    );

    // A client of 2026-07-28 (no session): its call, with the headers that version asks for.
    let mut meta = meta_2026();
    meta["progressToken"] = json!("q");
    io.send(
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
        "name": "exact_numbers", "arguments": {}, "_meta": meta}}),
    );
    let lines = io.until_answer(3);
    let text = lines.join("\n");
    assert_eq!(
        spelled(&text),
        ["priority: 1", "progress: 1", "total: 2"],
        "{text}"
    );
    let answer: Value = serde_json::from_str(lines.last().unwrap()).unwrap();
    let mut expected = app_result();
    expected["resultType"] = json!("complete");
    assert_eq!(answer["result"], expected, "{text}");
}

/// A client that closes stdin right after asking (`echo ... | datanotes mcp`) still gets its
/// answers, as the app wrote them, before the relay exits.
#[test]
fn answers_owed_when_stdin_closes_are_written_before_the_relay_exits() {
    let s = Server::start();
    let rt = mcp::runtime();
    exact_app(&s, &rt);
    let mut io = Stdio::start(&s);
    io.initialize(1);
    io.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    let call = |id: u64, name: &str| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
            "name": name, "arguments": {}}})
    };
    io.send(call(2, "exact_slow"));
    io.send(call(3, "exact_numbers"));
    drop(io.child.stdin.take());
    let mut answered = vec![];
    while answered.len() < 2 {
        let (line, v) = io.next();
        if v.get("method").is_none() {
            assert_eq!(spelled(&line), ["priority: 1"], "{line}");
            answered.push(v["id"].as_u64().unwrap());
        }
    }
    answered.sort();
    assert_eq!(answered, [2, 3]);
    let status = poll(
        std::time::Duration::from_secs(10),
        std::time::Duration::from_millis(20),
        || io.child.try_wait().unwrap(),
    );
    assert!(status.expect("the relay did not exit").success());
}

/// A 2026-07-28 call through `datanotes mcp` carries, besides its method and name, the
/// arguments its tool's input schema marks with `x-mcp-header` as `Mcp-Param-*` headers
/// (SEP-2243), learned from the listing the relay passed on. Seen by a server that notes the
/// headers it is sent.
#[test]
fn a_2026_call_through_the_relay_carries_its_marked_arguments_as_headers() {
    let rt = mcp::runtime();
    let seen: Arc<std::sync::Mutex<Vec<(String, String)>>> = Arc::default();
    let noted = seen.clone();
    let router = axum::Router::new().route(
        "/mcp",
        axum::routing::post(
            move |headers: axum::http::HeaderMap, body: axum::body::Bytes| {
                let noted = noted.clone();
                async move {
                    let v: Value = serde_json::from_slice(&body).unwrap();
                    let id = v["id"].clone();
                    let result = match v["method"].as_str() {
                        Some("tools/list") => json!({"tools": [{"name": "route",
                            "inputSchema": {"type": "object", "properties": {
                                "region": {"type": "string", "x-mcp-header": "Region"},
                                "note": {"type": "string"}}}}]}),
                        _ => {
                            let mut n = noted.lock().unwrap();
                            for (k, val) in &headers {
                                if k.as_str().starts_with("mcp-") {
                                    n.push((k.to_string(), val.to_str().unwrap().to_string()));
                                }
                            }
                            json!({"content": [{"type": "text", "text": "ok"}]})
                        }
                    };
                    fake_app::rpc(&id, result)
                }
            },
        ),
    );
    let url = fake_app::serve_router(&rt, router);
    let mut io = Stdio::start_at(&url, "t");
    let meta = meta_2026();
    io.send(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": meta}}));
    io.until_answer(1);
    io.send(
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "route", "arguments": {"region": "eu-west", "note": "x"}, "_meta": meta}}),
    );
    io.until_answer(2);
    let mut got = seen.lock().unwrap().clone();
    got.sort();
    assert_eq!(
        got,
        [
            ("mcp-method".to_string(), "tools/call".to_string()),
            ("mcp-name".into(), "route".into()),
            ("mcp-param-region".into(), "eu-west".into()),
            ("mcp-protocol-version".into(), "2026-07-28".into()),
        ]
    );
}

/// A line that is not JSON gets a parse error (naming why), a line over the bound is refused,
/// and the relay goes on.
#[test]
fn a_stdio_line_that_is_not_json_is_answered_and_the_relay_goes_on() {
    let s = Server::start();
    let mut io = Stdio::start(&s);
    io.write_line(r#"{"jsonrpc": "2.0", "id": 1, "method": "#);
    let (line, v) = io.next();
    assert_eq!(v["error"]["code"], -32700, "{line}");
    assert!(
        v["error"]["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("the message is not JSON")),
        "{line}"
    );
    // A line over the bound (8 MiB) is refused, and only that line.
    io.write_line(&"x".repeat((8 << 20) + 10));
    let (line, v) = io.next();
    assert_eq!(v["error"]["code"], -32600, "{line}");
    let init = io.initialize(2);
    assert!(init.last().unwrap().contains("\"result\""), "{init:?}");
}

/// A read whose answer is lost because the engine went away while it answered (killed, and
/// started again on the same address) is posted again by `datanotes mcp` once the engine is
/// back, on a session opened again: the client gets its answer, not an error. (A write is not
/// posted again: it may have been done.)
#[test]
fn a_read_lost_in_an_engine_restart_is_asked_again_by_the_relay() {
    let mut s = Server::start();
    let rt = mcp::runtime();
    exact_app(&s, &rt);
    let addr = s.url.trim_start_matches("http://").to_string();
    let mut io = Stdio::start(&s);
    io.initialize(1);
    io.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    let before = SLOW_READS.load(std::sync::atomic::Ordering::SeqCst);
    io.send(
        json!({"jsonrpc": "2.0", "id": 2, "method": "resources/read",
                   "params": {"uri": "file://exact//n"}}),
    );
    eventually("the app is asked", || {
        SLOW_READS.load(std::sync::atomic::Ordering::SeqCst) > before
    });
    s.kill();
    let dir = s.dir.clone();
    let s2 = Server::start_opts(&dir, &["--listen", &addr], &[]);
    let got = io.until_answer(2);
    let answer: Value = serde_json::from_str(got.last().unwrap()).unwrap();
    assert_eq!(
        answer["result"]["contents"][0]["text"], "slow",
        "the read's answer: {answer}"
    );
    assert!(
        SLOW_READS.load(std::sync::atomic::Ordering::SeqCst) >= before + 2,
        "asked again"
    );
    drop(s2);
}
