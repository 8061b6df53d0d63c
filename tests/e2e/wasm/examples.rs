//! The three example apps installed, listed and called; scopes enforced on a component's
//! engine calls; tool names taken by an operation or an earlier app.

use super::*;

#[test]
fn example_apps_install_list_and_call() {
    let s = server();
    // Rust by path, Python by path, JavaScript as base64.
    let planning = s.install(
        "planning",
        "planning",
        json!({"write": ["personal.tasks.items"], "ddl": true}),
    );
    assert_eq!(
        planning["app"]["tools"],
        json!([
            "planning_add_task",
            "planning_list_tasks",
            "planning_complete_task"
        ])
    );
    assert!(planning["token"].as_str().unwrap().starts_with("dn_app_"));
    let journal = s.install(
        "journal",
        "journal",
        json!({"write": ["personal.notes.daily"], "ddl": true}),
    );
    assert_eq!(
        journal["app"]["tools"],
        json!([
            "journal_append",
            "journal_read",
            "journal_recent",
            "journal_search"
        ])
    );
    let bytes = std::fs::read(component("bookmarks")).unwrap();
    let b64 = {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode(&bytes)
    };
    let (st, bookmarks) = s.post(
        "/datanotes/apps/create/",
        Some(&s.token),
        &json!({"name": "bookmarks", "write": ["personal.notes.bookmarks"], "ddl": true, "wasm_base64": b64}),
    );
    assert_eq!(st, 200, "{bookmarks}");
    assert_eq!(
        bookmarks["app"]["tools"],
        json!([
            "bookmarks_add",
            "bookmarks_search",
            "bookmarks_by_tag",
            "bookmarks_tags"
        ])
    );
    assert_eq!(bookmarks["app"]["wasm"]["size"], bytes.len());

    // Listed, with their kind, tools and reachability.
    let (st, apps) = s.post("/datanotes/apps/", Some(&s.token), &json!({}));
    assert_eq!(st, 200);
    let names: Vec<&str> = apps["apps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["planning", "journal", "bookmarks"]);
    for a in apps["apps"].as_array().unwrap() {
        assert_eq!(a["kind"], "wasm", "{a}");
        assert_eq!(a["reachable"], true, "{a}");
        assert_eq!(a["skippedTools"], json!([]), "{a}");
        assert_eq!(a["wasm"]["sha256"].as_str().unwrap().len(), 64, "{a}");
    }

    // Rust: planning.
    let t = s.tool_ok(
        "planning_add_task",
        json!({"title": "Write the guide", "due": "2026-12-01", "tags": ["docs"]}),
    );
    let id = t["id"].as_str().unwrap().to_string();
    s.tool_ok("planning_add_task", json!({"title": "Ship it"}));
    let list = s.tool_ok("planning_list_tasks", json!({"status": "todo"}));
    assert_eq!(list["total"], 2, "{list}");
    s.tool_ok("planning_complete_task", json!({"id": id}));
    let done = s.tool_ok("planning_list_tasks", json!({"status": "done"}));
    assert_eq!(done["rows"][0]["id"], id.as_str());
    let e = s.tool_err(
        "planning_add_task",
        json!({"title": "x", "due": "not a date"}),
    );
    assert!(
        e.contains("due"),
        "the engine's error reaches the agent: {e}"
    );

    // Python: journal.
    let a = s.tool_ok(
        "journal_append",
        json!({"text": "Installed three apps", "date": "2026-11-30", "tags": ["wasm"]}),
    );
    assert_eq!(a, json!({"date": "2026-11-30", "version": 1, "entries": 1}));
    let a = s.tool_ok(
        "journal_append",
        json!({"text": "Wrote tests for them", "date": "2026-11-30", "tags": ["tests"]}),
    );
    assert_eq!(a["entries"], 2, "{a}");
    s.tool_ok(
        "journal_append",
        json!({"text": "A quiet day", "date": "2026-11-29"}),
    );
    let day = s.tool_ok("journal_read", json!({"date": "2026-11-30"}));
    let entries = day["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 2, "{day}");
    assert!(
        entries[0]
            .as_str()
            .unwrap()
            .ends_with("Installed three apps")
    );
    assert_eq!(day["tags"], json!(["wasm", "tests"]));
    let recent = s.tool_ok("journal_recent", json!({"days": 5}));
    assert_eq!(recent["days"][0]["date"], "2026-11-30", "{recent}");
    assert_eq!(recent["days"][1]["date"], "2026-11-29", "{recent}");
    let hits = s.tool_ok("journal_search", json!({"query": "quiet"}));
    assert_eq!(hits["hits"][0]["date"], "2026-11-29", "{hits}");
    let e = s.tool_err("journal_read", json!({"date": "2026-13-01"}));
    assert!(e.contains("YYYY-MM-DD"), "{e}");
    // The row is a Markdown file, written with the app as actor.
    let md = std::fs::read_to_string(s.row_path("personal.notes.daily", "2026-11-30")).unwrap();
    assert!(md.contains("Wrote tests for them"), "{md}");
    let m = s.migrations(json!({"table": "personal.notes.daily"}));
    assert_eq!(m[0]["actor"]["app"], "journal", "{}", m[0]);

    // JavaScript: bookmarks.
    let b = s.tool_ok(
        "bookmarks_add",
        json!({"url": "https://example.org/components", "title": "The component model",
               "tags": ["WASM", "reading"], "note": "Worlds, interfaces and **components**."}),
    );
    assert_eq!(b["added"], true, "{b}");
    let again = s.tool_ok(
        "bookmarks_add",
        json!({"url": "https://example.org/components", "tags": ["later"]}),
    );
    assert_eq!(again["added"], false);
    assert_eq!(again["tags"], json!(["wasm", "reading", "later"]));
    s.tool_ok(
        "bookmarks_add",
        json!({"url": "https://example.org/sqlite", "title": "SQLite FTS5", "tags": ["reading"]}),
    );
    let found = s.tool_ok("bookmarks_search", json!({"query": "interfaces"}));
    assert_eq!(
        found["bookmarks"][0]["url"], "https://example.org/components",
        "{found}"
    );
    let tagged = s.tool_ok("bookmarks_by_tag", json!({"tag": "reading"}));
    assert_eq!(tagged["bookmarks"].as_array().unwrap().len(), 2, "{tagged}");
    let tags = s.tool_ok("bookmarks_tags", json!({}));
    assert_eq!(tags["tags"][0], json!({"tag": "reading", "count": 2}));
    let e = s.tool_err("bookmarks_add", json!({"url": "ftp://nope"}));
    assert!(
        e.contains("constraint_violation") && e.contains("pattern"),
        "the engine's error, intact: {e}"
    );

    // describe_table lists the tools that declare the table.
    let d = s.ok(
        "describe_table",
        json!({"table": "personal.notes.bookmarks"}),
    );
    let tools: Vec<&str> = d["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("{d}"))
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        tools,
        [
            "bookmarks_add",
            "bookmarks_search",
            "bookmarks_by_tag",
            "bookmarks_tags"
        ]
    );

    // MCP: the same tools after the operations, the apps' instructions, calls.
    let mcp = Agent::owner(&s);
    let tools = mcp.names();
    let first_app = tools.iter().position(|t| t == "planning_add_task").unwrap();
    assert!(tools[..first_app].contains(&"select_rows".to_string()));
    for t in [
        "planning_list_tasks",
        "journal_append",
        "journal_search",
        "bookmarks_add",
        "bookmarks_tags",
    ] {
        assert!(tools.contains(&t.to_string()), "{t} missing from {tools:?}");
    }
    let ins = mcp.instructions();
    for app in ["planning", "journal", "bookmarks"] {
        assert!(
            ins.contains(&format!("## App {app}")),
            "instructions: {ins}"
        );
    }
    let r = mcp.call("journal_read", json!({"date": "2026-11-29"}));
    assert_ne!(r.is_error, Some(true), "{r:?}");
    assert_eq!(structured(&r)["entries"].as_array().unwrap().len(), 1);
    let r = mcp.call("bookmarks_by_tag", json!({"tag": "later"}));
    assert_eq!(
        structured(&r)["bookmarks"][0]["title"],
        "The component model"
    );
    let r = mcp.call("planning_add_task", json!({"title": "Through MCP"}));
    assert_ne!(r.is_error, Some(true), "{r:?}");
    let r = mcp.call("planning_list_tasks", json!({}));
    assert_eq!(structured(&r)["total"], 3, "{r:?}");
    let r = mcp.call("journal_append", json!({"text": ""}));
    assert_eq!(r.is_error, Some(true), "{r:?}");
    assert!(text(&r).contains("give the entry"), "{r:?}");
}

/// Asserts a hostile tool's engine call was refused with the engine's 403 error naming `rule`,
/// and that neither the files nor the journal changed.
fn assert_refused(s: &Server, tool: &str, args: Value, rule: &str) -> Value {
    let files = snapshot(&s.dir);
    let seq = s.seq();
    let v = s.tool(tool, args.clone());
    assert_eq!(v["ok"], false, "{tool} {args}: {v}");
    let e = &v["value"]["structuredContent"];
    assert_eq!(e["status"], 403, "{tool}: {v}");
    assert_eq!(e["code"], "forbidden", "{tool}: {v}");
    assert_eq!(e["error"]["rule"], rule, "{tool}: {v}");
    assert_error_shape(&e["error"]);
    assert!(
        snapshot(&s.dir) == files,
        "{tool} was refused but changed the files"
    );
    assert_eq!(s.seq(), seq, "{tool} was refused but journaled");
    e["error"].clone()
}

#[test]
fn scopes_are_enforced_on_a_components_engine_calls() {
    let s = server();
    create_tasks(&s);
    s.ok(
        "create_table",
        json!({"table": "hostile.ok.notes", "columns": {"title": {"type": "text"}}}),
    );
    s.install("hostile", "hostile", json!({"write": ["hostile.ok.*"]}));

    // Reads are always allowed; writes inside the scope too.
    let r = s.tool_ok(
        "hostile_engine",
        json!({"op": "select_rows", "args": {"table": PEOPLE}}),
    );
    assert_eq!(r["total"], 2, "{r}");
    let w = s.tool_ok("hostile_write", json!({"table": "hostile.ok.notes"}));
    assert!(w["seq"].is_i64(), "{w}");
    let m = s.migrations(json!({"table": "hostile.ok.notes"}));
    assert_eq!(m[0]["actor"]["app"], "hostile", "{}", m[0]);

    // A write outside `write`.
    let e = assert_refused(&s, "hostile_write", json!({"table": TASKS}), "write");
    assert_eq!(e["table"], TASKS);
    assert!(
        e["message"].as_str().unwrap().contains("hostile.ok.*"),
        "{e}"
    );
    // Every row op, not only inserts.
    assert_refused(
        &s,
        "hostile_engine",
        json!({"op": "delete_row", "args": {"table": PEOPLE, "id": "ada"}}),
        "write",
    );
    // A DDL without `ddl`, even inside the write scope.
    assert_refused(&s, "hostile_ddl", json!({"table": "hostile.ok.new"}), "ddl");
    assert_refused(
        &s,
        "hostile_engine",
        json!({"op": "drop_table", "args": {"table": "hostile.ok.notes"}}),
        "ddl",
    );
    // Maintenance without `maintain`.
    assert_refused(&s, "hostile_maintain", json!({"op": "vacuum"}), "maintain");
    assert_refused(
        &s,
        "hostile_maintain",
        json!({"op": "set_engine_settings"}),
        "maintain",
    );
    assert_refused(
        &s,
        "hostile_engine",
        json!({"op": "undo_migration", "args": {"seq": 1}}),
        "maintain",
    );

    // Rights granted by the owner apply to the running component at once...
    let (st, v) = s.post(
        "/datanotes/apps/update/",
        Some(&s.token),
        &json!({"name": "hostile", "ddl": true}),
    );
    assert_eq!(st, 200, "{v}");
    let c = s.tool_ok("hostile_ddl", json!({"table": "hostile.ok.new"}));
    assert_eq!(c["table"], "hostile.ok.new", "{c}");
    // ...and so are rights taken away.
    let (st, v) = s.post(
        "/datanotes/apps/update/",
        Some(&s.token),
        &json!({"name": "hostile", "write": [], "ddl": false}),
    );
    assert_eq!(st, 200, "{v}");
    assert_refused(
        &s,
        "hostile_write",
        json!({"table": "hostile.ok.notes"}),
        "write",
    );
}

/// A tiny remote app: an MCP server in this process, on 127.0.0.1:0, whose tools are `names`.
mod remote {
    use rmcp::model::{
        CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ListToolsResult,
        PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
    };
    use rmcp::service::RequestContext;
    use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
    use rmcp::transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService,
    };
    use rmcp::{ErrorData, RoleServer, ServerHandler};
    use serde_json::json;
    use std::sync::Arc;

    #[derive(Clone)]
    struct Fake {
        tools: Vec<Tool>,
    }

    impl ServerHandler for Fake {
        fn get_info(&self) -> ServerConfig {
            ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
        }

        async fn list_tools(
            &self,
            _req: Option<PaginatedRequestParams>,
            _rc: RequestContext<RoleServer>,
        ) -> Result<ListToolsResult, ErrorData> {
            Ok(ListToolsResult::with_all_items(self.tools.clone()))
        }

        async fn call_tool(
            &self,
            req: CallToolRequestParams,
            _rc: RequestContext<RoleServer>,
        ) -> Result<CallToolResponse, ErrorData> {
            Ok(
                CallToolResult::success(vec![ContentBlock::text(format!("remote {}", req.name))])
                    .into(),
            )
        }
    }

    /// Serves until the process ends; answers its MCP URL.
    pub fn serve(names: &[&str]) -> String {
        let tools: Vec<Tool> = names
            .iter()
            .map(|n| {
                serde_json::from_value(json!({"name": n, "description": "a remote tool", "inputSchema": {"type": "object"}}))
                    .unwrap()
            })
            .collect();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let fake = Fake { tools };
                let service = StreamableHttpService::new(
                    move || Ok(fake.clone()),
                    Arc::new(LocalSessionManager::default()),
                    StreamableHttpServerConfig::default(),
                );
                let app = axum::Router::new().nest_service("/mcp", service);
                let l = tokio::net::TcpListener::from_std(listener).unwrap();
                axum::serve(l, app).await.unwrap();
            });
        });
        format!("http://{addr}/mcp")
    }
}

#[test]
fn tool_names_taken_by_an_operation_or_an_earlier_app_are_skipped() {
    let s = server();
    let url = remote::serve(&["hostile_ok", "remote_hello", "select_rows"]);
    let (st, v) = s.post(
        "/datanotes/apps/create/",
        Some(&s.token),
        &json!({"name": "remote", "mcp_url": url}),
    );
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["app"]["kind"], "remote");
    assert_eq!(v["app"]["tools"], json!(["hostile_ok", "remote_hello"]));
    assert_eq!(
        v["app"]["skippedTools"],
        json!([{"name": "select_rows", "takenBy": "engine"}])
    );

    s.install("hostile", "hostile", json!({}));
    let h = s.app("hostile");
    let skipped = h["skippedTools"].as_array().unwrap();
    assert!(
        skipped.contains(&json!({"name": "hostile_ok", "takenBy": "remote"})),
        "{h}"
    );
    assert!(
        skipped.contains(&json!({"name": "list_tables", "takenBy": "engine"})),
        "{h}"
    );
    let tools: Vec<&str> = h["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert!(tools.contains(&"hostile_trap") && !tools.contains(&"hostile_ok"));

    // Calls go to whoever holds the name.
    let v = s.tool("hostile_ok", json!({}));
    assert_eq!(v["servedBy"], "remote", "{v}");
    assert_eq!(v["value"]["content"][0]["text"], "remote hostile_ok");
    let v = s.tool("list_tables", json!({}));
    assert_eq!(v["servedBy"], "engine", "{v}");
    assert_eq!(v["value"]["tables"], json!([]), "{v}");
    let v = s.tool("hostile_engine", json!({"op": "list_tables"}));
    assert_eq!(v["servedBy"], "hostile", "{v}");

    // When the remote app goes, the WASM app gets the name.
    let (st, v) = s.post(
        "/datanotes/apps/delete/",
        Some(&s.token),
        &json!({"name": "remote"}),
    );
    assert_eq!(st, 200, "{v}");
    let v = s.tool("hostile_ok", json!({}));
    assert_eq!(v["servedBy"], "hostile", "{v}");
}
