//! The SSE feed (`changes/stream`): event ids are seqs, `Last-Event-ID` resumes; tool-call
//! events reach only the consumers that ask, cut.

use super::*;

// ---- SSE ----

#[test]
fn sse_event_ids_are_seqs_and_last_event_id_resumes_exactly() {
    let s = Server::start();
    s.ok("create_table", items("a.b.c"));
    for i in 0..3 {
        insert(&s, "a.b.c", &format!("r{i}"));
    }
    let tok = s.token.clone();
    let open = |q: &str, h: &[(&str, &str)]| s.sse(q, Some(&tok), h).unwrap();

    let all = open("since=0", &[]);
    let ev = all.take(4);
    assert_eq!(
        ev.iter().map(SseEvent::seq).collect::<Vec<_>>(),
        vec![1, 2, 3, 4]
    );
    for e in &ev {
        assert_eq!(e.json()["seq"], e.seq(), "id is the seq");
    }
    assert_eq!(ev[0].json()["op"], "create_table");
    assert_eq!(ev[3].json()["row"], "r2");
    // The same content as changes/.
    let page = changes(&s, json!({"since": 0}));
    for (e, c) in ev.iter().zip(page["changes"].as_array().unwrap()) {
        assert_eq!(&e.json(), c);
    }
    // Live.
    let s5 = insert(&s, "a.b.c", "r3");
    assert_eq!(all.take(1)[0].seq(), s5);

    // Reconnect after id 2: exactly 3, 4, 5, then nothing until a new write.
    let resumed = open("", &[("Last-Event-ID", "2")]);
    let ev = resumed.take(3);
    assert_eq!(
        ev.iter().map(SseEvent::seq).collect::<Vec<_>>(),
        vec![3, 4, 5]
    );
    // No duplicate, nothing extra: the next event is the next write's.
    let s6 = insert(&s, "a.b.c", "r4");
    assert_eq!(resumed.take(1)[0].seq(), s6);
    assert_eq!(all.take(1)[0].seq(), s6);

    // Last-Event-ID wins over ?since=.
    let both = open("since=0", &[("Last-Event-ID", "4")]);
    assert_eq!(both.take(1)[0].seq(), 5);

    // No cursor: from now on only.
    let fresh = open("", &[]);
    let s7 = insert(&s, "a.b.c", "r5");
    assert_eq!(fresh.take(1)[0].seq(), s7);

    // A consumer drops, writes go on, it reconnects with the last id it saw.
    let c1 = open("since=5", &[]);
    let seen = c1.take(2);
    assert_eq!(seen[1].seq(), 7);
    drop(c1);
    let missed: Vec<i64> = (0..3)
        .map(|i| insert(&s, "a.b.c", &format!("m{i}")))
        .collect();
    let c2 = open("", &[("Last-Event-ID", &seen[1].seq().to_string())]);
    assert_eq!(
        c2.take(3).iter().map(SseEvent::seq).collect::<Vec<_>>(),
        missed
    );
    // Nothing more: the next event is the next write's.
    let m3 = insert(&s, "a.b.c", "m3");
    assert_eq!(c2.take(1)[0].seq(), m3);

    // Filters as query parameters.
    let upd = s.ok(
        "update_row",
        json!({"table": "a.b.c", "id": "r0", "values": {"title": "zero"}}),
    )["seq"]
        .as_i64()
        .unwrap();
    s.ok("create_table", items("z.q.r"));
    let zi = insert(&s, "z.q.r", "z1");
    let f = open("since=0&ops=update,create_table", &[]);
    assert_eq!(
        f.take(3).iter().map(SseEvent::seq).collect::<Vec<_>>(),
        vec![1, upd, zi - 1]
    );
    // Nothing else matched: the next event is the next update.
    let upd2 = s.ok(
        "update_row",
        json!({"table": "a.b.c", "id": "r1", "values": {"title": "one"}}),
    )["seq"]
        .as_i64()
        .unwrap();
    assert_eq!(f.take(1)[0].seq(), upd2);
    let f = open("since=0&tables=z.*", &[]);
    assert_eq!(
        f.take(2).iter().map(SseEvent::seq).collect::<Vec<_>>(),
        vec![zi - 1, zi]
    );
    let f = open(&format!("since={upd}&tables=a.b.*,z.q.r&ops=insert"), &[]);
    assert_eq!(f.take(1)[0].seq(), zi);
    // Not the update since: the next event is the next insert.
    let z2 = insert(&s, "z.q.r", "z2");
    assert_eq!(f.take(1)[0].seq(), z2);

    // Refusals.
    assert_eq!(s.sse("since=0", None, &[]).err().unwrap().0, 401);
    assert_eq!(
        s.sse("since=0", Some("dn_app_nope"), &[]).err().unwrap().0,
        401
    );
    for (q, h) in [
        ("since=abc", vec![]),
        ("", vec![("Last-Event-ID", "x1")]),
        ("ops=nope", vec![]),
        ("tables=a.*.c", vec![]),
    ] {
        let (st, v) = s.sse(q, Some(&tok), &h).err().expect("refused");
        assert_eq!(st, 400, "{q} {h:?}: {v}");
        assert_eq!(v["error"]["code"], "invalid_argument");
    }
}

#[test]
fn sse_resumes_with_last_event_id_across_a_restart() {
    let s = Server::start();
    s.ok("create_table", items("a.b.c"));
    let first = insert(&s, "a.b.c", "r0");
    {
        let st = s.sse("since=0", Some(&s.token), &[]).unwrap();
        assert_eq!(st.take(2)[1].seq(), first);
    }
    let t0 = Instant::now();
    let s = s.restart();
    assert!(
        t0.elapsed() < Duration::from_secs(10),
        "a restart with an SSE consumer connected took {:?}",
        t0.elapsed()
    );
    let later: Vec<i64> = (1..4)
        .map(|i| insert(&s, "a.b.c", &format!("r{i}")))
        .collect();
    let st = s
        .sse("", Some(&s.token), &[("Last-Event-ID", &first.to_string())])
        .unwrap();
    assert_eq!(
        st.take(3).iter().map(SseEvent::seq).collect::<Vec<_>>(),
        later
    );
    // No duplicate after the restart: the next event is the next write's.
    let next = insert(&s, "a.b.c", "r4");
    assert_eq!(st.take(1)[0].seq(), next);
}

// ---- tool-call events ----

#[test]
fn tool_call_events_reach_only_consumers_that_ask_and_are_cut() {
    let s = Server::start();
    s.ok("create_table", items("a.b.c"));
    let since = s.seq();
    let plain = s
        .sse(&format!("since={since}"), Some(&s.token), &[])
        .unwrap();
    let tools = s
        .sse(&format!("since={since}&ops=tool_call"), Some(&s.token), &[])
        .unwrap();

    let long_args = json!({"t": "é".repeat(400)});
    let mut big = tool_call("search");
    big["args"] = long_args.clone();
    big["value"] = json!("ü".repeat(1500));
    let mut obj = tool_call("list");
    obj["value"] = json!({"rows": "b".repeat(2000)});
    obj["ok"] = json!(false);
    obj.as_object_mut().unwrap().remove("session");
    let small = tool_call("get");
    let mut recorded = vec![];
    for body in [&big, &obj, &small] {
        let (st, v) = s.call_as(
            Some(&s.token),
            "tool-calls/record",
            body,
            &[("X-Datanotes-Actor", "claude-code / opus")],
        );
        assert_eq!(st, 200, "{v}");
        assert_eq!(
            v["queued"], true,
            "the answer does not wait for the commit: {v}"
        );
        recorded.push(s.seq());
    }
    assert_eq!(recorded, vec![since + 1, since + 2, since + 3]);

    // Not for consumers that do not name tool_call.
    let p = changes(&s, json!({"since": since}));
    assert_eq!(p, json!({"changes": [], "next": since + 3}));
    let p = changes(&s, json!({"since": since, "ops": ["insert", "update"]}));
    assert!(p["changes"].as_array().unwrap().is_empty());
    let p = changes(&s, json!({"since": since, "tables": ["*"]}));
    assert!(p["changes"].as_array().unwrap().is_empty());
    let ms = s.ok("list_migrations", json!({}));
    assert!(!ms.to_string().contains("tool_call"), "{ms}");

    // For those that do.
    let p = changes(&s, json!({"since": since, "ops": ["tool_call"]}));
    let cs = p["changes"].as_array().unwrap();
    assert_eq!(seqs(&p["changes"]), recorded);
    for c in cs {
        assert_eq!(c["op"], "tool_call");
        assert_eq!(c["table"], Value::Null);
        assert_eq!(c["actor"]["label"], "claude-code / opus");
    }
    let want_args: String = long_args.to_string().chars().take(300).collect();
    assert_eq!(want_args.chars().count(), 300);
    let want_obj_value: String = obj["value"].to_string().chars().take(1000).collect();
    assert_eq!(
        cs[0]["call"],
        json!({"tool": "search", "args": want_args, "ok": true, "value": "ü".repeat(1000),
               "servedBy": "tasks-app", "durationMs": 12.5, "summary": "searched", "session": "sess-1",
               "resultChars": 6, "resultTokens": 2})
    );
    assert_eq!(cs[1]["call"]["value"], want_obj_value);
    assert_eq!(cs[1]["call"]["ok"], false);
    assert_eq!(cs[1]["call"]["session"], Value::Null);
    assert_eq!(cs[1]["call"]["tool"], "list");
    assert_eq!(cs[2]["call"]["args"], small["args"].to_string());
    assert_eq!(cs[2]["call"]["value"], "2 hits");

    // SSE: only the stream that asked gets them; the other sees the next row write first.
    let ev = tools.take(3);
    assert_eq!(ev.iter().map(SseEvent::seq).collect::<Vec<_>>(), recorded);
    assert_eq!(ev[0].json(), cs[0]);
    let row = insert(&s, "a.b.c", "after-tools");
    assert_eq!(plain.take(1)[0].seq(), row);
    // ... and the tool stream not the row: its next event is the next tool call.
    let (st, v) = s.call_as(Some(&s.token), "tool-calls/record", &small, &[]);
    assert_eq!(st, 200, "{v}");
    eventually("the tool call is committed", || s.seq() > row);
    assert_eq!(tools.take(1)[0].seq(), s.seq());

    // Missing or mistyped fields: 400, nothing recorded.
    let before = s.seq();
    let mut bad = vec![];
    for k in [
        "tool",
        "args",
        "ok",
        "value",
        "servedBy",
        "durationMs",
        "summary",
        "resultChars",
        "resultTokens",
    ] {
        let mut b = tool_call("x");
        b.as_object_mut().unwrap().remove(k);
        bad.push(b);
    }
    for (k, v) in [
        ("tool", json!(5)),
        ("ok", json!("yes")),
        ("servedBy", json!(null)),
        ("durationMs", json!("fast")),
        ("summary", json!(["s"])),
        ("session", json!(3)),
        ("resultChars", json!(-1)),
        ("resultTokens", json!(1.5)),
        ("extra", json!(1)),
    ] {
        let mut b = tool_call("x");
        b[k] = v;
        bad.push(b);
    }
    for b in bad {
        let (st, v) = s.call_as(Some(&s.token), "tool-calls/record", &b, &[]);
        assert_eq!(st, 400, "{b}: {v}");
        assert_eq!(v["error"]["code"], "invalid_argument", "{v}");
        assert!(v["error"]["message"].is_string() && v["error"]["hint"].is_string());
    }
    assert_eq!(s.seq(), before, "a refused record journals nothing");
    let (st, _) = s.call_as(None, "tool-calls/record", &tool_call("x"), &[]);
    assert_eq!(st, 401);
}

#[test]
fn tool_call_records_with_huge_fields_are_cut_and_the_journal_stays_small() {
    let s = Server::start();
    let journal = |s: &Server| -> u64 {
        ["journal.db", "journal.db-wal"]
            .iter()
            .map(|f| std::fs::metadata(s.dir.join(".datanotes").join(f)).map_or(0, |m| m.len()))
            .sum()
    };
    let since = s.seq();
    let grown_from = journal(&s);
    // About 1 MB in every text field (two-byte characters in some, so a cut in the middle of
    // a character would show).
    let mut body = tool_call("x");
    body["tool"] = json!("é".repeat(500_000));
    body["servedBy"] = json!("s".repeat(1 << 20));
    body["session"] = json!("ß".repeat(500_000));
    body["summary"] = json!("y".repeat(1 << 20));
    body["args"] = json!({"a": "z".repeat(1 << 20)});
    body["value"] = json!("v".repeat(1 << 20));
    for _ in 0..3 {
        let (st, v) = s.call_as(Some(&s.token), "tool-calls/record", &body, &[]);
        assert_eq!(st, 200, "{v}");
    }
    let grew = journal(&s) - grown_from;
    assert!(
        grew < 256 << 10,
        "three records of ~6 MB each grew the journal by {grew} bytes"
    );

    let p = changes(&s, json!({"since": since, "ops": ["tool_call"]}));
    let cs = p["changes"].as_array().unwrap();
    assert_eq!(cs.len(), 3, "{p}");
    let want_args: String = body["args"].to_string().chars().take(300).collect();
    for c in cs {
        assert_eq!(
            c["call"],
            json!({"tool": "é".repeat(200), "args": want_args, "ok": true, "value": "v".repeat(1000),
                   "servedBy": "s".repeat(200), "durationMs": 12.5, "summary": "y".repeat(300),
                   "session": "ß".repeat(200), "resultChars": 6, "resultTokens": 2})
        );
    }
}
