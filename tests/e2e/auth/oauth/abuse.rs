//! One policy at every door of the authorization server (issue 43): what anonymous callers may
//! hold (they refuse new work at a bound, and never push out the owner's), where an error goes
//! for a client the owner never granted (a page, never its redirect URI), a refresh token's
//! expiry checked at use, and whose name a grant's writes carry.

use super::{documents, refresh};
use crate::kit::oauth::{self, REDIRECT, decide, open, param, pkce, post_form};
use crate::kit::*;
use serde_json::{Value, json};

/// A code's exchange (a public client).
fn exchange(s: &Server, client: &str, code: &str, verifier: &str) -> (u16, Value) {
    post_form(
        s,
        "/oauth/token",
        &[
            ("grant_type", "authorization_code"),
            ("code", code),
            ("client_id", client),
            ("code_verifier", verifier),
            ("redirect_uri", REDIRECT),
        ],
    )
}

/// `POST /oauth/register` of a public client: (status, `Retry-After`, body).
fn register_raw(s: &Server, name: &str) -> (u16, Option<u64>, Value) {
    let r = s
        .http
        .post(format!("{}/oauth/register", s.url))
        .json(&json!({"client_name": name, "redirect_uris": [REDIRECT],
                      "token_endpoint_auth_method": "none"}))
        .send()
        .unwrap();
    let st = r.status().as_u16();
    let retry = retry_after(r.headers());
    (st, retry, r.json().unwrap())
}

fn retry_after(h: &reqwest::header::HeaderMap) -> Option<u64> {
    h.get("retry-after")
        .map(|v| v.to_str().unwrap().parse().unwrap())
}

/// GETs an authorization URL: (status, `Retry-After`, body); never a redirect here.
fn authorize_raw(url: &str) -> (u16, Option<u64>, String) {
    let r = oauth::no_redirect().get(url).send().unwrap();
    assert!(r.headers().get("location").is_none(), "{url}");
    let st = r.status().as_u16();
    let retry = retry_after(r.headers());
    (st, retry, r.text().unwrap())
}

#[test]
fn anonymous_floods_are_refused_and_evict_nothing_the_owner_started() {
    // Every test comes from 127.0.0.1, as every client does behind a tunnel: the bounds per
    // address are raised here so that the floods meet the totals.
    let s = Server::start_with_env(&[
        ("DATANOTES_OAUTH_REQUESTS_PER_ADDRESS", "100000"),
        ("DATANOTES_OAUTH_REGISTER_PER_ADDRESS", "100000"),
    ]);
    let mcp = format!("{}/mcp", s.url);
    // A client registers and the owner opens its consent page, just before the floods.
    let before = oauth::register(&s, "Before the flood", REDIRECT);
    let (verifier, challenge) = pkce();
    let (st, _, html) = open(&oauth::authorize_url(
        &s, &before, REDIRECT, &challenge, "owner",
    ));
    assert_eq!(st, 200, "{html}");
    let request = oauth::request_id(&html);

    // 300 authorization requests nobody answers: 255 more wait (256 in all), the rest are
    // refused on a page that says when to try again.
    let flood = oauth::register(&s, "Flood", REDIRECT);
    let (mut held, mut refused) = (0, 0);
    for i in 0..300 {
        let url = oauth::authorize_url(&s, &flood, REDIRECT, &challenge, &format!("f{i}"));
        match authorize_raw(&url) {
            (200, _, _) => held += 1,
            (429, retry, body) => {
                refused += 1;
                assert!(retry.is_some_and(|r| (1..=600).contains(&r)), "{retry:?}");
                assert!(
                    body.contains("256 authorization requests are already waiting")
                        && body.contains("Nothing was granted"),
                    "{body}"
                );
            }
            (st, _, body) => panic!("authorize {i}: {st} {body}"),
        }
    }
    assert_eq!((held, refused), (255, 45));

    // 1,100 registrations: 1,000 clients are kept in all, and none is old and unused: the
    // rest are refused, and no client is removed.
    let (mut kept, mut refused) = (2, 0);
    for i in 0..1100 {
        match register_raw(&s, &format!("flood {i}")) {
            (201, _, _) => kept += 1,
            (429, retry, v) => {
                refused += 1;
                assert_eq!(v["error"], "temporarily_unavailable", "{v}");
                assert!(
                    v["error_description"]
                        .as_str()
                        .unwrap()
                        .contains("1000 clients are registered"),
                    "{v}"
                );
                assert!(retry.is_some_and(|r| r >= 3500), "{retry:?}");
            }
            (st, _, v) => panic!("register {i}: {st} {v}"),
        }
    }
    assert_eq!((kept, refused), (1000, 102));

    // The owner's consent completes, and the client registered before the floods connects.
    let (st, v) = decide(
        &s,
        &s.token,
        &json!({"request": request, "decision": "allow", "call_tools": ["list_tables"]}),
    );
    assert_eq!(st, 200, "the owner's request was pushed out: {v}");
    let back = v["redirect"].as_str().unwrap();
    assert_eq!(param(back, "state").as_deref(), Some("owner"));
    let code = param(back, "code").unwrap();
    let (st, t) = exchange(&s, &before, &code, &verifier);
    assert_eq!(st, 200, "the client registered before the flood: {t}");
    let agent = Agent::connect(&mcp, t["access_token"].as_str(), None);
    assert_eq!(agent.names(), ["list_tables"]);
}

#[test]
fn one_address_holds_at_most_its_share() {
    let s = Server::start();
    let client = oauth::register(&s, "Share", REDIRECT);
    let (_, challenge) = pkce();
    for i in 0..32 {
        let url = oauth::authorize_url(&s, &client, REDIRECT, &challenge, &format!("a{i}"));
        assert_eq!(authorize_raw(&url).0, 200, "request {i}");
    }
    let url = oauth::authorize_url(&s, &client, REDIRECT, &challenge, "one more");
    let (st, retry, body) = authorize_raw(&url);
    assert_eq!(st, 429, "{body}");
    assert!(retry.is_some_and(|r| r > 500), "{retry:?}");
    assert!(
        body.contains("32 authorization requests from this address"),
        "{body}"
    );
    // 100 registrations an hour per address (one above).
    for i in 1..100 {
        assert_eq!(
            register_raw(&s, &format!("r{i}")).0,
            201,
            "registration {i}"
        );
    }
    let (st, retry, v) = register_raw(&s, "one more");
    assert_eq!(st, 429, "{v}");
    assert!(retry.is_some_and(|r| r > 3500), "{retry:?}");
    assert!(
        v["error_description"]
            .as_str()
            .unwrap()
            .contains("100 clients were registered from this address"),
        "{v}"
    );
}

#[test]
fn errors_for_a_client_never_granted_are_shown_not_redirected() {
    let docs = documents();
    let s = Server::start_with_env(&[("DATANOTES_OAUTH_PRIVATE_CLIENTS", "true")]);
    let registered = oauth::register(&s, "Never granted", REDIRECT);
    let by_document = format!("{docs}/good.json");
    let (verifier, challenge) = pkce();
    let wrong = |client: &str| {
        oauth::authorize_url(&s, client, REDIRECT, &challenge, "st-2").replacen(
            "response_type=code",
            "response_type=token",
            1,
        )
    };
    for client in [&registered, &by_document] {
        // Anyone's redirect URIs: the error is on a page.
        let (st, loc, body) = open(&wrong(client));
        assert_eq!((st, loc), (400, None), "{client}: {body}");
        assert!(
            body.contains("unsupported_response_type") && body.contains("Nothing was granted"),
            "{body}"
        );
        // The owner grants it: from then on its errors go back to it, with its state.
        let (st, _, html) = open(&oauth::authorize_url(
            &s, client, REDIRECT, &challenge, "ok",
        ));
        assert_eq!(st, 200, "{html}");
        let (st, v) = decide(
            &s,
            &s.token,
            &json!({"request": oauth::request_id(&html), "decision": "allow",
                    "call_tools": ["list_tables"]}),
        );
        assert_eq!(st, 200, "{v}");
        let code = param(v["redirect"].as_str().unwrap(), "code").unwrap();
        assert_eq!(exchange(&s, client, &code, &verifier).0, 200);
        let (st, loc, _) = open(&wrong(client));
        assert_eq!(st, 303, "{client}");
        let loc = loc.unwrap();
        assert!(loc.starts_with(REDIRECT), "{loc}");
        assert_eq!(
            param(&loc, "error").as_deref(),
            Some("unsupported_response_type")
        );
        assert_eq!(param(&loc, "state").as_deref(), Some("st-2"));
    }
}

#[test]
fn an_expired_refresh_token_is_refused_at_use() {
    let s = Server::start_with_env(&[
        ("DATANOTES_OAUTH_REFRESH_TTL", "2"),
        ("DATANOTES_OAUTH_ACCESS_TTL", "2"),
    ]);
    let t = oauth::connect(&s, "Expiring", json!({"call_tools": ["list_tables"]}));
    let (st, v) = refresh(&s, &t, &t.refresh);
    assert_eq!(st, 200, "{v}");
    let next = v["refresh_token"].as_str().unwrap().to_string();
    // Nothing else is saved meanwhile (nothing prunes it): the use itself must see it expired.
    // The access token given with it lives as long, from the same second: once /mcp refuses
    // it (a use that saves nothing), the refresh token has expired too.
    let access = v["access_token"].as_str().unwrap().to_string();
    let mcp = format!("{}/mcp", s.url);
    eventually_ok(
        "the access token given with it expires",
        || match super::mcp_initialize(&s, &mcp, Some(&access)) {
            (401, _, _) => Ok(()),
            (st, _, body) => Err(format!("{st} {body}")),
        },
    );
    let (st, v) = refresh(&s, &t, &next);
    assert_eq!(
        (st, v["error"].as_str()),
        (400, Some("invalid_grant")),
        "{v}"
    );
    assert!(
        v["error_description"].as_str().unwrap().contains("expired"),
        "{v}"
    );
    assert_eq!(s.ok_route("grants/list", json!({}))["grants"], json!([]));
}

#[test]
fn a_grants_writes_carry_its_registered_name() {
    let s = Server::start();
    create_tasks(&s);
    let mcp = format!("{}/mcp", s.url);
    let t = oauth::connect(
        &s,
        "Named agent",
        json!({"write": [TASKS], "call_tools": ["insert_row"]}),
    );
    for (i, (said, label)) in [
        ("hand edit", "Named agent / hand edit"),
        ("owner", "Named agent / owner"),
        ("app:planning", "Named agent / app:planning"),
        ("claude-code / opus", "Named agent / claude-code / opus"),
    ]
    .into_iter()
    .enumerate()
    {
        let agent = Agent::connect(&mcp, Some(&t.access), Some(said));
        let id = format!("t{i}");
        let r = agent.call(
            "insert_row",
            json!({"table": TASKS, "id": id, "values": {"title": "labelled"}}),
        );
        assert!(!is_error(&r), "{}", text(&r));
        let m = &s.ok("list_migrations", json!({"table": TASKS, "limit": 1}))["migrations"][0];
        assert_eq!(m["row"], json!(id));
        assert_eq!(m["actor"]["label"], label, "{said}: {m}");
        assert_eq!(m["actor"]["harness"], "Named agent", "{m}");
        assert!(
            m["actor"]["token"]
                .as_str()
                .unwrap()
                .starts_with("client:Named agent (g_"),
            "{m}"
        );
    }
    // A client cannot register under the name of another author of the journal.
    for name in ["hand edit", "Owner", "app:planning", "client:x (g_1)"] {
        let (st, _, v) = register_raw(&s, name);
        assert_eq!(st, 400, "{name}: {v}");
        assert_eq!(v["error"], "invalid_client_metadata", "{v}");
    }
}
