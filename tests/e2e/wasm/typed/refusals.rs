//! What a typed tool refuses: wrong arguments, with their path, before the guest runs; engine
//! calls outside the app's scopes.

use super::*;

#[test]
fn wrong_arguments_are_refused_with_their_path_before_the_guest_runs() {
    let s = server();
    s.install(
        "shapes",
        "shapes",
        json!({"write": ["personal.stars.*"], "ddl": true}),
    );
    let with = |f: &str, v: Value| {
        let mut k = kinds_high();
        k[f] = v;
        json!({"k": k})
    };
    let cases: Vec<(&str, Value, &str)> = vec![
        (
            "shapes_norm2",
            json!({"p": {"x": "three", "y": 1}}),
            "p.x: expected an integer in -2147483648..2147483647, got \"three\"",
        ),
        (
            "shapes_norm2",
            json!({"p": {"x": 2147483648i64, "y": 1}}),
            "p.x: expected an integer in -2147483648..2147483647, got 2147483648",
        ),
        (
            "shapes_norm2",
            json!({"p": {"x": 1.5, "y": 1}}),
            "p.x: expected an integer",
        ),
        (
            "shapes_norm2",
            json!({"p": {"x": 1}}),
            "p.y: missing (expected an integer in",
        ),
        (
            "shapes_norm2",
            json!({"p": {"x": 1, "y": 2, "z": 3}}),
            "p.z: no such field (the fields are: x, y)",
        ),
        (
            "shapes_norm2",
            json!({"p": [1, 2]}),
            "p: expected an object with x, y, got [1,2]",
        ),
        ("shapes_norm2", json!({}), "p: missing"),
        ("shapes_norm2", json!([1]), "arguments: expected an object"),
        (
            "shapes_hello",
            json!({"name": "x", "nme": 1}),
            "nme: no such parameter (the parameters are: name)",
        ),
        (
            "shapes_hello",
            json!({"name": 5}),
            "name: expected a string, got 5",
        ),
        (
            "shapes_area",
            json!({"s": {"tag": "square"}}),
            "s.tag: expected an object {\"tag\": \"circle\" | \"rect\" | \"dot\"",
        ),
        (
            "shapes_area",
            json!({"s": {"tag": "circle"}}),
            "s.val: missing (expected a number)",
        ),
        (
            "shapes_area",
            json!({"s": {"tag": "dot", "val": 1}}),
            "s.val: expected nothing",
        ),
        (
            "shapes_area",
            json!({"s": {"tag": "rect", "val": [1]}}),
            "s.val: expected an array of 2 items, got [1]",
        ),
        (
            "shapes_area",
            json!({"s": {"tag": "dot"}, "unit": "km"}),
            "unit: expected one of \"mm\", \"cm\", \"inch\" or null, got \"km\"",
        ),
        (
            "shapes_styled",
            json!({"text": "x", "style": {"bold": "yes"}}),
            "style.bold: expected true or false, got \"yes\"",
        ),
        (
            "shapes_styled",
            json!({"text": "x", "style": {"strike": true}}),
            "style.strike: no such flag (the flags are: bold, italic, underline)",
        ),
        (
            "shapes_divide",
            json!({"a": 1, "b": "2"}),
            "b: expected an integer in -9223372036854775808..9223372036854775807",
        ),
        (
            "shapes_echo",
            with("b", json!("true")),
            "k.b: expected true or false",
        ),
        (
            "shapes_echo",
            with("i8", json!(-129)),
            "k.i8: expected an integer in -128..127, got -129",
        ),
        (
            "shapes_echo",
            with("u64", json!(-1)),
            "k.u64: expected an integer in 0..18446744073709551615, got -1",
        ),
        (
            "shapes_echo",
            with("f64", json!("1.0")),
            "k.f64: expected a number",
        ),
        (
            "shapes_echo",
            with("c", json!("ab")),
            "k.c: expected a string of one character, got \"ab\"",
        ),
        (
            "shapes_echo",
            with("c", json!("")),
            "k.c: expected a string of one character",
        ),
        (
            "shapes_echo",
            with("bytes", json!([1, 300])),
            "k.bytes[1]: expected an integer in 0..255, got 300",
        ),
        (
            "shapes_echo",
            with("words", json!("a")),
            "k.words: expected an array",
        ),
        (
            "shapes_echo",
            with("maybe", json!(-1)),
            "k.maybe: expected an integer in 0..4294967295",
        ),
        (
            "shapes_echo",
            with("outcome", json!({"ok": 1, "err": "x"})),
            "k.outcome: expected an object {\"ok\": …} or {\"err\": …}",
        ),
        (
            "shapes_echo",
            with("outcome", json!({"ok": "x"})),
            "k.outcome.ok: expected an integer in 0..255",
        ),
        (
            "shapes_echo",
            with("pair", json!([1, "a", 2])),
            "k.pair: expected an array of 2 items",
        ),
        (
            "shapes_echo",
            with("pair", json!([1, 2])),
            "k.pair[1]: expected a string, got 2",
        ),
        (
            "shapes_echo",
            with("unit", json!(1)),
            "k.unit: expected a string or null, got 1",
        ),
    ];
    for (tool, args, want) in &cases {
        let e = s.tool_err(tool, args.clone());
        assert!(
            e.starts_with(want),
            "{tool} {args}: {e:?} should start with {want:?}"
        );
    }
    // Over MCP too, as an error result.
    let mcp = Agent::owner(&s);
    let r = mcp.call("shapes_norm2", json!({"p": {"x": "three", "y": 1}}));
    assert!(is_error(&r));
    assert_eq!(
        text(&r),
        "p.x: expected an integer in -2147483648..2147483647, got \"three\""
    );

    // The guest is not called: a refused add_note writes nothing.
    s.tool_ok(
        "shapes_make_table",
        json!({"table": "personal.stars.notes"}),
    );
    s.tool_ok(
        "shapes_add_note",
        json!({"table": "personal.stars.notes", "note": "one", "stars": 5}),
    );
    let e = s.tool_err(
        "shapes_add_note",
        json!({"table": "personal.stars.notes", "note": "two", "stars": 256}),
    );
    assert!(
        e.starts_with("stars: expected an integer in 0..255, got 256"),
        "{e}"
    );
    let rows = s.ok("select_rows", json!({"table": "personal.stars.notes"}));
    assert_eq!(rows["total"], 1, "{rows}");
}

#[test]
fn a_typed_components_engine_calls_run_with_the_apps_scopes() {
    let s = server();
    s.install(
        "shapes",
        "shapes",
        json!({"write": ["personal.stars.*"], "ddl": true}),
    );
    s.install("plain", "shapes", json!({}));
    // Two apps of one component: each its own tools, no collision.
    assert_eq!(sorted(&s.app("plain")["tools"]), shapes_tools("plain"));

    // DDL without `ddl`: refused, nothing created.
    let e = s.tool_err("plain_make_table", json!({"table": "personal.stars.notes"}));
    assert!(e.contains("ddl"), "{e}");
    s.refused(
        "describe_table",
        json!({"table": "personal.stars.notes"}),
        404,
    );
    // With it, inside `write`.
    s.tool_ok(
        "shapes_make_table",
        json!({"table": "personal.stars.notes"}),
    );
    let id = s.tool_ok(
        "shapes_add_note",
        json!({"table": "personal.stars.notes", "note": "kept", "stars": 3}),
    );
    assert!(id["result"]["ok"].is_string(), "{id}");
    // A write outside `write`: refused, nothing changed.
    let e = s.tool_err(
        "plain_add_note",
        json!({"table": "personal.stars.notes", "note": "no", "stars": 1}),
    );
    assert!(e.contains("write"), "{e}");
    s.ok(
        "create_table",
        json!({"table": "personal.other.notes", "columns": {"note": {"type": "text"}, "stars": {"type": "integer"}}}),
    );
    let e = s.tool_err(
        "shapes_add_note",
        json!({"table": "personal.other.notes", "note": "no", "stars": 1}),
    );
    assert!(e.contains("personal.stars.*"), "{e}");
    let rows = s.ok("select_rows", json!({"table": "personal.stars.notes"}));
    assert_eq!(rows["total"], 1, "{rows}");
    assert_eq!(rows["rows"][0]["values"]["note"], "kept");
    let other = s.ok("select_rows", json!({"table": "personal.other.notes"}));
    assert_eq!(other["total"], 0, "{other}");
    // Journaled with the app as actor.
    let m = s.migrations(json!({"table": "personal.stars.notes"}));
    assert_eq!(m[0]["actor"]["app"], "shapes", "{}", m[0]);
}
