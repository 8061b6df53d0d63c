//! The typed Python (`units`) and JavaScript (`textkit`) components work the same as the Rust
//! one.

use super::*;

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
