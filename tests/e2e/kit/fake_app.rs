//! A small MCP server written in a test, served on 127.0.0.1 with axum: the test says how to
//! answer each JSON-RPC message `POST`ed to `/mcp`, and what the standalone stream (`GET`)
//! carries. For the remote-app tests that need an app to misbehave or to show what it
//! received (`mcp_relay`, `mcp_cancel`, `mcp_resources`, `mcp_hostile_content`).

use axum::body::Body;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use futures_util::future::BoxFuture;
use serde_json::{Value, json};
use std::sync::Arc;

/// A JSON-RPC result, as one `application/json` answer.
pub fn rpc(id: &Value, result: Value) -> Response {
    let v = json!({"jsonrpc": "2.0", "id": id, "result": result});
    ([("content-type", "application/json")], v.to_string()).into_response()
}

/// A JSON-RPC error, as one `application/json` answer.
pub fn rpc_error(id: &Value, code: i64, message: &str, data: Option<Value>) -> Response {
    let mut e = json!({"code": code, "message": message});
    if let Some(d) = data {
        e["data"] = d;
    }
    let v = json!({"jsonrpc": "2.0", "id": id, "error": e});
    ([("content-type", "application/json")], v.to_string()).into_response()
}

/// An answer of `initialize` for a server of `name` with `capabilities`, naming `session`.
pub fn initialized(id: &Value, name: &str, capabilities: Value, session: &str) -> Response {
    let mut r = rpc(
        id,
        json!({"protocolVersion": "2025-06-18", "capabilities": capabilities,
               "serverInfo": {"name": name, "version": "1.0.0"}}),
    );
    r.headers_mut()
        .insert("mcp-session-id", session.parse().unwrap());
    r
}

/// An SSE answer whose events are the messages of `stream`, each one `data:` line.
pub fn sse(stream: impl futures_util::Stream<Item = String> + Send + 'static) -> Response {
    use futures_util::StreamExt;
    let events = stream.map(|m| Ok::<_, std::convert::Infallible>(format!("data: {m}\n\n")));
    (
        [("content-type", "text/event-stream")],
        Body::from_stream(events),
    )
        .into_response()
}

/// The messages of a broadcast channel, as a stream (those it lagged behind skipped).
pub fn stream_of<T: Clone + Send + 'static>(
    rx: tokio::sync::broadcast::Receiver<T>,
) -> impl futures_util::Stream<Item = T> {
    futures_util::stream::unfold(rx, |mut rx| async move {
        loop {
            match rx.recv().await {
                Ok(m) => return Some((m, rx)),
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                Err(_) => return None,
            }
        }
    })
}

/// How the app answers a message `POST`ed to it.
pub type Post = Arc<dyn Fn(Value) -> BoxFuture<'static, Response> + Send + Sync>;

/// How the app answers a message `POST`ed to it, seeing the request's headers too.
pub type PostSeeing =
    Arc<dyn Fn(axum::http::HeaderMap, Value) -> BoxFuture<'static, Response> + Send + Sync>;

/// Serves the app on `rt`; answers its `/mcp` address. `push`: what its standalone stream
/// carries (each message as sent), else `GET` is refused (405).
pub fn serve(
    rt: &tokio::runtime::Runtime,
    post: Post,
    push: Option<tokio::sync::broadcast::Sender<String>>,
) -> String {
    serve_seeing(rt, Arc::new(move |_, v| post(v)), push)
}

/// [`serve`], for an app that reads each request's headers.
pub fn serve_seeing(
    rt: &tokio::runtime::Runtime,
    post: PostSeeing,
    push: Option<tokio::sync::broadcast::Sender<String>>,
) -> String {
    let router = axum::Router::new().route(
        "/mcp",
        axum::routing::post(
            move |headers: axum::http::HeaderMap, body: axum::body::Bytes| {
                let post = post.clone();
                async move {
                    post(
                        headers,
                        serde_json::from_slice(&body).unwrap_or(Value::Null),
                    )
                    .await
                }
            },
        )
        .get(move || {
            let rx = push.as_ref().map(|p| p.subscribe());
            async move {
                let Some(rx) = rx else {
                    return StatusCode::METHOD_NOT_ALLOWED.into_response();
                };
                sse(stream_of(rx))
            }
        })
        .delete(|| async { StatusCode::OK }),
    );
    format!("{}/mcp", serve_router(rt, router))
}

/// Serves `router` on 127.0.0.1 (on `rt`); answers its address, `http://127.0.0.1:<port>`.
pub fn serve_router(rt: &tokio::runtime::Runtime, router: axum::Router) -> String {
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let addr = listener.local_addr().unwrap();
    rt.spawn(async move { axum::serve(listener, router).await });
    format!("http://{addr}")
}

/// Lets `d` pass before the fake app goes on: a slow app, or one whose next message comes
/// later. The fake apps' one delay, and no wait on the engine: what it stands for is time
/// passing at the peer, which no event of the engine's could replace.
pub async fn take_time(d: std::time::Duration) {
    tokio::time::sleep(d).await;
}

/// A remote app whose `tools/list` answers the tools the test holds in `tools` now, and whose
/// `tools/call` answers `ran "<name>"` (the name it was called by); served on `rt`.
pub fn tool_app(rt: &tokio::runtime::Runtime, tools: Arc<std::sync::Mutex<Vec<Value>>>) -> String {
    let post: Post = Arc::new(move |v: Value| {
        let tools = tools.clone();
        Box::pin(async move {
            let id = v["id"].clone();
            match v["method"].as_str().unwrap_or("") {
                "initialize" => {
                    initialized(&id, "tools", json!({"tools": {"listChanged": true}}), "s-1")
                }
                "tools/list" => rpc(&id, json!({"tools": *tools.lock().unwrap()})),
                "tools/call" => {
                    let text = format!("ran {}", v["params"]["name"]);
                    rpc(&id, json!({"content": [{"type": "text", "text": text}]}))
                }
                _ if id.is_null() => StatusCode::ACCEPTED.into_response(),
                _ => rpc(&id, json!({})),
            }
        })
    });
    serve(rt, post, None)
}

/// A tool as an app lists it: string parameters with their descriptions.
pub fn tool(name: &str, description: &str, params: &[(&str, &str)]) -> Value {
    let props: serde_json::Map<String, Value> = params
        .iter()
        .map(|(p, d)| (p.to_string(), json!({"type": "string", "description": d})))
        .collect();
    json!({"name": name, "description": description,
           "inputSchema": {"type": "object", "properties": props}})
}
