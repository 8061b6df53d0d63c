//! An agent discovers the server, connects and gets exactly what the owner ticked; the
//! authorization request and the consent refuse what they must, changing nothing.

use super::*;

#[test]
fn an_agent_discovers_connects_and_gets_exactly_what_the_owner_ticked() {
    let s = Server::start();
    create_tasks(&s);
    let mcp = format!("{}/mcp", s.url);

    // Discovery from the 401, as the specification's clients do it.
    let (st, www, _) = mcp_initialize(&s, &mcp, None);
    assert_eq!(st, 401);
    let www = www.expect("a WWW-Authenticate header");
    let prm = format!("{}/.well-known/oauth-protected-resource/mcp", s.url);
    assert_eq!(www, format!("Bearer resource_metadata=\"{prm}\""));
    // Under a name the server does not answer (DNS rebinding), /mcp refuses before it names
    // any metadata.
    let r = s
        .http
        .post(&mcp)
        .header("host", "evil.example")
        .header("content-type", "application/json")
        .body("{}")
        .send()
        .unwrap();
    assert_eq!(r.status(), 403);
    assert!(r.headers().get("www-authenticate").is_none());
    let (st, meta) = s.get("/.well-known/oauth-protected-resource/mcp");
    assert_eq!(st, 200);
    assert_eq!(meta["resource"], json!(mcp));
    assert_eq!(meta["authorization_servers"], json!([s.url]));
    let (st, asm) = s.get("/.well-known/oauth-authorization-server");
    assert_eq!(st, 200);
    assert_eq!(asm["issuer"], json!(s.url));
    assert_eq!(asm["code_challenge_methods_supported"], json!(["S256"]));
    assert_eq!(asm["client_id_metadata_document_supported"], json!(true));
    for k in [
        "authorization_endpoint",
        "token_endpoint",
        "registration_endpoint",
    ] {
        assert!(asm[k].as_str().unwrap().starts_with(&s.url), "{k}");
    }

    let t = oauth::connect(
        &s,
        "Test agent",
        json!({"write": [TASKS], "call_tools": ["list_tables", "insert_row", "select_rows"]}),
    );
    let agent = Agent::connect(&mcp, Some(&t.access), None);
    assert_eq!(agent.names(), ["list_tables", "select_rows", "insert_row"]);
    let ok = agent.call(
        "insert_row",
        json!({"table": TASKS, "id": "t1", "values": {"title": "from the web"}}),
    );
    assert!(!is_error(&ok), "{}", text(&ok));
    let refused = agent.call(
        "insert_row",
        json!({"table": PEOPLE, "id": "x", "values": {"name": "X"}}),
    );
    assert!(is_error(&refused));
    assert!(
        text(&refused).contains("client Test agent may not write work.crm.people"),
        "{}",
        text(&refused)
    );
    let not_ticked = agent.call("delete_row", json!({"table": TASKS, "id": "t1"}));
    assert!(is_error(&not_ticked));
    assert!(text(&not_ticked).contains("may not call the tool delete_row"));
    assert!(s.dir.join("work/crm/tasks/t1.md").exists());

    // Journaled with the client's name as actor.
    let m = &s.ok("list_migrations", json!({"limit": 1}))["migrations"][0];
    assert_eq!(m["row"], "t1");
    assert_eq!(m["actor"]["harness"], "Test agent", "{m}");
    let token_name = m["actor"]["token"].as_str().unwrap();
    assert!(token_name.starts_with("client:Test agent (g_"), "{m}");

    // The HTTP door (and so apps/call) refuses the token: it is for /mcp only.
    for (op, args) in [
        ("select_rows", json!({"table": TASKS})),
        (
            "apps/call",
            json!({"tool": "select_rows", "arguments": {"table": TASKS}}),
        ),
    ] {
        let (st, v) = s.call_as(Some(&t.access), op, &args, &[]);
        assert_eq!(st, 401, "{op}: {v}");
        assert!(
            v["error"]["message"]
                .as_str()
                .unwrap()
                .contains("only for this server's /mcp")
        );
    }

    // The owner sees the grant and revokes it: the next request is refused.
    let grants = s.ok_route("grants/list", json!({}))["grants"].clone();
    assert_eq!(grants.as_array().unwrap().len(), 1, "{grants}");
    let g = &grants[0];
    assert_eq!(g["client_name"], "Test agent");
    assert_eq!(g["rights"]["write"], json!([TASKS]));
    assert!(!g.to_string().contains("dn_o"), "no token in {g}");
    let id = g["id"].as_str().unwrap();
    // With the commands docs/mcp.md shows: `grants list` names the grant and its client,
    // `grants revoke` ends it.
    let grants_cli = |args: &[&str]| {
        let out = std::process::Command::new(bin())
            .args(args)
            .args(["--database", s.dir.to_str().unwrap()])
            .env_remove("DATANOTES_URL")
            .env_remove("DATANOTES_TOKEN")
            .output()
            .expect("run datanotes");
        assert!(out.status.success(), "{args:?}: {out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let listed = grants_cli(&["grants", "list"]);
    assert!(
        listed.contains(id) && listed.contains("Test agent"),
        "{listed}"
    );
    grants_cli(&["grants", "revoke", id]);
    let (st, www, _) = mcp_initialize(&s, &mcp, Some(&t.access));
    assert_eq!(st, 401);
    assert!(www.unwrap().contains("error=\"invalid_token\""));
    let (st, v) = s.call_as(Some(&s.token), "grants/revoke", &json!({"id": id}), &[]);
    assert_eq!(st, 404, "{v}");
}

#[test]
fn the_authorization_request_and_the_consent_refuse_what_they_must_and_change_nothing() {
    let s = Server::start();
    create_tasks(&s);
    let before = snapshot(&s.dir);
    let client = oauth::register(&s, "Probe", REDIRECT);
    let (_, challenge) = pkce();
    let good = oauth::authorize_url(&s, &client, REDIRECT, &challenge, "st-1");

    // A redirect URI other than the registered one, or an unknown client: a page, never a
    // redirect. The one latitude is a loopback redirect's port (RFC 8252 §7.3, a MUST of
    // OAuth 2.1): a native app listens where it can.
    let (st, _, body) = open(&good.replace("127.0.0.1%3A9%2Fcb", "127.0.0.1%3A43210%2Fcb"));
    assert_eq!(st, 200, "another loopback port: {body}");
    for url in [
        good.replace("127.0.0.1%3A9%2Fcb", "127.0.0.1%3A9%2Fcb2"),
        good.replace("127.0.0.1%3A9%2Fcb", "127.0.0.1%3A9%2Fcb%3Fx%3D1"),
        good.replace("127.0.0.1%3A9%2Fcb", "localhost%3A9%2Fcb"),
        good.replace(
            "http%3A%2F%2F127.0.0.1%3A9%2Fcb",
            "https%3A%2F%2F127.0.0.1%3A9%2Fcb",
        ),
        good.replace(&client, "dn_client_nope"),
    ] {
        let (st, loc, body) = open(&url);
        assert_eq!(st, 400, "{url}: {body}");
        assert!(loc.is_none());
        assert!(body.contains("Nothing was granted"), "{body}");
    }
    // Errors about the request itself: the client was never granted anything, so they are
    // shown here, never sent to its redirect URI (oauth/abuse.rs: once granted, they go back).
    for (from, to, error) in [
        (
            "code_challenge_method=S256",
            "code_challenge_method=plain",
            "invalid_request",
        ),
        (
            &format!("code_challenge={challenge}"),
            "code_challenge=",
            "invalid_request",
        ),
        (
            "response_type=code",
            "response_type=token",
            "unsupported_response_type",
        ),
        (
            "resource=http",
            "resource=https%3A%2F%2Fother.example%2Fmcp&x=http",
            "invalid_target",
        ),
    ] {
        let url = good.replacen(from, to, 1);
        let (st, loc, body) = open(&url);
        assert_eq!((st, loc), (400, None), "{url}: {body}");
        assert!(body.contains(error), "{body}");
    }

    // The consent page cannot be framed.
    let r = oauth::no_redirect().get(&good).send().unwrap();
    let csp = r.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
    assert_eq!(r.headers()["x-frame-options"], "DENY");
    let request = oauth::request_id(&r.text().unwrap());
    let body =
        json!({"request": request, "decision": "allow", "call_tools": ["*"], "write": ["*"]});

    // Cross-site posts, forms, other tokens: refused, and the request is still there.
    let post = |token: Option<&str>, headers: &[(&str, &str)], body: &Value| {
        s.post_raw(
            "/oauth/authorize",
            token,
            headers,
            serde_json::to_vec(body).unwrap(),
        )
    };
    let json_ct = ("content-type", "application/json");
    let app = create_app(
        &s,
        json!({"name": "other", "call_tools": ["*"], "write": ["*"]}),
    );
    for (token, headers, want) in [
        (
            Some(s.token.as_str()),
            vec![json_ct, ("origin", "https://evil.example")],
            403,
        ),
        (
            Some(s.token.as_str()),
            vec![json_ct, ("sec-fetch-site", "cross-site")],
            403,
        ),
        (
            Some(s.token.as_str()),
            vec![("content-type", "application/x-www-form-urlencoded")],
            403,
        ),
        (
            Some(s.token.as_str()),
            vec![("content-type", "text/plain")],
            403,
        ),
        (Some(app.as_str()), vec![json_ct], 403),
        (None, vec![json_ct], 401),
    ] {
        let (st, v) = post(token, &headers, &body);
        assert_eq!(st, want, "{headers:?}: {v}");
    }
    // A right that is not a right.
    let (st, v) = decide(
        &s,
        &s.token,
        &json!({"request": request, "decision": "allow", "write": ["a.b"]}),
    );
    assert_eq!(st, 400, "{v}");
    assert_eq!(v["error"]["column"], "write");
    // The owner denies: the client learns it, with its state; the request is gone.
    let (st, v) = decide(
        &s,
        &s.token,
        &json!({"request": request, "decision": "deny"}),
    );
    assert_eq!(st, 200, "{v}");
    let back = v["redirect"].as_str().unwrap();
    assert_eq!(param(back, "error").as_deref(), Some("access_denied"));
    assert_eq!(param(back, "state").as_deref(), Some("st-1"));
    let (st, _) = decide(&s, &s.token, &body);
    assert_eq!(st, 404);
    assert_eq!(s.ok_route("grants/list", json!({}))["grants"], json!([]));
    assert_eq!(snapshot(&s.dir), before);
}
