//! WASM apps end to end, through the real server: the three example apps (Rust, Python,
//! JavaScript) installed, listed and called over `/apps/call/` and MCP; scopes enforced on a
//! component's engine calls; name collisions; the compile cache across restarts; hostile
//! components contained while good calls go on; a timed-out call cancelled; a component for
//! another world refused; outgoing HTTP (wasi:http) only to the hosts the owner allows.
//!
//! The components come from `target/plugins/` (built by `scripts/build-plugins`, run once here:
//! it does nothing when they are up to date). Compiled components are cached in one folder for
//! every test (`target/wasm-test-cache`), so the Python and JavaScript apps compile once.

use crate::kit::*;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

mod cancel;
mod idle;
mod typed;
mod v2;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The path of a built component; builds them all once per test run.
pub(crate) fn component(name: &str) -> PathBuf {
    static BUILT: OnceLock<()> = OnceLock::new();
    BUILT.get_or_init(|| {
        let out = std::process::Command::new(root().join("scripts/build-plugins"))
            .output()
            .expect("run scripts/build-plugins");
        assert!(
            out.status.success(),
            "scripts/build-plugins failed:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    });
    let p = root().join("target/plugins").join(format!("{name}.wasm"));
    assert!(p.exists(), "{} is missing", p.display());
    p
}

pub(crate) fn shared_cache() -> String {
    let d = root().join("target/wasm-test-cache");
    std::fs::create_dir_all(&d).unwrap();
    d.to_string_lossy().into_owned()
}

/// A server whose compile cache is the shared one.
fn server() -> Server {
    Server::start_with_env(&[("DATANOTES_CACHE_DIR", &shared_cache())])
}

impl Server {
    /// Installs a component as a WASM app; answers the create answer.
    pub(crate) fn install(&self, name: &str, file: &str, extra: Value) -> Value {
        let mut body = json!({"name": name, "wasm_path": component(file)});
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        let (st, v) = self.post("/datanotes/apps/create/", Some(&self.token), &body);
        assert_eq!(st, 200, "installing {name}: {v}");
        assert_eq!(v["app"]["kind"], "wasm", "{v}");
        v
    }

    /// Calls a tool through `/apps/call/`: answers `{ok, value, servedBy}`.
    pub(crate) fn tool(&self, tool: &str, args: Value) -> Value {
        let (st, v) = self.post(
            "/datanotes/apps/call/",
            Some(&self.token),
            &json!({"tool": tool, "arguments": args}),
        );
        assert_eq!(st, 200, "{tool}: {v}");
        v
    }

    /// Calls a tool that must succeed; answers its structured result (or its text).
    pub(crate) fn tool_ok(&self, tool: &str, args: Value) -> Value {
        let v = self.tool(tool, args.clone());
        assert_eq!(v["ok"], true, "{tool} {args}: {v}");
        match v["value"].get("structuredContent") {
            Some(s) => s.clone(),
            None => v["value"]["content"][0]["text"].clone(),
        }
    }

    /// Calls a tool that must fail; answers its error text.
    fn tool_err(&self, tool: &str, args: Value) -> String {
        let v = self.tool(tool, args.clone());
        assert_eq!(v["ok"], false, "{tool} {args} should fail: {v}");
        v["value"]["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    pub(crate) fn app(&self, name: &str) -> Value {
        let (st, v) = self.post(
            "/datanotes/apps/get/",
            Some(&self.token),
            &json!({"name": name}),
        );
        assert_eq!(st, 200, "{v}");
        v["app"].clone()
    }
}

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

/// The compile cache's files with their modification times and sizes.
fn cache_files(dir: &Path) -> Vec<(String, std::time::SystemTime, u64)> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| {
            let m = e.metadata().unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                m.modified().unwrap(),
                m.len(),
            )
        })
        .collect();
    v.sort();
    v
}

/// `datanotes apps install`, the owner's command line, against the running server.
fn cli_install(s: &Server, args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_datanotes"))
        .args(["apps", "install"])
        .args(args)
        .args(["--url", &s.url, "--database"])
        .arg(&s.dir)
        .env_remove("DATANOTES_TOKEN")
        .output()
        .expect("run datanotes apps install")
}

#[test]
fn the_command_line_installs_and_updates_a_component() {
    let s = server();
    let planning = component("planning");
    let out = cli_install(
        &s,
        &[
            planning.to_str().unwrap(),
            "--name",
            "planning",
            "--write",
            "personal.tasks.*",
            "--ddl",
            "true",
            "--memory-mb",
            "64",
            "--allow-host",
            "api.example.com",
            "--allow-host",
            "127.0.0.1:8080",
        ],
    );
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stderr.contains("installing planning"), "{stderr}");
    assert!(
        stdout.contains("dn_app_"),
        "the token is printed once: {stdout}"
    );
    let app = s.app("planning");
    assert_eq!(app["kind"], "wasm", "{app}");
    assert_eq!(app["write"], json!(["personal.tasks.*"]), "{app}");
    assert_eq!(app["wasm"]["limits"]["memory_mb"], 64, "{app}");
    assert_eq!(
        app["wasm"]["allow_hosts"],
        json!(["api.example.com", "127.0.0.1:8080"]),
        "{app}"
    );
    // It works: a tool of the component, through the engine.
    let v = s.tool_ok(
        "planning_add_task",
        json!({"title": "Installed from the CLI"}),
    );
    assert!(v["id"].is_string(), "{v}");
    // Again with the same name: an update, which may take the network back.
    let out = cli_install(
        &s,
        &[
            planning.to_str().unwrap(),
            "--name",
            "planning",
            "--allow-host",
            "",
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("updating planning"), "{stderr}");
    assert_eq!(s.app("planning")["wasm"]["allow_hosts"], json!([]));
    // A bad host: the error says which and why, and nothing changed.
    let out = cli_install(
        &s,
        &[
            planning.to_str().unwrap(),
            "--name",
            "planning",
            "--allow-host",
            "http://x/y",
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("allow_hosts"), "{stderr}");
    assert_eq!(s.app("planning")["wasm"]["allow_hosts"], json!([]));
}

#[test]
fn a_restart_reuses_the_compile_cache() {
    let cache = tempfile::tempdir().unwrap();
    let cache_dir = cache.path().to_string_lossy().into_owned();
    let s = Server::start_with_env(&[("DATANOTES_CACHE_DIR", &cache_dir)]);
    s.install(
        "planning",
        "planning",
        json!({"write": ["personal.tasks.items"], "ddl": true}),
    );
    s.install("hostile", "hostile", json!({}));
    s.tool_ok("planning_add_task", json!({"title": "Before the restart"}));
    let before = cache_files(cache.path());
    // Next to each compiled artifact, the tools its component listed (`.json`).
    assert_eq!(
        before.iter().filter(|f| f.0.ends_with(".cwasm")).count(),
        2,
        "one compiled artifact per component: {before:?}"
    );
    assert!(
        before
            .iter()
            .all(|(n, _, len)| (n.ends_with(".cwasm") || n.ends_with(".json")) && *len > 0)
    );
    // The installed components are kept by content.
    let apps_dir = s.dir.join(".datanotes/apps");
    assert_eq!(std::fs::read_dir(&apps_dir).unwrap().count(), 2);

    let s = s.restart();
    let started = Instant::now();
    eventually("the apps are listed after the restart", || {
        let a = s.app("planning");
        let h = s.app("hostile");
        a["tools"].as_array().is_some_and(|t| t.len() == 3)
            && h["tools"].as_array().is_some_and(|t| !t.is_empty())
    });
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "listed {:?} after start",
        started.elapsed()
    );
    let list = s.tool_ok("planning_list_tasks", json!({}));
    assert_eq!(list["rows"][0]["values"]["title"], "Before the restart");
    s.tool_ok("hostile_ok", json!({}));
    assert_eq!(
        cache_files(cache.path()),
        before,
        "the compile cache was rewritten: the components were compiled again"
    );

    // A deleted app's component goes; its cache entry stays for a reinstall.
    let (st, v) = s.post(
        "/datanotes/apps/delete/",
        Some(&s.token),
        &json!({"name": "hostile"}),
    );
    assert_eq!(st, 200, "{v}");
    assert_eq!(std::fs::read_dir(&apps_dir).unwrap().count(), 1);
    s.install("hostile", "hostile", json!({}));
    assert_eq!(cache_files(cache.path()), before);
}

#[test]
fn the_server_starts_before_its_components_are_compiled() {
    // Installed with the shared cache, restarted with an empty one: the Python component must
    // be compiled again (seconds), and the server must not wait for it to start serving.
    let s = server();
    s.install(
        "journal",
        "journal",
        json!({"write": ["personal.notes.daily"], "ddl": true}),
    );
    s.tool_ok(
        "journal_append",
        json!({"text": "before the restart", "date": "2026-11-01"}),
    );
    let mut s = s;
    s.stop();
    let empty = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let s2 = Server::start_opts(
        &s.dir,
        &[],
        &[("DATANOTES_CACHE_DIR", &empty.path().to_string_lossy())],
    );
    let serving = started.elapsed();
    assert_eq!(s2.get("/datanotes/health").0, 200);
    // Its last known tools are listed at once; it answers while the component compiles, then
    // the app's tools answer.
    assert!(
        s2.app("journal")["tools"]
            .as_array()
            .is_some_and(|t| !t.is_empty()),
        "the last known tools are not listed at start: {}",
        s2.app("journal")
    );
    // The first call waits for the compile, which takes minutes for a debug build on a loaded
    // machine: a client without the kit's 60 s timeout.
    let patient = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(600))
        .build()
        .unwrap();
    let read = || -> Value {
        patient
            .post(format!("{}/datanotes/apps/call/", s2.url))
            .bearer_auth(&s2.token)
            .json(&json!({"tool": "journal_read", "arguments": {"date": "2026-11-01"}}))
            .send()
            .and_then(|r| r.json())
            .unwrap_or_else(|e| panic!("journal_read after the restart: {e}"))
    };
    let mut last = Value::Null;
    let answered = poll(Duration::from_secs(600), Duration::from_millis(50), || {
        last = read();
        (last["ok"] == true).then_some(())
    });
    assert!(
        answered.is_some(),
        "journal never answered after the restart: {last}"
    );
    let compiled = started.elapsed();
    let day = s2.tool_ok("journal_read", json!({"date": "2026-11-01"}));
    assert_eq!(day["entries"].as_array().unwrap().len(), 1, "{day}");
    let artifacts = std::fs::read_dir(empty.path())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".cwasm"))
        .count();
    assert_eq!(artifacts, 1);
    assert!(
        serving < compiled / 2,
        "serving after {serving:?}, the component compiled after {compiled:?}"
    );
    drop(s2);
    drop(s);
}

/// Runs `bad` (in another thread) while 50 good calls run 10 at a time; every good call must
/// succeed, and the app still answers after. Answers what `bad` answered.
fn during_good_calls(s: &Server, what: &str, bad: impl FnOnce() -> Value + Send) -> Value {
    std::thread::scope(|scope| {
        let bad = scope.spawn(bad);
        let good: Vec<_> = (0..10)
            .map(|i| {
                scope.spawn(move || {
                    for j in 0..5 {
                        let (tool, args) = if (i + j) % 2 == 0 {
                            ("hostile_ok", json!({}))
                        } else {
                            ("planning_list_tasks", json!({}))
                        };
                        let v = s.tool(tool, args);
                        assert_eq!(v["ok"], true, "{tool} during {what}: {v}");
                    }
                })
            })
            .collect();
        for g in good {
            g.join().expect("a good call failed");
        }
        let v = bad.join().unwrap();
        // After each, the app still answers.
        let ok = s.tool_ok("hostile_ok", json!({}));
        assert_eq!(ok["ok"], true, "after {what}: {ok}");
        v
    })
}

/// Calls a hostile tool during good calls: it must fail alone. Answers its error text.
fn contained(s: &Server, hostile: &str, args: Value) -> String {
    let v = during_good_calls(s, hostile, || s.tool(hostile, args.clone()));
    assert_eq!(v["ok"], false, "{hostile} should fail: {v}");
    assert_eq!(v["servedBy"], "hostile", "{v}");
    assert_eq!(v["value"]["isError"], true, "{v}");
    v["value"]["content"][0]["text"]
        .as_str()
        .unwrap()
        .to_string()
}

#[test]
fn hostile_components_are_contained() {
    let s = server();
    s.install(
        "planning",
        "planning",
        json!({"write": ["personal.tasks.items"], "ddl": true}),
    );
    s.tool_ok("planning_add_task", json!({"title": "Stay up"}));
    let v = s.install(
        "hostile",
        "hostile",
        // cpu_ms counts wall-clock ticks while guest code runs: generous enough that the memory
        // bomb reaches its memory limit first even on a loaded machine.
        json!({"limits": {"cpu_ms": 3000, "memory_mb": 32, "max_result_bytes": 1_000_000, "max_instances": 4}}),
    );
    assert_eq!(v["app"]["wasm"]["limits"]["cpu_ms"], 3000);

    let started = Instant::now();
    let e = contained(&s, "hostile_spin", json!({}));
    assert!(e.contains("CPU time (3000 ms)"), "{e}");
    assert!(started.elapsed() < Duration::from_secs(20));

    let e = contained(&s, "hostile_bomb", json!({}));
    assert!(e.contains("memory limit (32 MiB)"), "{e}");

    let e = contained(&s, "hostile_huge", json!({}));
    assert!(
        e.contains("10000000 bytes") && e.contains("limit of 1000000"),
        "{e}"
    );
    // Under the limit, a large result is fine.
    let big = s.tool_ok("hostile_huge", json!({"bytes": 900_000}));
    assert_eq!(big.as_str().unwrap().len(), 900_000);

    let e = contained(&s, "hostile_trap", json!({}));
    assert!(e.contains("trapped"), "{e}");
    assert!(
        e.contains("hostile_trap panics on purpose"),
        "the guest's panic message: {e}"
    );

    let e = contained(&s, "hostile_stack", json!({}));
    assert!(e.contains("trapped") || e.contains("stack"), "{e}");

    // A component for another world, installed meanwhile, is refused.
    let v = during_good_calls(&s, "installing mismatch", || {
        s.post(
            "/datanotes/apps/create/",
            Some(&s.token),
            &json!({"name": "mismatch", "wasm_path": component("mismatch")}),
        )
        .1
    });
    assert_eq!(v["error"]["rule"], "world", "{v}");

    // Output past the log's buffer is dropped, never a trap; and an instance that printed is
    // reused (calls counts the calls an instance answered).
    let before = s.tool_ok("hostile_ok", json!({}))["calls"]
        .as_u64()
        .unwrap();
    let p = s.tool_ok("hostile_print", json!({"bytes": 200_000}));
    assert_eq!(p["printed"], 200_000);
    let after = s.tool_ok("hostile_ok", json!({}))["calls"]
        .as_u64()
        .unwrap();
    assert_eq!(
        after,
        before + 2,
        "the instance that printed was thrown away"
    );

    // Through MCP: an isError result, and the session goes on.
    let mcp = Agent::owner(&s);
    let r = mcp.call("hostile_spin", json!({}));
    assert_eq!(r.is_error, Some(true), "{r:?}");
    assert!(text(&r).contains("CPU time"), "{r:?}");
    let r = mcp.call("hostile_ok", json!({}));
    assert_ne!(r.is_error, Some(true), "{r:?}");
    let r = mcp.call("planning_list_tasks", json!({}));
    assert_eq!(structured(&r)["total"], 1, "{r:?}");

    // The app was never marked unreachable: a trap fails the call, not the app.
    assert_eq!(s.app("hostile")["reachable"], true);
}

#[test]
fn a_call_that_timed_out_is_cancelled_and_frees_its_instance() {
    let s = server();
    s.install(
        "hostile",
        "hostile",
        json!({"limits": {"timeout_ms": 500, "max_instances": 1}}),
    );
    s.tool_ok("hostile_ok", json!({}));
    for round in 0..3 {
        // The guest sleeps in a host call (wasi:clocks): epoch interruption cannot stop it, the
        // wall-clock timeout cancels it.
        let started = Instant::now();
        let e = s.tool_err("hostile_sleep", json!({"ms": 30_000}));
        assert!(
            e.contains("timed out calling hostile_sleep (500 ms)"),
            "{e}"
        );
        assert!(
            started.elapsed() < Duration::from_millis(2500),
            "answered after {:?}",
            started.elapsed()
        );
        // The only slot is free at once: the next call does not wait for the 30 s sleep to end,
        // and runs on a fresh instance (the cancelled one was thrown away, never reused).
        let started = Instant::now();
        let ok = s.tool_ok("hostile_ok", json!({}));
        assert!(
            started.elapsed() < Duration::from_millis(2000),
            "the next call waited {:?}",
            started.elapsed()
        );
        assert_eq!(
            ok["calls"], 1,
            "round {round}: a fresh instance answers: {ok}"
        );
        // And it is kept warm again.
        let again = s.tool_ok("hostile_ok", json!({}));
        assert_eq!(again["calls"], 2, "{again}");
    }
    // A sleep shorter than the timeout answers as before.
    let v = s.tool_ok("hostile_sleep", json!({"ms": 50}));
    assert_eq!(v["slept_ms"], 50, "{v}");
    assert_eq!(s.app("hostile")["reachable"], true);
}

#[test]
fn cpu_ms_counts_guest_code_not_time_blocked_in_host_calls() {
    let s = server();
    s.install(
        "hostile",
        "hostile",
        json!({"limits": {"cpu_ms": 200, "timeout_ms": 10_000}}),
    );
    // A sleep five times longer than cpu_ms: the guest runs no code meanwhile.
    let v = s.tool_ok("hostile_sleep", json!({"ms": 1000}));
    assert_eq!(v["slept_ms"], 1000, "{v}");
    // Spinning uses it up.
    let started = Instant::now();
    let e = s.tool_err("hostile_spin", json!({}));
    assert!(e.contains("ran out of its CPU time (200 ms)"), "{e}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

/// `Ok` once `n` instances of the app `hostile` are in calls (live, none warm); else what its
/// runtime shows.
fn in_calls(s: &Server, n: u64) -> Result<(), String> {
    let r = s.app("hostile")["runtime"].clone();
    if r["instances"] == n && r["warm"] == 0 {
        Ok(())
    } else {
        Err(r.to_string())
    }
}

#[test]
fn a_call_whose_caller_goes_away_still_finishes() {
    use std::io::Write;
    let s = server();
    s.install(
        "hostile",
        "hostile",
        json!({"limits": {"max_instances": 1}}),
    );
    let before = s.tool_ok("hostile_ok", json!({}))["calls"]
        .as_u64()
        .unwrap();
    // A client asks for a sleep, then hangs up.
    let body = json!({"tool": "hostile_sleep", "arguments": {"ms": 800}}).to_string();
    let mut c = std::net::TcpStream::connect(s.url.trim_start_matches("http://")).unwrap();
    write!(
        c,
        "POST /datanotes/apps/call/ HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        s.token,
        body.len()
    )
    .unwrap();
    eventually_ok("the sleep runs in the only instance", || in_calls(&s, 1));
    drop(c);
    // The call goes on (only its timeout cancels it): the next call waits for the only instance,
    // and gets it back after the sleep, warm.
    let started = Instant::now();
    let after = s.tool_ok("hostile_ok", json!({}))["calls"]
        .as_u64()
        .unwrap();
    assert_eq!(after, before + 2, "the sleep was cut short");
    assert!(
        started.elapsed() >= Duration::from_millis(300),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn a_component_for_another_world_is_refused_at_install() {
    let s = server();
    let files = snapshot(&s.dir);
    let (st, v) = s.post(
        "/datanotes/apps/create/",
        Some(&s.token),
        &json!({"name": "mismatch", "wasm_path": component("mismatch")}),
    );
    assert_eq!(st, 400, "{v}");
    let e = &v["error"];
    assert_error_shape(e);
    assert_eq!(e["code"], "invalid_argument", "{e}");
    assert_eq!(e["column"], "wasm", "{e}");
    assert_eq!(e["rule"], "world", "{e}");
    let msg = e["message"].as_str().unwrap();
    assert!(
        msg.contains("datanotes:app/tools@0.1.0")
            && msg.contains("call-tool is func(name: string, arguments: string) -> string")
            && msg.contains("the world wants func(name: string, arguments: string, ctx: record"),
        "the error names what differs: {msg}"
    );
    assert!(
        e["hint"]
            .as_str()
            .unwrap()
            .contains("datanotes:app/app@0.1.0"),
        "{e}"
    );
    // Nothing is left of it: no app, no stored component.
    let (_, apps) = s.post("/datanotes/apps/", Some(&s.token), &json!({}));
    assert_eq!(apps["apps"], json!([]), "{apps}");
    assert_eq!(
        std::fs::read_dir(s.dir.join(".datanotes/apps"))
            .unwrap()
            .count(),
        0
    );
    assert!(snapshot(&s.dir) == files);

    // Not a component at all.
    let (st, v) = s.post(
        "/datanotes/apps/create/",
        Some(&s.token),
        &json!({"name": "garbage", "wasm_base64": "AGFzbQEAAAA="}),
    );
    assert_eq!(st, 400, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("component"),
        "{v}"
    );

    // The server goes on: a good app installs and answers.
    s.install("hostile", "hostile", json!({}));
    s.tool_ok("hostile_ok", json!({}));
}

#[test]
fn limits_are_checked() {
    let s = server();
    for (limits, rule) in [
        (json!({"memory_mb": 0}), "min"),
        (json!({"max_result_bytes": 0}), "min"),
        (json!({"memory_mb": 17_592_186_044_416u64}), "max"),
        (json!({"max_instances": 100_000}), "max"),
        (json!({"memory": 64}), "pattern"),
    ] {
        let (st, v) = s.post(
            "/datanotes/apps/create/",
            Some(&s.token),
            &json!({"name": "hostile", "wasm_path": component("hostile"), "limits": limits}),
        );
        assert_eq!(st, 400, "{limits}: {v}");
        assert_eq!(v["error"]["column"], "limits", "{limits}: {v}");
        if rule != "pattern" {
            assert_eq!(v["error"]["rule"], rule, "{limits}: {v}");
        }
    }
    let (_, apps) = s.post("/datanotes/apps/", Some(&s.token), &json!({}));
    assert_eq!(apps["apps"], json!([]));
    let v = s.install(
        "hostile",
        "hostile",
        json!({"limits": {"memory_mb": 4096, "max_instances": 1}}),
    );
    assert_eq!(v["app"]["wasm"]["limits"]["memory_mb"], 4096);
    s.tool_ok("hostile_ok", json!({}));
}

#[test]
fn an_install_whose_tools_never_come_times_out() {
    let s = server();
    let started = Instant::now();
    let (st, v) = s.post(
        "/datanotes/apps/create/",
        Some(&s.token),
        &json!({"name": "sleepy", "wasm_path": component("sleepy"), "limits": {"timeout_ms": 1000}}),
    );
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "install took {:?}",
        started.elapsed()
    );
    assert_eq!(st, 400, "{v}");
    assert_eq!(v["error"]["rule"], "list_tools", "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("timed out listing tools (1000 ms)"),
        "{v}"
    );
    let (_, apps) = s.post("/datanotes/apps/", Some(&s.token), &json!({}));
    assert_eq!(apps["apps"], json!([]));
    assert_eq!(
        std::fs::read_dir(s.dir.join(".datanotes/apps"))
            .unwrap()
            .count(),
        0
    );
}

/// A tiny HTTP/1.1 server on 127.0.0.1, in this process: answers `GET <path>` with
/// `hello <path>` (after `ms` milliseconds for `/slow?ms=<ms>`); counts the requests it got. It
/// speaks no TLS: to a TLS client hello it answers plain text at once.
struct Web {
    port: u16,
    hits: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl Web {
    fn start() -> Web {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let hits = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = hits.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut c) = conn else { continue };
                let counter = counter.clone();
                std::thread::spawn(move || {
                    let mut head = vec![];
                    let mut buf = [0u8; 1024];
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                        match c.read(&mut buf) {
                            Ok(0) | Err(_) => return,
                            Ok(n) => head.extend_from_slice(&buf[..n]),
                        }
                        // A TLS handshake record.
                        if head[0] == 0x16 {
                            let _ = c.write_all(b"HTTP/1.1 400 Bad Request\r\n\r\nno TLS here");
                            return;
                        }
                    }
                    counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    let head = String::from_utf8_lossy(&head).into_owned();
                    let path = head.split_whitespace().nth(1).unwrap_or("/").to_string();
                    if let Some(ms) = path.strip_prefix("/slow?ms=") {
                        // A slow peer: its delay is what the test asks of it.
                        std::thread::sleep(Duration::from_millis(ms.parse().unwrap()));
                    }
                    let body = format!("hello {path}");
                    let _ = write!(
                        c,
                        "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                });
            }
        });
        Web { port, hits }
    }

    fn hits(&self) -> usize {
        self.hits.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }
}

impl Server {
    /// Fetches `url` with the fetcher app: `Ok(body)` or `Err(error text)`.
    fn fetch(&self, url: &str) -> Result<String, String> {
        let v = self.tool("fetcher_get", json!({"url": url}));
        if v["ok"] == true {
            let r = &v["value"]["structuredContent"];
            assert_eq!(r["status"], 200, "{v}");
            Ok(r["body"].as_str().unwrap().to_string())
        } else {
            Err(v["value"]["content"][0]["text"]
                .as_str()
                .unwrap_or_default()
                .to_string())
        }
    }

    /// An owner update of the fetcher app; answers status and body.
    fn update_fetcher(&self, fields: Value) -> (u16, Value) {
        let mut body = json!({"name": "fetcher"});
        for (k, v) in fields.as_object().unwrap() {
            body[k] = v.clone();
        }
        self.post("/datanotes/apps/update/", Some(&self.token), &body)
    }
}

fn assert_denied(s: &Server, url: &str) {
    let e = s.fetch(url).expect_err("the request should be denied");
    assert!(
        e.contains(&format!("fetching {url} failed")) && e.contains("HttpRequestDenied"),
        "{e}"
    );
}

#[test]
fn outgoing_http_goes_only_to_the_hosts_the_owner_allows() {
    let s = server();
    let web = Web::start();
    let other = Web::start();
    let v = s.install(
        "fetcher",
        "fetcher",
        json!({"limits": {"timeout_ms": 2000}}),
    );
    assert_eq!(v["app"]["wasm"]["allow_hosts"], json!([]), "{v}");
    let app_token = v["token"].as_str().unwrap().to_string();

    // Without allow_hosts, no network at all: the request never leaves.
    assert_denied(&s, &web.url("/a"));
    assert_eq!(web.hits(), 0);

    // The owner allows one host:port: the app gets its answer.
    let allowed = format!("127.0.0.1:{}", web.port);
    let (st, v) = s.update_fetcher(json!({"allow_hosts": [allowed]}));
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["app"]["wasm"]["allow_hosts"], json!([allowed]), "{v}");
    assert_eq!(s.fetch(&web.url("/a")).unwrap(), "hello /a");
    assert_eq!(web.hits(), 1);
    // Another port of the same address, another name for it: denied, nothing sent.
    assert_denied(&s, &other.url("/b"));
    assert_denied(&s, &format!("http://localhost:{}/b", web.port));
    assert_eq!((web.hits(), other.hits()), (1, 0));
    // Kept in the registry file, and in effect after a restart.
    let apps: Value =
        serde_json::from_slice(&std::fs::read(s.dir.join(".datanotes/apps.json")).unwrap())
            .unwrap();
    assert_eq!(apps[0]["wasm"]["allow_hosts"], json!([allowed]), "{apps}");
    let s = s.restart();
    eventually("fetcher is listed after the restart", || {
        s.app("fetcher")["tools"]
            .as_array()
            .is_some_and(|t| !t.is_empty())
    });
    assert_eq!(s.fetch(&web.url("/again")).unwrap(), "hello /again");

    // A request slower than the call's timeout is cut at the call's deadline (the request's
    // own timeouts are bounded by it; the call is cancelled then), and the app goes on at once.
    let started = Instant::now();
    let e = s.fetch(&web.url("/slow?ms=20000")).unwrap_err();
    assert!(
        e.contains("timed out calling fetcher_get (2000 ms)")
            || e.contains("ConnectionReadTimeout"),
        "{e}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(6),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(s.fetch(&web.url("/after")).unwrap(), "hello /after");
    // https goes through rustls (whose crypto provider the engine installs: without one the
    // request task panicked): a server that speaks no TLS is a TLS error, and the app goes on.
    let e = s
        .fetch(&format!("https://127.0.0.1:{}/tls", web.port))
        .unwrap_err();
    assert!(e.contains("Tls"), "{e}");
    assert_eq!(s.fetch(&web.url("/after-tls")).unwrap(), "hello /after-tls");

    // The app may not grant itself a host.
    let snapshot_apps = std::fs::read(s.dir.join(".datanotes/apps.json")).unwrap();
    let (st, v) = s.post(
        "/datanotes/apps/update/",
        Some(&app_token),
        &json!({"name": "fetcher", "allow_hosts": ["example.org", allowed]}),
    );
    assert_eq!(st, 403, "{v}");
    assert_eq!(v["error"]["column"], "allow_hosts", "{v}");
    assert_eq!(v["error"]["rule"], "owner", "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("may not change its own allow_hosts"),
        "{v}"
    );
    // Bad values: refused with what is wrong and how to write it; nothing changes.
    for (bad, why) in [
        (json!(["http://127.0.0.1:80"]), "scheme"),
        (json!(["127.0.0.1:80/api"]), "path"),
        (json!(["*"]), "every host"),
        (json!(["a.*.example.org"]), "leading *."),
        (json!(["127.0.0.1:0"]), "port"),
        (json!(["::1"]), "brackets"),
        (json!([""]), "empty"),
        (json!([8080]), "not a string"),
        (json!("127.0.0.1"), "array"),
    ] {
        let (st, v) = s.update_fetcher(json!({"allow_hosts": bad}));
        assert_eq!(st, 400, "{bad}: {v}");
        assert_error_shape(&v["error"]);
        assert_eq!(v["error"]["column"], "allow_hosts", "{bad}: {v}");
        let msg = v["error"]["message"].as_str().unwrap();
        assert!(msg.contains(why), "{bad}: {msg}");
        assert!(
            v["error"]["hint"].as_str().unwrap().contains("host:port"),
            "{bad}: {v}"
        );
    }
    assert_eq!(
        std::fs::read(s.dir.join(".datanotes/apps.json")).unwrap(),
        snapshot_apps,
        "a refused update changed the registry"
    );
    assert_eq!(s.fetch(&web.url("/still")).unwrap(), "hello /still");

    // A bad value at create: refused before the component is stored.
    let stored = std::fs::read_dir(s.dir.join(".datanotes/apps"))
        .unwrap()
        .count();
    let (st, v) = s.post(
        "/datanotes/apps/create/",
        Some(&s.token),
        &json!({"name": "fetcher2", "wasm_path": component("fetcher"), "allow_hosts": ["https://example.org/"]}),
    );
    assert_eq!(st, 400, "{v}");
    assert_eq!(v["error"]["column"], "allow_hosts", "{v}");
    assert_eq!(
        std::fs::read_dir(s.dir.join(".datanotes/apps"))
            .unwrap()
            .count(),
        stored
    );
    assert_eq!(
        s.post(
            "/datanotes/apps/get/",
            Some(&s.token),
            &json!({"name": "fetcher2"})
        )
        .0,
        404
    );
    // Only WASM apps take allow_hosts.
    let (st, v) = s.post(
        "/datanotes/apps/create/",
        Some(&s.token),
        &json!({"name": "client", "allow_hosts": [allowed]}),
    );
    assert_eq!(st, 400, "{v}");
    assert_eq!(v["error"]["column"], "allow_hosts", "{v}");

    // A new component keeps the grant.
    let (st, v) = s.update_fetcher(json!({"wasm_path": component("fetcher")}));
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["app"]["wasm"]["allow_hosts"], json!([allowed]), "{v}");
    // The owner takes it away: denied again at once.
    let hits = web.hits();
    let (st, v) = s.update_fetcher(json!({"allow_hosts": []}));
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["app"]["wasm"]["allow_hosts"], json!([]), "{v}");
    assert_denied(&s, &web.url("/gone"));
    assert_eq!(web.hits(), hits);

    // Granted at create, with a wildcard entry too.
    let (st, v) = s.post(
        "/datanotes/apps/delete/",
        Some(&s.token),
        &json!({"name": "fetcher"}),
    );
    assert_eq!(st, 200, "{v}");
    let v = s.install(
        "fetcher",
        "fetcher",
        json!({"allow_hosts": ["*.example.invalid", format!("127.0.0.1:{}", other.port)]}),
    );
    assert_eq!(
        v["app"]["wasm"]["allow_hosts"],
        json!(["*.example.invalid", format!("127.0.0.1:{}", other.port)])
    );
    assert_eq!(s.fetch(&other.url("/new")).unwrap(), "hello /new");
    assert_denied(&s, &web.url("/old"));
    assert_eq!((web.hits(), other.hits()), (hits, 1));
}

#[test]
fn memory_mb_bounds_every_memory_and_table_of_an_instance() {
    let s = server();
    // greedy (WebAssembly text) has four memories and a table. Per memory, 32 MiB would let it
    // take 96 MiB in its three extra memories, and its table is unbounded: memory_mb counts them
    // all together.
    s.install(
        "greedy",
        "greedy",
        json!({"limits": {"memory_mb": 32, "max_instances": 1, "cpu_ms": 5000}}),
    );
    assert_eq!(s.tool_ok("greedy_ok", json!({}))["ok"], true);
    let (rss0, hwm0) = (s.mib("VmRSS"), s.mib("VmHWM"));
    for tool in ["greedy_memories", "greedy_table"] {
        let e = s.tool_err(tool, json!({}));
        assert!(
            e.contains("the call hit the memory limit (32 MiB)") && e.contains("memory_mb"),
            "{tool}: {e}"
        );
        assert!(!e.contains("::") && !e.contains("wasmtime"), "{e}");
        // The app goes on, on a fresh instance.
        assert_eq!(s.tool_ok("greedy_ok", json!({}))["ok"], true);
    }
    let (rss1, hwm1) = (s.mib("VmRSS"), s.mib("VmHWM"));
    eprintln!("greedy: VmRSS {rss0} -> {rss1} MiB, VmHWM {hwm0} -> {hwm1} MiB");
    assert!(
        hwm1 < hwm0 + 32 + 24,
        "the peak grew from {hwm0} to {hwm1} MiB"
    );
    // What the trapped instances held is released.
    assert!(rss1 < rss0 + 16, "VmRSS {rss0} -> {rss1} MiB");

    // 99 memories, or a table of 16M elements (128 MiB), are refused at install.
    for (name, want) in [
        (
            "manymem",
            "the app needs 99 linear memories, more than the 4 an app may have",
        ),
        ("bigtable", "the call hit the memory limit (4 MiB)"),
    ] {
        let (st, v) = s.post(
            "/datanotes/apps/create/",
            Some(&s.token),
            &json!({"name": name, "wasm_path": component(name), "limits": {"memory_mb": 4}}),
        );
        assert_eq!(st, 400, "{v}");
        assert_eq!(v["error"]["rule"], "limits", "{v}");
        let msg = v["error"]["message"].as_str().unwrap();
        assert!(msg.contains(want), "{name}: {v}");
    }
    let hwm2 = s.mib("VmHWM");
    assert!(
        hwm2 < hwm1 + 16,
        "the refused installs took {hwm1} -> {hwm2} MiB"
    );
}

#[test]
fn spinning_guests_do_not_hold_up_the_server() {
    let s = server();
    create_tasks(&s);
    s.install(
        "hostile",
        "hostile",
        json!({"limits": {"cpu_ms": 4000, "max_instances": 8}}),
    );
    s.tool_ok("hostile_ok", json!({}));
    std::thread::scope(|scope| {
        let spinning: Vec<_> = (0..8)
            .map(|_| scope.spawn(|| s.tool_err("hostile_spin", json!({}))))
            .collect();
        eventually_ok("the 8 guests spin", || in_calls(&s, 8));
        let mut health = vec![];
        let mut writes = vec![];
        // Samples 50 ms apart, spread over a second of spinning: a pace, not a wait for a state.
        for i in 0..20 {
            let t = Instant::now();
            let (st, _) = s.get("/datanotes/health");
            assert_eq!(st, 200);
            health.push(t.elapsed());
            let t = Instant::now();
            s.ok(
                "insert_row",
                json!({"table": TASKS, "values": {"title": format!("while guests spin {i}")}}),
            );
            writes.push(t.elapsed());
            std::thread::sleep(Duration::from_millis(50));
        }
        health.sort();
        writes.sort();
        eprintln!(
            "while 8 guests spin: /health p50 {:?} max {:?}; insert_row p50 {:?} max {:?}",
            health[10], health[19], writes[10], writes[19]
        );
        // Each answers (a hang guard): how fast is the benchmark's (`wasm_cancel`,
        // `health_while_8_spin_p50_ms` and `insert_while_8_spin_p50_ms`).
        assert!(health[19] < Duration::from_secs(5), "{health:?}");
        assert!(writes[19] < Duration::from_secs(5), "{writes:?}");
        for t in spinning {
            let e = t.join().unwrap();
            assert!(e.contains("CPU time"), "{e}");
        }
    });
}

#[test]
fn limits_change_without_the_component_and_paths_are_checked_before_reading() {
    let s = server();
    s.install("hostile", "hostile", json!({"limits": {"cpu_ms": 200}}));
    let (st, v) = s.post(
        "/datanotes/apps/update/",
        Some(&s.token),
        &json!({"name": "hostile", "limits": {"cpu_ms": 300}}),
    );
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["app"]["wasm"]["limits"]["cpu_ms"], 300, "{v}");
    assert_eq!(v["app"]["wasm"]["limits"]["memory_mb"], 128, "{v}");
    let e = s.tool_err("hostile_spin", json!({}));
    assert!(e.contains("CPU time (300 ms)"), "{e}");
    // Invalid limits are refused and change nothing.
    let (st, v) = s.post(
        "/datanotes/apps/update/",
        Some(&s.token),
        &json!({"name": "hostile", "limits": {"cpu_ms": 0}}),
    );
    assert_eq!(st, 400, "{v}");
    assert_eq!(s.app("hostile")["wasm"]["limits"]["cpu_ms"], 300);
    // A device is not read (its size says nothing); a folder neither.
    for p in ["/dev/zero", "/tmp"] {
        let (st, v) = s.post(
            "/datanotes/apps/create/",
            Some(&s.token),
            &json!({"name": "dev", "wasm_path": p}),
        );
        assert_eq!(st, 400, "{v}");
        assert_eq!(v["error"]["column"], "wasm_path", "{v}");
    }
    // The scheme of Authorization is case-insensitive.
    for scheme in ["bearer", "BEARER", "Bearer"] {
        let (st, v) = s.post_raw(
            "/datanotes/list_tables/",
            None,
            &[("Authorization", &format!("{scheme} {}", s.token))],
            b"{}".to_vec(),
        );
        assert_eq!(st, 200, "{scheme}: {v}");
    }
}
