//! Resources, resource templates, prompts and completions through `/mcp`: the vault's own
//! (each table's definition and each row's file, paged, addressed by template, completed,
//! followed by subscription) and a remote app's, named by the app in every place a URI appears
//! (listings, templates, resource links and embedded resources in tool results and prompts,
//! `_meta.ui.resourceUri`, `notifications/resources/updated`), with the app's hostile URIs and
//! names skipped, its big answers refused unread, and a token's rights deciding what it sees.
//!
//! The app is a small MCP server written here on axum: `shelf`.

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

#[test]
fn the_vault_is_resources_paged_read_completed_and_followed() {
    let s = Server::start();
    create_tasks(&s);
    for i in 0..250 {
        s.ok(
            "insert_row",
            json!({"table": "work.crm.tasks", "id": format!("t{i:03}"), "values": {"title": format!("task {i}")}}),
        );
    }
    let rt = runtime();
    let (c, u) = connect(&rt, &s, &s.token);
    let (all, sizes) = all_resources(&rt, &c);
    assert!(sizes.iter().all(|&n| n <= 100), "{sizes:?}");
    let u_all = uris(&all);
    assert_eq!(u_all[0], "datanotes://tables/work.crm.people");
    assert!(u_all.contains(&"datanotes://tables/work.crm.tasks".to_string()));
    let rows: Vec<&String> = u_all.iter().filter(|x| x.contains("tasks/rows/")).collect();
    assert_eq!(rows.len(), 250, "every row once");
    assert_eq!(rows[0], "datanotes://tables/work.crm.tasks/rows/t000");
    assert_eq!(all[1]["mimeType"], "text/markdown");
    assert_eq!(u_all[1], "datanotes://tables/work.crm.people/rows/ada");

    // A row reads as its file on disk; the definition as its _table.yaml.
    let r = ask(
        &rt,
        &c,
        "resources/read",
        json!({"uri": "datanotes://tables/work.crm.tasks/rows/t007"}),
    );
    let file = std::fs::read_to_string(s.row_path("work.crm.tasks", "t007")).unwrap();
    assert_eq!(r["contents"][0]["text"], file, "{r}");
    assert_eq!(r["contents"][0]["mimeType"], "text/markdown");
    let r = ask(
        &rt,
        &c,
        "resources/read",
        json!({"uri": "datanotes://tables/work.crm.tasks"}),
    );
    assert!(
        r["contents"][0]["text"]
            .as_str()
            .unwrap()
            .contains("columns"),
        "{r}"
    );
    // Bad URIs say what is wrong.
    for (uri, says) in [
        ("datanotes://tables/work.crm.tasks/rows/nope", "no row nope"),
        ("datanotes://tables/work.crm.tasks/rows/BAD", "row id"),
        ("datanotes://tables/no.such.table", "no.such.table"),
        ("datanotes://elsewhere", "not a resource of the vault"),
    ] {
        let e = ask(&rt, &c, "resources/read", json!({"uri": uri}));
        let m = e["error"]["message"].as_str().unwrap_or("");
        assert!(m.contains(says), "{uri}: {e}");
    }

    // Templates, and completion of their table and id.
    let t = ask(&rt, &c, "resources/templates/list", json!({}));
    let templates: Vec<&str> = t["resourceTemplates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["uriTemplate"].as_str().unwrap())
        .collect();
    assert!(
        templates.contains(&"datanotes://tables/{table}/rows/{id}"),
        "{t}"
    );
    let complete = |arg: &str, value: &str, ctx: Value| {
        ask(
            &rt,
            &c,
            "completion/complete",
            json!({"ref": {"type": "ref/resource", "uri": "datanotes://tables/{table}/rows/{id}"},
                   "argument": {"name": arg, "value": value}, "context": {"arguments": ctx}}),
        )
    };
    let r = complete("table", "work.crm.t", json!({}));
    assert_eq!(r["completion"]["values"], json!(["work.crm.tasks"]), "{r}");
    let r = complete("id", "t24", json!({"table": "work.crm.tasks"}));
    assert_eq!(
        r["completion"]["values"],
        json!([
            "t240", "t241", "t242", "t243", "t244", "t245", "t246", "t247", "t248", "t249"
        ]),
        "{r}"
    );
    let r = complete("id", "t", json!({"table": "work.crm.tasks"}));
    assert_eq!(r["completion"]["values"].as_array().unwrap().len(), 100);
    assert_eq!(r["completion"]["hasMore"], true);

    // A subscription to a row and to a table is fed by the change feed.
    let row = "datanotes://tables/work.crm.tasks/rows/t001";
    assert!(
        ask(&rt, &c, "resources/subscribe", json!({"uri": row}))
            .get("error")
            .is_none()
    );
    s.ok(
        "update_row",
        json!({"table": "work.crm.tasks", "id": "t001", "values": {"title": "changed"}}),
    );
    eventually("the row's update", || {
        u.0.lock().unwrap().iter().any(|x| x == row)
    });
    s.ok(
        "update_row",
        json!({"table": "work.crm.tasks", "id": "t002", "values": {"title": "changed"}}),
    );
    // Then t001 again: once its second update is seen, one of t002 would have been too.
    s.ok(
        "update_row",
        json!({"table": "work.crm.tasks", "id": "t001", "values": {"title": "changed again"}}),
    );
    eventually_ok("the row's second update", || {
        let seen = u.0.lock().unwrap().clone();
        if seen.iter().filter(|x| *x == row).count() >= 2 {
            Ok(())
        } else {
            Err(format!("{seen:?}"))
        }
    });
    assert!(
        !u.0.lock().unwrap().iter().any(|x| x.ends_with("/t002")),
        "no update of a row nobody subscribed to"
    );
    let table = "datanotes://tables/work.crm.tasks";
    ask(&rt, &c, "resources/subscribe", json!({"uri": table}));
    s.ok(
        "delete_row",
        json!({"table": "work.crm.tasks", "id": "t003"}),
    );
    eventually("the table's update", || {
        u.0.lock().unwrap().iter().any(|x| x == table)
    });

    // The same through `datanotes mcp`, as a desktop client: listed, read, completed, followed.
    let du = Updates::default();
    let (desk, mut child) = rt.block_on(async {
        let mut child = tokio::process::Command::new(bin())
            .args(["mcp", "--url", &s.url, "--token", &s.token])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("start datanotes mcp");
        let (i, o) = (child.stdin.take().unwrap(), child.stdout.take().unwrap());
        (du.clone().serve((o, i)).await.unwrap(), child)
    });
    let page = ask(&rt, &desk, "resources/list", json!({}));
    assert_eq!(
        page["resources"][0]["uri"], "datanotes://tables/work.crm.people",
        "{page}"
    );
    let r = ask(&rt, &desk, "resources/read", json!({"uri": row}));
    let file = std::fs::read_to_string(s.row_path("work.crm.tasks", "t001")).unwrap();
    assert_eq!(r["contents"][0]["text"], file, "{r}");
    let r = ask(
        &rt,
        &desk,
        "completion/complete",
        json!({"ref": {"type": "ref/resource", "uri": "datanotes://tables/{table}/rows/{id}"},
               "argument": {"name": "table", "value": "work.crm.p"}}),
    );
    assert_eq!(r["completion"]["values"], json!(["work.crm.people"]), "{r}");
    ask(&rt, &desk, "resources/subscribe", json!({"uri": row}));
    s.ok(
        "update_row",
        json!({"table": "work.crm.tasks", "id": "t001", "values": {"title": "again"}}),
    );
    eventually("the row's update through datanotes mcp", || {
        du.0.lock().unwrap().iter().any(|x| x == row)
    });
    rt.block_on(async {
        let _ = desk.cancel().await;
        let _ = child.kill().await;
    });
}

#[test]
fn an_apps_resources_prompts_and_completions_reach_the_agent_named_by_the_app() {
    let s = Server::start();
    create_tasks(&s);
    let rt = runtime();
    let (url, shelf) = serve_app(&rt);
    create_app(&s, json!({"name": "shelf", "mcp_url": url}));
    let (c, u) = connect(&rt, &s, &s.token);
    eventually("the app's tool is listed", || {
        rt.block_on(c.list_all_tools())
            .unwrap()
            .iter()
            .any(|t| t.name == "shelf_show")
    });

    // Its tool's UI resource is named by the app; so are the URIs in its result.
    let tools = rt.block_on(c.list_all_tools()).unwrap();
    let show = tools.iter().find(|t| t.name == "shelf_show").unwrap();
    let meta = serde_json::to_value(&show.meta).unwrap();
    assert_eq!(meta["ui"]["resourceUri"], "ui://shelf/shelf/view.html");
    // A tool for its view only is listed, marked so (hosts keep it from the model), and left
    // out of what the engine tells agents (describe_table's tools).
    let refresh = tools.iter().find(|t| t.name == "shelf_refresh").unwrap();
    let meta = serde_json::to_value(&refresh.meta).unwrap();
    assert_eq!(meta["ui"]["visibility"], json!(["app"]));
    assert_eq!(meta["ui"]["resourceUri"], "ui://shelf/shelf/view.html");
    let d = s.ok("describe_table", json!({"table": "work.crm.tasks"}));
    let names: Vec<&str> = d["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["shelf_show"], "{d}");
    let r = ask(
        &rt,
        &c,
        "tools/call",
        json!({"name": "shelf_show", "arguments": {}}),
    );
    assert_eq!(r["content"][1]["uri"], "file://shelf//a.txt", "{r}");
    assert_eq!(
        r["content"][2]["resource"]["uri"], "file://shelf//b.txt",
        "{r}"
    );

    // A JSON-RPC error of the app reaches the agent as it is, data and all, on both paths
    // (rmcp's, for a call with a progress token; the lean JSON one); HTTP reads an error result.
    for progress in [false, true] {
        let mut p = json!({"name": "shelf_fail", "arguments": {}});
        if progress {
            p["_meta"] = json!({"progressToken": 1});
        }
        let e = ask(&rt, &c, "tools/call", p);
        assert_eq!(e["error"]["code"], -32042, "{e}");
        assert_eq!(e["error"]["message"], "this needs the user at a URL");
        assert_eq!(
            e["error"]["data"]["elicitations"][0]["elicitationId"], "e1",
            "{e}"
        );
    }
    let (st, v) = s.post(
        "/datanotes/apps/call/",
        Some(&s.token),
        &json!({"tool": "shelf_fail", "arguments": {}}),
    );
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["ok"], false, "{v}");
    assert_eq!(
        v["value"]["content"][0]["text"],
        "this needs the user at a URL"
    );

    // Listed after the vault's; the hostile ones skipped, each with why.
    let (all, _) = all_resources(&rt, &c);
    let apps: Vec<String> = uris(&all)
        .into_iter()
        .filter(|u| !u.starts_with("datanotes://"))
        .collect();
    assert_eq!(
        apps,
        [
            "file://shelf//a.txt",
            "ui://shelf/shelf/view.html",
            "file://shelf//big"
        ]
    );
    let view = all.iter().find(|r| r["name"] == "view").unwrap();
    assert_eq!(view["mimeType"], "text/html;profile=mcp-app");
    assert_eq!(view["_meta"]["ui"]["prefersBorder"], true, "{view}");
    let entry = s.ok_route("apps/get", json!({"name": "shelf"}))["app"].clone();
    let skipped = entry["skippedResources"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(skipped.len(), 4, "{entry}");
    assert!(
        skipped
            .iter()
            .all(|x| x["uri"].as_str().unwrap().len() <= 200)
    );
    assert!(
        !entry.to_string().contains("\\u0000"),
        "no control character shown: {entry}"
    );
    assert!(entry.to_string().contains("a .. segment"), "{entry}");

    // Read through the served URI; the app is asked with its own.
    let r = ask(
        &rt,
        &c,
        "resources/read",
        json!({"uri": "ui://shelf/shelf/view.html"}),
    );
    assert_eq!(r["contents"][0]["text"], "<p>view</p>", "{r}");
    assert_eq!(r["contents"][0]["uri"], "ui://shelf/shelf/view.html");
    // A 20 MB answer is refused unread; the server's memory stays bounded.
    let rss = s.mib("VmRSS");
    let e = ask(
        &rt,
        &c,
        "resources/read",
        json!({"uri": "file://shelf//big"}),
    );
    assert!(e.get("error").is_some(), "{e}");
    assert!(s.mib("VmRSS") < rss + 40, "RSS {rss} → {}", s.mib("VmRSS"));
    let e = ask(
        &rt,
        &c,
        "resources/read",
        json!({"uri": "file://shelf//nope"}),
    );
    assert!(e.to_string().contains("no file:///nope"), "{e}");

    // Templates, named too.
    let t = ask(&rt, &c, "resources/templates/list", json!({}));
    assert!(t.to_string().contains("file://shelf//{name}"), "{t}");

    // Prompts: the one that shadows an operation is skipped.
    let (p, names) = prompt_names(&rt, &c);
    assert_eq!(names, ["shelf_prompt"], "{p}");
    assert_eq!(entry["skippedPrompts"][0]["takenBy"], "engine", "{entry}");
    let g = ask(
        &rt,
        &c,
        "prompts/get",
        json!({"name": "shelf_prompt", "arguments": {"topic": "apples"}}),
    );
    assert_eq!(
        g["messages"][0]["content"]["text"], "tell me about apples",
        "{g}"
    );
    assert_eq!(
        g["messages"][1]["content"]["resource"]["uri"],
        "file://shelf//a.txt"
    );
    let r = ask(
        &rt,
        &c,
        "completion/complete",
        json!({"ref": {"type": "ref/prompt", "name": "shelf_prompt"},
               "argument": {"name": "topic", "value": "ap"}}),
    );
    assert_eq!(
        r["completion"]["values"],
        json!(["apple", "apricot"]),
        "{r}"
    );

    // A subscription is passed to the app; its update comes back under the served URI.
    let e = ask(
        &rt,
        &c,
        "resources/subscribe",
        json!({"uri": "file://shelf//a.txt"}),
    );
    assert!(e.get("error").is_none(), "{e}");
    eventually("the app's update", || {
        u.0.lock()
            .unwrap()
            .iter()
            .any(|x| x == "file://shelf//a.txt")
    });
    assert!(
        shelf
            .asked
            .lock()
            .unwrap()
            .iter()
            .any(|m| m == "resources/subscribe")
    );

    // A token that may call none of the app's tools sees none of its resources and prompts,
    // and may not read them; one that may call its tools sees them.
    let tok = create_app(&s, json!({"name": "other", "call_tools": ["list_*"]}));
    let (o, _) = connect(&rt, &s, &tok);
    let (all, _) = all_resources(&rt, &o);
    assert!(
        uris(&all).iter().all(|u| u.starts_with("datanotes://")),
        "{all:?}"
    );
    assert_eq!(
        ask(&rt, &o, "prompts/list", json!({}))["prompts"],
        json!([])
    );
    let e = ask(
        &rt,
        &o,
        "resources/read",
        json!({"uri": "file://shelf//a.txt"}),
    );
    assert!(e.to_string().contains("may call none of its tools"), "{e}");
    let tok = create_app(&s, json!({"name": "third", "call_tools": ["shelf_*"]}));
    let (t3, _) = connect(&rt, &s, &tok);
    let r = ask(
        &rt,
        &t3,
        "resources/read",
        json!({"uri": "file://shelf//a.txt"}),
    );
    assert_eq!(r["contents"][0]["text"], "alpha", "{r}");

    // With a tool prefix, the app's prompts are listed with it, as its tools are (the one that
    // shadowed an operation is reachable now); asked and completed by the served name, the app
    // is asked by its own.
    s.ok_route(
        "apps/update",
        json!({"name": "shelf", "tool_prefix": "sh_"}),
    );
    eventually("the prompts prefixed", || {
        ask(&rt, &c, "prompts/list", json!({}))["prompts"]
            .as_array()
            .is_some_and(|p| p.iter().any(|p| p["name"] == "sh_shelf_prompt"))
    });
    let (p, names) = prompt_names(&rt, &c);
    assert_eq!(names, ["sh_shelf_prompt", "sh_list_tables"], "{p}");
    let g = ask(
        &rt,
        &c,
        "prompts/get",
        json!({"name": "sh_shelf_prompt", "arguments": {"topic": "pears"}}),
    );
    assert_eq!(
        g["messages"][0]["content"]["text"], "tell me about pears",
        "{g}"
    );
    let old = ask(&rt, &c, "prompts/get", json!({"name": "shelf_prompt"}));
    assert!(old.get("error").is_some(), "{old}");
    let r = ask(
        &rt,
        &c,
        "completion/complete",
        json!({"ref": {"type": "ref/prompt", "name": "sh_shelf_prompt"},
               "argument": {"name": "topic", "value": "ba"}}),
    );
    assert_eq!(r["completion"]["values"], json!(["banana"]), "{r}");
}

/// A client of 2026-07-28 subscribes with `subscriptions/listen`: an app's resource it names is
/// subscribed at the app before the stream acknowledges it (a client may act on the
/// acknowledgment at once), its updates come on the stream under the served URI, and the app
/// is told when the client goes.
#[test]
fn a_2026_listen_is_subscribed_at_the_app_before_it_is_acknowledged() {
    use std::io::BufRead;
    let s = Server::start();
    let rt = runtime();
    let (url, shelf) = serve_app(&rt);
    create_app(&s, json!({"name": "shelf", "mcp_url": url}));
    let uri = "file://shelf//a.txt";
    let r = mcp::listen_2026(&s, &[uri]);
    let subscribed = || {
        let asked = shelf.asked.lock().unwrap();
        asked.iter().filter(|m| *m == "resources/subscribe").count()
    };
    let mut lines = std::io::BufReader::new(r).lines();
    let mut next = || loop {
        let line = lines.next().expect("the stream goes on").unwrap();
        if let Some(m) = line.strip_prefix("data:").map(str::trim)
            && let Ok(v) = serde_json::from_str::<Value>(m)
        {
            return v;
        }
    };
    let ack = next();
    assert_eq!(
        ack["method"], "notifications/subscriptions/acknowledged",
        "{ack}"
    );
    assert_eq!(
        subscribed(),
        1,
        "subscribed at the app before the acknowledgment"
    );
    let updated = next();
    assert_eq!(
        updated["method"], "notifications/resources/updated",
        "{updated}"
    );
    assert_eq!(updated["params"]["uri"], uri, "{updated}");
    drop(lines);
    eventually("the app is told the client went", || {
        shelf
            .asked
            .lock()
            .unwrap()
            .iter()
            .any(|m| m == "resources/unsubscribe")
    });
    assert_eq!(subscribed(), 1, "subscribed once");
}

/// Two 2026-07-28 clients listen to one app resource. Having no sessions, both are subscribed on
/// the app's shared session: when the first goes, the app is not asked to unsubscribe (the
/// other still listens, and an app keeps one subscription per session); when the last goes,
/// it is, once.
#[test]
fn two_2026_listens_to_one_resource_unsubscribe_at_the_app_when_the_last_goes() {
    use std::io::BufRead;
    let s = Server::start();
    let rt = runtime();
    let (url, shelf) = serve_app(&rt);
    create_app(&s, json!({"name": "shelf", "mcp_url": url}));
    let uri = "file://shelf//a.txt";
    let count = |method: &str| {
        let asked = shelf.asked.lock().unwrap();
        asked.iter().filter(|m| *m == method).count()
    };
    // Each stream read up to its first update: both are running.
    let open = || {
        let mut lines = std::io::BufReader::new(mcp::listen_2026(&s, &[uri])).lines();
        loop {
            let line = lines.next().expect("the stream goes on").unwrap();
            if line.contains("notifications/resources/updated") {
                return lines;
            }
        }
    };
    let (first, second) = (open(), open());
    assert_eq!(count("resources/subscribe"), 2);
    drop(first);
    // The first stream's end is seen when the server writes to it next: a keep-alive, or the
    // app's next update.
    let _ = shelf.push.send(
        json!({"jsonrpc": "2.0", "method": "notifications/resources/updated",
               "params": {"uri": "file:///a.txt"}})
        .to_string(),
    );
    // Time, not an event: that the first listen ended has no effect to see by design (that is
    // what is checked), and the server notices it only when it next writes to it.
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(
        count("resources/unsubscribe"),
        0,
        "the app was asked to unsubscribe while a client still listens"
    );
    drop(second);
    let _ = shelf.push.send(
        json!({"jsonrpc": "2.0", "method": "notifications/resources/updated",
               "params": {"uri": "file:///a.txt"}})
        .to_string(),
    );
    eventually("the app is told the last client went", || {
        count("resources/unsubscribe") == 1
    });
}
