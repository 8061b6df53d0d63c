//! `/mcp` as an OAuth 2.1 protected resource with datanotes as its authorization server: an
//! agent discovers, registers, gets the owner's consent and calls with exactly the rights the
//! owner ticked; and every refusal the security list of issue 32 names, each leaving nothing
//! changed.
//!
//! - `discovery_and_consent`: discovery, connection and grants; the authorization request and
//!   the consent refusing what they must;
//! - `codes_and_tokens`: codes bound and single use, tokens that expire, rotate and are bound to
//!   their resource;
//! - `client_metadata`: client ID metadata documents fetched as hostile input;
//! - `apps`: a grant reaching apps only through the tools ticked, never passing its token on;
//! - `abuse`: one policy at every door of the authorization server (issue 43).

use crate::kit::oauth::{self, REDIRECT, Tokens, decide, open, param, pkce, post_form};
use crate::kit::*;
use serde_json::{Value, json};
use std::time::Duration;

mod abuse;
mod apps;
mod client_metadata;
mod codes_and_tokens;
mod discovery_and_consent;

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
