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

mod apps_host;
mod door;
mod feed_and_stdio;
mod hostile_load;

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

/// What an agent or an owner reads names no Rust type.
fn assert_plain(msg: &str) {
    for bad in ["::", "<", "Transport", "Client error", "reqwest", "Os {"] {
        assert!(!msg.contains(bad), "{bad:?} in {msg:?}");
    }
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
