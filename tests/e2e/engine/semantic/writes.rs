//! The index kept fresh: every kind of write reaches it, and a burst of writes is caught up
//! with, its lag reported.

use super::*;

/// Every kind of write reaches the index: the hits name the version they were computed from.
#[test]
fn every_kind_of_write_reaches_the_index() {
    let s = Server::start_semantic(&[]);
    seed(&s);
    s.indexed();
    let first = |q: &str| -> Value {
        let v = search(&s, json!({"query": q, "mode": "semantic", "limit": 1}));
        v["hits"][0].clone()
    };
    // Update: the new text is found, at the new version.
    s.ok(
        "update_row",
        json!({"table": NOTES, "id": "bike", "body": "Book a flight to Lisbon for the conference."}),
    );
    s.indexed();
    let h = first("airline tickets for a trip to Portugal");
    assert_eq!(
        (h["id"].as_str(), h["version"].as_i64()),
        (Some("bike"), Some(2)),
        "{h}"
    );
    // Delete: gone; undo brings it back.
    s.ok("delete_row", json!({"table": NOTES, "id": "bike"}));
    s.indexed();
    assert_ne!(
        first("airline tickets for a trip to Portugal")["id"],
        "bike"
    );
    let seq = s.seq();
    s.ok("undo_migration", json!({"seq": seq}));
    s.indexed();
    assert_eq!(
        first("airline tickets for a trip to Portugal")["id"],
        "bike"
    );
    // A hand edit (the watcher journals it).
    write_by_hand(
        &s.row_path(NOTES, "taxes"),
        "---\ntitle: Garden\n---\nPlant tomatoes and basil in the raised beds.\n",
    );
    eventually("the hand edit is journaled", || {
        s.ok("get_row", json!({"table": NOTES, "id": "taxes"}))["version"] == 2
    });
    s.indexed();
    assert_eq!(first("vegetable gardening")["id"], "taxes");
    // Restore: back to version 1's text.
    let m = s.migrations(json!({"table": NOTES}));
    let insert = m
        .iter()
        .find(|m| m["op"] == "insert" && m["row"] == "taxes")
        .unwrap()["seq"]
        .clone();
    s.ok(
        "restore",
        json!({"table": NOTES, "id": "taxes", "seq": insert}),
    );
    s.indexed();
    assert_eq!(first("income tax paperwork")["id"], "taxes");
    // alter_table: the table leaves the index, then comes back from its title alone.
    s.ok("alter_table", json!({"table": NOTES, "semantic": false}));
    s.indexed();
    let d = s.ok("describe_table", json!({"table": NOTES}));
    assert_eq!(d["semantic"]["enabled"], false, "{d}");
    assert_eq!(s.semantic()["rows"], 0);
    let yaml = std::fs::read_to_string(s.dir.join("personal/notes/misc/_table.yaml")).unwrap();
    assert!(yaml.contains("semantic: false"), "{yaml}");
    s.ok(
        "alter_table",
        json!({"table": NOTES, "semantic": {"columns": ["title"]}, "rename": {"title": "name"}}),
    );
    s.indexed();
    let d = s.ok("describe_table", json!({"table": NOTES}));
    assert_eq!(d["semantic"]["columns"], json!(["name"]), "{d}");
    assert_eq!(s.semantic()["rows"], 4);
    // drop_table: every row leaves; undo brings them back.
    s.ok("drop_table", json!({"table": NOTES}));
    s.indexed();
    assert_eq!(s.semantic()["rows"], 0);
    let seq = s.seq();
    s.ok("undo_migration", json!({"seq": seq}));
    s.indexed();
    assert_eq!(s.semantic()["rows"], 4);
}

/// A burst of 10,000 writes: the index catches up, and says how far behind it was.
#[test]
fn a_burst_of_writes_is_caught_up_with_its_lag_reported() {
    let s = Server::start_semantic(&[]);
    notes_table(&s);
    s.indexed();
    bulk(&s, 10_000, 16, "b");
    let st = s.indexed();
    assert_eq!(st["rows"], 10_000, "{st}");
    assert_eq!(st["pending"], 0, "{st}");
    assert_eq!(st["lagMs"], 0, "{st}");
    let max = st["maxLagMs"].as_u64().unwrap();
    assert!(max > 0 && max < 60_000, "{st}");
    let v = search(
        &s,
        json!({"query": "cooking", "mode": "semantic", "limit": 5}),
    );
    assert_eq!(v["pending"], 0);
    assert!(ids(&v).iter().all(|id| id.starts_with("b-")));
}
