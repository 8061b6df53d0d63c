//! Typed components (issue 14): a component that does not target datanotes' world, its
//! exported WIT functions as tools. `shapes` (plugins/shapes) is installed, listed and called
//! through `/apps/call/` and MCP: every WIT type kind round-trips with edge values, wrong
//! arguments are refused with their path before the guest runs, a `result` err is an error
//! result, the function taking a resource is skipped with a reason, the engine import runs
//! with the app's scopes, names and collisions, a restart keeps the tools, an update swaps the
//! component at once under concurrent calls. `units` (Python) and `textkit` (JavaScript) work
//! the same.
//!
//! - `round_trip`: installed, listed (schemas, descriptions), every type kind round-tripped; a
//!   component importing what the engine lacks refused;
//! - `refusals`: wrong arguments refused with their path, engine calls held to the app's scopes;
//! - `updates`: a restart keeps the tools, an update swaps the component under concurrent calls;
//! - `languages`: the Python and JavaScript typed components.

mod languages;
mod refusals;
mod round_trip;
mod updates;

use super::*;

/// The tools of `shapes` installed as app `app`, sorted.
fn shapes_tools(app: &str) -> Vec<String> {
    let mut t: Vec<String> = [
        "hello",
        "norm2",
        "area",
        "divide",
        "geometry_describe",
        "echo",
        "styled",
        "text_describe",
        "add_note",
        "make_table",
    ]
    .iter()
    .map(|n| format!("{app}_{n}"))
    .collect();
    t.sort();
    t
}

fn sorted(v: &Value) -> Vec<String> {
    let mut t: Vec<String> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_str().unwrap().to_string())
        .collect();
    t.sort();
    t
}

/// A value of every kind, at the low edges.
fn kinds_low() -> Value {
    json!({
        "b": false, "i8": -128, "u8": 0, "i16": -32768, "u16": 0, "i32": -2147483648i64,
        "u32": 0, "i64": i64::MIN, "u64": 0, "f32": -1.5, "f64": -0.25, "c": "🦀",
        "s": "", "bytes": [], "words": [], "maybe": null, "outcome": {"err": "naïve ünïcode"},
        "pair": [0, ""], "style": {}, "unit": null
    })
}

/// A value of every kind, at the high edges.
fn kinds_high() -> Value {
    json!({
        "b": true, "i8": 127, "u8": 255, "i16": 32767, "u16": 65535, "i32": 2147483647,
        "u32": 4294967295u64, "i64": i64::MAX, "u64": u64::MAX, "f32": 3.25, "f64": 1e300,
        "c": "é", "s": "héllo 🦀 \"quoted\"\n", "bytes": [0, 1, 255], "words": ["a", "", "ç"],
        "maybe": 7, "outcome": {"ok": 255}, "pair": [255, "x"],
        "style": {"bold": true, "underline": true}, "unit": "cm"
    })
}
