//! Apps: the registry, app tokens and their scopes, through the real HTTP server.

mod attribution;
mod matrix;
mod self_service;

use crate::kit::*;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::time::Duration;

/// The table every write cell of the matrix aims at.
const T: &str = "alpha.beta.gamma";

fn table_def(table: &str) -> Value {
    json!({"table": table, "columns": {"title": {"type": "text", "required": true}}})
}

/// Everything a refused call must leave alone: the files, the journal's last seq and the
/// engine's own registries.
#[derive(PartialEq)]
struct State {
    files: BTreeMap<PathBuf, Vec<u8>>,
    seq: i64,
    meta: Vec<(&'static str, Option<Vec<u8>>)>,
}

fn state(s: &Server) -> State {
    State {
        files: snapshot(&s.dir),
        seq: s.seq(),
        meta: ["apps.json", "webhooks.json", "settings.json"]
            .into_iter()
            .map(|f| (f, std::fs::read(s.dir.join(".datanotes").join(f)).ok()))
            .collect(),
    }
}

fn assert_unchanged(before: &State, after: &State, what: &str) {
    if before == after {
        return;
    }
    let mut diff = vec![];
    if before.seq != after.seq {
        diff.push(format!("journal seq {} -> {}", before.seq, after.seq));
    }
    for (p, b) in &before.files {
        if after.files.get(p) != Some(b) {
            diff.push(format!("{} changed or vanished", p.display()));
        }
    }
    for p in after.files.keys() {
        if !before.files.contains_key(p) {
            diff.push(format!("{} appeared", p.display()));
        }
    }
    for ((f, b), (_, a)) in before.meta.iter().zip(&after.meta) {
        if a != b {
            diff.push(format!(".datanotes/{f} changed"));
        }
    }
    panic!("{what} changed something: {}", diff.join("; "));
}

fn assert_error_shape(v: &Value, code: &str) -> Value {
    let e = &v["error"];
    assert_eq!(e["code"], code, "{v}");
    assert!(
        e["message"].as_str().is_some_and(|m| !m.is_empty()),
        "message: {v}"
    );
    assert!(
        e["hint"].as_str().is_some_and(|m| !m.is_empty()),
        "hint: {v}"
    );
    e.clone()
}

/// A tool call's report, for `tool-calls/record`.
fn tool_call(n: u32) -> Value {
    json!({"tool": "search", "args": {"q": n}, "ok": true, "value": "found", "servedBy": "matrix",
           "durationMs": 1.5, "summary": "one hit", "session": null, "resultChars": 5, "resultTokens": 2})
}
