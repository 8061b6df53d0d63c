//! `search_tools`: an agent finds the right tool among the engine's operations and every
//! app's tools by what it should do, over HTTP and through `/mcp` with rmcp's client: by
//! meaning and words with the model, by words alone without it; only tools the caller may
//! call; the index follows an app's new listing and forgets a deleted app before its next
//! search; bad input is refused naming the field, and changes nothing.

use crate::kit::fake_app::{self, rpc};
use crate::kit::*;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};

/// A remote app whose `tools/list` answers the tools the test holds in `tools` now.
fn tool_app(rt: &tokio::runtime::Runtime, tools: Arc<Mutex<Vec<Value>>>) -> String {
    let post: fake_app::Post = Arc::new(move |v: Value| {
        let tools = tools.clone();
        Box::pin(async move {
            let id = v["id"].clone();
            match v["method"].as_str().unwrap_or("") {
                "initialize" => fake_app::initialized(
                    &id,
                    "tools",
                    json!({"tools": {"listChanged": true}}),
                    "s-1",
                ),
                "tools/list" => rpc(&id, json!({"tools": *tools.lock().unwrap()})),
                "tools/call" => rpc(
                    &id,
                    json!({"content": [{"type": "text", "text": format!("ran {}", v["params"]["name"])}]}),
                ),
                _ if id.is_null() => axum::http::StatusCode::ACCEPTED.into_response(),
                _ => rpc(&id, json!({})),
            }
        })
    });
    fake_app::serve(rt, post, None)
}

use axum::response::IntoResponse;

fn tool(name: &str, description: &str, params: &[(&str, &str)]) -> Value {
    let props: serde_json::Map<String, Value> = params
        .iter()
        .map(|(p, d)| (p.to_string(), json!({"type": "string", "description": d})))
        .collect();
    json!({"name": name, "description": description,
           "inputSchema": {"type": "object", "properties": props}})
}

/// Tools of a code host and of a calendar, as real servers word them.
fn code_host() -> Vec<Value> {
    vec![
        tool(
            "create_issue",
            "Create a new issue in a GitHub repository",
            &[
                ("owner", "Repository owner"),
                ("repo", "Repository name"),
                ("title", "Issue title"),
            ],
        ),
        tool(
            "list_commits",
            "Get list of commits of a branch in a GitHub repository",
            &[("owner", "Repository owner"), ("sha", "SHA or branch name")],
        ),
        tool(
            "merge_pull_request",
            "Merge a pull request",
            &[
                ("pullNumber", "Pull request number"),
                ("merge_method", "Merge method"),
            ],
        ),
        tool(
            "search_code",
            "Search for code across GitHub repositories",
            &[("q", "Search query using GitHub code search syntax")],
        ),
    ]
}

fn calendar() -> Vec<Value> {
    vec![
        tool(
            "create_event",
            "Schedule a meeting: add an event to the user's calendar",
            &[
                ("start", "When it starts (RFC 3339)"),
                ("attendees", "Who is invited"),
            ],
        ),
        tool(
            "find_free_slots",
            "Find times when every attendee is available",
            &[("duration", "Minutes needed")],
        ),
    ]
}

/// The names of the tools `search_tools` answers, best first.
fn names(v: &Value) -> Vec<String> {
    v["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("{v}"))
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect()
}

/// The best tool for `query`, as the owner searches.
fn best(s: &Server, query: &str) -> String {
    let v = s.ok_route("search_tools", json!({"query": query, "limit": 3}));
    names(&v).first().cloned().unwrap_or_default()
}

/// A server with the apps `code` and `cal` listing their tools.
fn two_apps(s: &Server, rt: &tokio::runtime::Runtime) -> Arc<Mutex<Vec<Value>>> {
    let code = Arc::new(Mutex::new(code_host()));
    let url = tool_app(rt, code.clone());
    create_app(s, json!({"name": "code", "mcp_url": url}));
    let url = tool_app(rt, Arc::new(Mutex::new(calendar())));
    create_app(s, json!({"name": "cal", "mcp_url": url}));
    eventually("both apps listed", || {
        best(s, "schedule a meeting") == "create_event" && best(s, "merge") == "merge_pull_request"
    });
    code
}

#[test]
fn an_agent_finds_an_apps_tool_by_what_it_should_do() {
    let s = Server::start_semantic(&[]);
    eventually("the semantic index is ready", || {
        s.semantic()["state"] == "ready"
    });
    let rt = runtime();
    two_apps(&s, &rt);
    let v = s.ok_route(
        "search_tools",
        json!({"query": "file a bug report in my repo", "limit": 5}),
    );
    assert_eq!(v["mode"], "hybrid", "{v}");
    assert!(
        v["indexedAt"].as_str().is_some_and(|t| t.ends_with('Z')),
        "{v}"
    );
    let first = &v["tools"][0];
    assert_eq!(first["name"], "create_issue", "{v}");
    assert_eq!(first["app"], "code", "{v}");
    assert_eq!(
        first["inputSchema"]["properties"]["title"]["description"],
        "Issue title"
    );
    assert!(first["score"].as_f64().unwrap() > 0.0, "{v}");
    assert!(first["ranks"]["semantic"].is_number(), "{v}");
    // Words the user did not write the way the tool does still meet ("repo" is the tool's).
    assert!(
        first["words"].as_array().unwrap().contains(&json!("repo")),
        "{v}"
    );
    // Meaning alone: no word of the query is in the tool.
    assert_eq!(best(&s, "when is everybody available"), "find_free_slots");
    // The engine's operations are found as well.
    assert_eq!(best(&s, "revert a change"), "undo_migration");
    // Only some apps.
    let v = s.ok_route(
        "search_tools",
        json!({"query": "create", "apps": ["cal"], "limit": 50}),
    );
    assert!(
        v["tools"]
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t["app"] == "cal"),
        "{v}"
    );

    // Through /mcp with rmcp's client, the same operation and answer.
    let agent = Agent::owner(&s);
    assert!(agent.names().contains(&"search_tools".to_string()));
    let r = agent.call(
        "search_tools",
        json!({"query": "file a bug report in my repo", "limit": 1}),
    );
    assert!(!is_error(&r), "{}", text(&r));
    let found = structured(&r);
    assert_eq!(names(&found), ["create_issue"], "{found}");
    // ... and the tool found is called by its name.
    let r = agent.call("create_issue", json!({"title": "t"}));
    assert_eq!(text(&r), "ran \"create_issue\"");
}

#[test]
fn without_a_model_tools_are_ranked_by_their_words() {
    let s = Server::start();
    let rt = runtime();
    two_apps(&s, &rt);
    let v = s.ok_route("search_tools", json!({"query": "commits on a branch"}));
    assert_eq!(v["mode"], "text", "{v}");
    assert!(v["note"].as_str().unwrap().contains("words only"), "{v}");
    assert_eq!(names(&v)[0], "list_commits", "{v}");
    assert_eq!(v["tools"][0]["ranks"], json!({"text": 1}), "{v}");
    assert_eq!(best(&s, "listCommits"), "list_commits");
}

#[test]
fn a_caller_finds_only_the_tools_it_may_call() {
    let s = Server::start();
    let rt = runtime();
    two_apps(&s, &rt);
    let token = create_app(
        &s,
        json!({"name": "helper", "call_tools": ["create_event", "list_tables", "search_tools"]}),
    );
    let v = s.call_as(
        Some(&token),
        "search_tools",
        &json!({"query": "create an issue, a table or an event", "limit": 50}),
        &[],
    );
    assert_eq!(v.0, 200, "{v:?}");
    let mut found = names(&v.1);
    found.sort();
    assert_eq!(
        found,
        ["create_event", "list_tables", "search_tools"],
        "{}",
        v.1
    );
    // The owner finds them all.
    let v = s.ok_route(
        "search_tools",
        json!({"query": "create an issue, a table or an event", "limit": 50}),
    );
    let all = names(&v);
    for t in ["create_issue", "create_table", "create_event"] {
        assert!(all.contains(&t.to_string()), "{t}: {all:?}");
    }
    // Through /mcp with the app's token: the same.
    let agent = Agent::engine(&s, &token, None);
    let r = agent.call(
        "search_tools",
        json!({"query": "create an issue", "limit": 50}),
    );
    let found = names(&structured(&r));
    assert!(found.contains(&"create_event".to_string()), "{found:?}");
    let may = ["create_event", "list_tables", "search_tools"];
    assert!(found.iter().all(|n| may.contains(&&n[..])), "{found:?}");
}

#[test]
fn the_index_follows_a_new_listing_and_forgets_a_deleted_app() {
    let s = Server::start();
    let rt = runtime();
    let code = two_apps(&s, &rt);
    code.lock().unwrap().push(tool(
        "add_labels",
        "Attach labels to an issue or pull request",
        &[("labels", "The labels")],
    ));
    s.ok_route("apps/refresh", json!({"name": "code"}));
    // Applied at the next search a second after the last (at most once a second per app).
    eventually("the new tool is found", || {
        best(&s, "attach labels") == "add_labels"
    });
    s.ok_route("apps/delete", json!({"name": "code"}));
    let v = s.ok_route(
        "search_tools",
        json!({"query": "issue commits pull request code labels", "limit": 50}),
    );
    assert!(
        v["tools"]
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t["app"] != "code"),
        "{v}"
    );
    let v = s.call("search_tools", json!({"query": "x", "apps": ["code"]}));
    assert_eq!(v.0, 400, "{v:?}");
    assert_eq!(v.1["error"]["column"], "apps", "{v:?}");
}

#[test]
fn bad_input_is_refused_naming_the_field() {
    let s = Server::start();
    let big = "word ".repeat(200_000);
    for (args, field) in [
        (json!({"query": big}), "query"),
        (json!({"query": "find\u{7}me"}), "query"),
        (json!({"query": "   "}), "query"),
        (json!({"query": "tables", "limit": 10_000}), "limit"),
        (json!({"query": "tables", "limit": 0}), "limit"),
        (json!({"query": "tables", "apps": ["nobody"]}), "apps"),
    ] {
        let (status, v) = s.call("search_tools", args.clone());
        assert_eq!(status, 400, "{args:?}: {v}");
        assert_eq!(v["error"]["column"], field, "{v}");
        let message = v["error"]["message"].as_str().unwrap();
        assert!(!message.contains("::"), "{message}");
        assert!(v["error"]["hint"].is_string(), "{v}");
    }
    let (status, v) = s.call("search_tools", json!({"query": "tables", "mode": "x"}));
    assert_eq!(status, 400, "{v}");
    assert!(
        v.to_string().contains("`hybrid`, `text`, `semantic`"),
        "{v}"
    );
}
