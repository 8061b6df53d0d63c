//! Every write is journaled with its actor, before and after states; seq only grows, across
//! restarts, kills and vacuum.

use super::*;

#[test]
fn every_write_is_journaled_with_its_actor() {
    let s = Server::start();
    create_tasks(&s);
    let c = w(
        &s,
        "create_table",
        json!({"table": "a.b.c", "columns": {"n": {"type": "integer"}}}),
    );
    let i = w(
        &s,
        "insert_row",
        json!({"table": TASKS, "id": "t", "values": {"title": "T", "estimate": 1}, "body": "b"}),
    );
    let u = w(
        &s,
        "update_row",
        json!({"table": TASKS, "id": "t", "values": {"estimate": 2}}),
    );
    let d = w(&s, "delete_row", json!({"table": TASKS, "id": "t"}));
    let a = w(
        &s,
        "alter_table",
        json!({"table": "a.b.c", "add": {"m": {"type": "text"}}}),
    );
    let x = w(&s, "drop_table", json!({"table": "a.b.c"}));
    let seqs = [c, i.clone(), u.clone(), d.clone(), a, x].map(|v| seq_of(&v));
    assert!(seqs.windows(2).all(|p| p[0] < p[1]), "{seqs:?}");
    assert_eq!(seqs[0], 5, "create_tasks wrote four migrations first");

    let all = s.migrations(json!({}));
    assert_eq!(all.len(), 10);
    let listed: Vec<i64> = all.iter().map(|m| m["seq"].as_i64().unwrap()).collect();
    assert_eq!(
        listed,
        (1..=10).rev().collect::<Vec<_>>(),
        "no gaps, newest first"
    );
    for m in &all[..6] {
        assert_eq!(m["actor"]["harness"], "claude-code", "{m}");
        assert_eq!(m["actor"]["model"], "opus-4", "{m}");
        assert_eq!(m["actor"]["label"], "claude-code / opus-4", "{m}");
        assert_eq!(m["actor"]["token"], "owner", "{m}");
        let ts = m["ts"].as_str().unwrap();
        assert!(ts.ends_with('Z') && ts.len() == 24, "ts {ts}");
    }
    // Without the header the owner is the actor.
    assert_eq!(all[9]["actor"], json!({"token": "owner", "label": "owner"}));

    let ops: Vec<(&str, &str, Option<&str>)> = all
        .iter()
        .rev()
        .skip(4)
        .map(|m| {
            (
                m["op"].as_str().unwrap(),
                m["table"].as_str().unwrap(),
                m["row"].as_str(),
            )
        })
        .collect();
    assert_eq!(
        ops,
        [
            ("create_table", "a.b.c", None),
            ("insert", TASKS, Some("t")),
            ("update", TASKS, Some("t")),
            ("delete", TASKS, Some("t")),
            ("alter_table", "a.b.c", None),
            ("drop_table", "a.b.c", None),
        ]
    );
    let v1 = json!({"version": 1, "values": {"title": "T", "status": "todo", "estimate": 1}, "body": "b"});
    let v2 = json!({"version": 2, "values": {"title": "T", "status": "todo", "estimate": 2}, "body": "b"});
    let m = migration(&s, seq_of(&i));
    assert_eq!(
        (m["before"].clone(), m["after"].clone()),
        (Value::Null, v1.clone())
    );
    let m = migration(&s, seq_of(&u));
    assert_eq!((m["before"].clone(), m["after"].clone()), (v1, v2.clone()));
    let m = migration(&s, seq_of(&d));
    assert_eq!((m["before"].clone(), m["after"].clone()), (v2, Value::Null));
    let m = migration(&s, seqs[4]);
    assert_eq!(m["before"]["columns"], json!({"n": {"type": "integer"}}));
    assert_eq!(m["after"]["columns"]["m"], json!({"type": "text"}));
    let m = migration(&s, seqs[5]);
    assert_eq!(m["after"], Value::Null);
    assert_eq!(m["before"]["rows"], json!([]));

    // A harness without a model, and a session.
    let (st, v) = s.call_with(
        "insert_row",
        &[
            ("X-Datanotes-Actor", "curl"),
            ("X-Datanotes-Session", "sess-1"),
        ],
        json!({"table": TASKS, "values": {"title": "by curl"}}),
    );
    assert_eq!(st, 200, "{v}");
    let m = migration(&s, seq_of(&v));
    assert_eq!(
        m["actor"],
        json!({"harness": "curl", "session": "sess-1", "token": "owner", "label": "curl"})
    );
    // Refused writes and reads are not journaled.
    s.refused("insert_row", json!({"table": TASKS, "values": {}}), 422);
    s.ok("select_rows", json!({"table": TASKS}));
    assert_eq!(s.seq(), seq_of(&v));
}

#[test]
fn seq_only_grows_across_restarts_kills_and_vacuum() {
    let s = Server::start();
    create_tasks(&s);
    let r = s.ok(
        "insert_row",
        json!({"table": TASKS, "id": "a", "values": {"title": "A"}}),
    );
    let last = seq_of(&r);
    let journal = s.migrations(json!({}));

    let s = s.restart();
    assert_eq!(s.seq(), last);
    assert_eq!(s.migrations(json!({})), journal, "the journal is durable");
    let r = s.ok(
        "update_row",
        json!({"table": TASKS, "id": "a", "values": {"estimate": 1}}),
    );
    assert_eq!(seq_of(&r), last + 1);
    assert_eq!(r["version"], 2);

    // A kill right after an acknowledged write loses nothing.
    let s = s.restart_killed();
    assert_eq!(s.seq(), last + 1);
    let row = s.ok("get_row", json!({"table": TASKS, "id": "a"}));
    assert_eq!(row["version"], 2);
    assert_eq!(row["values"]["estimate"], 1);
    assert_eq!(
        s.migrations(json!({})).len() as i64,
        last + 1,
        "nothing journaled twice"
    );

    // Vacuum everything: seq still continues from the high-water mark, after a restart too.
    let v = s.ok("vacuum", json!({"before_seq": last + 2}));
    assert_eq!(v["removed"], last + 1);
    assert_eq!(s.migrations(json!({})), Vec::<Value>::new());
    let s = s.restart();
    assert_eq!(s.seq(), last + 1);
    let r = s.ok(
        "insert_row",
        json!({"table": TASKS, "id": "b", "values": {"title": "B"}}),
    );
    assert_eq!(seq_of(&r), last + 2);
}
