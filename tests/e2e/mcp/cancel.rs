//! A client that cancels a call of a remote app's tool stops it: the app receives
//! `notifications/cancelled` for its own request, whichever path the call took through `/mcp`
//! (rmcp's, for a call with a progress token; the lean JSON path otherwise), the call's
//! `tool_call` event records it as cancelled, and the next call is served as usual.
//!
//! The app is a small MCP server written here on axum: its tool `slow_wait` answers only when
//! told to, and it notes every request id it was sent and every cancellation it received.

use crate::kit::mcp::{call_cancellable, connect_on};
use crate::kit::*;
use axum::body::Body;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use rmcp::model::CallToolRequestParams;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What the app saw: the ids of its `tools/call` requests and of the cancellations it got.
#[derive(Default)]
struct Seen {
    calls: Vec<Value>,
    cancelled: Vec<(Value, Instant)>,
}

async fn post(seen: Arc<Mutex<Seen>>, body: Value) -> Response {
    let id = body.get("id").cloned().unwrap_or(Value::Null);
    match body.get("method").and_then(Value::as_str).unwrap_or("") {
        "initialize" => fake_app::initialized(&id, "slow", json!({"tools": {}}), "slow-session"),
        "tools/list" => fake_app::rpc(
            &id,
            json!({"tools": [
            {"name": "slow_wait", "description": "waits", "inputSchema": {"type": "object",
             "properties": {"ms": {"type": "integer"}}}}]}),
        ),
        "tools/call" => {
            seen.lock().unwrap().calls.push(id.clone());
            let ms = body.pointer("/params/arguments/ms").and_then(Value::as_u64);
            let ms = ms.unwrap_or(60_000);
            let answer = async move {
                fake_app::take_time(Duration::from_millis(ms)).await;
                let r = json!({"jsonrpc": "2.0", "id": id, "result": {
                    "content": [{"type": "text", "text": format!("waited {ms} ms")}]}});
                Ok::<_, std::convert::Infallible>(format!("data: {r}\n\n"))
            };
            (
                [("content-type", "text/event-stream")],
                Body::from_stream(futures_util::stream::once(answer)),
            )
                .into_response()
        }
        "notifications/cancelled" => {
            let rid = body.pointer("/params/requestId").cloned();
            let rid = rid.unwrap_or(Value::Null);
            seen.lock().unwrap().cancelled.push((rid, Instant::now()));
            StatusCode::ACCEPTED.into_response()
        }
        _ => StatusCode::ACCEPTED.into_response(),
    }
}

/// Serves the app on 127.0.0.1 (on `rt`); answers its `/mcp` address.
fn serve_app(rt: &tokio::runtime::Runtime, seen: Arc<Mutex<Seen>>) -> String {
    let post: fake_app::Post = Arc::new(move |v| Box::pin(post(seen.clone(), v)));
    fake_app::serve(rt, post, None)
}

/// The last `tool_call` events of the feed.
fn tool_calls(s: &Server, since: i64) -> Vec<Value> {
    let page = s.ok_route("changes", json!({"since": since, "ops": ["tool_call"]}));
    page["changes"].as_array().cloned().unwrap_or_default()
}

#[test]
fn a_cancelled_call_reaches_the_remote_app_on_both_paths() {
    let s = Server::start();
    let rt = runtime();
    let seen = Arc::new(Mutex::new(Seen::default()));
    let url = serve_app(&rt, seen.clone());
    create_app(&s, json!({"name": "slow", "mcp_url": url}));
    let c = connect_on(&rt, &format!("{}/mcp", s.url), Some(&s.token), None);
    eventually("the app's tool is listed", || {
        rt.block_on(c.list_all_tools())
            .unwrap()
            .iter()
            .any(|t| t.name == "slow_wait")
    });

    for progress in [false, true] {
        let since = s.seq();
        let before = seen.lock().unwrap().calls.len();
        let handle = call_cancellable(&rt, &c, "slow_wait", progress);
        eventually("the app got the call", || {
            seen.lock().unwrap().calls.len() > before
        });
        let cancelled_at = Instant::now();
        rt.block_on(handle.cancel(Some("changed my mind".into())))
            .unwrap();
        eventually("the app is told", || {
            seen.lock().unwrap().cancelled.len() > before
        });
        let g = seen.lock().unwrap();
        let (rid, at) = g.cancelled.last().cloned().unwrap();
        assert_eq!(
            &rid,
            g.calls.last().unwrap(),
            "the app's own request id (progress: {progress})"
        );
        assert!(
            at.duration_since(cancelled_at) < Duration::from_secs(2),
            "told within 2 s: {:?}",
            at.duration_since(cancelled_at)
        );
        drop(g);
        // The event records the call as cancelled, with how long it ran.
        eventually("the cancelled call's event", || {
            tool_calls(&s, since)
                .iter()
                .any(|e| e["call"]["cancelled"] == true)
        });
        let events = tool_calls(&s, since);
        let e = events
            .iter()
            .find(|e| e["call"]["cancelled"] == true)
            .unwrap();
        assert_eq!(e["call"]["tool"], "slow_wait", "{e}");
        assert_eq!(e["call"]["servedBy"], "slow", "{e}");
        assert_eq!(e["call"]["ok"], false, "{e}");
        assert!(e["call"]["durationMs"].as_f64().unwrap() < 30_000.0, "{e}");
    }

    // The next call is served as usual, and its event is no cancelled one.
    let since = s.seq();
    let r = rt
        .block_on(
            c.call_tool(
                CallToolRequestParams::new("slow_wait")
                    .with_arguments(json!({"ms": 1}).as_object().unwrap().clone()),
            ),
        )
        .unwrap();
    assert_eq!(text(&r), "waited 1 ms");
    eventually("its event", || !tool_calls(&s, since).is_empty());
    let e = &tool_calls(&s, since)[0];
    assert!(e["call"].get("cancelled").is_none(), "{e}");
    assert_eq!(seen.lock().unwrap().cancelled.len(), 2);
}

/// The SSE events of a body: (id, data) pairs.
fn sse_events(body: &str) -> Vec<(String, String)> {
    let mut out = vec![];
    for block in body.split("\n\n") {
        let mut id = String::new();
        let mut data = String::new();
        for line in block.lines() {
            if let Some(v) = line.strip_prefix("id:") {
                id = v.trim().to_string();
            } else if let Some(v) = line.strip_prefix("data:") {
                data.push_str(v.trim());
            }
        }
        if !id.is_empty() {
            out.push((id, data));
        }
    }
    out
}

#[test]
fn a_resumed_stream_carries_only_the_events_after_the_last_one_seen() {
    let s = Server::start();
    let rt = runtime();
    let seen = Arc::new(Mutex::new(Seen::default()));
    let url = serve_app(&rt, seen.clone());
    create_app(&s, json!({"name": "slow", "mcp_url": url}));
    let session = mcp::RawSession::open(&s, &s.token, "2025-06-18");
    let sid = &session.id;
    eventually("the app's tool is listed", || {
        session
            .post(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}))
            .text()
            .unwrap()
            .contains("slow_wait")
    });
    // A call with a progress token: an SSE answer, each event with its id. The client reads
    // its first event and loses the connection.
    let mut resp = session.post(
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
            "name": "slow_wait", "arguments": {"ms": 1500}, "_meta": {"progressToken": "p"}}}),
    );
    let mut head = Vec::new();
    let mut buf = [0u8; 1];
    while !head.ends_with(b"\n\n") {
        use std::io::Read;
        assert_eq!(resp.read(&mut buf).unwrap(), 1, "the first event");
        head.push(buf[0]);
    }
    drop(resp);
    let first = sse_events(&String::from_utf8(head).unwrap());
    let (last, _) = first.last().cloned().expect("an event with an id");
    // Resumed after it: the events after it, up to the result, and not it again.
    let again = session
        .http
        .get(&session.url)
        .bearer_auth(&s.token)
        .header("accept", "text/event-stream")
        .header("mcp-session-id", sid)
        .header("last-event-id", &last)
        .timeout(Duration::from_secs(10))
        .send()
        .unwrap()
        .text()
        .unwrap_or_default();
    let again = sse_events(&again);
    assert!(
        again.iter().all(|(id, _)| id != &last),
        "{last} is not sent again: {again:?}"
    );
    assert!(
        again.iter().any(|(_, d)| d.contains("waited 1500 ms")),
        "the result comes on the resumed stream: {again:?}"
    );
}
