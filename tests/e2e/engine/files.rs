//! The files are the truth: hand edits while serving (the watcher) and while stopped, invalid
//! rows, the index rebuilt from the files, crash recovery, and the file format's round trip.

use crate::kit::*;
use serde_json::{Value, json};
use std::time::Duration;

fn get(s: &Server, id: &str) -> Option<Value> {
    let (st, v) = s.call("get_row", json!({"table": TASKS, "id": id}));
    match st {
        200 => Some(v),
        404 => None,
        _ => panic!("get_row {id}: {st} {v}"),
    }
}

fn invalid(s: &Server) -> Vec<Value> {
    s.ok("describe_table", json!({"table": TASKS}))["invalid"]
        .as_array()
        .unwrap()
        .clone()
}

fn hand_edits(s: &Server) -> Vec<Value> {
    s.migrations(json!({"actor": "hand edit"}))
}

fn assert_hand_edit_actor(m: &Value) {
    assert_eq!(m["op"], "hand_edit", "{m}");
    assert_eq!(m["actor"]["label"], "hand edit", "{m}");
    assert_eq!(m["actor"]["harness"], "hand edit", "{m}");
}

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

#[test]
fn a_table_definition_written_or_changed_by_hand() {
    let s = Server::start();
    create_tasks(&s);
    write_by_hand(
        &s.dir.join("home/books/read/_table.yaml"),
        "description: Books\ncolumns:\n  title:\n    type: text\n    required: true\n  stars:\n    type: integer\n    max: 5\n",
    );
    eventually("the table is served", || {
        s.call("describe_table", json!({"table": "home.books.read"}))
            .0
            == 200
    });
    let d = s.ok("describe_table", json!({"table": "home.books.read"}));
    assert_eq!(d["description"], "Books");
    assert_eq!(d["columns"]["stars"], json!({"type": "integer", "max": 5}));
    let m = &s.migrations(json!({"limit": 1}))[0];
    assert_hand_edit_actor(m);
    assert_eq!(m["table"], "home.books.read");
    assert_eq!(m["row"], Value::Null);
    // Its constraints apply to the API.
    s.refused_unchanged(
        "insert_row",
        json!({"table": "home.books.read", "values": {"title": "Dune", "stars": 6}}),
        422,
        Some("stars"),
        "max",
    );
    s.ok(
        "insert_row",
        json!({"table": "home.books.read", "id": "dune", "values": {"title": "Dune", "stars": 5}}),
    );
    // A broken definition written by hand is not taken: the table keeps its last good one.
    let seq = s.seq();
    write_by_hand(
        &s.dir.join("home/books/read/_table.yaml"),
        "columns:\n  title:\n    type: colour\n",
    );
    // Then a row edit, to know the watcher has looked.
    write_by_hand(
        &s.dir.join("home/books/read/sentinel.md"),
        "---\ntitle: S\n---\n",
    );
    eventually("the sentinel is served", || {
        s.call(
            "get_row",
            json!({"table": "home.books.read", "id": "sentinel"}),
        )
        .0 == 200
    });
    assert_eq!(s.seq(), seq + 1, "only the sentinel was journaled");
    assert_eq!(
        s.ok("describe_table", json!({"table": "home.books.read"}))["columns"]["stars"],
        json!({"type": "integer", "max": 5})
    );
}

#[test]
fn files_that_are_not_rows_are_ignored() {
    let s = Server::start();
    create_tasks(&s);
    let dir = s.row_path(TASKS, "x").parent().unwrap().to_path_buf();
    // (A `*.md` name that is not a row id is reported instead: see the hostile-input tests.)
    for name in [".hidden.md", ".#lock.md", "notes.txt", "README", "x.md.bak"] {
        write_by_hand(&dir.join(name), "---\ntitle: 5\n---\n");
    }
    write_by_hand(&s.dir.join("stray.md"), "---\ntitle: 5\n---\n");
    write_by_hand(&s.dir.join("work/crm/loose.md"), "---\ntitle: 5\n---\n");
    write_by_hand(
        &s.dir.join("work/crm/tasks/sub/deep.md"),
        "---\ntitle: 5\n---\n",
    );
    write_by_hand(&s.dir.join("Bad/Name/here/_table.yaml"), "columns: {}\n");
    let seq = s.seq();
    // A sentinel row: once it is served, the watcher has seen everything written before it.
    write_by_hand(&s.row_path(TASKS, "sentinel"), "---\ntitle: S\n---\n");
    eventually("the sentinel is served", || get(&s, "sentinel").is_some());
    assert_eq!(s.seq(), seq + 1, "only the sentinel was journaled");
    assert_eq!(invalid(&s), Vec::<Value>::new());
    assert_eq!(s.ids(json!({"table": TASKS})), ["sentinel"]);
    let s = s.restart();
    assert_eq!(s.seq(), seq + 1, "nor at restart");
    assert_eq!(invalid(&s), Vec::<Value>::new());
    assert_eq!(
        s.ok("list_tables", json!({}))["tables"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
}

#[test]
fn temporary_files_left_by_a_crash_are_removed_at_start() {
    let mut s = Server::start();
    create_tasks(&s);
    let dir = s.row_path(TASKS, "x").parent().unwrap().to_path_buf();
    let seq = s.seq();
    s.stop();
    // What a server killed between writing a row's temp file and renaming it leaves behind.
    let stale = [".t1.md.4242.tmp", "._table.yaml.4242.tmp"];
    for name in stale {
        write_by_hand(&dir.join(name), "---\ntitle: half\n---\n");
    }
    // Look-alikes that are not ours stay.
    let kept = [".t1.md.tmp", ".notes.x.tmp", "t2.md.4242.tmp"];
    for name in kept {
        write_by_hand(&dir.join(name), "keep\n");
    }
    let s = s.restart();
    for name in stale {
        assert!(!dir.join(name).exists(), "{name} was removed");
    }
    for name in kept {
        assert!(dir.join(name).exists(), "{name} was left alone");
    }
    assert_eq!(s.seq(), seq, "nothing was journaled");
    assert!(s.ids(json!({"table": TASKS})).is_empty());
}

#[test]
fn the_engines_own_writes_are_not_hand_edits() {
    let s = Server::start();
    create_tasks(&s);
    for i in 0..10 {
        s.ok(
            "insert_row",
            json!({"table": TASKS, "id": format!("r{i}"), "values": {"title": "x"}}),
        );
        s.ok(
            "update_row",
            json!({"table": TASKS, "id": format!("r{i}"), "values": {"estimate": i}}),
        );
    }
    s.ok("delete_row", json!({"table": TASKS, "id": "r0"}));
    s.ok(
        "alter_table",
        json!({"table": TASKS, "add": {"p": {"type": "integer", "default": 1}}}),
    );
    s.ok(
        "create_table",
        json!({"table": "a.b.c", "columns": {"x": {"type": "text"}}}),
    );
    s.ok("drop_table", json!({"table": "a.b.c"}));
    s.ok(
        "set_engine_settings",
        json!({"settings": {"default_limit": 50}}),
    );
    let seq = s.seq();
    write_by_hand(&s.row_path(TASKS, "sentinel"), "---\ntitle: S\n---\n");
    eventually("the sentinel is served", || get(&s, "sentinel").is_some());
    let he = hand_edits(&s);
    assert_eq!(he.len(), 1, "{he:?}");
    assert_eq!(he[0]["row"], "sentinel");
    assert_eq!(s.seq(), seq + 1);
    let s = s.restart();
    assert_eq!(s.seq(), seq + 1);
    let s = s.restart_killed();
    assert_eq!(s.seq(), seq + 1);
    assert_eq!(hand_edits(&s).len(), 1);
}

#[test]
fn without_the_watcher_rebuild_index_finds_hand_edits() {
    let s = Server::start();
    create_tasks(&s);
    s.ok(
        "set_engine_settings",
        json!({"settings": {"watch_files": false}}),
    );
    s.ok(
        "insert_row",
        json!({"table": TASKS, "id": "a", "values": {"title": "A"}}),
    );
    let s = s.restart();
    write_by_hand(&s.row_path(TASKS, "a"), "---\ntitle: A by hand\n---\n");
    write_by_hand(&s.row_path(TASKS, "b"), "---\ntitle: B by hand\n---\n");
    // Nothing watches: still the old state (give a watcher, were there one, time to act). No
    // later event can stand for it: with the watcher off, nothing reports that files were seen.
    std::thread::sleep(std::time::Duration::from_millis(500));
    assert_eq!(get(&s, "a").unwrap()["values"]["title"], "A");
    assert!(get(&s, "b").is_none());
    let r = s.ok("rebuild_index", json!({}));
    assert_eq!(r["hand_edits"], 2);
    assert_eq!(
        r["rows"], 4,
        "the rows found in the files: a and b, and 2 people"
    );
    assert_eq!(get(&s, "a").unwrap()["values"]["title"], "A by hand");
    assert_eq!(get(&s, "a").unwrap()["version"], 2);
    assert_eq!(get(&s, "b").unwrap()["values"]["title"], "B by hand");
    let ms = hand_edits(&s);
    assert_eq!(ms.len(), 2);
    let ma = ms.iter().find(|m| m["row"] == "a").unwrap();
    assert_eq!(ma["before"]["values"]["title"], "A");
    assert_eq!(ma["after"]["values"]["title"], "A by hand");
}

#[test]
fn values_round_trip_through_the_files() {
    let s = Server::start();
    create_tasks(&s);
    let tricky = [
        "yes",
        "no",
        "true",
        "null",
        "~",
        "123",
        "1.5",
        "0x1f",
        "1e3",
        "- a",
        "#x",
        "a: b",
        "a #b",
        "2026-01-01",
        "",
        " leading",
        "trailing ",
        "multi\nline\n",
        "tab\there",
        "emoji 🎉 ünï",
        "quote ' \" `",
        "[a, b]",
        "{a: 1}",
        "*alias",
        "&anchor",
        "!tag",
        "%dir",
        "@at",
        "---",
        "...",
        "| block",
        "> folded",
        "=",
        "\\back\\slash",
        "\u{feff}bom",
        "nul\u{0}char",
    ];
    for (i, t) in tricky.iter().enumerate() {
        s.ok(
            "insert_row",
            json!({"table": TASKS, "id": format!("t{i:02}"), "values": {"title": format!("x{t}"), "tags": [t.replace(|c: char| !c.is_ascii_lowercase(), "z") + "a"], "status": "doing"}, "body": t}),
        );
        s.ok(
            "insert_row",
            json!({"table": PEOPLE, "id": format!("p{i:02}"), "values": {"name": t}}),
        );
    }
    s.ok(
        "insert_row",
        json!({"table": TASKS, "id": "body", "values": {"title": "b", "at": "2026-01-01T00:00:00.123456789Z", "score": 0.1, "estimate": 0},
               "body": "---\nnot: front matter\n---\n\n# Title\r\nwindows line\r\nno newline at end"}),
    );
    let dump = |s: &Server| {
        (
            s.ok("select_rows", json!({"table": TASKS, "columns": ["title", "tags", "status", "at", "score", "estimate", "body"]})),
            s.ok("select_rows", json!({"table": PEOPLE, "columns": ["name", "body"]})),
        )
    };
    let before = dump(&s);
    assert_eq!(before.1["total"], tricky.len() + 2);
    for (i, t) in tricky.iter().enumerate() {
        let r = &before.1["rows"].as_array().unwrap()[i + 2];
        assert_eq!(r["values"]["name"], *t, "{t:?}");
    }
    let seq = s.seq();
    let files = snapshot(&s.dir);

    // The index rebuilt from the files alone answers the same, finds no invalid row and no edit.
    let mut s = s;
    s.stop();
    assert!(remove_index(&s.dir) >= 1);
    let s = s.restart();
    assert_eq!(dump(&s), before);
    assert_eq!(invalid(&s), Vec::<Value>::new());
    assert_eq!(s.seq(), seq, "no hand edit found");
    assert!(snapshot(&s.dir) == files);
}

#[test]
fn acknowledged_writes_survive_a_kill() {
    let s = Server::start();
    create_tasks(&s);
    let mut expected = vec![];
    for i in 0..20 {
        let r = s.ok(
            "insert_row",
            json!({"table": TASKS, "values": {"title": format!("task {i}"), "estimate": i}}),
        );
        expected.push(r["id"].as_str().unwrap().to_string());
    }
    s.ok(
        "update_row",
        json!({"table": TASKS, "id": "task-3", "values": {"estimate": 99}}),
    );
    s.ok("delete_row", json!({"table": TASKS, "id": "task-4"}));
    expected.retain(|x| x != "task-4");
    expected.sort();
    let seq = s.seq();
    let files = snapshot(&s.dir);
    let s = s.restart_killed();
    assert_eq!(s.seq(), seq);
    assert!(snapshot(&s.dir) == files);
    assert_eq!(s.ids(json!({"table": TASKS})), expected);
    assert_eq!(get(&s, "task-3").unwrap()["values"]["estimate"], 99);
    assert_eq!(get(&s, "task-3").unwrap()["version"], 2);
    assert_eq!(hand_edits(&s), Vec::<Value>::new());
    // No temporary files are left behind.
    let dir = s.row_path(TASKS, "x").parent().unwrap().to_path_buf();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let n = e.file_name().to_string_lossy().to_string();
        assert!(!n.ends_with(".tmp"), "left over: {n}");
    }
}

const NOTES_DEF: &str = "columns:\n  text:\n    type: text\n    required: true\n";

/// The hand edits journaled for table work.crm.notes: (row, after) pairs, sorted.
fn notes_hand_edits(s: &Server) -> Vec<(Option<String>, Value)> {
    let mut v: Vec<(Option<String>, Value)> = s
        .migrations(json!({"table": "work.crm.notes"}))
        .iter()
        .map(|m| {
            assert_hand_edit_actor(m);
            (m["row"].as_str().map(String::from), m["after"].clone())
        })
        .collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

#[test]
fn a_table_folder_copied_in_while_serving_journals_its_rows() {
    let s = Server::start();
    create_tasks(&s);
    // Made elsewhere, then moved in at once (like `mv` or `cp -r` of a folder).
    let staging = s.dir.parent().unwrap().join("staging");
    write_by_hand(&staging.join("notes/_table.yaml"), NOTES_DEF);
    write_by_hand(&staging.join("notes/n1.md"), "---\ntext: hi\n---\n");
    write_by_hand(&staging.join("notes/n2.md"), "---\ntext: there\n---\n");
    std::fs::rename(staging.join("notes"), s.dir.join("work/crm/notes")).unwrap();
    eventually("the rows are served", || {
        s.call("select_rows", json!({"table": "work.crm.notes"})).1["total"] == 2
    });
    let he = notes_hand_edits(&s);
    assert_eq!(he.len(), 3, "the table and each row are journaled: {he:?}");
    assert_eq!(he[0].0, None);
    assert_eq!(he[1].0.as_deref(), Some("n1"));
    assert_eq!(he[1].1["values"], json!({"text": "hi"}));
    assert_eq!(he[2].0.as_deref(), Some("n2"));
    // Its arrival is undone like a create_table: refused while it has rows, then dropped.
    let m = s.migrations(json!({"table": "work.crm.notes", "actor": "hand edit"}));
    let def_seq = m.iter().find(|m| m["row"].is_null()).unwrap()["seq"].clone();
    let e = s.refused_nochange("undo_migration", json!({"seq": def_seq}), 409);
    assert_eq!(e["rule"], "undo");
    for id in ["n1", "n2"] {
        s.ok("delete_row", json!({"table": "work.crm.notes", "id": id}));
    }
    s.ok("undo_migration", json!({"seq": def_seq}));
    assert!(!s.dir.join("work/crm/notes").exists());
    s.refused("describe_table", json!({"table": "work.crm.notes"}), 404);
}

#[test]
fn a_table_made_by_hand_while_stopped_is_journaled() {
    let mut s = Server::start();
    create_tasks(&s);
    s.stop();
    write_by_hand(&s.dir.join("work/crm/notes/_table.yaml"), NOTES_DEF);
    write_by_hand(&s.dir.join("work/crm/notes/n1.md"), "---\ntext: hi\n---\n");
    let s = s.restart();
    assert_eq!(
        s.ok("get_row", json!({"table": "work.crm.notes", "id": "n1"}))["values"],
        json!({"text": "hi"})
    );
    let he = notes_hand_edits(&s);
    assert_eq!(he.len(), 2, "the table and its row are journaled: {he:?}");
    assert_eq!(he[0].0, None);
    assert_eq!(he[1].0.as_deref(), Some("n1"));
}

#[test]
fn a_row_edited_together_with_its_definition_is_journaled() {
    let s = Server::start();
    create_tasks(&s);
    s.ok(
        "insert_row",
        json!({"table": TASKS, "id": "a", "values": {"title": "A", "estimate": 1}}),
    );
    // Add a column by hand and use it in a row, in one go (as a text editor's "save all" would).
    let def_path = s.dir.join("work/crm/tasks/_table.yaml");
    let def = std::fs::read_to_string(&def_path).unwrap();
    write_by_hand(&def_path, &format!("{def}  mood:\n    type: text\n"));
    write_by_hand(
        &s.row_path(TASKS, "a"),
        "---\ntitle: A\nestimate: 2\nmood: happy\n---\n",
    );
    eventually("the row is served with the new column", || {
        get(&s, "a").is_some_and(|r| r["values"]["mood"] == "happy")
    });
    let row = get(&s, "a").unwrap();
    assert_eq!(row["values"]["estimate"], 2);
    assert_eq!(row["version"], 2, "the row changed, so its version did");
    // The watcher may see the row before the definition that names its new column (the files
    // are written in place: a definition read half-written is kept as it was), so the row may
    // pass through invalid first; either way its change is journaled, from 1 to 2.
    let ms = s.migrations(json!({"table": TASKS, "actor": "hand edit"}));
    let mut rows: Vec<&Value> = ms.iter().filter(|m| m["row"] == "a").collect();
    rows.sort_by_key(|m| m["seq"].as_i64());
    assert!(
        matches!(rows.len(), 1 | 2),
        "the row's change is journaled: {ms:?}"
    );
    assert_eq!(rows[0]["before"]["values"]["estimate"], 1, "{ms:?}");
    let last = rows.last().unwrap();
    assert_eq!(last["after"]["values"]["estimate"], 2, "{ms:?}");
    assert_eq!(last["after"]["version"], 2, "{ms:?}");
    if rows.len() == 2 {
        assert!(rows[0]["after"]["invalid"].is_string(), "{ms:?}");
    }
}

#[test]
fn a_row_made_valid_by_a_later_definition_is_journaled_with_its_next_version() {
    let s = Server::start();
    create_tasks(&s);
    s.ok(
        "insert_row",
        json!({"table": TASKS, "id": "a", "values": {"title": "A", "estimate": 1}}),
    );
    // The row first, with a column the definition does not name yet: invalid.
    write_by_hand(
        &s.row_path(TASKS, "a"),
        "---\ntitle: A\nestimate: 2\nmood: happy\n---\n",
    );
    eventually("the row is invalid", || get(&s, "a").is_none());
    // Then the definition that names it: the same file is a valid row again, at version 2.
    let def_path = s.dir.join("work/crm/tasks/_table.yaml");
    let def = std::fs::read_to_string(&def_path).unwrap();
    write_by_hand(&def_path, &format!("{def}  mood:\n    type: text\n"));
    eventually("the row is served with the new column", || {
        get(&s, "a").is_some_and(|r| r["values"]["mood"] == "happy")
    });
    assert_eq!(get(&s, "a").unwrap()["version"], 2);
    let ms = s.migrations(json!({"table": TASKS, "actor": "hand edit"}));
    let mut rows: Vec<&Value> = ms.iter().filter(|m| m["row"] == "a").collect();
    rows.sort_by_key(|m| m["seq"].as_i64());
    assert_eq!(rows.len(), 2, "{ms:?}");
    assert!(rows[0]["after"]["invalid"].is_string(), "{ms:?}");
    assert!(rows[1]["before"]["invalid"].is_string(), "{ms:?}");
    assert_eq!(rows[1]["after"]["version"], 2, "{ms:?}");
    assert_eq!(rows[1]["after"]["values"]["mood"], "happy", "{ms:?}");
}

// ---- the folder is hostile input: links, special files, huge files, bad names ----

/// The folder of the tasks table.
fn tasks_dir(s: &Server) -> std::path::PathBuf {
    s.row_path(TASKS, "x").parent().unwrap().to_path_buf()
}

/// The invalid entry of a row, if it is reported.
fn invalid_error(s: &Server, id: &str) -> Option<String> {
    invalid(s)
        .iter()
        .find(|r| r["id"] == id)
        .map(|r| r["error"].as_str().unwrap().to_string())
}

/// Everything a client could see of the table: its description, rows, search, the journal.
fn everything_served(s: &Server, query: &str) -> String {
    format!(
        "{} {} {} {}",
        s.ok("describe_table", json!({"table": TASKS})),
        s.ok(
            "select_rows",
            json!({"table": TASKS, "columns": ["title", "body"]})
        ),
        s.ok("search_notes", json!({"query": query})),
        s.ok("list_migrations", json!({"limit": 1000})),
    )
}

fn dir_is_empty(d: &std::path::Path) -> bool {
    std::fs::read_dir(d).unwrap().next().is_none()
}

#[test]
fn a_symlinked_row_file_is_reported_never_read() {
    let s = Server::start();
    create_tasks(&s);
    s.ok(
        "insert_row",
        json!({"table": TASKS, "id": "a", "values": {"title": "A"}}),
    );
    // A file outside the database, holding a secret, shaped like a valid row.
    let outside = tempfile::tempdir().unwrap();
    let secret = outside.path().join("owner-token.md");
    std::fs::write(&secret, "---\ntitle: SECRETVALUE\n---\nSECRETVALUE\n").unwrap();
    let dir = tasks_dir(&s);
    std::os::unix::fs::symlink(&secret, dir.join("leak.md")).unwrap();
    // And an existing row replaced by a link.
    std::fs::remove_file(dir.join("a.md")).unwrap();
    std::os::unix::fs::symlink(&secret, dir.join("a.md")).unwrap();
    eventually("both links are reported", || {
        invalid_error(&s, "leak").is_some() && invalid_error(&s, "a").is_some()
    });
    for id in ["leak", "a"] {
        let e = invalid_error(&s, id).unwrap();
        assert!(
            e.contains("symbolic link") && e.contains("never follows links"),
            "{id}: {e}"
        );
        assert!(get(&s, id).is_none(), "{id} is not served");
    }
    assert!(s.ids(json!({"table": TASKS})).is_empty());
    let ms = hand_edits(&s);
    let leak = ms.iter().find(|m| m["row"] == "leak").expect("journaled");
    assert!(leak["after"]["invalid"].is_string(), "{leak}");
    let a = ms.iter().find(|m| m["row"] == "a").expect("journaled");
    assert_eq!(a["before"]["values"]["title"], "A", "{a}");
    assert!(!everything_served(&s, "SECRETVALUE").contains("SECRETVALUE"));
    // Nor through a rebuild or a restart.
    s.ok("rebuild_index", json!({}));
    assert!(invalid_error(&s, "leak").is_some());
    assert!(!everything_served(&s, "SECRETVALUE").contains("SECRETVALUE"));
    let mut s = s;
    s.stop();
    assert!(remove_index(&s.dir) >= 1);
    let s = s.restart();
    assert!(invalid_error(&s, "leak").is_some());
    assert!(invalid_error(&s, "a").is_some());
    assert!(!everything_served(&s, "SECRETVALUE").contains("SECRETVALUE"));
    assert_eq!(
        std::fs::read_to_string(&secret).unwrap(),
        "---\ntitle: SECRETVALUE\n---\nSECRETVALUE\n",
        "the target is never written"
    );
}

#[test]
fn nothing_is_written_through_a_symlinked_folder() {
    let outside = tempfile::tempdir().unwrap();
    let out = outside.path();
    let s = Server::start();
    create_tasks(&s);
    s.ok(
        "insert_row",
        json!({"table": TASKS, "id": "a", "values": {"title": "A"}}),
    );
    // The watcher would drop a table whose folder became a link before the writes below try
    // it: without it, the writer is the only line of defence.
    s.ok(
        "set_engine_settings",
        json!({"settings": {"watch_files": false}}),
    );
    let mut s = s.restart();
    let check = |e: &Value, name: &str| {
        let m = e["message"].as_str().unwrap();
        assert!(
            m.contains(name)
                && m.contains("symbolic link")
                && m.contains("never writes through links"),
            "{e}"
        );
    };
    // A catalog folder that is a link.
    let cat_target = out.join("cat");
    std::fs::create_dir(&cat_target).unwrap();
    std::os::unix::fs::symlink(&cat_target, s.dir.join("personal")).unwrap();
    let e = s.refused_nochange(
        "create_table",
        json!({"table": "personal.notes.todo", "columns": {"title": {"type": "text"}}}),
        409,
    );
    check(&e, "personal");
    assert!(dir_is_empty(&cat_target), "nothing written outside");
    // A schema folder that is a link.
    let schema_target = out.join("schema");
    std::fs::create_dir(&schema_target).unwrap();
    std::fs::create_dir(s.dir.join("home")).unwrap();
    std::os::unix::fs::symlink(&schema_target, s.dir.join("home/books")).unwrap();
    let e = s.refused_nochange(
        "create_table",
        json!({"table": "home.books.read", "columns": {"title": {"type": "text"}}}),
        409,
    );
    check(&e, "home/books");
    assert!(dir_is_empty(&schema_target), "nothing written outside");
    // A table folder swapped for a link while serving: no insert, update or delete through it.
    let table_target = out.join("tasks");
    std::fs::rename(tasks_dir(&s), &table_target).unwrap();
    std::os::unix::fs::symlink(&table_target, tasks_dir(&s)).unwrap();
    let before = snapshot(&table_target);
    let e = s.refused_nochange(
        "insert_row",
        json!({"table": TASKS, "id": "b", "values": {"title": "B"}}),
        409,
    );
    check(&e, "work/crm/tasks");
    s.refused_nochange(
        "update_row",
        json!({"table": TASKS, "id": "a", "values": {"title": "A2"}}),
        409,
    );
    s.refused_nochange("delete_row", json!({"table": TASKS, "id": "a"}), 409);
    // An alter looks at the whole table first (hand edits are journaled before it rewrites
    // every row): a table folder that is a link is no table of this database any more, which
    // is journaled, and the alter finds no table.
    s.refused(
        "alter_table",
        json!({"table": TASKS, "description": "changed"}),
        404,
    );
    assert_eq!(snapshot(&table_target), before, "nothing changed outside");
    // Other tables keep working.
    s.ok(
        "insert_row",
        json!({"table": PEOPLE, "id": "grace", "values": {"name": "Grace"}}),
    );
    // And a restart neither writes outside nor serves the linked table.
    s.stop();
    let s = s.restart();
    assert_eq!(snapshot(&table_target), before);
    assert!(dir_is_empty(&cat_target) && dir_is_empty(&schema_target));
    s.refused("describe_table", json!({"table": TASKS}), 404);
}

#[test]
fn a_symlinked_table_definition_is_not_a_table() {
    let s = Server::start();
    create_tasks(&s);
    let outside = tempfile::tempdir().unwrap();
    let def = outside.path().join("_table.yaml");
    std::fs::write(&def, NOTES_DEF).unwrap();
    std::fs::create_dir_all(s.dir.join("home/books/linked")).unwrap();
    std::os::unix::fs::symlink(&def, s.dir.join("home/books/linked/_table.yaml")).unwrap();
    write_by_hand(
        &s.dir.join("home/books/linked/n1.md"),
        "---\ntext: hi\n---\n",
    );
    // A real table made after it: once it is served, the link was seen too.
    write_by_hand(&s.dir.join("home/books/real/_table.yaml"), NOTES_DEF);
    eventually("the real table is served", || {
        s.call("describe_table", json!({"table": "home.books.real"}))
            .0
            == 200
    });
    s.ok("rebuild_index", json!({}));
    s.refused("describe_table", json!({"table": "home.books.linked"}), 404);
    let s = s.restart();
    s.refused("describe_table", json!({"table": "home.books.linked"}), 404);
    s.ok("describe_table", json!({"table": "home.books.real"}));
}

#[test]
fn a_fifo_named_like_a_row_never_blocks_the_writer() {
    let mut s = Server::start();
    create_tasks(&s);
    let fifo = tasks_dir(&s).join("x.md");
    let st = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(st.success());
    eventually("the pipe is reported", || invalid_error(&s, "x").is_some());
    let e = invalid_error(&s, "x").unwrap();
    assert!(e.contains("named pipe (FIFO)"), "{e}");
    // Writes and scans go on.
    s.ok(
        "insert_row",
        json!({"table": TASKS, "id": "a", "values": {"title": "A"}}),
    );
    s.ok("rebuild_index", json!({}));
    assert_eq!(s.ids(json!({"table": TASKS})), ["a"]);
    assert!(invalid_error(&s, "x").is_some());
    let mut s2 = {
        let t = std::time::Instant::now();
        s.stop();
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "SIGTERM stopped it in {:?}",
            t.elapsed()
        );
        s.restart()
    };
    // At start too (the scan of edits made while stopped).
    assert!(invalid_error(&s2, "x").is_some());
    s2.ok(
        "insert_row",
        json!({"table": TASKS, "id": "b", "values": {"title": "B"}}),
    );
    let t = std::time::Instant::now();
    s2.stop();
    assert!(t.elapsed() < Duration::from_secs(5));
}

#[test]
fn a_link_to_a_device_is_never_read() {
    let s = Server::start();
    create_tasks(&s);
    std::os::unix::fs::symlink("/dev/zero", tasks_dir(&s).join("zero.md")).unwrap();
    std::os::unix::fs::symlink("/dev/urandom", tasks_dir(&s).join("random.md")).unwrap();
    eventually("the links are reported", || {
        invalid_error(&s, "zero").is_some() && invalid_error(&s, "random").is_some()
    });
    assert!(invalid_error(&s, "zero").unwrap().contains("symbolic link"));
    s.ok("rebuild_index", json!({}));
    s.ok(
        "insert_row",
        json!({"table": TASKS, "id": "a", "values": {"title": "A"}}),
    );
    assert!(s.mib("VmRSS") < 500, "memory: {} MiB", s.mib("VmRSS"));
}

#[test]
fn a_folder_named_like_a_row_is_reported() {
    let s = Server::start();
    create_tasks(&s);
    std::fs::create_dir(tasks_dir(&s).join("x.md")).unwrap();
    eventually("the folder is reported", || {
        invalid_error(&s, "x").is_some()
    });
    let e = invalid_error(&s, "x").unwrap();
    assert!(e.contains("x.md is a folder, not a regular file"), "{e}");
    // Its id stays taken; a rebuild and a restart report it too.
    s.refused(
        "insert_row",
        json!({"table": TASKS, "id": "x", "values": {"title": "X"}}),
        409,
    );
    s.ok("rebuild_index", json!({}));
    assert!(invalid_error(&s, "x").is_some());
    let s = s.restart();
    assert!(invalid_error(&s, "x").is_some());
}

#[test]
fn a_huge_hand_edited_body_is_invalid_and_its_journal_entry_small() {
    let s = Server::start();
    create_tasks(&s);
    s.ok(
        "insert_row",
        json!({"table": TASKS, "id": "a", "values": {"title": "A"}, "body": "small"}),
    );
    let limit = 1 << 20; // max_body_bytes by default
    // 20 MB: more than the file limit (max_body_bytes + 1 MiB), never read.
    let huge = format!("---\ntitle: Huge\n---\n{}", "x".repeat(20_000_000));
    write_by_hand(&s.row_path(TASKS, "huge"), &huge);
    // A row edited to a body just over max_body_bytes: read, and refused like an API write.
    let over = format!("---\ntitle: A\n---\n{}", "y".repeat(limit + 100));
    write_by_hand(&s.row_path(TASKS, "a"), &over);
    // The watcher may see a file half written (invalid for another reason) before its last write.
    eventually("both are reported, as written in full", || {
        invalid_error(&s, "huge").is_some_and(|e| e.contains("20000020 bytes"))
            && invalid_error(&s, "a").is_some_and(|e| e.contains("the body has"))
    });
    let e = invalid_error(&s, "huge").unwrap();
    assert!(
        e.contains("20000020 bytes, more than the limit 2097152 (max_body_bytes + 1 MiB"),
        "{e}"
    );
    let e = invalid_error(&s, "a").unwrap();
    assert!(
        e.contains(&format!(
            "the body has {} bytes, more than the limit {limit}",
            limit + 100
        )),
        "{e}"
    );
    assert!(get(&s, "huge").is_none() && get(&s, "a").is_none());
    for m in hand_edits(&s) {
        let n = m.to_string().len();
        assert!(n < 10_000, "journal entry of {} has {n} bytes", m["row"]);
    }
    // The same after a rebuild.
    s.ok("rebuild_index", json!({}));
    assert!(invalid_error(&s, "huge").is_some() && invalid_error(&s, "a").is_some());
}

#[test]
fn a_md_file_whose_name_is_not_a_row_id_is_reported() {
    let s = Server::start();
    create_tasks(&s);
    let dir = tasks_dir(&s);
    for name in ["Bad Name.md", "Upper.md", "-dash.md"] {
        write_by_hand(&dir.join(name), "---\ntitle: fine\n---\n");
    }
    // Hidden files are not rows, and not reported.
    write_by_hand(&dir.join(".hidden.md"), "---\ntitle: fine\n---\n");
    eventually("the three are reported", || invalid(&s).len() == 3);
    let e = invalid_error(&s, "Bad Name").unwrap();
    assert!(e.contains("not a valid row id"), "{e}");
    assert!(invalid_error(&s, "Upper").is_some() && invalid_error(&s, "-dash").is_some());
    assert!(s.ids(json!({"table": TASKS})).is_empty());
    let ms = hand_edits(&s);
    assert!(
        ms.iter()
            .any(|m| m["row"] == "Bad Name" && m["after"]["invalid"].is_string()),
        "{ms:?}"
    );
    let s = s.restart();
    assert_eq!(invalid(&s).len(), 3);
}

#[test]
fn a_definition_that_drops_a_link_or_unique_column_by_hand() {
    let s = Server::start();
    create_tasks(&s);
    for id in ["a", "b"] {
        s.ok(
            "insert_row",
            json!({"table": TASKS, "id": id, "values": {"title": id}}),
        );
    }
    let def_path = s.dir.join("work/crm/tasks/_table.yaml");
    let def = |cols: &str| {
        format!(
            "description: Things to do\ncolumns:\n  title:\n    type: text\n    required: true\n  status:\n    type: enum\n    values: [todo, doing, done]\n    default: todo\n{cols}"
        )
    };
    let no_sql = |v: &Value| {
        let t = v.to_string();
        assert!(!t.contains("SELECT") && !t.contains("\"t:"), "SQL in {t}");
    };
    // Without the link column `owner` (no row uses it).
    write_by_hand(
        &def_path,
        &def("  code:\n    type: text\n    unique: true\n"),
    );
    eventually("the new definition is taken", || {
        s.ok("describe_table", json!({"table": TASKS}))["columns"]
            .get("owner")
            .is_none()
    });
    assert_eq!(invalid(&s), Vec::<Value>::new());
    assert_eq!(s.ids(json!({"table": TASKS})), ["a", "b"]);
    let (st, v) = s.call("rebuild_index", json!({}));
    no_sql(&v);
    assert_eq!(st, 200, "{v}");
    assert_eq!(invalid(&s), Vec::<Value>::new());
    // Without the unique column `code` either.
    write_by_hand(&def_path, &def(""));
    eventually("the new definition is taken", || {
        s.ok("describe_table", json!({"table": TASKS}))["columns"]
            .get("code")
            .is_none()
    });
    let (st, v) = s.call("rebuild_index", json!({}));
    no_sql(&v);
    assert_eq!(st, 200, "{v}");
    assert_eq!(invalid(&s), Vec::<Value>::new());
    assert_eq!(s.ids(json!({"table": TASKS})), ["a", "b"]);
    // Rows can use the table as it is now.
    s.ok(
        "insert_row",
        json!({"table": TASKS, "id": "c", "values": {"title": "c"}}),
    );
    let s = s.restart();
    assert_eq!(s.ids(json!({"table": TASKS})), ["a", "b", "c"]);
    assert_eq!(invalid(&s), Vec::<Value>::new());
}

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

// ---- one server per folder; the engine's folder is private ----

/// Runs `datanotes ARGS` to its end (at most 20 s: a second server that did start would serve
/// for ever); answers (success, stderr, how long it took).
fn run_to_end(args: &[&std::ffi::OsStr]) -> (bool, String, Duration) {
    use std::io::Read;
    let t0 = std::time::Instant::now();
    let mut child = std::process::Command::new(bin())
        .args(args)
        .env("DATANOTES_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let exited = poll(Duration::from_secs(20), Duration::from_millis(20), || {
        child.try_wait().unwrap()
    });
    let Some(status) = exited else {
        let _ = child.kill();
        let _ = child.wait();
        panic!("datanotes {args:?} still runs after 20 s");
    };
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    (status.success(), err, t0.elapsed())
}

/// The engine's own files (`.datanotes/`) with their bytes, but for the SQLite shared-memory
/// files (which readers write).
fn meta_snapshot(dir: &std::path::Path) -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir.join(".datanotes"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_type().unwrap().is_file())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !n.ends_with("-shm"))
        .map(|n| {
            let bytes = std::fs::read(dir.join(".datanotes").join(&n)).unwrap();
            (n, bytes)
        })
        .collect();
    out.sort();
    out
}

#[test]
fn a_second_server_on_the_same_folder_is_refused_and_touches_nothing() {
    let s = Server::start();
    create_tasks(&s);
    s.ok(
        "insert_row",
        json!({"table": TASKS, "id": "t1", "values": {"title": "one"}}),
    );
    let pid = s.child.as_ref().unwrap().id();
    // A write the first server has staged (its temp file, named with its pid): a second
    // server's start-up scan would take it for a crash's leftover and remove it.
    let staged = s
        .row_path(TASKS, "t1")
        .with_file_name(format!(".t2.md.{pid}.tmp"));
    write_by_hand(&staged, "---\ntitle: two\n---\n");
    // A hand edit after it: once it is served, the watcher has seen the staged file too, and
    // the writer has nothing left to do.
    write_by_hand(&s.row_path(TASKS, "by-hand"), "---\ntitle: by hand\n---\n");
    eventually("the hand-made row by-hand", || s.has_row(TASKS, "by-hand"));
    let files = snapshot(&s.dir);
    let meta = meta_snapshot(&s.dir);
    let seq = s.seq();
    let lock = std::fs::read_to_string(s.dir.join(".datanotes/lock")).unwrap();
    let lock: Value = serde_json::from_str(&lock).unwrap();
    assert_eq!(
        lock,
        json!({"pid": pid, "address": s.url.trim_start_matches("http://")})
    );

    let db = s.dir.as_os_str();
    let (ok, err, took) = run_to_end(&[
        "serve".as_ref(),
        "--database".as_ref(),
        db,
        "--listen".as_ref(),
        "127.0.0.1:0".as_ref(),
    ]);
    assert!(!ok, "a second server was refused: {err}");
    assert!(took < Duration::from_secs(5), "refused at once: {took:?}");
    let want = format!(
        "another datanotes server (pid {pid}, {}) is serving this folder; stop it first, or use another --database",
        s.url
    );
    assert!(err.contains(&want), "stderr names the first: {err:?}");
    for noise in ["Error {", "panicked", "backtrace", "::", "InUse"] {
        assert!(
            !err.contains(noise),
            "a plain message, no {noise:?}: {err:?}"
        );
    }
    // `init` on a served folder is refused the same way.
    let (ok, err, _) = run_to_end(&["init".as_ref(), "--database".as_ref(), db]);
    assert!(!ok, "init on a served folder: {err}");
    assert!(err.contains(&want), "{err:?}");

    // Nothing of the first was touched, and it keeps serving.
    assert!(staged.exists(), "the staged write survived");
    assert!(snapshot(&s.dir) == files, "the files are unchanged");
    assert!(meta_snapshot(&s.dir) == meta, ".datanotes/ is unchanged");
    assert_eq!(s.seq(), seq);
    s.ok(
        "insert_row",
        json!({"table": TASKS, "id": "t3", "values": {"title": "three"}}),
    );
    assert_eq!(s.seq(), seq + 1);

    // Once it stops, a new server starts over the folder and says so in the lock file.
    let s = s.restart();
    let new_pid = s.child.as_ref().unwrap().id();
    assert_ne!(new_pid, pid);
    let lock: Value =
        serde_json::from_slice(&std::fs::read(s.dir.join(".datanotes/lock")).unwrap()).unwrap();
    assert_eq!(lock["pid"], new_pid);
    assert_eq!(get(&s, "t3").unwrap()["values"]["title"], "three");
}

/// The modes of `.datanotes/` and of every file and folder in it, all the way down (paths
/// relative to it; folders end with `/`).
fn meta_modes(dir: &std::path::Path) -> (u32, Vec<(String, u32)>) {
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
    let meta = dir.join(".datanotes");
    let mut out = vec![];
    let mut todo = vec![meta.clone()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let t = e.file_type().unwrap();
            let rel = e.path().strip_prefix(&meta).unwrap().display().to_string();
            if t.is_dir() {
                out.push((format!("{rel}/"), mode(&e.path())));
                todo.push(e.path());
            } else if t.is_file() {
                out.push((rel, mode(&e.path())));
            }
        }
    }
    out.sort();
    (mode(&meta), out)
}

fn assert_private(dir: &std::path::Path, when: &str) {
    let (dmode, files) = meta_modes(dir);
    assert_eq!(dmode, 0o700, "{when}: .datanotes/ is {dmode:o}");
    let names: Vec<&str> = files.iter().map(|(n, _)| n.as_str()).collect();
    for want in [
        "journal.db",
        "journal.db-wal",
        "journal.db-shm",
        "index.db",
        "index.db-wal",
        "index.db-shm",
        "settings.json",
        "apps.json",
        "webhooks.json",
        "owner-token",
        "lock",
    ] {
        assert!(names.contains(&want), "{when}: {want} is there: {names:?}");
    }
    for want in ["apps/", "cache/"] {
        assert!(names.contains(&want), "{when}: {want} is there: {names:?}");
    }
    for (n, m) in &files {
        let want = if n.ends_with('/') { 0o700 } else { 0o600 };
        assert_eq!(*m, want, "{when}: .datanotes/{n} is {m:o}");
    }
}

#[test]
fn the_engines_folder_and_files_are_private() {
    use std::os::unix::fs::PermissionsExt;
    let s = Server::start();
    create_tasks(&s);
    s.ok(
        "set_engine_settings",
        json!({"settings": {"default_limit": 50}}),
    );
    s.ok_route("apps/create", json!({"name": "viewer"}));
    s.ok_route(
        "webhooks/create",
        json!({"url": "http://127.0.0.1:9/hook", "ops": ["delete"]}),
    );
    assert_private(&s.dir, "after the first start");

    // Killed (so the databases' -wal and -shm stay), then opened up by someone: the next
    // start makes it all private again.
    let mut s = s;
    s.kill();
    let meta = s.dir.join(".datanotes");
    let set = |p: &std::path::Path, m: u32| {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap()
    };
    for (n, _) in meta_modes(&s.dir).1 {
        set(&meta.join(&n), if n.ends_with('/') { 0o755 } else { 0o644 });
    }
    set(&meta, 0o755);
    assert_eq!(meta_modes(&s.dir).0, 0o755);
    let s = s.restart_killed();
    assert_private(&s.dir, "after a start over 0644 files");

    // The writer rewrites settings.json as a new file: still 0600.
    s.ok(
        "set_engine_settings",
        json!({"settings": {"default_limit": 60}}),
    );
    assert_private(&s.dir, "after a settings change");
}
