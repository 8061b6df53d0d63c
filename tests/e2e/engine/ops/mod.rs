//! Every operation of the catalog, end to end: through the real server and the real files.

mod journal_and_settings;
mod rows;
mod select;
mod tables;

use crate::kit::*;
use serde_json::{Value, json};

fn insert(s: &Server, values: Value, body: &str) -> Value {
    s.ok(
        "insert_row",
        json!({"table": TASKS, "values": values, "body": body}),
    )
}

/// The tasks table with rows for the select tests: ids a..e.
fn select_fixture(s: &Server) {
    create_tasks(s);
    select_fixture_rows(s);
}

fn select_fixture_rows(s: &Server) {
    for (id, title, est, score, done, due, at, tags, owner) in [
        (
            "a",
            "Alpha report",
            Some(1),
            Some(0.5),
            Some(true),
            Some("2026-01-10"),
            Some("2026-01-10T08:00:00Z"),
            Some(json!(["home", "work"])),
            Some("ada"),
        ),
        (
            "b",
            "beta Review",
            Some(5),
            Some(2.25),
            Some(false),
            Some("2026-02-01"),
            Some("2026-01-10T09:00:00+02:00"),
            Some(json!(["work"])),
            Some("alan"),
        ),
        (
            "c",
            "Gamma",
            Some(5),
            None,
            None,
            Some("2025-12-31"),
            None,
            Some(json!([])),
            None,
        ),
        (
            "d",
            "Delta review notes",
            Some(10),
            Some(-1.0),
            Some(true),
            None,
            Some("2026-03-01T00:00:00Z"),
            None,
            Some("ada"),
        ),
        (
            "e",
            "Epsilon",
            None,
            Some(7.0),
            Some(false),
            Some("2026-06-30"),
            Some("2025-06-30T23:59:59Z"),
            Some(json!(["homework"])),
            None,
        ),
    ] {
        let mut v = json!({"title": title});
        let o = v.as_object_mut().unwrap();
        if let Some(x) = est {
            o.insert("estimate".into(), json!(x));
        }
        if let Some(x) = score {
            o.insert("score".into(), json!(x));
        }
        if let Some(x) = done {
            o.insert("done".into(), json!(x));
        }
        if let Some(x) = due {
            o.insert("due".into(), json!(x));
        }
        if let Some(x) = at {
            o.insert("at".into(), json!(x));
        }
        if let Some(x) = tags {
            o.insert("tags".into(), x);
        }
        if let Some(x) = owner {
            o.insert("owner".into(), json!(x));
        }
        s.ok(
            "insert_row",
            json!({"table": TASKS, "id": id, "values": v, "body": format!("body of {id}")}),
        );
    }
}

fn w(s: &Server, column: &str, op: &str, value: Value) -> Vec<String> {
    s.ids(json!({"table": TASKS, "where": [{"column": column, "op": op, "value": value}]}))
}
