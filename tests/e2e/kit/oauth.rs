//! An OAuth client of the engine's authorization server, in plain HTTP (what an agent's SDK
//! does, step by step, so that a test can also do each step wrong): registration, the
//! authorization request, the owner's decision as the consent page sends it, and the token
//! endpoint.

use super::server::Server;
use base64::Engine as _;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// The redirect URI the tests register (nothing listens there: the tests read the redirect).
pub const REDIRECT: &str = "http://127.0.0.1:9/cb";

/// A blocking client that does not follow redirects.
pub fn no_redirect() -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// `application/x-www-form-urlencoded` of pairs.
pub fn form(pairs: &[(&str, &str)]) -> String {
    pairs
        .iter()
        .map(|(k, v)| format!("{}={}", enc(k), enc(v)))
        .collect::<Vec<_>>()
        .join("&")
}

/// Percent-encodes everything but the unreserved characters.
pub fn enc(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// A query parameter of a URL.
pub fn param(url: &str, key: &str) -> Option<String> {
    let q = url.split_once('?')?.1;
    q.split('&').find_map(|p| {
        let (k, v) = p.split_once('=')?;
        (k == key).then(|| {
            let v = v.replace('+', " ");
            let b = v.as_bytes();
            let mut out = Vec::new();
            let mut i = 0;
            while i < b.len() {
                if b[i] == b'%' && i + 2 < b.len() {
                    out.push(u8::from_str_radix(&v[i + 1..i + 3], 16).unwrap());
                    i += 3;
                } else {
                    out.push(b[i]);
                    i += 1;
                }
            }
            String::from_utf8(out).unwrap()
        })
    })
}

/// A PKCE verifier and its S256 challenge.
pub fn pkce() -> (String, String) {
    let verifier = format!("v{}", "0123456789abcdef".repeat(3));
    let challenge = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(Sha256::digest(verifier.as_bytes()));
    (verifier, challenge)
}

/// Registers a public client (dynamic registration); its `client_id`.
pub fn register(s: &Server, name: &str, redirect: &str) -> String {
    let (st, v) = s.post(
        "/oauth/register",
        None,
        &json!({"client_name": name, "redirect_uris": [redirect], "token_endpoint_auth_method": "none"}),
    );
    assert_eq!(st, 201, "register: {v}");
    v["client_id"].as_str().unwrap().to_string()
}

/// The authorization URL of a request.
pub fn authorize_url(
    s: &Server,
    client: &str,
    redirect: &str,
    challenge: &str,
    state: &str,
) -> String {
    format!(
        "{}/oauth/authorize?response_type=code&client_id={}&redirect_uri={}&code_challenge={challenge}&code_challenge_method=S256&state={}&resource={}",
        s.url,
        enc(client),
        enc(redirect),
        enc(state),
        enc(&format!("{}/mcp", s.url))
    )
}

/// GETs an authorization URL: (status, `Location` if a redirect, body).
pub fn open(url: &str) -> (u16, Option<String>, String) {
    let r = no_redirect().get(url).send().unwrap();
    let status = r.status().as_u16();
    let loc = r
        .headers()
        .get("location")
        .map(|v| v.to_str().unwrap().to_string());
    (status, loc, r.text().unwrap())
}

/// The consent page's request id.
pub fn request_id(html: &str) -> String {
    let i = html.find("data-request=\"").expect("a consent page") + 14;
    html[i..].split('"').next().unwrap().to_string()
}

/// The owner's decision, as the consent page posts it.
pub fn decide(s: &Server, token: &str, body: &Value) -> (u16, Value) {
    s.post_raw(
        "/oauth/authorize",
        Some(token),
        &[("content-type", "application/json"), ("origin", &s.url)],
        serde_json::to_vec(body).unwrap(),
    )
}

/// POST a form to the token endpoint (or another form endpoint).
pub fn post_form(s: &Server, path: &str, pairs: &[(&str, &str)]) -> (u16, Value) {
    s.post_raw(
        path,
        None,
        &[("content-type", "application/x-www-form-urlencoded")],
        form(pairs).into_bytes(),
    )
}

/// The tokens of a grant.
pub struct Tokens {
    /// The client.
    pub client: String,
    /// The access token.
    pub access: String,
    /// The refresh token.
    pub refresh: String,
}

/// The whole flow: a client named `name` registers, the owner ticks `rights` (the decision's
/// `write`, `ddl`, `maintain`, `call_tools`), the code is exchanged.
pub fn connect(s: &Server, name: &str, rights: Value) -> Tokens {
    let client = register(s, name, REDIRECT);
    let (verifier, challenge) = pkce();
    let (st, _, html) = open(&authorize_url(s, &client, REDIRECT, &challenge, "s1"));
    assert_eq!(st, 200, "consent page: {html}");
    let mut body = rights;
    body["request"] = json!(request_id(&html));
    body["decision"] = json!("allow");
    let (st, v) = decide(s, &s.token, &body);
    assert_eq!(st, 200, "decision: {v}");
    let back = v["redirect"].as_str().unwrap();
    assert_eq!(param(back, "state").as_deref(), Some("s1"));
    let code = param(back, "code").unwrap();
    let resource = format!("{}/mcp", s.url);
    let (st, t) = post_form(
        s,
        "/oauth/token",
        &[
            ("grant_type", "authorization_code"),
            ("code", &code),
            ("redirect_uri", REDIRECT),
            ("client_id", &client),
            ("code_verifier", &verifier),
            ("resource", &resource),
        ],
    );
    assert_eq!(st, 200, "token: {t}");
    Tokens {
        client,
        access: t["access_token"].as_str().unwrap().to_string(),
        refresh: t["refresh_token"].as_str().unwrap().to_string(),
    }
}
