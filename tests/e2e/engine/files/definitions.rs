//! Table definitions by hand, files that are not rows, temporary files, the engine's own
//! writes, the index rebuilt, values' round trip through the files, and a kill.

use super::*;

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
    // A first sentinel, served before the files are written: the watcher has caught up with
    // the tables' creation, so `seq` below counts only what the files written next cause
    // (CI once saw one journal entry more than the sentinel when `seq` was read right after
    // `create_tasks`).
    write_by_hand(&s.row_path(TASKS, "before"), "---\ntitle: B\n---\n");
    eventually("the first sentinel is served", || {
        get(&s, "before").is_some()
    });
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
    let after: Vec<Value> = (s.migrations(json!({"limit": 20})).into_iter())
        .filter(|m| m["seq"].as_i64().is_some_and(|n| n > seq))
        .collect();
    assert_eq!(
        s.seq(),
        seq + 1,
        "only the sentinel was journaled: {after:#?}"
    );
    assert_eq!(invalid(&s), Vec::<Value>::new());
    assert_eq!(s.ids(json!({"table": TASKS})), ["before", "sentinel"]);
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
