//! The decision matrix: every path the server serves (enumerated from its router,
//! `datanotes::start::paths`, each operation of the catalog for `/datanotes/{op}`) and every
//! MCP method it answers, against every kind of principal, through a real server. The tables
//! below are the matrix; a path or method without a row fails the test, so a new surface states
//! who may use it before it lands. `docs/oauth.md` and `docs/apps.md` show the same table.

use crate::kit::*;
use serde_json::{Value, json};

/// Who may use a surface (HTTP).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Rule {
    /// Anyone, without a token (health, discovery documents, OAuth endpoints, the console's
    /// files, an app's sign-in callback).
    Public,
    /// Any app token and the owner (reads).
    Read,
    /// The owner, and an app whose write patterns cover the table.
    Write,
    /// The owner, and an app with `ddl` and a write pattern covering the table.
    Ddl,
    /// The owner, and an app with `maintain`.
    Maintain,
    /// The owner, and an app on its own entry.
    OwnEntry,
    /// The owner alone.
    Owner,
    /// The owner and a read-only metrics token.
    Metrics,
    /// No route: answered 404 to everyone with a token.
    NoRoute,
}

/// The HTTP door's rows: a path as the router has it, and its rule. `/datanotes/{op}` is
/// expanded to every operation by [`op_rule`].
const PATHS: &[(&str, Rule)] = &[
    ("/datanotes/health", Rule::Public),
    ("/datanotes/metrics", Rule::Metrics),
    ("/datanotes/tool-stats", Rule::Metrics),
    ("/datanotes/metrics-tokens/create", Rule::Owner),
    ("/datanotes/metrics-tokens", Rule::Owner),
    ("/datanotes/metrics-tokens/revoke", Rule::Owner),
    ("/datanotes/operations/", Rule::Read),
    ("/datanotes/operations", Rule::Read),
    ("/datanotes/changes/stream", Rule::Read),
    ("/datanotes/{a}/{b}/", Rule::NoRoute),
    ("/datanotes/{a}/{b}", Rule::NoRoute),
    ("/datanotes/apps/create", Rule::Owner),
    ("/datanotes/apps", Rule::Owner),
    ("/datanotes/apps/get", Rule::OwnEntry),
    ("/datanotes/apps/update", Rule::OwnEntry),
    ("/datanotes/apps/upgrade", Rule::Owner),
    ("/datanotes/apps/rollback", Rule::Owner),
    ("/datanotes/apps/refresh", Rule::OwnEntry),
    ("/datanotes/apps/connect", Rule::Owner),
    ("/datanotes/apps/rotate-token", Rule::Owner),
    ("/datanotes/apps/delete", Rule::Owner),
    ("/datanotes/apps/tools", Rule::Read),
    ("/datanotes/apps/call", Rule::Read),
    ("/datanotes/webhooks/create", Rule::Owner),
    ("/datanotes/webhooks", Rule::Read),
    ("/datanotes/webhooks/delete", Rule::Owner),
    ("/datanotes/changes", Rule::Read),
    ("/datanotes/tool-calls/record", Rule::Read),
    ("/.well-known/oauth-protected-resource", Rule::Public),
    ("/.well-known/oauth-protected-resource/mcp", Rule::Public),
    ("/.well-known/oauth-authorization-server", Rule::Public),
    ("/oauth/authorize", Rule::Public),
    // The owner's decision on the consent page.
    ("POST /oauth/authorize", Rule::Owner),
    ("/oauth/token", Rule::Public),
    ("/oauth/register", Rule::Public),
    ("/oauth/revoke", Rule::Public),
    ("/datanotes/grants/list", Rule::Owner),
    ("/datanotes/grants/revoke", Rule::Owner),
    ("/datanotes/ui", Rule::Public),
    ("/datanotes/ui/", Rule::Public),
    ("/datanotes/ui/{file}", Rule::Public),
    ("/datanotes/apps/oauth/callback", Rule::Public),
    ("/datanotes/apps/oauth/client", Rule::Public),
];

/// Each operation of the catalog, `POST /datanotes/<op>/`.
const OPS: &[(&str, Rule)] = &[
    ("list_tables", Rule::Read),
    ("describe_table", Rule::Read),
    ("get_row", Rule::Read),
    ("select_rows", Rule::Read),
    ("search_notes", Rule::Read),
    ("similar_notes", Rule::Read),
    ("search_tools", Rule::Read),
    ("list_migrations", Rule::Read),
    ("get_engine_settings", Rule::Read),
    ("insert_row", Rule::Write),
    ("update_row", Rule::Write),
    ("delete_row", Rule::Write),
    ("create_table", Rule::Ddl),
    ("alter_table", Rule::Ddl),
    ("drop_table", Rule::Ddl),
    ("set_engine_settings", Rule::Maintain),
    ("undo_migration", Rule::Maintain),
    ("restore", Rule::Maintain),
    ("vacuum", Rule::Maintain),
    ("rebuild_index", Rule::Maintain),
    ("rebuild_semantic_index", Rule::Maintain),
];

fn op_rule(op: &str) -> Rule {
    match OPS.iter().find(|(o, _)| *o == op) {
        Some((_, r)) => *r,
        None => panic!(
            "the operation {op} has no row in the decision matrix (policy/decision_matrix.rs)"
        ),
    }
}

/// The principals of the HTTP door: a name, its token (None: anonymous), its app's name.
struct Who {
    name: &'static str,
    token: Option<String>,
    app: Option<&'static str>,
    /// What it may do beyond reading: write, ddl, maintain.
    rights: [bool; 3],
    grant: bool,
    /// A read-only metrics token.
    metrics: bool,
}

/// What the matrix expects of `who` on a surface of `rule`: allowed (true), or the status
/// of the refusal.
fn expected(who: &Who, rule: Rule) -> Result<(), u16> {
    let owner = who.name == "owner";
    match rule {
        Rule::Public => Ok(()),
        Rule::NoRoute => Err(404),
        _ if who.token.is_none() || who.grant => Err(401),
        Rule::Metrics if who.metrics => Ok(()),
        _ if who.metrics => Err(403),
        _ if owner => Ok(()),
        Rule::Read | Rule::OwnEntry => Ok(()),
        Rule::Write if who.rights[0] => Ok(()),
        Rule::Ddl if who.rights[0] && who.rights[1] => Ok(()),
        Rule::Maintain if who.rights[2] => Ok(()),
        _ => Err(403),
    }
}

/// The request of a probe: its path (a pattern filled in) and body.
fn probe(path: &str, who: &Who) -> (String, Value) {
    let path = path
        .replace("{a}/{b}", "no/such")
        .replace("{file}", "index.html");
    // A table the write patterns of the writing apps cover, and one that does not exist for the
    // schema changes (refused or allowed before anything happens to it).
    let schema_change = ["create_table", "alter_table", "drop_table"];
    let table = if schema_change.iter().any(|op| path.contains(op)) {
        "work.crm.matrix"
    } else {
        TASKS
    };
    let body = json!({"table": table, "name": who.app.unwrap_or("nobody"), "id": "none"});
    (path, body)
}

/// Sends one probe: the status, and the answer's error rule if any.
fn send(s: &Server, method: &str, path: &str, token: Option<&str>, body: &Value) -> (u16, String) {
    let http = reqwest::blocking::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let url = format!("{}{}", s.url, path);
    let mut r = match method {
        "GET" => http.get(&url),
        "DELETE" => http.delete(&url),
        _ => http.post(&url).json(body),
    };
    if let Some(t) = token {
        r = r.bearer_auth(t);
    }
    let r = r.send().unwrap();
    let st = r.status().as_u16();
    let stream = r
        .headers()
        .get("content-type")
        .is_some_and(|t| t.as_bytes().starts_with(b"text/event-stream"));
    if stream {
        return (st, String::new());
    }
    let v: Value = r.json().unwrap_or(Value::Null);
    (st, v["error"]["rule"].as_str().unwrap_or("").to_string())
}

#[test]
fn every_route_and_method_is_decided_for_every_principal() {
    let s = Server::start();
    create_tasks(&s);
    let app = |name: &str, extra: Value| {
        let mut body = json!({"name": name});
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        create_app(&s, body)
    };
    let grant = oauth::connect(&s, "matrix client", json!({"call_tools": ["list_tables"]}));
    let who = |name, token: Option<String>, app, rights, grant| Who {
        name,
        token,
        app,
        rights,
        grant,
        metrics: false,
    };
    let scraper = s.ok_route("metrics-tokens/create", json!({"name": "matrix"}))["token"]
        .as_str()
        .unwrap()
        .to_string();
    let (none, all) = ([false; 3], [true; 3]);
    let whos = [
        who("anonymous", None, None, none, false),
        who("grant", Some(grant.access.clone()), None, none, true),
        who(
            "app",
            Some(app("m-none", json!({}))),
            Some("m-none"),
            none,
            false,
        ),
        who(
            "app+write",
            Some(app("m-write", json!({"write": ["work.crm.*"]}))),
            Some("m-write"),
            [true, false, false],
            false,
        ),
        who(
            "app+ddl",
            Some(app("m-ddl", json!({"write": ["work.crm.*"], "ddl": true}))),
            Some("m-ddl"),
            [true, true, false],
            false,
        ),
        who(
            "app+maintain",
            Some(app("m-maint", json!({"maintain": true}))),
            Some("m-maint"),
            [false, false, true],
            false,
        ),
        Who {
            metrics: true,
            ..who("metrics", Some(scraper.clone()), None, none, false)
        },
        who("owner", Some(s.token.clone()), None, all, false),
    ];

    let served = datanotes::start::paths();
    let catalog: Vec<&str> = datanotes::ops::CATALOG.iter().map(|o| o.name).collect();
    for op in &catalog {
        op_rule(op);
    }
    let mut rows: Vec<(String, Rule)> = vec![];
    for path in &served {
        if path == "/mcp" {
            continue;
        }
        if path.starts_with("/datanotes/{op}") {
            let slash = if path.ends_with('/') { "/" } else { "" };
            rows.extend(
                catalog
                    .iter()
                    .map(|op| (format!("/datanotes/{op}{slash}"), op_rule(op))),
            );
            continue;
        }
        let rule = PATHS
            .iter()
            .find(|(p, _)| *p == path.trim_end_matches('/') || *p == path)
            .map(|(_, r)| *r)
            .unwrap_or_else(|| {
                panic!(
                    "the route {path} has no row in the decision matrix (policy/decision_matrix.rs)"
                )
            });
        rows.push((path.clone(), rule));
    }

    // Each route's methods, as the router serves them (405: not this one).
    let owner = whos.last().unwrap();
    let (mut cells, mut wrong) = (0, vec![]);
    for (path, rule) in &rows {
        let methods: Vec<&str> = ["GET", "POST", "DELETE"]
            .into_iter()
            .filter(|m| {
                let (p, b) = probe(path, owner);
                send(&s, m, &p, owner.token.as_deref(), &b).0 != 405
            })
            .collect();
        assert!(
            !methods.is_empty() || *rule == Rule::NoRoute,
            "{path}: no method served"
        );
        for m in &methods {
            // A row for one method of a path, if it has one.
            let rule = PATHS
                .iter()
                .find(|(p, _)| *p == format!("{m} {}", path.trim_end_matches('/')))
                .map_or(*rule, |(_, r)| *r);
            for who in &whos {
                let (p, b) = probe(path, who);
                let (st, why) = send(&s, m, &p, who.token.as_deref(), &b);
                cells += 1;
                let got = match st {
                    401 | 403 | 404 if st != 404 || rule == Rule::NoRoute => Err(st),
                    _ => Ok(()),
                };
                if got != expected(who, rule) {
                    wrong.push(format!(
                        "{m} {p} as {}: {st} {why} (the matrix says {:?})",
                        who.name,
                        expected(who, rule)
                    ));
                }
            }
        }
    }
    // The MCP columns: each tick of a consent on a grant of its own.
    let consent = |name: &str, rights: Value| oauth::connect(&s, name, rights).access;
    let crm = json!(["work.crm.*"]);
    let tokens = [
        s.token.clone(),
        whos[2].token.clone().unwrap(),
        app("m-notools", json!({"call_tools": []})),
        grant.access.clone(),
        consent(
            "matrix reader",
            json!({"call_tools": ["list_tables"], "read": crm}),
        ),
        consent(
            "matrix writer",
            json!({"call_tools": ["update_row", "get_row"], "write": crm}),
        ),
        consent(
            "matrix designer",
            json!({"call_tools": ["drop_table"], "write": crm, "ddl": true}),
        ),
        consent(
            "matrix keeper",
            json!({"call_tools": ["vacuum", "set_engine_settings"], "maintain": true}),
        ),
    ];
    let (mcp_cells, mcp_wrong) = mcp_matrix(&s, &tokens, &scraper);
    wrong.extend(mcp_wrong);
    println!(
        "decision matrix: {} HTTP routes, {cells} HTTP cells; {} MCP methods x {} principals = {} MCP cells",
        rows.len(),
        MCP.len(),
        MCP_WHO,
        mcp_cells
    );
    assert!(
        wrong.is_empty(),
        "{} cells disagree:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}

/// How a principal fares with an MCP method: answered, refused (a `403`-class error: the
/// policy), or another error (no such task, prompt...: past the policy).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Got {
    Ok,
    Refused,
    Error,
}
use Got::{Error as E, Ok as K, Refused as R};

/// The principals of the MCP rows, each with its own session: the owner; an app with no rights
/// beyond reading (its `call_tools` every tool) and one whose `call_tools` is empty; a grant
/// that ticked `list_tables` only, and one for each further tick (read patterns, write, ddl,
/// maintain). Then, on the owner's session: anonymous (always `401`), another token (always
/// `404`) and a metrics token (always `403`).
const MCP_COLUMNS: [&str; 8] = [
    "owner",
    "app",
    "app without call_tools",
    "grant of list_tables",
    "grant+read work.crm.*",
    "grant+write",
    "grant+ddl",
    "grant+maintain",
];
const MCP_WHO: usize = MCP_COLUMNS.len() + 3;

/// The MCP door's rows: a method (both eras' requests and notifications: the client's side of
/// the specification), its params, and what the owner, an app and a grant get. A method the
/// server answers that has no row fails the test, as does a row the server does not answer.
#[allow(clippy::type_complexity)]
const MCP: &[(&str, &str, [Got; 8])] = &[
    ("ping", "{}", [K; 8]),
    ("tools/list", "{}", [K; 8]),
    (
        "tools/call",
        r#"{"name": "list_tables", "arguments": {}}"#,
        [K, K, R, K, K, R, R, R],
    ),
    (
        "tools/call",
        r#"{"name": "update_row", "arguments": {"table": "work.crm.people", "id": "ada", "values": {"name": "Ada"}}}"#,
        [K, R, R, R, R, K, R, R],
    ),
    (
        "tools/call",
        r#"{"name": "get_row", "arguments": {"table": "work.crm.people", "id": "ada"}}"#,
        [K, K, R, R, R, K, R, R],
    ),
    // A table that does not exist: past the policy, the engine's own error.
    (
        "tools/call",
        r#"{"name": "drop_table", "arguments": {"table": "work.crm.nothing"}}"#,
        [E, R, R, R, R, R, E, R],
    ),
    (
        "tools/call",
        r#"{"name": "vacuum", "arguments": {"before_seq": 1}}"#,
        [K, R, R, R, R, R, R, K],
    ),
    // The trust root: the owner's alone, whatever a principal's maintain.
    (
        "tools/call",
        r#"{"name": "set_engine_settings", "arguments": {"settings": {"require_signature": false}}}"#,
        [K, R, R, R, R, R, R, R],
    ),
    ("resources/list", "{}", [K; 8]),
    ("resources/templates/list", "{}", [K; 8]),
    (
        "resources/read",
        r#"{"uri": "datanotes://tables/work.crm.people/rows/ada"}"#,
        [K, K, K, R, K, K, R, R],
    ),
    (
        "resources/subscribe",
        r#"{"uri": "datanotes://tables/work.crm.people/rows/ada"}"#,
        [K, K, K, R, K, K, R, R],
    ),
    (
        "resources/unsubscribe",
        r#"{"uri": "datanotes://tables/work.crm.people/rows/ada"}"#,
        [K; 8],
    ),
    ("prompts/list", "{}", [K; 8]),
    ("prompts/get", r#"{"name": "no_such_prompt"}"#, [E; 8]),
    (
        "completion/complete",
        r#"{"ref": {"type": "ref/resource", "uri": "datanotes://tables/{table}/rows/{id}"}, "argument": {"name": "table", "value": "work"}}"#,
        [K; 8],
    ),
    ("logging/setLevel", r#"{"level": "info"}"#, [K; 8]),
    ("tasks/get", r#"{"taskId": "no-such-task"}"#, [E; 8]),
    ("tasks/cancel", r#"{"taskId": "no-such-task"}"#, [E; 8]),
    ("tasks/result", r#"{"taskId": "no-such-task"}"#, [E; 8]),
    ("tasks/list", "{}", [K; 8]),
    ("notifications/initialized", "{}", [K; 8]),
    ("notifications/cancelled", r#"{"requestId": 999}"#, [K; 8]),
    (
        "notifications/progress",
        r#"{"progressToken": "p", "progress": 1}"#,
        [K; 8],
    ),
    ("notifications/roots/list_changed", "{}", [K; 8]),
];

/// Methods of the specification the server does not answer (`-32601`): a row each too, so
/// that answering one later needs a row above.
const MCP_UNANSWERED: &[&str] = &["sampling/createMessage", "elicitation/create", "roots/list"];

/// One message on a session (`None`: without one, as anonymous): `(status, outcome)`.
fn rpc(
    s: &Server,
    token: Option<&str>,
    session: &str,
    method: &str,
    params: &str,
) -> (u16, Got, String) {
    let notification = method.starts_with("notifications/");
    let mut body = json!({"jsonrpc": "2.0", "method": method,
        "params": serde_json::from_str::<Value>(params).unwrap()});
    if !notification {
        body["id"] = json!(42);
    }
    let mut r = reqwest::blocking::Client::new()
        .post(format!("{}/mcp", s.url))
        .header("accept", "application/json, text/event-stream")
        .header("mcp-session-id", session)
        .json(&body);
    if let Some(t) = token {
        r = r.bearer_auth(t);
    }
    let r = r.send().unwrap();
    let st = r.status().as_u16();
    let messages = mcp::messages_of(r);
    let text = Value::from(messages.clone()).to_string();
    let msg = messages.into_iter().find(|m| m.get("id").is_some());
    let got = match (st, msg) {
        (202, None) if notification => K,
        (200, Some(m)) => {
            let error = m
                .get("error")
                .cloned()
                .or_else(|| (m["result"]["isError"] == true).then(|| m["result"].clone()));
            match error {
                None => K,
                Some(e) if refusal(&e) => R,
                Some(_) => E,
            }
        }
        _ => E,
    };
    (st, got, text.chars().take(300).collect())
}

/// An error of the policy: the engine's error code `forbidden`, as a JSON-RPC error's `data`
/// or as a failed tool call's error (its structured content, else its text).
fn refusal(e: &Value) -> bool {
    let text = e["content"][0]["text"]
        .as_str()
        .and_then(|t| serde_json::from_str::<Value>(t).ok());
    let code = [
        e.pointer("/data/code"),
        e.pointer("/structuredContent/error/code"),
        text.as_ref().and_then(|t| t.pointer("/error/code")),
    ]
    .into_iter()
    .flatten()
    .find_map(Value::as_str);
    code == Some("forbidden")
}

/// Every MCP row against every column of [`MCP_COLUMNS`] (`tokens`, in that order), then
/// anonymous, another token on the owner's session and a metrics token; the cells covered.
fn mcp_matrix(s: &Server, tokens: &[String], scraper: &str) -> (usize, Vec<String>) {
    assert_eq!(tokens.len(), MCP_COLUMNS.len());
    let app = &tokens[1];
    let version = "2025-11-25";
    let sessions: Vec<_> = (tokens.iter())
        .map(|t| mcp::RawSession::open(s, t, version))
        .collect();
    let (mut cells, mut wrong) = (0, vec![]);
    for (method, params, want) in MCP {
        for (i, session) in sessions.iter().enumerate() {
            let (st, got, text) = rpc(s, Some(&session.token), &session.id, method, params);
            cells += 1;
            if got != want[i] {
                wrong.push(format!(
                    "{method} {params} as {}: {st} {got:?} (the matrix says {:?}): {text}",
                    MCP_COLUMNS[i], want[i]
                ));
            }
        }
        // Anonymous: 401; another principal's token on the owner's session: 404; a metrics
        // token: 403.
        let (st, _, _) = rpc(s, None, &sessions[0].id, method, params);
        let (foreign, _, _) = rpc(s, Some(app), &sessions[0].id, method, params);
        let (metrics, _, _) = rpc(s, Some(scraper), &sessions[0].id, method, params);
        cells += 3;
        if (st, foreign, metrics) != (401, 404, 403) {
            wrong.push(format!("{method}: anonymous {st}, another token on the owner's session {foreign}, a metrics token {metrics} (the matrix says 401, 404, 403)"));
        }
    }
    for method in MCP_UNANSWERED {
        let (_, _, text) = rpc(s, Some(&s.token), &sessions[0].id, method, "{}");
        cells += 1;
        if !text.contains("-32601") {
            wrong.push(format!(
                "{method} is answered: it needs a row of the matrix: {text}"
            ));
        }
    }
    (cells, wrong)
}
