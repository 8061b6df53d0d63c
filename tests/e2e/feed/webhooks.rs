//! Webhooks: delivered in order, signed, retried, resumed after a restart; filters.

use super::*;

#[test]
fn webhooks_deliver_in_order_signed_retry_and_resume_after_restart() {
    let s = Server::start_with_env(BACKOFF);
    s.ok("create_table", items("a.b.c"));
    insert(&s, "a.b.c", "before-hook");
    let start = s.seq();
    let r = Receiver::start();
    let created = s.ok_route("webhooks/create", json!({"url": format!("{}/hook", r.url)}));
    let id = created["webhook"]["id"].as_str().unwrap().to_string();
    let secret = created["secret"].as_str().unwrap().to_string();
    assert!(secret.starts_with("whsec_"), "{created}");
    assert!(created["webhook"].get("secret").is_none(), "{created}");
    assert_eq!(
        created["webhook"]["cursor"], start,
        "a hook starts at the end"
    );
    let listed = s.ok_route("webhooks", json!({}));
    assert!(!listed.to_string().contains(&secret), "{listed}");
    let want = |s: &Server| -> Vec<i64> {
        let (all, _) = all_changes(s, start, json!({}), 1000);
        all.iter().map(|c| c["seq"].as_i64().unwrap()).collect()
    };

    // Three failures, then success: everything arrives, once, in order.
    r.fail_next.store(3, Ordering::SeqCst);
    for i in 0..5 {
        insert(&s, "a.b.c", &format!("a{i}"));
    }
    eventually("the first rows delivered", || {
        r.delivered("/hook").len() == 5
    });
    let hits = r.hits();
    assert!(hits.len() >= 4, "{} requests", hits.len());
    assert!(hits[..3].iter().all(|h| h.status == 500));
    assert_eq!(check_deliveries(&hits, &id, &secret, &want(&s)), 5);

    // Failing for a while: webhooks/ shows it; then it recovers.
    r.failing.store(true, Ordering::SeqCst);
    insert(&s, "a.b.c", "b0");
    insert(&s, "a.b.c", "b1");
    eventually("failures reported", || {
        let h = hook_state(&s, &id);
        h["consecutive_failures"].as_u64().unwrap_or(0) >= 3
            && h["last_error"].as_str().is_some_and(|e| e.contains("500"))
    });
    insert(&s, "a.b.c", "b2");
    r.failing.store(false, Ordering::SeqCst);
    eventually("recovery", || {
        let h = hook_state(&s, &id);
        h["consecutive_failures"] == 0 && h["cursor"] == s.seq() && h["last_success"].is_string()
    });
    assert_eq!(r.delivered("/hook").len(), 8);
    assert_eq!(
        check_deliveries(&r.hits_at("/hook"), &id, &secret, &want(&s)),
        8
    );

    // Restart with everything delivered: nothing is sent again; new changes are.
    let s = s.restart();
    assert_eq!(hook_state(&s, &id)["cursor"], s.seq(), "cursor persisted");
    let n = r.hits().len();
    let c0 = insert(&s, "a.b.c", "c0");
    eventually("delivery after restart", || {
        r.delivered("/hook").last() == Some(&c0)
    });
    assert_eq!(
        r.hits()[n].seqs(),
        vec![c0],
        "resumes from the persisted cursor"
    );

    // Restart with changes still undelivered: they come after the restart.
    r.failing.store(true, Ordering::SeqCst);
    let d: Vec<i64> = (0..3)
        .map(|i| insert(&s, "a.b.c", &format!("d{i}")))
        .collect();
    eventually("a failed attempt", || {
        r.hits()
            .iter()
            .any(|h| h.status == 500 && h.seqs().first() == Some(&d[0]))
    });
    let s = s.restart();
    r.failing.store(false, Ordering::SeqCst);
    let e0 = insert(&s, "a.b.c", "e0");
    eventually("pending changes delivered after restart", || {
        r.delivered("/hook").last() == Some(&e0)
    });
    let all = want(&s);
    assert_eq!(
        r.delivered("/hook"),
        all,
        "each change delivered exactly once"
    );
    assert_eq!(
        check_deliveries(&r.hits_at("/hook"), &id, &secret, &all),
        all.len()
    );
    eventually("state after recovery", || {
        let h = hook_state(&s, &id);
        h["consecutive_failures"] == 0 && h["cursor"] == s.seq()
    });

    // Deleted: no more deliveries. A second webhook, alive, shows when the first would have
    // delivered.
    let witness = s.ok_route(
        "webhooks/create",
        json!({"url": format!("{}/witness", r.url)}),
    );
    s.ok_route("webhooks/delete", json!({"id": id}));
    let n = r.hits_at("/hook").len();
    let gone = insert(&s, "a.b.c", "gone");
    eventually("the witness got the change", || {
        r.delivered("/witness") == vec![gone]
    });
    assert_eq!(
        r.hits_at("/hook").len(),
        n,
        "a deleted webhook delivers nothing"
    );
    let (st, v) = s.call_as(Some(&s.token), "webhooks/delete", &json!({"id": id}), &[]);
    assert_eq!(st, 404, "{v}");
    let listed = s.ok_route("webhooks", json!({}));
    assert_eq!(listed["webhooks"].as_array().unwrap().len(), 1, "{listed}");
    assert_eq!(listed["webhooks"][0]["id"], witness["webhook"]["id"]);
}

#[test]
fn webhooks_filter_by_op_and_table_and_get_tool_calls_only_when_asked() {
    let s = Server::start_with_env(BACKOFF);
    s.ok("create_table", items("a.b.c"));
    s.ok("create_table", items("other.x.y"));
    let start = s.seq();
    let r = Receiver::start();
    let hooks: Vec<(&str, Value)> = vec![
        ("/all", json!({})),
        ("/tools", json!({"ops": ["tool_call"]})),
        ("/ab", json!({"tables": ["a.b.*"]})),
        ("/a-inserts", json!({"ops": ["insert"], "tables": ["a.*"]})),
        ("/mixed", json!({"ops": ["tool_call", "update"]})),
    ];
    let mut ids = vec![];
    for (path, filter) in &hooks {
        let mut body = filter.clone();
        body["url"] = json!(format!("{}{path}", r.url));
        let v = s.ok_route("webhooks/create", body);
        ids.push((
            v["webhook"]["id"].as_str().unwrap().to_string(),
            v["secret"].as_str().unwrap().to_string(),
        ));
    }
    // Bad filters and URLs are refused and create nothing.
    for body in [
        json!({"url": "ftp://x/hook"}),
        json!({"url": "not a url"}),
        json!({"url": format!("{}/x", r.url), "ops": ["nope"]}),
        json!({"url": format!("{}/x", r.url), "tables": ["a.*.c"]}),
        json!({"url": format!("{}/x", r.url), "secret": "mine"}),
    ] {
        let (st, v) = s.call_as(Some(&s.token), "webhooks/create", &body, &[]);
        assert_eq!(st, 400, "{body}: {v}");
    }
    assert_eq!(
        s.ok_route("webhooks", json!({}))["webhooks"]
            .as_array()
            .unwrap()
            .len(),
        hooks.len()
    );

    insert(&s, "a.b.c", "r1");
    insert(&s, "other.x.y", "o1");
    let (st, _) = s.call_as(
        Some(&s.token),
        "tool-calls/record",
        &tool_call("search"),
        &[],
    );
    assert_eq!(st, 200);
    s.ok(
        "update_row",
        json!({"table": "a.b.c", "id": "r1", "values": {"title": "x"}}),
    );
    s.ok("delete_row", json!({"table": "other.x.y", "id": "o1"}));
    let (st, _) = s.call_as(Some(&s.token), "tool-calls/record", &tool_call("get"), &[]);
    assert_eq!(st, 200);
    let last = s.seq();

    eventually("every webhook caught up", || {
        ids.iter()
            .all(|(id, _)| hook_state(&s, id)["cursor"] == last)
    });
    for ((path, filter), (id, secret)) in hooks.iter().zip(&ids) {
        let (want, _) = all_changes(&s, start, filter.clone(), 1000);
        let want: Vec<i64> = want.iter().map(|c| c["seq"].as_i64().unwrap()).collect();
        let hits = r.hits_at(path);
        assert_eq!(r.delivered(path), want, "{path}");
        assert_eq!(check_deliveries(&hits, id, secret, &want), want.len());
        let ops: Vec<String> = hits
            .iter()
            .flat_map(|h| h.json()["changes"].as_array().unwrap().clone())
            .map(|c| c["op"].as_str().unwrap().to_string())
            .collect();
        let expected: &[&str] = match *path {
            "/all" => &["insert", "insert", "update", "delete"],
            "/tools" => &["tool_call", "tool_call"],
            "/ab" => &["insert", "update"],
            "/a-inserts" => &["insert"],
            "/mixed" => &["tool_call", "update", "tool_call"],
            _ => unreachable!(),
        };
        assert_eq!(ops, expected, "{path}");
    }
    let tools = r.hits_at("/tools");
    let first = &tools[0].json()["changes"][0];
    assert_eq!(first["call"]["tool"], "search");
    assert_eq!(first["call"]["servedBy"], "tasks-app");
}
