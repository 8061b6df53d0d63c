//! `vacuum`: history dropped, restore before it refused, rows whose early history was vacuumed
//! kept, and versions that never go back when the index is rebuilt after it.

use super::*;

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
