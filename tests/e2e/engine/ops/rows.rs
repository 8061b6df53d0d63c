//! Tables listed and described; rows inserted, updated and deleted.

use super::*;

#[test]
fn list_and_describe_tables() {
    let s = Server::start();
    create_tasks(&s);
    insert(&s, json!({"title": "One"}), "");
    insert(&s, json!({"title": "Two"}), "");

    let tables = s.ok("list_tables", json!({}))["tables"].clone();
    assert_eq!(
        tables,
        json!([
            {"table": PEOPLE, "description": "People", "rows": 2},
            {"table": TASKS, "description": "Things to do", "rows": 2},
        ])
    );

    let d = s.ok("describe_table", json!({"table": TASKS}));
    assert_eq!(d["table"], TASKS);
    assert_eq!(d["description"], "Things to do");
    assert_eq!(d["rows"], 2);
    assert_eq!(d["invalid"], json!([]));
    assert_eq!(d["tools"], json!([]));
    let cols = d["columns"].as_object().unwrap();
    let names: Vec<&str> = cols.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        [
            "title", "status", "estimate", "score", "done", "due", "at", "tags", "owner", "code"
        ],
        "columns keep their order"
    );
    assert_eq!(
        cols["title"],
        json!({"type": "text", "required": true, "max": 80})
    );
    assert_eq!(
        cols["status"],
        json!({"type": "enum", "default": "todo", "values": ["todo", "doing", "done"]})
    );
    assert_eq!(
        cols["estimate"],
        json!({"type": "integer", "min": 0, "max": 100})
    );
    assert_eq!(cols["owner"], json!({"type": "link", "table": PEOPLE}));
    assert_eq!(
        cols["code"],
        json!({"type": "text", "unique": true, "pattern": "^[A-Z]{2}-[0-9]+$"})
    );

    // The definition lives in the table's folder.
    let def = std::fs::read_to_string(s.dir.join("work/crm/tasks/_table.yaml")).unwrap();
    assert!(def.contains("estimate:"), "{def}");

    let e = s.refused("describe_table", json!({"table": "work.crm.nope"}), 404);
    assert_eq!(e["code"], "not_found");
    assert_eq!(e["table"], "work.crm.nope");
}

#[test]
fn insert_generates_ids_and_writes_the_file() {
    let s = Server::start();
    create_tasks(&s);
    let seq0 = s.seq();
    let r = insert(
        &s,
        json!({"title": "Buy Oat Milk!", "estimate": 2, "tags": ["home"], "owner": "ada"}),
        "Two litres.\n",
    );
    assert_eq!(r["id"], "buy-oat-milk");
    assert_eq!(r["version"], 1);
    assert!(r["seq"].as_i64().unwrap() > seq0, "{r}");
    assert_eq!(r["seq"].as_i64().unwrap(), s.seq());

    // The same title again gets another id; no title at all gets a random one.
    let r2 = insert(&s, json!({"title": "Buy oat milk"}), "");
    assert_eq!(r2["id"], "buy-oat-milk-2");
    assert!(r2["seq"].as_i64() > r["seq"].as_i64());
    let s_people = s.ok(
        "insert_row",
        json!({"table": PEOPLE, "values": {"name": "!!!"}}),
    );
    let rid = s_people["id"].as_str().unwrap();
    assert!(
        !rid.is_empty() && rid.bytes().all(|b| b.is_ascii_alphanumeric()),
        "{rid}"
    );

    // Explicit id.
    let r3 = s.ok(
        "insert_row",
        json!({"table": TASKS, "id": "t-1", "values": {"title": "x"}}),
    );
    assert_eq!(r3["id"], "t-1");
    // The same id again is a conflict.
    let e = s.refused_unchanged(
        "insert_row",
        json!({"table": TASKS, "id": "t-1", "values": {"title": "y"}}),
        409,
        Some("id"),
        "unique",
    );
    assert_eq!(e["code"], "conflict");

    // The file: front matter in column order with the default filled in, then the body.
    let text = std::fs::read_to_string(s.row_path(TASKS, "buy-oat-milk")).unwrap();
    assert_eq!(
        text,
        "---\ntitle: Buy Oat Milk!\nstatus: todo\nestimate: 2\ntags:\n- home\nowner: ada\n---\nTwo litres.\n"
    );

    let row = s.ok("get_row", json!({"table": TASKS, "id": "buy-oat-milk"}));
    assert_eq!(
        row,
        json!({"id": "buy-oat-milk", "version": 1,
               "values": {"title": "Buy Oat Milk!", "status": "todo", "estimate": 2, "tags": ["home"], "owner": "ada"},
               "body": "Two litres.\n"})
    );
    let e = s.refused("get_row", json!({"table": TASKS, "id": "nope"}), 404);
    assert_eq!(e["code"], "not_found");
}

#[test]
fn update_is_partial_null_clears_and_expect_version_guards() {
    let s = Server::start();
    create_tasks(&s);
    s.ok(
        "insert_row",
        json!({"table": TASKS, "id": "t", "values": {"title": "T", "estimate": 3, "done": false, "tags": ["a"]}, "body": "old"}),
    );
    let r = s.ok(
        "update_row",
        json!({"table": TASKS, "id": "t", "values": {"estimate": 5, "tags": null}, "expect_version": 1}),
    );
    assert_eq!(r["id"], "t");
    assert_eq!(r["version"], 2);
    assert_eq!(r["seq"].as_i64().unwrap(), s.seq());
    let row = s.ok("get_row", json!({"table": TASKS, "id": "t"}));
    assert_eq!(
        row["values"],
        json!({"title": "T", "status": "todo", "estimate": 5, "done": false})
    );
    assert_eq!(row["body"], "old", "the body stays when not given");
    let text = std::fs::read_to_string(s.row_path(TASKS, "t")).unwrap();
    assert!(
        !text.contains("tags"),
        "a cleared column leaves the file: {text}"
    );

    // Only the body.
    let r = s.ok(
        "update_row",
        json!({"table": TASKS, "id": "t", "body": "new body"}),
    );
    assert_eq!(r["version"], 3);
    let row = s.ok("get_row", json!({"table": TASKS, "id": "t"}));
    assert_eq!(row["body"], "new body");
    assert_eq!(row["values"]["estimate"], 5);

    // A stale version is a conflict and changes nothing.
    let e = s.refused_unchanged(
        "update_row",
        json!({"table": TASKS, "id": "t", "values": {"estimate": 9}, "expect_version": 2}),
        409,
        None,
        "expect_version",
    );
    assert_eq!(e["code"], "conflict");
    assert_eq!(e["table"], TASKS);
    assert_eq!(
        s.ok("get_row", json!({"table": TASKS, "id": "t"}))["values"]["estimate"],
        5
    );
    // Clearing a required column is refused.
    s.refused_unchanged(
        "update_row",
        json!({"table": TASKS, "id": "t", "values": {"title": null}}),
        422,
        Some("title"),
        "required",
    );
    // A missing row.
    let e = s.refused(
        "update_row",
        json!({"table": TASKS, "id": "nope", "values": {"estimate": 1}}),
        404,
    );
    assert_eq!(e["code"], "not_found");
}

#[test]
fn delete_removes_the_file_and_respects_links() {
    let s = Server::start();
    create_tasks(&s);
    s.ok(
        "insert_row",
        json!({"table": TASKS, "id": "t", "values": {"title": "T", "owner": "ada"}}),
    );
    // Ada is linked from t: deleting her is refused.
    let e = s.refused_unchanged(
        "delete_row",
        json!({"table": PEOPLE, "id": "ada"}),
        422,
        Some("id"),
        "link",
    );
    assert!(e["message"].as_str().unwrap().contains("t"), "{e}");
    // Alan is not.
    let r = s.ok("delete_row", json!({"table": PEOPLE, "id": "alan"}));
    assert_eq!(r["seq"].as_i64().unwrap(), s.seq());
    assert!(!s.row_path(PEOPLE, "alan").exists());
    assert!(!s.has_row(PEOPLE, "alan"));
    s.ok("delete_row", json!({"table": TASKS, "id": "t"}));
    s.ok("delete_row", json!({"table": PEOPLE, "id": "ada"}));
    assert_eq!(s.ok("describe_table", json!({"table": PEOPLE}))["rows"], 0);
    let e = s.refused("delete_row", json!({"table": PEOPLE, "id": "ada"}), 404);
    assert_eq!(e["code"], "not_found");
}
