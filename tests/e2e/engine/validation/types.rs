//! Each column type refuses a wrong value (the row unchanged) and accepts a good one, answered
//! in its normal form.

use super::*;

#[test]
fn each_type_refuses_a_wrong_value() {
    let s = setup();
    for (col, bad) in [
        ("title", json!(5)),
        ("title", json!(true)),
        ("title", json!(["a"])),
        ("title", json!({"a": 1})),
        ("estimate", json!("5")),
        ("estimate", json!(1.5)),
        ("estimate", json!(true)),
        ("estimate", json!(1e20)),
        ("score", json!("1.5")),
        ("score", json!(false)),
        ("score", json!([1])),
        ("done", json!("true")),
        ("done", json!(1)),
        ("done", json!(0)),
        ("due", json!("2026-13-01")),
        ("due", json!("2026-02-30")),
        ("due", json!("2026-1-1")),
        ("due", json!("2026-01-01T00:00:00Z")),
        ("due", json!(20260101)),
        ("at", json!("2026-01-01")),
        ("at", json!("2026-01-01 10:00:00")),
        ("at", json!("2026-01-01T10:00:00")),
        ("at", json!("yesterday")),
        ("at", json!(1767261600)),
        ("status", json!(1)),
        ("status", json!(["todo"])),
        ("tags", json!("home")),
        ("tags", json!([1])),
        ("tags", json!([["a"]])),
        ("tags", json!([null])),
        ("owner", json!(5)),
        ("owner", json!(["ada"])),
    ] {
        bad_insert(&s, json!({"title": "x", col: bad}), col, "type");
        bad_update(&s, json!({col: bad}), col, "type");
    }
    // Nothing of it reached the row.
    let row = s.ok("get_row", json!({"table": TASKS, "id": "ok"}));
    assert_eq!(row["version"], 1);
    assert_eq!(
        row["values"],
        json!({"title": "fine", "status": "todo", "estimate": 1, "code": "AB-1"})
    );
}

#[test]
fn each_type_accepts_a_good_value() {
    let s = setup();
    good(
        &s,
        "title",
        json!("héllo: \"world\""),
        json!("héllo: \"world\""),
    );
    good(&s, "estimate", json!(7), json!(7));
    good(&s, "estimate", json!(7.0), json!(7));
    good(&s, "score", json!(2.5), json!(2.5));
    good(&s, "score", json!(3), json!(3));
    good(&s, "done", json!(true), json!(true));
    good(&s, "done", json!(false), json!(false));
    good(&s, "due", json!("2024-02-29"), json!("2024-02-29"));
    good(
        &s,
        "at",
        json!("2026-11-30T09:00:00Z"),
        json!("2026-11-30T09:00:00Z"),
    );
    good(
        &s,
        "at",
        json!("2026-11-30T10:30:00.250+01:30"),
        json!("2026-11-30T09:00:00.250Z"),
    );
    good(&s, "status", json!("doing"), json!("doing"));
    good(&s, "tags", json!(["a", "b"]), json!(["a", "b"]));
    good(&s, "tags", json!([]), json!([]));
    good(&s, "owner", json!("ada"), json!("ada"));
    good(&s, "code", json!("ZZ-42"), json!("ZZ-42"));
}
