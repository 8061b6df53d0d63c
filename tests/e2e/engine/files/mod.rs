//! The files are the truth: hand edits while serving (the watcher) and while stopped, invalid
//! rows, the index rebuilt from the files, crash recovery, and the file format's round trip.
//!
//! - `hand_edits`: rows written, changed and deleted by hand, while serving and while stopped;
//! - `definitions`: definitions by hand, files that are not rows, the engine's own writes, the
//!   round trip of values, a kill;
//! - `hostile`: the folder is hostile input (links, special files, huge files, bad names);
//! - `races`: hand edits racing API writes, and writes whose file cannot be written;
//! - `one_server`: one server per folder, and the engine's folder is private.

mod definitions;
mod hand_edits;
mod hostile;
mod one_server;
mod races;

use crate::kit::*;
use serde_json::{Value, json};
use std::time::Duration;

/// A table definition of one required text column (`work.crm.notes` and others).
const NOTES_DEF: &str = "columns:\n  text:\n    type: text\n    required: true\n";

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
