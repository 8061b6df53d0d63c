//! Search by meaning: hybrid beside full text, similar notes (over HTTP and MCP, with the
//! caller's rights), bad queries refused naming the field, and a WASM app's search through the
//! host import.

use super::*;

#[test]
fn hybrid_finds_notes_by_meaning_where_text_finds_none() {
    let s = Server::start_semantic(&[]);
    seed(&s);
    s.indexed();
    let q = "what did I promise about the budget?";
    // Full text: every word must appear; no note has them all.
    let text = search(&s, json!({"query": q, "mode": "text"}));
    assert_eq!(text["mode"], "text");
    assert_eq!(ids(&text), Vec::<String>::new(), "{text}");

    // The default is hybrid once the index is ready: the note closest in meaning comes first.
    let hybrid = search(&s, json!({"query": q}));
    assert_eq!(hybrid["mode"], "hybrid", "{hybrid}");
    assert_eq!(ids(&hybrid)[0], "budget-call", "{hybrid}");
    let top = &hybrid["hits"][0];
    assert!(top["ranks"]["semantic"].as_u64().is_some(), "{top}");
    assert_eq!(top["table"], NOTES);
    assert_eq!(top["version"], 1);
    assert!(
        top["snippet"].as_str().unwrap().contains("Promised Ada"),
        "{top}"
    );
    assert!(top["score"].as_f64().unwrap() > 0.0);
    assert_eq!(hybrid["pending"], 0);
    assert_eq!(hybrid["indexedThrough"].as_i64(), Some(s.seq()));
    assert_eq!(hybrid["semantic"]["state"], "ready");

    let sem = search(
        &s,
        json!({"query": "groceries shopping list", "mode": "semantic"}),
    );
    assert_eq!(sem["mode"], "semantic");
    assert_eq!(ids(&sem)[0], "oat-milk", "{sem}");
    assert_eq!(sem["hits"][0]["ranks"], json!({"semantic": 1}));
    let scores: Vec<f64> = sem["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["score"].as_f64().unwrap())
        .collect();
    assert!(scores.windows(2).all(|w| w[0] >= w[1]), "{scores:?}");

    // A note found by both rankings says so; a word search still marks its words.
    let both = search(&s, json!({"query": "brake pads"}));
    assert_eq!(ids(&both)[0], "bike", "{both}");
    assert_eq!(both["hits"][0]["ranks"]["text"], 1, "{both}");
    assert!(both["hits"][0]["ranks"]["semantic"].is_u64(), "{both}");
    assert!(
        both["hits"][0]["snippet"]
            .as_str()
            .unwrap()
            .contains("**brake**"),
        "{both}"
    );
    // Text mode is today's: words, ranks from full text only, with limits and tables.
    let t = search(&s, json!({"query": "oat milk", "mode": "text", "limit": 1}));
    assert_eq!(ids(&t), ["oat-milk"]);
    assert_eq!(t["hits"][0]["ranks"], json!({"text": 1}));
    // Only some tables.
    s.ok(
        "create_table",
        json!({"table": "work.crm.leads", "columns": {"name": {"type": "text"}}}),
    );
    s.ok(
        "insert_row",
        json!({"table": "work.crm.leads", "id": "acme", "values": {"name": "Acme budget for travel"}}),
    );
    s.indexed();
    let only = search(
        &s,
        json!({"query": "travel budget", "tables": ["work.crm.leads"], "mode": "semantic"}),
    );
    assert_eq!(ids(&only), ["acme"], "{only}");
}

#[test]
fn similar_notes_are_the_rows_nearest_in_meaning() {
    let s = Server::start_semantic(&[]);
    seed(&s);
    note(
        &s,
        "almond-milk",
        "Almond milk",
        "Pick up almond milk and cereal at the grocery store.",
    );
    s.indexed();
    let v = s.ok(
        "similar_notes",
        json!({"table": NOTES, "id": "oat-milk", "limit": 3}),
    );
    let found = ids(&v);
    assert_eq!(found.len(), 3, "{v}");
    assert_eq!(found[0], "almond-milk", "{v}");
    assert!(
        !found.contains(&"oat-milk".to_string()),
        "never the row itself"
    );
    assert_eq!(v["hits"][0]["ranks"], json!({"semantic": 1}));
    assert_eq!(v["pending"], 0);
    let e = s.refused_nochange(
        "similar_notes",
        json!({"table": NOTES, "id": "no-such-row"}),
        404,
    );
    assert_eq!(e["column"], "id", "{e}");
    // The same through MCP, as an agent's tools, with the caller's rights: an app token whose
    // call_tools leave similar_notes out cannot call it.
    let agent = Agent::owner(&s);
    assert!(agent.names().iter().any(|n| n == "similar_notes"));
    let r = agent.call(
        "similar_notes",
        json!({"table": NOTES, "id": "oat-milk", "limit": 3}),
    );
    assert_eq!(structured(&r)["hits"], v["hits"]);
    let r = agent.call(
        "search_notes",
        json!({"query": "cereal and milk from the shop"}),
    );
    let hits = structured(&r)["hits"].clone();
    assert!(
        hits[0]["id"] == "almond-milk" || hits[0]["id"] == "oat-milk",
        "{hits}"
    );
    let token = create_app(
        &s,
        json!({"name": "reader", "call_tools": ["search_notes"]}),
    );
    let limited = Agent::engine(&s, &token, None);
    assert!(!limited.names().iter().any(|n| n == "similar_notes"));
    let r = limited.call("similar_notes", json!({"table": NOTES, "id": "oat-milk"}));
    assert!(is_error(&r), "{}", text(&r));
    assert!(!is_error(
        &limited.call("search_notes", json!({"query": "milk"}))
    ));
}

#[test]
fn bad_queries_are_refused_naming_the_field() {
    let s = Server::start_semantic(&[]);
    seed(&s);
    s.indexed();
    let cases = [
        (json!({"query": ""}), 400, "query"),
        (json!({"query": "   \n "}), 400, "query"),
        (json!({"query": "x".repeat(1 << 20)}), 400, "query"),
        (json!({"query": "ab\u{0}\u{1}\u{7f}cd"}), 400, "query"),
        (json!({"query": "milk", "limit": 0}), 400, "limit"),
        (
            json!({"query": "milk", "limit": 1_000_000_000}),
            400,
            "limit",
        ),
    ];
    for (args, status, field) in cases {
        let e = s.refused_unchanged("search_notes", args, status, Some(field), field);
        assert!(!e["hint"].as_str().unwrap().is_empty(), "{e}");
    }
    let e = s.refused_nochange(
        "search_notes",
        json!({"query": "milk", "tables": ["a.b.nope"]}),
        404,
    );
    assert_eq!(e["column"], "tables", "{e}");
    s.refused_nochange(
        "search_notes",
        json!({"query": "milk", "mode": "fuzzy"}),
        400,
    );
    s.refused_nochange(
        "similar_notes",
        json!({"table": NOTES, "id": "oat-milk", "limit": 0}),
        400,
    );
    s.refused_nochange(
        "similar_notes",
        json!({"table": "a.b.nope", "id": "oat-milk"}),
        404,
    );
}

/// A WASM app's engine calls reach the same operations: the Python journal app's search finds
/// a day by meaning, and any app may ask for similar notes.
#[test]
fn a_wasm_app_searches_by_meaning_through_the_host_import() {
    let s = Server::start_semantic(&[("DATANOTES_CACHE_DIR", &crate::wasm::shared_cache())]);
    s.install(
        "journal",
        "journal",
        json!({"write": ["personal.notes.*"], "ddl": true}),
    );
    s.install("hostile", "hostile", json!({}));
    for (date, text) in [
        ("2026-11-28", "Went hiking in the mountains with friends."),
        ("2026-11-29", "Baked sourdough bread and a cake."),
    ] {
        s.tool_ok("journal_append", json!({"text": text, "date": date}));
    }
    s.indexed();
    let hits = s.tool_ok("journal_search", json!({"query": "trekking outdoors"}));
    assert_eq!(hits["hits"][0]["date"], "2026-11-28", "{hits}");
    let v = s.tool_ok(
        "hostile_engine",
        json!({"op": "similar_notes", "args": {"table": "personal.notes.daily", "id": "2026-11-29", "limit": 1}}),
    );
    assert_eq!(v["hits"][0]["id"], "2026-11-28", "{v}");
}
