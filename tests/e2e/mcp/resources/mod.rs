//! Resources, resource templates, prompts and completions through `/mcp`: the vault's own
//! (each table's definition and each row's file, paged, addressed by template, completed,
//! followed by subscription) and a remote app's, named by the app in every place a URI appears
//! (listings, templates, resource links and embedded resources in tool results and prompts,
//! `_meta.ui.resourceUri`, `notifications/resources/updated`), with the app's hostile URIs and
//! names skipped, its big answers refused unread, and a token's rights deciding what it sees.
//!
//! The app is a small MCP server written here on axum: `shelf`.
//!
//! - `vault`: the vault's own resources, paged, read, completed and followed;
//! - `app`: an app's resources, prompts and completions, named by the app;
//! - `listen`: 2026-07-28 listens (`subscriptions/listen`) to an app's resource.

mod app;
mod listen;
mod vault;

use crate::kit::mcp::{Updates, ask};
use crate::kit::*;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use rmcp::RoleClient;
use rmcp::ServiceExt;
use rmcp::service::RunningService;
use rmcp::transport::StreamableHttpClientTransport;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The app's side: what it was asked, and its stream of notifications outside calls.
struct Shelf {
    asked: Mutex<Vec<String>>,
    push: tokio::sync::broadcast::Sender<String>,
}

use fake_app::rpc;

impl Shelf {
    fn post(self: Arc<Self>, body: Value) -> Response {
        let id = body.get("id").cloned().unwrap_or(Value::Null);
        let method = body["method"].as_str().unwrap_or("").to_string();
        self.asked.lock().unwrap().push(method.clone());
        let p = &body["params"];
        match method.as_str() {
            "initialize" => fake_app::initialized(
                &id,
                "shelf",
                json!({"tools": {}, "resources": {"subscribe": true, "listChanged": true},
                       "prompts": {}, "completions": {}}),
                "shelf-session",
            ),
            "tools/list" => rpc(
                &id,
                json!({"tools": [{
                "name": "shelf_show", "description": "shows the shelf",
                "inputSchema": {"type": "object", "properties": {}},
                "_meta": {"ui": {"resourceUri": "ui://shelf/view.html"},
                          "datanotes/tables": ["work.crm.tasks"]}}, {
                "name": "shelf_fail", "description": "answers an error",
                "inputSchema": {"type": "object", "properties": {}}}, {
                "name": "shelf_refresh", "description": "the view's own",
                "inputSchema": {"type": "object", "properties": {}},
                "_meta": {"ui": {"resourceUri": "ui://shelf/view.html", "visibility": ["app"]},
                          "datanotes/tables": ["work.crm.tasks"]}}]}),
            ),
            "tools/call" if p["name"] == "shelf_fail" => fake_app::rpc_error(
                &id,
                -32042,
                "this needs the user at a URL",
                Some(
                    json!({"elicitations": [{"mode": "url", "url": "https://example.org/x", "elicitationId": "e1"}]}),
                ),
            ),
            "tools/call" => rpc(
                &id,
                json!({"content": [
                {"type": "text", "text": "two things"},
                {"type": "resource_link", "uri": "file:///a.txt", "name": "a"},
                {"type": "resource", "resource": {"uri": "file:///b.txt", "text": "beta"}}]}),
            ),
            "resources/list" => rpc(
                &id,
                json!({"resources": [
                {"uri": "file:///a.txt", "name": "a", "mimeType": "text/plain"},
                {"uri": "ui://shelf/view.html", "name": "view", "mimeType": "text/html;profile=mcp-app",
                 "_meta": {"ui": {"prefersBorder": true}}},
                {"uri": "file:///big", "name": "big"},
                {"uri": "file:///../etc/passwd", "name": "up"},
                {"uri": "datanotes://tables/a.b.c", "name": "engine's"},
                {"uri": format!("file:///{}", "x".repeat(3000)), "name": "long"},
                {"uri": "file:///a\u{0}b", "name": "nul"}]}),
            ),
            "resources/templates/list" => rpc(
                &id,
                json!({"resourceTemplates": [
                {"uriTemplate": "file:///{name}", "name": "file"}]}),
            ),
            "resources/read" => {
                let uri = p["uri"].as_str().unwrap_or("");
                let text = match uri {
                    "file:///a.txt" => "alpha".to_string(),
                    "ui://shelf/view.html" => "<p>view</p>".to_string(),
                    "file:///big" => "x".repeat(20 << 20),
                    _ => {
                        return fake_app::rpc_error(&id, -32002, &format!("no {uri}"), None);
                    }
                };
                rpc(&id, json!({"contents": [{"uri": uri, "text": text}]}))
            }
            "resources/subscribe" => {
                let uri = p["uri"].as_str().unwrap_or("").to_string();
                let push = self.push.clone();
                tokio::spawn(async move {
                    fake_app::take_time(Duration::from_millis(300)).await;
                    let n = json!({"jsonrpc": "2.0", "method": "notifications/resources/updated",
                                   "params": {"uri": uri}});
                    let _ = push.send(n.to_string());
                });
                rpc(&id, json!({}))
            }
            "prompts/list" => rpc(
                &id,
                json!({"prompts": [
                {"name": "shelf_prompt", "description": "asks about a topic",
                 "arguments": [{"name": "topic", "required": true}]},
                {"name": "list_tables", "description": "shadows an operation"}]}),
            ),
            // The app knows its prompts by its own names only.
            "prompts/get" if p["name"] != "shelf_prompt" => {
                fake_app::rpc_error(&id, -32602, "no such prompt", None)
            }
            "prompts/get" => rpc(
                &id,
                json!({"messages": [
                {"role": "user", "content": {"type": "text",
                    "text": format!("tell me about {}", p["arguments"]["topic"].as_str().unwrap_or("?"))}},
                {"role": "user", "content": {"type": "resource",
                    "resource": {"uri": "file:///a.txt", "text": "alpha"}}}]}),
            ),
            // A prompt's arguments are completed by its own name only.
            "completion/complete"
                if p["ref"]["type"] == "ref/prompt" && p["ref"]["name"] != "shelf_prompt" =>
            {
                fake_app::rpc_error(&id, -32602, "no such prompt", None)
            }
            "completion/complete" => {
                let v = p["argument"]["value"].as_str().unwrap_or("");
                let values: Vec<&str> = ["apple", "apricot", "banana"]
                    .into_iter()
                    .filter(|x| x.starts_with(v))
                    .collect();
                rpc(
                    &id,
                    json!({"completion": {"values": values, "hasMore": false}}),
                )
            }
            _ => StatusCode::ACCEPTED.into_response(),
        }
    }
}

/// Serves the app on 127.0.0.1 (on `rt`); answers its `/mcp` address.
fn serve_app(rt: &tokio::runtime::Runtime) -> (String, Arc<Shelf>) {
    let shelf = Arc::new(Shelf {
        asked: Mutex::default(),
        push: tokio::sync::broadcast::channel(16).0,
    });
    let app = shelf.clone();
    let post: fake_app::Post = Arc::new(move |v| {
        let app = app.clone();
        Box::pin(async move { app.post(v) })
    });
    let url = fake_app::serve(rt, post, Some(shelf.push.clone()));
    (url, shelf)
}

type Client = RunningService<RoleClient, Updates>;

pub(super) fn connect(rt: &tokio::runtime::Runtime, s: &Server, token: &str) -> (Client, Updates) {
    let u = Updates::default();
    let cfg = transport_config(&format!("{}/mcp", s.url), Some(token), None);
    let c = rt
        .block_on(async {
            u.clone()
                .serve(StreamableHttpClientTransport::from_config(cfg))
                .await
        })
        .unwrap();
    (c, u)
}

/// Every resource of every page, and the size of each page.
fn all_resources(rt: &tokio::runtime::Runtime, c: &Client) -> (Vec<Value>, Vec<usize>) {
    let (mut out, mut sizes, mut cursor) = (vec![], vec![], None::<Value>);
    loop {
        let p = match &cursor {
            Some(c) => json!({"cursor": c}),
            None => json!({}),
        };
        let page = ask(rt, c, "resources/list", p);
        let items = page["resources"].as_array().cloned().unwrap_or_default();
        sizes.push(items.len());
        out.extend(items);
        match page.get("nextCursor").filter(|c| !c.is_null()) {
            Some(n) => cursor = Some(n.clone()),
            None => return (out, sizes),
        }
        assert!(sizes.len() < 100, "the listing ends");
    }
}

/// `prompts/list`, and the names it lists.
fn prompt_names(rt: &tokio::runtime::Runtime, c: &Client) -> (Value, Vec<String>) {
    let p = ask(rt, c, "prompts/list", json!({}));
    let names = p["prompts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap().to_string())
        .collect();
    (p, names)
}

fn uris(v: &[Value]) -> Vec<String> {
    v.iter()
        .map(|r| r["uri"].as_str().unwrap_or("").to_string())
        .collect()
}
