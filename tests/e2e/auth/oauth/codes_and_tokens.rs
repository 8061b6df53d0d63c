//! Codes: single use, bound to their verifier, client, redirect and resource. Tokens: they
//! expire and rotate, a replayed refresh token revokes its chain, and a token is valid only for
//! its resource, across a restart.

use super::*;

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
