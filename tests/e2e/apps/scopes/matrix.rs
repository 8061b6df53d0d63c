//! The permission matrix: every operation and route against apps of every kind of rights.

use super::*;

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
