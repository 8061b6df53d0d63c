//! Rows written, changed and deleted by hand, while the server serves and while it is stopped;
//! invalid hand edits are reported, not served.

use super::*;

#[test]
fn a_row_written_by_hand_is_picked_up_and_journaled() {
    let s = Server::start();
    create_tasks(&s);
    let seq = s.seq();
    write_by_hand(
        &s.row_path(TASKS, "by-hand"),
        "---\ntitle: Written in vim\nestimate: 4\ntags: [home, garden]\ndue: 2026-05-01\n---\nSome *markdown*.\n",
    );
    eventually("the new row is served", || get(&s, "by-hand").is_some());
    let row = get(&s, "by-hand").unwrap();
    assert_eq!(row["version"], 1);
    assert_eq!(
        row["values"],
        json!({"title": "Written in vim", "estimate": 4, "tags": ["home", "garden"], "due": "2026-05-01"}),
        "defaults are for inserts; the file is taken as it is"
    );
    assert_eq!(row["body"], "Some *markdown*.\n");
    // One migration for the new file; should there be more, the journal's last entries say
    // which (a CI run once saw two).
    let now = s.seq();
    assert_eq!(
        now,
        seq + 1,
        "migrations since {seq}: {:#}",
        Value::from(s.migrations(json!({"limit": (now - seq).clamp(1, 10)})))
    );
    let m = &s.migrations(json!({"limit": 1}))[0];
    assert_hand_edit_actor(m);
    assert_eq!(m["table"], TASKS);
    assert_eq!(m["row"], "by-hand");
    assert_eq!(m["before"], Value::Null);
    assert_eq!(m["after"]["values"]["title"], "Written in vim");
    assert_eq!(m["after"]["version"], 1);
    // The index follows: selects and search see it.
    assert_eq!(
        s.ids(json!({"table": TASKS, "where": [{"column": "tags", "op": "contains", "value": "garden"}]})),
        ["by-hand"]
    );
    assert_eq!(
        s.ok("search_notes", json!({"query": "vim"}))["hits"][0]["id"],
        "by-hand"
    );
    // And the API works on it like on any row.
    let r = s.ok(
        "update_row",
        json!({"table": TASKS, "id": "by-hand", "values": {"estimate": 5}, "expect_version": 1}),
    );
    assert_eq!(r["version"], 2);
}

#[test]
fn a_row_changed_by_hand_is_picked_up_and_journaled() {
    let s = Server::start();
    create_tasks(&s);
    s.ok(
        "insert_row",
        json!({"table": TASKS, "id": "a", "values": {"title": "A", "estimate": 1}, "body": "one"}),
    );
    let path = s.row_path(TASKS, "a");
    let text = std::fs::read_to_string(&path).unwrap();
    write_by_hand(
        &path,
        &text
            .replace("estimate: 1", "estimate: 42")
            .replace("one", "one, and more"),
    );
    eventually("the change is served", || {
        get(&s, "a").is_some_and(|r| r["values"]["estimate"] == 42)
    });
    let row = get(&s, "a").unwrap();
    assert_eq!(row["version"], 2);
    assert_eq!(row["body"], "one, and more");
    let m = &s.migrations(json!({"limit": 1}))[0];
    assert_hand_edit_actor(m);
    assert_eq!(m["row"], "a");
    assert_eq!(m["before"]["values"]["estimate"], 1);
    assert_eq!(m["before"]["version"], 1);
    assert_eq!(m["after"]["values"]["estimate"], 42);
    assert_eq!(m["after"]["version"], 2);
    // A hand edit can be undone like any migration: the file goes back.
    s.ok("undo_migration", json!({"seq": m["seq"]}));
    assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
    assert_eq!(get(&s, "a").unwrap()["values"]["estimate"], 1);
}

#[test]
fn a_hand_edit_is_picked_up_while_writes_never_stop() {
    let s = Server::start();
    create_tasks(&s);
    s.ok(
        "insert_row",
        json!({"table": TASKS, "id": "edited", "values": {"title": "before"}}),
    );
    // A client writes rows without a pause (the folder is never quiet for the watcher's
    // debounce) while the owner edits a file by hand.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (stop, url, token) = (stop.clone(), s.url.clone(), s.token.clone());
        std::thread::spawn(move || {
            let http = reqwest::blocking::Client::new();
            let mut i = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let r = http
                    .post(format!("{url}/datanotes/insert_row/"))
                    .bearer_auth(&token)
                    .json(&json!({"table": TASKS, "id": format!("w{i}"), "values": {"title": "busy"}}))
                    .send()
                    .expect("insert");
                assert!(r.status().is_success());
                i += 1;
            }
            i
        })
    };
    let seq = s.seq();
    eventually_ok("the writes are going on", || {
        let now = s.seq();
        if now >= seq + 10 {
            Ok(())
        } else {
            Err(format!("seq {now}, was {seq}"))
        }
    });
    let path = s.row_path(TASKS, "edited");
    let text = std::fs::read_to_string(&path).unwrap();
    write_by_hand(&path, &text.replace("before", "edited by hand"));
    eventually("the hand edit is served while the writes go on", || {
        get(&s, "edited").is_some_and(|r| r["values"]["title"] == "edited by hand")
    });
    assert!(!writer.is_finished(), "the writes were still going on");
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let written = writer.join().unwrap();
    assert!(written > 0);
}

#[test]
fn a_same_size_hand_edit_right_after_a_write_is_not_missed() {
    let s = Server::start();
    create_tasks(&s);
    for i in 0..5 {
        let id = format!("r{i}");
        s.ok(
            "insert_row",
            json!({"table": TASKS, "id": id, "values": {"title": "AAAA", "estimate": 10}}),
        );
        // Same length, different content, at once (within the file system's clock tick).
        let path = s.row_path(TASKS, &id);
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, text.replace("AAAA", "BBBB")).unwrap();
    }
    for i in 0..5 {
        let id = format!("r{i}");
        eventually(&format!("the hand edit of {id} is served"), || {
            get(&s, &id).is_some_and(|r| r["values"]["title"] == "BBBB")
        });
    }
}

#[test]
fn an_invalid_hand_edit_is_reported_not_served() {
    let s = Server::start();
    create_tasks(&s);
    s.ok(
        "insert_row",
        json!({"table": TASKS, "id": "a", "values": {"title": "A", "estimate": 1}}),
    );
    s.ok(
        "insert_row",
        json!({"table": TASKS, "id": "b", "values": {"title": "B"}}),
    );
    // A valid row made invalid by hand, and new invalid files of several kinds.
    write_by_hand(
        &s.row_path(TASKS, "a"),
        "---\ntitle: A\nestimate: 1000\n---\n",
    );
    write_by_hand(
        &s.row_path(TASKS, "no-title"),
        "---\nestimate: 3\n---\nbody\n",
    );
    write_by_hand(
        &s.row_path(TASKS, "bad-yaml"),
        "---\ntitle: [unclosed\n---\n",
    );
    write_by_hand(
        &s.row_path(TASKS, "unknown-col"),
        "---\ntitle: x\ncolour: red\n---\n",
    );
    write_by_hand(
        &s.row_path(TASKS, "bad-link"),
        "---\ntitle: x\nowner: nobody\n---\n",
    );
    write_by_hand(&s.row_path(TASKS, "not-closed"), "---\ntitle: x\n");
    eventually("six invalid rows are reported", || invalid(&s).len() == 6);
    let inv = invalid(&s);
    let ids: Vec<&str> = inv.iter().map(|r| r["id"].as_str().unwrap()).collect();
    assert_eq!(
        ids,
        [
            "a",
            "bad-link",
            "bad-yaml",
            "no-title",
            "not-closed",
            "unknown-col"
        ]
    );
    let err = |id: &str| {
        inv.iter().find(|r| r["id"] == id).unwrap()["error"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert!(err("a").contains("estimate"), "{}", err("a"));
    assert!(err("no-title").contains("title"), "{}", err("no-title"));
    assert!(
        err("unknown-col").contains("colour"),
        "{}",
        err("unknown-col")
    );
    assert!(err("bad-link").contains("nobody"), "{}", err("bad-link"));
    assert!(err("bad-yaml").contains("YAML"), "{}", err("bad-yaml"));

    // Not served: not by select, get_row, search; not counted.
    assert_eq!(s.ids(json!({"table": TASKS})), ["b"]);
    assert!(get(&s, "a").is_none());
    assert!(get(&s, "no-title").is_none());
    assert_eq!(s.ok("describe_table", json!({"table": TASKS}))["rows"], 1);
    assert_eq!(
        s.ok("search_notes", json!({"query": "body"}))["hits"],
        json!([])
    );
    // Journaled, each with its error.
    let ms = hand_edits(&s);
    assert_eq!(ms.len(), 6, "{ms:?}");
    for m in &ms {
        assert_hand_edit_actor(m);
        assert!(m["after"]["invalid"].is_string(), "{m}");
    }
    let ma = ms.iter().find(|m| m["row"] == "a").unwrap();
    assert_eq!(
        ma["before"]["values"]["estimate"], 1,
        "what was lost is in the journal"
    );

    // Their ids stay taken; the files stay as they are.
    let e = s.refused_nochange(
        "insert_row",
        json!({"table": TASKS, "id": "no-title", "values": {"title": "x"}}),
        409,
    );
    assert_eq!(e["column"], "id");
    assert_eq!(
        std::fs::read_to_string(s.row_path(TASKS, "no-title")).unwrap(),
        "---\nestimate: 3\n---\nbody\n"
    );
    // Fixing the file by hand brings the row back.
    write_by_hand(
        &s.row_path(TASKS, "a"),
        "---\ntitle: A\nestimate: 100\n---\n",
    );
    eventually("the fixed row is served again", || get(&s, "a").is_some());
    assert_eq!(get(&s, "a").unwrap()["values"]["estimate"], 100);
    // Deleting an invalid row through the API removes its file.
    s.ok("delete_row", json!({"table": TASKS, "id": "bad-yaml"}));
    assert!(!s.row_path(TASKS, "bad-yaml").exists());
    let inv: Vec<Value> = invalid(&s).iter().map(|r| r["id"].clone()).collect();
    assert_eq!(
        inv,
        [
            json!("bad-link"),
            json!("no-title"),
            json!("not-closed"),
            json!("unknown-col")
        ]
    );
    // Still reported after a restart.
    let s = s.restart();
    assert_eq!(invalid(&s).len(), 4, "{:?}", invalid(&s));
    assert_eq!(s.ids(json!({"table": TASKS})), ["a", "b"]);
}

#[test]
fn invalid_rows_stay_invalid_when_the_index_is_rebuilt() {
    let s = Server::start();
    create_tasks(&s);
    s.ok(
        "insert_row",
        json!({"table": TASKS, "id": "ok", "values": {"title": "fine", "code": "AB-1"}}),
    );
    // Invalid on its own (no title), and invalid against other rows (a link to no row, a
    // unique value another row holds).
    write_by_hand(&s.row_path(TASKS, "no-title"), "---\nestimate: 3\n---\n");
    write_by_hand(
        &s.row_path(TASKS, "bad-link"),
        "---\ntitle: x\nowner: nobody\n---\n",
    );
    write_by_hand(
        &s.row_path(TASKS, "dup-code"),
        "---\ntitle: x\ncode: AB-1\n---\n",
    );
    eventually("all three are reported", || invalid(&s).len() == 3);
    let reported = invalid(&s);
    // rebuild_index re-reads every file: what the scan refused, the rebuild must refuse too.
    s.ok("rebuild_index", json!({}));
    assert_eq!(invalid(&s), reported, "after rebuild_index");
    assert_eq!(
        s.ids(json!({"table": TASKS})),
        ["ok"],
        "after rebuild_index"
    );
    // The same when the index is rebuilt at start.
    let mut s = s;
    s.stop();
    assert!(remove_index(&s.dir) >= 1);
    let s = s.restart();
    assert_eq!(invalid(&s), reported, "after a restart without index");
    assert_eq!(
        s.ids(json!({"table": TASKS})),
        ["ok"],
        "after a restart without index"
    );
}

#[test]
fn a_row_deleted_by_hand_is_picked_up_and_journaled() {
    let s = Server::start();
    create_tasks(&s);
    s.ok(
        "insert_row",
        json!({"table": TASKS, "id": "a", "values": {"title": "A gone"}, "body": "findme"}),
    );
    s.ok(
        "insert_row",
        json!({"table": TASKS, "id": "b", "values": {"title": "B"}}),
    );
    std::fs::remove_file(s.row_path(TASKS, "a")).unwrap();
    eventually("the row is gone", || get(&s, "a").is_none());
    assert_eq!(s.ids(json!({"table": TASKS})), ["b"]);
    assert_eq!(
        s.ok("search_notes", json!({"query": "findme"}))["hits"],
        json!([])
    );
    let m = &s.migrations(json!({"limit": 1}))[0];
    assert_hand_edit_actor(m);
    assert_eq!(m["row"], "a");
    assert_eq!(m["after"], Value::Null);
    assert_eq!(m["before"]["values"]["title"], "A gone");
    // Undo brings it back.
    s.ok("undo_migration", json!({"seq": m["seq"]}));
    assert_eq!(get(&s, "a").unwrap()["body"], "findme");
    assert!(s.row_path(TASKS, "a").is_file());
}

#[test]
fn edits_made_while_stopped_are_found_at_restart() {
    let s = Server::start();
    create_tasks(&s);
    for id in ["keep", "change", "remove", "spoil"] {
        s.ok(
            "insert_row",
            json!({"table": TASKS, "id": id, "values": {"title": id}}),
        );
    }
    let mut s = s;
    s.stop();
    write_by_hand(
        &s.row_path(TASKS, "change"),
        "---\ntitle: changed while stopped\nestimate: 7\n---\n",
    );
    std::fs::remove_file(s.row_path(TASKS, "remove")).unwrap();
    write_by_hand(&s.row_path(TASKS, "spoil"), "---\ntitle: 5\n---\n");
    write_by_hand(
        &s.row_path(TASKS, "new"),
        "---\ntitle: new one\n---\nhello\n",
    );
    let s = s.restart();

    // Found before the first request is answered: no waiting.
    assert_eq!(s.ids(json!({"table": TASKS})), ["change", "keep", "new"]);
    assert_eq!(
        get(&s, "change").unwrap()["values"],
        json!({"title": "changed while stopped", "estimate": 7})
    );
    assert_eq!(get(&s, "change").unwrap()["version"], 2);
    assert_eq!(get(&s, "new").unwrap()["body"], "hello\n");
    assert!(get(&s, "remove").is_none());
    let inv = invalid(&s);
    assert_eq!(inv.len(), 1);
    assert_eq!(inv[0]["id"], "spoil");

    let ms = hand_edits(&s);
    let mut seen: Vec<(Option<&str>, Option<&str>)> = ms
        .iter()
        .map(|m| (m["table"].as_str(), m["row"].as_str()))
        .collect();
    seen.sort();
    assert_eq!(
        seen,
        [
            (Some(TASKS), Some("change")),
            (Some(TASKS), Some("new")),
            (Some(TASKS), Some("remove")),
            (Some(TASKS), Some("spoil")),
        ]
    );
    ms.iter().for_each(assert_hand_edit_actor);
    // A second restart finds nothing new.
    let n = s.seq();
    let s = s.restart();
    assert_eq!(s.seq(), n);
}
