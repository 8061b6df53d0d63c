//! A remote app whose MCP server requires OAuth 2.1: the engine as the OAuth client.
//!
//! The protected app is another datanotes server (its `/mcp` is an OAuth protected resource
//! with its own authorization server), which hosts an app of its own (`remote_app`, whose
//! `echo` is a name the first engine's operations do not hold). The owner connects it
//! (`apps/connect`), the second server's consent is given with plain HTTP (its owner's JSON
//! decision), the callback completes on the first engine, the app's tools are called through
//! the first engine's `/mcp`; then a refresh (access tokens of 2 s), and a refused one (the
//! grant revoked): the app needs sign-in, and a call says so. Tokens are compared by hash,
//! never printed.

use crate::kit::{Agent, App, Server, create_app, eventually, eventually_ok, is_error, text};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The hash of the access token the engine keeps for `app` (the file must exist).
fn access_hash(dir: &Path, app: &str) -> String {
    let path = tokens_file(dir, app);
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let v: Value = serde_json::from_slice(&bytes).expect("the tokens file is JSON");
    let t = v["credentials"]["token_response"]["access_token"]
        .as_str()
        .expect("an access token in the tokens file");
    hex(&Sha256::digest(t.as_bytes()))
}

/// Waits until the second server refuses, at its /mcp, the access token the first engine holds
/// for it (they live 2 s there; the first engine renews one from half its life on).
fn wait_expired(first: &Server, second: &Server) {
    let path = tokens_file(&first.dir, "second");
    let v: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let token = v["credentials"]["token_response"]["access_token"]
        .as_str()
        .expect("an access token in the tokens file")
        .to_string();
    eventually_ok("the second server refuses the first's access token", || {
        let r = second
            .http
            .post(format!("{}/mcp", second.url))
            .bearer_auth(&token)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(r#"{"jsonrpc": "2.0", "id": 1, "method": "ping"}"#)
            .send()
            .unwrap();
        match r.status().as_u16() {
            401 => Ok(()),
            st => Err(format!("{st} {}", r.text().unwrap_or_default())),
        }
    });
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn tokens_file(dir: &Path, app: &str) -> PathBuf {
    dir.join(".datanotes/app-oauth").join(format!("{app}.json"))
}

/// A client that does not follow redirects (the callback's answer is read as it is).
fn no_redirects() -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap()
}

/// The second server's consent, given by its owner with plain HTTP: the consent page's request
/// id, then the JSON decision. Answers the redirect to the first engine's callback.
fn consent(second: &Server, authorization_url: &str) -> String {
    let http = no_redirects();
    let page = http.get(authorization_url).send().expect("consent page");
    assert_eq!(page.status().as_u16(), 200, "the consent page");
    let html = page.text().unwrap();
    let at = html
        .find("data-request=\"")
        .unwrap_or_else(|| panic!("no data-request on the consent page: {html}"));
    let rest = &html[at + "data-request=\"".len()..];
    let request = &rest[..rest.find('"').unwrap()];
    let r = http
        .post(format!("{}/oauth/authorize", second.url))
        .bearer_auth(&second.token)
        .json(&json!({
            "request": request, "decision": "allow", "write": [], "ddl": false,
            "maintain": false, "call_tools": ["*"],
        }))
        .send()
        .expect("consent decision");
    let status = r.status().as_u16();
    let v: Value = r.json().unwrap_or(Value::Null);
    assert_eq!(status, 200, "the consent decision: {v}");
    v["redirect"].as_str().expect("a redirect").to_string()
}

fn entry(s: &Server, app: &str) -> Value {
    s.ok_route("apps/get", json!({"name": app}))["app"].clone()
}

#[test]
fn app_oauth_connect_call_refresh_revoke() {
    // The protected app: a second engine with access tokens of 2 s, hosting `remote_app`.
    let second = Server::start_with_env(&[("DATANOTES_OAUTH_ACCESS_TTL", "2")]);
    let inner_token = create_app(&second, json!({"name": "inner"}));
    let _inner = App::start(&second, "inner", &inner_token, &[]);
    eventually_ok("the second server lists echo", || {
        let listed = second.ok_route("apps/tools", json!({}));
        if listed.to_string().contains("\"inner_echo\"") {
            Ok(())
        } else {
            Err(format!("{listed}; the app: {}", entry(&second, "inner")))
        }
    });

    let first = Server::start();
    let mcp_url = format!("{}/mcp", second.url);
    let created = first.ok_route("apps/create", json!({"name": "second", "mcp_url": mcp_url}));
    // No token yet: the app answered 401 with its challenge; it needs sign-in.
    let e = &created["app"];
    assert_eq!(e["reachable"], json!(false), "{e}");
    assert_eq!(e["signIn"]["required"], json!(true), "{e}");
    let last = e["lastError"].as_str().unwrap_or_default();
    assert!(
        last.contains("needs sign-in") && last.contains("apps/connect"),
        "{last}"
    );

    // A call before sign-in says what to do.
    let out = first.ok_route(
        "apps/call",
        json!({"tool": "inner_echo", "arguments": {"text": "x"}}),
    );
    assert_eq!(out["ok"], json!(false), "{out}");

    // Connect: the authorization URL is the second server's, with PKCE S256 and the resource.
    let c = first.ok_route("apps/connect", json!({"name": "second"}));
    let auth_url = c["authorization_url"]
        .as_str()
        .expect("authorization_url")
        .to_string();
    let u = reqwest::Url::parse(&auth_url).unwrap();
    let q: std::collections::HashMap<String, String> = u.query_pairs().into_owned().collect();
    assert!(
        auth_url.starts_with(&format!("{}/oauth/authorize?", second.url)),
        "{auth_url}"
    );
    assert_eq!(
        q.get("code_challenge_method").map(String::as_str),
        Some("S256")
    );
    assert_eq!(q.get("resource"), Some(&mcp_url));
    assert_eq!(
        q.get("redirect_uri"),
        Some(&format!("{}/datanotes/apps/oauth/callback", first.url))
    );
    // Registered by dynamic client registration (the engine is on loopback http, so no
    // client ID metadata document).
    assert!(!q["client_id"].starts_with("http"), "{}", q["client_id"]);

    let redirect = consent(&second, &auth_url);
    assert!(redirect.starts_with(&format!("{}/datanotes/apps/oauth/callback?", first.url)));
    let back = no_redirects().get(&redirect).send().expect("callback");
    assert_eq!(back.status().as_u16(), 303, "{:?}", back.text());
    assert_eq!(
        back.headers()["location"].to_str().unwrap(),
        "/datanotes/ui/#apps"
    );
    // The state is single use.
    let again = no_redirects().get(&redirect).send().unwrap();
    assert_eq!(again.status().as_u16(), 400);
    assert!(
        again
            .text()
            .unwrap()
            .contains("unknown or was already used")
    );

    // Connected: reachable, the tools listed, the tokens kept 0600 and never answered.
    let e = entry(&first, "second");
    assert_eq!(e["reachable"], json!(true), "{e}");
    assert_eq!(
        e["signIn"],
        json!({"required": false, "connected": true, "reason": null})
    );
    assert!(
        e["tools"]
            .as_array()
            .unwrap()
            .contains(&json!("inner_echo")),
        "{e}"
    );
    let file = tokens_file(&first.dir, "second");
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&file).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o600);
    let h1 = access_hash(&first.dir, "second");
    let listing = first.ok_route("apps", json!({})).to_string();
    let raw: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    let access = raw["credentials"]["token_response"]["access_token"]
        .as_str()
        .unwrap();
    assert!(
        !listing.contains(access),
        "the access token must never be answered"
    );

    // Called through the first engine's /mcp.
    let agent = Agent::owner(&first);
    let r = agent.call("inner_echo", json!({"text": "through oauth"}));
    assert!(!is_error(&r), "{}", text(&r));
    assert!(text(&r).contains("through oauth"), "{}", text(&r));

    // A refresh: the access token lived 2 s; the next call renews it first.
    wait_expired(&first, &second);
    let r = agent.call("inner_echo", json!({"text": "after refresh"}));
    assert!(!is_error(&r), "{}", text(&r));
    let h2 = access_hash(&first.dir, "second");
    assert_ne!(
        h1, h2,
        "the tokens file holds a new access token after the refresh"
    );
    // And over HTTP apps/call (the shared call session).
    let out = first.ok_route(
        "apps/call",
        json!({"tool": "inner_echo", "arguments": {"text": "http"}}),
    );
    assert_eq!(out["ok"], json!(true), "{out}");

    // The grant revoked on the second server: the refresh is refused, the app needs sign-in.
    let grants = second.ok_route("grants/list", json!({}));
    let ids: Vec<String> = grants["grants"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|g| g["id"].as_str().map(String::from))
        .collect();
    assert_eq!(ids.len(), 1, "{grants}");
    second.ok_route("grants/revoke", json!({"id": ids[0]}));
    wait_expired(&first, &second);
    let r = agent.call("inner_echo", json!({"text": "revoked"}));
    assert!(is_error(&r), "{}", text(&r));
    let why = text(&r);
    assert!(
        why.contains("needs sign-in") && why.contains("Connect") && why.contains("apps/connect"),
        "{why}"
    );
    let out = first.ok_route(
        "apps/call",
        json!({"tool": "inner_echo", "arguments": {"text": "x"}}),
    );
    assert_eq!(out["ok"], json!(false), "{out}");
    assert!(
        out["value"]
            .as_str()
            .unwrap_or_default()
            .contains("needs sign-in"),
        "{out}"
    );
    let e = entry(&first, "second");
    assert_eq!(e["reachable"], json!(false), "{e}");
    assert_eq!(e["signIn"]["required"], json!(true), "{e}");
    assert!(
        e["signIn"]["reason"]
            .as_str()
            .unwrap()
            .contains("connect app second again"),
        "{e}"
    );
    // Its tools stay listed.
    assert!(
        e["tools"]
            .as_array()
            .unwrap()
            .contains(&json!("inner_echo")),
        "{e}"
    );
    assert!(agent.names().contains(&"inner_echo".to_string()));

    // Connected again: works again.
    let c = first.ok_route("apps/connect", json!({"name": "second"}));
    let redirect = consent(&second, c["authorization_url"].as_str().unwrap());
    let back = no_redirects().get(&redirect).send().unwrap();
    assert_eq!(back.status().as_u16(), 303);
    let r = agent.call("inner_echo", json!({"text": "again"}));
    assert!(!is_error(&r), "{}", text(&r));

    // Revoked while the access token is still fresh: the app answers 401, the engine tries one
    // refresh, which is refused: needs sign-in, at once.
    let grants = second.ok_route("grants/list", json!({}));
    let id = grants["grants"][0]["id"].as_str().unwrap().to_string();
    second.ok_route("grants/revoke", json!({"id": id}));
    let r = agent.call("inner_echo", json!({"text": "revoked at once"}));
    assert!(
        is_error(&r) && text(&r).contains("needs sign-in"),
        "{}",
        text(&r)
    );
    assert_eq!(entry(&first, "second")["signIn"]["required"], json!(true));
    let c = first.ok_route("apps/connect", json!({"name": "second"}));
    let redirect = consent(&second, c["authorization_url"].as_str().unwrap());
    let back = no_redirects().get(&redirect).send().unwrap();
    assert_eq!(back.status().as_u16(), 303);
    let r = agent.call("inner_echo", json!({"text": "third sign-in"}));
    assert!(!is_error(&r), "{}", text(&r));

    // A restart keeps the sign-in (the tokens file).
    drop(agent);
    let first = first.restart();
    let agent = Agent::owner(&first);
    eventually("the app is called after a restart", || {
        let r = agent.call("inner_echo", json!({"text": "restarted"}));
        !is_error(&r)
    });

    // Deleting the app removes its tokens.
    first.ok_route("apps/delete", json!({"name": "second"}));
    assert!(!tokens_file(&first.dir, "second").exists());
}

#[test]
fn app_oauth_callback_refuses_unknown_state() {
    let s = Server::start();
    let r = no_redirects()
        .get(format!(
            "{}/datanotes/apps/oauth/callback?code=x&state=nope",
            s.url
        ))
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    assert!(r.text().unwrap().contains("unknown or was already used"));
    // apps/connect is the owner's: an app's own token is refused.
    let app_token = create_app(
        &s,
        json!({"name": "other", "mcp_url": "http://127.0.0.1:9/mcp"}),
    );
    let (st, v) = s.call_as(
        Some(&app_token),
        "apps/connect",
        &json!({"name": "other"}),
        &[],
    );
    assert_eq!(st, 403, "{v}");
    let (st, v) = s.call_as(
        Some(&s.token),
        "apps/connect",
        &json!({"name": "nope"}),
        &[],
    );
    assert_eq!(st, 404, "{v}");
    // An app sent a static token does not sign in.
    s.ok_route(
        "apps/create",
        json!({"name": "static", "mcp_url": "http://127.0.0.1:9/mcp", "mcp_token": "t"}),
    );
    let (st, v) = s.call_as(
        Some(&s.token),
        "apps/connect",
        &json!({"name": "static"}),
        &[],
    );
    assert_eq!(st, 400, "{v}");
    assert!(v.to_string().contains("mcp_token"), "{v}");
    // An app whose address publishes no OAuth metadata (nothing listens there): refused, saying so.
    let (st, v) = s.call_as(
        Some(&s.token),
        "apps/connect",
        &json!({"name": "other"}),
        &[],
    );
    assert_eq!(st, 502, "{v}");
}
