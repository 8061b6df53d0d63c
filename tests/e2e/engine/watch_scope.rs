//! The file watcher sees hand edits in every catalog folder, including ones made after the
//! server started, and never mistakes the engine's own writes for hand edits.

use crate::kit::*;
use serde_json::json;

#[test]
fn hand_edits_in_new_and_old_catalogs_are_seen() {
    let s = Server::start();
    // The catalog folder `a` is made by the engine after the watcher started.
    s.ok(
        "create_table",
        json!({"table": "a.b.c", "columns": {"title": {"type": "text"}}}),
    );
    for i in 0..20 {
        s.ok(
            "insert_row",
            json!({"table": "a.b.c", "id": format!("r{i}"), "values": {"title": "by the engine"}}),
        );
    }
    std::fs::write(s.dir.join("a/b/c/y.md"), "---\ntitle: by hand\n---\nbody\n").unwrap();
    eventually("the hand-made row y", || {
        s.call("get_row", json!({"table": "a.b.c", "id": "y"})).0 == 200
    });
    std::fs::write(
        s.dir.join("a/b/c/r3.md"),
        "---\ntitle: changed by hand\n---\n",
    )
    .unwrap();
    eventually("the hand edit of r3", || {
        s.ok("get_row", json!({"table": "a.b.c", "id": "r3"}))["values"]["title"]
            == "changed by hand"
    });
    // A whole catalog made by hand while the server runs.
    std::fs::create_dir_all(s.dir.join("x/y/z")).unwrap();
    std::fs::write(
        s.dir.join("x/y/z/_table.yaml"),
        "columns:\n  title:\n    type: text\n",
    )
    .unwrap();
    std::fs::write(s.dir.join("x/y/z/first.md"), "---\ntitle: one\n---\n").unwrap();
    eventually("the hand-made table x.y.z and its row", || {
        s.call("get_row", json!({"table": "x.y.z", "id": "first"}))
            .0
            == 200
    });
    std::fs::write(s.dir.join("x/y/z/second.md"), "---\ntitle: two\n---\n").unwrap();
    eventually("a later row of x.y.z", || {
        s.call("get_row", json!({"table": "x.y.z", "id": "second"}))
            .0
            == 200
    });
    // A new schema with a table, made by hand inside an existing catalog.
    std::fs::create_dir_all(s.dir.join("a/q/r")).unwrap();
    std::fs::write(
        s.dir.join("a/q/r/_table.yaml"),
        "columns:\n  title:\n    type: text\n",
    )
    .unwrap();
    eventually("the hand-made table a.q.r", || {
        s.call("describe_table", json!({"table": "a.q.r"})).0 == 200
    });
    // Only the hand edits are journaled as such (rows already in a table folder when its
    // definition appears are indexed with it).
    // A last hand edit: once it is served, a hand edit journaled by mistake for what came
    // before would be too.
    std::fs::write(s.dir.join("a/b/c/last.md"), "---\ntitle: last\n---\n").unwrap();
    eventually("the last hand edit", || {
        s.call("get_row", json!({"table": "a.b.c", "id": "last"})).0 == 200
    });
    let m = s.ok("list_migrations", json!({"actor": "hand edit"}));
    let mut rows: Vec<String> = m["migrations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            let row = m["row"].as_str().unwrap_or("-");
            format!("{}/{row}", m["table"].as_str().unwrap())
        })
        .collect();
    rows.sort();
    rows.retain(|r| r != "x.y.z/first");
    assert_eq!(
        rows,
        [
            "a.b.c/last",
            "a.b.c/r3",
            "a.b.c/y",
            "a.q.r/-",
            "x.y.z/-",
            "x.y.z/second"
        ],
        "{m}"
    );
}
