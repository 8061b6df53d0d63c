//! Rebuilds (progress, an event, searches answered meanwhile), and an index behind a vacuumed
//! journal catching up from the tables.

use super::*;
use crate::mcp::RawSession;

#[test]
fn rebuild_switches_at_once_reports_progress_and_an_event() {
    let s = Server::start_semantic(&[]);
    seed(&s);
    bulk(&s, 600, 8, "n");
    s.indexed();
    // Over MCP with a progress token: progress notifications, then the result.
    let raw = RawSession::open(&s);
    let text = raw
        .post(
            json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {
            "name": "rebuild_semantic_index", "arguments": {}, "_meta": {"progressToken": "p1"}}}),
        )
        .text()
        .unwrap();
    let msgs: Vec<Value> = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str(d).ok())
        .collect();
    let progress: Vec<&Value> = msgs
        .iter()
        .filter(|m| m["method"] == "notifications/progress")
        .collect();
    assert!(!progress.is_empty(), "no progress in {text}");
    for p in &progress {
        assert_eq!(p["params"]["progressToken"], "p1");
        assert_eq!(p["params"]["total"].as_f64(), Some(604.0), "{p}");
    }
    let result = msgs.iter().find(|m| m["id"] == 9).expect("the result");
    let r = &result["result"]["structuredContent"];
    assert_eq!(r["rows"], 604, "{result}");
    assert_eq!(r["chunks"], 604, "{result}");
    // The feed has the event, for consumers that name it.
    let ev = s.ok_route("changes", json!({"since": 0, "ops": ["semantic_index"]}));
    let evs = ev["changes"].as_array().unwrap();
    let last = evs.last().expect("a semantic_index event");
    assert_eq!(last["op"], "semantic_index", "{ev}");
    let at = last["seq"].as_i64().unwrap();
    let plain = s.ok_route("changes", json!({"since": at - 1, "limit": 10}));
    assert!(
        plain["changes"]
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["seq"] != at),
        "not shown to consumers that did not ask: {plain}"
    );
    // Over HTTP, while searches keep being answered by meaning.
    std::thread::scope(|sc| {
        let h = sc.spawn(|| s.ok("rebuild_semantic_index", json!({})));
        for _ in 0..20 {
            let v = search(&s, json!({"query": "cooking recipes"}));
            assert_eq!(v["mode"], "hybrid", "{v}");
            assert!(!v["hits"].as_array().unwrap().is_empty());
        }
        assert_eq!(h.join().unwrap()["rows"], 604);
    });
    // rebuild_index rebuilds it too.
    let before = s.ok_route("changes", json!({"since": 0, "ops": ["semantic_index"]}))["changes"]
        .as_array()
        .unwrap()
        .len();
    s.ok("rebuild_index", json!({}));
    eventually("a rebuild after rebuild_index", || {
        s.ok_route("changes", json!({"since": 0, "ops": ["semantic_index"]}))["changes"]
            .as_array()
            .unwrap()
            .len()
            > before
    });
    assert_consistent(&s, &[NOTES]);
}

/// The journal vacuumed past what the index had followed while the server ran without its
/// model: at the next start with the model, the index reconciles every table with the files
/// (not the journal), so that it holds exactly the rows there are, at their versions.
#[test]
fn an_index_behind_a_vacuumed_journal_catches_up_from_the_tables() {
    let mut s = Server::start_semantic(&[]);
    seed(&s);
    s.indexed();
    let through = s.semantic()["indexedThrough"].as_i64().unwrap();
    s.stop();
    // Without the model: the index stays where it was while rows change.
    let mut plain = Server::start_in(&s.dir);
    plain.ok(
        "update_row",
        json!({"table": NOTES, "id": "bike", "body": "Book a flight to Lisbon for the conference."}),
    );
    plain.ok("delete_row", json!({"table": NOTES, "id": "oat-milk"}));
    note(
        &plain,
        "garden",
        "Garden",
        "Plant tomatoes and basil in the raised beds.",
    );
    let v = plain.ok("vacuum", json!({"before_seq": plain.seq() + 1}));
    assert!(v["removed"].as_i64().unwrap() > 0, "{v}");
    assert!(
        v["feed_starts_at"].as_i64().unwrap() > through + 1,
        "the vacuum did not reach past the index: {v}"
    );
    plain.stop();
    // With the model again.
    let s = s.restart();
    assert_consistent(&s, &[NOTES]);
    let first = |q: &str| {
        search(&s, json!({"query": q, "mode": "semantic", "limit": 1}))["hits"][0].clone()
    };
    let h = first("airline tickets for a trip to Portugal");
    assert_eq!(
        (h["id"].as_str(), h["version"].as_i64()),
        (Some("bike"), Some(2)),
        "{h}"
    );
    assert_eq!(first("vegetable gardening")["id"], "garden");
    let all = search(
        &s,
        json!({"query": "oat milk bread apples", "mode": "semantic", "limit": 10}),
    );
    assert!(!ids(&all).contains(&"oat-milk".to_string()), "{all}");
    assert_eq!(s.semantic()["rows"], 4);
}

/// The journal vacuumed while the running index is behind it (a burst of long notes it is still
/// embedding): the history it would follow is gone, so it goes over every table instead, and
/// ends holding exactly the rows there are.
#[test]
fn a_vacuum_while_the_index_is_behind_reaches_it() {
    let s = Server::start_semantic(&[]);
    seed(&s);
    s.indexed();
    let mut tried = vec![];
    for (attempt, n) in [300, 1200, 4800].into_iter().enumerate() {
        let prefix = format!("v{attempt}");
        bulk_long(&s, n, 8, &prefix, 6);
        s.ok(
            "delete_row",
            json!({"table": NOTES, "id": format!("{prefix}-0")}),
        );
        let v = s.ok("vacuum", json!({"before_seq": s.seq() + 1}));
        let start = v["feed_starts_at"].as_i64().unwrap();
        // Still behind what the vacuum removed: the index can only catch up from the tables.
        let through = s.semantic()["indexedThrough"].as_i64().unwrap_or(0);
        tried.push(format!(
            "{n} notes: indexed through {through}, history from {start}"
        ));
        if through < start - 1 {
            assert_consistent(&s, &[NOTES]);
            let v = search(
                &s,
                json!({"query": "cooking", "mode": "semantic", "limit": 1000}),
            );
            assert!(
                !ids(&v).contains(&format!("{prefix}-0")),
                "a deleted note is found"
            );
            return;
        }
    }
    panic!("the index was never behind the vacuum: {tried:#?}");
}
