//! The semantic index: search by meaning beside full text (`search_notes` modes,
//! `similar_notes`), kept fresh by every kind of write, rebuilt on demand; the helpers the
//! other areas use (`semantic_model`, the crash matrix). The servers here run the default model
//! (`scripts/fetch-model`), except where a test says otherwise.
//!
//! - `search`: hybrid, semantic and text search, similar notes, bad queries, a WASM app's search;
//! - `writes`: every kind of write reaches the index, and a burst is caught up with;
//! - `rebuild_and_vacuum`: rebuilds, and an index behind a vacuumed journal catching up.

mod rebuild_and_vacuum;
mod search;
mod writes;

use crate::kit::*;
use serde_json::{Value, json};
use std::collections::HashMap;

pub(crate) const NOTES: &str = "personal.notes.misc";

pub(crate) fn notes_table(s: &Server) {
    s.ok(
        "create_table",
        json!({"table": NOTES, "columns": {"title": {"type": "text"}, "tags": {"type": "list"}}}),
    );
}

fn note(s: &Server, id: &str, title: &str, body: &str) -> Value {
    s.ok(
        "insert_row",
        json!({"table": NOTES, "id": id, "values": {"title": title}, "body": body}),
    )
}

/// A few notes written with different words than the questions asked of them.
pub(crate) fn seed(s: &Server) {
    notes_table(s);
    note(
        s,
        "budget-call",
        "Call with Ada",
        "Promised Ada to cut the travel spending by ten percent before the spring review.",
    );
    note(
        s,
        "oat-milk",
        "Buy oat milk",
        "Groceries for the week: oat milk, bread and apples.",
    );
    note(
        s,
        "bike",
        "Fix the bike",
        "The rear brake pads are worn; replace them and true the wheel.",
    );
    note(
        s,
        "taxes",
        "File the tax return",
        "Collect the receipts and send the declaration to the revenue office.",
    );
}

pub(crate) fn search(s: &Server, args: Value) -> Value {
    s.ok("search_notes", args)
}

pub(crate) fn ids(v: &Value) -> Vec<String> {
    v["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["id"].as_str().unwrap().to_string())
        .collect()
}

/// Every row once, at its current version: what the semantic index holds (its store on disk,
/// and what it serves: a semantic search wide enough for every row, when there are at most
/// 1,000), against every row of `tables` as `select_rows` pages them.
pub(crate) fn assert_consistent(s: &Server, tables: &[&str]) {
    let st = s.indexed();
    let mut want: HashMap<String, i64> = HashMap::new();
    for t in tables {
        let mut offset = 0;
        loop {
            let rows = s.ok(
                "select_rows",
                json!({"table": t, "limit": 1000, "offset": offset, "columns": ["id"]}),
            );
            let rows = rows["rows"].as_array().unwrap().clone();
            for r in &rows {
                want.insert(
                    format!("{t}/{}", r["id"].as_str().unwrap()),
                    r["version"].as_i64().unwrap(),
                );
            }
            if rows.len() < 1000 {
                break;
            }
            offset += 1000;
        }
    }
    assert_eq!(st["rows"].as_u64(), Some(want.len() as u64), "{st}");
    let diff = |got: &HashMap<String, i64>, what: &str| {
        let mut d: Vec<String> = want
            .iter()
            .filter(|(k, v)| got.get(*k) != Some(v))
            .map(|(k, v)| format!("{k} v{v}: {what} has {:?}", got.get(k)))
            .chain(
                got.keys()
                    .filter(|k| !want.contains_key(*k))
                    .map(|k| format!("{k}: not a row")),
            )
            .collect();
        d.sort();
        d.truncate(10);
        assert!(d.is_empty(), "the index differs from the rows: {d:?}");
    };
    let db = rusqlite::Connection::open_with_flags(
        s.dir.join(".datanotes/semantic.db"),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .unwrap();
    let mut stored: HashMap<String, i64> = HashMap::new();
    let mut q = db.prepare("SELECT tbl, id, version FROM rows").unwrap();
    let mut rows = q.query([]).unwrap();
    while let Some(r) = rows.next().unwrap() {
        let key = format!(
            "{}/{}",
            r.get::<_, String>(0).unwrap(),
            r.get::<_, String>(1).unwrap()
        );
        assert!(
            stored.insert(key.clone(), r.get(2).unwrap()).is_none(),
            "{key} twice"
        );
    }
    diff(&stored, "the store");
    if want.len() <= 1000 {
        let v = search(
            s,
            json!({"query": "note", "mode": "semantic", "limit": 1000}),
        );
        let mut served: HashMap<String, i64> = HashMap::new();
        for h in v["hits"].as_array().unwrap() {
            let key = format!(
                "{}/{}",
                h["table"].as_str().unwrap(),
                h["id"].as_str().unwrap()
            );
            assert!(
                served
                    .insert(key.clone(), h["version"].as_i64().unwrap())
                    .is_none(),
                "{key} twice"
            );
        }
        diff(&served, "the served index");
    }
}

pub(crate) fn bulk(s: &Server, n: usize, threads: usize, prefix: &str) {
    bulk_long(s, n, threads, prefix, 1)
}

/// `n` rows, each with `paragraphs` paragraphs of about 100 words (a chunk per two).
pub(crate) fn bulk_long(s: &Server, n: usize, threads: usize, prefix: &str, paragraphs: usize) {
    std::thread::scope(|sc| {
        for t in 0..threads {
            sc.spawn(move || {
                for i in (t..n).step_by(threads) {
                    s.ok(
                        "insert_row",
                        json!({"table": NOTES, "id": format!("{prefix}-{i}"),
                               "values": {"title": format!("Note {i} about {}", ["rivers", "music", "cooking", "taxes"][i % 4])},
                               "body": vec![format!("Paragraph {i}: a line of text for the index. {}", "Words about the weather, the garden and the river. ".repeat(10)); paragraphs].join("\n\n")}),
                    );
                }
            });
        }
    });
}
