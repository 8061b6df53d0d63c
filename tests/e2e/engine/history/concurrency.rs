//! Concurrent writes: each checked and journaled once; of writes of one unique value or id, one
//! gets through.

use super::*;

#[test]
fn concurrent_writes_are_each_checked_and_journaled_once() {
    let s = Server::start();
    create_tasks(&s);
    let seq0 = s.seq();
    let results: Vec<(u16, Value, bool)> = std::thread::scope(|sc| {
        let hs: Vec<_> = (0..8)
            .map(|t| {
                let s = &s;
                sc.spawn(move || {
                    let mut out = vec![];
                    for i in 0..10 {
                        // Every third write breaks a rule; the rest must all land.
                        let bad = (t + i) % 3 == 0;
                        let est = if bad { 1000 } else { i };
                        let (st, v) = s.call(
                            "insert_row",
                            json!({"table": TASKS, "id": format!("r{t}-{i}"), "values": {"title": "x", "estimate": est}}),
                        );
                        out.push((st, v, bad));
                    }
                    out
                })
            })
            .collect();
        hs.into_iter().flat_map(|h| h.join().unwrap()).collect()
    });
    let mut seqs = vec![];
    let mut good = 0;
    for (st, v, bad) in &results {
        if *bad {
            assert_eq!(*st, 422, "{v}");
            assert_eq!(v["error"]["rule"], "max");
        } else {
            assert_eq!(*st, 200, "{v}");
            seqs.push(v["seq"].as_i64().unwrap());
            good += 1;
        }
    }
    seqs.sort();
    seqs.dedup();
    assert_eq!(seqs.len(), good, "each write has its own seq");
    assert_eq!(s.seq(), seq0 + good as i64);
    assert_eq!(
        s.ok("describe_table", json!({"table": TASKS}))["rows"],
        good
    );
    let files = table_files(&s, TASKS);
    assert_eq!(
        files.len(),
        good + 1,
        "one file per row, and the definition"
    );
    for (st, v, bad) in &results {
        if !bad {
            let id = v["id"].as_str().unwrap();
            assert!(s.row_path(TASKS, id).is_file(), "{id} {st}");
        }
    }
}

#[test]
fn concurrent_writes_of_the_same_unique_value_or_id_let_one_through() {
    let s = Server::start();
    create_tasks(&s);
    let run = |args: &(dyn Fn(usize) -> Value + Sync)| -> Vec<u16> {
        std::thread::scope(|sc| {
            let hs: Vec<_> = (0..8)
                .map(|t| {
                    let s = &s;
                    sc.spawn(move || s.call("insert_row", args(t)).0)
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        })
    };
    let codes = run(
        &|t| json!({"table": TASKS, "id": format!("c{t}"), "values": {"title": "x", "code": "AB-7"}}),
    );
    assert_eq!(codes.iter().filter(|&&c| c == 200).count(), 1, "{codes:?}");
    assert!(codes.iter().all(|&c| c == 200 || c == 422), "{codes:?}");
    let ids = run(&|t| json!({"table": TASKS, "id": "same", "values": {"title": format!("t{t}")}}));
    assert_eq!(ids.iter().filter(|&&c| c == 200).count(), 1, "{ids:?}");
    assert!(ids.iter().all(|&c| c == 200 || c == 409), "{ids:?}");
    assert_eq!(s.ok("describe_table", json!({"table": TASKS}))["rows"], 2);
    assert_eq!(table_files(&s, TASKS).len(), 3);
}
