//! The journal, undo, restore and vacuum: every write is recorded with its actor and can be
//! taken back.

use crate::kit::*;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::PathBuf;

const ACTOR: (&str, &str) = ("X-Datanotes-Actor", "claude-code / opus-4");

fn w(s: &Server, op: &str, args: Value) -> Value {
    let (st, v) = s.call_with(op, &[ACTOR], args.clone());
    assert_eq!(st, 200, "{op} {args}: {v}");
    v
}

fn seq_of(v: &Value) -> i64 {
    v["seq"].as_i64().unwrap_or_else(|| panic!("no seq in {v}"))
}

/// The files of one table folder.
fn table_files(s: &Server, table: &str) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut d = s.dir.clone();
    for p in table.split('.') {
        d.push(p);
    }
    if d.exists() {
        snapshot(&d)
    } else {
        BTreeMap::new()
    }
}

fn migration(s: &Server, seq: i64) -> Value {
    let m = s.migrations(json!({"before": seq + 1, "limit": 1}));
    assert_eq!(m[0]["seq"], seq, "{m:?}");
    m[0].clone()
}

#[test]
fn every_write_is_journaled_with_its_actor() {
    let s = Server::start();
    create_tasks(&s);
    let c = w(
        &s,
        "create_table",
        json!({"table": "a.b.c", "columns": {"n": {"type": "integer"}}}),
    );
    let i = w(
        &s,
        "insert_row",
        json!({"table": TASKS, "id": "t", "values": {"title": "T", "estimate": 1}, "body": "b"}),
    );
    let u = w(
        &s,
        "update_row",
        json!({"table": TASKS, "id": "t", "values": {"estimate": 2}}),
    );
    let d = w(&s, "delete_row", json!({"table": TASKS, "id": "t"}));
    let a = w(
        &s,
        "alter_table",
        json!({"table": "a.b.c", "add": {"m": {"type": "text"}}}),
    );
    let x = w(&s, "drop_table", json!({"table": "a.b.c"}));
    let seqs = [c, i.clone(), u.clone(), d.clone(), a, x].map(|v| seq_of(&v));
    assert!(seqs.windows(2).all(|p| p[0] < p[1]), "{seqs:?}");
    assert_eq!(seqs[0], 5, "create_tasks wrote four migrations first");

    let all = s.migrations(json!({}));
    assert_eq!(all.len(), 10);
    let listed: Vec<i64> = all.iter().map(|m| m["seq"].as_i64().unwrap()).collect();
    assert_eq!(
        listed,
        (1..=10).rev().collect::<Vec<_>>(),
        "no gaps, newest first"
    );
    for m in &all[..6] {
        assert_eq!(m["actor"]["harness"], "claude-code", "{m}");
        assert_eq!(m["actor"]["model"], "opus-4", "{m}");
        assert_eq!(m["actor"]["label"], "claude-code / opus-4", "{m}");
        assert_eq!(m["actor"]["token"], "owner", "{m}");
        let ts = m["ts"].as_str().unwrap();
        assert!(ts.ends_with('Z') && ts.len() == 24, "ts {ts}");
    }
    // Without the header the owner is the actor.
    assert_eq!(all[9]["actor"], json!({"token": "owner", "label": "owner"}));

    let ops: Vec<(&str, &str, Option<&str>)> = all
        .iter()
        .rev()
        .skip(4)
        .map(|m| {
            (
                m["op"].as_str().unwrap(),
                m["table"].as_str().unwrap(),
                m["row"].as_str(),
            )
        })
        .collect();
    assert_eq!(
        ops,
        [
            ("create_table", "a.b.c", None),
            ("insert", TASKS, Some("t")),
            ("update", TASKS, Some("t")),
            ("delete", TASKS, Some("t")),
            ("alter_table", "a.b.c", None),
            ("drop_table", "a.b.c", None),
        ]
    );
    let v1 = json!({"version": 1, "values": {"title": "T", "status": "todo", "estimate": 1}, "body": "b"});
    let v2 = json!({"version": 2, "values": {"title": "T", "status": "todo", "estimate": 2}, "body": "b"});
    let m = migration(&s, seq_of(&i));
    assert_eq!(
        (m["before"].clone(), m["after"].clone()),
        (Value::Null, v1.clone())
    );
    let m = migration(&s, seq_of(&u));
    assert_eq!((m["before"].clone(), m["after"].clone()), (v1, v2.clone()));
    let m = migration(&s, seq_of(&d));
    assert_eq!((m["before"].clone(), m["after"].clone()), (v2, Value::Null));
    let m = migration(&s, seqs[4]);
    assert_eq!(m["before"]["columns"], json!({"n": {"type": "integer"}}));
    assert_eq!(m["after"]["columns"]["m"], json!({"type": "text"}));
    let m = migration(&s, seqs[5]);
    assert_eq!(m["after"], Value::Null);
    assert_eq!(m["before"]["rows"], json!([]));

    // A harness without a model, and a session.
    let (st, v) = s.call_with(
        "insert_row",
        &[
            ("X-Datanotes-Actor", "curl"),
            ("X-Datanotes-Session", "sess-1"),
        ],
        json!({"table": TASKS, "values": {"title": "by curl"}}),
    );
    assert_eq!(st, 200, "{v}");
    let m = migration(&s, seq_of(&v));
    assert_eq!(
        m["actor"],
        json!({"harness": "curl", "session": "sess-1", "token": "owner", "label": "curl"})
    );
    // Refused writes and reads are not journaled.
    s.refused("insert_row", json!({"table": TASKS, "values": {}}), 422);
    s.ok("select_rows", json!({"table": TASKS}));
    assert_eq!(s.seq(), seq_of(&v));
}

#[test]
fn seq_only_grows_across_restarts_kills_and_vacuum() {
    let s = Server::start();
    create_tasks(&s);
    let r = s.ok(
        "insert_row",
        json!({"table": TASKS, "id": "a", "values": {"title": "A"}}),
    );
    let last = seq_of(&r);
    let journal = s.migrations(json!({}));

    let s = s.restart();
    assert_eq!(s.seq(), last);
    assert_eq!(s.migrations(json!({})), journal, "the journal is durable");
    let r = s.ok(
        "update_row",
        json!({"table": TASKS, "id": "a", "values": {"estimate": 1}}),
    );
    assert_eq!(seq_of(&r), last + 1);
    assert_eq!(r["version"], 2);

    // A kill right after an acknowledged write loses nothing.
    let s = s.restart_killed();
    assert_eq!(s.seq(), last + 1);
    let row = s.ok("get_row", json!({"table": TASKS, "id": "a"}));
    assert_eq!(row["version"], 2);
    assert_eq!(row["values"]["estimate"], 1);
    assert_eq!(
        s.migrations(json!({})).len() as i64,
        last + 1,
        "nothing journaled twice"
    );

    // Vacuum everything: seq still continues from the high-water mark, after a restart too.
    let v = s.ok("vacuum", json!({"before_seq": last + 2}));
    assert_eq!(v["removed"], last + 1);
    assert_eq!(s.migrations(json!({})), Vec::<Value>::new());
    let s = s.restart();
    assert_eq!(s.seq(), last + 1);
    let r = s.ok(
        "insert_row",
        json!({"table": TASKS, "id": "b", "values": {"title": "B"}}),
    );
    assert_eq!(seq_of(&r), last + 2);
}

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

#[test]
fn vacuum_drops_history_and_restore_before_it_is_refused() {
    let s = Server::start();
    create_tasks(&s);
    let i = s.ok(
        "insert_row",
        json!({"table": TASKS, "id": "a", "values": {"title": "A"}}),
    );
    let u = s.ok(
        "update_row",
        json!({"table": TASKS, "id": "a", "values": {"estimate": 1}}),
    );
    let u2 = s.ok(
        "update_row",
        json!({"table": TASKS, "id": "a", "values": {"estimate": 2}}),
    );
    let cut = seq_of(&u);

    for bad in [-1, s.seq() + 2] {
        let e = s.refused_nochange("vacuum", json!({"before_seq": bad}), 400);
        assert_eq!(e["rule"], "before_seq");
    }
    let files = snapshot(&s.dir);
    let v = s.ok("vacuum", json!({"before_seq": cut}));
    assert_eq!(v["removed"], cut - 1);
    assert_eq!(v["feed_starts_at"], cut);
    assert!(snapshot(&s.dir) == files, "vacuum leaves the notes alone");
    let seqs: Vec<i64> = s
        .migrations(json!({}))
        .iter()
        .map(|m| m["seq"].as_i64().unwrap())
        .collect();
    assert_eq!(seqs, [seq_of(&u2), cut]);

    // History before the cut is gone: restore there is refused, undo finds nothing.
    let e = s.refused_nochange(
        "restore",
        json!({"table": TASKS, "id": "a", "seq": seq_of(&i)}),
        400,
    );
    assert_eq!(e["rule"], "seq");
    assert_eq!(e["table"], TASKS);
    s.refused_nochange("restore", json!({"table": TASKS, "seq": 1}), 400);
    s.refused_nochange("undo_migration", json!({"seq": seq_of(&i)}), 404);
    // From the cut on, it works.
    s.ok("restore", json!({"table": TASKS, "id": "a", "seq": cut}));
    assert_eq!(
        s.ok("get_row", json!({"table": TASKS, "id": "a"}))["values"]["estimate"],
        1
    );
    // A later vacuum never moves the start back.
    let v = s.ok("vacuum", json!({"before_seq": 2}));
    assert_eq!(v["removed"], 0);
    assert_eq!(v["feed_starts_at"], cut);
    s.refused_nochange(
        "restore",
        json!({"table": TASKS, "id": "a", "seq": cut - 1}),
        400,
    );
    // Rows survive a restart after vacuum, and the cut holds.
    let s = s.restart();
    assert_eq!(
        s.ok("get_row", json!({"table": TASKS, "id": "a"}))["values"]["estimate"],
        1
    );
    s.refused_nochange(
        "restore",
        json!({"table": TASKS, "id": "a", "seq": cut - 1}),
        400,
    );
}

#[test]
fn restore_after_vacuum_keeps_rows_whose_early_history_was_vacuumed() {
    let s = Server::start();
    create_tasks(&s);
    // a and b are inserted, then the journal is vacuumed past their inserts.
    s.ok(
        "insert_row",
        json!({"table": TASKS, "id": "a", "values": {"title": "A"}}),
    );
    s.ok(
        "insert_row",
        json!({"table": TASKS, "id": "b", "values": {"title": "B"}}),
    );
    let m = s.ok(
        "insert_row",
        json!({"table": TASKS, "id": "m", "values": {"title": "M"}}),
    );
    let cut = seq_of(&m);
    s.ok("vacuum", json!({"before_seq": cut}));
    // The point to go back to: a, b and m all exist, as inserted.
    let files = table_files(&s, TASKS);
    // Then a changes and b is deleted.
    s.ok(
        "update_row",
        json!({"table": TASKS, "id": "a", "values": {"title": "A2"}}),
    );
    s.ok("delete_row", json!({"table": TASKS, "id": "b"}));

    // Row restore: a's state at `cut` is known (from the update's before state).
    s.ok("restore", json!({"table": TASKS, "id": "a", "seq": cut}));
    assert!(
        s.has_row(TASKS, "a"),
        "restoring a to a point where it existed deleted it"
    );
    assert_eq!(
        s.ok("get_row", json!({"table": TASKS, "id": "a"}))["values"]["title"],
        "A"
    );

    // Table restore: b, deleted after the point, comes back.
    s.ok("restore", json!({"table": TASKS, "seq": cut}));
    assert_eq!(s.ids(json!({"table": TASKS})), ["a", "b", "m"]);
    assert_eq!(table_files(&s, TASKS), files);
}

#[test]
fn concurrent_writes_are_each_checked_and_journaled_once() {
    let s = Server::start();
    create_tasks(&s);
    let seq0 = s.seq();
    let results: Vec<(u16, Value, bool)> = std::thread::scope(|sc| {
        let hs: Vec<_> = (0..8)
            .map(|t| {
                let s = &s;
                sc.spawn(move || {
                    let mut out = vec![];
                    for i in 0..10 {
                        // Every third write breaks a rule; the rest must all land.
                        let bad = (t + i) % 3 == 0;
                        let est = if bad { 1000 } else { i };
                        let (st, v) = s.call(
                            "insert_row",
                            json!({"table": TASKS, "id": format!("r{t}-{i}"), "values": {"title": "x", "estimate": est}}),
                        );
                        out.push((st, v, bad));
                    }
                    out
                })
            })
            .collect();
        hs.into_iter().flat_map(|h| h.join().unwrap()).collect()
    });
    let mut seqs = vec![];
    let mut good = 0;
    for (st, v, bad) in &results {
        if *bad {
            assert_eq!(*st, 422, "{v}");
            assert_eq!(v["error"]["rule"], "max");
        } else {
            assert_eq!(*st, 200, "{v}");
            seqs.push(v["seq"].as_i64().unwrap());
            good += 1;
        }
    }
    seqs.sort();
    seqs.dedup();
    assert_eq!(seqs.len(), good, "each write has its own seq");
    assert_eq!(s.seq(), seq0 + good as i64);
    assert_eq!(
        s.ok("describe_table", json!({"table": TASKS}))["rows"],
        good
    );
    let files = table_files(&s, TASKS);
    assert_eq!(
        files.len(),
        good + 1,
        "one file per row, and the definition"
    );
    for (st, v, bad) in &results {
        if !bad {
            let id = v["id"].as_str().unwrap();
            assert!(s.row_path(TASKS, id).is_file(), "{id} {st}");
        }
    }
}

#[test]
fn concurrent_writes_of_the_same_unique_value_or_id_let_one_through() {
    let s = Server::start();
    create_tasks(&s);
    let run = |args: &(dyn Fn(usize) -> Value + Sync)| -> Vec<u16> {
        std::thread::scope(|sc| {
            let hs: Vec<_> = (0..8)
                .map(|t| {
                    let s = &s;
                    sc.spawn(move || s.call("insert_row", args(t)).0)
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        })
    };
    let codes = run(
        &|t| json!({"table": TASKS, "id": format!("c{t}"), "values": {"title": "x", "code": "AB-7"}}),
    );
    assert_eq!(codes.iter().filter(|&&c| c == 200).count(), 1, "{codes:?}");
    assert!(codes.iter().all(|&c| c == 200 || c == 422), "{codes:?}");
    let ids = run(&|t| json!({"table": TASKS, "id": "same", "values": {"title": format!("t{t}")}}));
    assert_eq!(ids.iter().filter(|&&c| c == 200).count(), 1, "{ids:?}");
    assert!(ids.iter().all(|&c| c == 200 || c == 409), "{ids:?}");
    assert_eq!(s.ok("describe_table", json!({"table": TASKS}))["rows"], 2);
    assert_eq!(table_files(&s, TASKS).len(), 3);
}

#[test]
fn versions_never_go_back_when_the_index_is_rebuilt_after_vacuum() {
    let s = Server::start();
    create_tasks(&s);
    s.ok(
        "insert_row",
        json!({"table": TASKS, "id": "a", "values": {"title": "A"}}),
    );
    for e in 1..=3 {
        s.ok(
            "update_row",
            json!({"table": TASKS, "id": "a", "values": {"estimate": e}}),
        );
    }
    assert_eq!(
        s.ok("get_row", json!({"table": TASKS, "id": "a"}))["version"],
        4
    );
    s.ok("vacuum", json!({"before_seq": s.seq() + 1}));
    s.ok("rebuild_index", json!({}));
    // A client that read version 1 long ago must not overwrite the row now.
    let v = s.ok("get_row", json!({"table": TASKS, "id": "a"}))["version"]
        .as_i64()
        .unwrap();
    assert!(v >= 4, "version went back to {v} after rebuild_index");
    s.refused_nochange(
        "update_row",
        json!({"table": TASKS, "id": "a", "values": {"estimate": 9}, "expect_version": 1}),
        409,
    );
    // Nor when a definition changed by hand while stopped makes the start re-index the table.
    let mut s = s;
    s.stop();
    let def = s.dir.join("work/crm/tasks/_table.yaml");
    let text = std::fs::read_to_string(&def).unwrap();
    write_by_hand(&def, &text.replace("Things to do", "Things to do, later"));
    let s = s.restart();
    assert_eq!(
        s.ok("describe_table", json!({"table": TASKS}))["description"],
        "Things to do, later"
    );
    let v = s.ok("get_row", json!({"table": TASKS, "id": "a"}))["version"]
        .as_i64()
        .unwrap();
    assert!(v >= 4, "version went back to {v} after a re-index at start");
}
