//! Table definitions: created, altered, dropped; the index rebuilt.

use super::*;

#[test]
fn create_table_checks_its_definition() {
    let s = Server::start();
    let r = s.ok(
        "create_table",
        json!({"table": "a.b.c", "columns": {"x": {"type": "text"}}}),
    );
    assert_eq!(r["table"], "a.b.c");
    assert_eq!(r["seq"].as_i64().unwrap(), s.seq());
    assert!(s.dir.join("a/b/c/_table.yaml").is_file());
    let m = &s.migrations(json!({}))[0];
    assert_eq!(m["op"], "create_table");
    assert_eq!(m["table"], "a.b.c");
    assert_eq!(m["before"], Value::Null);
    assert_eq!(m["after"]["columns"]["x"]["type"], "text");

    let e = s.refused_nochange(
        "create_table",
        json!({"table": "a.b.c", "columns": {"y": {"type": "text"}}}),
        409,
    );
    assert_eq!(e["code"], "conflict");
    assert_eq!(e["table"], "a.b.c");

    // Bad definitions: each refused naming the column and the rule, nothing written.
    for (cols, col, rule) in [
        (json!({"Bad": {"type": "text"}}), "Bad", "column_name"),
        (json!({"id": {"type": "text"}}), "id", "column_name"),
        (json!({"body": {"type": "text"}}), "body", "column_name"),
        (json!({"s": {"type": "enum"}}), "s", "values"),
        (json!({"s": {"type": "enum", "values": []}}), "s", "values"),
        (
            json!({"s": {"type": "text", "values": ["a"]}}),
            "s",
            "values",
        ),
        (json!({"l": {"type": "link"}}), "l", "table"),
        (
            json!({"l": {"type": "link", "table": "no.such.table"}}),
            "l",
            "table",
        ),
        (
            json!({"l": {"type": "link", "table": "../x"}}),
            "l",
            "table",
        ),
        (
            json!({"l": {"type": "text", "table": "a.b.c"}}),
            "l",
            "table",
        ),
        (
            json!({"p": {"type": "integer", "pattern": "x"}}),
            "p",
            "pattern",
        ),
        (
            json!({"p": {"type": "text", "pattern": "("}}),
            "p",
            "pattern",
        ),
        (
            json!({"u": {"type": "list", "unique": true}}),
            "u",
            "unique",
        ),
        (json!({"b": {"type": "boolean", "min": 0}}), "b", "min"),
        (json!({"n": {"type": "integer", "max": "ten"}}), "n", "max"),
        (
            json!({"d": {"type": "date", "min": "yesterday"}}),
            "d",
            "min",
        ),
        (
            json!({"d": {"type": "integer", "default": "x"}}),
            "d",
            "default",
        ),
        (
            json!({"d": {"type": "integer", "max": 5, "default": 6}}),
            "d",
            "default",
        ),
        (
            json!({"d": {"type": "enum", "values": ["a"], "default": "b"}}),
            "d",
            "default",
        ),
    ] {
        let e = s.refused_nochange(
            "create_table",
            json!({"table": "x.y.z", "columns": cols.clone()}),
            400,
        );
        assert_eq!(e["column"], col, "{cols}: {e}");
        assert_eq!(e["rule"], rule, "{cols}: {e}");
        assert_eq!(e["table"], "x.y.z", "{cols}: {e}");
    }
    // Not a known type, an unknown constraint: the arguments do not parse; the error names the
    // field (its path) in the words of JSON, not of Rust.
    for (cols, field, says) in [
        (
            json!({"x": {"type": "money"}}),
            "columns.x.type",
            "expected one of `text`",
        ),
        (
            json!({"x": {"type": "text", "color": "red"}}),
            "columns.x.color",
            "unknown field `color`",
        ),
        (json!({"x": "text"}), "columns.x", "expected an object"),
        (
            json!({"x": {"type": "text", "required": "yes"}}),
            "columns.x.required",
            "expected a boolean",
        ),
    ] {
        let e = s.refused_nochange(
            "create_table",
            json!({"table": "x.y.z", "columns": cols}),
            400,
        );
        assert_eq!(e["rule"], "arguments", "{e}");
        assert_eq!(e["column"], field, "{e}");
        let m = e["message"].as_str().unwrap();
        assert!(m.contains(says) && !m.contains("struct "), "{e}");
    }
    let e = s.refused_nochange(
        "select_rows",
        json!({"table": "x.y.z", "limit": "ten"}),
        400,
    );
    assert_eq!(e["column"], "limit", "{e}");
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .ends_with("expected an integer"),
        "{e}"
    );
    assert!(!s.dir.join("x").exists());
    assert_eq!(
        s.ok("list_tables", json!({}))["tables"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
}

#[test]
fn alter_table_add_drop_rename_change() {
    let s = Server::start();
    create_tasks(&s);
    s.ok(
        "insert_row",
        json!({"table": TASKS, "id": "a", "values": {"title": "A", "estimate": 3, "tags": ["x"]}}),
    );
    s.ok(
        "insert_row",
        json!({"table": TASKS, "id": "b", "values": {"title": "B", "estimate": 50}}),
    );

    // Add: a required column needs a default, which existing rows receive (in their files too).
    s.refused_unchanged(
        "alter_table",
        json!({"table": TASKS, "add": {"prio": {"type": "integer", "required": true}}}),
        422,
        Some("prio"),
        "required",
    );
    let r = s.ok(
        "alter_table",
        json!({"table": TASKS, "add": {"prio": {"type": "integer", "required": true, "default": 2}}, "description": "Renamed"}),
    );
    assert_eq!(r["table"], TASKS);
    // The answered seq is the alteration's own migration; each rewritten row follows it.
    let seq = r["seq"].as_i64().unwrap();
    assert_eq!(s.seq(), seq + 2);
    let ms = s.migrations(json!({"limit": 3}));
    assert_eq!(ms[2]["seq"], seq);
    assert_eq!(ms[2]["op"], "alter_table");
    assert_eq!(ms[2]["row"], Value::Null);
    assert_eq!(ms[2]["after"]["rows_changed"], 2);
    assert_eq!(ms[2]["before"]["description"], "Things to do");
    let mut rows: Vec<&str> = ms[..2].iter().map(|m| m["row"].as_str().unwrap()).collect();
    rows.sort();
    assert_eq!(rows, ["a", "b"]);
    assert!(
        ms[..2]
            .iter()
            .all(|m| m["op"] == "alter_table" && m["after"]["values"]["prio"] == 2)
    );
    let row = s.ok("get_row", json!({"table": TASKS, "id": "a"}));
    assert_eq!(row["values"]["prio"], 2);
    assert_eq!(
        row["version"], 2,
        "a row whose values changed gets a new version"
    );
    assert!(
        std::fs::read_to_string(s.row_path(TASKS, "a"))
            .unwrap()
            .contains("prio: 2")
    );
    let d = s.ok("describe_table", json!({"table": TASKS}));
    assert_eq!(d["description"], "Renamed");
    assert_eq!(
        d["columns"]["prio"],
        json!({"type": "integer", "required": true, "default": 2})
    );
    // New rows get the default; the column works in selects.
    s.ok(
        "insert_row",
        json!({"table": TASKS, "id": "c", "values": {"title": "C", "prio": 7}}),
    );
    assert_eq!(w(&s, "prio", "=", json!(2)), ["a", "b"]);

    // Rename: values follow the new name, in files too.
    s.ok(
        "alter_table",
        json!({"table": TASKS, "rename": {"estimate": "effort"}}),
    );
    assert_eq!(
        s.ok("get_row", json!({"table": TASKS, "id": "b"}))["values"]["effort"],
        50
    );
    let text = std::fs::read_to_string(s.row_path(TASKS, "b")).unwrap();
    assert!(
        text.contains("effort: 50") && !text.contains("estimate"),
        "{text}"
    );
    assert_eq!(w(&s, "effort", ">", json!(10)), ["b"]);
    s.refused(
        "select_rows",
        json!({"table": TASKS, "where": [{"column": "estimate", "op": "=", "value": 1}]}),
        400,
    );

    // Change: refused, naming the row, when an existing row would break; nothing changes.
    let e = s.refused_unchanged(
        "alter_table",
        json!({"table": TASKS, "change": {"effort": {"type": "integer", "max": 10}}}),
        422,
        Some("effort"),
        "max",
    );
    assert!(e["message"].as_str().unwrap().contains("row b"), "{e}");
    let e = s.refused_unchanged(
        "alter_table",
        json!({"table": TASKS, "change": {"title": {"type": "integer"}}}),
        422,
        Some("title"),
        "type",
    );
    assert!(e["message"].as_str().unwrap().contains("row a"), "{e}");
    s.refused_unchanged(
        "alter_table",
        json!({"table": TASKS, "change": {"effort": {"type": "integer", "unique": true}, "title": {"type": "text", "unique": true}}, "add": {"dup": {"type": "text", "unique": true, "default": "same"}}}),
        422,
        Some("dup"),
        "unique",
    );
    // A change that fits every row is accepted and enforced from then on.
    s.ok(
        "alter_table",
        json!({"table": TASKS, "change": {"effort": {"type": "number", "max": 60}}}),
    );
    s.refused_unchanged(
        "insert_row",
        json!({"table": TASKS, "values": {"title": "D", "effort": 60.5}}),
        422,
        Some("effort"),
        "max",
    );
    s.ok(
        "insert_row",
        json!({"table": TASKS, "id": "d", "values": {"title": "D", "effort": 59.5}}),
    );

    // Drop: the values leave every row and file.
    s.ok("alter_table", json!({"table": TASKS, "drop": ["tags"]}));
    assert!(
        s.ok("get_row", json!({"table": TASKS, "id": "a"}))["values"]
            .get("tags")
            .is_none()
    );
    assert!(
        !std::fs::read_to_string(s.row_path(TASKS, "a"))
            .unwrap()
            .contains("tags")
    );
    s.refused_unchanged(
        "insert_row",
        json!({"table": TASKS, "values": {"title": "E", "tags": ["x"]}}),
        422,
        Some("tags"),
        "unknown_column",
    );

    // Mistakes in the alteration itself.
    for (args, col) in [
        (json!({"table": TASKS, "drop": ["nope"]}), "nope"),
        (json!({"table": TASKS, "rename": {"nope": "other"}}), "nope"),
        (
            json!({"table": TASKS, "rename": {"title": "effort"}}),
            "effort",
        ),
        (
            json!({"table": TASKS, "change": {"nope": {"type": "text"}}}),
            "nope",
        ),
        (
            json!({"table": TASKS, "add": {"title": {"type": "text"}}}),
            "title",
        ),
    ] {
        let e = s.refused_nochange("alter_table", args.clone(), 400);
        assert_eq!(e["column"], col, "{args}: {e}");
        assert_eq!(e["rule"], "alter_table", "{args}: {e}");
    }
    let e = s.refused_nochange(
        "alter_table",
        json!({"table": TASKS, "rename": {"title": "Body"}}),
        400,
    );
    assert_eq!(e["rule"], "column_name");
    s.refused_nochange(
        "alter_table",
        json!({"table": "work.crm.nope", "drop": ["x"]}),
        404,
    );
}

#[test]
fn drop_table_removes_its_folder_unless_linked() {
    let s = Server::start();
    create_tasks(&s);
    s.ok(
        "insert_row",
        json!({"table": TASKS, "id": "a", "values": {"title": "A"}}),
    );
    // People are linked from tasks: refused.
    let e = s.refused_nochange("drop_table", json!({"table": PEOPLE}), 409);
    assert_eq!(e["table"], PEOPLE);
    let r = s.ok("drop_table", json!({"table": TASKS}));
    assert_eq!(r["table"], TASKS);
    assert_eq!(r["seq"].as_i64().unwrap(), s.seq());
    assert!(!s.dir.join("work/crm/tasks").exists());
    assert!(s.dir.join("work/crm/people/_table.yaml").exists());
    s.refused("describe_table", json!({"table": TASKS}), 404);
    s.refused("select_rows", json!({"table": TASKS}), 404);
    assert_eq!(
        s.ok("search_notes", json!({"query": "A"}))["hits"],
        json!([])
    );
    // Now people can go, and the empty parent folders with them.
    s.ok("drop_table", json!({"table": PEOPLE}));
    assert!(!s.dir.join("work").exists());
    assert_eq!(s.ok("list_tables", json!({}))["tables"], json!([]));
    s.refused("drop_table", json!({"table": PEOPLE}), 404);
    // The name is free again.
    s.ok(
        "create_table",
        json!({"table": TASKS, "columns": {"n": {"type": "integer"}}}),
    );
    s.ok(
        "insert_row",
        json!({"table": TASKS, "id": "a", "values": {"n": 1}}),
    );
    assert_eq!(
        s.ok("get_row", json!({"table": TASKS, "id": "a"}))["values"],
        json!({"n": 1})
    );
}

#[test]
fn rebuild_index_op_and_index_deleted_while_stopped() {
    let s = Server::start();
    create_tasks(&s);
    select_fixture_rows(&s);
    s.ok(
        "update_row",
        json!({"table": TASKS, "id": "a", "values": {"estimate": 4}}),
    );
    let before_rows = s.ok(
        "select_rows",
        json!({"table": TASKS, "columns": ["title", "estimate", "tags", "body"]}),
    );
    let before_search = s.ok("search_notes", json!({"query": "report"}));
    let seq = s.seq();

    let r = s.ok("rebuild_index", json!({}));
    assert_eq!(r["tables"], 2);
    assert_eq!(r["rows"], 7, "5 tasks and 2 people");
    assert_eq!(r["hand_edits"], 0);
    assert_eq!(
        s.ok(
            "select_rows",
            json!({"table": TASKS, "columns": ["title", "estimate", "tags", "body"]})
        ),
        before_rows
    );
    assert_eq!(
        s.ok("search_notes", json!({"query": "report"})),
        before_search
    );
    assert_eq!(s.seq(), seq, "a rebuild with no hand edit journals nothing");

    // Delete the index while stopped: the restart rebuilds it from the files.
    let mut s = s;
    s.stop();
    assert!(remove_index(&s.dir) >= 1);
    let s = s.restart();
    assert!(s.dir.join(".datanotes/index.db").exists());
    assert_eq!(
        s.ok(
            "select_rows",
            json!({"table": TASKS, "columns": ["title", "estimate", "tags", "body"]})
        ),
        before_rows,
        "versions included"
    );
    assert_eq!(
        s.ok("search_notes", json!({"query": "report"})),
        before_search
    );
    assert_eq!(s.ok("describe_table", json!({"table": PEOPLE}))["rows"], 2);
    assert_eq!(s.seq(), seq, "rebuilding journals nothing");
    // And writes go on, with versions continuing.
    let r = s.ok(
        "update_row",
        json!({"table": TASKS, "id": "a", "values": {"estimate": 6}, "expect_version": 2}),
    );
    assert_eq!(r["version"], 3);
    assert_eq!(r["seq"].as_i64().unwrap(), seq + 1);
}
