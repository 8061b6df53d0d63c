//! `tool_prefix`: the owner lists an app's tools with a prefix in front of their names, so two
//! apps' tools of one name both stay reachable: called by the prefixed name, the app is asked by
//! its own; `call_tools` patterns and `search_tools` see the prefixed names; only names still
//! taken after prefixing are skipped.

use crate::kit::fake_app::{tool, tool_app};
use crate::kit::*;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};

fn entry(s: &Server, name: &str) -> Value {
    s.ok_route("apps/get", json!({"name": name}))["app"].clone()
}

fn app(s: &Server, rt: &tokio::runtime::Runtime, name: &str, tools: Vec<Value>) {
    let url = tool_app(rt, Arc::new(Mutex::new(tools)));
    create_app(s, json!({"name": name, "mcp_url": url}));
}

#[test]
fn a_prefix_keeps_two_apps_tools_of_one_name_reachable() {
    let s = Server::start();
    let rt = runtime();
    app(
        &s,
        &rt,
        "code",
        vec![
            tool("search", "Search code", &[]),
            tool("read_file", "Read a file", &[]),
        ],
    );
    eventually("code listed", || {
        entry(&s, "code")["tools"] == json!(["search", "read_file"])
    });
    app(
        &s,
        &rt,
        "docs",
        vec![
            tool("search", "Search the documentation", &[]),
            tool("fetch_page", "Fetch a page", &[]),
        ],
    );
    eventually("docs listed", || {
        entry(&s, "docs")["tools"] == json!(["fetch_page"])
    });
    assert_eq!(entry(&s, "docs")["skippedTools"][0]["takenBy"], "code");

    // Only the owner sets it, and only a prefix a tool name may start with.
    let token = create_app(&s, json!({"name": "helper", "call_tools": ["docs_*"]}));
    let (status, v) = s.call_as(
        Some(&token),
        "apps/update",
        &json!({"name": "helper", "tool_prefix": "h_"}),
        &[],
    );
    assert_eq!(status, 403, "{v}");
    let (status, v) = s.call(
        "apps/update",
        json!({"name": "docs", "tool_prefix": "docs prefix!"}),
    );
    assert_eq!(status, 400, "{v}");
    assert_eq!(v["error"]["column"], "tool_prefix", "{v}");

    s.ok_route(
        "apps/update",
        json!({"name": "docs", "tool_prefix": "docs_"}),
    );
    let e = entry(&s, "docs");
    assert_eq!(e["tool_prefix"], "docs_", "{e}");
    assert_eq!(e["tools"], json!(["docs_search", "docs_fetch_page"]), "{e}");
    assert_eq!(e["skippedTools"], json!([]), "{e}");
    assert_eq!(entry(&s, "code")["tools"], json!(["search", "read_file"]));

    // Called by the prefixed name, the app is asked by its own.
    let agent = Agent::owner(&s);
    let names = agent.names();
    assert!(
        names.contains(&"search".into()) && names.contains(&"docs_search".into()),
        "{names:?}"
    );
    assert_eq!(
        text(&agent.call("docs_search", json!({}))),
        "ran \"search\""
    );
    assert_eq!(text(&agent.call("search", json!({}))), "ran \"search\"");
    let v = s.ok_route(
        "apps/call",
        json!({"tool": "docs_fetch_page", "arguments": {}}),
    );
    assert_eq!(v["servedBy"], "docs", "{v}");

    // call_tools patterns see the prefixed names.
    let helper = Agent::engine(&s, &token, None);
    assert_eq!(helper.names(), ["docs_search", "docs_fetch_page"]);
    // So does search_tools.
    let v = s.ok_route(
        "search_tools",
        json!({"query": "search the documentation", "limit": 1}),
    );
    assert_eq!(v["tools"][0]["name"], "docs_search", "{v}");
    assert_eq!(v["tools"][0]["app"], "docs", "{v}");

    // Removed: the name is taken again.
    s.ok_route("apps/update", json!({"name": "docs", "tool_prefix": null}));
    let e = entry(&s, "docs");
    assert_eq!(e["tools"], json!(["fetch_page"]), "{e}");
    assert!(e.get("tool_prefix").is_none_or(Value::is_null), "{e}");
}
