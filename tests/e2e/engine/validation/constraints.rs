//! Constraints: required, default and unknown columns; enum, link, unique and pattern; min and
//! max for every kind of bound.

use super::*;

#[test]
fn required_default_and_unknown_columns() {
    let s = setup();
    bad_insert(&s, json!({"estimate": 1}), "title", "required");
    bad_insert(&s, json!({"title": null}), "title", "required");
    bad_update(&s, json!({"title": null}), "title", "required");
    bad_insert(
        &s,
        json!({"title": "x", "colour": "red"}),
        "colour",
        "unknown_column",
    );
    bad_update(&s, json!({"colour": "red"}), "colour", "unknown_column");
    s.refused_unchanged(
        "update_row",
        json!({"table": TASKS, "id": "ok", "values": {"id": "other"}}),
        422,
        Some("id"),
        "unknown_column",
    );

    // Default: filled when absent or null, not when given.
    s.ok(
        "insert_row",
        json!({"table": TASKS, "id": "d1", "values": {"title": "x"}}),
    );
    s.ok(
        "insert_row",
        json!({"table": TASKS, "id": "d2", "values": {"title": "x", "status": null}}),
    );
    s.ok(
        "insert_row",
        json!({"table": TASKS, "id": "d3", "values": {"title": "x", "status": "done"}}),
    );
    for (id, st) in [("d1", "todo"), ("d2", "todo"), ("d3", "done")] {
        assert_eq!(
            s.ok("get_row", json!({"table": TASKS, "id": id}))["values"]["status"],
            st
        );
    }
    // Clearing a column with a default leaves it empty (defaults are for inserts).
    s.ok(
        "update_row",
        json!({"table": TASKS, "id": "d3", "values": {"status": null}}),
    );
    assert!(
        s.ok("get_row", json!({"table": TASKS, "id": "d3"}))["values"]
            .get("status")
            .is_none()
    );
    // A wrong default given at insert time is still refused on its own merits.
    bad_insert(
        &s,
        json!({"title": "x", "status": "later"}),
        "status",
        "enum",
    );
}

#[test]
fn enum_link_unique_and_pattern() {
    let s = setup();
    bad_insert(
        &s,
        json!({"title": "x", "status": "later"}),
        "status",
        "enum",
    );
    bad_insert(
        &s,
        json!({"title": "x", "status": "TODO"}),
        "status",
        "enum",
    );
    bad_update(&s, json!({"status": "later"}), "status", "enum");

    bad_insert(
        &s,
        json!({"title": "x", "owner": "nobody"}),
        "owner",
        "link",
    );
    bad_insert(
        &s,
        json!({"title": "x", "owner": "../people/ada"}),
        "owner",
        "link",
    );
    bad_update(&s, json!({"owner": "nobody"}), "owner", "link");

    bad_insert(&s, json!({"title": "x", "code": "AB-1"}), "code", "unique");
    s.ok(
        "insert_row",
        json!({"table": TASKS, "id": "other", "values": {"title": "x", "code": "AB-2"}}),
    );
    s.refused_unchanged(
        "update_row",
        json!({"table": TASKS, "id": "other", "values": {"code": "AB-1"}}),
        422,
        Some("code"),
        "unique",
    );
    // A row keeps its own unique value; a freed value can be taken.
    s.ok(
        "update_row",
        json!({"table": TASKS, "id": "ok", "values": {"code": "AB-1", "estimate": 2}}),
    );
    s.ok("delete_row", json!({"table": TASKS, "id": "other"}));
    s.ok(
        "insert_row",
        json!({"table": TASKS, "values": {"title": "y", "code": "AB-2"}}),
    );
    // Unique on an email of people, through a different table.
    let e = s.refused_nochange(
        "insert_row",
        json!({"table": PEOPLE, "values": {"name": "Grace", "email": "not an email"}}),
        422,
    );
    assert_eq!(
        (e["column"].as_str(), e["rule"].as_str()),
        (Some("email"), Some("pattern"))
    );
    s.ok(
        "insert_row",
        json!({"table": PEOPLE, "id": "g", "values": {"name": "Grace", "email": "g@x.org"}}),
    );
    let e = s.refused_nochange(
        "insert_row",
        json!({"table": PEOPLE, "values": {"name": "Grace 2", "email": "g@x.org"}}),
        422,
    );
    assert_eq!(
        (e["column"].as_str(), e["rule"].as_str()),
        (Some("email"), Some("unique"))
    );

    bad_insert(&s, json!({"title": "x", "code": "ab-1"}), "code", "pattern");
    bad_insert(
        &s,
        json!({"title": "x", "code": "AB-1 "}),
        "code",
        "pattern",
    );
    bad_update(&s, json!({"code": "A-1"}), "code", "pattern");
    // A list's pattern applies to each item.
    bad_insert(
        &s,
        json!({"title": "x", "tags": ["ok", "Not-ok"]}),
        "tags",
        "pattern",
    );
    good(&s, "tags", json!(["ok", "fine"]), json!(["ok", "fine"]));
}

#[test]
fn min_and_max_for_every_kind_of_bound() {
    let s = setup();
    s.ok(
        "create_table",
        json!({"table": "work.crm.bounds", "columns": {
            "name": {"type": "text", "min": 2, "max": 4},
            "when": {"type": "datetime", "min": "2026-01-01T00:00:00Z", "max": "2026-12-31T23:59:59+00:00"},
            "rank": {"type": "enum", "values": ["a", "bbbbb"], "max": 3}
        }}),
    );
    // Integer value.
    bad_insert(&s, json!({"title": "x", "estimate": -1}), "estimate", "min");
    bad_insert(
        &s,
        json!({"title": "x", "estimate": 101}),
        "estimate",
        "max",
    );
    bad_update(&s, json!({"estimate": 1000}), "estimate", "max");
    good(&s, "estimate", json!(0), json!(0));
    good(&s, "estimate", json!(100), json!(100));
    // Number value.
    bad_insert(&s, json!({"title": "x", "score": -1.51}), "score", "min");
    bad_insert(&s, json!({"title": "x", "score": 99.51}), "score", "max");
    good(&s, "score", json!(-1.5), json!(-1.5));
    good(&s, "score", json!(99.5), json!(99.5));
    // Text length, in characters.
    bad_insert(&s, json!({"title": "x".repeat(81)}), "title", "max");
    good(&s, "title", json!("é".repeat(80)), json!("é".repeat(80)));
    // List length.
    bad_insert(
        &s,
        json!({"title": "x", "tags": ["a", "b", "c", "d"]}),
        "tags",
        "max",
    );
    good(&s, "tags", json!(["a", "b", "c"]), json!(["a", "b", "c"]));
    // Dates.
    bad_insert(&s, json!({"title": "x", "due": "1999-12-31"}), "due", "min");
    bad_insert(&s, json!({"title": "x", "due": "2100-01-01"}), "due", "max");
    good(&s, "due", json!("2000-01-01"), json!("2000-01-01"));
    good(&s, "due", json!("2099-12-31"), json!("2099-12-31"));

    let b = "work.crm.bounds";
    let refuse = |values: Value, column: &str, rule: &str| {
        s.refused_unchanged(
            "insert_row",
            json!({"table": b, "values": values}),
            422,
            Some(column),
            rule,
        );
    };
    refuse(json!({"name": "a"}), "name", "min");
    refuse(json!({"name": "abcde"}), "name", "max");
    refuse(json!({"when": "2025-12-31T23:59:59Z"}), "when", "min");
    refuse(json!({"when": "2026-01-01T00:59:59+01:00"}), "when", "min");
    refuse(json!({"when": "2027-01-01T00:00:00Z"}), "when", "max");
    refuse(json!({"rank": "bbbbb"}), "rank", "max");
    for v in [
        json!({"name": "ab"}),
        json!({"name": "abcd"}),
        json!({"when": "2026-01-01T00:00:00Z"}),
        json!({"when": "2026-12-31T23:59:59Z"}),
        json!({"when": "2027-01-01T00:59:59+01:00"}),
        json!({"rank": "a"}),
    ] {
        s.ok("insert_row", json!({"table": b, "values": v}));
    }
    assert_eq!(s.ok("describe_table", json!({"table": b}))["rows"], 6);
}
