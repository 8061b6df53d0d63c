//! Names that could become paths (tables, row ids, columns) are refused, and nothing is
//! created outside the folder.

use super::*;

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
