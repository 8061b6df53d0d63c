//! The one MCP client of the tests and the bench: rmcp's client over streamable HTTP, made
//! blocking by [`Agent`] (its own runtime), or on a runtime of the caller ([`connect_on`]).

use super::Server;
use rmcp::model::{CallToolRequestParams, CallToolResult, Tool};
use rmcp::service::RunningService;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{RoleClient, ServiceExt};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A runtime for a blocking client: one worker thread.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap()
}

/// The transport's settings: the address, a bearer token and an actor header, when given.
pub fn transport_config(
    url: &str,
    token: Option<&str>,
    actor: Option<&str>,
) -> StreamableHttpClientTransportConfig {
    let mut cfg = StreamableHttpClientTransportConfig::with_uri(url.to_string());
    if let Some(t) = token {
        cfg = cfg.auth_header(t.to_string());
    }
    if let Some(a) = actor {
        cfg = cfg.custom_headers(HashMap::from([(
            http::HeaderName::from_static("x-datanotes-actor"),
            a.parse().unwrap(),
        )]));
    }
    cfg
}

/// Opens an MCP session (initialize, initialized) on `rt`, which then drives it: the transport
/// spawns its worker, so it must be made inside the runtime.
pub fn connect_on(
    rt: &tokio::runtime::Runtime,
    url: &str,
    token: Option<&str>,
    actor: Option<&str>,
) -> RunningService<RoleClient, ()> {
    let cfg = transport_config(url, token, actor);
    rt.block_on(async { ().serve(StreamableHttpClientTransport::from_config(cfg)).await })
        .unwrap_or_else(|e| panic!("MCP connect to {url}: {e}"))
}

/// The agent's side of a session: counts the server's `notifications/tools/list_changed`.
#[derive(Clone, Default)]
pub struct Notes(Arc<AtomicUsize>);

impl rmcp::ClientHandler for Notes {
    async fn on_tool_list_changed(&self, _c: rmcp::service::NotificationContext<RoleClient>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// A blocking MCP client (rmcp) with its own runtime, as an agent would use one; the session is
/// closed on drop. It counts the `list_changed` notifications it receives.
pub struct Agent {
    rt: tokio::runtime::Runtime,
    client: Option<RunningService<RoleClient, Notes>>,
    notes: Notes,
}

impl Agent {
    /// A session on any MCP address (the engine's `/mcp`, a remote app's).
    pub fn connect(url: &str, token: Option<&str>, actor: Option<&str>) -> Agent {
        let rt = runtime();
        let notes = Notes::default();
        let cfg = transport_config(url, token, actor);
        // The transport spawns its worker: made inside the runtime.
        let n = notes.clone();
        let client = rt
            .block_on(async {
                n.serve(StreamableHttpClientTransport::from_config(cfg))
                    .await
            })
            .unwrap_or_else(|e| panic!("MCP connect to {url}: {e}"));
        Agent {
            rt,
            client: Some(client),
            notes,
        }
    }

    /// How many `notifications/tools/list_changed` the session has received.
    pub fn list_changed(&self) -> usize {
        self.notes.0.load(Ordering::SeqCst)
    }

    /// Whether the server advertised `tools.listChanged` at initialize.
    pub fn advertises_list_changed(&self) -> bool {
        self.client().peer_info().is_some_and(|i| {
            i.capabilities.tools.as_ref().and_then(|t| t.list_changed) == Some(true)
        })
    }

    /// A session on the engine's `/mcp` with a token and an optional actor.
    pub fn engine(s: &Server, token: &str, actor: Option<&str>) -> Agent {
        Agent::connect(&format!("{}/mcp", s.url), Some(token), actor)
    }

    /// A session on the engine's `/mcp` with the owner token.
    pub fn owner(s: &Server) -> Agent {
        Agent::engine(s, &s.token, None)
    }

    fn client(&self) -> &RunningService<RoleClient, Notes> {
        self.client.as_ref().unwrap()
    }

    /// `tools/list`, every page.
    pub fn tools(&self) -> Vec<Tool> {
        self.rt
            .block_on(self.client().list_all_tools())
            .expect("tools/list")
    }

    /// The names of the listed tools, in order.
    pub fn names(&self) -> Vec<String> {
        self.tools().iter().map(|t| t.name.to_string()).collect()
    }

    /// The server's `instructions` from its initialize answer (empty if none).
    pub fn instructions(&self) -> String {
        self.client()
            .peer_info()
            .and_then(|i| i.instructions.clone())
            .unwrap_or_default()
    }

    /// `tools/call` with an object of arguments; panics on a protocol error (a tool's error is
    /// a result: see [`is_error`]).
    /// `tools/call`, its JSON-RPC error as text if it answered one.
    pub fn try_call(&self, tool: &str, args: Value) -> Result<CallToolResult, String> {
        let Value::Object(a) = args else {
            panic!("arguments must be an object")
        };
        let p = CallToolRequestParams::new(tool.to_string()).with_arguments(a);
        self.rt
            .block_on(self.client().call_tool(p))
            .map_err(|e| e.to_string())
    }

    pub fn call(&self, tool: &str, args: Value) -> CallToolResult {
        let Value::Object(a) = args else {
            panic!("arguments must be an object")
        };
        let p = CallToolRequestParams::new(tool.to_string()).with_arguments(a);
        self.rt
            .block_on(self.client().call_tool(p))
            .unwrap_or_else(|e| panic!("tools/call {tool}: {e}"))
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        if let Some(c) = self.client.take() {
            let _ = self.rt.block_on(c.cancel());
        }
    }
}

/// The first text content of a result.
pub fn text(r: &CallToolResult) -> String {
    let v = serde_json::to_value(r).unwrap();
    v["content"][0]["text"].as_str().unwrap_or("").to_string()
}

/// Whether a result is a tool's error.
pub fn is_error(r: &CallToolResult) -> bool {
    r.is_error == Some(true)
}

/// A result's structured content, else its text parsed as JSON (null if it is not JSON).
pub fn structured(r: &CallToolResult) -> Value {
    match &r.structured_content {
        Some(v) => v.clone(),
        None => serde_json::from_str(&text(r)).unwrap_or(Value::Null),
    }
}

/// Sends `tools/call` of `tool` (no arguments) on `c` as a request the caller may cancel
/// (`handle.cancel`): with a progress token when `progress` (the engine then serves it on
/// rmcp's SSE path), else without (its lean JSON path).
pub fn call_cancellable<H: rmcp::ClientHandler>(
    rt: &tokio::runtime::Runtime,
    c: &RunningService<RoleClient, H>,
    tool: &str,
    progress: bool,
) -> rmcp::service::RequestHandle<RoleClient> {
    use rmcp::model::{CallToolRequest, ClientRequest, ProgressToken, RequestId};
    let mut p = CallToolRequestParams::new(tool.to_string());
    if progress {
        let mut meta = p.meta.take().unwrap_or_default();
        meta.set_progress_token(ProgressToken(RequestId::Number(7)));
        p.meta = Some(meta);
    }
    rt.block_on(c.send_cancellable_request(
        ClientRequest::CallToolRequest(CallToolRequest::new(p)),
        rmcp::service::PeerRequestOptions::no_options(),
    ))
    .unwrap_or_else(|e| panic!("tools/call {tool}: {e}"))
}

/// One request of `method` with `params` on `c`, as JSON: its result, or `{"error": ...}` for
/// the server's JSON-RPC error (anything else fails the test).
pub fn ask<H: rmcp::ClientHandler>(
    rt: &tokio::runtime::Runtime,
    c: &RunningService<RoleClient, H>,
    method: &str,
    params: Value,
) -> Value {
    use rmcp::model::{ClientRequest, ServerResult};
    let req: ClientRequest =
        serde_json::from_value(serde_json::json!({"method": method, "params": params})).unwrap();
    match rt.block_on(c.send_request(req)) {
        Ok(ServerResult::CustomResult(r)) => r.0,
        Ok(r) => serde_json::to_value(r).unwrap(),
        Err(rmcp::ServiceError::McpError(e)) => serde_json::json!({"error": e}),
        Err(e) => panic!("{method}: {e}"),
    }
}

/// A request of protocol 2026-07-28 (no session) to the server's `/mcp` with `token`: its
/// client context in `_meta` (declaring `capabilities`, and a progress `token` if any), and the
/// headers that version requires (`Mcp-Method`, `Mcp-Name`: the tool, task or resource it names). The
/// answer is left to read (a stream stays open while read).
pub fn post_2026(
    s: &Server,
    token: &str,
    method: &str,
    mut params: Value,
    capabilities: Value,
    progress: Option<&str>,
) -> reqwest::blocking::Response {
    params["_meta"] = serde_json::json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "e2e-2026", "version": "1.0.0"},
        "io.modelcontextprotocol/clientCapabilities": capabilities,
    });
    if let Some(p) = progress {
        params["_meta"]["progressToken"] = serde_json::json!(p);
    }
    let name = ["name", "taskId", "uri"]
        .iter()
        .find_map(|k| params[*k].as_str());
    let name = name.unwrap_or("").to_string();
    let body = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    reqwest::blocking::Client::new()
        .post(format!("{}/mcp", s.url))
        .bearer_auth(token)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", method)
        .header("mcp-name", name)
        .json(&body)
        .send()
        .unwrap()
}

/// An agent that notes the URIs of the `notifications/resources/updated` it receives.
#[derive(Clone, Default)]
pub struct Updates(pub Arc<std::sync::Mutex<Vec<String>>>);

impl rmcp::ClientHandler for Updates {
    async fn on_resource_updated(
        &self,
        params: rmcp::model::ResourceUpdatedNotificationParam,
        _c: rmcp::service::NotificationContext<RoleClient>,
    ) {
        self.0.lock().unwrap().push(params.uri);
    }
}

/// A `subscriptions/listen` of protocol 2026-07-28 for the resources `uris`, with the owner's
/// token: its stream, open (the acknowledgment first, then the updates).
pub fn listen_2026(s: &Server, uris: &[&str]) -> reqwest::blocking::Response {
    let params = serde_json::json!({"notifications": {"resourceSubscriptions": uris}});
    let r = post_2026(
        s,
        &s.token,
        "subscriptions/listen",
        params,
        serde_json::json!({}),
        None,
    );
    assert_eq!(r.status(), 200, "subscriptions/listen");
    r
}

/// Every JSON-RPC message of an answer: one JSON answer, or each message of its SSE stream.
pub fn messages_of(r: reqwest::blocking::Response) -> Vec<Value> {
    let json = r
        .headers()
        .get("content-type")
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    let text = r.text().unwrap();
    if json {
        return vec![serde_json::from_str(&text).unwrap()];
    }
    text.lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .map(str::trim)
        .filter(|d| d.starts_with('{'))
        .map(|d| serde_json::from_str(d).unwrap())
        .collect()
}

/// An MCP session on the server's `/mcp` spoken raw, as an HTTP client writes it: `initialize`
/// (at `version`), then `notifications/initialized`.
pub struct RawSession {
    pub http: reqwest::blocking::Client,
    /// The server's `/mcp`.
    pub url: String,
    pub token: String,
    /// The session's `Mcp-Session-Id`.
    pub id: String,
}

impl RawSession {
    pub fn open(s: &Server, token: &str, version: &str) -> RawSession {
        let mut session = RawSession {
            http: reqwest::blocking::Client::new(),
            url: format!("{}/mcp", s.url),
            token: token.to_string(),
            id: String::new(),
        };
        let init = session.post(serde_json::json!({"jsonrpc": "2.0", "id": 1,
            "method": "initialize", "params": {"protocolVersion": version, "capabilities": {},
            "clientInfo": {"name": "raw", "version": "1"}}}));
        assert_eq!(init.status(), 200, "initialize");
        session.id = init.headers()["mcp-session-id"]
            .to_str()
            .unwrap()
            .to_string();
        let _ = init.text();
        session.post(serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        session
    }

    /// Posts a message on the session (before it is open: without one); the answer, left to
    /// read.
    pub fn post(&self, body: Value) -> reqwest::blocking::Response {
        let mut r = self
            .http
            .post(&self.url)
            .bearer_auth(&self.token)
            .header("accept", "application/json, text/event-stream")
            .json(&body);
        if !self.id.is_empty() {
            r = r.header("mcp-session-id", &self.id);
        }
        r.send().unwrap()
    }
}
