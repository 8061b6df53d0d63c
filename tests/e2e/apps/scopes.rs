//! Apps: the registry, app tokens and their scopes, through the real HTTP server.

use crate::kit::*;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::time::Duration;

/// The table every write cell of the matrix aims at.
const T: &str = "alpha.beta.gamma";

fn table_def(table: &str) -> Value {
    json!({"table": table, "columns": {"title": {"type": "text", "required": true}}})
}

/// Everything a refused call must leave alone: the files, the journal's last seq and the
/// engine's own registries.
#[derive(PartialEq)]
struct State {
    files: BTreeMap<PathBuf, Vec<u8>>,
    seq: i64,
    meta: Vec<(&'static str, Option<Vec<u8>>)>,
}

fn state(s: &Server) -> State {
    State {
        files: snapshot(&s.dir),
        seq: s.seq(),
        meta: ["apps.json", "webhooks.json", "settings.json"]
            .into_iter()
            .map(|f| (f, std::fs::read(s.dir.join(".datanotes").join(f)).ok()))
            .collect(),
    }
}

fn assert_unchanged(before: &State, after: &State, what: &str) {
    if before == after {
        return;
    }
    let mut diff = vec![];
    if before.seq != after.seq {
        diff.push(format!("journal seq {} -> {}", before.seq, after.seq));
    }
    for (p, b) in &before.files {
        if after.files.get(p) != Some(b) {
            diff.push(format!("{} changed or vanished", p.display()));
        }
    }
    for p in after.files.keys() {
        if !before.files.contains_key(p) {
            diff.push(format!("{} appeared", p.display()));
        }
    }
    for ((f, b), (_, a)) in before.meta.iter().zip(&after.meta) {
        if a != b {
            diff.push(format!(".datanotes/{f} changed"));
        }
    }
    panic!("{what} changed something: {}", diff.join("; "));
}

fn assert_error_shape(v: &Value, code: &str) -> Value {
    let e = &v["error"];
    assert_eq!(e["code"], code, "{v}");
    assert!(
        e["message"].as_str().is_some_and(|m| !m.is_empty()),
        "message: {v}"
    );
    assert!(
        e["hint"].as_str().is_some_and(|m| !m.is_empty()),
        "hint: {v}"
    );
    e.clone()
}

// ---- the permission matrix ----

/// An app of the matrix: its rights, and whether its write patterns cover `T`.
struct Profile {
    name: &'static str,
    write: &'static [&'static str],
    ddl: bool,
    maintain: bool,
    covers: bool,
}

const fn p(
    name: &'static str,
    write: &'static [&'static str],
    ddl: bool,
    maintain: bool,
    covers: bool,
) -> Profile {
    Profile {
        name,
        write,
        ddl,
        maintain,
        covers,
    }
}

const APPS: &[Profile] = &[
    p("none", &[], false, false, false),
    // catalog.schema.table
    p("w-table", &["alpha.beta.gamma"], false, false, true),
    p("w-table-no", &["alpha.beta.gam"], false, false, false),
    // catalog.schema.*
    p("w-schema", &["alpha.beta.*"], false, false, true),
    p("w-schema-no", &["alpha.bet.*"], false, false, false),
    // catalog.*
    p("w-catalog", &["alpha.*"], false, false, true),
    p("w-catalog-no", &["alph.*"], false, false, false),
    // *
    p("w-all", &["*"], false, false, true),
    // several patterns: any one covering the table is enough
    p(
        "w-multi",
        &["other.x.y", "alpha.beta.*"],
        false,
        false,
        true,
    ),
    p("ddl", &["alpha.*"], true, false, true),
    p("ddl-noscope", &[], true, false, false),
    p("ddl-elsewhere", &["other.*"], true, false, false),
    p("maintain", &[], false, true, false),
];

#[derive(Clone, Copy, PartialEq, Debug)]
enum Class {
    /// Any valid token; changes nothing.
    Read,
    /// Any valid token; appends to the journal (tool-call events).
    ReadAppends,
    RowWrite,
    Schema,
    Maintain,
    Owner,
    /// Self-service on the caller's own entry.
    SelfOwn,
    /// Self-service on another existing app's entry.
    SelfOther,
    /// Self-service on an app that does not exist.
    SelfGhost,
}

#[derive(Clone)]
enum Who {
    NoToken,
    BadToken(String),
    Owner,
    App(usize),
}

struct Names {
    own: String,
    other: String,
    webhook: String,
}

/// What an allowed call does to the state.
#[derive(Clone, Copy, PartialEq)]
enum Effect {
    /// Changes nothing at all.
    Nothing,
    /// Appends to the journal.
    Journals,
    /// Changes something else (a registry) or maybe nothing.
    Other,
}

struct Cell {
    label: &'static str,
    route: &'static str,
    class: Class,
    effect: Effect,
    body: fn(&Names, u32) -> Value,
}

fn tool_call(n: u32) -> Value {
    json!({"tool": "search", "args": {"q": n}, "ok": true, "value": "found", "servedBy": "matrix",
           "durationMs": 1.5, "summary": "one hit", "session": null, "resultChars": 5, "resultTokens": 2})
}

fn cells() -> Vec<Cell> {
    use Effect::*;
    fn c(
        label: &'static str,
        route: &'static str,
        class: Class,
        effect: Effect,
        body: fn(&Names, u32) -> Value,
    ) -> Cell {
        Cell {
            label,
            route,
            class,
            effect,
            body,
        }
    }
    vec![
        c(
            "read select_rows",
            "select_rows",
            Class::Read,
            Nothing,
            |_, _| json!({"table": T}),
        ),
        c(
            "read list_migrations",
            "list_migrations",
            Class::Read,
            Nothing,
            |_, _| json!({"limit": 3}),
        ),
        c(
            "read describe_table",
            "describe_table",
            Class::Read,
            Nothing,
            |_, _| json!({"table": T}),
        ),
        c(
            "row write insert_row",
            "insert_row",
            Class::RowWrite,
            Journals,
            |_, n| json!({"table": T, "id": format!("row-{n}"), "values": {"title": format!("row {n}")}}),
        ),
        c(
            "row write update_row",
            "update_row",
            Class::RowWrite,
            Journals,
            |_, n| json!({"table": T, "id": "seed", "values": {"title": format!("seed {n}")}}),
        ),
        c(
            "schema alter_table",
            "alter_table",
            Class::Schema,
            Journals,
            |_, n| json!({"table": T, "description": format!("described by call {n}")}),
        ),
        c(
            "schema create_table",
            "create_table",
            Class::Schema,
            Journals,
            |_, n| table_def(&format!("alpha.beta.t{n}")),
        ),
        c(
            "maintain set_engine_settings",
            "set_engine_settings",
            Class::Maintain,
            Journals,
            |_, n| json!({"settings": {"default_limit": 10 + n}}),
        ),
        c(
            "maintain rebuild_index",
            "rebuild_index",
            Class::Maintain,
            Other,
            |_, _| json!({}),
        ),
        c(
            "apps/create",
            "apps/create",
            Class::Owner,
            Other,
            |_, n| json!({"name": format!("made-{n}")}),
        ),
        c("apps/", "apps", Class::Owner, Nothing, |_, _| json!({})),
        c(
            "apps/get own",
            "apps/get",
            Class::SelfOwn,
            Nothing,
            |x, _| json!({"name": x.own}),
        ),
        c(
            "apps/get other",
            "apps/get",
            Class::SelfOther,
            Nothing,
            |x, _| json!({"name": x.other}),
        ),
        c(
            "apps/get ghost",
            "apps/get",
            Class::SelfGhost,
            Nothing,
            |_, _| json!({"name": "ghost"}),
        ),
        c(
            "apps/update own",
            "apps/update",
            Class::SelfOwn,
            Other,
            |x, n| json!({"name": x.own, "description": format!("updated {n}")}),
        ),
        c(
            "apps/update other",
            "apps/update",
            Class::SelfOther,
            Other,
            |x, n| json!({"name": x.other, "description": format!("updated {n}")}),
        ),
        c(
            "apps/update ghost",
            "apps/update",
            Class::SelfGhost,
            Other,
            |_, n| json!({"name": "ghost", "description": format!("updated {n}")}),
        ),
        c(
            "apps/refresh own",
            "apps/refresh",
            Class::SelfOwn,
            Nothing,
            |x, _| json!({"name": x.own}),
        ),
        c(
            "apps/refresh other",
            "apps/refresh",
            Class::SelfOther,
            Nothing,
            |x, _| json!({"name": x.other}),
        ),
        c(
            "apps/refresh ghost",
            "apps/refresh",
            Class::SelfGhost,
            Nothing,
            |_, _| json!({"name": "ghost"}),
        ),
        c(
            "apps/rotate-token own",
            "apps/rotate-token",
            Class::Owner,
            Other,
            |x, _| json!({"name": x.own}),
        ),
        c(
            "apps/delete own",
            "apps/delete",
            Class::Owner,
            Other,
            |x, _| json!({"name": x.own}),
        ),
        c(
            "webhooks/create",
            "webhooks/create",
            Class::Owner,
            Other,
            |_, _| {
                // A filter no change of this test matches: the hook never delivers.
                json!({"url": "http://127.0.0.1:9/hook", "ops": ["restore"]})
            },
        ),
        c("webhooks/", "webhooks", Class::Read, Nothing, |_, _| {
            json!({})
        }),
        c(
            "webhooks/delete",
            "webhooks/delete",
            Class::Owner,
            Other,
            |x, _| json!({"id": x.webhook}),
        ),
        c(
            "changes/",
            "changes",
            Class::Read,
            Nothing,
            |_, _| json!({"since": 0, "limit": 5}),
        ),
        c(
            "tool-calls/record",
            "tool-calls/record",
            Class::ReadAppends,
            Journals,
            |_, n| tool_call(n),
        ),
    ]
}

/// What a caller should get for a cell: Ok(()) allowed, Err((status, rule)) refused.
fn expected(who: &Who, class: Class) -> Result<(), (u16, &'static str)> {
    let app = match who {
        Who::NoToken | Who::BadToken(_) => return Err((401, "")),
        Who::Owner => {
            return match class {
                Class::SelfGhost => Err((404, "")),
                _ => Ok(()),
            };
        }
        Who::App(i) => &APPS[*i],
    };
    match class {
        Class::Read | Class::ReadAppends | Class::SelfOwn => Ok(()),
        Class::RowWrite if app.covers => Ok(()),
        Class::RowWrite => Err((403, "write")),
        Class::Schema if !app.ddl => Err((403, "ddl")),
        Class::Schema if !app.covers => Err((403, "write")),
        Class::Schema => Ok(()),
        Class::Maintain if app.maintain => Ok(()),
        Class::Maintain => Err((403, "maintain")),
        Class::Owner => Err((403, "owner")),
        Class::SelfOther | Class::SelfGhost => Err((403, "self")),
    }
}

#[test]
fn permission_matrix() {
    let s = Server::start();
    s.ok("create_table", table_def(T));
    s.ok(
        "insert_row",
        json!({"table": T, "id": "seed", "values": {"title": "seed"}}),
    );
    let mut tokens = vec![];
    for a in APPS {
        let v = s.ok_route(
            "apps/create",
            json!({"name": a.name, "write": a.write, "ddl": a.ddl, "maintain": a.maintain}),
        );
        assert_eq!(v["app"]["name"], a.name);
        let t = v["token"].as_str().unwrap().to_string();
        assert!(t.starts_with("dn_app_"), "{t}");
        tokens.push(t);
    }
    // What the owner's rotate-token / delete cells act on: an app nobody else uses.
    s.ok_route("apps/create", json!({"name": "victim"}));
    // What the owner's webhooks/delete cell deletes.
    let wh = s.ok_route(
        "webhooks/create",
        json!({"url": "http://127.0.0.1:9/hook", "ops": ["restore"]}),
    )["webhook"]["id"]
        .as_str()
        .unwrap()
        .to_string();

    let mut callers = vec![Who::NoToken];
    callers.extend(
        [
            format!("dn_app_{}", "0".repeat(64)),
            format!("dn_owner_{}", "0".repeat(64)),
            "not-a-token".to_string(),
        ]
        .map(Who::BadToken),
    );
    callers.extend((0..APPS.len()).map(Who::App));
    // The owner last: its rotate-token, delete and webhooks/delete cells remove things.
    callers.push(Who::Owner);

    let cells = cells();
    let mut n = 100;
    let mut answers: HashMap<(String, String), (u16, Value)> = HashMap::new();
    let mut counted = 0;
    for who in &callers {
        let (token, label, names) = match who {
            Who::NoToken => (None, "no token".to_string(), None),
            Who::BadToken(b) => (Some(b.clone()), format!("bad token {b}"), None),
            Who::Owner => (Some(s.token.clone()), "owner".into(), None),
            Who::App(i) => (
                Some(tokens[*i].clone()),
                format!("app {}", APPS[*i].name),
                Some(*i),
            ),
        };
        let names = Names {
            own: names.map_or("victim".into(), |i| APPS[i].name.to_string()),
            other: match names {
                Some(0) => APPS[1].name.to_string(),
                _ => APPS[0].name.to_string(),
            },
            webhook: wh.clone(),
        };
        for cell in &cells {
            n += 1;
            let body = (cell.body)(&names, n);
            let before = state(&s);
            let (status, v) = s.call_as(token.as_deref(), cell.route, &body, &[]);
            let after = state(&s);
            let what = format!("{label}: {} {body}", cell.label);
            counted += 1;
            match expected(who, cell.class) {
                Ok(()) => {
                    assert_eq!(
                        status, 200,
                        "{what} should be allowed, answered {status}: {v}"
                    );
                    match cell.effect {
                        Effect::Nothing => assert_unchanged(&before, &after, &what),
                        Effect::Journals => assert!(
                            after.seq > before.seq,
                            "{what}: an allowed write did not reach the journal: {v}"
                        ),
                        Effect::Other => {}
                    }
                }
                Err((code, rule)) => {
                    assert_eq!(status, code, "{what} should be refused with {code}: {v}");
                    assert_unchanged(&before, &after, &what);
                    let e = &v["error"];
                    let msg = e["message"].as_str().unwrap_or_default();
                    match code {
                        401 => assert_eq!(e["code"], "unauthorized", "{what}: {v}"),
                        404 => assert_eq!(e["code"], "not_found", "{what}: {v}"),
                        _ => {
                            assert_error_shape(&v, "forbidden");
                            assert_eq!(e["rule"], rule, "{what}: {v}");
                            if let Who::App(i) = who {
                                let app = &APPS[*i];
                                if rule != "owner" {
                                    assert!(msg.contains(app.name), "{what}: message {msg:?}");
                                }
                                let table = body["table"].as_str().unwrap_or(T);
                                match rule {
                                    "write" => {
                                        assert!(msg.contains(table), "{what}: {msg:?}");
                                        assert_eq!(e["table"], table, "{what}: {v}");
                                        let scope = if app.write.is_empty() {
                                            "empty".to_string()
                                        } else {
                                            app.write.join(", ")
                                        };
                                        assert!(msg.contains(&scope), "{what}: {msg:?}");
                                    }
                                    "ddl" => {
                                        assert!(msg.contains("ddl"), "{what}: {msg:?}");
                                        assert!(msg.contains(table), "{what}: {msg:?}");
                                        assert_eq!(e["table"], table, "{what}: {v}");
                                    }
                                    "maintain" => {
                                        assert!(msg.contains("maintain"), "{what}: {msg:?}")
                                    }
                                    _ => {}
                                }
                            }
                        }
                    }
                }
            }
            answers.insert((label.clone(), cell.label.to_string()), (status, v));
        }
        // The change-feed stream is a read route too.
        let r = s.sse("since=0", token.as_deref(), &[]);
        match (expected(who, Class::Read), r) {
            (Ok(()), Ok(_)) => {}
            (Err((401, _)), Err((401, v))) => assert_eq!(v["error"]["code"], "unauthorized"),
            (e, r) => panic!(
                "{label}: changes/stream expected {e:?}, got {:?}",
                r.err().map(|x| x.0).unwrap_or(200)
            ),
        }
    }
    assert_eq!(counted, callers.len() * cells.len());

    // Another app's entry: the same answer whether it exists or not.
    for a in APPS {
        let label = format!("app {}", a.name);
        for route in ["apps/get", "apps/update", "apps/refresh"] {
            let other = &answers[&(label.clone(), format!("{route} other"))];
            let ghost = &answers[&(label.clone(), format!("{route} ghost"))];
            assert_eq!(other, ghost, "{label} {route}: other vs ghost");
        }
    }

    // Each app's own update went through, and only its own entry changed.
    let list = s.ok_route("apps", json!({}))["apps"].clone();
    for a in APPS {
        let e = list
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["name"] == a.name)
            .unwrap_or_else(|| panic!("{} listed: {list}", a.name));
        assert!(
            e["description"].as_str().unwrap().starts_with("updated "),
            "{e}"
        );
        assert_eq!(e["write"], json!(a.write));
        assert_eq!(e["ddl"], a.ddl);
        assert_eq!(e["maintain"], a.maintain);
    }
    // The owner's cells ran: victim rotated then deleted, the webhook deleted.
    assert!(!list.to_string().contains("\"victim\""), "{list}");
    let hooks = s.ok_route("webhooks", json!({}));
    assert!(!hooks.to_string().contains(&wh), "{hooks}");
}

// ---- self-service limits ----

fn app_entry(s: &Server, name: &str) -> Value {
    s.ok_route("apps/get", json!({"name": name}))["app"].clone()
}

#[test]
fn an_app_changes_only_its_own_descriptive_fields() {
    let s = Server::start();
    s.ok("create_table", table_def(T));
    let tok = create_app(&s, json!({"name": "planner", "write": ["alpha.*"]}));
    let as_app = |route: &str, body: Value| s.call_as(Some(&tok), route, &body, &[]);

    // Its own mcp_url (a loopback address: the owner allows it), mcp_token, description and
    // instructions: allowed.
    s.ok_route(
        "apps/update",
        json!({"name": "planner", "self_url_private": true}),
    );
    let (st, v) = as_app(
        "apps/update",
        json!({"name": "planner", "mcp_url": "http://127.0.0.1:5235/mcp", "mcp_token": "mcp-secret-42",
               "description": "plans things", "instructions": "ask before deleting"}),
    );
    assert_eq!(st, 200, "{v}");
    let e = &v["app"];
    assert_eq!(e["mcp_url"], "http://127.0.0.1:5235/mcp");
    assert_eq!(e["kind"], "remote");
    assert_eq!(e["hasMcpToken"], true);
    assert_eq!(e["description"], "plans things");
    assert_eq!(e["instructions"], "ask before deleting");
    assert!(e.get("mcp_token").is_none(), "{e}");
    assert!(!v.to_string().contains("mcp-secret-42"), "{v}");
    let (st, v) = as_app("apps/get", json!({"name": "planner"}));
    assert_eq!(st, 200);
    assert_eq!(&v["app"], e);

    // Rights: refused, whatever else the call carries, and nothing changes.
    for (field, value) in [
        ("write", json!(["*"])),
        ("write", json!([])),
        ("ddl", json!(true)),
        ("maintain", json!(true)),
        ("call_tools", json!(["*"])),
        ("self_url", json!(false)),
        ("self_url_private", json!(false)),
    ] {
        let before = std::fs::read(s.dir.join(".datanotes/apps.json")).unwrap();
        let mut body = json!({"name": "planner", "description": "sneaky"});
        body[field] = value;
        let (st, v) = as_app("apps/update", body.clone());
        assert_eq!(st, 403, "{body}: {v}");
        let err = assert_error_shape(&v, "forbidden");
        assert_eq!(err["column"], field, "{v}");
        assert!(err["message"].as_str().unwrap().contains(field), "{v}");
        assert!(err["message"].as_str().unwrap().contains("planner"), "{v}");
        assert_eq!(
            std::fs::read(s.dir.join(".datanotes/apps.json")).unwrap(),
            before,
            "{body}"
        );
    }
    let e2 = app_entry(&s, "planner");
    assert_eq!(&e2, e, "refused updates left the entry alone");

    // Its name: naming another app is someone else's entry, refused the same way.
    let (st, v) = as_app(
        "apps/update",
        json!({"name": "renamed", "description": "x"}),
    );
    assert_eq!(st, 403, "{v}");
    assert_eq!(v["error"]["rule"], "self");
    let (st, _) = s.call_as(Some(&s.token), "apps/get", &json!({"name": "renamed"}), &[]);
    assert_eq!(st, 404);
    assert_eq!(app_entry(&s, "planner"), *e);

    // The rights still hold: no ddl.
    let (st, v) = s.call_as(
        Some(&tok),
        "alter_table",
        &json!({"table": T, "description": "x"}),
        &[],
    );
    assert_eq!(st, 403, "{v}");

    // Clearing mcp_token and mcp_url with null.
    let (st, v) = as_app(
        "apps/update",
        json!({"name": "planner", "mcp_token": null, "mcp_url": null}),
    );
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["app"]["hasMcpToken"], false);
    assert_eq!(v["app"]["mcp_url"], Value::Null);
    assert_eq!(v["app"]["kind"], "client");
    assert_eq!(v["app"]["description"], "plans things");

    // The owner changes rights, and they apply to the app's next call at once.
    let v = s.ok_route("apps/update", json!({"name": "planner", "ddl": true}));
    assert_eq!(v["app"]["ddl"], true);
    let (st, v) = s.call_as(
        Some(&tok),
        "alter_table",
        &json!({"table": T, "description": "x"}),
        &[],
    );
    assert_eq!(st, 200, "{v}");
    s.ok_route("apps/update", json!({"name": "planner", "write": []}));
    let (st, v) = s.call_as(
        Some(&tok),
        "insert_row",
        &json!({"table": T, "values": {"title": "late"}}),
        &[],
    );
    assert_eq!(st, 403, "{v}");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("empty"),
        "{v}"
    );
}

#[test]
fn rotate_token_and_delete_cut_the_old_token_at_once() {
    let s = Server::start();
    let t1 = create_app(&s, json!({"name": "courier", "write": ["*"]}));
    let works = |t: &str| {
        let (st, v) = s.call_as(Some(t), "list_tables", &json!({}), &[]);
        assert!(st == 200 || st == 401, "{v}");
        let (st2, _) = s.call_as(Some(t), "apps/get", &json!({"name": "courier"}), &[]);
        assert_eq!(st == 200, st2 == 200, "op and route agree");
        if st == 401 {
            assert_eq!(v["error"]["code"], "unauthorized");
            assert_eq!(st2, 401);
        }
        st == 200
    };
    assert!(works(&t1));

    let v = s.ok_route("apps/rotate-token", json!({"name": "courier"}));
    let t2 = v["token"].as_str().unwrap().to_string();
    assert!(t2.starts_with("dn_app_") && t2 != t1);
    assert!(!works(&t1), "the old token is cut right after rotate-token");
    assert!(works(&t2));

    let (st, v) = s.call_as(
        Some(&s.token),
        "apps/rotate-token",
        &json!({"name": "ghost"}),
        &[],
    );
    assert_eq!(st, 404, "{v}");

    let v = s.ok_route("apps/delete", json!({"name": "courier"}));
    assert_eq!(v["deleted"], "courier");
    assert!(!works(&t2), "the token is cut right after delete");
    let (st, _) = s.call_as(Some(&s.token), "apps/get", &json!({"name": "courier"}), &[]);
    assert_eq!(st, 404);
    let (st, _) = s.call_as(
        Some(&s.token),
        "apps/delete",
        &json!({"name": "courier"}),
        &[],
    );
    assert_eq!(st, 404);

    // An open change stream ends when its token is cut: nothing more reaches it.
    let mut n = 10;
    let mut write = || {
        n += 1;
        s.ok(
            "set_engine_settings",
            json!({"settings": {"default_limit": n}}),
        )["seq"]
            .as_i64()
            .unwrap()
    };
    for cut in ["apps/rotate-token", "apps/delete"] {
        let name = format!("watcher-{}", cut.len());
        let tok = create_app(&s, json!({"name": name}));
        let since = s.seq();
        let owner = s
            .sse(&format!("since={since}"), Some(&s.token), &[])
            .unwrap();
        let app = s.sse(&format!("since={since}"), Some(&tok), &[]).unwrap();
        let w1 = write();
        assert_eq!(app.take(1)[0].seq(), w1);
        assert_eq!(owner.take(1)[0].seq(), w1);
        s.ok_route(cut, json!({"name": name}));
        let w2 = write();
        assert_eq!(owner.take(1)[0].seq(), w2, "the owner's stream goes on");
        let got = app.until_end(Duration::from_secs(5));
        assert!(
            got.is_empty(),
            "{cut}: the cut token still received {got:?}"
        );
    }

    // A new app of the same name gets a new token; the old ones stay dead, across a restart too.
    let t3 = create_app(&s, json!({"name": "courier"}));
    assert!(works(&t3));
    assert!(!works(&t1) && !works(&t2));
    let s = s.restart();
    for (t, alive) in [(&t1, false), (&t2, false), (&t3, true)] {
        let (st, _) = s.call_as(Some(t), "list_tables", &json!({}), &[]);
        assert_eq!(st == 200, alive, "after restart");
    }
}

#[test]
fn tokens_are_never_stored_in_clear_nor_mcp_token_returned() {
    use std::os::unix::fs::PermissionsExt;
    let s = Server::start();
    let created = s.ok_route(
        "apps/create",
        json!({"name": "remote", "mcp_url": "https://example.test/mcp", "mcp_token": "mcp-token-s3cr3t"}),
    );
    let t1 = created["token"].as_str().unwrap().to_string();
    let t2 = s.ok_route("apps/rotate-token", json!({"name": "remote"}))["token"]
        .as_str()
        .unwrap()
        .to_string();
    let t3 = create_app(&s, json!({"name": "other"}));

    let path = s.dir.join(".datanotes/apps.json");
    let text = std::fs::read_to_string(&path).unwrap();
    for t in [&t1, &t2, &t3] {
        assert!(
            !text.contains(t.as_str()),
            "apps.json holds a token in clear"
        );
        assert!(
            !text.contains(&t[7..]),
            "apps.json holds a token's secret part"
        );
    }
    let sha = |t: &str| hex::encode(Sha256::digest(t.as_bytes()));
    assert!(
        text.contains(&sha(&t2)) && text.contains(&sha(&t3)),
        "{text}"
    );
    assert!(
        !text.contains(&sha(&t1)),
        "the rotated token's hash is gone"
    );
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "apps.json mode {mode:o}");

    // No file of the engine holds an app token (journal, index, registries), after some use.
    s.call_as(Some(&t2), "list_tables", &json!({}), &[]);
    let (st, _) = s.call_as(Some(&t2), "tool-calls/record", &tool_call(1), &[]);
    assert_eq!(st, 200);
    for e in std::fs::read_dir(s.dir.join(".datanotes"))
        .unwrap()
        .flatten()
    {
        let bytes = std::fs::read(e.path()).unwrap_or_default();
        let hay = String::from_utf8_lossy(&bytes);
        for t in [&t1, &t2, &t3] {
            assert!(
                !hay.contains(t.as_str()),
                "{} holds an app token",
                e.path().display()
            );
        }
    }

    // mcp_token is never answered: create, list, get, update.
    let answers = [
        created.clone(),
        s.ok_route("apps", json!({})),
        app_entry(&s, "remote"),
        s.ok_route("apps/update", json!({"name": "remote", "description": "d"})),
        s.call_as(Some(&t2), "apps/get", &json!({"name": "remote"}), &[])
            .1,
    ];
    for a in &answers {
        let txt = a.to_string();
        assert!(!txt.contains("mcp-token-s3cr3t"), "{txt}");
        assert!(!txt.contains("\"mcp_token\""), "{txt}");
        assert!(!txt.contains("token_sha256"), "{txt}");
    }
    assert_eq!(created["app"]["hasMcpToken"], true);
    assert_eq!(app_entry(&s, "remote")["hasMcpToken"], true);
    assert_eq!(app_entry(&s, "other")["hasMcpToken"], false);
    // The app list holds no token of any kind.
    let list = s.ok_route("apps", json!({})).to_string();
    assert!(!list.contains("dn_app_"), "{list}");
}

#[test]
fn invalid_apps_are_refused_and_nothing_is_written() {
    let s = Server::start();
    let dup_token = create_app(&s, json!({"name": "dup", "write": ["a.b.c"]}));
    let apps_json = || std::fs::read(s.dir.join(".datanotes/apps.json")).unwrap();
    let long = "a".repeat(65);
    let cases: Vec<(Value, u16, &str, &str, &str)> = vec![
        // (body, status, code, column, rule)
        (
            json!({"name": "Bad"}),
            400,
            "invalid_argument",
            "name",
            "pattern",
        ),
        (
            json!({"name": "1abc"}),
            400,
            "invalid_argument",
            "name",
            "pattern",
        ),
        (
            json!({"name": ""}),
            400,
            "invalid_argument",
            "name",
            "pattern",
        ),
        (
            json!({"name": "a b"}),
            400,
            "invalid_argument",
            "name",
            "pattern",
        ),
        (
            json!({"name": "a.b"}),
            400,
            "invalid_argument",
            "name",
            "pattern",
        ),
        (
            json!({"name": "../x"}),
            400,
            "invalid_argument",
            "name",
            "pattern",
        ),
        (
            json!({"name": long}),
            400,
            "invalid_argument",
            "name",
            "pattern",
        ),
        (json!({}), 400, "invalid_argument", "name", "required"),
        (
            json!({"name": "w", "write": ["a.*.c"]}),
            400,
            "invalid_argument",
            "write",
            "pattern",
        ),
        (
            json!({"name": "w", "write": ["A.b.c"]}),
            400,
            "invalid_argument",
            "write",
            "pattern",
        ),
        (
            json!({"name": "w", "write": ["a"]}),
            400,
            "invalid_argument",
            "write",
            "pattern",
        ),
        (
            json!({"name": "w", "write": ["a.b.c.d"]}),
            400,
            "invalid_argument",
            "write",
            "pattern",
        ),
        (
            json!({"name": "w", "write": [""]}),
            400,
            "invalid_argument",
            "write",
            "pattern",
        ),
        (
            json!({"name": "w", "write": ["*.*"]}),
            400,
            "invalid_argument",
            "write",
            "pattern",
        ),
        (
            json!({"name": "w", "write": ["a.b.c", "a b.c.d"]}),
            400,
            "invalid_argument",
            "write",
            "pattern",
        ),
        (
            json!({"name": "u", "mcp_url": "ftp://example.test/mcp"}),
            400,
            "invalid_argument",
            "mcp_url",
            "url",
        ),
        (
            json!({"name": "u", "mcp_url": "http://"}),
            400,
            "invalid_argument",
            "mcp_url",
            "url",
        ),
        (
            json!({"name": "u", "mcp_url": "not a url"}),
            400,
            "invalid_argument",
            "mcp_url",
            "url",
        ),
        (
            json!({"name": "u", "mcp_url": "http://a b/mcp"}),
            400,
            "invalid_argument",
            "mcp_url",
            "url",
        ),
        (
            json!({"name": "u", "mcp_url": "https://?x=1"}),
            400,
            "invalid_argument",
            "mcp_url",
            "url",
        ),
        (json!({"name": "dup"}), 409, "conflict", "name", "unique"),
    ];
    for (body, status, code, column, rule) in &cases {
        let before = apps_json();
        let seq = s.seq();
        let (st, v) = s.call_as(Some(&s.token), "apps/create", body, &[]);
        assert_eq!(st, *status, "{body}: {v}");
        let e = assert_error_shape(&v, code);
        assert_eq!(e["column"], *column, "{body}: {v}");
        assert_eq!(e["rule"], *rule, "{body}: {v}");
        assert_eq!(apps_json(), before, "{body} wrote the registry");
        assert_eq!(s.seq(), seq);
    }
    // Malformed calls: unknown field, wrong type, not an object.
    for body in [
        json!({"name": "x", "admin": true}),
        json!({"name": "x", "ddl": "yes"}),
        json!({"name": "x", "write": "*"}),
        json!({"name": 7}),
    ] {
        let before = apps_json();
        let (st, v) = s.call_as(Some(&s.token), "apps/create", &body, &[]);
        assert_eq!(st, 400, "{body}: {v}");
        assert_error_shape(&v, "invalid_argument");
        assert_eq!(apps_json(), before, "{body}");
    }
    let (st, v) = s.post_raw(
        "/datanotes/apps/create/",
        Some(&s.token),
        &[],
        b"[1, 2]".to_vec(),
    );
    assert_eq!(st, 400, "{v}");
    // The refused duplicate did not replace the first app's token.
    let (st, _) = s.call_as(Some(&dup_token), "list_tables", &json!({}), &[]);
    assert_eq!(st, 200);
    let list = s.ok_route("apps", json!({}));
    assert_eq!(list["apps"].as_array().unwrap().len(), 1, "{list}");
    assert_eq!(list["apps"][0]["write"], json!(["a.b.c"]));

    // Updates are validated the same way, by the owner and by the app itself.
    for (token, body, column) in [
        (
            &s.token,
            json!({"name": "dup", "write": ["a.*.c"]}),
            "write",
        ),
        (
            &s.token,
            json!({"name": "dup", "mcp_url": "mailto:x@y"}),
            "mcp_url",
        ),
        (
            &dup_token,
            json!({"name": "dup", "mcp_url": "file:///etc/passwd"}),
            "mcp_url",
        ),
    ] {
        let before = apps_json();
        let (st, v) = s.call_as(Some(token), "apps/update", &body, &[]);
        assert_eq!(st, 400, "{body}: {v}");
        assert_eq!(assert_error_shape(&v, "invalid_argument")["column"], column);
        assert_eq!(apps_json(), before, "{body}");
    }
    // Missing name on a route that needs it.
    let (st, v) = s.call_as(Some(&s.token), "apps/get", &json!({}), &[]);
    assert_eq!(st, 400, "{v}");
    assert_eq!(assert_error_shape(&v, "invalid_argument")["column"], "name");
}

// ---- actor attribution ----

#[test]
fn an_apps_writes_are_attributed_to_it_and_its_actor() {
    let s = Server::start();
    s.ok("create_table", table_def(T));
    let tok = create_app(&s, json!({"name": "scribe", "write": ["alpha.*"]}));
    let start = s.seq();
    let (st, v) = s.call_as(
        Some(&tok),
        "insert_row",
        &json!({"table": T, "id": "n1", "values": {"title": "one"}}),
        &[
            ("X-Datanotes-Actor", "claude-code / opus"),
            ("X-Datanotes-Session", "sess-1"),
        ],
    );
    assert_eq!(st, 200, "{v}");
    let seq = v["seq"].as_i64().unwrap();
    let want = json!({"harness": "claude-code", "model": "opus", "app": "scribe", "session": "sess-1",
                      "token": "app:scribe", "label": "claude-code / opus via scribe"});

    let m = &s.ok("list_migrations", json!({"limit": 1}))["migrations"][0];
    assert_eq!(m["seq"], seq);
    assert_eq!(m["op"], "insert");
    assert_eq!(m["actor"], want, "{m}");
    for filter in [
        json!({"app": "scribe"}),
        json!({"actor": "claude-code / opus via scribe"}),
        json!({"actor": "opus"}),
        json!({"session": "sess-1"}),
    ] {
        let ms = s.ok("list_migrations", filter.clone())["migrations"].clone();
        let seqs: Vec<i64> = ms
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["seq"].as_i64().unwrap())
            .collect();
        assert_eq!(seqs, vec![seq], "{filter}");
    }

    let page = s.ok_route("changes", json!({"since": start}));
    assert_eq!(page["changes"].as_array().unwrap().len(), 1, "{page}");
    assert_eq!(page["changes"][0]["seq"], seq);
    assert_eq!(page["changes"][0]["actor"], want);
    let stream = s.sse(&format!("since={start}"), Some(&tok), &[]).unwrap();
    let ev = stream.take(1);
    assert_eq!(ev[0].seq(), seq);
    assert_eq!(ev[0].json()["actor"], want);

    // Without a model, without a header at all, and the owner.
    let write = |token: &str, id: &str, headers: &[(&str, &str)]| {
        let (st, v) = s.call_as(
            Some(token),
            "insert_row",
            &json!({"table": T, "id": id, "values": {"title": id}}),
            headers,
        );
        assert_eq!(st, 200, "{v}");
        let seq = v["seq"].as_i64().unwrap();
        let page = s.ok_route("changes", json!({"since": seq - 1, "limit": 1}));
        assert_eq!(page["changes"][0]["seq"], seq);
        page["changes"][0]["actor"].clone()
    };
    assert_eq!(
        write(&tok, "n2", &[("X-Datanotes-Actor", "cursor")]),
        json!({"harness": "cursor", "app": "scribe", "token": "app:scribe", "label": "cursor via scribe"})
    );
    assert_eq!(
        write(&tok, "n3", &[]),
        json!({"app": "scribe", "token": "app:scribe", "label": "scribe"})
    );
    // Half a header: the missing part is absent, never an empty string.
    assert_eq!(
        write(&tok, "n5", &[("X-Datanotes-Actor", "cursor /")]),
        json!({"harness": "cursor", "app": "scribe", "token": "app:scribe", "label": "cursor via scribe"})
    );
    assert_eq!(
        write(&tok, "n6", &[("X-Datanotes-Actor", "/ opus")]),
        json!({"model": "opus", "app": "scribe", "token": "app:scribe", "label": "opus via scribe"})
    );
    let owner_token = s.token.clone();
    assert_eq!(
        write(
            &owner_token,
            "n4",
            &[("X-Datanotes-Actor", "claude-code / opus")]
        ),
        json!({"harness": "claude-code", "model": "opus", "token": "owner", "label": "claude-code / opus"})
    );
    // The app's tool-call events carry it as well.
    let (st, _) = s.call_as(
        Some(&tok),
        "tool-calls/record",
        &tool_call(1),
        &[("X-Datanotes-Actor", "claude-code / opus")],
    );
    assert_eq!(st, 200);
    let page = s.ok_route(
        "changes",
        json!({"since": s.seq() - 1, "ops": ["tool_call"]}),
    );
    let mut want_tc = want.clone();
    want_tc.as_object_mut().unwrap().remove("session");
    assert_eq!(page["changes"][0]["actor"], want_tc, "{page}");
}
