//! Every column type and constraint refusing a bad value (and changing nothing) and accepting a
//! good one; names that could become paths; malformed requests.
//!
//! - `types`: each type refuses a wrong value and accepts a good one;
//! - `constraints`: required, default, unknown columns, enum, link, unique, pattern, min and max;
//! - `names`: table, row and column names that could become paths;
//! - `requests`: malformed and oversized requests, tokens and the actor header.

mod constraints;
mod names;
mod requests;
mod types;

use crate::kit::*;
use serde_json::{Value, json};

/// Inserting `values` into tasks is refused on `column` for `rule`, and nothing changes.
fn bad_insert(s: &Server, values: Value, column: &str, rule: &str) {
    let e = s.refused_unchanged(
        "insert_row",
        json!({"table": TASKS, "values": values}),
        422,
        Some(column),
        rule,
    );
    assert_eq!(e["code"], "constraint_violation", "{e}");
    assert_eq!(e["table"], TASKS, "{e}");
    assert!(
        e["hint"].as_str().is_some_and(|h| !h.is_empty()),
        "a refusal teaches: {e}"
    );
    assert!(
        e["message"].as_str().unwrap().contains(column),
        "the message names the column: {e}"
    );
}

/// Updating row `ok` of tasks with `values` is refused the same way.
fn bad_update(s: &Server, values: Value, column: &str, rule: &str) {
    s.refused_unchanged(
        "update_row",
        json!({"table": TASKS, "id": "ok", "values": values}),
        422,
        Some(column),
        rule,
    );
}

/// A good value is accepted, and answered in its normal form.
fn good(s: &Server, column: &str, value: Value, stored: Value) {
    let id = format!("good-{}", s.seq());
    s.ok(
        "insert_row",
        json!({"table": TASKS, "id": id, "values": {"title": "t", column: value}}),
    );
    let row = s.ok("get_row", json!({"table": TASKS, "id": id}));
    assert_eq!(row["values"][column], stored, "{column} {value}");
    s.ok("delete_row", json!({"table": TASKS, "id": id}));
}

fn setup() -> Server {
    let s = Server::start();
    create_tasks(&s);
    s.ok(
        "insert_row",
        json!({"table": TASKS, "id": "ok", "values": {"title": "fine", "code": "AB-1", "estimate": 1}}),
    );
    s
}
