//! The Python and JavaScript examples on 0.2: progress, resources, templates and prompts.

use super::*;

/// Calls `tool` with a progress token, as a 2026-07-28 request read raw: its structured result
/// and the progress notifications of its stream, in the order they were written (rmcp's client
/// hands each notification to its handler in a task of its own, so it cannot tell the order of
/// two sent back to back).
fn call_with_progress(s: &Server, tool: &str, args: Value) -> (Value, Vec<Value>) {
    let r = crate::kit::mcp::post_2026(
        s,
        &s.token,
        "tools/call",
        json!({"name": tool, "arguments": args}),
        json!({}),
        Some("p-1"),
    );
    let messages = crate::kit::mcp::messages_of(r);
    let (last, notes) = messages.split_last().expect("an answer");
    assert_eq!(last["id"], 1, "the answer comes last: {messages:?}");
    assert_ne!(last["result"]["isError"], true, "{tool}: {last}");
    let got: Vec<Value> = notes
        .iter()
        .filter(|m| m["method"] == "notifications/progress")
        .map(|m| m["params"].clone())
        .collect();
    assert!(got.iter().all(|p| p["progressToken"] == "p-1"), "{got:?}");
    (last["result"]["structuredContent"].clone(), got)
}

#[test]
fn the_python_and_javascript_examples_on_0_2() {
    let s = Server::start_with_env(&[("DATANOTES_CACHE_DIR", &shared_cache())]);
    s.install(
        "journal",
        "journal2",
        json!({"write": ["personal.notes.daily"], "ddl": true}),
    );
    s.install(
        "links",
        "bookmarks2",
        json!({"write": ["personal.notes.bookmarks"], "ddl": true}),
    );
    let rt = runtime();
    let (c, _) = connect(&rt, &s);

    // Python: progress, a resource, a template, a prompt.
    let v = call(
        &rt,
        &c,
        "journal_append",
        json!({"text": "wrote three words"}),
    );
    let today = v["date"].as_str().unwrap().to_string();
    for d in ["2026-01-01", "2026-01-02"] {
        s.ok_route(
            "insert_row",
            json!({"table": "personal.notes.daily", "id": d, "values": {"date": d},
                   "body": "- 09:00 one two\n"}),
        );
    }
    let (v, got) = call_with_progress(&s, "journal_tally", json!({}));
    assert_eq!(v, json!({"days": 3, "words": 13, "cancelled": false}));
    let steps: Vec<_> = got
        .iter()
        .map(|p| (p["progress"].as_f64(), p["total"].as_f64()))
        .collect();
    let three = Some(3.0);
    assert_eq!(
        steps,
        [(Some(1.0), three), (Some(2.0), three), (Some(3.0), three)]
    );
    let r = ask(
        &rt,
        &c,
        "resources/read",
        json!({"uri": "journal://journal/today"}),
    );
    assert_eq!(r["contents"][0]["uri"], "journal://journal/today", "{r}");
    let text = r["contents"][0]["text"].as_str().unwrap();
    assert!(
        text.starts_with(&format!("# {today}")) && text.contains("wrote three words"),
        "{text}"
    );
    let r = ask(
        &rt,
        &c,
        "resources/read",
        json!({"uri": "journal://journal/day/2026-01-02"}),
    );
    assert!(
        r["contents"][0]["text"]
            .as_str()
            .unwrap()
            .contains("one two"),
        "{r}"
    );
    let t = ask(&rt, &c, "resources/templates/list", json!({}));
    assert!(
        t.to_string().contains("journal://journal/day/{date}"),
        "{t}"
    );
    let g = ask(
        &rt,
        &c,
        "prompts/get",
        json!({"name": "journal_reflect", "arguments": {"mood": "calm"}}),
    );
    let text = g["messages"][0]["content"]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("{g}"));
    assert!(
        text.contains("wrote three words") && text.ends_with("The day felt calm."),
        "{text}"
    );

    // JavaScript: the same.
    for (url, tags) in [
        ("https://a.example", ["Rust"]),
        ("https://b.example", ["wasm"]),
    ] {
        call(
            &rt,
            &c,
            "bookmarks_add",
            json!({"url": url, "title": url, "tags": tags}),
        );
    }
    s.ok_route(
        "insert_row",
        json!({"table": "personal.notes.bookmarks",
               "values": {"url": "https://c.example", "title": "C", "tags": ["MCP"]}}),
    );
    let (v, got) = call_with_progress(&s, "bookmarks_retag", json!({}));
    assert_eq!(v, json!({"done": 3, "changed": 1, "cancelled": false}));
    assert_eq!(got.len(), 3, "{got:?}");
    assert!(
        got.iter()
            .any(|p| p["message"] == "retagged https://c.example"),
        "{got:?}"
    );
    let r = ask(
        &rt,
        &c,
        "resources/read",
        json!({"uri": "bookmarks://links/tag/mcp"}),
    );
    assert_eq!(r["contents"][0]["uri"], "bookmarks://links/tag/mcp", "{r}");
    assert_eq!(
        r["contents"][0]["text"], "- [C](https://c.example)\n",
        "{r}"
    );
    let p = ask(&rt, &c, "prompts/list", json!({}));
    let names: Vec<&str> = p["prompts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"journal_reflect") && names.contains(&"bookmarks_reading_plan"),
        "{p}"
    );
    let g = ask(
        &rt,
        &c,
        "prompts/get",
        json!({"name": "bookmarks_reading_plan", "arguments": {"minutes": "20"}}),
    );
    let text = g["messages"][0]["content"]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("{g}"));
    assert!(
        text.contains("[C](https://c.example)") && text.contains("I have 20 minutes"),
        "{text}"
    );
    let _ = rt.block_on(c.cancel());
}
