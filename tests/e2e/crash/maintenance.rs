//! The crash matrix: kill -9 in the middle of each maintenance operation.

use super::writes::{Rng, Sent, all_migrations, send};
use super::*;

// ---- the crash matrix: kill -9 in the middle of each maintenance operation ----

/// The table every case works on, and a second one that links to it.
const MT: &str = "m.crash.items";

/// `DATANOTES_CRASH_LONG=1` runs the long profile: more rows, more kills per operation
/// (`DATANOTES_CRASH_CASE=TEXT` narrows it to some operations).
fn long_profile() -> bool {
    std::env::var("DATANOTES_CRASH_LONG").is_ok_and(|v| v == "1")
}

/// Copies a stopped database folder.
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        let (src, dst) = (e.path(), to.join(e.file_name()));
        if e.file_type().unwrap().is_dir() {
            copy_dir(&src, &dst);
        } else {
            std::fs::copy(&src, &dst).unwrap();
        }
    }
}

/// Every row of a table through `select_rows`: id → (version, values without nulls, body).
fn all_rows(s: &Server, table: &str) -> BTreeMap<String, (i64, Value, String)> {
    let (status, d) = s.call("describe_table", json!({"table": table}));
    if status == 404 {
        return BTreeMap::new();
    }
    let mut cols: Vec<String> = d["columns"].as_object().unwrap().keys().cloned().collect();
    cols.push("body".into());
    let v = s.ok(
        "select_rows",
        json!({"table": table, "limit": 10000, "columns": cols}),
    );
    v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let mut values = r["values"].clone();
            if let Some(o) = values.as_object_mut() {
                o.retain(|_, v| !v.is_null());
            }
            (
                r["id"].as_str().unwrap().to_string(),
                (
                    r["version"].as_i64().unwrap(),
                    values,
                    r["body"].as_str().unwrap_or_default().to_string(),
                ),
            )
        })
        .collect()
}

/// The row files of a table folder: id → (values, body) as they parse.
fn row_files(root: &Path, table: &str) -> BTreeMap<String, (Value, String)> {
    let dir = files::table_dir(root, table);
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        let Some(id) = name.strip_suffix(".md") else {
            continue;
        };
        if name.starts_with('.') {
            continue;
        }
        let text = std::fs::read_to_string(e.path()).unwrap();
        let rf = files::parse_row(&text).unwrap_or_else(|e| panic!("{name} does not parse: {e}"));
        out.insert(id.to_string(), (Value::Object(rf.values), rf.body));
    }
    out
}

/// The rows the hand-edit case edits by hand.
const HAND_EDITED: usize = 300;

/// What a case starts from: the rows (id → version) and the journal's length.
struct Before {
    versions: BTreeMap<String, i64>,
    migrations: usize,
}

/// One maintenance operation: what runs before it (answering the operation and its arguments),
/// and whether it finds hand edits (the scan case).
struct Case {
    name: &'static str,
    prepare: fn(&Server) -> (&'static str, Value),
}

fn cases() -> Vec<Case> {
    fn alter(s: &Server, args: Value) -> i64 {
        let mut a = args;
        a["table"] = json!(MT);
        s.ok("alter_table", a)["seq"].as_i64().unwrap()
    }
    vec![
        Case {
            name: "alter: rename a column",
            prepare: |_| {
                (
                    "alter_table",
                    json!({"table": MT, "rename": {"title": "name"}}),
                )
            },
        },
        Case {
            name: "alter: drop a column",
            prepare: |_| ("alter_table", json!({"table": MT, "drop": ["tag"]})),
        },
        Case {
            name: "alter: add a required column with a default",
            prepare: |_| {
                (
                    "alter_table",
                    json!({"table": MT, "add": {"flag": {"type": "boolean", "required": true, "default": false}}}),
                )
            },
        },
        Case {
            name: "undo of a rename",
            prepare: |s| {
                let seq = alter(s, json!({"rename": {"title": "name"}}));
                ("undo_migration", json!({"seq": seq}))
            },
        },
        Case {
            name: "undo of a drop",
            prepare: |s| {
                let seq = alter(s, json!({"drop": ["tag"]}));
                ("undo_migration", json!({"seq": seq}))
            },
        },
        Case {
            name: "undo of an add",
            prepare: |s| {
                let seq = alter(
                    s,
                    json!({"add": {"flag": {"type": "boolean", "required": true, "default": true}}}),
                );
                ("undo_migration", json!({"seq": seq}))
            },
        },
        Case {
            name: "drop_table",
            prepare: |_| ("drop_table", json!({"table": MT})),
        },
        Case {
            name: "undo of drop_table",
            prepare: |s| {
                let seq = s.ok("drop_table", json!({"table": MT}))["seq"]
                    .as_i64()
                    .unwrap();
                ("undo_migration", json!({"seq": seq}))
            },
        },
        Case {
            name: "restore of a table",
            prepare: |s| {
                let seq = s.seq();
                for i in 0..40 {
                    s.ok(
                        "update_row",
                        json!({"table": MT, "id": format!("r{i}"), "values": {"n": -1}}),
                    );
                }
                ("restore", json!({"table": MT, "seq": seq}))
            },
        },
        Case {
            name: "undo of a row update",
            prepare: |s| {
                let seq = s.ok(
                    "update_row",
                    json!({"table": MT, "id": "r1", "values": {"title": "changed"}}),
                )["seq"]
                    .as_i64()
                    .unwrap();
                ("undo_migration", json!({"seq": seq}))
            },
        },
        Case {
            name: "vacuum",
            prepare: |s| {
                let seq = s.seq();
                ("vacuum", json!({"before_seq": seq - 5}))
            },
        },
        Case {
            name: "rebuild_index",
            prepare: |_| ("rebuild_index", json!({})),
        },
        Case {
            name: "hand-edit scan",
            // The owner edits many rows by hand at once: the watcher's scan, then the rebuild's,
            // journal them; the kill lands in either.
            prepare: |s| {
                for i in 0..HAND_EDITED {
                    let path = files::row_path(&s.dir, MT, &format!("r{i}"));
                    let text = std::fs::read_to_string(&path).unwrap();
                    std::fs::write(&path, text.replace("title: Row", "title: Hand")).unwrap();
                }
                ("rebuild_index", json!({}))
            },
        },
        Case {
            name: "set_engine_settings",
            prepare: |_| {
                (
                    "set_engine_settings",
                    json!({"settings": {"default_limit": 7, "max_body_bytes": 500000}}),
                )
            },
        },
    ]
}

/// The base database: `rows` rows in MT (title, n, tag), made once and copied for every round.
fn base_database(rows: usize) -> (tempfile::TempDir, std::path::PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("base");
    let mut s = Server::start_in(&dir);
    s.ok(
        "create_table",
        json!({"table": MT, "columns": {
            "title": {"type": "text", "required": true},
            "n": {"type": "integer"},
            "tag": {"type": "text"},
        }}),
    );
    let (url, token) = (s.url.clone(), s.token.clone());
    let threads: Vec<_> = (0..4)
        .map(|k| {
            let (url, token) = (url.clone(), token.clone());
            std::thread::spawn(move || {
                let http = reqwest::blocking::Client::new();
                for i in (k..rows).step_by(4) {
                    let args = json!({"table": MT, "id": format!("r{i}"),
                        "values": {"title": format!("Row {i}"), "n": i, "tag": if i % 3 == 0 { Value::Null } else { json!("t") }},
                        "body": format!("Body {i}\n")});
                    match send(&http, &url, &token, "insert_row", &args) {
                        Sent::Ok(_) => {}
                        _ => panic!("seeding row {i} failed"),
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    s.stop();
    (tmp, dir)
}

/// Kills the server at the first change of a file in place: the table's definition, one of its
/// first rows, the settings, or the table folder's existence (temp files staged beside the rows
/// before the journal commits do not count), or after `limit`.
fn kill_at_first_file_change(root: &Path, pid: u32, limit: Duration) -> bool {
    let dir = files::table_dir(root, MT);
    let mut watched = vec![
        dir.join(files::TABLE_FILE),
        root.join(".datanotes/settings.json"),
    ];
    watched.extend((0..8).map(|i| files::row_path(root, MT, &format!("r{i}"))));
    let look = || -> (bool, Vec<Option<(std::time::SystemTime, u64)>>) {
        let files = watched
            .iter()
            .map(|p| {
                p.symlink_metadata()
                    .ok()
                    .map(|m| (m.modified().unwrap(), m.len()))
            })
            .collect();
        (dir.exists(), files)
    };
    let first = look();
    let changed = poll(limit, Duration::from_micros(100), || {
        (look() != first).then_some(())
    });
    if changed.is_some() {
        signal(pid, 9);
    }
    changed.is_some()
}

/// After a restart: the server serves one consistent state.
fn check_after_crash(
    s: &Server,
    case: &str,
    before: &Before,
    op: &str,
    args: &Value,
    acked: Option<&Value>,
) {
    let ctx = |what: String| format!("{case}: {what}");
    // The journal invents nothing: no hand edit but the owner's, each once and as the file
    // has it; and the operation is there if it was answered.
    let migs = all_migrations(s);
    let hand: Vec<&Value> = migs.iter().filter(|m| m["op"] == "hand_edit").collect();
    let by_hand: BTreeSet<String> = if case.starts_with("hand-edit") {
        (0..HAND_EDITED).map(|i| format!("r{i}")).collect()
    } else {
        BTreeSet::new()
    };
    let mut seen = BTreeSet::new();
    for m in &hand {
        let id = m["row"].as_str().unwrap_or_default().to_string();
        assert!(
            by_hand.contains(&id) && seen.insert(id.clone()),
            "{}",
            ctx(format!("a hand edit was invented or journaled twice: {m}"))
        );
        assert!(
            m["after"]["values"]["title"]
                .as_str()
                .is_some_and(|t| t.starts_with("Hand")),
            "{}",
            ctx(format!(
                "a hand edit journaled what the file never had: {m}"
            ))
        );
    }
    // The scan at the restart found whatever the killed scan had not journaled.
    assert_eq!(
        seen.len(),
        by_hand.len(),
        "{}",
        ctx("hand edits are missing from the journal".into())
    );
    if let Some(v) = acked
        && let Some(seq) = v["seq"].as_i64()
        && op != "vacuum"
    {
        assert!(
            migs.iter().any(|m| m["seq"] == seq),
            "{}",
            ctx(format!(
                "the acknowledged {op} (seq {seq}) is not in the journal"
            ))
        );
    }
    if op != "vacuum" {
        assert!(
            migs.len() >= before.migrations,
            "{}",
            ctx("the journal lost migrations".into())
        );
    }
    // The feed reads the same journal.
    let top = migs.last().map(|m| m["seq"].as_i64().unwrap()).unwrap_or(0);
    let page = s.ok_route("changes", json!({"since": top - 1, "limit": 10}));
    assert_eq!(
        page["changes"]
            .as_array()
            .unwrap()
            .last()
            .map(|c| c["seq"].clone()),
        Some(json!(top)),
        "{}",
        ctx("the feed does not end where the journal does".into())
    );
    let tables = s.ok("list_tables", json!({}));
    let exists = tables["tables"]
        .as_array()
        .unwrap()
        .iter()
        .any(|t| t["table"] == MT);
    let dir = files::table_dir(&s.dir, MT);
    if !exists {
        // Gone: dropped, or still dropped because the undo of a drop was killed before it took
        // effect (not acknowledged: the state before it is the consistent one).
        assert!(
            op == "drop_table" || (case == "undo of drop_table" && acked.is_none()),
            "{}",
            ctx("the table is gone after a crash".into())
        );
        assert!(
            !dir.exists(),
            "{}",
            ctx("the table is dropped but its folder is there".into())
        );
        return;
    }
    if op == "drop_table" && acked.is_some() {
        panic!(
            "{}",
            ctx("an acknowledged drop_table left the table".into())
        );
    }
    // Every row valid under one definition, and the index agrees with the files.
    let d = s.ok("describe_table", json!({"table": MT}));
    assert_eq!(
        d["invalid"],
        json!([]),
        "{}",
        ctx(format!(
            "rows are invalid after the restart (columns now {})",
            d["columns"]
        ))
    );
    let cols: BTreeSet<String> = d["columns"].as_object().unwrap().keys().cloned().collect();
    let rows = all_rows(s, MT);
    let on_disk = row_files(&s.dir, MT);
    assert_eq!(
        rows.keys().collect::<Vec<_>>(),
        on_disk.keys().collect::<Vec<_>>(),
        "{}",
        ctx("the index and the folder hold different rows".into())
    );
    for (id, (version, values, body)) in &rows {
        let (fv, fb) = &on_disk[id];
        assert_eq!(
            (values, body),
            (fv, fb),
            "{}",
            ctx(format!("row {id}: the index and its file differ"))
        );
        for k in fv.as_object().unwrap().keys() {
            assert!(
                cols.contains(k),
                "{}",
                ctx(format!(
                    "row {id} has column {k}, which the definition has not"
                ))
            );
        }
        if let Some(v0) = before.versions.get(id) {
            assert!(
                version >= v0,
                "{}",
                ctx(format!("row {id} went back from version {v0} to {version}"))
            );
        }
    }
    if acked.is_some()
        && op == "alter_table"
        && let Some(r) = args["rename"].as_object()
    {
        {
            for new in r.values() {
                assert!(
                    cols.contains(new.as_str().unwrap()),
                    "{}",
                    ctx("the acknowledged rename is not there".into())
                );
            }
        }
    }
}

/// Runs one round: a copy of the base, the case's preparation, the operation killed at a moment
/// given by `kill` (None: the first file change), a restart and the checks. Answers how long
/// the operation ran when it was not killed.
fn crash_round(base: &Path, case: &Case, kill: Option<Duration>, round: usize) -> Duration {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("db");
    copy_dir(base, &dir);
    let mut s = Server::start_in(&dir);
    let (op, args) = (case.prepare)(&s);
    let before = Before {
        versions: all_rows(&s, MT)
            .into_iter()
            .map(|(id, (v, _, _))| (id, v))
            .collect(),
        migrations: all_migrations(&s).len(),
    };
    let pid = s.child.as_ref().unwrap().id();
    let (url, token) = (s.url.clone(), s.token.clone());
    let (op2, args2) = (op.to_string(), args.clone());
    let t0 = Instant::now();
    let caller = std::thread::spawn(move || {
        let http = reqwest::blocking::Client::builder()
            .timeout(Duration::from_secs(60))
            .build()
            .unwrap();
        let r = send(&http, &url, &token, &op2, &args2);
        (r, t0.elapsed())
    });
    let killed = match kill {
        Some(d) if d == Duration::MAX => false,
        Some(d) => {
            // The kill lands `d` into the operation: a time by design (the rounds sweep it).
            std::thread::sleep(d);
            signal(pid, 9);
            true
        }
        None => kill_at_first_file_change(&s.dir, pid, Duration::from_secs(20)),
    };
    let (sent, took) = caller.join().unwrap();
    let acked = match sent {
        Sent::Ok(v) => Some(v),
        Sent::Refused(st, v) => panic!("{}: {op} was refused ({st}): {v}", case.name),
        Sent::Lost => None,
    };
    if !killed {
        assert!(acked.is_some(), "{}: {op} was not answered", case.name);
    }
    eprintln!(
        "crash matrix: {} (round {round}): {}, answered: {}",
        case.name,
        match kill {
            Some(d) if d == Duration::MAX => "not killed".to_string(),
            Some(d) => format!("killed after {d:?}"),
            None if killed => "killed at the first file change".into(),
            None => "no file change seen".into(),
        },
        acked.is_some()
    );
    s = if killed {
        s.restart_killed()
    } else {
        s.restart()
    };
    check_after_crash(&s, case.name, &before, op, &args, acked.as_ref());
    // The server takes writes again, and a second restart changes nothing.
    if all_rows(&s, MT).contains_key("r2") {
        s.ok(
            "update_row",
            json!({"table": MT, "id": "r2", "values": {"n": 7}}),
        );
    }
    let migs = all_migrations(&s).len();
    s = s.restart();
    assert_eq!(
        all_migrations(&s).len(),
        migs,
        "{}: a clean restart after recovery journaled something",
        case.name
    );
    drop(s);
    took
}

#[test]
fn kill_9_during_maintenance_leaves_one_consistent_state() {
    let long = long_profile();
    let rows = if long { 4000 } else { 600 };
    let random_rounds = if long { 6 } else { 1 };
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    eprintln!("crash matrix seed {seed}, {rows} rows");
    let mut rng = Rng::new(seed);
    let (_tmp, base) = base_database(rows);
    // `DATANOTES_CRASH_CASE=rename` runs only the cases whose name holds that text.
    let only = std::env::var("DATANOTES_CRASH_CASE").unwrap_or_default();
    for case in cases().into_iter().filter(|c| c.name.contains(&only)) {
        // How long the operation takes when nothing happens to it (and that it works).
        let took = crash_round(&base, &case, Some(Duration::MAX), 0);
        crash_round(&base, &case, None, 1);
        for round in 0..random_rounds {
            let us = rng.below(took.as_micros().max(1) as u64 + 1);
            crash_round(&base, &case, Some(Duration::from_micros(us)), 2 + round);
        }
    }
}
