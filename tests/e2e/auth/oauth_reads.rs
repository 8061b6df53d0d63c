//! A grant reads only what its consent says (issue 43): its read patterns, or none chosen,
//! every table if it may call a tool that reads rows and no table otherwise. Through every
//! door of `/mcp` that reads the vault: the tools, `resources/list`, `resources/read`,
//! `resources/templates/list`, `completion/complete`, `resources/subscribe` and a 2026-07-28
//! `subscriptions/listen`. An app's token still reads everything. Nothing a grant reads
//! changes a file.

use crate::kit::mcp::{Updates, ask, post_2026};
use crate::kit::oauth::{self, decide, open, pkce, request_id};
use crate::kit::*;
use rmcp::RoleClient;
use rmcp::ServiceExt;
use rmcp::service::RunningService;
use rmcp::transport::StreamableHttpClientTransport;
use serde_json::{Value, json};

/// The table no grant below may read.
const DIARY: &str = "home.notes.diary";

/// `work.crm.people` and `work.crm.tasks` (see `create_tasks`) and `home.notes.diary`, each
/// with a row that says "meeting".
fn vault(s: &Server) {
    create_tasks(s);
    s.ok(
        "create_table",
        json!({"table": DIARY, "description": "Private", "columns": {"title": {"type": "text"}}}),
    );
    for (table, id, values) in [
        (TASKS, "t1", json!({"title": "prepare the meeting"})),
        (DIARY, "d1", json!({"title": "the meeting went badly"})),
    ] {
        s.ok(
            "insert_row",
            json!({"table": table, "id": id, "values": values, "body": "notes of the meeting"}),
        );
    }
}

type Client = RunningService<RoleClient, Updates>;

/// An MCP session with `token` on the server's `/mcp`.
fn session(rt: &tokio::runtime::Runtime, s: &Server, token: &str) -> Client {
    let cfg = transport_config(&format!("{}/mcp", s.url), Some(token), None);
    rt.block_on(async {
        Updates::default()
            .serve(StreamableHttpClientTransport::from_config(cfg))
            .await
    })
    .unwrap()
}

/// The vault's URIs of every page of `resources/list`.
fn vault_uris(rt: &tokio::runtime::Runtime, c: &Client) -> Vec<String> {
    let (mut out, mut cursor) = (vec![], None::<Value>);
    loop {
        let p = cursor.map_or(json!({}), |c| json!({"cursor": c}));
        let page = ask(rt, c, "resources/list", p);
        assert!(page.get("error").is_none(), "{page}");
        for r in page["resources"].as_array().unwrap() {
            let uri = r["uri"].as_str().unwrap();
            if uri.starts_with("datanotes://") {
                out.push(uri.to_string());
            }
        }
        match page.get("nextCursor").filter(|c| !c.is_null()) {
            Some(n) => cursor = Some(n.clone()),
            None => return out,
        }
    }
}

/// `completion/complete` of the vault's row template: the values.
fn complete(
    rt: &tokio::runtime::Runtime,
    c: &Client,
    arg: &str,
    value: &str,
    table: &str,
) -> Value {
    let r = ask(
        rt,
        c,
        "completion/complete",
        json!({"ref": {"type": "ref/resource", "uri": "datanotes://tables/{table}/rows/{id}"},
               "argument": {"name": arg, "value": value},
               "context": {"arguments": {"table": table}}}),
    );
    r["completion"]["values"].clone()
}

/// The row's URI.
fn row(table: &str, id: &str) -> String {
    format!("datanotes://tables/{table}/rows/{id}")
}

/// A refused read of the vault: the JSON-RPC error's data is the engine's error.
fn refused_read(v: &Value, table: &str) {
    let e = &v["error"];
    assert_eq!(e["data"]["rule"], "read", "{v}");
    assert_eq!(e["data"]["table"], table, "{v}");
    let m = e["message"].as_str().unwrap();
    assert!(m.contains(&format!("may not read {table}")), "{v}");
    assert!(!m.contains("::"), "no Rust path in what a user reads: {m}");
    assert!(
        e["data"]["hint"].as_str().unwrap().contains("consent"),
        "{v}"
    );
}

#[test]
fn a_grant_that_ticked_only_list_tables_reads_no_row() {
    let s = Server::start();
    vault(&s);
    let t = oauth::connect(&s, "Lister", json!({"call_tools": ["list_tables"]}));
    let grants = s.ok_route("grants/list", json!({}));
    assert_eq!(grants["grants"][0]["rights"]["read"], json!([]), "{grants}");
    let before = snapshot(&s.dir);
    let rt = runtime();
    let c = session(&rt, &s, &t.access);

    // Its one tool lists the tables it may read: none.
    let agent = Agent::engine(&s, &t.access, None);
    assert_eq!(agent.names(), ["list_tables"]);
    let r = agent.call("list_tables", json!({}));
    assert_eq!(structured(&r)["tables"], json!([]), "{}", text(&r));
    // search_notes is not even callable.
    let r = agent.call("search_notes", json!({"query": "meeting"}));
    assert!(is_error(&r) && text(&r).contains("may not call the tool search_notes"));

    // No resource of the vault listed, no template, no completion.
    assert_eq!(vault_uris(&rt, &c), Vec::<String>::new());
    let tl = ask(&rt, &c, "resources/templates/list", json!({}));
    assert_eq!(tl["resourceTemplates"], json!([]), "{tl}");
    assert_eq!(complete(&rt, &c, "table", "", ""), json!([]));
    assert_eq!(complete(&rt, &c, "id", "", TASKS), json!([]));
    // A row or a definition read by URI: refused, and why.
    for (uri, table) in [
        (row(TASKS, "t1"), TASKS),
        (row(PEOPLE, "ada"), PEOPLE),
        (format!("datanotes://tables/{DIARY}"), DIARY),
    ] {
        refused_read(&ask(&rt, &c, "resources/read", json!({"uri": uri})), table);
    }
    // Nor followed.
    let sub = ask(
        &rt,
        &c,
        "resources/subscribe",
        json!({"uri": row(TASKS, "t1")}),
    );
    refused_read(&sub, TASKS);

    // The owner still reads everything, through the same door.
    let owner = session(&rt, &s, &s.token);
    assert_eq!(
        vault_uris(&rt, &owner).len(),
        3 + 2 + 2,
        "three tables, four rows"
    );
    assert_eq!(snapshot(&s.dir), before, "reading changed no file");
}

#[test]
fn a_grant_with_read_patterns_reads_those_tables_only() {
    let s = Server::start();
    vault(&s);
    let before = snapshot(&s.dir);

    // A read pattern is checked like a write pattern: a bad one is a 400 naming the field.
    let client = oauth::register(&s, "Bad", oauth::REDIRECT);
    let (_, challenge) = pkce();
    let url = oauth::authorize_url(&s, &client, oauth::REDIRECT, &challenge, "s");
    let (_, _, html) = open(&url);
    let (st, v) = decide(
        &s,
        &s.token,
        &json!({"request": request_id(&html), "decision": "allow", "read": ["work"],
                "call_tools": ["select_rows"]}),
    );
    assert_eq!(st, 400, "{v}");
    assert_eq!(v["error"]["column"], "read", "{v}");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("\"work\""),
        "{v}"
    );

    let t = oauth::connect(
        &s,
        "CRM agent",
        json!({"read": ["work.crm.*"], "call_tools": ["list_tables", "select_rows", "get_row",
               "search_notes", "list_migrations", "describe_table"]}),
    );
    let agent = Agent::engine(&s, &t.access, None);
    let ok = |tool: &str, args: Value| {
        let r = agent.call(tool, args);
        assert!(!is_error(&r), "{tool}: {}", text(&r));
        structured(&r)
    };
    let no = |tool: &str, args: Value| {
        let r = agent.call(tool, args);
        assert!(is_error(&r), "{tool}: {}", text(&r));
        assert!(
            text(&r).contains("may not read home.notes.diary"),
            "{}",
            text(&r)
        );
    };
    // The tools.
    let tables = ok("list_tables", json!({}));
    let names: Vec<&str> = tables["tables"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["table"].as_str().unwrap())
        .collect();
    assert_eq!(names, [PEOPLE, TASKS]);
    assert_eq!(ok("select_rows", json!({"table": TASKS}))["total"], 1);
    assert_eq!(
        ok("get_row", json!({"table": TASKS, "id": "t1"}))["id"],
        "t1"
    );
    no("select_rows", json!({"table": DIARY}));
    no("get_row", json!({"table": DIARY, "id": "d1"}));
    no("describe_table", json!({"table": DIARY}));
    no("list_migrations", json!({"table": DIARY}));
    no(
        "search_notes",
        json!({"query": "meeting", "tables": [DIARY]}),
    );
    let hits = ok("search_notes", json!({"query": "meeting", "mode": "text"}));
    let found: Vec<&str> = hits["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["table"].as_str().unwrap())
        .collect();
    assert_eq!(found, [TASKS], "{hits}");
    let migrations = ok("list_migrations", json!({"limit": 1000}));
    let ms = migrations["migrations"].as_array().unwrap();
    assert!(!ms.is_empty());
    for m in ms {
        let table = m["table"].as_str().unwrap_or("");
        assert!(table.starts_with("work.crm."), "{m}");
    }

    // The resources.
    let rt = runtime();
    let c = session(&rt, &s, &t.access);
    let uris = vault_uris(&rt, &c);
    assert_eq!(
        uris,
        [
            "datanotes://tables/work.crm.people".to_string(),
            row(PEOPLE, "ada"),
            row(PEOPLE, "alan"),
            "datanotes://tables/work.crm.tasks".to_string(),
            row(TASKS, "t1"),
        ]
    );
    let r = ask(&rt, &c, "resources/read", json!({"uri": row(TASKS, "t1")}));
    let file = std::fs::read_to_string(s.row_path(TASKS, "t1")).unwrap();
    assert_eq!(r["contents"][0]["text"], file, "{r}");
    refused_read(
        &ask(&rt, &c, "resources/read", json!({"uri": row(DIARY, "d1")})),
        DIARY,
    );
    assert_eq!(complete(&rt, &c, "table", "", ""), json!([PEOPLE, TASKS]));
    assert_eq!(complete(&rt, &c, "id", "", DIARY), json!([]));
    assert_eq!(complete(&rt, &c, "id", "", TASKS), json!(["t1"]));
    let tl = ask(&rt, &c, "resources/templates/list", json!({}));
    assert_eq!(tl["resourceTemplates"].as_array().unwrap().len(), 2, "{tl}");
    refused_read(
        &ask(
            &rt,
            &c,
            "resources/subscribe",
            json!({"uri": row(DIARY, "d1")}),
        ),
        DIARY,
    );
    assert_eq!(snapshot(&s.dir), before, "reading changed no file");

    // A 2026-07-28 listen to a readable row and an unreadable one: only the first is followed.
    // Each update of the task is read by the listen after the one before was sent, so the
    // diary's, made first, would come before the task's second update.
    use std::io::BufRead;
    let params =
        json!({"notifications": {"resourceSubscriptions": [row(DIARY, "d1"), row(TASKS, "t1")]}});
    let r = post_2026(
        &s,
        &t.access,
        "subscriptions/listen",
        params,
        json!({}),
        None,
    );
    assert_eq!(r.status(), 200);
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
    let update = |table: &str, id: &str, title: &str| {
        s.ok(
            "update_row",
            json!({"table": table, "id": id, "values": {"title": title}}),
        );
    };
    update(DIARY, "d1", "a secret");
    update(TASKS, "t1", "first");
    let first = next();
    assert_eq!(first["params"]["uri"], row(TASKS, "t1"), "{first}");
    update(TASKS, "t1", "second");
    let second = next();
    assert_eq!(second["params"]["uri"], row(TASKS, "t1"), "{second}");
}

#[test]
fn an_app_token_without_read_patterns_still_reads_everything() {
    let s = Server::start();
    vault(&s);
    let token = create_app(&s, json!({"name": "reader", "call_tools": ["*"]}));
    let before = snapshot(&s.dir);
    let rt = runtime();
    let c = session(&rt, &s, &token);
    assert_eq!(
        vault_uris(&rt, &c).len(),
        3 + 2 + 2,
        "three tables, four rows"
    );
    let r = ask(&rt, &c, "resources/read", json!({"uri": row(DIARY, "d1")}));
    assert!(
        r["contents"][0]["text"].as_str().unwrap().contains("badly"),
        "{r}"
    );
    assert_eq!(complete(&rt, &c, "id", "", DIARY), json!(["d1"]));
    let agent = Agent::engine(&s, &token, None);
    let r = agent.call("search_notes", json!({"query": "meeting", "mode": "text"}));
    let hits = structured(&r)["hits"].as_array().unwrap().len();
    assert_eq!(hits, 2, "{}", text(&r));
    let r = agent.call("list_tables", json!({}));
    assert_eq!(structured(&r)["tables"].as_array().unwrap().len(), 3);
    assert_eq!(snapshot(&s.dir), before);
}
