//! `select_rows` (operators, order, limits, columns, datetimes) and `search_notes`.

use super::*;

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
