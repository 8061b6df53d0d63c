//! Every column type and constraint refusing a bad value (and changing nothing) and accepting a
//! good one; names that could become paths; malformed requests.

use crate::kit::*;
use serde_json::{Value, json};

/// Inserting `values` into tasks is refused on `column` for `rule`, and nothing changes.
fn bad_insert(s: &Server, values: Value, column: &str, rule: &str) {
    let e = s.refused_unchanged(
        "insert_row",
        json!({"table": TASKS, "values": values}),
        422,
        Some(column),
        rule,
    );
    assert_eq!(e["code"], "constraint_violation", "{e}");
    assert_eq!(e["table"], TASKS, "{e}");
    assert!(
        e["hint"].as_str().is_some_and(|h| !h.is_empty()),
        "a refusal teaches: {e}"
    );
    assert!(
        e["message"].as_str().unwrap().contains(column),
        "the message names the column: {e}"
    );
}

/// Updating row `ok` of tasks with `values` is refused the same way.
fn bad_update(s: &Server, values: Value, column: &str, rule: &str) {
    s.refused_unchanged(
        "update_row",
        json!({"table": TASKS, "id": "ok", "values": values}),
        422,
        Some(column),
        rule,
    );
}

/// A good value is accepted, and answered in its normal form.
fn good(s: &Server, column: &str, value: Value, stored: Value) {
    let id = format!("good-{}", s.seq());
    s.ok(
        "insert_row",
        json!({"table": TASKS, "id": id, "values": {"title": "t", column: value}}),
    );
    let row = s.ok("get_row", json!({"table": TASKS, "id": id}));
    assert_eq!(row["values"][column], stored, "{column} {value}");
    s.ok("delete_row", json!({"table": TASKS, "id": id}));
}

fn setup() -> Server {
    let s = Server::start();
    create_tasks(&s);
    s.ok(
        "insert_row",
        json!({"table": TASKS, "id": "ok", "values": {"title": "fine", "code": "AB-1", "estimate": 1}}),
    );
    s
}

#[test]
fn each_type_refuses_a_wrong_value() {
    let s = setup();
    for (col, bad) in [
        ("title", json!(5)),
        ("title", json!(true)),
        ("title", json!(["a"])),
        ("title", json!({"a": 1})),
        ("estimate", json!("5")),
        ("estimate", json!(1.5)),
        ("estimate", json!(true)),
        ("estimate", json!(1e20)),
        ("score", json!("1.5")),
        ("score", json!(false)),
        ("score", json!([1])),
        ("done", json!("true")),
        ("done", json!(1)),
        ("done", json!(0)),
        ("due", json!("2026-13-01")),
        ("due", json!("2026-02-30")),
        ("due", json!("2026-1-1")),
        ("due", json!("2026-01-01T00:00:00Z")),
        ("due", json!(20260101)),
        ("at", json!("2026-01-01")),
        ("at", json!("2026-01-01 10:00:00")),
        ("at", json!("2026-01-01T10:00:00")),
        ("at", json!("yesterday")),
        ("at", json!(1767261600)),
        ("status", json!(1)),
        ("status", json!(["todo"])),
        ("tags", json!("home")),
        ("tags", json!([1])),
        ("tags", json!([["a"]])),
        ("tags", json!([null])),
        ("owner", json!(5)),
        ("owner", json!(["ada"])),
    ] {
        bad_insert(&s, json!({"title": "x", col: bad}), col, "type");
        bad_update(&s, json!({col: bad}), col, "type");
    }
    // Nothing of it reached the row.
    let row = s.ok("get_row", json!({"table": TASKS, "id": "ok"}));
    assert_eq!(row["version"], 1);
    assert_eq!(
        row["values"],
        json!({"title": "fine", "status": "todo", "estimate": 1, "code": "AB-1"})
    );
}

#[test]
fn each_type_accepts_a_good_value() {
    let s = setup();
    good(
        &s,
        "title",
        json!("héllo: \"world\""),
        json!("héllo: \"world\""),
    );
    good(&s, "estimate", json!(7), json!(7));
    good(&s, "estimate", json!(7.0), json!(7));
    good(&s, "score", json!(2.5), json!(2.5));
    good(&s, "score", json!(3), json!(3));
    good(&s, "done", json!(true), json!(true));
    good(&s, "done", json!(false), json!(false));
    good(&s, "due", json!("2024-02-29"), json!("2024-02-29"));
    good(
        &s,
        "at",
        json!("2026-11-30T09:00:00Z"),
        json!("2026-11-30T09:00:00Z"),
    );
    good(
        &s,
        "at",
        json!("2026-11-30T10:30:00.250+01:30"),
        json!("2026-11-30T09:00:00.250Z"),
    );
    good(&s, "status", json!("doing"), json!("doing"));
    good(&s, "tags", json!(["a", "b"]), json!(["a", "b"]));
    good(&s, "tags", json!([]), json!([]));
    good(&s, "owner", json!("ada"), json!("ada"));
    good(&s, "code", json!("ZZ-42"), json!("ZZ-42"));
}

#[test]
fn required_default_and_unknown_columns() {
    let s = setup();
    bad_insert(&s, json!({"estimate": 1}), "title", "required");
    bad_insert(&s, json!({"title": null}), "title", "required");
    bad_update(&s, json!({"title": null}), "title", "required");
    bad_insert(
        &s,
        json!({"title": "x", "colour": "red"}),
        "colour",
        "unknown_column",
    );
    bad_update(&s, json!({"colour": "red"}), "colour", "unknown_column");
    s.refused_unchanged(
        "update_row",
        json!({"table": TASKS, "id": "ok", "values": {"id": "other"}}),
        422,
        Some("id"),
        "unknown_column",
    );

    // Default: filled when absent or null, not when given.
    s.ok(
        "insert_row",
        json!({"table": TASKS, "id": "d1", "values": {"title": "x"}}),
    );
    s.ok(
        "insert_row",
        json!({"table": TASKS, "id": "d2", "values": {"title": "x", "status": null}}),
    );
    s.ok(
        "insert_row",
        json!({"table": TASKS, "id": "d3", "values": {"title": "x", "status": "done"}}),
    );
    for (id, st) in [("d1", "todo"), ("d2", "todo"), ("d3", "done")] {
        assert_eq!(
            s.ok("get_row", json!({"table": TASKS, "id": id}))["values"]["status"],
            st
        );
    }
    // Clearing a column with a default leaves it empty (defaults are for inserts).
    s.ok(
        "update_row",
        json!({"table": TASKS, "id": "d3", "values": {"status": null}}),
    );
    assert!(
        s.ok("get_row", json!({"table": TASKS, "id": "d3"}))["values"]
            .get("status")
            .is_none()
    );
    // A wrong default given at insert time is still refused on its own merits.
    bad_insert(
        &s,
        json!({"title": "x", "status": "later"}),
        "status",
        "enum",
    );
}

#[test]
fn enum_link_unique_and_pattern() {
    let s = setup();
    bad_insert(
        &s,
        json!({"title": "x", "status": "later"}),
        "status",
        "enum",
    );
    bad_insert(
        &s,
        json!({"title": "x", "status": "TODO"}),
        "status",
        "enum",
    );
    bad_update(&s, json!({"status": "later"}), "status", "enum");

    bad_insert(
        &s,
        json!({"title": "x", "owner": "nobody"}),
        "owner",
        "link",
    );
    bad_insert(
        &s,
        json!({"title": "x", "owner": "../people/ada"}),
        "owner",
        "link",
    );
    bad_update(&s, json!({"owner": "nobody"}), "owner", "link");

    bad_insert(&s, json!({"title": "x", "code": "AB-1"}), "code", "unique");
    s.ok(
        "insert_row",
        json!({"table": TASKS, "id": "other", "values": {"title": "x", "code": "AB-2"}}),
    );
    s.refused_unchanged(
        "update_row",
        json!({"table": TASKS, "id": "other", "values": {"code": "AB-1"}}),
        422,
        Some("code"),
        "unique",
    );
    // A row keeps its own unique value; a freed value can be taken.
    s.ok(
        "update_row",
        json!({"table": TASKS, "id": "ok", "values": {"code": "AB-1", "estimate": 2}}),
    );
    s.ok("delete_row", json!({"table": TASKS, "id": "other"}));
    s.ok(
        "insert_row",
        json!({"table": TASKS, "values": {"title": "y", "code": "AB-2"}}),
    );
    // Unique on an email of people, through a different table.
    let e = s.refused_nochange(
        "insert_row",
        json!({"table": PEOPLE, "values": {"name": "Grace", "email": "not an email"}}),
        422,
    );
    assert_eq!(
        (e["column"].as_str(), e["rule"].as_str()),
        (Some("email"), Some("pattern"))
    );
    s.ok(
        "insert_row",
        json!({"table": PEOPLE, "id": "g", "values": {"name": "Grace", "email": "g@x.org"}}),
    );
    let e = s.refused_nochange(
        "insert_row",
        json!({"table": PEOPLE, "values": {"name": "Grace 2", "email": "g@x.org"}}),
        422,
    );
    assert_eq!(
        (e["column"].as_str(), e["rule"].as_str()),
        (Some("email"), Some("unique"))
    );

    bad_insert(&s, json!({"title": "x", "code": "ab-1"}), "code", "pattern");
    bad_insert(
        &s,
        json!({"title": "x", "code": "AB-1 "}),
        "code",
        "pattern",
    );
    bad_update(&s, json!({"code": "A-1"}), "code", "pattern");
    // A list's pattern applies to each item.
    bad_insert(
        &s,
        json!({"title": "x", "tags": ["ok", "Not-ok"]}),
        "tags",
        "pattern",
    );
    good(&s, "tags", json!(["ok", "fine"]), json!(["ok", "fine"]));
}

#[test]
fn min_and_max_for_every_kind_of_bound() {
    let s = setup();
    s.ok(
        "create_table",
        json!({"table": "work.crm.bounds", "columns": {
            "name": {"type": "text", "min": 2, "max": 4},
            "when": {"type": "datetime", "min": "2026-01-01T00:00:00Z", "max": "2026-12-31T23:59:59+00:00"},
            "rank": {"type": "enum", "values": ["a", "bbbbb"], "max": 3}
        }}),
    );
    // Integer value.
    bad_insert(&s, json!({"title": "x", "estimate": -1}), "estimate", "min");
    bad_insert(
        &s,
        json!({"title": "x", "estimate": 101}),
        "estimate",
        "max",
    );
    bad_update(&s, json!({"estimate": 1000}), "estimate", "max");
    good(&s, "estimate", json!(0), json!(0));
    good(&s, "estimate", json!(100), json!(100));
    // Number value.
    bad_insert(&s, json!({"title": "x", "score": -1.51}), "score", "min");
    bad_insert(&s, json!({"title": "x", "score": 99.51}), "score", "max");
    good(&s, "score", json!(-1.5), json!(-1.5));
    good(&s, "score", json!(99.5), json!(99.5));
    // Text length, in characters.
    bad_insert(&s, json!({"title": "x".repeat(81)}), "title", "max");
    good(&s, "title", json!("é".repeat(80)), json!("é".repeat(80)));
    // List length.
    bad_insert(
        &s,
        json!({"title": "x", "tags": ["a", "b", "c", "d"]}),
        "tags",
        "max",
    );
    good(&s, "tags", json!(["a", "b", "c"]), json!(["a", "b", "c"]));
    // Dates.
    bad_insert(&s, json!({"title": "x", "due": "1999-12-31"}), "due", "min");
    bad_insert(&s, json!({"title": "x", "due": "2100-01-01"}), "due", "max");
    good(&s, "due", json!("2000-01-01"), json!("2000-01-01"));
    good(&s, "due", json!("2099-12-31"), json!("2099-12-31"));

    let b = "work.crm.bounds";
    let refuse = |values: Value, column: &str, rule: &str| {
        s.refused_unchanged(
            "insert_row",
            json!({"table": b, "values": values}),
            422,
            Some(column),
            rule,
        );
    };
    refuse(json!({"name": "a"}), "name", "min");
    refuse(json!({"name": "abcde"}), "name", "max");
    refuse(json!({"when": "2025-12-31T23:59:59Z"}), "when", "min");
    refuse(json!({"when": "2026-01-01T00:59:59+01:00"}), "when", "min");
    refuse(json!({"when": "2027-01-01T00:00:00Z"}), "when", "max");
    refuse(json!({"rank": "bbbbb"}), "rank", "max");
    for v in [
        json!({"name": "ab"}),
        json!({"name": "abcd"}),
        json!({"when": "2026-01-01T00:00:00Z"}),
        json!({"when": "2026-12-31T23:59:59Z"}),
        json!({"when": "2027-01-01T00:59:59+01:00"}),
        json!({"rank": "a"}),
    ] {
        s.ok("insert_row", json!({"table": b, "values": v}));
    }
    assert_eq!(s.ok("describe_table", json!({"table": b}))["rows"], 6);
}

#[test]
fn path_traversal_is_refused_and_nothing_is_created_outside() {
    let s = setup();
    let outside = s.dir.parent().unwrap().to_path_buf();
    let before = snapshot(&outside);
    let seq = s.seq();
    let bad_tables = [
        "../x.y.z",
        "a.b.c/../../d",
        "a.b.c/../../../etc",
        "../../../../tmp/x.y.z",
        "..",
        "...",
        "a..b",
        "a.b",
        "a.b.c.d",
        "A.b.c",
        "/etc.b.c",
        "a.b.c ",
        "a.b.c\0",
        "a.b.%2e%2e",
        "a\\b.c.d",
        "",
    ];
    for t in bad_tables {
        for (op, args) in [
            (
                "create_table",
                json!({"table": t, "columns": {"x": {"type": "text"}}}),
            ),
            ("describe_table", json!({"table": t})),
            ("drop_table", json!({"table": t})),
            (
                "alter_table",
                json!({"table": t, "add": {"y": {"type": "text"}}}),
            ),
            (
                "insert_row",
                json!({"table": t, "id": "r", "values": {"x": "1"}}),
            ),
            ("get_row", json!({"table": t, "id": "r"})),
            ("update_row", json!({"table": t, "id": "r", "values": {}})),
            ("delete_row", json!({"table": t, "id": "r"})),
            ("select_rows", json!({"table": t})),
            ("restore", json!({"table": t, "seq": 1})),
            ("search_notes", json!({"query": "x", "tables": [t]})),
        ] {
            let e = s.refused(op, args, 400);
            assert_error_shape(&e);
            assert_eq!(e["rule"], "table_name", "{op} {t:?}: {e}");
        }
        let e = s.refused(
            "create_table",
            json!({"table": "a.b.c", "columns": {"l": {"type": "link", "table": t}}}),
            400,
        );
        assert_eq!(e["rule"], "table", "{t:?}: {e}");
    }
    let bad_ids = [
        "../../etc/passwd",
        "../ok",
        "a/b",
        "a\\b",
        ".hidden",
        "..",
        ".",
        "",
        "-x",
        "_x",
        "A",
        "a b",
        "ok.md",
        "ok\0",
        "/etc/passwd",
        "%2e%2e",
    ];
    let long = "a".repeat(129);
    for id in bad_ids.iter().copied().chain([long.as_str()]) {
        for (op, args) in [
            (
                "insert_row",
                json!({"table": TASKS, "id": id, "values": {"title": "x"}}),
            ),
            ("get_row", json!({"table": TASKS, "id": id})),
            (
                "update_row",
                json!({"table": TASKS, "id": id, "values": {"title": "y"}}),
            ),
            ("delete_row", json!({"table": TASKS, "id": id})),
            ("restore", json!({"table": TASKS, "id": id, "seq": 1})),
        ] {
            let e = s.refused(op, args, 400);
            assert_error_shape(&e);
            assert_eq!(e["rule"], "row_id", "{op} {id:?}: {e}");
            assert_eq!(e["column"], "id", "{op} {id:?}: {e}");
        }
    }
    // Column names are names too.
    for c in ["../x", "a/b", ".x", "X"] {
        let e = s.refused(
            "alter_table",
            json!({"table": TASKS, "add": {c: {"type": "text"}}}),
            400,
        );
        assert_eq!(e["rule"], "column_name", "{c}: {e}");
        let e = s.refused(
            "alter_table",
            json!({"table": TASKS, "rename": {"title": c}}),
            400,
        );
        assert_eq!(e["rule"], "column_name", "{c}: {e}");
    }
    // A generated id is made safe.
    let r = s.ok(
        "insert_row",
        json!({"table": TASKS, "values": {"title": "../../etc/passwd"}}),
    );
    assert_eq!(r["id"], "etc-passwd");
    assert!(s.row_path(TASKS, "etc-passwd").is_file());

    // Nothing was written anywhere but that one row, and only that was journaled.
    let mut after = snapshot(&outside);
    let rel = s
        .row_path(TASKS, "etc-passwd")
        .strip_prefix(&outside)
        .unwrap()
        .to_path_buf();
    assert!(after.remove(&rel).is_some());
    assert!(after == before, "files changed outside the one insert");
    assert_eq!(s.seq(), seq + 1);
    assert!(s.dir.join(".datanotes").is_dir());
    assert_eq!(
        s.ok("list_tables", json!({}))["tables"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
}

/// Posts raw bytes to an operation with the owner token.
fn raw(s: &Server, op: &str, body: &[u8]) -> (u16, Value) {
    s.post_raw(
        &format!("/datanotes/{op}/"),
        Some(&s.token.clone()),
        &[("Content-Type", "application/json")],
        body.to_vec(),
    )
}

fn still_serving(s: &Server) {
    let (st, v) = s.get("/datanotes/health");
    assert_eq!(st, 200, "{v}");
    assert_eq!(
        s.ok("get_row", json!({"table": TASKS, "id": "ok"}))["values"]["title"],
        "fine"
    );
}

#[test]
fn malformed_requests_get_json_errors() {
    let s = setup();
    let files = snapshot(&s.dir);
    let seq = s.seq();
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let deep_obj = format!("{{\"table\": {}}}", "[".repeat(5000));
    for (op, body, status, rule) in [
        ("insert_row", &b"{\"table\": "[..], 400, "json"),
        ("insert_row", b"{table: 1}", 400, "json"),
        (
            "insert_row",
            b"{\"table\": \"work.crm.tasks\",}",
            400,
            "json",
        ),
        ("insert_row", b"\xff\xfe{}", 400, "json"),
        ("insert_row", b"[]", 400, "json"),
        ("insert_row", b"\"work.crm.tasks\"", 400, "json"),
        ("insert_row", b"42", 400, "json"),
        ("insert_row", b"null", 400, "json"),
        ("insert_row", b"true", 400, "json"),
        ("list_tables", deep.as_bytes(), 400, "json"),
        ("list_tables", deep_obj.as_bytes(), 400, "json"),
    ] {
        let (st, v) = raw(&s, op, body);
        assert_eq!(
            st,
            status,
            "{:?}: {v}",
            String::from_utf8_lossy(&body[..body.len().min(40)])
        );
        assert_error_shape(&v["error"]);
        assert_eq!(v["error"]["code"], "invalid_argument", "{v}");
        assert_eq!(v["error"]["rule"], rule, "{v}");
        still_serving(&s);
    }
    // An empty body is an empty object.
    let (st, v) = raw(&s, "list_tables", b"");
    assert_eq!(st, 200, "{v}");

    // Unknown operation: 404, whatever the body, listing the operations.
    for body in [&b"{}"[..], b"not json"] {
        let (st, v) = raw(&s, "drop_database", body);
        assert_eq!(st, 404, "{v}");
        assert_error_shape(&v["error"]);
        assert_eq!(v["error"]["code"], "unknown_operation");
        assert!(v["error"]["hint"].as_str().unwrap().contains("insert_row"));
    }
    let (st, v) = s.post("/datanotes/", Some(&s.token.clone()), &json!({}));
    assert_eq!(st, 404, "{v}");
    assert_error_shape(&v["error"]);

    // Unknown fields and wrong types: 400, naming the problem.
    for (op, args) in [
        ("list_tables", json!({"verbose": true})),
        ("describe_table", json!({"table": TASKS, "extra": 1})),
        ("describe_table", json!({"table": 5})),
        ("describe_table", json!({})),
        ("get_row", json!({"table": TASKS, "id": 7})),
        ("insert_row", json!({"table": TASKS, "values": "title=x"})),
        (
            "insert_row",
            json!({"table": TASKS, "values": {"title": "x"}, "body": 5}),
        ),
        (
            "insert_row",
            json!({"table": TASKS, "valeus": {"title": "x"}}),
        ),
        ("insert_row", json!({"table": 5, "values": {"title": "x"}})),
        ("insert_row", json!({"values": {"title": "x"}})),
        (
            "update_row",
            json!({"table": TASKS, "id": "ok", "expect_version": "1"}),
        ),
        (
            "update_row",
            json!({"table": TASKS, "id": "ok", "values": [1]}),
        ),
        ("select_rows", json!({"table": TASKS, "limit": "10"})),
        ("select_rows", json!({"table": TASKS, "limit": 1e300})),
        (
            "select_rows",
            json!({"table": TASKS, "where": {"column": "title"}}),
        ),
        (
            "select_rows",
            json!({"table": TASKS, "where": [{"column": "title", "op": "=", "value": "x", "x": 1}]}),
        ),
        (
            "select_rows",
            json!({"table": TASKS, "order_by": ["title"]}),
        ),
        ("search_notes", json!({"query": ["x"]})),
        (
            "search_notes",
            json!({"query": "x", "tables": "work.crm.tasks"}),
        ),
        ("list_migrations", json!({"before": "5"})),
        ("list_migrations", json!({"table": TASKS, "order": "asc"})),
        ("undo_migration", json!({"seq": "1"})),
        ("undo_migration", json!({})),
        ("restore", json!({"table": TASKS, "seq": 1.5})),
        ("vacuum", json!({"before_seq": -1})),
        ("vacuum", json!({"before": 1})),
        ("set_engine_settings", json!({"settings": [1]})),
        ("set_engine_settings", json!({"default_limit": 5})),
        ("create_table", json!({"table": "a.b.c", "columns": []})),
        ("create_table", json!({"table": "a.b.c"})),
        ("alter_table", json!({"table": TASKS, "drop": "title"})),
        ("rebuild_index", json!({"now": true})),
    ] {
        let (st, v) = s.call(op, args.clone());
        assert_eq!(st, 400, "{op} {args}: {v}");
        assert_error_shape(&v["error"]);
        assert_eq!(v["error"]["code"], "invalid_argument", "{op} {args}: {v}");
        assert!(v["error"]["hint"].is_string(), "{op} {args}: {v}");
    }
    still_serving(&s);
    assert!(
        snapshot(&s.dir) == files,
        "malformed calls changed the files"
    );
    assert_eq!(s.seq(), seq, "malformed calls were journaled");
}

#[test]
fn oversized_bodies_are_refused_with_413() {
    let s = setup();
    let files = snapshot(&s.dir);
    let seq = s.seq();
    // A body over 8 MiB, valid JSON or not.
    let big = format!(
        "{{\"table\": \"{TASKS}\", \"values\": {{\"title\": \"x\"}}, \"body\": \"{}\"}}",
        "a".repeat(8 << 20)
    );
    let (st, v) = raw(&s, "insert_row", big.as_bytes());
    assert_eq!(st, 413, "{v}");
    assert_error_shape(&v["error"]);
    assert_eq!(v["error"]["code"], "payload_too_large");
    let (st, v) = raw(&s, "list_tables", &vec![b' '; (8 << 20) + 1]);
    assert_eq!(st, 413, "{v}");
    still_serving(&s);
    assert!(snapshot(&s.dir) == files);
    assert_eq!(s.seq(), seq);

    // Under the limit the request reaches the engine, whose own row limit (1 MiB) applies...
    let body = "b".repeat(3 << 20);
    s.refused_unchanged(
        "insert_row",
        json!({"table": TASKS, "values": {"title": "big"}, "body": body}),
        422,
        Some("body"),
        "max",
    );
    // ... and can be raised.
    s.ok(
        "set_engine_settings",
        json!({"settings": {"max_body_bytes": 4 << 20}}),
    );
    s.ok(
        "insert_row",
        json!({"table": TASKS, "id": "big", "values": {"title": "big"}, "body": body}),
    );
    let row = s.ok("get_row", json!({"table": TASKS, "id": "big"}));
    assert_eq!(row["body"].as_str().unwrap().len(), 3 << 20);
}

#[test]
fn tokens_and_actor_header_edge_cases() {
    let s = setup();
    // No token, a wrong token, a malformed header: 401 with the JSON shape, nothing runs.
    for headers in [
        vec![],
        vec![("Authorization", "Bearer dn_owner_00")],
        vec![("Authorization", "Basic abc")],
        vec![("Authorization", "Bearer")],
    ] {
        let (st, v) = s.post_raw(
            "/datanotes/insert_row/",
            None,
            &headers,
            serde_json::to_vec(&json!({"table": TASKS, "values": {"title": "x"}})).unwrap(),
        );
        assert_eq!(st, 401, "{headers:?}: {v}");
        assert_error_shape(&v["error"]);
    }
    // A long actor header is clipped, not refused.
    let long = format!("{} / {}", "h".repeat(1000), "m".repeat(1000));
    let (st, v) = s.call_with(
        "insert_row",
        &[("X-Datanotes-Actor", &long)],
        json!({"table": TASKS, "id": "x", "values": {"title": "x"}}),
    );
    assert_eq!(st, 200, "{v}");
    let m = &s.migrations(json!({"limit": 1}))[0];
    assert_eq!(m["actor"]["harness"].as_str().unwrap().len(), 200);
    assert_eq!(m["actor"]["model"].as_str().unwrap().len(), 200);
}
