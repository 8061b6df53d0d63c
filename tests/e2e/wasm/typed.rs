//! Typed components (issue 14): a component that does not target datanotes' world, its
//! exported WIT functions as tools. `shapes` (plugins/shapes) is installed, listed and called
//! through `/apps/call/` and MCP: every WIT type kind round-trips with edge values, wrong
//! arguments are refused with their path before the guest runs, a `result` err is an error
//! result, the function taking a resource is skipped with a reason, the engine import runs
//! with the app's scopes, names and collisions, a restart keeps the tools, an update swaps the
//! component at once under concurrent calls. `units` (Python) and `textkit` (JavaScript) work
//! the same.

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

#[test]
fn a_typed_component_installs_lists_and_round_trips_every_type_kind() {
    let s = server();
    let v = s.install("shapes", "shapes", json!({}));
    assert_eq!(sorted(&v["app"]["tools"]), shapes_tools("shapes"), "{v}");
    // The function taking a resource, and the resource's own functions: skipped, with why.
    let a = s.app("shapes");
    let skipped = a["skippedTools"].as_array().unwrap();
    let peek = skipped
        .iter()
        .find(|x| x["name"] == "shapes_peek")
        .unwrap_or_else(|| panic!("shapes_peek is skipped: {a}"));
    let why = peek["reason"].as_str().unwrap();
    assert!(
        why.contains("its parameter c is a resource") && why.contains("peek(c: borrow<resource>)"),
        "{why}"
    );
    assert!(
        skipped.iter().any(|x| x["reason"]
            .as_str()
            .unwrap()
            .contains("belongs to a resource")),
        "{a}"
    );

    // MCP: schemas from the WIT types, an output schema, a description.
    let mcp = Agent::owner(&s);
    let tools = mcp.tools();
    let tool =
        |n: &str| serde_json::to_value(tools.iter().find(|t| t.name == n).expect(n)).unwrap();
    let norm2 = tool("shapes_norm2");
    assert_eq!(
        norm2["inputSchema"]["properties"]["p"],
        json!({"type": "object", "properties": {
            "x": {"type": "integer", "minimum": -2147483648i64, "maximum": 2147483647},
            "y": {"type": "integer", "minimum": -2147483648i64, "maximum": 2147483647}},
            "required": ["x", "y"], "additionalProperties": false}),
        "{norm2}"
    );
    assert_eq!(
        norm2["outputSchema"]["properties"]["result"],
        json!({"type": "integer", "minimum": 0, "maximum": u64::MAX}),
        "{norm2}"
    );
    // The WIT doc comment (plugins/wit-docs embedded them), else the signature.
    assert_eq!(norm2["description"], "The squared length of p: x² + y².");
    assert_eq!(tool("shapes_hello")["description"], "Says hello.");
    assert_eq!(
        tool("shapes_text_describe")["description"],
        "describe() -> string"
    );
    // The package's doc comment: the app's instructions.
    let ins = mcp.instructions();
    assert!(
        ins.contains("## App shapes\nshapes: a typed component."),
        "{ins}"
    );
    let area = tool("shapes_area");
    assert_eq!(area["inputSchema"]["required"], json!(["s"]), "{area}");
    assert_eq!(
        area["inputSchema"]["properties"]["unit"],
        json!({"anyOf": [{"type": "string", "enum": ["mm", "cm", "inch"]}, {"type": "null"}]})
    );
    assert_eq!(
        area["inputSchema"]["properties"]["s"]["oneOf"][2],
        json!({"type": "object", "properties": {"tag": {"const": "dot"}}, "required": ["tag"],
            "additionalProperties": false})
    );
    let echo = tool("shapes_echo");
    let k = &echo["inputSchema"]["properties"]["k"]["properties"];
    assert_eq!(
        k["pair"]["prefixItems"],
        json!([
        {"type": "integer", "minimum": 0, "maximum": 255}, {"type": "string"}])
    );
    assert_eq!(
        k["style"]["properties"]["italic"],
        json!({"type": "boolean"})
    );
    assert_eq!(
        k["outcome"]["oneOf"][1]["properties"]["err"],
        json!({"type": "string"})
    );
    assert_eq!(k["c"]["maxLength"], 1);
    for t in &tools {
        if t.name.starts_with("shapes_") {
            assert!(
                !t.description.as_deref().unwrap_or("").is_empty(),
                "{}",
                t.name
            );
            assert!(t.output_schema.is_some(), "{}", t.name);
        }
    }

    // Calls: structuredContent {"result": …} and the same JSON as text.
    let r = mcp.call("shapes_norm2", json!({"p": {"x": 3, "y": -4}}));
    assert!(!is_error(&r), "{r:?}");
    assert_eq!(structured(&r), json!({"result": 25}));
    assert_eq!(text(&r), "25");
    let r = mcp.call("shapes_hello", json!({"name": "Ada 🦀"}));
    assert_eq!(structured(&r), json!({"result": "Hello, Ada 🦀!"}));
    let big = s.tool_ok(
        "shapes_norm2",
        json!({"p": {"x": -2147483648i64, "y": -2147483648i64}}),
    );
    assert_eq!(big, json!({"result": 9223372036854775808u64}));
    assert_eq!(
        s.tool_ok(
            "shapes_area",
            json!({"s": {"tag": "rect", "val": [2.0, 3.5]}})
        ),
        json!({"result": 7.0})
    );
    assert_eq!(
        s.tool_ok(
            "shapes_area",
            json!({"s": {"tag": "rect", "val": [1, 1]}, "unit": "mm"})
        ),
        json!({"result": 100.0})
    );
    assert_eq!(
        s.tool_ok("shapes_area", json!({"s": {"tag": "dot"}, "unit": null})),
        json!({"result": 0.0})
    );
    assert_eq!(
        s.tool_ok(
            "shapes_styled",
            json!({"text": "hi", "style": {"bold": true, "italic": false}})
        ),
        json!({"result": "**hi**"})
    );
    assert_eq!(
        s.tool_ok("shapes_divide", json!({"a": 7, "b": -2})),
        json!({"result": {"ok": -3}})
    );
    // Every kind, both edges, through the guest and back.
    for k in [kinds_low(), kinds_high()] {
        assert_eq!(
            s.tool_ok("shapes_echo", json!({"k": k})),
            json!({"result": k})
        );
    }
    // Two interfaces with a function of the same name: each under its interface's name.
    assert_eq!(
        s.tool_ok("shapes_geometry_describe", json!({})),
        json!({"result": "geometry: norm2, area, divide"})
    );
    assert_eq!(
        s.tool_ok("shapes_text_describe", json!({})),
        json!({"result": "text: echo, styled"})
    );

    // A result that is err: an error result carrying the error.
    let r = mcp.call("shapes_divide", json!({"a": 1, "b": 0}));
    assert!(is_error(&r), "{r:?}");
    assert_eq!(text(&r), "cannot divide by zero");
    assert!(r.structured_content.is_none(), "{r:?}");
    assert_eq!(
        s.tool_err("shapes_divide", json!({"a": i64::MIN, "b": -1})),
        "the quotient overflows s64"
    );
}

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

#[test]
fn typed_tools_survive_a_restart_and_an_update_swaps_them() {
    let s = server();
    s.install("shapes", "shapes", json!({}));
    // A second app of the same component: its tools carry its own name, after a restart too
    // (the listing kept with the compiled code is not another app's).
    s.install("twin", "shapes", json!({}));
    let s = s.restart();
    for app in ["shapes", "twin"] {
        eventually(&format!("{app} is listed after the restart"), || {
            s.app(app)["tools"]
                .as_array()
                .is_some_and(|t| t.len() == 10)
        });
        assert_eq!(sorted(&s.app(app)["tools"]), shapes_tools(app));
    }
    for tool in ["shapes_norm2", "twin_norm2"] {
        assert_eq!(
            s.tool_ok(tool, json!({"p": {"x": 1, "y": 1}})),
            json!({"result": 2})
        );
    }
    assert!(
        s.app("shapes")["skippedTools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|x| x["name"] == "shapes_peek"),
        "the skipped functions are kept too"
    );
    // Updated to a component of our world: its tools replace the typed ones.
    let (st, v) = s.post(
        "/datanotes/apps/update/",
        Some(&s.token),
        &json!({"name": "shapes", "wasm_path": component("hostile")}),
    );
    assert_eq!(st, 200, "{v}");
    let tools = sorted(&s.app("shapes")["tools"]);
    assert!(tools.iter().all(|t| t.starts_with("hostile_")), "{tools:?}");
    let e = s.tool("shapes_norm2", json!({"p": {"x": 1, "y": 1}}));
    assert_eq!(e["ok"], false, "{e}");
}

#[test]
fn a_component_with_an_import_the_engine_lacks_is_refused_naming_it() {
    // (component (type (instance)) (import "foo:bar/baz" (instance (type 0)))), by hand.
    let name = b"foo:bar/baz";
    let mut bytes = b"\0asm\x0d\x00\x01\x00".to_vec();
    bytes.extend([7, 3, 1, 0x42, 0]); // a type section: one empty instance type
    let import = [&[1u8, 0, name.len() as u8][..], name, &[5, 0]].concat();
    bytes.extend([10, import.len() as u8]);
    bytes.extend(import);
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD.encode(&bytes);
    let s = server();
    let (st, v) = s.post(
        "/datanotes/apps/create/",
        Some(&s.token),
        &json!({"name": "needy", "wasm_base64": b64}),
    );
    assert_eq!(st, 400, "{v}");
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("imports foo:bar/baz, which datanotes does not provide"),
        "{msg}"
    );
    let (_, apps) = s.post("/datanotes/apps/", Some(&s.token), &json!({}));
    assert_eq!(apps["apps"], json!([]), "{apps}");
}

#[test]
fn a_typed_python_component_works_the_same() {
    let s = server();
    let v = s.install("units", "units", json!({}));
    assert_eq!(
        sorted(&v["app"]["tools"]),
        ["units_convert", "units_parse_number", "units_word_counts"]
    );
    // componentize-py's pre-initialisation hook is no tool.
    let a = s.app("units");
    assert_eq!(a["skippedTools"][0]["name"], "units_init", "{a}");
    let mcp = Agent::owner(&s);
    let tools = mcp.tools();
    let convert = tools.iter().find(|t| t.name == "units_convert").unwrap();
    assert_eq!(
        convert.description.as_deref(),
        Some("Converts a length from one unit to another.")
    );
    let r = mcp.call(
        "units_convert",
        json!({"value": 1, "from": "mile", "to": "km"}),
    );
    assert_eq!(structured(&r), json!({"result": 1.609344}));
    assert_eq!(
        s.tool_ok(
            "units_word_counts",
            json!({"text": "the cat and the hat, the end", "top": 2})
        ),
        json!({"result": [["the", 3], ["and", 1]]})
    );
    assert_eq!(
        s.tool_ok("units_parse_number", json!({"text": "forty-two"})),
        json!({"result": {"ok": 42.0}})
    );
    let r = mcp.call("units_parse_number", json!({"text": "lots"}));
    assert!(is_error(&r), "{r:?}");
    assert_eq!(
        text(&r),
        "'lots' is not a number: 'lots' is not a number word"
    );
    let e = s.tool_err(
        "units_convert",
        json!({"value": 1, "from": "parsec", "to": "m"}),
    );
    assert!(
        e.starts_with("from: expected one of \"mm\", \"cm\", \"m\", \"km\", \"inch\", \"foot\", \"mile\", got \"parsec\""),
        "{e}"
    );
}

/// What a call answered during a swap: the old component's answer, the new one's, or a plain
/// "no tool" (a tool the component serving the call does not have).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Answer {
    Old,
    New,
    NoTool,
}

/// Updates app `swap` to `to` while 8 threads call its old tool (`old`, answering `old_ok`) and
/// the new component's (`new`, answering `new_ok`) in a loop through `/apps/call/`. Every call
/// answers the old behaviour, the new one, or "no tool"; a call made after the update answered
/// sees only the new component, one answered before it began only the old; `tools/list`
/// shows the new tools as soon as the update has answered.
fn swap_under_calls(s: &Server, to: &str, old: (&str, Value, Value), new: (&str, Value, Value)) {
    use std::sync::atomic::{AtomicBool, Ordering};
    let stop = AtomicBool::new(false);
    // The calls answered so far (by every worker).
    let done = std::sync::atomic::AtomicUsize::new(0);
    let classify = |tool: &str, v: &Value| -> Answer {
        let (ok_value, answer) = if tool == old.0 {
            (&old.2, Answer::Old)
        } else {
            (&new.2, Answer::New)
        };
        if v["ok"] == true && v["value"]["structuredContent"] == *ok_value {
            return answer;
        }
        let text = v["value"].to_string();
        assert!(
            v["ok"] == false && text.contains("no tool"),
            "{tool} during the swap to {to}: neither its answer nor \"no tool\": {v}"
        );
        Answer::NoTool
    };
    let (calls, began, ended) = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..8)
            .map(|i| {
                let (stop, old, new, done) = (&stop, &old, &new, &done);
                scope.spawn(move || {
                    let mut seen = vec![];
                    let mut j = i;
                    while !stop.load(Ordering::Relaxed) {
                        let (tool, args) = if j % 2 == 0 {
                            (old.0, &old.1)
                        } else {
                            (new.0, &new.1)
                        };
                        j += 1;
                        let t0 = Instant::now();
                        let v = s.tool(tool, args.clone());
                        seen.push((t0, Instant::now(), tool, classify(tool, &v)));
                        done.fetch_add(1, Ordering::SeqCst);
                    }
                    seen
                })
            })
            .collect();
        // Calls answered before the update: 16 (old and new tools alike).
        let answered = |what: &str, n: usize| {
            eventually_ok(what, || {
                let d = done.load(Ordering::SeqCst);
                if d >= n {
                    Ok(())
                } else {
                    Err(format!("{d} calls answered"))
                }
            })
        };
        answered("16 calls answered before the update", 16);
        let began = Instant::now();
        let (st, v) = s.post(
            "/datanotes/apps/update/",
            Some(&s.token),
            &json!({"name": "swap", "wasm_path": component(to)}),
        );
        let ended = Instant::now();
        let done_at_end = done.load(Ordering::SeqCst);
        assert_eq!(st, 200, "{v}");
        // The listing changed with the update's answer.
        let tools: Vec<String> = Agent::owner(s)
            .tools()
            .into_iter()
            .map(|t| t.name.to_string())
            .filter(|n| n.starts_with("swap_"))
            .collect();
        assert!(
            tools.iter().any(|t| t == new.0) && !tools.iter().any(|t| t == old.0),
            "tools/list right after the update to {to}: {tools:?}"
        );
        // 16 more answered after it: of those, the 8 workers had at most 8 in flight at its
        // answer, so 8 at least were called after it.
        answered("16 calls answered after the update", done_at_end + 16);
        stop.store(true, Ordering::Relaxed);
        let calls: Vec<_> = workers
            .into_iter()
            .flat_map(|w| w.join().expect("a call during the swap failed"))
            .collect();
        (calls, began, ended)
    });
    let count = |a: Answer| calls.iter().filter(|c| c.3 == a).count();
    assert!(
        count(Answer::Old) > 0 && count(Answer::New) > 0,
        "calls of both components answered: {} old, {} new, {} of {} none",
        count(Answer::Old),
        count(Answer::New),
        count(Answer::NoTool),
        calls.len()
    );
    for (t0, t1, tool, a) in &calls {
        let want = if *tool == old.0 {
            Answer::Old
        } else {
            Answer::New
        };
        if *t0 > ended {
            let expect = if want == Answer::New {
                Answer::New
            } else {
                Answer::NoTool
            };
            assert_eq!(
                *a, expect,
                "{tool} called after the update to {to} answered"
            );
        }
        if *t1 < began {
            let expect = if want == Answer::Old {
                Answer::Old
            } else {
                Answer::NoTool
            };
            assert_eq!(
                *a, expect,
                "{tool} answered before the update to {to} began"
            );
        }
    }
}

#[test]
fn an_update_swaps_the_component_at_once_under_concurrent_calls() {
    let s = server();
    s.install("swap", "shapes", json!({}));
    let hello = (
        "swap_hello",
        json!({"name": "w"}),
        json!({"result": "Hello, w!"}),
    );
    let convert = (
        "swap_convert",
        json!({"value": 1, "from": "km", "to": "m"}),
        json!({"result": 1000.0}),
    );
    // A typed Rust component to a typed Python one, and back.
    swap_under_calls(&s, "units", hello.clone(), convert.clone());
    swap_under_calls(&s, "shapes", convert, hello);
    assert_eq!(sorted(&s.app("swap")["tools"]), shapes_tools("swap"));
}

#[test]
fn a_typed_javascript_component_works_the_same() {
    let s = server();
    let v = s.install("textkit", "textkit", json!({}));
    assert_eq!(
        sorted(&v["app"]["tools"]),
        ["textkit_count", "textkit_slugify", "textkit_word"]
    );
    let mcp = Agent::owner(&s);
    let tools = mcp.tools();
    let word = tools.iter().find(|t| t.name == "textkit_word").unwrap();
    assert_eq!(
        word.description.as_deref(),
        Some("The n-th word of a text (from 0); an error when the text has fewer words.")
    );
    let r = mcp.call("textkit_slugify", json!({"title": "Hello, World 2026!"}));
    assert_eq!(structured(&r), json!({"result": "hello-world-2026"}));
    // A record answered as an object; characters are Unicode scalar values.
    assert_eq!(
        s.tool_ok("textkit_count", json!({"text": "a b\nc 🦀"})),
        json!({"result": {"words": 4, "lines": 2, "chars": 7}})
    );
    assert_eq!(
        s.tool_ok("textkit_word", json!({"text": "one two", "n": 1})),
        json!({"result": {"ok": "two"}})
    );
    // A thrown value is the `err` of the result: an error result.
    let r = mcp.call("textkit_word", json!({"text": "one two", "n": 5}));
    assert!(is_error(&r), "{r:?}");
    assert_eq!(text(&r), "the text has 2 words, no word 5");
    let e = s.tool_err("textkit_word", json!({"text": "one two", "n": -1}));
    assert_eq!(e, "n: expected an integer in 0..4294967295, got -1");
}
