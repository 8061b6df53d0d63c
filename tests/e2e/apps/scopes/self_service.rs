//! What an app may do to its own entry; tokens rotated, deleted, never stored in clear; invalid
//! apps refused with nothing written.

use super::*;

// ---- self-service limits ----

fn app_entry(s: &Server, name: &str) -> Value {
    s.ok_route("apps/get", json!({"name": name}))["app"].clone()
}

#[test]
fn an_app_changes_only_its_own_descriptive_fields() {
    let s = Server::start();
    s.ok("create_table", table_def(T));
    let tok = create_app(&s, json!({"name": "planner", "write": ["alpha.*"]}));
    let as_app = |route: &str, body: Value| s.call_as(Some(&tok), route, &body, &[]);

    // Its own mcp_url (a loopback address: the owner allows it), mcp_token, description and
    // instructions: allowed.
    s.ok_route(
        "apps/update",
        json!({"name": "planner", "self_url_private": true}),
    );
    let (st, v) = as_app(
        "apps/update",
        json!({"name": "planner", "mcp_url": "http://127.0.0.1:5235/mcp", "mcp_token": "mcp-secret-42",
               "description": "plans things", "instructions": "ask before deleting"}),
    );
    assert_eq!(st, 200, "{v}");
    let e = &v["app"];
    assert_eq!(e["mcp_url"], "http://127.0.0.1:5235/mcp");
    assert_eq!(e["kind"], "remote");
    assert_eq!(e["hasMcpToken"], true);
    assert_eq!(e["description"], "plans things");
    assert_eq!(e["instructions"], "ask before deleting");
    assert!(e.get("mcp_token").is_none(), "{e}");
    assert!(!v.to_string().contains("mcp-secret-42"), "{v}");
    let (st, v) = as_app("apps/get", json!({"name": "planner"}));
    assert_eq!(st, 200);
    assert_eq!(&v["app"], e);

    // Rights: refused, whatever else the call carries, and nothing changes.
    for (field, value) in [
        ("write", json!(["*"])),
        ("write", json!([])),
        ("ddl", json!(true)),
        ("maintain", json!(true)),
        ("call_tools", json!(["*"])),
        ("self_url", json!(false)),
        ("self_url_private", json!(false)),
    ] {
        let before = std::fs::read(s.dir.join(".datanotes/apps.json")).unwrap();
        let mut body = json!({"name": "planner", "description": "sneaky"});
        body[field] = value;
        let (st, v) = as_app("apps/update", body.clone());
        assert_eq!(st, 403, "{body}: {v}");
        let err = assert_error_shape(&v, "forbidden");
        assert_eq!(err["column"], field, "{v}");
        assert!(err["message"].as_str().unwrap().contains(field), "{v}");
        assert!(err["message"].as_str().unwrap().contains("planner"), "{v}");
        assert_eq!(
            std::fs::read(s.dir.join(".datanotes/apps.json")).unwrap(),
            before,
            "{body}"
        );
    }
    let e2 = app_entry(&s, "planner");
    assert_eq!(&e2, e, "refused updates left the entry alone");

    // Its name: naming another app is someone else's entry, refused the same way.
    let (st, v) = as_app(
        "apps/update",
        json!({"name": "renamed", "description": "x"}),
    );
    assert_eq!(st, 403, "{v}");
    assert_eq!(v["error"]["rule"], "self");
    let (st, _) = s.call_as(Some(&s.token), "apps/get", &json!({"name": "renamed"}), &[]);
    assert_eq!(st, 404);
    assert_eq!(app_entry(&s, "planner"), *e);

    // The rights still hold: no ddl.
    let (st, v) = s.call_as(
        Some(&tok),
        "alter_table",
        &json!({"table": T, "description": "x"}),
        &[],
    );
    assert_eq!(st, 403, "{v}");

    // Clearing mcp_token and mcp_url with null.
    let (st, v) = as_app(
        "apps/update",
        json!({"name": "planner", "mcp_token": null, "mcp_url": null}),
    );
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["app"]["hasMcpToken"], false);
    assert_eq!(v["app"]["mcp_url"], Value::Null);
    assert_eq!(v["app"]["kind"], "client");
    assert_eq!(v["app"]["description"], "plans things");

    // The owner changes rights, and they apply to the app's next call at once.
    let v = s.ok_route("apps/update", json!({"name": "planner", "ddl": true}));
    assert_eq!(v["app"]["ddl"], true);
    let (st, v) = s.call_as(
        Some(&tok),
        "alter_table",
        &json!({"table": T, "description": "x"}),
        &[],
    );
    assert_eq!(st, 200, "{v}");
    s.ok_route("apps/update", json!({"name": "planner", "write": []}));
    let (st, v) = s.call_as(
        Some(&tok),
        "insert_row",
        &json!({"table": T, "values": {"title": "late"}}),
        &[],
    );
    assert_eq!(st, 403, "{v}");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("empty"),
        "{v}"
    );
}

#[test]
fn rotate_token_and_delete_cut_the_old_token_at_once() {
    let s = Server::start();
    let t1 = create_app(&s, json!({"name": "courier", "write": ["*"]}));
    let works = |t: &str| {
        let (st, v) = s.call_as(Some(t), "list_tables", &json!({}), &[]);
        assert!(st == 200 || st == 401, "{v}");
        let (st2, _) = s.call_as(Some(t), "apps/get", &json!({"name": "courier"}), &[]);
        assert_eq!(st == 200, st2 == 200, "op and route agree");
        if st == 401 {
            assert_eq!(v["error"]["code"], "unauthorized");
            assert_eq!(st2, 401);
        }
        st == 200
    };
    assert!(works(&t1));

    let v = s.ok_route("apps/rotate-token", json!({"name": "courier"}));
    let t2 = v["token"].as_str().unwrap().to_string();
    assert!(t2.starts_with("dn_app_") && t2 != t1);
    assert!(!works(&t1), "the old token is cut right after rotate-token");
    assert!(works(&t2));

    let (st, v) = s.call_as(
        Some(&s.token),
        "apps/rotate-token",
        &json!({"name": "ghost"}),
        &[],
    );
    assert_eq!(st, 404, "{v}");

    let v = s.ok_route("apps/delete", json!({"name": "courier"}));
    assert_eq!(v["deleted"], "courier");
    assert!(!works(&t2), "the token is cut right after delete");
    let (st, _) = s.call_as(Some(&s.token), "apps/get", &json!({"name": "courier"}), &[]);
    assert_eq!(st, 404);
    let (st, _) = s.call_as(
        Some(&s.token),
        "apps/delete",
        &json!({"name": "courier"}),
        &[],
    );
    assert_eq!(st, 404);

    // An open change stream ends when its token is cut: nothing more reaches it.
    let mut n = 10;
    let mut write = || {
        n += 1;
        s.ok(
            "set_engine_settings",
            json!({"settings": {"default_limit": n}}),
        )["seq"]
            .as_i64()
            .unwrap()
    };
    for cut in ["apps/rotate-token", "apps/delete"] {
        let name = format!("watcher-{}", cut.len());
        let tok = create_app(&s, json!({"name": name}));
        let since = s.seq();
        let owner = s
            .sse(&format!("since={since}"), Some(&s.token), &[])
            .unwrap();
        let app = s.sse(&format!("since={since}"), Some(&tok), &[]).unwrap();
        let w1 = write();
        assert_eq!(app.take(1)[0].seq(), w1);
        assert_eq!(owner.take(1)[0].seq(), w1);
        s.ok_route(cut, json!({"name": name}));
        let w2 = write();
        assert_eq!(owner.take(1)[0].seq(), w2, "the owner's stream goes on");
        let got = app.until_end(Duration::from_secs(5));
        assert!(
            got.is_empty(),
            "{cut}: the cut token still received {got:?}"
        );
    }

    // A new app of the same name gets a new token; the old ones stay dead, across a restart too.
    let t3 = create_app(&s, json!({"name": "courier"}));
    assert!(works(&t3));
    assert!(!works(&t1) && !works(&t2));
    let s = s.restart();
    for (t, alive) in [(&t1, false), (&t2, false), (&t3, true)] {
        let (st, _) = s.call_as(Some(t), "list_tables", &json!({}), &[]);
        assert_eq!(st == 200, alive, "after restart");
    }
}

#[test]
fn tokens_are_never_stored_in_clear_nor_mcp_token_returned() {
    use std::os::unix::fs::PermissionsExt;
    let s = Server::start();
    let created = s.ok_route(
        "apps/create",
        json!({"name": "remote", "mcp_url": "https://example.test/mcp", "mcp_token": "mcp-token-s3cr3t"}),
    );
    let t1 = created["token"].as_str().unwrap().to_string();
    let t2 = s.ok_route("apps/rotate-token", json!({"name": "remote"}))["token"]
        .as_str()
        .unwrap()
        .to_string();
    let t3 = create_app(&s, json!({"name": "other"}));

    let path = s.dir.join(".datanotes/apps.json");
    let text = std::fs::read_to_string(&path).unwrap();
    for t in [&t1, &t2, &t3] {
        assert!(
            !text.contains(t.as_str()),
            "apps.json holds a token in clear"
        );
        assert!(
            !text.contains(&t[7..]),
            "apps.json holds a token's secret part"
        );
    }
    let sha = |t: &str| hex::encode(Sha256::digest(t.as_bytes()));
    assert!(
        text.contains(&sha(&t2)) && text.contains(&sha(&t3)),
        "{text}"
    );
    assert!(
        !text.contains(&sha(&t1)),
        "the rotated token's hash is gone"
    );
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "apps.json mode {mode:o}");

    // No file of the engine holds an app token (journal, index, registries), after some use.
    s.call_as(Some(&t2), "list_tables", &json!({}), &[]);
    let (st, _) = s.call_as(Some(&t2), "tool-calls/record", &tool_call(1), &[]);
    assert_eq!(st, 200);
    for e in std::fs::read_dir(s.dir.join(".datanotes"))
        .unwrap()
        .flatten()
    {
        let bytes = std::fs::read(e.path()).unwrap_or_default();
        let hay = String::from_utf8_lossy(&bytes);
        for t in [&t1, &t2, &t3] {
            assert!(
                !hay.contains(t.as_str()),
                "{} holds an app token",
                e.path().display()
            );
        }
    }

    // mcp_token is never answered: create, list, get, update.
    let answers = [
        created.clone(),
        s.ok_route("apps", json!({})),
        app_entry(&s, "remote"),
        s.ok_route("apps/update", json!({"name": "remote", "description": "d"})),
        s.call_as(Some(&t2), "apps/get", &json!({"name": "remote"}), &[])
            .1,
    ];
    for a in &answers {
        let txt = a.to_string();
        assert!(!txt.contains("mcp-token-s3cr3t"), "{txt}");
        assert!(!txt.contains("\"mcp_token\""), "{txt}");
        assert!(!txt.contains("token_sha256"), "{txt}");
    }
    assert_eq!(created["app"]["hasMcpToken"], true);
    assert_eq!(app_entry(&s, "remote")["hasMcpToken"], true);
    assert_eq!(app_entry(&s, "other")["hasMcpToken"], false);
    // The app list holds no token of any kind.
    let list = s.ok_route("apps", json!({})).to_string();
    assert!(!list.contains("dn_app_"), "{list}");
}

#[test]
fn invalid_apps_are_refused_and_nothing_is_written() {
    let s = Server::start();
    let dup_token = create_app(&s, json!({"name": "dup", "write": ["a.b.c"]}));
    let apps_json = || std::fs::read(s.dir.join(".datanotes/apps.json")).unwrap();
    let long = "a".repeat(65);
    let cases: Vec<(Value, u16, &str, &str, &str)> = vec![
        // (body, status, code, column, rule)
        (
            json!({"name": "Bad"}),
            400,
            "invalid_argument",
            "name",
            "pattern",
        ),
        (
            json!({"name": "1abc"}),
            400,
            "invalid_argument",
            "name",
            "pattern",
        ),
        (
            json!({"name": ""}),
            400,
            "invalid_argument",
            "name",
            "pattern",
        ),
        (
            json!({"name": "a b"}),
            400,
            "invalid_argument",
            "name",
            "pattern",
        ),
        (
            json!({"name": "a.b"}),
            400,
            "invalid_argument",
            "name",
            "pattern",
        ),
        (
            json!({"name": "../x"}),
            400,
            "invalid_argument",
            "name",
            "pattern",
        ),
        (
            json!({"name": long}),
            400,
            "invalid_argument",
            "name",
            "pattern",
        ),
        (json!({}), 400, "invalid_argument", "name", "required"),
        (
            json!({"name": "w", "write": ["a.*.c"]}),
            400,
            "invalid_argument",
            "write",
            "pattern",
        ),
        (
            json!({"name": "w", "write": ["A.b.c"]}),
            400,
            "invalid_argument",
            "write",
            "pattern",
        ),
        (
            json!({"name": "w", "write": ["a"]}),
            400,
            "invalid_argument",
            "write",
            "pattern",
        ),
        (
            json!({"name": "w", "write": ["a.b.c.d"]}),
            400,
            "invalid_argument",
            "write",
            "pattern",
        ),
        (
            json!({"name": "w", "write": [""]}),
            400,
            "invalid_argument",
            "write",
            "pattern",
        ),
        (
            json!({"name": "w", "write": ["*.*"]}),
            400,
            "invalid_argument",
            "write",
            "pattern",
        ),
        (
            json!({"name": "w", "write": ["a.b.c", "a b.c.d"]}),
            400,
            "invalid_argument",
            "write",
            "pattern",
        ),
        (
            json!({"name": "u", "mcp_url": "ftp://example.test/mcp"}),
            400,
            "invalid_argument",
            "mcp_url",
            "url",
        ),
        (
            json!({"name": "u", "mcp_url": "http://"}),
            400,
            "invalid_argument",
            "mcp_url",
            "url",
        ),
        (
            json!({"name": "u", "mcp_url": "not a url"}),
            400,
            "invalid_argument",
            "mcp_url",
            "url",
        ),
        (
            json!({"name": "u", "mcp_url": "http://a b/mcp"}),
            400,
            "invalid_argument",
            "mcp_url",
            "url",
        ),
        (
            json!({"name": "u", "mcp_url": "https://?x=1"}),
            400,
            "invalid_argument",
            "mcp_url",
            "url",
        ),
        (json!({"name": "dup"}), 409, "conflict", "name", "unique"),
    ];
    for (body, status, code, column, rule) in &cases {
        let before = apps_json();
        let seq = s.seq();
        let (st, v) = s.call_as(Some(&s.token), "apps/create", body, &[]);
        assert_eq!(st, *status, "{body}: {v}");
        let e = assert_error_shape(&v, code);
        assert_eq!(e["column"], *column, "{body}: {v}");
        assert_eq!(e["rule"], *rule, "{body}: {v}");
        assert_eq!(apps_json(), before, "{body} wrote the registry");
        assert_eq!(s.seq(), seq);
    }
    // Malformed calls: unknown field, wrong type, not an object.
    for body in [
        json!({"name": "x", "admin": true}),
        json!({"name": "x", "ddl": "yes"}),
        json!({"name": "x", "write": "*"}),
        json!({"name": 7}),
    ] {
        let before = apps_json();
        let (st, v) = s.call_as(Some(&s.token), "apps/create", &body, &[]);
        assert_eq!(st, 400, "{body}: {v}");
        assert_error_shape(&v, "invalid_argument");
        assert_eq!(apps_json(), before, "{body}");
    }
    let (st, v) = s.post_raw(
        "/datanotes/apps/create/",
        Some(&s.token),
        &[],
        b"[1, 2]".to_vec(),
    );
    assert_eq!(st, 400, "{v}");
    // The refused duplicate did not replace the first app's token.
    let (st, _) = s.call_as(Some(&dup_token), "list_tables", &json!({}), &[]);
    assert_eq!(st, 200);
    let list = s.ok_route("apps", json!({}));
    assert_eq!(list["apps"].as_array().unwrap().len(), 1, "{list}");
    assert_eq!(list["apps"][0]["write"], json!(["a.b.c"]));

    // Updates are validated the same way, by the owner and by the app itself.
    for (token, body, column) in [
        (
            &s.token,
            json!({"name": "dup", "write": ["a.*.c"]}),
            "write",
        ),
        (
            &s.token,
            json!({"name": "dup", "mcp_url": "mailto:x@y"}),
            "mcp_url",
        ),
        (
            &dup_token,
            json!({"name": "dup", "mcp_url": "file:///etc/passwd"}),
            "mcp_url",
        ),
    ] {
        let before = apps_json();
        let (st, v) = s.call_as(Some(token), "apps/update", &body, &[]);
        assert_eq!(st, 400, "{body}: {v}");
        assert_eq!(assert_error_shape(&v, "invalid_argument")["column"], column);
        assert_eq!(apps_json(), before, "{body}");
    }
    // Missing name on a route that needs it.
    let (st, v) = s.call_as(Some(&s.token), "apps/get", &json!({}), &[]);
    assert_eq!(st, 400, "{v}");
    assert_eq!(assert_error_shape(&v, "invalid_argument")["column"], "name");
}
