//! Malformed requests get JSON errors, oversized bodies a 413; tokens and the actor header at
//! their edges.

use super::*;

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
