//! `search_tools`: an agent finds the right tool among the engine's operations and every
//! app's tools by what it should do, over HTTP and through `/mcp` with rmcp's client: by
//! meaning and words with the model, by words alone without it; only tools the caller may
//! call; the index follows an app's new listing and forgets a deleted app before its next
//! search; bad input is refused naming the field, and changes nothing.

use crate::kit::*;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};

use crate::kit::fake_app::{tool, tool_app};

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
fn a_querys_path_and_file_name_are_read_as_what_they_are() {
    // Words only, so the ranking is the words': the path's own words ("home") match the
    // home-automation tool, what the path is matches the file tool.
    let s = Server::start();
    let rt = runtime();
    let tools = vec![
        tool(
            "read_file",
            "Read the complete contents of a file",
            &[("path", "The path of the file to read")],
        ),
        tool(
            "get_home_state",
            "Get the state of a device at home, by its name",
            &[("name", "The device's name, such as dana")],
        ),
    ];
    let url = tool_app(&rt, Arc::new(Mutex::new(tools)));
    create_app(&s, json!({"name": "box", "mcp_url": url}));
    eventually("the app is listed", || {
        best(&s, "device") == "get_home_state"
    });
    let v = s.ok_route(
        "search_tools",
        json!({"query": "show me /home/dana/todo.md", "apps": ["box"]}),
    );
    assert_eq!(names(&v)[0], "read_file", "{v}");
    assert_eq!(v["tools"][0]["words"], json!(["file", "path"]), "{v}");
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
    assert_eq!(found, ["create_event", "list_tables"], "{}", v.1);
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

/// `/mcp?tools=search` with rmcp's client: two tools whatever the number behind the address;
/// what a session's search finds joins its listing (and the client is told); `call_tool`
/// calls any tool the caller may call, as a direct call would, and refuses the others naming
/// them.
#[test]
fn the_search_listing_lists_two_tools_and_grows_with_what_a_session_finds() {
    let s = Server::start();
    let rt = runtime();
    two_apps(&s, &rt);
    let url = format!("{}/mcp?tools=search", s.url);
    let agent = Agent::connect(&url, Some(&s.token), None);
    assert_eq!(agent.names(), ["search_tools", "call_tool"]);
    let bytes = serde_json::to_string(&agent.tools()).unwrap().len();
    assert!(bytes <= 6000, "{bytes} bytes");
    // The whole listing is still the address's without the query.
    assert!(Agent::owner(&s).names().len() > 20);

    let r = agent.call(
        "search_tools",
        json!({"query": "schedule a meeting", "limit": 1}),
    );
    assert_eq!(names(&structured(&r)), ["create_event"]);
    eventually("list_changed after a search found a tool", || {
        agent.list_changed() > 0
    });
    assert_eq!(agent.names(), ["search_tools", "call_tool", "create_event"]);
    // Called directly, and through call_tool: the same answer.
    assert_eq!(
        text(&agent.call("create_event", json!({}))),
        "ran \"create_event\""
    );
    let r = agent.call(
        "call_tool",
        json!({"name": "create_issue", "arguments": {"title": "t"}}),
    );
    assert!(!is_error(&r), "{}", text(&r));
    assert_eq!(text(&r), "ran \"create_issue\"");
    // An engine operation through call_tool, and its write journaled as a direct one's.
    let r = agent.call(
        "call_tool",
        json!({"name": "create_table", "arguments": {"table": "t.s.notes", "columns": {"title": {"type": "text"}}}}),
    );
    assert!(!is_error(&r), "{}", text(&r));
    let m = s.migrations(json!({}));
    let last = m.last().unwrap();
    assert_eq!(last["op"], "create_table", "{m:?}");
    assert_eq!(last["table"], "t.s.notes", "{m:?}");
    assert!(last["actor"]["session"].is_string(), "{m:?}");

    // An app's token in search mode: both tools whatever its call_tools; it finds and calls
    // only what they allow, and a refusal names the tool refused.
    let token = create_app(
        &s,
        json!({"name": "helper", "call_tools": ["create_event"]}),
    );
    let agent = Agent::connect(&url, Some(&token), None);
    assert_eq!(agent.names(), ["search_tools", "call_tool"]);
    let r = agent.call(
        "search_tools",
        json!({"query": "create an issue or an event", "limit": 50}),
    );
    assert_eq!(names(&structured(&r)), ["create_event"]);
    let r = agent.call(
        "call_tool",
        json!({"name": "create_issue", "arguments": {}}),
    );
    assert!(is_error(&r), "{}", text(&r));
    assert!(text(&r).contains("create_issue"), "{}", text(&r));
    let r = agent.call("call_tool", json!({"name": "create_event"}));
    assert_eq!(text(&r), "ran \"create_event\"");
    // call_tool's own arguments are checked.
    let err = agent
        .try_call("call_tool", json!({"arguments": {}}))
        .unwrap_err();
    assert!(err.contains("name"), "{err}");
}

/// A token's listing leaves out the engine operations its rights can never pass, and the
/// instructions say only what it can do.
#[test]
fn a_listing_leaves_out_operations_the_rights_never_pass() {
    let s = Server::start();
    let token = create_app(
        &s,
        json!({"name": "writer", "write": ["*"], "call_tools": ["*"]}),
    );
    let agent = Agent::engine(&s, &token, None);
    let listed = agent.names();
    for op in ["insert_row", "update_row", "search_tools", "list_tables"] {
        assert!(listed.contains(&op.to_string()), "{op}: {listed:?}");
    }
    for op in [
        "undo_migration",
        "create_table",
        "vacuum",
        "set_engine_settings",
    ] {
        assert!(!listed.contains(&op.to_string()), "{op}: {listed:?}");
    }
    let i = agent.instructions();
    assert!(
        i.contains("insert_row") && !i.contains("undo_migration"),
        "{i}"
    );
    let reader = create_app(&s, json!({"name": "reader", "call_tools": ["*"]}));
    let agent = Agent::engine(&s, &reader, None);
    assert!(!agent.names().contains(&"insert_row".to_string()));
    assert!(!agent.instructions().contains("insert_row"));
    // search_tools finds what the token may run, no more.
    let (status, v) = s.call_as(
        Some(&token),
        "search_tools",
        &json!({"query": "undo a change, create a table, vacuum", "limit": 50}),
        &[],
    );
    assert_eq!(status, 200, "{v}");
    let found = names(&v);
    assert!(
        !found
            .iter()
            .any(|n| ["undo_migration", "create_table", "vacuum"].contains(&&n[..])),
        "{found:?}"
    );
    // The owner sees them all.
    assert!(
        Agent::owner(&s)
            .names()
            .contains(&"undo_migration".to_string())
    );
}

/// An app entry set to `tool_listing: "search"` by the owner is served the search listing on
/// plain `/mcp`; the app itself may not change it.
#[test]
fn an_apps_entry_chooses_the_search_listing() {
    let s = Server::start();
    let token = create_app(
        &s,
        json!({"name": "agentic", "tool_listing": "search", "call_tools": ["list_tables"]}),
    );
    let v = s.ok_route("apps/get", json!({"name": "agentic"}));
    assert_eq!(v["app"]["tool_listing"], "search", "{v}");
    let agent = Agent::engine(&s, &token, None);
    assert_eq!(agent.names(), ["search_tools", "call_tool"]);
    let r = agent.call("call_tool", json!({"name": "list_tables"}));
    assert!(!is_error(&r), "{}", text(&r));
    // Only the owner sets it.
    let (status, v) = s.call_as(
        Some(&token),
        "apps/update",
        &json!({"name": "agentic", "tool_listing": "all"}),
        &[],
    );
    assert_eq!(status, 403, "{v}");
    s.ok_route(
        "apps/update",
        json!({"name": "agentic", "tool_listing": "all"}),
    );
    let agent = Agent::engine(&s, &token, None);
    assert_eq!(agent.names(), ["list_tables"]);
}

/// Pinned tools: a token in search mode is also listed the tools its owner pinned (names or
/// patterns), those it may call; an app's entry and a grant's consent choose the same way.
#[test]
fn pinned_tools_join_the_search_listing_of_an_app_and_of_a_grant() {
    let s = Server::start();
    let token = create_app(
        &s,
        json!({"name": "pinned", "tool_listing": "search",
               "call_tools": ["list_tables", "select_rows", "search_notes"],
               "pinned_tools": ["list_tables", "select_*", "insert_row"]}),
    );
    assert_eq!(
        s.ok_route("apps/get", json!({"name": "pinned"}))["app"]["pinned_tools"],
        json!(["list_tables", "select_*", "insert_row"])
    );
    // insert_row is pinned but not the app's to call: not listed.
    let agent = Agent::engine(&s, &token, None);
    assert_eq!(
        agent.names(),
        ["search_tools", "call_tool", "list_tables", "select_rows"]
    );
    // A pattern that is not one, or too many: refused naming the field, nothing changed.
    for bad in [
        json!(["a.b"]),
        json!((0..33).map(|i| format!("t{i}")).collect::<Vec<_>>()),
    ] {
        let (status, v) = s.call_as(
            Some(&s.token),
            "apps/update",
            &json!({"name": "pinned", "pinned_tools": bad}),
            &[],
        );
        assert_eq!(status, 400, "{v}");
        assert_eq!(v["error"]["column"], "pinned_tools", "{v}");
    }
    // Only the owner pins.
    let (status, _) = s.call_as(
        Some(&token),
        "apps/update",
        &json!({"name": "pinned", "pinned_tools": ["*"]}),
        &[],
    );
    assert_eq!(status, 403);

    // A grant whose consent chose the search listing and pinned get_row.
    let grant = oauth::connect(
        &s,
        "searching agent",
        json!({"call_tools": ["get_row", "list_tables", "search_tools"],
               "tool_listing": "search", "pinned_tools": ["get_row"]}),
    );
    let agent = Agent::engine(&s, &grant.access, None);
    assert_eq!(agent.names(), ["search_tools", "call_tool", "get_row"]);
    let listed = s.ok_route("grants/list", json!({}));
    let rights = &listed["grants"][0]["rights"];
    assert_eq!(rights["tool_listing"], "search", "{listed}");
    assert_eq!(rights["pinned_tools"], json!(["get_row"]), "{listed}");
}

/// What an official SDK's client saw on `/mcp?tools=search` (its script's JSON): two tools, a
/// search, the `list_changed` it follows, the tool found in its listing, called directly and
/// through `call_tool`.
fn followed(out: std::process::Output) {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("the script's JSON");
    assert_eq!(v["before"], json!(["search_tools", "call_tool"]), "{v}");
    assert_eq!(v["found"], json!(["create_event"]), "{v}");
    assert!(v["changed"].as_u64().unwrap() >= 1, "{v}");
    assert_eq!(
        v["after"],
        json!(["search_tools", "call_tool", "create_event"]),
        "{v}"
    );
    assert_eq!(v["direct"], "ran \"create_event\"", "{v}");
    assert_eq!(v["via"], "ran \"create_event\"", "{v}");
}

/// The official Python SDK's client (1.x) follows the search listing (`search_listing.py`;
/// the SDK from `scripts/fetch-mcp-python`).
#[test]
fn the_python_sdk_follows_the_search_listing() {
    let s = Server::start();
    let rt = runtime();
    two_apps(&s, &rt);
    let python = installed("fetch-mcp-python", &["1"]).remove(0);
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/e2e/mcp/search_listing.py");
    let out = std::process::Command::new(python)
        .arg(script)
        .env("URL", format!("{}/mcp?tools=search", s.url))
        .env("TOKEN", &s.token)
        .env("QUERY", "schedule a meeting")
        .output()
        .expect("python");
    followed(out);
}

/// The official TypeScript SDK's client follows the search listing (`search_listing.cjs`;
/// Node and the SDK from `scripts/fetch-mcp-node`).
#[test]
fn the_typescript_sdk_follows_the_search_listing() {
    let s = Server::start();
    let rt = runtime();
    two_apps(&s, &rt);
    let mut paths = installed("fetch-mcp-node", &[]);
    let entry = paths.pop().expect("the everything server's path");
    let node = paths.pop().expect("Node's path");
    // The SDK sits beside the everything server, in its node_modules.
    let modules = entry
        .ancestors()
        .find(|p| p.file_name().is_some_and(|n| n == "node_modules"))
        .expect("a node_modules folder")
        .to_path_buf();
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/e2e/mcp/search_listing.cjs");
    let out = std::process::Command::new(node)
        .arg(script)
        .env("NODE_PATH", modules)
        .env("URL", format!("{}/mcp?tools=search", s.url))
        .env("TOKEN", &s.token)
        .env("QUERY", "schedule a meeting")
        .output()
        .expect("node");
    followed(out);
}
