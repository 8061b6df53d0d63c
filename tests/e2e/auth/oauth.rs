//! `/mcp` as an OAuth 2.1 protected resource with datanotes as its authorization server: an
//! agent discovers, registers, gets the owner's consent and calls with exactly the rights the
//! owner ticked; and every refusal the security list of issue 32 names, each leaving nothing
//! changed.

use crate::kit::oauth::{self, REDIRECT, Tokens, decide, open, param, pkce, post_form};
use crate::kit::*;
use serde_json::{Value, json};
use std::time::Duration;

mod abuse;

/// An `initialize` request on `/mcp` with a token: (status, `WWW-Authenticate`, body).
fn mcp_initialize(s: &Server, url: &str, token: Option<&str>) -> (u16, Option<String>, String) {
    let mut r = s
        .http
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(
            json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-06-18", "capabilities": {},
                "clientInfo": {"name": "probe", "version": "1"}}})
            .to_string(),
        );
    if let Some(t) = token {
        r = r.bearer_auth(t);
    }
    let r = r.send().unwrap();
    let st = r.status().as_u16();
    let www = r
        .headers()
        .get("www-authenticate")
        .map(|v| v.to_str().unwrap().to_string());
    (st, www, r.text().unwrap())
}

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
    s.ok_route("grants/revoke", json!({"id": id}));
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

/// A code from a fresh authorization of `client` (the owner allows everything).
fn code_for(s: &Server, client: &str, challenge: &str) -> String {
    let (_, _, html) = open(&oauth::authorize_url(s, client, REDIRECT, challenge, "x"));
    let (st, v) = decide(
        s,
        &s.token,
        &json!({"request": oauth::request_id(&html), "decision": "allow", "call_tools": ["*"]}),
    );
    assert_eq!(st, 200, "{v}");
    param(v["redirect"].as_str().unwrap(), "code").unwrap()
}

#[test]
fn a_code_is_single_use_and_bound_to_its_verifier_client_redirect_and_resource() {
    let s = Server::start();
    let a = oauth::register(&s, "A", REDIRECT);
    let b = oauth::register(&s, "B", REDIRECT);
    let (verifier, challenge) = pkce();
    let exchange = |code: &str, client: &str, verifier: &str, redirect: &str, resource: &str| {
        post_form(
            &s,
            "/oauth/token",
            &[
                ("grant_type", "authorization_code"),
                ("code", code),
                ("client_id", client),
                ("code_verifier", verifier),
                ("redirect_uri", redirect),
                ("resource", resource),
            ],
        )
    };
    let mcp = format!("{}/mcp", s.url);
    let wrong_verifier = format!("w{}", &verifier[1..]);
    for (client, tried, redirect, resource, error) in [
        (
            &b,
            verifier.as_str(),
            REDIRECT,
            mcp.as_str(),
            "invalid_grant",
        ),
        (
            &a,
            wrong_verifier.as_str(),
            REDIRECT,
            mcp.as_str(),
            "invalid_grant",
        ),
        (
            &a,
            verifier.as_str(),
            "http://127.0.0.1:9/cb2",
            mcp.as_str(),
            "invalid_grant",
        ),
        (
            &a,
            verifier.as_str(),
            REDIRECT,
            "https://other.example/mcp",
            "invalid_target",
        ),
    ] {
        let code = code_for(&s, &a, &challenge);
        let (st, v) = exchange(&code, client, tried, redirect, resource);
        assert_eq!((st, v["error"].as_str()), (400, Some(error)), "{v}");
        // A code is tried once: right afterwards it is gone.
        let (st, v) = exchange(&code, &a, &verifier, REDIRECT, &mcp);
        assert_eq!(
            (st, v["error"].as_str()),
            (400, Some("invalid_grant")),
            "{v}"
        );
    }
    assert_eq!(s.ok_route("grants/list", json!({}))["grants"], json!([]));
    let code = code_for(&s, &a, &challenge);
    let (st, v) = exchange(&code, &a, &verifier, REDIRECT, &mcp);
    assert_eq!(st, 200, "{v}");
    let access = v["access_token"].as_str().unwrap().to_string();
    assert_eq!(mcp_initialize(&s, &mcp, Some(&access)).0, 200);
    // A code presented again leaked: refused, and the tokens it gave are revoked.
    let (st, v) = exchange(&code, &a, &verifier, REDIRECT, &mcp);
    assert_eq!(
        (st, v["error"].as_str()),
        (400, Some("invalid_grant")),
        "replayed: {v}"
    );
    assert!(v["error_description"].as_str().unwrap().contains("revoked"));
    assert_eq!(mcp_initialize(&s, &mcp, Some(&access)).0, 401);
    assert_eq!(s.ok_route("grants/list", json!({}))["grants"], json!([]));
}

fn refresh(s: &Server, t: &Tokens, refresh: &str) -> (u16, Value) {
    post_form(
        s,
        "/oauth/token",
        &[
            ("grant_type", "refresh_token"),
            ("refresh_token", refresh),
            ("client_id", &t.client),
        ],
    )
}

#[test]
fn tokens_expire_rotate_and_a_replaced_refresh_token_revokes_its_chain() {
    let s = Server::start_with_env(&[
        ("DATANOTES_OAUTH_ACCESS_TTL", "2"),
        ("DATANOTES_OAUTH_RETRY_GRACE", "0"),
    ]);
    let mcp = format!("{}/mcp", s.url);
    let t = oauth::connect(&s, "Rotating", json!({"call_tools": ["list_tables"]}));
    assert_eq!(mcp_initialize(&s, &mcp, Some(&t.access)).0, 200);

    let (st, v) = refresh(&s, &t, &t.refresh);
    assert_eq!(st, 200, "{v}");
    let (access2, refresh2) = (
        v["access_token"].as_str().unwrap(),
        v["refresh_token"].as_str().unwrap(),
    );
    assert!(access2 != t.access && refresh2 != t.refresh);
    assert_eq!(v["expires_in"], 2);
    // The old access token serves until it expires: a refresh under load loses no request.
    assert_eq!(mcp_initialize(&s, &mcp, Some(&t.access)).0, 200);
    let (www, body) = eventually_ok(
        "the old access token expires (2 s)",
        || match mcp_initialize(&s, &mcp, Some(&t.access)) {
            (401, www, body) => Ok((www, body)),
            (st, _, body) => Err(format!("{st} {body}")),
        },
    );
    assert!(body.contains("expired"), "{body}");
    assert!(www.unwrap().contains("invalid_token"));
    // Forged tokens.
    for forged in [
        format!("dn_oat_{}", "0".repeat(64)),
        "dn_oat_".into(),
        format!("{}x", &t.access),
    ] {
        let (st, _, body) = mcp_initialize(&s, &mcp, Some(&forged));
        assert_eq!(st, 401, "{body}");
    }

    // The replaced refresh token used again (stolen?): refused, and the chain is revoked.
    let (st, v) = refresh(&s, &t, &t.refresh);
    assert_eq!(
        (st, v["error"].as_str()),
        (400, Some("invalid_grant")),
        "{v}"
    );
    assert!(v["error_description"].as_str().unwrap().contains("revoked"));
    let (st, v) = refresh(&s, &t, refresh2);
    assert_eq!(st, 400, "{v}");
    assert_eq!(s.ok_route("grants/list", json!({}))["grants"], json!([]));

    // Revoking an old refresh token (RFC 7009) kills the whole chain too.
    let t = oauth::connect(&s, "Revoked", json!({"call_tools": ["list_tables"]}));
    let (_, v) = refresh(&s, &t, &t.refresh);
    let (refresh2, access2) = (
        v["refresh_token"].as_str().unwrap().to_string(),
        v["access_token"].as_str().unwrap().to_string(),
    );
    let (st, v) = post_form(
        &s,
        "/oauth/revoke",
        &[("token", &t.refresh), ("client_id", &t.client)],
    );
    assert_eq!(st, 200, "{v}");
    assert_eq!(refresh(&s, &t, &refresh2).0, 400);
    assert_eq!(mcp_initialize(&s, &mcp, Some(&access2)).0, 401);

    // Another client cannot revoke someone's token (RFC 7009 §2.1), nor use their refresh
    // token.
    let t = oauth::connect(&s, "Owned", json!({"call_tools": ["list_tables"]}));
    let other = oauth::register(&s, "Other", REDIRECT);
    let (st, v) = post_form(
        &s,
        "/oauth/revoke",
        &[("token", &t.access), ("client_id", &other)],
    );
    assert_eq!(
        (st, v["error"].as_str()),
        (400, Some("unauthorized_client")),
        "{v}"
    );
    assert_eq!(mcp_initialize(&s, &mcp, Some(&t.access)).0, 200);
    // Another client cannot use someone's refresh token.
    let t = oauth::connect(&s, "Kept", json!({"call_tools": ["list_tables"]}));
    let other = oauth::register(&s, "Thief", REDIRECT);
    let (st, v) = post_form(
        &s,
        "/oauth/token",
        &[
            ("grant_type", "refresh_token"),
            ("refresh_token", &t.refresh),
            ("client_id", &other),
        ],
    );
    assert_eq!(
        (st, v["error"].as_str()),
        (400, Some("invalid_grant")),
        "{v}"
    );
    assert_eq!(
        refresh(&s, &t, &t.refresh).0,
        200,
        "the owner's client keeps its chain"
    );
}

#[test]
fn a_token_is_valid_only_for_the_resource_it_was_issued_for_and_survives_a_restart() {
    let tmp = tempfile::tempdir().unwrap();
    let s = Server::start_in(&tmp.path().join("db"));
    let t = oauth::connect(&s, "Bound", json!({"call_tools": ["*"]}));
    let mcp = format!("{}/mcp", s.url);
    assert_eq!(mcp_initialize(&s, &mcp, Some(&t.access)).0, 200);
    // The same server under another name is another resource.
    let other = mcp.replace("127.0.0.1", "localhost");
    let (st, _, body) = mcp_initialize(&s, &other, Some(&t.access));
    assert_eq!(st, 401);
    assert!(body.contains("issued for another resource"), "{body}");
    let dir = s.dir.clone();
    let stored = std::fs::read_to_string(dir.join(".datanotes/oauth.json")).unwrap();
    assert!(
        !stored.contains(&t.access) && !stored.contains(&t.refresh),
        "only hashes are kept"
    );
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(dir.join(".datanotes/oauth.json"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    // The port is the same after a restart (the token's resource names it).
    let port = s.url.rsplit(':').next().unwrap().to_string();
    drop(s);
    let s = Server::start_with(&dir, &["--listen", &format!("127.0.0.1:{port}")]);
    let (st, _, body) = mcp_initialize(&s, &mcp, Some(&t.access));
    assert_eq!(st, 200, "{body}");
    assert_eq!(refresh(&s, &t, &t.refresh).0, 200);
}

/// A small HTTP server of client ID metadata documents on 127.0.0.1, some of them hostile:
/// `/good.json`, `/big.json` (100 KB), `/redirect` (to `/good.json`), `/hang` (never answers),
/// `/wrong-id.json`. Answers its base URL.
fn documents() -> String {
    use std::io::{Read, Write};
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", l.local_addr().unwrap());
    let b = base.clone();
    std::thread::spawn(move || {
        for conn in l.incoming() {
            let Ok(mut c) = conn else { continue };
            let base = b.clone();
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                let n = c.read(&mut buf).unwrap_or(0);
                let req = String::from_utf8_lossy(&buf[..n]).to_string();
                let path = req.split(' ').nth(1).unwrap_or("/").to_string();
                let doc = |id: &str| {
                    json!({"client_id": id, "client_name": "Metadata agent",
                           "redirect_uris": [REDIRECT], "token_endpoint_auth_method": "none"})
                    .to_string()
                };
                let (status, extra, body) = match path.as_str() {
                    "/good.json" => ("200 OK", String::new(), doc(&format!("{base}/good.json"))),
                    "/wrong-id.json" => (
                        "200 OK",
                        String::new(),
                        doc("https://elsewhere.example/x.json"),
                    ),
                    "/big.json" => (
                        "200 OK",
                        String::new(),
                        format!("{{\"pad\": \"{}\"}}", "x".repeat(100_000)),
                    ),
                    "/redirect" => (
                        "302 Found",
                        format!("location: {base}/good.json\r\n"),
                        String::new(),
                    ),
                    "/hang" => {
                        // Never answers: holds the connection until the client hangs up.
                        while c.read(&mut buf).is_ok_and(|n| n > 0) {}
                        return;
                    }
                    _ => ("404 Not Found", String::new(), String::new()),
                };
                let _ = write!(
                    c,
                    "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n{extra}connection: close\r\n\r\n{body}",
                    body.len()
                );
            });
        }
    });
    base
}

#[test]
fn client_metadata_documents_are_fetched_as_hostile_input() {
    let docs = documents();
    let (verifier, challenge) = pkce();
    let page = |s: &Server, client: &str| {
        let (st, loc, body) = open(&oauth::authorize_url(s, client, REDIRECT, &challenge, "m"));
        assert!(
            loc.is_none(),
            "{client}: no redirect for an untrusted client"
        );
        (st, body)
    };

    // By default: https only, and never a private or loopback address.
    let s = Server::start();
    let (st, body) = page(&s, &format!("{docs}/good.json"));
    assert_eq!(st, 400);
    assert!(body.contains("must be served over https"), "{body}");
    let https = format!("{}/good.json", docs.replace("http://", "https://"));
    let (st, body) = page(&s, &https);
    assert_eq!(st, 400);
    assert!(
        body.contains("private, loopback or link-local")
            && body.contains("--oauth-private-clients"),
        "{body}"
    );
    drop(s);

    // The owner allows private addresses: still bounded in size and time, no redirect, and the
    // document must name itself.
    let s = Server::start_with_env(&[("DATANOTES_OAUTH_PRIVATE_CLIENTS", "true")]);
    for (path, why) in [
        ("/big.json", "larger than 65536 bytes"),
        ("/redirect", "redirects are not followed"),
        ("/wrong-id.json", "client_id equal to its own URL"),
        ("/nope.json", "404"),
    ] {
        let (st, body) = page(&s, &format!("{docs}{path}"));
        assert_eq!(st, 400, "{path}");
        assert!(body.contains(why), "{path}: {body}");
    }
    let t0 = std::time::Instant::now();
    let (st, body) = page(&s, &format!("{docs}/hang"));
    assert_eq!(st, 400);
    assert!(body.contains("took longer than 5 s"), "{body}");
    assert!(t0.elapsed() < Duration::from_secs(8), "{:?}", t0.elapsed());

    // A good document: the page names the client and the document's origin, and the whole
    // flow works with the URL as client_id.
    let client = format!("{docs}/good.json");
    let (st, html) = page(&s, &client);
    assert_eq!(st, 200, "{html}");
    assert!(
        html.contains("Metadata agent") && html.contains(&docs),
        "{html}"
    );
    let (st, v) = decide(
        &s,
        &s.token,
        &json!({"request": oauth::request_id(&html), "decision": "allow", "call_tools": ["list_tables"]}),
    );
    assert_eq!(st, 200, "{v}");
    let code = param(v["redirect"].as_str().unwrap(), "code").unwrap();
    let (st, v) = post_form(
        &s,
        "/oauth/token",
        &[
            ("grant_type", "authorization_code"),
            ("code", &code),
            ("client_id", &client),
            ("code_verifier", &verifier),
            ("redirect_uri", REDIRECT),
        ],
    );
    assert_eq!(st, 200, "{v}");
    let agent = Agent::connect(&format!("{}/mcp", s.url), v["access_token"].as_str(), None);
    assert_eq!(agent.names(), ["list_tables"]);
    let g = &s.ok_route("grants/list", json!({}))["grants"][0];
    assert_eq!(g["client_origin"], json!(docs));
}

#[test]
fn a_grant_reaches_a_wasm_app_only_through_the_tools_the_owner_ticked() {
    let s = Server::start_with_env(&[("DATANOTES_CACHE_DIR", &crate::wasm::shared_cache())]);
    s.install(
        "planning",
        "planning",
        json!({"write": ["personal.tasks.items"], "ddl": true}),
    );
    let mcp = format!("{}/mcp", s.url);
    // The tool it is given writes with the app's own rights (the host import), recorded as
    // called by the client; the grant itself still writes nothing.
    let writer = oauth::connect(&s, "Writer", json!({"call_tools": ["planning_add_task"]}));
    let agent = Agent::connect(&mcp, Some(&writer.access), None);
    let r = agent.call("planning_add_task", json!({"title": "through the app"}));
    assert!(!is_error(&r), "{}", text(&r));
    let m = &s.ok(
        "list_migrations",
        json!({"table": "personal.tasks.items", "limit": 1}),
    )["migrations"][0];
    assert_eq!(m["actor"]["app"], "planning", "{m}");
    assert!(
        m["actor"]["caller"]
            .as_str()
            .unwrap()
            .starts_with("client:Writer (g_"),
        "{m}"
    );
    let r = agent.call(
        "insert_row",
        json!({"table": "personal.tasks.items", "values": {"title": "direct"}}),
    );
    assert!(
        is_error(&r) && text(&r).contains("may not call the tool insert_row"),
        "{}",
        text(&r)
    );
    let reader = oauth::connect(&s, "Reader", json!({"call_tools": ["planning_list_tasks"]}));
    let agent = Agent::connect(&mcp, Some(&reader.access), None);
    assert_eq!(agent.names(), ["planning_list_tasks"]);
    let r = agent.call("planning_add_task", json!({"title": "not mine to add"}));
    assert!(
        is_error(&r) && text(&r).contains("may not call the tool planning_add_task"),
        "{}",
        text(&r)
    );
    let r = agent.call("planning_list_tasks", json!({}));
    assert!(!is_error(&r), "{}", text(&r));
}

#[test]
fn the_engine_never_passes_a_clients_token_on_to_an_app() {
    use axum::http::HeaderMap;
    use std::sync::{Arc, Mutex};
    // A remote app that notes every Authorization header it receives.
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let rt = runtime();
    let noted = seen.clone();
    let router = axum::Router::new().route(
        "/mcp",
        axum::routing::post(move |headers: HeaderMap, body: axum::body::Bytes| {
            let noted = noted.clone();
            async move {
                if let Some(a) = headers.get("authorization") {
                    noted.lock().unwrap().push(a.to_str().unwrap().to_string());
                }
                let m: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                let id = m["id"].clone();
                match m["method"].as_str() {
                    Some("initialize") => {
                        fake_app::initialized(&id, "echo", json!({"tools": {}}), "s1")
                    }
                    Some("tools/list") => fake_app::rpc(
                        &id,
                        json!({"tools": [{"name": "hello",
                        "inputSchema": {"type": "object"}}]}),
                    ),
                    Some("tools/call") => {
                        fake_app::rpc(&id, json!({"content": [{"type": "text", "text": "hi"}]}))
                    }
                    _ => axum::http::StatusCode::ACCEPTED.into_response(),
                }
            }
        })
        .get(|| async { axum::http::StatusCode::METHOD_NOT_ALLOWED }),
    );
    use axum::response::IntoResponse;
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    rt.spawn(async move { axum::serve(listener, router).await });

    let s = Server::start();
    s.ok_route(
        "apps/create",
        json!({"name": "echo", "mcp_url": url, "mcp_token": "the-apps-own-secret"}),
    );
    eventually("the app is listed", || {
        s.ok_route("apps/get", json!({"name": "echo"}))["app"]["tools"] == json!(["hello"])
    });
    let t = oauth::connect(&s, "Deputy", json!({"call_tools": ["hello"]}));
    let agent = Agent::connect(&format!("{}/mcp", s.url), Some(&t.access), None);
    let r = agent.call("hello", json!({}));
    assert!(!is_error(&r), "{}", text(&r));
    let seen = seen.lock().unwrap().clone();
    assert!(!seen.is_empty());
    for a in &seen {
        assert_eq!(a, "Bearer the-apps-own-secret", "the app saw {a}");
        assert!(!a.contains(&t.access));
    }
}
