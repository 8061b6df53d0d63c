//! The semantic index: kill -9 during a rebuild or a catch-up.

use super::*;

// ---- the semantic index ----

/// The semantic index: `kill -9` during a rebuild, and during the
/// catch-up after a burst; after a restart the index holds every row once, at its current
/// version, and catches up by itself.
#[test]
fn kill_9_during_a_semantic_rebuild_or_catch_up_leaves_a_consistent_index() {
    let s = Server::start_semantic(&[]);
    notes_table(&s);
    bulk_long(&s, 600, 8, "k", 12);
    s.indexed();
    // During a rebuild.
    let mut s = s;
    std::thread::scope(|sc| {
        let url = s.url.clone();
        let token = s.token.clone();
        sc.spawn(move || {
            let _ = reqwest::blocking::Client::new()
                .post(format!("{url}/datanotes/rebuild_semantic_index/"))
                .bearer_auth(token)
                .json(&json!({}))
                .send();
        });
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while s.semantic()["state"] != "building" {
            assert!(
                std::time::Instant::now() < deadline,
                "the rebuild never ran"
            );
        }
        s.kill();
    });
    let s = s.restart_killed();
    assert_consistent(&s, &[NOTES]);
    // During the catch-up after a burst of writes (updates and deletes among them).
    bulk(&s, 300, 8, "k2");
    for i in 0..50 {
        s.ok(
            "update_row",
            json!({"table": NOTES, "id": format!("k-{i}"), "body": format!("Changed {i}: about the sea")}),
        );
        s.ok(
            "delete_row",
            json!({"table": NOTES, "id": format!("k-{}", 100 + i)}),
        );
    }
    let s = s.restart_killed();
    assert_consistent(&s, &[NOTES]);
    let v = search(
        &s,
        json!({"query": "the ocean", "mode": "semantic", "limit": 3}),
    );
    assert!(ids(&v).iter().all(|id| id.starts_with("k-")), "{v}");
    assert_eq!(v["hits"][0]["version"], 2, "{v}");
}
