//! One policy at every door: the attacks of issue 43 that a principal could make on another's
//! MCP session, the journal's session ids, and the engine's trust settings, through the real
//! server. Each leaves the vault's files as they were.

use crate::kit::*;

mod decision_matrix;
use serde_json::{Value, json};

/// A message on the owner's MCP session sent with another token: `(status, body)`.
fn post_on(s: &Server, session: &str, token: &str, body: &Value) -> (u16, String) {
    let r = reqwest::blocking::Client::new()
        .post(format!("{}/mcp", s.url))
        .bearer_auth(token)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-session-id", session)
        .json(body)
        .send()
        .unwrap();
    (r.status().as_u16(), r.text().unwrap_or_default())
}

/// Another principal's request on a session (POST, its GET stream, a resume, DELETE) gets the
/// 404 of a session it does not have, and the session goes on untouched for its owner.
#[test]
fn a_session_belongs_to_the_principal_that_opened_it() {
    let s = Server::start();
    create_tasks(&s);
    let app = create_app(
        &s,
        json!({"name": "other", "write": ["*"], "call_tools": ["*"]}),
    );
    let owner = mcp::RawSession::open(&s, &s.token, "2025-06-18");
    let files = snapshot(&s.dir);
    let seq = s.seq();

    let ping = json!({"jsonrpc": "2.0", "id": 7, "method": "ping"});
    let insert = json!({"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": {
        "name": "insert_row", "arguments": {"table": TASKS, "id": "stolen", "values": {"title": "x"}}}});
    for body in [&ping, &insert] {
        let (st, text) = post_on(&s, &owner.id, &app, body);
        assert_eq!(
            st, 404,
            "another token's {body} on the owner's session: {text}"
        );
        assert!(text.contains("Session not found"), "{text}");
    }
    let http = reqwest::blocking::Client::new();
    let get = |resume: Option<&str>| {
        let mut r = http
            .get(format!("{}/mcp", s.url))
            .bearer_auth(&app)
            .header("accept", "text/event-stream")
            .header("mcp-session-id", &owner.id);
        if let Some(id) = resume {
            r = r.header("last-event-id", id);
        }
        r.send().unwrap().status().as_u16()
    };
    assert_eq!(get(None), 404, "another token opens the session's stream");
    assert_eq!(
        get(Some("0")),
        404,
        "another token resumes the session's stream"
    );
    let del = http
        .delete(format!("{}/mcp", s.url))
        .bearer_auth(&app)
        .header("mcp-session-id", &owner.id)
        .send()
        .unwrap();
    assert_eq!(del.status(), 404, "another token ends the session");

    // Untouched: nothing was written, and the owner's session answers.
    assert_eq!(s.seq(), seq);
    assert!(snapshot(&s.dir) == files, "the vault's files changed");
    let r = owner.post(ping.clone());
    assert_eq!(r.status(), 200, "the owner's session after the attempts");
    assert!(r.text().unwrap().contains("\"result\""));
    let r = owner.post(insert.clone());
    assert_eq!(r.status(), 200);
    assert!(s.has_row(TASKS, "stolen"), "the owner's own call is served");
}

/// The journal shows an MCP session only to the owner and to the principal that made the
/// change: `list_migrations`, `changes/` and the SSE stream read by another token carry none.
#[test]
fn session_ids_are_shown_only_to_the_principal_and_the_owner() {
    let s = Server::start();
    create_tasks(&s);
    let writer = create_app(
        &s,
        json!({"name": "writer", "write": ["*"], "call_tools": ["*"]}),
    );
    let reader = create_app(&s, json!({"name": "reader"}));
    let since = s.seq();
    let session = mcp::RawSession::open(&s, &writer, "2025-06-18");
    let r = session.post(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "insert_row", "arguments": {"table": TASKS, "id": "noted", "values": {"title": "x"}}}}));
    assert_eq!(r.status(), 200);
    let _ = r.text();
    let sessions_in = |token: &str| -> Vec<Value> {
        let (st, v) = s.call_as(
            Some(token),
            "list_migrations",
            &json!({"table": TASKS}),
            &[],
        );
        assert_eq!(st, 200, "{v}");
        let (st, f) = s.call_as(Some(token), "changes", &json!({"since": since}), &[]);
        assert_eq!(st, 200, "{f}");
        let stream = s.sse(&format!("since={since}"), Some(token), &[]).unwrap();
        let streamed: Vec<Value> = stream
            .take(1)
            .iter()
            .map(|e| serde_json::from_str(&e.data).unwrap())
            .collect();
        v["migrations"]
            .as_array()
            .unwrap()
            .iter()
            .chain(f["changes"].as_array().unwrap())
            .chain(&streamed)
            .filter(|m| m["row"] == "noted")
            .map(|m| m["actor"]["session"].clone())
            .collect()
    };
    for (who, token, shown) in [
        ("the owner", s.token.as_str(), true),
        ("the writer", writer.as_str(), true),
        ("another app", reader.as_str(), false),
    ] {
        let got = sessions_in(token);
        assert_eq!(got.len(), 3, "{who}: the write in all three reads: {got:?}");
        for v in got {
            if shown {
                assert_eq!(v, json!(session.id), "{who} sees the session");
            } else {
                assert!(v.is_null(), "{who} sees another's session {v}");
            }
        }
    }
}

/// The settings that decide what the engine trusts and which files it reads are the owner's,
/// whatever other rights a caller has: an app with `maintain` is refused each, naming the rule,
/// through HTTP and MCP, and nothing changes; its other settings still pass.
#[test]
fn trust_settings_are_the_owners_alone() {
    let s = Server::start();
    let maint = create_app(
        &s,
        json!({"name": "maint", "maintain": true, "call_tools": ["*"]}),
    );
    let settings = s.dir.join(".datanotes/settings.json");
    let now = || {
        let v = s.ok("get_engine_settings", json!({}));
        (std::fs::read(&settings).ok(), v)
    };
    let before = now();
    let attempts = [
        json!({"trusted_keys": [{"name": "evil", "key": "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n"}]}),
        json!({"require_signature": false}),
        json!({"semantic_model": "/root"}),
        json!({"default_limit": 50, "semantic_model": "/etc"}),
    ];
    for settings_change in &attempts {
        let (st, v) = s.call_as(
            Some(&maint),
            "set_engine_settings",
            &json!({"settings": settings_change}),
            &[],
        );
        assert_eq!(st, 403, "{settings_change}: {v}");
        assert_eq!(v["error"]["rule"], "owner", "{v}");
        let m = v["error"]["message"].as_str().unwrap();
        assert!(m.contains("only the owner may change"), "{m}");
        assert!(!m.contains("config.json") && !m.contains("/root"), "{m}");
        let agent = Agent::engine(&s, &maint, None);
        let r = agent.call("set_engine_settings", json!({"settings": settings_change}));
        assert!(is_error(&r), "MCP: {settings_change}");
        assert!(
            text(&r).contains("only the owner may change"),
            "{}",
            text(&r)
        );
    }
    // (The refused MCP calls are journaled as tool_call events, which change nothing.)
    assert_eq!(now(), before, "a refused setting changed something");
    // Its other settings pass, and the owner may change the trust ones.
    let (st, v) = s.call_as(
        Some(&maint),
        "set_engine_settings",
        &json!({"settings": {"default_limit": 50}}),
        &[],
    );
    assert_eq!(st, 200, "{v}");
    s.ok(
        "set_engine_settings",
        json!({"settings": {"require_signature": false}}),
    );
}
