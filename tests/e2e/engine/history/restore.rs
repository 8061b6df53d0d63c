//! `restore`: a row, or a whole table, back to a point in time.

use super::*;

#[test]
fn restore_a_row_to_a_point_in_time() {
    let s = Server::start();
    create_tasks(&s);
    let before_insert = s.seq();
    let i = s.ok(
        "insert_row",
        json!({"table": TASKS, "id": "a", "values": {"title": "A", "estimate": 1}, "body": "v1"}),
    );
    let f1 = std::fs::read(s.row_path(TASKS, "a")).unwrap();
    let u = s.ok(
        "update_row",
        json!({"table": TASKS, "id": "a", "values": {"estimate": 2, "tags": ["t"]}, "body": "v2"}),
    );
    let f2 = std::fs::read(s.row_path(TASKS, "a")).unwrap();
    s.ok(
        "update_row",
        json!({"table": TASKS, "id": "a", "values": {"estimate": 3, "tags": null}}),
    );

    let r = w(
        &s,
        "restore",
        json!({"table": TASKS, "id": "a", "seq": seq_of(&i)}),
    );
    assert_eq!(r["restored"], json!(["a"]));
    assert_eq!(std::fs::read(s.row_path(TASKS, "a")).unwrap(), f1);
    let row = s.ok("get_row", json!({"table": TASKS, "id": "a"}));
    assert_eq!(row["values"]["estimate"], 1);
    assert_eq!(row["body"], "v1");
    assert_eq!(row["version"], 4);
    let m = migration(&s, seq_of(&r));
    assert_eq!(m["op"], "restore");
    assert_eq!(m["before"]["values"]["estimate"], 3);
    assert_eq!(m["after"]["values"]["estimate"], 1);
    assert_eq!(m["actor"]["model"], "opus-4");

    s.ok(
        "restore",
        json!({"table": TASKS, "id": "a", "seq": seq_of(&u)}),
    );
    assert_eq!(std::fs::read(s.row_path(TASKS, "a")).unwrap(), f2);
    // Already in that state: nothing to do, nothing journaled.
    let seq = s.seq();
    let r = s.ok(
        "restore",
        json!({"table": TASKS, "id": "a", "seq": seq_of(&u)}),
    );
    assert_eq!(r["restored"], json!([]));
    assert_eq!(s.seq(), seq);
    // Before it existed: it goes. After its delete, back to when it existed: it comes back.
    s.ok(
        "restore",
        json!({"table": TASKS, "id": "a", "seq": before_insert}),
    );
    assert!(!s.has_row(TASKS, "a"));
    s.ok(
        "restore",
        json!({"table": TASKS, "id": "a", "seq": seq_of(&i)}),
    );
    assert_eq!(std::fs::read(s.row_path(TASKS, "a")).unwrap(), f1);
    // A seq in the future is refused.
    let e = s.refused_nochange(
        "restore",
        json!({"table": TASKS, "id": "a", "seq": s.seq() + 1}),
        400,
    );
    assert_eq!(e["rule"], "seq");
}

#[test]
fn restore_a_whole_table_to_a_point_in_time() {
    let s = Server::start();
    create_tasks(&s);
    s.ok(
        "insert_row",
        json!({"table": TASKS, "id": "a", "values": {"title": "A"}}),
    );
    s.ok(
        "insert_row",
        json!({"table": TASKS, "id": "b", "values": {"title": "B", "owner": "ada"}, "body": "bb"}),
    );
    s.ok(
        "insert_row",
        json!({"table": TASKS, "id": "keep", "values": {"title": "K"}}),
    );
    let point = s.seq();
    let files = table_files(&s, TASKS);
    s.ok(
        "update_row",
        json!({"table": TASKS, "id": "a", "values": {"title": "A2", "estimate": 5}}),
    );
    s.ok("delete_row", json!({"table": TASKS, "id": "b"}));
    s.ok(
        "insert_row",
        json!({"table": TASKS, "id": "c", "values": {"title": "C"}}),
    );
    s.ok(
        "insert_row",
        json!({"table": PEOPLE, "id": "grace", "values": {"name": "Grace"}}),
    );

    let r = s.ok("restore", json!({"table": TASKS, "seq": point}));
    let mut restored: Vec<String> = serde_json::from_value(r["restored"].clone()).unwrap();
    restored.sort();
    assert_eq!(restored, ["a", "b", "c"]);
    assert_eq!(
        table_files(&s, TASKS),
        files,
        "the table's files are as they were"
    );
    assert_eq!(s.ids(json!({"table": TASKS})), ["a", "b", "keep"]);
    assert_eq!(
        s.ok("get_row", json!({"table": TASKS, "id": "b"}))["body"],
        "bb"
    );
    // Other tables are untouched.
    assert!(s.has_row(PEOPLE, "grace"));
    // Each restored row is journaled.
    let ms = s.migrations(json!({"limit": 3}));
    assert!(
        ms.iter()
            .all(|m| m["op"] == "restore" && m["table"] == TASKS),
        "{ms:?}"
    );
}
