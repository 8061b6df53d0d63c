//! The semantic index: search by meaning beside full text (`search_notes` modes,
//! `similar_notes`), kept fresh by every kind of write, rebuilt on demand; the helpers the
//! other areas use (`semantic_model`, the crash matrix). The servers here run the default model
//! (`scripts/fetch-model`), except where a test says otherwise.

use crate::kit::*;
use crate::mcp::RawSession;
use serde_json::{Value, json};
use std::collections::HashMap;

pub(crate) const NOTES: &str = "personal.notes.misc";

pub(crate) fn notes_table(s: &Server) {
    s.ok(
        "create_table",
        json!({"table": NOTES, "columns": {"title": {"type": "text"}, "tags": {"type": "list"}}}),
    );
}

fn note(s: &Server, id: &str, title: &str, body: &str) -> Value {
    s.ok(
        "insert_row",
        json!({"table": NOTES, "id": id, "values": {"title": title}, "body": body}),
    )
}

/// A few notes written with different words than the questions asked of them.
pub(crate) fn seed(s: &Server) {
    notes_table(s);
    note(
        s,
        "budget-call",
        "Call with Ada",
        "Promised Ada to cut the travel spending by ten percent before the spring review.",
    );
    note(
        s,
        "oat-milk",
        "Buy oat milk",
        "Groceries for the week: oat milk, bread and apples.",
    );
    note(
        s,
        "bike",
        "Fix the bike",
        "The rear brake pads are worn; replace them and true the wheel.",
    );
    note(
        s,
        "taxes",
        "File the tax return",
        "Collect the receipts and send the declaration to the revenue office.",
    );
}

pub(crate) fn search(s: &Server, args: Value) -> Value {
    s.ok("search_notes", args)
}

pub(crate) fn ids(v: &Value) -> Vec<String> {
    v["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["id"].as_str().unwrap().to_string())
        .collect()
}

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

/// Every kind of write reaches the index: the hits name the version they were computed from.
#[test]
fn every_kind_of_write_reaches_the_index() {
    let s = Server::start_semantic(&[]);
    seed(&s);
    s.indexed();
    let first = |q: &str| -> Value {
        let v = search(&s, json!({"query": q, "mode": "semantic", "limit": 1}));
        v["hits"][0].clone()
    };
    // Update: the new text is found, at the new version.
    s.ok(
        "update_row",
        json!({"table": NOTES, "id": "bike", "body": "Book a flight to Lisbon for the conference."}),
    );
    s.indexed();
    let h = first("airline tickets for a trip to Portugal");
    assert_eq!(
        (h["id"].as_str(), h["version"].as_i64()),
        (Some("bike"), Some(2)),
        "{h}"
    );
    // Delete: gone; undo brings it back.
    s.ok("delete_row", json!({"table": NOTES, "id": "bike"}));
    s.indexed();
    assert_ne!(
        first("airline tickets for a trip to Portugal")["id"],
        "bike"
    );
    let seq = s.seq();
    s.ok("undo_migration", json!({"seq": seq}));
    s.indexed();
    assert_eq!(
        first("airline tickets for a trip to Portugal")["id"],
        "bike"
    );
    // A hand edit (the watcher journals it).
    write_by_hand(
        &s.row_path(NOTES, "taxes"),
        "---\ntitle: Garden\n---\nPlant tomatoes and basil in the raised beds.\n",
    );
    eventually("the hand edit is journaled", || {
        s.ok("get_row", json!({"table": NOTES, "id": "taxes"}))["version"] == 2
    });
    s.indexed();
    assert_eq!(first("vegetable gardening")["id"], "taxes");
    // Restore: back to version 1's text.
    let m = s.migrations(json!({"table": NOTES}));
    let insert = m
        .iter()
        .find(|m| m["op"] == "insert" && m["row"] == "taxes")
        .unwrap()["seq"]
        .clone();
    s.ok(
        "restore",
        json!({"table": NOTES, "id": "taxes", "seq": insert}),
    );
    s.indexed();
    assert_eq!(first("income tax paperwork")["id"], "taxes");
    // alter_table: the table leaves the index, then comes back from its title alone.
    s.ok("alter_table", json!({"table": NOTES, "semantic": false}));
    s.indexed();
    let d = s.ok("describe_table", json!({"table": NOTES}));
    assert_eq!(d["semantic"]["enabled"], false, "{d}");
    assert_eq!(s.semantic()["rows"], 0);
    let yaml = std::fs::read_to_string(s.dir.join("personal/notes/misc/_table.yaml")).unwrap();
    assert!(yaml.contains("semantic: false"), "{yaml}");
    s.ok(
        "alter_table",
        json!({"table": NOTES, "semantic": {"columns": ["title"]}, "rename": {"title": "name"}}),
    );
    s.indexed();
    let d = s.ok("describe_table", json!({"table": NOTES}));
    assert_eq!(d["semantic"]["columns"], json!(["name"]), "{d}");
    assert_eq!(s.semantic()["rows"], 4);
    // drop_table: every row leaves; undo brings them back.
    s.ok("drop_table", json!({"table": NOTES}));
    s.indexed();
    assert_eq!(s.semantic()["rows"], 0);
    let seq = s.seq();
    s.ok("undo_migration", json!({"seq": seq}));
    s.indexed();
    assert_eq!(s.semantic()["rows"], 4);
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

/// Every row once, at its current version: what the semantic index holds (its store on disk,
/// and what it serves: a semantic search wide enough for every row, when there are at most
/// 1,000), against every row of `tables` as `select_rows` pages them.
pub(crate) fn assert_consistent(s: &Server, tables: &[&str]) {
    let st = s.indexed();
    let mut want: HashMap<String, i64> = HashMap::new();
    for t in tables {
        let mut offset = 0;
        loop {
            let rows = s.ok(
                "select_rows",
                json!({"table": t, "limit": 1000, "offset": offset, "columns": ["id"]}),
            );
            let rows = rows["rows"].as_array().unwrap().clone();
            for r in &rows {
                want.insert(
                    format!("{t}/{}", r["id"].as_str().unwrap()),
                    r["version"].as_i64().unwrap(),
                );
            }
            if rows.len() < 1000 {
                break;
            }
            offset += 1000;
        }
    }
    assert_eq!(st["rows"].as_u64(), Some(want.len() as u64), "{st}");
    let diff = |got: &HashMap<String, i64>, what: &str| {
        let mut d: Vec<String> = want
            .iter()
            .filter(|(k, v)| got.get(*k) != Some(v))
            .map(|(k, v)| format!("{k} v{v}: {what} has {:?}", got.get(k)))
            .chain(
                got.keys()
                    .filter(|k| !want.contains_key(*k))
                    .map(|k| format!("{k}: not a row")),
            )
            .collect();
        d.sort();
        d.truncate(10);
        assert!(d.is_empty(), "the index differs from the rows: {d:?}");
    };
    let db = rusqlite::Connection::open_with_flags(
        s.dir.join(".datanotes/semantic.db"),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .unwrap();
    let mut stored: HashMap<String, i64> = HashMap::new();
    let mut q = db.prepare("SELECT tbl, id, version FROM rows").unwrap();
    let mut rows = q.query([]).unwrap();
    while let Some(r) = rows.next().unwrap() {
        let key = format!(
            "{}/{}",
            r.get::<_, String>(0).unwrap(),
            r.get::<_, String>(1).unwrap()
        );
        assert!(
            stored.insert(key.clone(), r.get(2).unwrap()).is_none(),
            "{key} twice"
        );
    }
    diff(&stored, "the store");
    if want.len() <= 1000 {
        let v = search(
            s,
            json!({"query": "note", "mode": "semantic", "limit": 1000}),
        );
        let mut served: HashMap<String, i64> = HashMap::new();
        for h in v["hits"].as_array().unwrap() {
            let key = format!(
                "{}/{}",
                h["table"].as_str().unwrap(),
                h["id"].as_str().unwrap()
            );
            assert!(
                served
                    .insert(key.clone(), h["version"].as_i64().unwrap())
                    .is_none(),
                "{key} twice"
            );
        }
        diff(&served, "the served index");
    }
}

pub(crate) fn bulk(s: &Server, n: usize, threads: usize, prefix: &str) {
    bulk_long(s, n, threads, prefix, 1)
}

/// `n` rows, each with `paragraphs` paragraphs of about 100 words (a chunk per two).
pub(crate) fn bulk_long(s: &Server, n: usize, threads: usize, prefix: &str, paragraphs: usize) {
    std::thread::scope(|sc| {
        for t in 0..threads {
            sc.spawn(move || {
                for i in (t..n).step_by(threads) {
                    s.ok(
                        "insert_row",
                        json!({"table": NOTES, "id": format!("{prefix}-{i}"),
                               "values": {"title": format!("Note {i} about {}", ["rivers", "music", "cooking", "taxes"][i % 4])},
                               "body": vec![format!("Paragraph {i}: a line of text for the index. {}", "Words about the weather, the garden and the river. ".repeat(10)); paragraphs].join("\n\n")}),
                    );
                }
            });
        }
    });
}

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

/// A burst of 10,000 writes: the index catches up, and says how far behind it was.
#[test]
fn a_burst_of_writes_is_caught_up_with_its_lag_reported() {
    let s = Server::start_semantic(&[]);
    notes_table(&s);
    s.indexed();
    bulk(&s, 10_000, 16, "b");
    let st = s.indexed();
    assert_eq!(st["rows"], 10_000, "{st}");
    assert_eq!(st["pending"], 0, "{st}");
    assert_eq!(st["lagMs"], 0, "{st}");
    let max = st["maxLagMs"].as_u64().unwrap();
    assert!(max > 0 && max < 60_000, "{st}");
    let v = search(
        &s,
        json!({"query": "cooking", "mode": "semantic", "limit": 5}),
    );
    assert_eq!(v["pending"], 0);
    assert!(ids(&v).iter().all(|id| id.starts_with("b-")));
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
