//! Hand edits racing API writes, and writes whose file cannot be written.

use super::*;

// ---- hand edits racing API writes, and writes whose file cannot be written ----

/// The journal of one row, oldest first: (op, title after).
fn row_history(s: &Server, id: &str) -> Vec<(String, Value)> {
    let mut h: Vec<(String, Value)> = s
        .migrations(json!({"table": TASKS, "limit": 10000}))
        .into_iter()
        .filter(|m| m["row"] == id)
        .map(|m| {
            (
                m["op"].as_str().unwrap().to_string(),
                m["after"]["values"]["title"].clone(),
            )
        })
        .collect();
    h.reverse();
    h
}

#[test]
fn a_hand_edit_right_before_an_api_write_is_journaled_first() {
    let s = Server::start();
    create_tasks(&s);
    // Other clients keep the writer busy meanwhile.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load: Vec<_> = (0..2)
        .map(|k| {
            let (stop, url, token) = (stop.clone(), s.url.clone(), s.token.clone());
            std::thread::spawn(move || {
                let http = reqwest::blocking::Client::new();
                let mut i = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    http.post(format!("{url}/datanotes/insert_row/"))
                        .bearer_auth(&token)
                        .json(&json!({"table": TASKS, "id": format!("load{k}-{i}"), "values": {"title": "load"}}))
                        .send()
                        .expect("insert");
                    i += 1;
                }
            })
        })
        .collect();
    for i in 0..10 {
        let id = format!("h{i}");
        s.ok(
            "insert_row",
            json!({"table": TASKS, "id": id, "values": {"title": "AAAA", "estimate": 1}}),
        );
        // The owner edits the file (same size: same stat size) and, at once, an agent updates
        // another column of the row without expect_version: both changes stay, in that order.
        let path = s.row_path(TASKS, &id);
        let text = std::fs::read_to_string(&path).unwrap();
        write_by_hand(&path, &text.replace("AAAA", "BBBB"));
        let v = s.ok(
            "update_row",
            json!({"table": TASKS, "id": id, "values": {"estimate": 2}}),
        );
        assert_eq!(
            v["version"], 3,
            "{id}: the hand edit is version 2, the update 3"
        );
        let row = get(&s, &id).unwrap();
        assert_eq!(
            row["values"]["title"], "BBBB",
            "{id}: the hand edit was lost"
        );
        assert_eq!(row["values"]["estimate"], 2);
        let file = std::fs::read_to_string(&path).unwrap();
        assert!(
            file.contains("BBBB") && file.contains("estimate: 2"),
            "{file}"
        );
        assert_eq!(
            row_history(&s, &id),
            [
                ("insert".to_string(), json!("AAAA")),
                ("hand_edit".to_string(), json!("BBBB")),
                ("update".to_string(), json!("BBBB")),
            ],
            "{id}"
        );
    }
    // With expect_version, the write is refused and names the hand edit; the hand edit stays.
    s.ok(
        "insert_row",
        json!({"table": TASKS, "id": "guarded", "values": {"title": "AAAA"}}),
    );
    let path = s.row_path(TASKS, "guarded");
    let text = std::fs::read_to_string(&path).unwrap();
    write_by_hand(&path, &text.replace("AAAA", "CCCC"));
    let e = s.refused(
        "update_row",
        json!({"table": TASKS, "id": "guarded", "values": {"title": "mine"}, "expect_version": 1}),
        409,
    );
    assert!(
        e["message"].as_str().unwrap().contains("edited by hand"),
        "{e}"
    );
    assert_eq!(get(&s, "guarded").unwrap()["values"]["title"], "CCCC");
    assert!(std::fs::read_to_string(&path).unwrap().contains("CCCC"));
    assert_eq!(
        row_history(&s, "guarded"),
        [
            ("insert".to_string(), json!("AAAA")),
            ("hand_edit".to_string(), json!("CCCC"))
        ]
    );
    // A row file made by hand a moment before an insert of the same id: the file wins, the
    // insert is refused, and the hand-made row is journaled.
    write_by_hand(&s.row_path(TASKS, "made"), "---\ntitle: by hand\n---\n");
    s.refused(
        "insert_row",
        json!({"table": TASKS, "id": "made", "values": {"title": "api"}}),
        409,
    );
    assert_eq!(get(&s, "made").unwrap()["values"]["title"], "by hand");
    // An insert whose generated id a hand-made file already has picks another id.
    write_by_hand(&s.row_path(TASKS, "slug-me"), "---\ntitle: slug me\n---\n");
    let v = s.ok(
        "insert_row",
        json!({"table": TASKS, "values": {"title": "Slug me"}}),
    );
    assert_ne!(v["id"], "slug-me");
    // The other order: an API write, then a hand edit at once: the hand edit is journaled too.
    s.ok(
        "update_row",
        json!({"table": TASKS, "id": "h0", "values": {"title": "DDDD"}}),
    );
    let path = s.row_path(TASKS, "h0");
    let text = std::fs::read_to_string(&path).unwrap();
    write_by_hand(&path, &text.replace("DDDD", "EEEE"));
    eventually("the hand edit after the write is journaled", || {
        row_history(&s, "h0").last() == Some(&("hand_edit".to_string(), json!("EEEE")))
    });
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for t in load {
        t.join().unwrap();
    }
}

#[test]
fn a_folder_named_like_a_row_refuses_that_write_only() {
    let s = Server::start();
    create_tasks(&s);
    std::fs::create_dir(s.row_path(TASKS, "blocked")).unwrap();
    let seq = s.seq();
    s.refused(
        "insert_row",
        json!({"table": TASKS, "id": "blocked", "values": {"title": "x"}}),
        409,
    );
    // The folder is reported (journaled once as an invalid hand edit), never written over.
    assert!(s.row_path(TASKS, "blocked").is_dir());
    let new: Vec<Value> = s
        .migrations(json!({"limit": 100}))
        .into_iter()
        .filter(|m| m["seq"].as_i64().unwrap() > seq)
        .collect();
    assert_eq!(new.len(), 1, "{new:?}");
    assert_eq!(
        (&new[0]["op"], &new[0]["row"]),
        (&json!("hand_edit"), &json!("blocked"))
    );
    assert!(new[0]["after"]["invalid"].is_string(), "{new:?}");
    // Other writes go on, the index is rebuilt without inventing anything, and the server
    // restarts with the folder still there.
    s.ok(
        "insert_row",
        json!({"table": TASKS, "id": "fine", "values": {"title": "x"}}),
    );
    let seq = s.seq();
    s.ok("rebuild_index", json!({}));
    let s = s.restart();
    assert!(s.has_row(TASKS, "fine"));
    assert!(
        s.migrations(json!({"limit": 10000}))
            .iter()
            .filter(|m| m["seq"].as_i64().unwrap() > seq)
            .all(|m| m["op"] != "hand_edit" || m["row"] == "blocked"),
        "rows were invented as hand edits"
    );
}

/// Puts a folder where the running server stages the next write of `id` (its temp file
/// `.<id>.md.<pid>.tmp`, beside the row file), so that writing it fails as a full or read-only
/// disk would, for root too and on any filesystem. Answers the obstacle, to remove.
fn block_staging(s: &Server, id: &str) -> std::path::PathBuf {
    let row = s.row_path(TASKS, id);
    let pid = s.child.as_ref().expect("a running server").id();
    let name = row.file_name().unwrap().to_str().unwrap();
    let obstacle = row.with_file_name(format!(".{name}.{pid}.tmp"));
    std::fs::create_dir(&obstacle).unwrap();
    obstacle
}

#[test]
fn a_write_whose_file_cannot_be_written_is_refused_and_changes_nothing() {
    let s = Server::start();
    create_tasks(&s);
    s.ok(
        "insert_row",
        json!({"table": TASKS, "id": "a", "values": {"title": "one"}}),
    );
    let obstacles = [block_staging(&s, "a"), block_staging(&s, "b")];
    let seq = s.seq();
    let e = s.refused(
        "insert_row",
        json!({"table": TASKS, "id": "b", "values": {"title": "two"}}),
        503,
    );
    assert_eq!(
        e["error"]["code"].as_str().or(e["code"].as_str()),
        Some("files_unavailable"),
        "{e}"
    );
    s.refused(
        "update_row",
        json!({"table": TASKS, "id": "a", "values": {"title": "changed"}}),
        503,
    );
    assert_eq!(s.seq(), seq, "a refused write stayed in the journal");
    assert!(!s.has_row(TASKS, "b"));
    assert_eq!(get(&s, "a").unwrap()["values"]["title"], "one");
    assert!(!s.row_path(TASKS, "b").exists());
    for o in obstacles {
        std::fs::remove_dir(o).unwrap();
    }
    s.ok(
        "insert_row",
        json!({"table": TASKS, "id": "b", "values": {"title": "two"}}),
    );
    assert!(s.row_path(TASKS, "b").exists());
    let s = s.restart();
    assert!(s.has_row(TASKS, "b"));
    assert!(hand_edits(&s).is_empty(), "{:?}", hand_edits(&s));
}

#[test]
fn files_behind_the_journal_at_start_do_not_stop_the_server() {
    let mut s = Server::start();
    create_tasks(&s);
    s.ok(
        "insert_row",
        json!({"table": TASKS, "id": "a", "values": {"title": "one"}}),
    );
    s.stop();
    // As after a crash that lost a file the journal holds: the checkpoint is before it, the
    // file is gone, and its folder cannot be written now.
    let j = rusqlite::Connection::open(s.dir.join(".datanotes/journal.db")).unwrap();
    j.execute("UPDATE meta SET value='0' WHERE key='files_seq'", [])
        .unwrap();
    drop(j);
    let path = s.row_path(TASKS, "a");
    std::fs::remove_file(&path).unwrap();
    // A folder where the redo stages the row file (`.a.md.<pid>.tmp`): the redo cannot put it
    // back, for root too and on any filesystem. The pid is the server's own: a shell makes the
    // folder with its `$$`, then becomes the server with `exec`.
    let obstacle = |pid: &str| path.with_file_name(format!(".a.md.{pid}.tmp"));
    let wrapper = s.dir.parent().unwrap().join("serve-with-obstacle.sh");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nmkdir '{}' || exit 1\nexec '{}' \"$@\"\n",
            obstacle("$$").display().to_string().replace("$$", "'$$'"),
            bin().display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    let dir = s.dir.clone();
    let s = Server::launch(Launch::new(&dir).bin(&wrapper), &dir);
    let pid = s.child.as_ref().unwrap().id().to_string();
    assert!(
        obstacle(&pid).is_dir(),
        "the wrapper did not run as the server"
    );
    // It serves reads, refuses writes with the reason, and catches up once the folder is fixed.
    assert!(
        s.ok("list_tables", json!({}))["tables"]
            .as_array()
            .unwrap()
            .len()
            == 2
    );
    let e = s.refused(
        "insert_row",
        json!({"table": PEOPLE, "id": "x", "values": {"name": "X"}}),
        503,
    );
    assert!(
        e["message"].as_str().unwrap().contains("cannot write"),
        "{e}"
    );
    std::fs::remove_dir(obstacle(&pid)).unwrap();
    s.ok(
        "insert_row",
        json!({"table": PEOPLE, "id": "x", "values": {"name": "X"}}),
    );
    assert!(path.is_file(), "the redo did not put the row file back");
    assert_eq!(get(&s, "a").unwrap()["values"]["title"], "one");
}
