//! `changes/`: pages, resumes across a restart, filters, limits, the long poll.

use super::*;

// ---- changes/ ----

#[test]
fn changes_pages_and_resumes_across_a_restart() {
    let s = Server::start();
    s.ok("create_table", items("a.b.c"));
    for i in 0..10 {
        insert(&s, "a.b.c", &format!("r{i}"));
    }
    s.ok(
        "update_row",
        json!({"table": "a.b.c", "id": "r1", "values": {"title": "one"}}),
    );
    s.ok("delete_row", json!({"table": "a.b.c", "id": "r2"}));
    let last = s.seq();
    assert_eq!(last, 13);

    // The first two pages before the restart.
    let p1 = changes(&s, json!({"since": 0, "limit": 4}));
    assert_eq!(seqs(&p1["changes"]), vec![1, 2, 3, 4]);
    assert_eq!(p1["next"], 4);
    assert_eq!(p1["changes"][0]["op"], "create_table");
    assert_eq!(p1["changes"][1]["op"], "insert");
    assert_eq!(p1["changes"][1]["table"], "a.b.c");
    assert_eq!(p1["changes"][1]["row"], "r0");
    assert_eq!(p1["changes"][1]["after"]["values"]["title"], "r0");
    let p2 = changes(&s, json!({"since": p1["next"], "limit": 4}));
    assert_eq!(seqs(&p2["changes"]), vec![5, 6, 7, 8]);
    let cursor = p2["next"].as_i64().unwrap();
    let before_restart = changes(&s, json!({"since": 0, "limit": 1000}));

    let s = s.restart();
    // Continue from `next`: no gap, no duplicate.
    let (rest, next) = all_changes(&s, cursor, json!({}), 4);
    let mut got = seqs(&p1["changes"]);
    got.extend(seqs(&p2["changes"]));
    got.extend(rest.iter().map(|c| c["seq"].as_i64().unwrap()));
    assert_eq!(got, (1..=last).collect::<Vec<_>>());
    assert_eq!(next, last);
    assert_eq!(rest.last().unwrap()["op"], "delete");
    // The same changes, byte for byte, whether served from memory or from the journal.
    let after_restart = changes(&s, json!({"since": 0, "limit": 1000}));
    assert_eq!(before_restart, after_restart);

    // At the end: nothing, and `next` stays put; a new write comes next.
    let end = changes(&s, json!({"since": next}));
    assert_eq!(end, json!({"changes": [], "next": last}));
    let seq = insert(&s, "a.b.c", "after-restart");
    let page = changes(&s, json!({"since": next}));
    assert_eq!(seqs(&page["changes"]), vec![seq]);
    assert_eq!(page["next"], seq);
}

#[test]
fn changes_filter_by_op_and_by_each_table_pattern() {
    let s = Server::start();
    let tables = ["a.b.c", "a.b.d", "a.x.y", "ab.b.c", "z.q.r"];
    let mut log: Vec<(i64, &str, Option<&str>)> = vec![];
    for t in tables {
        let seq = s.ok("create_table", items(t))["seq"].as_i64().unwrap();
        log.push((seq, "create_table", Some(t)));
    }
    for t in tables {
        log.push((insert(&s, t, "r1"), "insert", Some(t)));
        log.push((insert(&s, t, "r2"), "insert", Some(t)));
    }
    let seq = s.ok(
        "update_row",
        json!({"table": "a.b.c", "id": "r1", "values": {"title": "x"}}),
    )["seq"]
        .as_i64()
        .unwrap();
    log.push((seq, "update", Some("a.b.c")));
    let seq = s.ok("delete_row", json!({"table": "a.b.d", "id": "r2"}))["seq"]
        .as_i64()
        .unwrap();
    log.push((seq, "delete", Some("a.b.d")));
    let seq = s.ok(
        "set_engine_settings",
        json!({"settings": {"default_limit": 50}}),
    )["seq"]
        .as_i64()
        .unwrap();
    log.push((seq, "settings", None));
    let (st, _) = s.call_as(
        Some(&s.token),
        "tool-calls/record",
        &tool_call("search"),
        &[],
    );
    assert_eq!(st, 200);
    log.push((s.seq(), "tool_call", None));
    // The tail is unmatched by most filters: `next` must still reach the end.
    insert(&s, "z.q.r", "tail");
    log.push((s.seq(), "insert", Some("z.q.r")));
    assert_eq!(
        log.iter().map(|l| l.0).collect::<Vec<_>>(),
        (1..=s.seq()).collect::<Vec<_>>()
    );
    let last = s.seq();

    type Pred = fn(&str, Option<&str>) -> bool;
    let cases: Vec<(Value, Pred)> = vec![
        (json!({}), |op, _| op != "tool_call"),
        (json!({"ops": ["insert"]}), |op, _| op == "insert"),
        (json!({"ops": ["update", "delete"]}), |op, _| {
            op == "update" || op == "delete"
        }),
        (json!({"ops": ["settings"]}), |op, _| op == "settings"),
        (json!({"ops": ["create_table"]}), |op, _| {
            op == "create_table"
        }),
        (json!({"ops": ["tool_call", "delete"]}), |op, _| {
            op == "tool_call" || op == "delete"
        }),
        (json!({"tables": ["a.b.c"]}), |op, t| {
            op != "tool_call" && t == Some("a.b.c")
        }),
        (json!({"tables": ["a.b.*"]}), |_, t| {
            matches!(t, Some("a.b.c" | "a.b.d"))
        }),
        (json!({"tables": ["a.*"]}), |_, t| {
            matches!(t, Some("a.b.c" | "a.b.d" | "a.x.y"))
        }),
        (json!({"tables": ["*"]}), |_, t| t.is_some()),
        (json!({"tables": ["a.b.c", "z.*"]}), |_, t| {
            matches!(t, Some("a.b.c" | "z.q.r"))
        }),
        (json!({"ops": ["insert"], "tables": ["a.*"]}), |op, t| {
            op == "insert" && matches!(t, Some("a.b.c" | "a.b.d" | "a.x.y"))
        }),
        (json!({"ops": ["insert"], "tables": ["ab.*"]}), |op, t| {
            op == "insert" && t == Some("ab.b.c")
        }),
        (json!({"ops": []}), |_, _| false),
    ];
    for (filter, pred) in cases {
        let want: Vec<i64> = log
            .iter()
            .filter(|(_, op, t)| pred(op, *t))
            .map(|l| l.0)
            .collect();
        for limit in [1000, 3] {
            let (got, next) = all_changes(&s, 0, filter.clone(), limit);
            let got_seqs: Vec<i64> = got.iter().map(|c| c["seq"].as_i64().unwrap()).collect();
            assert_eq!(got_seqs, want, "filter {filter} limit {limit}");
            assert_eq!(next, last, "filter {filter}: next reaches the end");
            for c in &got {
                let t = c["table"].as_str();
                assert!(pred(c["op"].as_str().unwrap(), t), "{filter}: {c}");
            }
        }
    }

    // Bad filters: 400 with the error shape, naming the field.
    for (args, column) in [
        (json!({"ops": ["nope"]}), "ops"),
        (json!({"ops": ["insert", "INSERT"]}), "ops"),
        (json!({"tables": ["a.*.c"]}), "tables"),
        (json!({"tables": ["a"]}), "tables"),
        (json!({"tables": ["a.b.c.d"]}), "tables"),
    ] {
        let (st, v) = s.call_as(Some(&s.token), "changes", &args, &[]);
        assert_eq!(st, 400, "{args}: {v}");
        assert_eq!(v["error"]["code"], "invalid_argument");
        assert_eq!(v["error"]["column"], column, "{v}");
        assert!(v["error"]["hint"].is_string(), "{v}");
    }
    for args in [
        json!({"cursor": 3}),
        json!({"since": "3"}),
        json!({"ops": "insert"}),
        json!({"wait_ms": -1}),
    ] {
        let (st, v) = s.call_as(Some(&s.token), "changes", &args, &[]);
        assert_eq!(st, 400, "{args}: {v}");
        assert_eq!(v["error"]["code"], "invalid_argument", "{v}");
    }
}

#[test]
fn changes_limit_defaults_to_100_and_is_capped_at_1000() {
    let s = Server::start();
    for i in 0..105 {
        let (st, v) = s.call_as(
            Some(&s.token),
            "tool-calls/record",
            &tool_call(&format!("t{i}")),
            &[],
        );
        assert_eq!(st, 200, "{v}");
    }
    let tc = json!(["tool_call"]);
    let p = changes(&s, json!({"since": 0, "ops": tc}));
    assert_eq!(seqs(&p["changes"]), (1..=100).collect::<Vec<_>>());
    assert_eq!(p["next"], 100);
    let p = changes(&s, json!({"since": 0, "ops": tc, "limit": 1000}));
    assert_eq!(p["changes"].as_array().unwrap().len(), 105);
    assert_eq!(p["next"], 105);
    let p = changes(&s, json!({"since": 10, "ops": tc, "limit": 5}));
    assert_eq!(seqs(&p["changes"]), vec![11, 12, 13, 14, 15]);
    assert_eq!(p["next"], 15);
    let p = changes(&s, json!({"since": 0, "ops": tc, "limit": 1}));
    assert_eq!(seqs(&p["changes"]), vec![1]);
    let (all, _) = all_changes(&s, 0, json!({"ops": tc}), 7);
    assert_eq!(all.len(), 105);

    for limit in [1001, 100_000, 0, -1] {
        let (st, v) = s.call_as(
            Some(&s.token),
            "changes",
            &json!({"since": 0, "limit": limit}),
            &[],
        );
        assert_eq!(st, 400, "limit {limit}: {v}");
        assert_eq!(v["error"]["code"], "invalid_argument");
        assert_eq!(v["error"]["column"], "limit");
        assert!(v["error"]["hint"].as_str().unwrap().contains("1000"), "{v}");
    }
}

/// Runs `changes/` on a thread (a long poll); answers (elapsed, page).
fn poll_on_thread(s: &Server, args: Value) -> std::thread::JoinHandle<(Duration, Value)> {
    let (url, token) = (s.url.clone(), s.token.clone());
    std::thread::spawn(move || {
        let t0 = Instant::now();
        let resp = reqwest::blocking::Client::new()
            .post(format!("{url}/datanotes/changes/"))
            .bearer_auth(token)
            .json(&args)
            .timeout(Duration::from_secs(60))
            .send()
            .unwrap();
        assert_eq!(resp.status().as_u16(), 200);
        let v: Value = resp.json().unwrap();
        (t0.elapsed(), v)
    })
}

#[test]
fn changes_long_poll_returns_at_the_first_matching_write() {
    let s = Server::start();
    s.ok("create_table", items("a.b.c"));
    let since = s.seq();

    // Nothing happens: empty after the wait, cursor unchanged.
    let t0 = Instant::now();
    let p = changes(&s, json!({"since": since, "wait_ms": 400}));
    let el = t0.elapsed();
    assert_eq!(p, json!({"changes": [], "next": since}));
    assert!(el >= Duration::from_millis(400), "returned early: {el:?}");
    assert!(el < Duration::from_secs(5), "{el:?}");

    // A write during the wait ends it at once.
    let h = poll_on_thread(&s, json!({"since": since, "wait_ms": 30_000}));
    // Once the poll waits (the point of the test: it must not wait out 30 s).
    s.polls_waiting(1);
    assert!(!h.is_finished(), "did not wait");
    let seq = insert(&s, "a.b.c", "wake");
    let (el, p) = h.join().unwrap();
    assert_eq!(seqs(&p["changes"]), vec![seq], "{p}");
    assert_eq!(p["next"], seq);
    assert!(el < Duration::from_secs(10), "did not wake: {el:?}");

    // A write the filter does not match does not end it; `next` moves past it.
    let since = s.seq();
    let h = poll_on_thread(
        &s,
        json!({"since": since, "wait_ms": 1500, "ops": ["delete"]}),
    );
    s.polls_waiting(1);
    let seq = insert(&s, "a.b.c", "ignored");
    let (el, p) = h.join().unwrap();
    assert_eq!(p, json!({"changes": [], "next": seq}));
    assert!(el >= Duration::from_millis(1400), "{el:?}");

    // ... and a matching one does.
    let h = poll_on_thread(
        &s,
        json!({"since": seq, "wait_ms": 30_000, "ops": ["delete"]}),
    );
    s.polls_waiting(1);
    insert(&s, "a.b.c", "ignored-too");
    let del = s.ok("delete_row", json!({"table": "a.b.c", "id": "wake"}))["seq"]
        .as_i64()
        .unwrap();
    let (el, p) = h.join().unwrap();
    assert_eq!(seqs(&p["changes"]), vec![del], "{p}");
    assert!(el < Duration::from_secs(10), "{el:?}");

    // Changes already there: no wait at all.
    let t0 = Instant::now();
    let p = changes(&s, json!({"since": 0, "wait_ms": 30_000}));
    assert!(!p["changes"].as_array().unwrap().is_empty());
    assert!(t0.elapsed() < Duration::from_secs(5));
}

#[test]
fn a_waiting_long_poll_does_not_hold_up_a_restart() {
    let s = Server::start();
    s.ok("create_table", items("a.b.c"));
    let since = s.seq();
    let h = poll_on_thread(&s, json!({"since": since, "wait_ms": 60_000}));
    // The poll waits when the server is asked to stop.
    s.polls_waiting(1);
    let t0 = Instant::now();
    let s = s.restart();
    let took = t0.elapsed();
    assert!(
        took < Duration::from_secs(10),
        "a restart with a long poll waiting took {took:?}"
    );
    // The poll is answered with what there is: nothing, and the same cursor.
    let (_, p) = h.join().unwrap();
    assert_eq!(p, json!({"changes": [], "next": since}));
    let seq = insert(&s, "a.b.c", "after");
    let p = changes(&s, json!({"since": since, "wait_ms": 1000}));
    assert_eq!(seqs(&p["changes"]), vec![seq]);
}
