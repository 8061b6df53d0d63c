//! `undo_migration`: row writes, dropped and altered tables and created ones undone, and undo
//! refused when the row changed since.

use super::*;

#[test]
fn undo_row_writes() {
    let s = Server::start();
    create_tasks(&s);
    // Undo an insert: the row and its file go.
    let i = w(
        &s,
        "insert_row",
        json!({"table": TASKS, "id": "a", "values": {"title": "A"}}),
    );
    let r = w(&s, "undo_migration", json!({"seq": seq_of(&i)}));
    assert_eq!(r["undone"], seq_of(&i));
    assert_eq!(r["row"], Value::Null);
    assert!(seq_of(&r) > seq_of(&i));
    assert!(!s.has_row(TASKS, "a"));
    assert!(!s.row_path(TASKS, "a").exists());
    let m = migration(&s, seq_of(&r));
    assert_eq!(m["op"], "undo");
    assert_eq!(m["row"], "a");
    assert_eq!(m["after"], Value::Null);
    assert_eq!(m["before"]["values"]["title"], "A");
    assert_eq!(m["actor"]["harness"], "claude-code");

    // Undo an update: values and body come back, the file byte for byte.
    s.ok("insert_row", json!({"table": TASKS, "id": "b", "values": {"title": "B", "tags": ["x"], "estimate": 3}, "body": "one\n"}));
    let orig = std::fs::read(s.row_path(TASKS, "b")).unwrap();
    let u = s.ok("update_row", json!({"table": TASKS, "id": "b", "values": {"tags": null, "estimate": 4}, "body": "two\n"}));
    assert_ne!(std::fs::read(s.row_path(TASKS, "b")).unwrap(), orig);
    let r = s.ok("undo_migration", json!({"seq": seq_of(&u)}));
    assert_eq!(
        r["row"]["values"],
        json!({"title": "B", "status": "todo", "estimate": 3, "tags": ["x"]})
    );
    let row = s.ok("get_row", json!({"table": TASKS, "id": "b"}));
    assert_eq!(
        row["values"],
        json!({"title": "B", "status": "todo", "estimate": 3, "tags": ["x"]})
    );
    assert_eq!(row["body"], "one\n");
    assert_eq!(row["version"], 3, "an undo is a new version");
    assert_eq!(std::fs::read(s.row_path(TASKS, "b")).unwrap(), orig);

    // Undo a delete: the row comes back.
    let d = s.ok("delete_row", json!({"table": TASKS, "id": "b"}));
    assert!(!s.row_path(TASKS, "b").exists());
    s.ok("undo_migration", json!({"seq": seq_of(&d)}));
    let row = s.ok("get_row", json!({"table": TASKS, "id": "b"}));
    assert_eq!(row["body"], "one\n");
    assert_eq!(row["values"]["tags"], json!(["x"]));
    assert_eq!(std::fs::read(s.row_path(TASKS, "b")).unwrap(), orig);

    // Undo an undo: the delete again.
    let last = s.migrations(json!({"limit": 1}))[0]["seq"]
        .as_i64()
        .unwrap();
    s.ok("undo_migration", json!({"seq": last}));
    assert!(!s.has_row(TASKS, "b"));
}

#[test]
fn undo_is_refused_when_the_row_changed_since() {
    let s = Server::start();
    create_tasks(&s);
    let i = s.ok(
        "insert_row",
        json!({"table": TASKS, "id": "a", "values": {"title": "A"}}),
    );
    let u1 = s.ok(
        "update_row",
        json!({"table": TASKS, "id": "a", "values": {"estimate": 1}}),
    );
    s.ok(
        "update_row",
        json!({"table": TASKS, "id": "a", "values": {"estimate": 2}}),
    );
    for seq in [seq_of(&i), seq_of(&u1)] {
        let e = s.refused_unchanged("undo_migration", json!({"seq": seq}), 409, None, "undo");
        assert_eq!(e["code"], "conflict");
        assert!(
            e["message"]
                .as_str()
                .unwrap()
                .contains("row a changed since"),
            "{e}"
        );
    }
    // Deleted since: the insert cannot be undone either; a re-inserted row blocks undoing the delete.
    let d = s.ok("delete_row", json!({"table": TASKS, "id": "a"}));
    s.refused_unchanged(
        "undo_migration",
        json!({"seq": seq_of(&u1)}),
        409,
        None,
        "undo",
    );
    s.ok(
        "insert_row",
        json!({"table": TASKS, "id": "a", "values": {"title": "new A"}}),
    );
    s.refused_unchanged(
        "undo_migration",
        json!({"seq": seq_of(&d)}),
        409,
        None,
        "undo",
    );
    // Unknown seqs.
    let e = s.refused_nochange("undo_migration", json!({"seq": 9999}), 404);
    assert_eq!(e["code"], "not_found");
    s.refused_nochange("undo_migration", json!({"seq": 0}), 404);
    s.refused_nochange("undo_migration", json!({"seq": -5}), 404);
}

#[test]
fn undo_drop_table_brings_the_rows_back() {
    let s = Server::start();
    create_tasks(&s);
    s.ok("insert_row", json!({"table": TASKS, "id": "a", "values": {"title": "A", "owner": "ada", "at": "2026-01-01T10:00:00.500Z"}, "body": "aa"}));
    s.ok(
        "insert_row",
        json!({"table": TASKS, "id": "b", "values": {"title": "B", "tags": ["x", "y"]}}),
    );
    s.ok(
        "update_row",
        json!({"table": TASKS, "id": "b", "values": {"estimate": 9}}),
    );
    let files = table_files(&s, TASKS);
    let rows = s.ok("select_rows", json!({"table": TASKS, "columns": ["title", "owner", "at", "tags", "estimate", "status", "body"]}));
    let x = s.ok("drop_table", json!({"table": TASKS}));
    assert!(table_files(&s, TASKS).is_empty());
    let r = s.ok("undo_migration", json!({"seq": seq_of(&x)}));
    assert_eq!(r["undone"], seq_of(&x));
    assert_eq!(
        table_files(&s, TASKS),
        files,
        "definition and rows, byte for byte"
    );
    let back = s.ok("select_rows", json!({"table": TASKS, "columns": ["title", "owner", "at", "tags", "estimate", "status", "body"]}));
    assert_eq!(back["total"], 2);
    for (a, b) in rows["rows"]
        .as_array()
        .unwrap()
        .iter()
        .zip(back["rows"].as_array().unwrap())
    {
        assert_eq!(a["values"], b["values"]);
        assert_eq!(a["body"], b["body"]);
        assert!(
            b["version"].as_i64() > a["version"].as_i64(),
            "versions go on: {a} {b}"
        );
    }
    assert_eq!(
        s.ok("search_notes", json!({"query": "aa"}))["hits"][0]["id"],
        "a"
    );
    // Once it exists again, the drop cannot be undone twice.
    s.refused_unchanged(
        "undo_migration",
        json!({"seq": seq_of(&x)}),
        409,
        None,
        "undo",
    );
}

#[test]
fn undo_alter_table_brings_dropped_values_back() {
    let s = Server::start();
    create_tasks(&s);
    s.ok("insert_row", json!({"table": TASKS, "id": "a", "values": {"title": "A", "estimate": 3, "tags": ["x"]}, "body": "a"}));
    s.ok(
        "insert_row",
        json!({"table": TASKS, "id": "b", "values": {"title": "B"}}),
    );
    let files = table_files(&s, TASKS);
    let def = s.ok("describe_table", json!({"table": TASKS}))["columns"].clone();

    // Drop columns.
    let a = s.ok(
        "alter_table",
        json!({"table": TASKS, "drop": ["estimate", "tags"]}),
    );
    let m = migration(&s, seq_of(&a));
    assert_eq!(
        (m["op"].as_str(), m["row"].as_str()),
        (Some("alter_table"), None),
        "{m}"
    );
    assert!(
        s.ok("get_row", json!({"table": TASKS, "id": "a"}))["values"]
            .get("estimate")
            .is_none()
    );
    s.ok("undo_migration", json!({"seq": seq_of(&a)}));
    let row = s.ok("get_row", json!({"table": TASKS, "id": "a"}));
    assert_eq!(row["values"]["estimate"], 3);
    assert_eq!(row["values"]["tags"], json!(["x"]));
    assert_eq!(
        s.ok("describe_table", json!({"table": TASKS}))["columns"],
        def
    );
    assert_eq!(table_files(&s, TASKS), files, "files byte for byte");
    assert_eq!(
        ids_where_eq(&s, "estimate", 3),
        ["a"],
        "the index knows the values again"
    );

    // Rename.
    let a = s.ok(
        "alter_table",
        json!({"table": TASKS, "rename": {"title": "name"}}),
    );
    s.ok("undo_migration", json!({"seq": seq_of(&a)}));
    assert_eq!(
        s.ok("get_row", json!({"table": TASKS, "id": "b"}))["values"]["title"],
        "B"
    );
    assert_eq!(table_files(&s, TASKS), files);

    // Add with a default.
    let a = s.ok(
        "alter_table",
        json!({"table": TASKS, "add": {"prio": {"type": "integer", "default": 1}}}),
    );
    assert_eq!(
        s.ok("get_row", json!({"table": TASKS, "id": "b"}))["values"]["prio"],
        1
    );
    s.ok("undo_migration", json!({"seq": seq_of(&a)}));
    assert!(
        s.ok("get_row", json!({"table": TASKS, "id": "b"}))["values"]
            .get("prio")
            .is_none()
    );
    assert_eq!(table_files(&s, TASKS), files);

    // Change a constraint, then alter again: the first alteration can no longer be undone.
    let a1 = s.ok(
        "alter_table",
        json!({"table": TASKS, "change": {"estimate": {"type": "integer", "max": 5}}}),
    );
    s.ok(
        "alter_table",
        json!({"table": TASKS, "description": "later"}),
    );
    s.refused_unchanged(
        "undo_migration",
        json!({"seq": seq_of(&a1)}),
        409,
        None,
        "undo",
    );
}

fn ids_where_eq(s: &Server, col: &str, v: i64) -> Vec<String> {
    s.ids(json!({"table": TASKS, "where": [{"column": col, "op": "=", "value": v}]}))
}

#[test]
fn undo_create_table_only_when_empty() {
    let s = Server::start();
    let c = s.ok(
        "create_table",
        json!({"table": "a.b.c", "columns": {"x": {"type": "text"}}}),
    );
    let i = s.ok(
        "insert_row",
        json!({"table": "a.b.c", "id": "r", "values": {"x": "1"}}),
    );
    let e = s.refused_unchanged(
        "undo_migration",
        json!({"seq": seq_of(&c)}),
        409,
        None,
        "undo",
    );
    assert!(e["message"].as_str().unwrap().contains("rows"), "{e}");
    s.ok("undo_migration", json!({"seq": seq_of(&i)}));
    let r = s.ok("undo_migration", json!({"seq": seq_of(&c)}));
    assert_eq!(r["undone"], seq_of(&c));
    assert!(!s.dir.join("a").exists());
    assert_eq!(s.ok("list_tables", json!({}))["tables"], json!([]));
    let m = migration(&s, seq_of(&r));
    assert_eq!(
        (m["op"].as_str(), m["table"].as_str()),
        (Some("undo"), Some("a.b.c"))
    );
    // The name is free again.
    s.ok(
        "create_table",
        json!({"table": "a.b.c", "columns": {"y": {"type": "integer"}}}),
    );
}
