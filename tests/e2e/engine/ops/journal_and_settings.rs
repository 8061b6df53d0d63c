//! The journal (`list_migrations`) and the engine's settings.

use super::*;

#[test]
fn list_migrations_filters_and_order() {
    let s = Server::start();
    create_tasks(&s);
    let as_ = |actor: &str, session: &str, op: &str, args: Value| {
        let (st, v) = s.call_with(
            op,
            &[
                ("X-Datanotes-Actor", actor),
                ("X-Datanotes-Session", session),
            ],
            args,
        );
        assert_eq!(st, 200, "{v}");
        v["seq"].as_i64().unwrap()
    };
    let a1 = as_(
        "claude-code / opus",
        "s1",
        "insert_row",
        json!({"table": TASKS, "id": "x", "values": {"title": "x"}}),
    );
    let b1 = as_(
        "codex / gpt",
        "s2",
        "insert_row",
        json!({"table": TASKS, "id": "y", "values": {"title": "y"}}),
    );
    let a2 = as_(
        "claude-code / opus",
        "s1",
        "update_row",
        json!({"table": TASKS, "id": "x", "values": {"estimate": 1}}),
    );
    let p1 = as_(
        "codex / gpt",
        "s2",
        "insert_row",
        json!({"table": PEOPLE, "id": "grace", "values": {"name": "Grace"}}),
    );

    let all = s.migrations(json!({}));
    let seqs: Vec<i64> = all.iter().map(|m| m["seq"].as_i64().unwrap()).collect();
    assert!(
        seqs.windows(2).all(|w| w[0] > w[1]),
        "newest first: {seqs:?}"
    );
    assert_eq!(seqs[0], p1);
    assert_eq!(seqs.len() as i64, s.seq(), "every write is listed");

    let seqs_of = |f: Value| -> Vec<i64> {
        s.migrations(f)
            .iter()
            .map(|m| m["seq"].as_i64().unwrap())
            .collect()
    };
    // create_tasks journals: create people (1), create tasks (2), insert ada (3), alan (4).
    assert_eq!(seqs_of(json!({"table": TASKS, "before": a1 + 1})), [a1, 2]);
    assert_eq!(seqs_of(json!({"actor": "claude-code"})), [a2, a1]);
    assert_eq!(seqs_of(json!({"actor": "gpt"})), [p1, b1]);
    assert_eq!(
        seqs_of(json!({"actor": "codex / gpt"})),
        [p1, b1],
        "the label matches too"
    );
    assert_eq!(seqs_of(json!({"session": "s2"})), [p1, b1]);
    assert_eq!(seqs_of(json!({"table": PEOPLE, "actor": "codex"})), [p1]);
    assert_eq!(seqs_of(json!({"before": a2})), {
        let mut v: Vec<i64> = (1..a2).collect();
        v.reverse();
        v
    });
    assert_eq!(seqs_of(json!({"limit": 2})), [p1, a2]);
    assert_eq!(seqs_of(json!({"actor": "claude-code", "limit": 1})), [a2]);
    assert_eq!(
        seqs_of(json!({"app": "some-app"})),
        Vec::<i64>::new(),
        "the owner is no app"
    );
    assert_eq!(
        seqs_of(json!({"table": "no.such.table"})),
        Vec::<i64>::new()
    );
    let t = seqs_of(json!({"table": TASKS}));
    assert_eq!(&t[..3], [a2, b1, a1]);
    assert!(
        s.migrations(json!({"table": TASKS}))
            .iter()
            .all(|m| m["table"] == TASKS)
    );
}

#[test]
fn engine_settings_are_read_changed_checked_and_kept() {
    let s = Server::start();
    create_tasks(&s);
    let got = s.ok("get_engine_settings", json!({}))["settings"].clone();
    assert_eq!(
        got,
        json!({"default_limit": 100, "max_limit": 10000, "max_body_bytes": 1048576, "watch_files": true, "semantic_model": "", "trusted_keys": [], "require_signature": false})
    );
    for i in 0..5 {
        s.ok(
            "insert_row",
            json!({"table": TASKS, "values": {"title": format!("t{i}")}}),
        );
    }
    let r = s.ok(
        "set_engine_settings",
        json!({"settings": {"default_limit": 2, "max_limit": 3}}),
    );
    assert_eq!(r["settings"]["default_limit"], 2);
    assert_eq!(r["seq"].as_i64().unwrap(), s.seq());
    let v = s.ok("select_rows", json!({"table": TASKS}));
    assert_eq!(
        v["rows"].as_array().unwrap().len(),
        2,
        "default_limit applies"
    );
    assert_eq!(v["total"], 5);
    s.refused("select_rows", json!({"table": TASKS, "limit": 4}), 400);
    let m = &s.migrations(json!({"limit": 1}))[0];
    assert_eq!(m["op"], "settings");
    assert_eq!(m["before"]["default_limit"], 100);
    assert_eq!(m["after"]["default_limit"], 2);

    for (bad, col) in [
        (json!({"nope": 1}), "nope"),
        (json!({"default_limit": 0}), "default_limit"),
        (json!({"default_limit": 4}), "default_limit"),
        (json!({"max_body_bytes": -1}), "max_body_bytes"),
    ] {
        let e = s.refused("set_engine_settings", json!({"settings": bad}), 400);
        assert_eq!(e["column"], col, "{e}");
    }
    s.refused(
        "set_engine_settings",
        json!({"settings": {"watch_files": "yes"}}),
        400,
    );

    // A small body limit is enforced on rows.
    s.ok(
        "set_engine_settings",
        json!({"settings": {"max_body_bytes": 10}}),
    );
    s.refused_unchanged(
        "insert_row",
        json!({"table": TASKS, "values": {"title": "long"}, "body": "12345678901"}),
        422,
        Some("body"),
        "max",
    );
    s.ok(
        "insert_row",
        json!({"table": TASKS, "values": {"title": "short"}, "body": "1234567890"}),
    );

    // Settings survive a restart.
    let s = s.restart();
    let got = s.ok("get_engine_settings", json!({}))["settings"].clone();
    assert_eq!(
        got,
        json!({"default_limit": 2, "max_limit": 3, "max_body_bytes": 10, "watch_files": true, "semantic_model": "", "trusted_keys": [], "require_signature": false})
    );
    // And undo of the last settings change brings the previous ones back.
    let last_settings = s
        .migrations(json!({}))
        .into_iter()
        .find(|m| m["op"] == "settings")
        .unwrap();
    assert_eq!(last_settings["after"]["max_body_bytes"], 10);
    s.ok("undo_migration", json!({"seq": last_settings["seq"]}));
    assert_eq!(
        s.ok("get_engine_settings", json!({}))["settings"],
        json!({"default_limit": 2, "max_limit": 3, "max_body_bytes": 1048576, "watch_files": true, "semantic_model": "", "trusted_keys": [], "require_signature": false})
    );
}
