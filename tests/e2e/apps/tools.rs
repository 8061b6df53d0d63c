//! Who may call which tools, and the apps' own addresses: `call_tools` patterns through every
//! door (`apps/tools/`, `apps/call/`, `/mcp`), the calling token recorded with a WASM app's
//! writes and sent to a remote app, an app's self-set `mcp_url` (pinned, logged, never a private
//! address unless allowed or within the place the owner gave it: a loopback app on another
//! loopback port), the `Host`/`Origin` `/mcp` answers, and one rule for a non-object
//! `structuredContent` on both doors.

use crate::kit::*;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

/// A prebuilt test component (`target/plugins/`, built by `scripts/build-plugins`).
fn component(name: &str) -> PathBuf {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("target/plugins")
        .join(format!("{name}.wasm"));
    assert!(
        p.exists(),
        "{} is missing: run scripts/build-plugins",
        p.display()
    );
    p
}

/// A server whose compile cache is kept across the tests of this module.
fn server() -> Server {
    let d = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/mine/wasm-cache");
    std::fs::create_dir_all(&d).unwrap();
    Server::start_with_env(&[("DATANOTES_CACHE_DIR", d.to_str().unwrap())])
}

/// Installs the `planning` WASM app (it may write the tasks table); the answer of `apps/create`.
fn install_planning(s: &Server) -> Value {
    let (st, v) = s.post(
        "/datanotes/apps/create/",
        Some(&s.token),
        &json!({"name": "planning", "wasm_path": component("planning"),
                "write": ["personal.tasks.items"], "ddl": true}),
    );
    assert_eq!(st, 200, "{v}");
    v
}

fn names(v: &Value) -> Vec<String> {
    v["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect()
}

/// `apps/call/` as the holder of `token`.
fn call(s: &Server, token: &str, tool: &str, args: Value) -> Value {
    let (st, v) = s.call_as(
        Some(token),
        "apps/call",
        &json!({"tool": tool, "arguments": args}),
        &[],
    );
    assert_eq!(st, 200, "{tool}: {v}");
    v
}

fn tools_of(s: &Server, token: &str) -> Vec<String> {
    let (st, v) = s.call_as(Some(token), "apps/tools", &json!({}), &[]);
    assert_eq!(st, 200, "{v}");
    names(&v)
}

/// The last change of the tasks table (tool_call events, committed after their answer, are
/// left aside).
fn last_migration(s: &Server) -> Value {
    let m = s.migrations(json!({"table": "personal.tasks.items", "limit": 1}));
    m.first().cloned().expect("a migration")
}

#[test]
fn call_tools_limit_what_a_token_lists_and_calls_through_every_door() {
    let s = server();
    let v = install_planning(&s);
    // Every tool by default.
    assert_eq!(v["app"]["call_tools"], json!(["*"]), "{v}");
    let reader = create_app(
        &s,
        json!({"name": "reader", "call_tools": ["select_rows", "list_tables"]}),
    );
    let helper = create_app(
        &s,
        json!({"name": "helper", "call_tools": ["planning_*", "list_tables"]}),
    );
    let open = create_app(&s, json!({"name": "open"}));

    // apps/tools: only the tools each may call, in the namespace's order.
    assert_eq!(tools_of(&s, &reader), ["list_tables", "select_rows"]);
    assert_eq!(
        tools_of(&s, &helper),
        [
            "list_tables",
            "planning_add_task",
            "planning_list_tasks",
            "planning_complete_task"
        ]
    );
    let all = tools_of(&s, &s.token);
    // An app without write, ddl or maintain is not listed the operations that need them.
    let needs_rights = [
        "insert_row",
        "update_row",
        "delete_row",
        "create_table",
        "alter_table",
        "drop_table",
        "set_engine_settings",
        "undo_migration",
        "restore",
        "vacuum",
        "rebuild_index",
        "rebuild_semantic_index",
    ];
    let can: Vec<String> = all
        .iter()
        .filter(|t| !needs_rights.contains(&t.as_str()))
        .cloned()
        .collect();
    assert_eq!(tools_of(&s, &open), can);
    assert!(all.len() > 20 && all.contains(&"planning_add_task".to_string()));

    // /mcp tools/list: the same.
    let agent = Agent::engine(&s, &reader, Some("t / m"));
    assert_eq!(agent.names(), ["list_tables", "select_rows"]);

    // apps/call: refused by `call_tools`, nothing written.
    let seq = s.seq();
    let v = call(&s, &reader, "planning_add_task", json!({"title": "no"}));
    assert_eq!(v["ok"], false, "{v}");
    assert_eq!(v["value"]["error"]["rule"], "call_tools", "{v}");
    assert_eq!(v["value"]["error"]["code"], "forbidden", "{v}");
    assert_eq!(s.seq(), seq);
    // An engine operation outside the patterns, too (a write it may not make either way).
    let v = call(&s, &reader, "create_table", json!({}));
    assert_eq!(v["value"]["error"]["rule"], "call_tools", "{v}");
    // /mcp tools/call: the same refusal, as an error result (the call is reported to the feed
    // as a tool_call event; nothing is written).
    let r = agent.call("planning_add_task", json!({"title": "no"}));
    assert!(is_error(&r), "{r:?}");
    assert!(text(&r).contains("call_tools"), "{}", text(&r));
    let rows = s.migrations(json!({"limit": 10}));
    let new: Vec<_> = rows
        .iter()
        .filter(|m| m["seq"].as_i64() > Some(seq))
        .collect();
    assert!(new.iter().all(|m| m["op"] == "tool_call"), "{new:?}");
    // What it may call, it calls.
    let r = agent.call("list_tables", json!({}));
    assert!(!is_error(&r), "{r:?}");

    // A WASM app's tool records the calling token beside its own: the journal and the feed.
    let v = call(
        &s,
        &helper,
        "planning_add_task",
        json!({"title": "by helper"}),
    );
    assert_eq!(v["ok"], true, "{v}");
    let m = last_migration(&s);
    assert_eq!(m["actor"]["token"], "app:planning", "{m}");
    assert_eq!(m["actor"]["caller"], "app:helper", "{m}");
    let by_mcp = Agent::engine(&s, &helper, Some("claude-code / opus"));
    let r = by_mcp.call("planning_add_task", json!({"title": "over mcp"}));
    assert!(!is_error(&r), "{r:?}");
    let m = last_migration(&s);
    assert_eq!(m["actor"]["caller"], "app:helper", "{m}");
    assert_eq!(m["actor"]["harness"], "claude-code", "{m}");
    let page = s.ok_route("changes", json!({"since": m["seq"].as_i64().unwrap() - 1}));
    let c = page["changes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["seq"] == m["seq"])
        .cloned()
        .expect("the change in the feed");
    assert_eq!(c["actor"]["caller"], "app:helper", "{c}");
    // The journal can be filtered by the caller.
    let by = s.migrations(json!({"actor": "app:helper", "table": "personal.tasks.items"}));
    // The table its first call created, and both rows.
    let ops: Vec<&Value> = by.iter().map(|m| &m["op"]).collect();
    assert_eq!(
        ops,
        [&json!("insert"), &json!("insert"), &json!("create_table")]
    );
    call(
        &s,
        &s.token,
        "planning_add_task",
        json!({"title": "by the owner"}),
    );
    assert_eq!(last_migration(&s)["actor"]["caller"], "owner");

    // A WASM app's own engine calls are not tool calls: `call_tools: []` does not stop them.
    s.ok_route("apps/update", json!({"name": "planning", "call_tools": []}));
    let v = call(&s, &s.token, "planning_add_task", json!({"title": "still"}));
    assert_eq!(v["ok"], true, "{v}");

    // Only the owner sets call_tools, with valid patterns.
    let (st, v) = s.call_as(
        Some(&helper),
        "apps/update",
        &json!({"name": "helper", "call_tools": ["*"]}),
        &[],
    );
    assert_eq!((st, &v["error"]["rule"]), (403, &json!("owner")), "{v}");
    let (st, v) = s.call_as(
        Some(&s.token),
        "apps/update",
        &json!({"name": "helper", "call_tools": ["planning.add"]}),
        &[],
    );
    assert_eq!(
        (st, &v["error"]["column"]),
        (400, &json!("call_tools")),
        "{v}"
    );
    // Widened by the owner: at once.
    s.ok_route(
        "apps/update",
        json!({"name": "reader", "call_tools": ["*"]}),
    );
    assert_eq!(tools_of(&s, &reader), can);
    // The command line sets it too.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_datanotes"))
        .args([
            "apps",
            "update",
            "--name",
            "reader",
            "--call-tool",
            "get_row",
        ])
        .args(["--call-tool", "list_*", "--url", &s.url, "--database"])
        .arg(&s.dir)
        .env_remove("DATANOTES_TOKEN")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        tools_of(&s, &reader),
        ["list_tables", "get_row", "list_migrations"]
    );
}

#[test]
fn a_remote_app_receives_the_caller_and_records_it_with_its_writes() {
    let s = Server::start();
    s.ok(
        "create_table",
        json!({"table": "personal.tasks.items", "description": "Things to do",
               "columns": {"title": {"type": "text", "required": true},
                           "status": {"type": "enum", "values": ["todo", "done"], "default": "todo"}}}),
    );
    let t = create_app(&s, json!({"name": "rp", "write": ["personal.tasks.items"]}));
    let _app = App::start(&s, "rp", &t, &["--array-result"]);
    eventually("rp listed", || {
        tools_of(&s, &s.token).contains(&"rp_echo".into())
    });
    let agent = create_app(&s, json!({"name": "agent", "call_tools": ["rp_*"]}));

    // An app's instructions reach the callers of its tools only.
    let outsider = create_app(
        &s,
        json!({"name": "outsider", "call_tools": ["list_tables"]}),
    );
    for (token, shown) in [(&agent, true), (&outsider, false), (&s.token, true)] {
        let (st, v) = s.call_as(Some(token), "apps/tools", &json!({}), &[]);
        assert_eq!(st, 200, "{v}");
        let i = v["instructions"].as_str().unwrap();
        assert_eq!(i.contains("## App rp"), shown, "{i}");
        assert!(i.starts_with("datanotes:"), "{i}");
        let i = Agent::engine(&s, token, None).instructions();
        assert_eq!(i.contains("## App rp"), shown, "{i}");
    }

    // describe_table shows the app tools on the table that the caller may call.
    for (token, want) in [(&agent, 3), (&outsider, 0)] {
        let (st, d) = s.call_as(
            Some(token),
            "describe_table",
            &json!({"table": "personal.tasks.items"}),
            &[],
        );
        assert_eq!(st, 200, "{d}");
        assert_eq!(d["tools"].as_array().unwrap().len(), want, "{d}");
    }

    let v = call(&s, &agent, "rp_echo", json!({}));
    assert_eq!(
        v["value"]["structuredContent"]["caller"], "app:agent",
        "{v}"
    );
    let r = Agent::engine(&s, &agent, None).call("rp_echo", json!({}));
    assert_eq!(structured(&r)["caller"], "app:agent");

    let v = call(&s, &agent, "rp_add_task", json!({"title": "x"}));
    assert_eq!(v["ok"], true, "{v}");
    let m = last_migration(&s);
    assert_eq!(m["actor"]["token"], "app:rp", "{m}");
    assert_eq!(m["actor"]["caller"], "app:agent", "{m}");
    // Naming a caller gives a token no rights: the agent, which may not write, is still refused.
    let (st, v) = s.call_as(
        Some(&agent),
        "insert_row",
        &json!({"table": "personal.tasks.items", "values": {"title": "mine"}}),
        &[("x-datanotes-caller", "owner")],
    );
    assert_eq!(st, 403, "{v}");
    // A token that is not a remote app's cannot name a caller for its own writes.
    let writer = create_app(&s, json!({"name": "writer", "write": ["personal.*"]}));
    let (st, v) = s.call_as(
        Some(&writer),
        "insert_row",
        &json!({"table": "personal.tasks.items", "values": {"title": "mine"}}),
        &[("x-datanotes-caller", "owner")],
    );
    assert_eq!(st, 200, "{v}");
    let m = last_migration(&s);
    assert_eq!(m["actor"]["token"], "app:writer", "{m}");
    assert_eq!(m["actor"].get("caller"), None, "{m}");

    // structuredContent that is not an object: one rule on both doors (moved into the text).
    let http = call(&s, &s.token, "rp_names", json!({}));
    assert_eq!(http["ok"], true, "{http}");
    let value = &http["value"];
    assert!(value.get("structuredContent").is_none(), "{value}");
    assert_eq!(value["content"][0]["text"], r#"["a","b"]"#, "{value}");
    assert_eq!(value["content"][1]["text"], "two names: a, b", "{value}");
    let r = Agent::owner(&s).call("rp_names", json!({}));
    assert_eq!(r.structured_content, None, "{r:?}");
    assert_eq!(
        serde_json::to_value(&r.content).unwrap(),
        value["content"],
        "/mcp and apps/call differ"
    );
}

#[test]
fn an_app_sets_its_own_address_only_where_the_owner_lets_it() {
    let s = Server::start();
    let tok = create_app(&s, json!({"name": "selfy"}));
    let set = |url: &str| {
        s.call_as(
            Some(&tok),
            "apps/update",
            &json!({"name": "selfy", "mcp_url": url}),
            &[],
        )
    };
    let entry = || s.ok_route("apps/get", json!({"name": "selfy"}))["app"].clone();
    let e = entry();
    assert_eq!(
        (&e["self_url"], &e["self_url_private"]),
        (&json!(true), &json!(false))
    );
    assert_eq!(e["urlChangedAt"], Value::Null);

    // Loopback and private addresses, however written: refused, nothing changed.
    for url in [
        "http://127.0.0.1:9/mcp",
        "http://0x7f000001:9/mcp",
        "http://127.1:9/mcp",
        "http://[::ffff:127.0.0.1]:9/mcp",
        "http://localhost:9/mcp",
        "http://10.0.0.1/mcp",
        "http://169.254.169.254/mcp",
    ] {
        let (st, v) = set(url);
        assert_eq!(st, 403, "{url}: {v}");
        assert_eq!(v["error"]["rule"], "private_address", "{url}: {v}");
        assert_eq!(v["error"]["column"], "mcp_url", "{url}: {v}");
    }
    assert_eq!(entry()["mcp_url"], Value::Null);
    // Only the owner grants it.
    let (st, v) = s.call_as(
        Some(&tok),
        "apps/update",
        &json!({"name": "selfy", "self_url_private": true}),
        &[],
    );
    assert_eq!((st, &v["error"]["rule"]), (403, &json!("owner")), "{v}");
    s.ok_route(
        "apps/update",
        json!({"name": "selfy", "self_url_private": true}),
    );

    // Allowed: each change kept on the entry (when, from what, by whom).
    let (st, v) = set("http://127.0.0.1:9/mcp");
    assert_eq!(st, 200, "{v}");
    let e = &v["app"];
    assert_eq!(e["mcp_url"], "http://127.0.0.1:9/mcp");
    assert!(e["urlChangedAt"].is_string(), "{e}");
    assert_eq!(e["previousUrl"], Value::Null);
    assert_eq!(e["urlChangedBy"], "app:selfy");
    let (st, v) = set("http://127.0.0.1:10/mcp");
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["app"]["previousUrl"], "http://127.0.0.1:9/mcp", "{v}");

    // Pinned by the owner: the same address may be registered again (a restart), another not.
    s.ok_route("apps/update", json!({"name": "selfy", "self_url": false}));
    let (st, v) = set("http://127.0.0.1:10/mcp");
    assert_eq!(st, 200, "{v}");
    let (st, v) = set("http://127.0.0.1:11/mcp");
    assert_eq!((st, &v["error"]["rule"]), (403, &json!("self_url")), "{v}");
    let e = entry();
    assert_eq!(e["mcp_url"], "http://127.0.0.1:10/mcp");
    assert_eq!(e["self_url"], false);
    // The owner still changes it.
    let v = s.ok_route(
        "apps/update",
        json!({"name": "selfy", "mcp_url": "http://127.0.0.1:12/mcp"}),
    );
    assert_eq!(v["app"]["urlChangedBy"], "owner", "{v}");
    assert_eq!(v["app"]["previousUrl"], "http://127.0.0.1:10/mcp", "{v}");
}

#[test]
fn a_loopback_app_moves_itself_to_the_port_it_picked_and_is_served_there() {
    let s = Server::start();
    s.ok(
        "create_table",
        json!({"table": "personal.tasks.items", "description": "Things to do",
               "columns": {"title": {"type": "text", "required": true},
                           "status": {"type": "enum", "values": ["todo", "done"], "default": "todo"}}}),
    );
    // The owner registers it on this machine's loopback, at a port it does not listen on; no
    // grant of private addresses.
    let tok = create_app(
        &s,
        json!({"name": "mover", "write": ["personal.tasks.items"], "mcp_url": "http://127.0.0.1:9/mcp"}),
    );
    // It picks a free port and moves itself there at start.
    let app = App::spawn(&s.url, "mover", &tok, &[], false);
    assert!(app.url.starts_with("http://127.0.0.1:"), "{}", app.url);
    assert_ne!(app.url, "http://127.0.0.1:9/mcp");
    let e = s.ok_route("apps/get", json!({"name": "mover"}))["app"].clone();
    assert_eq!(e["mcp_url"], app.url.as_str(), "{e}");
    assert_eq!(e["previousUrl"], "http://127.0.0.1:9/mcp", "{e}");
    assert_eq!(e["urlChangedBy"], "app:mover", "{e}");
    assert_eq!(e["self_url_private"], false, "{e}");

    // Its tools are served from there, on both doors.
    eventually("mover listed", || {
        tools_of(&s, &s.token).contains(&"mover_add_task".into())
    });
    let v = call(&s, &s.token, "mover_add_task", json!({"title": "moved"}));
    assert_eq!(v["ok"], true, "{v}");
    assert_eq!(last_migration(&s)["actor"]["token"], "app:mover");
    let agent = Agent::owner(&s);
    assert!(agent.names().contains(&"mover_list_tasks".to_string()));
    let r = agent.call("mover_list_tasks", json!({}));
    assert!(text(&r).contains("moved"), "{r:?}");

    // From loopback, not into the private network: refused, the entry unchanged.
    let (st, v) = s.call_as(
        Some(&tok),
        "apps/update",
        &json!({"name": "mover", "mcp_url": "http://10.0.0.1/mcp"}),
        &[],
    );
    assert_eq!(st, 403, "{v}");
    assert_eq!(v["error"]["rule"], "private_address", "{v}");
    assert_eq!(v["error"]["column"], "mcp_url", "{v}");
    let m = v["error"]["message"].as_str().unwrap();
    assert!(m.contains("any loopback address of this machine"), "{m}");
    assert_eq!(
        s.ok_route("apps/get", json!({"name": "mover"}))["app"]["mcp_url"],
        app.url.as_str()
    );
}

/// `initialize` on `/mcp` with these headers: the answer's status.
fn initialize(s: &Server, headers: &[(&str, &str)]) -> u16 {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "host-test", "version": "1"}}});
    let mut h = vec![
        ("accept", "application/json, text/event-stream"),
        ("content-type", "application/json"),
    ];
    h.extend_from_slice(headers);
    let mut req = s
        .http
        .post(format!("{}/mcp", s.url))
        .bearer_auth(&s.token)
        .body(serde_json::to_vec(&body).unwrap());
    for (k, v) in h {
        req = req.header(k, v);
    }
    req.send().unwrap().status().as_u16()
}

#[test]
fn mcp_answers_the_hosts_of_its_listen_address_and_public_names() {
    // On 127.0.0.1: loopback names only.
    let s = Server::start();
    let port = s.url.rsplit(':').next().unwrap().to_string();
    let host = |h: &str| format!("{h}:{port}");
    assert_eq!(initialize(&s, &[("host", &host("127.0.0.1"))]), 200);
    assert_eq!(initialize(&s, &[("host", &host("localhost"))]), 200);
    assert_eq!(initialize(&s, &[("host", &host("192.168.7.7"))]), 403);
    assert_eq!(initialize(&s, &[("host", &host("evil.example.com"))]), 403);
    // Origin: checked against the same hosts.
    let ok_host = host("127.0.0.1");
    let with_origin = |o: &str| initialize(&s, &[("host", &ok_host), ("origin", o)]);
    assert_eq!(with_origin(&format!("http://localhost:{port}")), 200);
    assert_eq!(with_origin("http://evil.example.com"), 403);
    assert_eq!(with_origin("null"), 403);
    drop(s);

    // On every address, with a public name: any address of the machine, and the name.
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start_with(
        dir.path(),
        &[
            "--listen",
            "0.0.0.0:0",
            "--public-host",
            "notes.example.org",
        ],
    );
    let port = s.url.rsplit(':').next().unwrap().to_string();
    let host = |h: &str| format!("{h}:{port}");
    assert_eq!(initialize(&s, &[("host", &host("192.168.7.7"))]), 200);
    assert_eq!(initialize(&s, &[("host", &host("notes.example.org"))]), 200);
    assert_eq!(
        initialize(
            &s,
            &[
                ("host", &host("192.168.7.7")),
                ("origin", "https://notes.example.org")
            ]
        ),
        200
    );
    assert_eq!(initialize(&s, &[("host", &host("evil.example.com"))]), 403);
    // The tools are served to a client on that address (the lean path included).
    let agent = Agent::connect(&format!("{}/mcp", s.url), Some(&s.token), None);
    assert!(agent.names().contains(&"select_rows".to_string()));
}

/// `/mcp` `tools/list` writes each tool once per namespace and copies it into every listing:
/// what an agent reads is each tool whole (description, schema, annotations) as `apps/tools`
/// lists it, for the owner and for a token that may call fewer tools, and a change of the
/// namespace shows in the next listing.
#[test]
fn mcp_lists_each_tool_whole_as_apps_tools_does() {
    let s = server();
    install_planning(&s);
    let helper = create_app(
        &s,
        json!({"name": "helper", "call_tools": ["planning_*", "describe_table"]}),
    );
    let listed = |token: &str| {
        let tools = Agent::engine(&s, token, None).tools();
        serde_json::to_value(tools).unwrap()
    };
    let apps_tools = |token: &str| {
        let (st, mut v) = s.call_as(Some(token), "apps/tools", &json!({}), &[]);
        assert_eq!(st, 200, "{v}");
        let mut tools = v["tools"].take();
        for t in tools.as_array_mut().unwrap() {
            t.as_object_mut().unwrap().remove("app");
        }
        tools
    };
    for token in [&s.token, &helper] {
        let mcp = listed(token);
        assert_eq!(mcp, apps_tools(token));
        let add = mcp
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == "planning_add_task")
            .expect("planning_add_task listed");
        assert!(add["description"].as_str().is_some_and(|d| !d.is_empty()));
        assert_eq!(add["inputSchema"]["type"], "object", "{add}");
    }
    assert_eq!(listed(&helper).as_array().unwrap().len(), 4);
    // The namespace changes: the next listing is the new one.
    s.ok_route("apps/delete", json!({"name": "planning"}));
    let after = listed(&s.token);
    assert!(
        after
            .as_array()
            .unwrap()
            .iter()
            .all(|t| !t["name"].as_str().unwrap().starts_with("planning_")),
        "{after}"
    );
    assert_eq!(after, apps_tools(&s.token));
    assert_eq!(listed(&helper).as_array().unwrap().len(), 1);
}
