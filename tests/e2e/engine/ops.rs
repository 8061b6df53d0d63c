//! Every operation of the catalog, end to end: through the real server and the real files.

use crate::kit::*;
use serde_json::{Value, json};

fn insert(s: &Server, values: Value, body: &str) -> Value {
    s.ok(
        "insert_row",
        json!({"table": TASKS, "values": values, "body": body}),
    )
}

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

/// The tasks table with rows for the select tests: ids a..e.
fn select_fixture(s: &Server) {
    create_tasks(s);
    select_fixture_rows(s);
}

fn select_fixture_rows(s: &Server) {
    for (id, title, est, score, done, due, at, tags, owner) in [
        (
            "a",
            "Alpha report",
            Some(1),
            Some(0.5),
            Some(true),
            Some("2026-01-10"),
            Some("2026-01-10T08:00:00Z"),
            Some(json!(["home", "work"])),
            Some("ada"),
        ),
        (
            "b",
            "beta Review",
            Some(5),
            Some(2.25),
            Some(false),
            Some("2026-02-01"),
            Some("2026-01-10T09:00:00+02:00"),
            Some(json!(["work"])),
            Some("alan"),
        ),
        (
            "c",
            "Gamma",
            Some(5),
            None,
            None,
            Some("2025-12-31"),
            None,
            Some(json!([])),
            None,
        ),
        (
            "d",
            "Delta review notes",
            Some(10),
            Some(-1.0),
            Some(true),
            None,
            Some("2026-03-01T00:00:00Z"),
            None,
            Some("ada"),
        ),
        (
            "e",
            "Epsilon",
            None,
            Some(7.0),
            Some(false),
            Some("2026-06-30"),
            Some("2025-06-30T23:59:59Z"),
            Some(json!(["homework"])),
            None,
        ),
    ] {
        let mut v = json!({"title": title});
        let o = v.as_object_mut().unwrap();
        if let Some(x) = est {
            o.insert("estimate".into(), json!(x));
        }
        if let Some(x) = score {
            o.insert("score".into(), json!(x));
        }
        if let Some(x) = done {
            o.insert("done".into(), json!(x));
        }
        if let Some(x) = due {
            o.insert("due".into(), json!(x));
        }
        if let Some(x) = at {
            o.insert("at".into(), json!(x));
        }
        if let Some(x) = tags {
            o.insert("tags".into(), x);
        }
        if let Some(x) = owner {
            o.insert("owner".into(), json!(x));
        }
        s.ok(
            "insert_row",
            json!({"table": TASKS, "id": id, "values": v, "body": format!("body of {id}")}),
        );
    }
}

fn w(s: &Server, column: &str, op: &str, value: Value) -> Vec<String> {
    s.ids(json!({"table": TASKS, "where": [{"column": column, "op": op, "value": value}]}))
}

#[test]
fn select_where_operators() {
    let s = Server::start();
    select_fixture(&s);
    // Integers.
    assert_eq!(w(&s, "estimate", "=", json!(5)), ["b", "c"]);
    assert_eq!(
        w(&s, "estimate", "!=", json!(5)),
        ["a", "d", "e"],
        "!= keeps rows without a value"
    );
    assert_eq!(w(&s, "estimate", "<", json!(5)), ["a"]);
    assert_eq!(w(&s, "estimate", "<=", json!(5)), ["a", "b", "c"]);
    assert_eq!(w(&s, "estimate", ">", json!(5)), ["d"]);
    assert_eq!(w(&s, "estimate", ">=", json!(5)), ["b", "c", "d"]);
    assert_eq!(w(&s, "estimate", "in", json!([1, 10])), ["a", "d"]);
    assert_eq!(w(&s, "estimate", "in", json!([])), Vec::<String>::new());
    assert_eq!(w(&s, "estimate", "=", Value::Null), ["e"]);
    assert_eq!(w(&s, "estimate", "!=", Value::Null), ["a", "b", "c", "d"]);
    // Numbers.
    assert_eq!(w(&s, "score", ">", json!(0.5)), ["b", "e"]);
    assert_eq!(w(&s, "score", "<", json!(0)), ["d"]);
    assert_eq!(w(&s, "score", "=", json!(2.25)), ["b"]);
    // Booleans.
    assert_eq!(w(&s, "done", "=", json!(true)), ["a", "d"]);
    assert_eq!(w(&s, "done", "=", json!(false)), ["b", "e"]);
    // Dates and datetimes (compared in UTC).
    assert_eq!(w(&s, "due", "<", json!("2026-01-01")), ["c"]);
    assert_eq!(w(&s, "due", ">=", json!("2026-02-01")), ["b", "e"]);
    assert_eq!(
        w(&s, "at", "<", json!("2026-01-10T08:00:00Z")),
        ["b", "e"],
        "09:00+02:00 is 07:00Z"
    );
    assert_eq!(w(&s, "at", "=", json!("2026-01-10T07:00:00Z")), ["b"]);
    assert_eq!(w(&s, "at", ">", json!("2026-01-10T09:00:00+01:00")), ["d"]);
    // Text and enum.
    assert_eq!(w(&s, "title", "=", json!("Gamma")), ["c"]);
    assert_eq!(
        w(&s, "title", "contains", json!("REVIEW")),
        ["b", "d"],
        "contains on text ignores case"
    );
    assert_eq!(
        w(&s, "status", "=", json!("todo")),
        ["a", "b", "c", "d", "e"]
    );
    assert_eq!(
        w(&s, "status", "in", json!(["done", "doing"])),
        Vec::<String>::new()
    );
    assert_eq!(w(&s, "owner", "=", json!("ada")), ["a", "d"]);
    assert_eq!(w(&s, "id", "in", json!(["c", "a", "zz"])), ["a", "c"]);
    // Lists: contains is item membership, not substring.
    assert_eq!(w(&s, "tags", "contains", json!("work")), ["a", "b"]);
    assert_eq!(w(&s, "tags", "contains", json!("home")), ["a"]);
    assert_eq!(
        w(&s, "tags", "contains", json!("hom")),
        Vec::<String>::new()
    );
    // Several conditions: all must hold.
    assert_eq!(
        s.ids(json!({"table": TASKS, "where": [
            {"column": "done", "op": "=", "value": true},
            {"column": "estimate", "op": ">", "value": 1}
        ]})),
        ["d"]
    );

    // Bad conditions are refused, naming the column.
    for (cond, col) in [
        (json!({"column": "nope", "op": "=", "value": 1}), "nope"),
        (
            json!({"column": "estimate", "op": "like", "value": 1}),
            "estimate",
        ),
        (
            json!({"column": "estimate", "op": "in", "value": 1}),
            "estimate",
        ),
        (
            json!({"column": "estimate", "op": "=", "value": [1]}),
            "estimate",
        ),
        (
            json!({"column": "estimate", "op": "=", "value": {"a": 1}}),
            "estimate",
        ),
    ] {
        let e = s.refused("select_rows", json!({"table": TASKS, "where": [cond]}), 400);
        assert_error_shape(&e);
        assert_eq!(e["column"], col, "{e}");
        assert_eq!(e["rule"], "where", "{e}");
    }
}

#[test]
fn select_order_limit_offset_columns_total() {
    let s = Server::start();
    select_fixture(&s);
    let q = |extra: Value| {
        let mut a = json!({"table": TASKS});
        for (k, v) in extra.as_object().unwrap() {
            a[k] = v.clone();
        }
        s.ids(a)
    };
    assert_eq!(q(json!({})), ["a", "b", "c", "d", "e"]);
    assert_eq!(
        q(json!({"order_by": [{"column": "estimate", "dir": "desc"}]})),
        ["d", "b", "c", "a", "e"],
        "ties by id, nulls last when descending"
    );
    assert_eq!(
        q(json!({"order_by": [{"column": "estimate"}, {"column": "id", "dir": "desc"}]})),
        ["e", "a", "c", "b", "d"]
    );
    assert_eq!(
        q(json!({"order_by": [{"column": "title", "dir": "asc"}]})),
        ["a", "d", "e", "c", "b"],
        "text orders by code point"
    );
    assert_eq!(
        q(
            json!({"order_by": [{"column": "due", "dir": "asc"}], "where": [{"column": "due", "op": "!=", "value": null}]})
        ),
        ["c", "a", "b", "e"]
    );
    assert_eq!(
        q(
            json!({"order_by": [{"column": "at", "dir": "desc"}], "where": [{"column": "at", "op": "!=", "value": null}]})
        ),
        ["d", "a", "b", "e"]
    );

    // Paging: total counts every match, whatever the page.
    let page = |limit: i64, offset: i64| {
        let v = s.ok(
            "select_rows",
            json!({"table": TASKS, "order_by": [{"column": "id", "dir": "desc"}], "limit": limit, "offset": offset}),
        );
        let ids: Vec<String> = v["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["id"].as_str().unwrap().to_string())
            .collect();
        (ids, v["total"].as_i64().unwrap())
    };
    assert_eq!(page(2, 0), (vec!["e".into(), "d".into()], 5));
    assert_eq!(page(2, 2), (vec!["c".into(), "b".into()], 5));
    assert_eq!(page(2, 4), (vec!["a".into()], 5));
    assert_eq!(page(2, 9), (vec![], 5));
    assert_eq!(page(0, 0), (vec![], 5));
    let v = s.ok(
        "select_rows",
        json!({"table": TASKS, "where": [{"column": "estimate", "op": "=", "value": 5}], "limit": 1}),
    );
    assert_eq!(v["total"], 2);
    assert_eq!(v["rows"].as_array().unwrap().len(), 1);

    // Projection.
    let v = s.ok(
        "select_rows",
        json!({"table": TASKS, "columns": ["title", "estimate"], "limit": 1}),
    );
    assert_eq!(
        v["rows"],
        json!([{"id": "a", "version": 1, "values": {"title": "Alpha report", "estimate": 1}}])
    );
    let v = s.ok(
        "select_rows",
        json!({"table": TASKS, "columns": ["tags", "body"], "where": [{"column": "id", "op": "=", "value": "a"}]}),
    );
    assert_eq!(
        v["rows"],
        json!([{"id": "a", "version": 1, "values": {"tags": ["home", "work"]}, "body": "body of a"}])
    );
    // Full rows carry every value (and no body unless asked).
    let v = s.ok(
        "select_rows",
        json!({"table": TASKS, "where": [{"column": "id", "op": "=", "value": "b"}]}),
    );
    assert_eq!(
        v["rows"][0]["values"],
        json!({"title": "beta Review", "status": "todo", "estimate": 5, "score": 2.25, "done": false,
               "due": "2026-02-01", "at": "2026-01-10T07:00:00Z", "tags": ["work"], "owner": "alan"})
    );
    assert!(v["rows"][0].get("body").is_none());

    for (args, rule) in [
        (
            json!({"table": TASKS, "order_by": [{"column": "nope"}]}),
            "order_by",
        ),
        (
            json!({"table": TASKS, "order_by": [{"column": "title", "dir": "up"}]}),
            "order_by",
        ),
        (json!({"table": TASKS, "columns": ["nope"]}), "columns"),
        (json!({"table": TASKS, "limit": -1}), "limit"),
        (json!({"table": TASKS, "limit": 10_001}), "limit"),
        (json!({"table": TASKS, "offset": -1}), "offset"),
    ] {
        let e = s.refused("select_rows", args.clone(), 400);
        assert_eq!(e["rule"], rule, "{args}: {e}");
    }
    s.refused("select_rows", json!({"table": "work.crm.nope"}), 404);
}

#[test]
fn datetimes_order_chronologically_whatever_their_precision() {
    let s = Server::start();
    create_tasks(&s);
    for (id, at) in [
        ("p1", "2026-01-01T10:00:00Z"),
        ("p2", "2026-01-01T10:00:00.500Z"),
        ("p3", "2026-01-01T10:00:01Z"),
    ] {
        s.ok(
            "insert_row",
            json!({"table": TASKS, "id": id, "values": {"title": id, "at": at}}),
        );
    }
    assert_eq!(
        s.ids(json!({"table": TASKS, "order_by": [{"column": "at"}]})),
        ["p1", "p2", "p3"]
    );
    assert_eq!(
        w(&s, "at", ">", json!("2026-01-01T10:00:00Z")),
        ["p2", "p3"]
    );
    assert_eq!(w(&s, "at", "<", json!("2026-01-01T10:00:00.250Z")), ["p1"]);
}

#[test]
fn search_notes_ranks_filters_and_snippets() {
    let s = Server::start();
    create_tasks(&s);
    s.ok(
        "create_table",
        json!({"table": "personal.notes.daily", "columns": {"title": {"type": "text"}}}),
    );
    s.ok(
        "insert_row",
        json!({"table": TASKS, "id": "once", "values": {"title": "Groceries"}, "body": "Remember the zucchini and bread."}),
    );
    s.ok(
        "insert_row",
        json!({"table": TASKS, "id": "many", "values": {"title": "Zucchini recipes", "tags": ["zucchini"]}, "body": "Zucchini soup, zucchini bread, grilled zucchini."}),
    );
    s.ok(
        "insert_row",
        json!({"table": "personal.notes.daily", "id": "n1", "values": {"title": "Garden"}, "body": "The zucchini grew."}),
    );
    s.ok(
        "insert_row",
        json!({"table": TASKS, "id": "none", "values": {"title": "Nothing here"}, "body": "bread only"}),
    );

    let hits = s.ok("search_notes", json!({"query": "zucchini"}))["hits"].clone();
    let hits = hits.as_array().unwrap();
    assert_eq!(hits.len(), 3, "{hits:?}");
    assert_eq!(
        hits[0]["id"], "many",
        "the densest note ranks first: {hits:?}"
    );
    assert_eq!(hits[0]["table"], TASKS);
    let scores: Vec<f64> = hits.iter().map(|h| h["score"].as_f64().unwrap()).collect();
    assert!(
        scores.windows(2).all(|w| w[0] >= w[1]),
        "scores descend: {scores:?}"
    );
    for h in hits {
        let snip = h["snippet"].as_str().unwrap().to_lowercase();
        assert!(
            snip.contains("**zucchini**"),
            "snippet marks the match: {h}"
        );
    }

    // All words must appear.
    let hits = s.ok("search_notes", json!({"query": "zucchini bread"}))["hits"].clone();
    let mut ids: Vec<&str> = hits
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["id"].as_str().unwrap())
        .collect();
    ids.sort();
    assert_eq!(ids, ["many", "once"]);

    // Only in some tables.
    let hits = s.ok(
        "search_notes",
        json!({"query": "zucchini", "tables": ["personal.notes.daily"]}),
    )["hits"]
        .clone();
    assert_eq!(
        hits.as_array()
            .unwrap()
            .iter()
            .map(|h| (h["table"].clone(), h["id"].clone()))
            .collect::<Vec<_>>(),
        [(json!("personal.notes.daily"), json!("n1"))]
    );
    // Limit.
    let hits = s.ok("search_notes", json!({"query": "zucchini", "limit": 1}))["hits"].clone();
    assert_eq!(hits.as_array().unwrap().len(), 1);
    // Query syntax is never interpreted.
    let hits = s.ok("search_notes", json!({"query": "zucchini\" * (bread) ^"}))["hits"].clone();
    assert_eq!(hits.as_array().unwrap().len(), 2);
    assert_eq!(
        s.ok("search_notes", json!({"query": "  ...  "}))["hits"],
        json!([])
    );
    // An unknown table is refused.
    s.refused(
        "search_notes",
        json!({"query": "x", "tables": ["a.b.nope"]}),
        404,
    );

    // Search follows updates and deletes.
    s.ok("delete_row", json!({"table": TASKS, "id": "many"}));
    s.ok(
        "update_row",
        json!({"table": TASKS, "id": "once", "body": "Nothing green."}),
    );
    let hits = s.ok("search_notes", json!({"query": "zucchini"}))["hits"].clone();
    assert_eq!(
        hits.as_array()
            .unwrap()
            .iter()
            .map(|h| h["id"].clone())
            .collect::<Vec<_>>(),
        [json!("n1")]
    );
}

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
