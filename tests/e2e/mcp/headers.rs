//! The engine's own requests to a remote app carry their own method's headers (SEP-2243, from
//! protocol 2026-07-28): `Mcp-Method` equal to the body's method, and `Mcp-Name` naming the tool
//! of a `tools/call`; never the headers of a message posted before them.

use crate::kit::*;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};

/// What the app was posted: each message's method, and its `Mcp-Method` and `Mcp-Name`.
type Seen = Arc<Mutex<Vec<(String, Option<String>, Option<String>)>>>;

/// An app speaking `version` with one tool, `hdr_echo`, that notes what it is posted.
fn recording_app(rt: &tokio::runtime::Runtime, version: &'static str, seen: Seen) -> String {
    let post: fake_app::PostSeeing = Arc::new(move |h: HeaderMap, v: Value| {
        let header = |k: &str| h.get(k).and_then(|v| v.to_str().ok()).map(str::to_string);
        if let Some(m) = v["method"].as_str() {
            seen.lock()
                .unwrap()
                .push((m.to_string(), header("mcp-method"), header("mcp-name")));
        }
        let id = v["id"].clone();
        let r: Response = match v["method"].as_str() {
            Some("initialize") => {
                let mut r = fake_app::rpc(
                    &id,
                    json!({"protocolVersion": version, "capabilities": {"tools": {}},
                           "serverInfo": {"name": "hdr", "version": "1.0.0"}}),
                );
                r.headers_mut()
                    .insert("mcp-session-id", "hdr-session".parse().unwrap());
                r
            }
            Some("tools/list") => fake_app::rpc(
                &id,
                json!({"tools": [{"name": "hdr_echo", "inputSchema": {"type": "object"}}]}),
            ),
            Some("tools/call") => fake_app::rpc(
                &id,
                json!({"content": [{"type": "text", "text": "echoed"}]}),
            ),
            Some("ping") => fake_app::rpc(&id, json!({})),
            _ => StatusCode::ACCEPTED.into_response(),
        };
        Box::pin(async move { r })
    });
    fake_app::serve_seeing(rt, post, None)
}

#[test]
fn each_request_to_an_app_carries_its_own_method_headers() {
    for version in ["2026-07-28", "2025-11-25"] {
        let seen: Seen = Default::default();
        let s = Server::start();
        let rt = mcp::runtime();
        let url = recording_app(&rt, version, seen.clone());
        create_app(&s, json!({"name": "hdr", "mcp_url": url}));
        eventually("the app's tool is listed", || {
            s.ok_route("apps/get", json!({"name": "hdr"}))["app"]["tools"]
                .as_array()
                .is_some_and(|t| !t.is_empty())
        });
        // A call by an agent with a session, and one by a client of 2026-07-28.
        let agent = Agent::owner(&s);
        assert!(text(&agent.call("hdr_echo", json!({}))).contains("echoed"));
        let params = json!({"name": "hdr_echo", "arguments": {}});
        let r = mcp::post_2026(&s, &s.token, "tools/call", params, json!({}), None);
        assert!(r.text().unwrap().contains("echoed"), "{version}");

        let seen = seen.lock().unwrap().clone();
        let calls: Vec<_> = seen.iter().filter(|m| m.0 == "tools/call").collect();
        assert!(calls.len() >= 2, "{version}: {seen:?}");
        assert!(
            seen.iter().any(|m| m.0 == "tools/list"),
            "{version}: {seen:?}"
        );
        for (method, header, name) in &seen {
            if let Some(h) = header {
                assert_eq!(h, method, "{version}: Mcp-Method of a {method}: {seen:?}");
            }
            if method == "tools/call" && name.is_some() {
                assert_eq!(name.as_deref(), Some("hdr_echo"), "{version}: {seen:?}");
            }
        }
        if version == "2026-07-28" {
            // At that version every request and notification names its method.
            for (method, header, name) in &seen {
                if method != "initialize" {
                    assert_eq!(header.as_deref(), Some(method.as_str()), "{seen:?}");
                }
                if method == "tools/call" {
                    assert_eq!(name.as_deref(), Some("hdr_echo"), "{seen:?}");
                }
            }
        }
    }
}
