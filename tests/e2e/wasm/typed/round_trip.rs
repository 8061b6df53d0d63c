//! A typed component installed and listed (schemas from the WIT types, descriptions, skipped
//! functions) with every type kind round-tripped at its edges; one importing what the engine
//! does not provide refused, naming the import.

use super::*;

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
