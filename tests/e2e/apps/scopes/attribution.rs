//! An app's writes are attributed to it and to its actor.

use super::*;

// ---- actor attribution ----

#[test]
fn an_apps_writes_are_attributed_to_it_and_its_actor() {
    let s = Server::start();
    s.ok("create_table", table_def(T));
    let tok = create_app(&s, json!({"name": "scribe", "write": ["alpha.*"]}));
    let start = s.seq();
    let (st, v) = s.call_as(
        Some(&tok),
        "insert_row",
        &json!({"table": T, "id": "n1", "values": {"title": "one"}}),
        &[
            ("X-Datanotes-Actor", "claude-code / opus"),
            ("X-Datanotes-Session", "sess-1"),
        ],
    );
    assert_eq!(st, 200, "{v}");
    let seq = v["seq"].as_i64().unwrap();
    let want = json!({"harness": "claude-code", "model": "opus", "app": "scribe", "session": "sess-1",
                      "token": "app:scribe", "label": "claude-code / opus via scribe"});

    let m = &s.ok("list_migrations", json!({"limit": 1}))["migrations"][0];
    assert_eq!(m["seq"], seq);
    assert_eq!(m["op"], "insert");
    assert_eq!(m["actor"], want, "{m}");
    for filter in [
        json!({"app": "scribe"}),
        json!({"actor": "claude-code / opus via scribe"}),
        json!({"actor": "opus"}),
        json!({"session": "sess-1"}),
    ] {
        let ms = s.ok("list_migrations", filter.clone())["migrations"].clone();
        let seqs: Vec<i64> = ms
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["seq"].as_i64().unwrap())
            .collect();
        assert_eq!(seqs, vec![seq], "{filter}");
    }

    let page = s.ok_route("changes", json!({"since": start}));
    assert_eq!(page["changes"].as_array().unwrap().len(), 1, "{page}");
    assert_eq!(page["changes"][0]["seq"], seq);
    assert_eq!(page["changes"][0]["actor"], want);
    let stream = s.sse(&format!("since={start}"), Some(&tok), &[]).unwrap();
    let ev = stream.take(1);
    assert_eq!(ev[0].seq(), seq);
    assert_eq!(ev[0].json()["actor"], want);

    // Without a model, without a header at all, and the owner.
    let write = |token: &str, id: &str, headers: &[(&str, &str)]| {
        let (st, v) = s.call_as(
            Some(token),
            "insert_row",
            &json!({"table": T, "id": id, "values": {"title": id}}),
            headers,
        );
        assert_eq!(st, 200, "{v}");
        let seq = v["seq"].as_i64().unwrap();
        let page = s.ok_route("changes", json!({"since": seq - 1, "limit": 1}));
        assert_eq!(page["changes"][0]["seq"], seq);
        page["changes"][0]["actor"].clone()
    };
    assert_eq!(
        write(&tok, "n2", &[("X-Datanotes-Actor", "cursor")]),
        json!({"harness": "cursor", "app": "scribe", "token": "app:scribe", "label": "cursor via scribe"})
    );
    assert_eq!(
        write(&tok, "n3", &[]),
        json!({"app": "scribe", "token": "app:scribe", "label": "scribe"})
    );
    // Half a header: the missing part is absent, never an empty string.
    assert_eq!(
        write(&tok, "n5", &[("X-Datanotes-Actor", "cursor /")]),
        json!({"harness": "cursor", "app": "scribe", "token": "app:scribe", "label": "cursor via scribe"})
    );
    assert_eq!(
        write(&tok, "n6", &[("X-Datanotes-Actor", "/ opus")]),
        json!({"model": "opus", "app": "scribe", "token": "app:scribe", "label": "opus via scribe"})
    );
    let owner_token = s.token.clone();
    assert_eq!(
        write(
            &owner_token,
            "n4",
            &[("X-Datanotes-Actor", "claude-code / opus")]
        ),
        json!({"harness": "claude-code", "model": "opus", "token": "owner", "label": "claude-code / opus"})
    );
    // The app's tool-call events carry it as well.
    let (st, _) = s.call_as(
        Some(&tok),
        "tool-calls/record",
        &tool_call(1),
        &[("X-Datanotes-Actor", "claude-code / opus")],
    );
    assert_eq!(st, 200);
    let page = s.ok_route(
        "changes",
        json!({"since": s.seq() - 1, "ops": ["tool_call"]}),
    );
    let mut want_tc = want.clone();
    want_tc.as_object_mut().unwrap().remove("session");
    assert_eq!(page["changes"][0]["actor"], want_tc, "{page}");
}
