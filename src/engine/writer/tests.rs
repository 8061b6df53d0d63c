use super::*;
use crate::engine::index;
use crate::engine::recovery::open_index_checked;

fn job(cmd: Cmd) -> (Job, mpsc::Receiver<Result<Value>>) {
    let (tx, rx) = mpsc::sync_channel(1);
    let actor = Actor::new(Some("test".into()), None, None, None, None);
    (
        Job {
            cmd,
            actor,
            reply: Some(tx),
            trace: None,
        },
        rx,
    )
}

fn args<T: serde::de::DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).unwrap()
}

fn writer() -> (tempfile::TempDir, Writer) {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().to_path_buf();
    std::fs::create_dir_all(root.join(".datanotes")).unwrap();
    let jr = journal::open(&root.join(".datanotes/journal.db"), true).unwrap();
    let idx = open_index_checked(&root.join(".datanotes/index.db")).unwrap();
    (
        tmp,
        Writer::new(root, idx, jr, Tables::new(), Weak::new(), None),
    )
}

fn run(w: &mut Writer, cmds: Vec<Cmd>) -> Vec<Value> {
    let (jobs, rxs): (Vec<_>, Vec<_>) = cmds.into_iter().map(job).unzip();
    w.run(jobs);
    rxs.into_iter()
        .map(|rx| rx.recv().unwrap().unwrap())
        .collect()
}

#[test]
fn a_folder_scan_commits_in_chunks_and_loses_nothing() {
    let (tmp, mut w) = writer();
    let table = "a.b.c";
    run(
        &mut w,
        vec![Cmd::CreateTable(args(
            json!({"table": table, "columns": {"title": {"type": "text", "required": true}}}),
        ))],
    );
    let dir = tmp.path().join("a/b/c");
    for i in 0..70 {
        std::fs::write(
            dir.join(format!("r{i}.md")),
            format!("---\ntitle: row {i}\n---\n"),
        )
        .unwrap();
    }
    std::fs::write(dir.join("bad.md"), "---\nnope: 1\n---\n").unwrap();
    let out = run(
        &mut w,
        vec![Cmd::Scan {
            table: None,
            id: None,
        }],
    );
    assert_eq!(out[0]["hand_edits"], 71);
    let migs = journal::list(
        &w.jr,
        &journal::Filter {
            limit: 1000,
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(migs.len(), 72);
    assert!(migs[1..].iter().all(|m| m.op == Op::HandEdit));
    let t = w.table(table).unwrap();
    assert_eq!(index::count(&w.idx, table).unwrap(), 70);
    assert_eq!(index::invalid_rows(&w.idx, table).unwrap().len(), 1);
    assert_eq!(
        index::get_meta(&w.idx, "applied_seq").unwrap().as_deref(),
        Some("72")
    );
    let row = index::get_row(&w.idx, &t, "r7").unwrap().unwrap();
    assert_eq!(row.values["title"], "row 7");
    // A second scan finds nothing new.
    let out = run(
        &mut w,
        vec![Cmd::Scan {
            table: None,
            id: None,
        }],
    );
    assert_eq!(out[0]["hand_edits"], 0);
}

/// The full-text index as (table, id, text), sorted.
fn fts(w: &Writer) -> Vec<(String, String, String)> {
    let mut st = w
        .idx
        .prepare("SELECT files.tbl, files.id, fts.text FROM fts JOIN files ON files.fid = fts.rowid ORDER BY 1, 2")
        .unwrap();
    st.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap()
}

#[test]
fn full_text_follows_every_write_of_a_batch() {
    let (tmp, mut w) = writer();
    let t = "a.b.c";
    run(
        &mut w,
        vec![
            Cmd::CreateTable(args(
                json!({"table": t, "columns": {"title": {"type": "text"}}}),
            )),
            Cmd::CreateTable(args(
                json!({"table": "a.b.d", "columns": {"title": {"type": "text"}}}),
            )),
        ],
    );
    // One batch: insert, update, insert then delete, a refused job, a row of another table.
    let (jobs, rxs): (Vec<_>, Vec<_>) = vec![
        Cmd::Insert(args(
            json!({"table": t, "id": "x", "values": {"title": "alpha"}, "body": "one"}),
        )),
        Cmd::Update(args(
            json!({"table": t, "id": "x", "values": {"title": "beta"}}),
        )),
        Cmd::Insert(args(
            json!({"table": t, "id": "y", "values": {"title": "gamma"}}),
        )),
        Cmd::Delete(args(json!({"table": t, "id": "y"}))),
        Cmd::Insert(args(
            json!({"table": t, "id": "x", "values": {"title": "refused"}}),
        )),
        Cmd::Insert(args(
            json!({"table": "a.b.d", "id": "z", "values": {"title": "delta"}}),
        )),
    ]
    .into_iter()
    .map(job)
    .unzip();
    w.run(jobs);
    let ok: Vec<bool> = rxs
        .into_iter()
        .map(|rx| rx.recv().unwrap().is_ok())
        .collect();
    assert_eq!(ok, [true, true, true, true, false, true]);
    let s = |a: &str, b: &str, c: &str| (a.to_string(), b.to_string(), c.to_string());
    assert_eq!(
        fts(&w),
        [s("a.b.c", "x", "beta\none"), s("a.b.d", "z", "delta\n")]
    );
    // Applied at the commit: nothing stays queued (see `index::flush_fts`).
    let queued: i64 = w
        .idx
        .query_row("SELECT count(*) FROM fts_pending", [], |r| r.get(0))
        .unwrap();
    assert_eq!(queued, 0);
    // A hand edit that breaks a row takes it out of the full-text index; a dropped table too.
    std::fs::write(tmp.path().join("a/b/c/x.md"), "---\ntitle: [1, 2]\n---\n").unwrap();
    run(
        &mut w,
        vec![Cmd::Scan {
            table: Some(t.into()),
            id: Some("x".into()),
        }],
    );
    run(
        &mut w,
        vec![Cmd::DropTable(args(json!({"table": "a.b.d"})))],
    );
    assert_eq!(fts(&w), []);
    // Rebuilding finds the same.
    std::fs::write(tmp.path().join("a/b/c/x.md"), "---\ntitle: back\n---\n").unwrap();
    w.rebuild_index().unwrap();
    assert_eq!(fts(&w), [s("a.b.c", "x", "back\n")]);
}

#[test]
fn a_scan_batched_after_a_write_sees_no_hand_edit() {
    let (_tmp, mut w) = writer();
    let table = "a.b.c";
    run(
        &mut w,
        vec![Cmd::CreateTable(args(
            json!({"table": table, "columns": {"title": {"type": "text"}}}),
        ))],
    );
    run(
        &mut w,
        vec![Cmd::Insert(args(
            json!({"table": table, "id": "x", "values": {"title": "one"}}),
        ))],
    );
    // The file watcher's scan of row x lands in the same batch as the next write of x.
    run(
        &mut w,
        vec![
            Cmd::Update(args(
                json!({"table": table, "id": "x", "values": {"title": "two"}}),
            )),
            Cmd::Scan {
                table: Some(table.into()),
                id: Some("x".into()),
            },
            Cmd::Scan {
                table: None,
                id: None,
            },
        ],
    );
    let migs = journal::list(
        &w.jr,
        &journal::Filter {
            limit: 100,
            ..Default::default()
        },
    )
    .unwrap();
    let ops: Vec<&str> = migs.iter().map(|m| m.op.as_str()).collect();
    assert_eq!(ops, ["create_table", "insert", "update"]);
    let t = w.table(table).unwrap();
    let row = index::get_row(&w.idx, &t, "x").unwrap().unwrap();
    assert_eq!((row.version, &row.values["title"]), (2, &json!("two")));
}
