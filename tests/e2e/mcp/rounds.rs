//! An app's request during a call, for a client of protocol 2026-07-28 (which takes no request
//! from a server): the call answers an input request (multi round-trip, `InputRequiredResult`)
//! with a `requestState`; the client's answer, sent with its next call, reaches the app, whose
//! call went on waiting, and the result is the app's. A `requestState` that names nothing (made
//! up, or used twice) is refused, and no call reaches the app.

use crate::kit::*;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::oneshot;

/// An app whose tool `asker_name` asks its caller for a name (`elicitation/create`, on the
/// call's stream) and answers with it.
#[derive(Default)]
struct Asker {
    pending: Mutex<HashMap<String, oneshot::Sender<Value>>>,
    calls: Mutex<usize>,
}

impl Asker {
    async fn post(self: Arc<Self>, v: Value) -> Response {
        let id = v["id"].clone();
        let Some(method) = v["method"].as_str() else {
            if let Some(tx) = self
                .pending
                .lock()
                .unwrap()
                .remove(id.as_str().unwrap_or(""))
            {
                let _ = tx.send(v);
            }
            return StatusCode::ACCEPTED.into_response();
        };
        match method {
            "initialize" => {
                fake_app::initialized(&id, "asker", json!({"tools": {}}), "asker-session")
            }
            "tools/list" => fake_app::rpc(
                &id,
                json!({"tools": [{"name": "asker_name", "inputSchema": {"type": "object"}}]}),
            ),
            "tools/call" => {
                *self.calls.lock().unwrap() += 1;
                let (tx, rx) = oneshot::channel();
                self.pending.lock().unwrap().insert("ask-1".into(), tx);
                let ask = json!({"jsonrpc": "2.0", "id": "ask-1", "method": "elicitation/create",
                                 "params": asked()});
                // Progress before it asks and after the answer, with the call's token.
                let token = v["params"]["_meta"]["progressToken"].clone();
                let progress = move |n: u32| {
                    (!token.is_null()).then(|| {
                        json!({"jsonrpc": "2.0", "method": "notifications/progress",
                               "params": {"progressToken": token, "progress": n}})
                        .to_string()
                    })
                };
                let first = [progress(1), Some(ask.to_string())];
                let stream = futures_util::stream::iter(first.into_iter().flatten()).chain(
                    futures_util::stream::once(async move {
                        let answer = rx.await.unwrap_or(Value::Null);
                        let name = answer["result"]["content"]["name"].as_str().unwrap_or("?");
                        let result = json!({"jsonrpc": "2.0", "id": id, "result": {"content": [
                            {"type": "text", "text": format!("hello {name}")}]}});
                        futures_util::stream::iter(
                            [progress(2), Some(result.to_string())]
                                .into_iter()
                                .flatten(),
                        )
                    })
                    .flatten(),
                );
                fake_app::sse(stream)
            }
            _ => StatusCode::ACCEPTED.into_response(),
        }
    }
}

use futures_util::StreamExt;

/// What the asker asks, as it writes it (a number schema's `minimum: 0`: rmcp's type holds it
/// as a float).
fn asked() -> Value {
    json!({"message": "your name?", "requestedSchema": {"type": "object", "properties": {
        "name": {"type": "string"}, "score": {"type": "number", "minimum": 0}}}})
}

/// A stateless request of protocol 2026-07-28 to `/mcp`: its JSON-RPC answer.
fn ask(s: &Server, id: u64, method: &str, params: Value) -> Value {
    let all = ask_all(s, id, method, params, None);
    all.last().cloned().expect("an answer")
}

/// A stateless request of protocol 2026-07-28 to `/mcp`, with a progress `token`: every
/// message of its answer.
fn ask_all(s: &Server, _id: u64, method: &str, params: Value, token: Option<&str>) -> Vec<Value> {
    let caps = json!({"elicitation": {}});
    mcp::messages_of(mcp::post_2026(s, &s.token, method, params, caps, token))
}

/// Serves the asker app and registers it; answers the app.
fn asker(s: &Server, rt: &tokio::runtime::Runtime) -> Arc<Asker> {
    let app = Arc::new(Asker::default());
    let a = app.clone();
    let post: fake_app::Post = Arc::new(move |v| Box::pin(a.clone().post(v)));
    let url = fake_app::serve(rt, post, None);
    create_app(s, json!({"name": "asker", "mcp_url": url}));
    eventually("asker's tool is listed", || {
        s.ok_route("apps/get", json!({"name": "asker"}))["app"]["tools"]
            .as_array()
            .is_some_and(|t| !t.is_empty())
    });
    app
}

/// The app's progress goes with the request of its round: before it asks, on the request that
/// started the call (its token); after the answer, on the request that brought it (its own).
#[test]
fn an_apps_progress_follows_the_round_of_a_2026_call() {
    let s = Server::start();
    let rt = mcp::runtime();
    asker(&s, &rt);
    let progress = |all: &[Value]| -> Vec<Value> {
        all.iter()
            .filter(|m| m["method"] == "notifications/progress")
            // As the app wrote it (rmcp's progress type holds the number as a float).
            .map(|m| json!([m["params"]["progressToken"], m["params"]["progress"]]))
            .collect()
    };
    let call = json!({"name": "asker_name", "arguments": {}});
    let first = ask_all(&s, 1, "tools/call", call, Some("p1"));
    assert_eq!(progress(&first), [json!(["p1", 1])], "{first:?}");
    let result = &first.last().unwrap()["result"];
    let key = result["inputRequests"]
        .as_object()
        .unwrap()
        .keys()
        .next()
        .unwrap();
    let again = json!({"name": "asker_name", "arguments": {},
        "requestState": result["requestState"],
        "inputResponses": {key: {"action": "accept", "content": {"name": "Ada"}}}});
    let second = ask_all(&s, 2, "tools/call", again, Some("p2"));
    assert_eq!(progress(&second), [json!(["p2", 2])], "{second:?}");
    assert_eq!(
        second.last().unwrap()["result"]["content"][0]["text"],
        "hello Ada",
        "{second:?}"
    );
}

#[test]
fn an_apps_request_reaches_a_2026_client_as_an_input_request() {
    let s = Server::start();
    let rt = mcp::runtime();
    let app = asker(&s, &rt);

    let r = ask(
        &s,
        1,
        "tools/call",
        json!({"name": "asker_name", "arguments": {}}),
    );
    let result = &r["result"];
    assert_eq!(result["resultType"], "input_required", "{r}");
    let requests = result["inputRequests"].as_object().expect("inputRequests");
    assert_eq!(requests.len(), 1, "{r}");
    let (key, request) = requests.iter().next().unwrap();
    assert_eq!(request["method"], "elicitation/create", "{r}");
    assert_eq!(request["params"], asked(), "as the app wrote it: {r}");
    let state = result["requestState"]
        .as_str()
        .expect("requestState")
        .to_string();

    // A state that names nothing: refused, and nothing reaches the app.
    let r = ask(
        &s,
        2,
        "tools/call",
        json!({"name": "asker_name", "arguments": {}, "requestState": "made-up",
               "inputResponses": {key: {"action": "accept", "content": {"name": "Eve"}}}}),
    );
    assert_eq!(r["error"]["code"], -32602, "{r}");
    assert_eq!(*app.calls.lock().unwrap(), 1);

    // The answer goes to the app, whose call went on: its result.
    let r = ask(
        &s,
        3,
        "tools/call",
        json!({"name": "asker_name", "arguments": {}, "requestState": state,
               "inputResponses": {key: {"action": "accept", "content": {"name": "Ada"}}}}),
    );
    assert_eq!(r["result"]["content"][0]["text"], "hello Ada", "{r}");
    assert_eq!(*app.calls.lock().unwrap(), 1, "the call was made once");

    // The same state again names nothing.
    let r = ask(
        &s,
        4,
        "tools/call",
        json!({"name": "asker_name", "arguments": {}, "requestState": state,
               "inputResponses": {key: {"action": "accept", "content": {"name": "Ada"}}}}),
    );
    assert_eq!(r["error"]["code"], -32602, "{r}");
}
