//! What a remote app sends while its tool runs reaches the `/mcp` client of the call: its log
//! messages (at or above the level the client set), its progress (with the client's token), and
//! its sampling and elicitation requests, whose answers come back to the app; a client that did
//! not declare sampling (or a call over HTTP `apps/call/`) gets a clear error, not a hang.
//!
//! The app is a small MCP server written here on axum (streamable HTTP, one SSE answer per
//! call): like the official SDKs' servers, it sends the log messages of a call on the call's own
//! stream, which rmcp's server does not (it sends them on the session's GET stream).
#![allow(deprecated)] // MCP logging (SEP-2577 deprecates it; clients still use it)

use crate::kit::*;
use crate::mcp::RawSession;
use axum::body::Body;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use rmcp::model::{
    CallToolRequestParams, ClientCapabilities, ClientInfo, CreateMessageRequestParams,
    CreateMessageResult, ElicitRequestParams, ElicitResult, Implementation, LoggingLevel,
    LoggingMessageNotificationParam, ProgressNotificationParam, SamplingMessage,
    SetLevelRequestParams,
};
use rmcp::service::{NotificationContext, RequestContext};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{ErrorData, RoleClient, ServiceExt};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// The app: answers waiting for the engine to post them, by request id.
#[derive(Default)]
struct Chatty {
    pending: Mutex<HashMap<String, oneshot::Sender<Value>>>,
    /// Every answer the engine posted, as received.
    answers: Mutex<Vec<Value>>,
}

fn rpc(v: Value) -> Response {
    ([("content-type", "application/json")], v.to_string()).into_response()
}

impl Chatty {
    async fn post(self: Arc<Self>, body: Value) -> Response {
        let id = body.get("id").cloned().unwrap_or(Value::Null);
        let Some(method) = body.get("method").and_then(Value::as_str) else {
            // The engine's answer to one of our requests.
            self.answers.lock().unwrap().push(body.clone());
            if let Some(tx) = self
                .pending
                .lock()
                .unwrap()
                .remove(id.as_str().unwrap_or(""))
            {
                let _ = tx.send(body);
            }
            return StatusCode::ACCEPTED.into_response();
        };
        match method {
            "initialize" => {
                let mut r = rpc(json!({"jsonrpc": "2.0", "id": id, "result": {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {"tools": {}, "logging": {}},
                    "serverInfo": {"name": "chatty", "version": "1.0.0"}}}));
                r.headers_mut()
                    .insert("mcp-session-id", "chatty-session".parse().unwrap());
                r
            }
            "tools/list" => {
                let tool = |name: &str| {
                    json!({"name": name, "description": "talks to its caller",
                           "inputSchema": {"type": "object", "properties": {}}})
                };
                rpc(json!({"jsonrpc": "2.0", "id": id, "result": {
                    "tools": [tool("chatty_converse")]}}))
            }
            "tools/call" => {
                let token = body["params"]["_meta"]["progressToken"].clone();
                let (tx, rx) = mpsc::channel::<String>(16);
                tokio::spawn(self.converse(id, token, tx));
                let events = futures_util::stream::unfold(rx, |mut rx| async move {
                    let m = rx.recv().await?;
                    Some((
                        Ok::<_, std::convert::Infallible>(format!("data: {m}\n\n")),
                        rx,
                    ))
                });
                (
                    [("content-type", "text/event-stream")],
                    Body::from_stream(events),
                )
                    .into_response()
            }
            _ => StatusCode::ACCEPTED.into_response(),
        }
    }

    /// The tool: log, progress, sampling, log, progress, elicitation, log, progress, result.
    async fn converse(self: Arc<Self>, id: Value, token: Value, tx: mpsc::Sender<String>) {
        let send = |v: Value| {
            let tx = tx.clone();
            async move {
                let _ = tx.send(v.to_string()).await;
            }
        };
        let log = |level: &str, data: &str| {
            json!({"jsonrpc": "2.0", "method": "notifications/message",
                   "params": {"level": level, "data": data}})
        };
        let progress = |n: u32| {
            json!({"jsonrpc": "2.0", "method": "notifications/progress",
                   "params": {"progressToken": token, "progress": n, "total": 3}})
        };
        let ask = |rid: &str, method: &str, params: Value| {
            let (atx, arx) = oneshot::channel();
            self.pending.lock().unwrap().insert(rid.to_string(), atx);
            let msg = json!({"jsonrpc": "2.0", "id": rid, "method": method, "params": params});
            let send = send(msg);
            async move {
                send.await;
                tokio::time::timeout(Duration::from_secs(20), arx)
                    .await
                    .ok()
                    .and_then(Result::ok)
                    .unwrap_or(json!({"error": {"message": "no answer"}}))
            }
        };
        let result = |text: String, error: bool| {
            json!({"jsonrpc": "2.0", "id": id, "result": {
                "content": [{"type": "text", "text": text}], "isError": error}})
        };
        send(log("debug", "too fine to pass")).await;
        send(log("info", "converse started")).await;
        if !token.is_null() {
            send(progress(1)).await;
        }
        let sampled = ask(
            "chatty-sampling",
            "sampling/createMessage",
            json!({"messages": [{"role": "user", "content": {"type": "text", "text": "pick a colour"}}],
                   "maxTokens": 10, "_meta": {"io.test/own": "kept"}}),
        )
        .await;
        if let Some(e) = sampled.get("error") {
            send(result(format!("sampling refused: {}", e["message"]), true)).await;
            return;
        }
        send(log("info", "sampled")).await;
        if !token.is_null() {
            send(progress(2)).await;
        }
        let elicited = ask(
            "chatty-elicitation",
            "elicitation/create",
            json!({"message": "your name?", "requestedSchema": {"type": "object",
                   "properties": {"name": {"type": "string"}}, "required": ["name"]}}),
        )
        .await;
        if let Some(e) = elicited.get("error") {
            send(result(
                format!("elicitation refused: {}", e["message"]),
                true,
            ))
            .await;
            return;
        }
        send(log("warning", "done")).await;
        if !token.is_null() {
            send(progress(3)).await;
        }
        let r = &elicited["result"];
        let text = format!(
            "colour: {}; name: {} ({})",
            sampled["result"]["content"]["text"].as_str().unwrap_or("?"),
            r["content"]["name"].as_str().unwrap_or("?"),
            r["action"].as_str().unwrap_or("?"),
        );
        send(result(text, false)).await;
    }
}

/// Serves the app on 127.0.0.1 (on `rt`); the app, and its `/mcp` address.
fn serve_app(rt: &tokio::runtime::Runtime) -> (Arc<Chatty>, String) {
    let app = Arc::new(Chatty::default());
    let served = app.clone();
    let post: fake_app::Post = Arc::new(move |v| Box::pin(served.clone().post(v)));
    (app, fake_app::serve(rt, post, None))
}

/// The client of the test: declares sampling and elicitation (or not), answers them, and
/// notes everything it receives, in order.
#[derive(Clone)]
struct Listener {
    caps: bool,
    seen: Arc<Mutex<Vec<String>>>,
}

impl Listener {
    fn note(&self, s: String) {
        self.seen.lock().unwrap().push(s);
    }
    fn seen(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }
}

impl rmcp::ClientHandler for Listener {
    async fn create_message(
        &self,
        params: CreateMessageRequestParams,
        c: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, ErrorData> {
        let meta = serde_json::to_string(&c.meta.0.0).unwrap();
        self.note(format!("asked with _meta {meta}"));
        let p = serde_json::to_value(&params).unwrap();
        self.note(format!(
            "sampling: {}",
            p["messages"][0]["content"]["text"].as_str().unwrap_or("")
        ));
        Ok(CreateMessageResult::new(
            SamplingMessage::assistant_text("teal"),
            "test-model".into(),
        ))
    }

    async fn create_elicitation(
        &self,
        params: ElicitRequestParams,
        _c: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        let p = serde_json::to_value(&params).unwrap();
        self.note(format!(
            "elicitation: {}",
            p["message"].as_str().unwrap_or("")
        ));
        Ok(
            serde_json::from_value(json!({"action": "accept", "content": {"name": "Ada"}}))
                .unwrap(),
        )
    }

    async fn on_logging_message(
        &self,
        params: LoggingMessageNotificationParam,
        _c: NotificationContext<RoleClient>,
    ) {
        self.note(format!("log: {}", params.data.as_str().unwrap_or("")));
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _c: NotificationContext<RoleClient>,
    ) {
        self.note(format!("progress: {}", params.progress));
    }

    fn get_info(&self) -> ClientInfo {
        let caps: ClientCapabilities = if self.caps {
            serde_json::from_value(json!({"sampling": {}, "elicitation": {}})).unwrap()
        } else {
            ClientCapabilities::default()
        };
        ClientInfo::new(caps, Implementation::new("relay-test", "1.0.0"))
    }
}

type Client = rmcp::service::RunningService<RoleClient, Listener>;

/// Checks one conversation: the result reflects the client's answers; the log messages at or
/// above info, the progress and the requests arrive, each in order, and after the answers they
/// follow.
fn conversation(
    rt: &tokio::runtime::Runtime,
    l: &Listener,
    c: &Client,
    call: &dyn Fn(&Client) -> rmcp::model::CallToolResult,
) {
    assert!(
        c.peer_info()
            .is_some_and(|i| i.capabilities.logging.is_some())
    );
    rt.block_on(c.set_level(SetLevelRequestParams::new(LoggingLevel::Info)))
        .unwrap();
    let r = call(c);
    assert!(!is_error(&r), "{r:?}");
    assert_eq!(text(&r), "colour: teal; name: Ada (accept)");
    eventually(
        "three log messages and three progress notifications",
        || {
            let seen = l.seen();
            seen.iter().filter(|e| e.starts_with("log")).count() >= 3
                && seen.iter().filter(|e| e.starts_with("progress")).count() >= 3
        },
    );
    let seen = l.seen();
    let logs: Vec<&String> = seen.iter().filter(|e| e.starts_with("log")).collect();
    assert_eq!(
        logs,
        ["log: converse started", "log: sampled", "log: done"],
        "the debug message is under the level: {seen:?}"
    );
    let of = |kind: &str| -> Vec<&String> { seen.iter().filter(|e| e.starts_with(kind)).collect() };
    assert_eq!(
        of("progress"),
        ["progress: 1", "progress: 2", "progress: 3"],
        "{seen:?}"
    );
    assert_eq!(
        [of("sampling"), of("elicitation")].concat(),
        ["sampling: pick a colour", "elicitation: your name?"],
        "{seen:?}"
    );
    // The request as the app wrote it: its own `_meta`, no progress token added (Measured 4).
    assert_eq!(
        of("asked with"),
        [r#"asked with _meta {"io.test/own":"kept"}"#],
        "{seen:?}"
    );
    // In the order the app sent them, as far as the client can tell: what the app sent after
    // an answer comes after the request (a client's handlers run in tasks of their own, so
    // messages sent back to back may be noted in either order).
    let at = |what: &str| seen.iter().position(|e| e == what).unwrap();
    let sampling = at("sampling: pick a colour");
    let elicitation = at("elicitation: your name?");
    assert!(at("log: converse started") < elicitation, "{seen:?}");
    assert!(at("progress: 1") < elicitation, "{seen:?}");
    assert!(
        sampling < at("progress: 2") && sampling < at("log: sampled"),
        "{seen:?}"
    );
    assert!(
        elicitation < at("progress: 3") && elicitation < at("log: done"),
        "{seen:?}"
    );
}

#[test]
fn an_apps_logs_progress_sampling_and_elicitation_reach_the_mcp_client() {
    let s = Server::start();
    let rt = runtime();
    let (_, url) = serve_app(&rt);
    create_app(&s, json!({"name": "chatty", "mcp_url": url}));

    let connect = |caps: bool| {
        let l = Listener {
            caps,
            seen: Default::default(),
        };
        let cfg = transport_config(&format!("{}/mcp", s.url), Some(&s.token), None);
        // The transport spawns its worker: made inside the runtime.
        let c = rt
            .block_on(async {
                l.clone()
                    .serve(StreamableHttpClientTransport::from_config(cfg))
                    .await
            })
            .unwrap();
        (l, c)
    };
    let call = |c: &Client| {
        let p = CallToolRequestParams::new("chatty_converse");
        rt.block_on(async {
            tokio::time::timeout(Duration::from_secs(30), c.call_tool(p))
                .await
                .expect("the call ends (no hang)")
                .expect("tools/call")
        })
    };

    // A client that declared sampling and elicitation and asked for info and above.
    let (l, c) = connect(true);
    conversation(&rt, &l, &c, &call);
    rt.block_on(c.cancel()).unwrap();

    // The same through `datanotes mcp`, as a desktop client.
    let l = Listener {
        caps: true,
        seen: Default::default(),
    };
    let (desk, mut child) = rt.block_on(async {
        let mut child = tokio::process::Command::new(bin())
            .args(["mcp", "--url", &s.url, "--token", &s.token])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("start datanotes mcp");
        let (i, o) = (child.stdin.take().unwrap(), child.stdout.take().unwrap());
        (l.clone().serve((o, i)).await.unwrap(), child)
    });
    conversation(&rt, &l, &desk, &call);
    rt.block_on(async {
        let _ = desk.cancel().await;
        let _ = child.kill().await;
    });

    // A client that declared neither: the app is refused at once, and says so.
    let (l, c) = connect(false);
    let r = call(&c);
    assert!(is_error(&r), "{r:?}");
    let t = text(&r);
    assert!(
        t.contains("sampling refused")
            && t.contains("cannot answer sampling/createMessage")
            && t.contains("declared the sampling capability"),
        "{t}"
    );
    assert!(!l.seen().iter().any(|e| e.starts_with("sampling")));
    assert!(
        !l.seen().iter().any(|e| e.starts_with("log")),
        "no level set: no log messages"
    );
    rt.block_on(c.cancel()).unwrap();

    // Over HTTP there is no MCP client to ask: the same clear refusal.
    let (st, v) = s.post(
        "/datanotes/apps/call/",
        Some(&s.token),
        &json!({"tool": "chatty_converse", "arguments": {}}),
    );
    assert_eq!(st, 200, "{v}");
    let t = v.to_string();
    assert!(
        t.contains("sampling refused") && t.contains("declared the sampling capability"),
        "{t}"
    );
}

/// The client's answer to an app's request reaches the app as the client wrote it: its fields
/// in its order, and a field rmcp's types do not model (rmcp reads a client's answer into its
/// own types; the door keeps the answer as written for the app).
#[test]
fn the_clients_answer_reaches_the_app_as_the_client_wrote_it() {
    use std::io::BufRead;
    let s = Server::start();
    let rt = runtime();
    let (app, url) = serve_app(&rt);
    create_app(&s, json!({"name": "chatty", "mcp_url": url}));
    let raw = RawSession::open_with(&s, json!({"sampling": {}, "elicitation": {}}), "2025-06-18");
    let sampled: Value = serde_json::from_str(
        r#"{"role":"assistant","x-extra":{"b":1,"a":2.50},"content":{"type":"text","text":"teal"},"model":"m-1","stopReason":"endTurn"}"#,
    )
    .unwrap();
    // The client declared sampling: the call's answer streams, with the app's requests in it.
    let call = raw.post(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "chatty_converse", "arguments": {}}}));
    let mut result = None;
    let mut asked = vec![];
    for line in std::io::BufReader::new(call).lines() {
        let line = line.unwrap();
        let Some(data) = line.strip_prefix("data:").map(str::trim) else {
            continue;
        };
        let Ok(msg) = serde_json::from_str::<Value>(data) else {
            continue;
        };
        let answer = match msg["method"].as_str() {
            Some("sampling/createMessage") => sampled.clone(),
            Some("elicitation/create") => json!({"action": "accept", "content": {"name": "Ada"}}),
            Some(_) => continue,
            None if msg["id"] == 2 => {
                result = Some(msg);
                break;
            }
            None => continue,
        };
        asked.push(msg["params"].clone());
        let r = raw.post(json!({"jsonrpc": "2.0", "id": msg["id"], "result": answer}));
        assert!(r.status().is_success(), "{}", r.status());
    }
    let result = result.expect("the call's answer");
    assert_eq!(
        result["result"]["content"][0]["text"], "colour: teal; name: Ada (accept)",
        "{result}"
    );
    assert_eq!(asked.len(), 2, "{asked:?}");
    assert_eq!(
        asked[0]["_meta"],
        json!({"io.test/own": "kept"}),
        "{asked:?}"
    );
    assert!(asked[1].get("_meta").is_none(), "{asked:?}");
    let answers = app.answers.lock().unwrap().clone();
    let got = answers
        .iter()
        .find(|a| a["id"] == "chatty-sampling")
        .expect("the app got the sampling answer");
    assert_eq!(
        serde_json::to_string(&got["result"]).unwrap(),
        serde_json::to_string(&sampled).unwrap(),
        "as the client wrote it, field for field and in order"
    );
}
