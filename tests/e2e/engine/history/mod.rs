//! The journal, undo, restore and vacuum: every write is recorded with its actor and can be
//! taken back.
//!
//! - `journal`: every write journaled with its actor, and a seq that only grows;
//! - `undo`: row writes and table changes undone, and refused when the row changed since;
//! - `restore`: a row or a whole table back to a point in time;
//! - `vacuum`: history dropped, and what restore and versions do after it;
//! - `concurrency`: concurrent writes, each checked and journaled once.

mod concurrency;
mod journal;
mod restore;
mod undo;
mod vacuum;

use crate::kit::*;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::PathBuf;

const ACTOR: (&str, &str) = ("X-Datanotes-Actor", "claude-code / opus-4");

fn w(s: &Server, op: &str, args: Value) -> Value {
    let (st, v) = s.call_with(op, &[ACTOR], args.clone());
    assert_eq!(st, 200, "{op} {args}: {v}");
    v
}

fn seq_of(v: &Value) -> i64 {
    v["seq"].as_i64().unwrap_or_else(|| panic!("no seq in {v}"))
}

/// The files of one table folder.
fn table_files(s: &Server, table: &str) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut d = s.dir.clone();
    for p in table.split('.') {
        d.push(p);
    }
    if d.exists() {
        snapshot(&d)
    } else {
        BTreeMap::new()
    }
}

fn migration(s: &Server, seq: i64) -> Value {
    let m = s.migrations(json!({"before": seq + 1, "limit": 1}));
    assert_eq!(m[0]["seq"], seq, "{m:?}");
    m[0].clone()
}
