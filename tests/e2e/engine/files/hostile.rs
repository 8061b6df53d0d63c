//! The folder is hostile input: links, special files, huge files, bad names.

use super::*;

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
