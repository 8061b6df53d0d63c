//! Who a client is: one registered with `POST /oauth/register` (RFC 7591), or one identified by
//! the URL of its client ID metadata document (the MCP 2025-11-25 way), fetched here as hostile
//! input: https only, bounded in size (64 KiB) and time (5 s), no redirect followed, and no
//! private, loopback or link-local address unless the owner allows them
//! (`--oauth-private-clients`): the outbound rule (`crate::outbound`), checked again at the
//! connection.

use super::store::Client;
use super::{OAuth, OAuthError, SECRET_PREFIX, mint, now_secs, short_id};
use crate::outbound::{self, Policy};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The largest metadata document read.
const MAX_DOCUMENT: usize = 64 << 10;
/// How long fetching a metadata document may take, all in.
const FETCH_TIME: Duration = Duration::from_secs(5);
/// How long a fetched document is reused.
const CACHE_FOR: Duration = Duration::from_secs(300);
/// The most documents kept.
const CACHE_MAX: usize = 256;
/// The most redirect URIs a client may register.
const MAX_REDIRECTS: usize = 10;
/// The longest client name kept.
const MAX_NAME: usize = 200;

/// A client as an authorization request needs it.
#[derive(Debug, Clone)]
pub struct ClientInfo {
    /// Its `client_id`.
    pub client_id: String,
    /// Its name, as it says.
    pub client_name: String,
    /// The redirect URIs it registered.
    pub redirect_uris: Vec<String>,
    /// The origin of its metadata document (a client identified by one).
    pub origin: Option<String>,
    /// How it authenticates at the token endpoint.
    pub auth_method: String,
    /// Its secret's hash (a confidential client).
    pub secret_hash: Option<String>,
}

/// Fetched metadata documents, by URL.
#[derive(Default)]
pub(super) struct Documents(Mutex<HashMap<String, (Instant, ClientInfo)>>);

impl OAuth {
    /// Dynamic client registration (RFC 7591): the `201` answer's body. `from` is the address
    /// of the client that asked (bounded per address and in total, [`super::bounds`]).
    pub fn register(&self, body: &Value, from: Option<IpAddr>) -> Result<Value, OAuthError> {
        let meta = |m: String| OAuthError::new(400, "invalid_client_metadata", m);
        let Some(o) = body.as_object() else {
            return Err(meta("the registration must be a JSON object".into()));
        };
        let uris: Vec<String> = match o.get("redirect_uris") {
            Some(Value::Array(a)) if !a.is_empty() && a.len() <= MAX_REDIRECTS => a
                .iter()
                .map(|v| v.as_str().map(str::to_string))
                .collect::<Option<_>>()
                .ok_or_else(|| {
                    OAuthError::new(400, "invalid_redirect_uri", "redirect_uris must be strings")
                })?,
            _ => {
                return Err(OAuthError::new(
                    400,
                    "invalid_redirect_uri",
                    format!("redirect_uris must be a list of 1 to {MAX_REDIRECTS} URIs"),
                ));
            }
        };
        for u in &uris {
            check_redirect_uri(u).map_err(|why| {
                OAuthError::new(
                    400,
                    "invalid_redirect_uri",
                    format!("redirect URI {u:?}: {why}"),
                )
            })?;
        }
        let name = match o.get("client_name") {
            None | Some(Value::Null) => "unnamed client".to_string(),
            Some(Value::String(s)) => check_name(s).map_err(meta)?,
            Some(_) => return Err(meta("client_name must be a string".into())),
        };
        let method = match o.get("token_endpoint_auth_method") {
            None | Some(Value::Null) => "client_secret_basic",
            Some(Value::String(s)) => match s.as_str() {
                "none" => "none",
                "client_secret_post" => "client_secret_post",
                "client_secret_basic" => "client_secret_basic",
                other => {
                    return Err(meta(format!(
                        "token_endpoint_auth_method {other:?} is not supported: use none, client_secret_post or client_secret_basic"
                    )));
                }
            },
            Some(_) => return Err(meta("token_endpoint_auth_method must be a string".into())),
        };
        for (field, allowed) in [
            ("grant_types", &["authorization_code", "refresh_token"][..]),
            ("response_types", &["code"][..]),
        ] {
            if let Some(v) = o.get(field) {
                let ok = v.as_array().is_some_and(|a| {
                    a.iter()
                        .all(|x| x.as_str().is_some_and(|s| allowed.contains(&s)))
                });
                if !ok {
                    return Err(meta(format!(
                        "{field} may hold only {}",
                        allowed.join(" and ")
                    )));
                }
            }
        }
        self.flow
            .registrations
            .take(from.map(super::bounds::address))?;
        let client_id = short_id("dn_client_");
        let (secret, secret_hash) = if method == "none" {
            (None, None)
        } else {
            let (s, h) = mint(SECRET_PREFIX);
            (Some(s), Some(h))
        };
        let now = now_secs();
        let waiting = self.flow.waiting_clients();
        {
            let mut store = self.store.lock().unwrap();
            let client = Client {
                client_id: client_id.clone(),
                client_name: name.clone(),
                redirect_uris: uris.clone(),
                auth_method: method.to_string(),
                secret_hash,
                registered: now,
                used: false,
            };
            store.add_client(client, &waiting).map_err(|secs| {
                super::bounds::busy(
                    format!(
                        "{} clients are registered, and none is over an hour old and unused",
                        super::bounds::MAX_CLIENTS
                    ),
                    Duration::from_secs(secs),
                )
            })?;
            store.save().map_err(|e| {
                OAuthError::new(500, "server_error", format!("cannot save the client: {e}"))
            })?;
        }
        let mut answer = json!({
            "client_id": client_id,
            "client_id_issued_at": now,
            "client_name": name,
            "redirect_uris": uris,
            "token_endpoint_auth_method": method,
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
        });
        if let Some(s) = secret {
            answer["client_secret"] = json!(s);
            answer["client_secret_expires_at"] = json!(0);
        }
        Ok(answer)
    }

    /// The client of an authorization request: registered here, or (a `client_id` that is an
    /// https URL) described by its metadata document.
    pub async fn client(&self, client_id: &str) -> Result<ClientInfo, OAuthError> {
        if client_id.starts_with("https://") || client_id.starts_with("http://") {
            return self.document(client_id).await;
        }
        let store = self.store.lock().unwrap();
        let c = store.client(client_id).ok_or_else(|| {
            OAuthError::new(
                401,
                "invalid_client",
                "this client_id is not registered here: register with POST /oauth/register, or use the URL of a client ID metadata document",
            )
        })?;
        Ok(ClientInfo {
            client_id: c.client_id.clone(),
            client_name: c.client_name.clone(),
            redirect_uris: c.redirect_uris.clone(),
            origin: None,
            auth_method: c.auth_method.clone(),
            secret_hash: c.secret_hash.clone(),
        })
    }

    /// A client ID metadata document, fetched (bounded, no redirect, public addresses only
    /// unless allowed) or reused from the last 5 minutes.
    async fn document(&self, url: &str) -> Result<ClientInfo, OAuthError> {
        if let Some((at, c)) = self.flow.documents.0.lock().unwrap().get(url)
            && at.elapsed() < CACHE_FOR
        {
            return Ok(c.clone());
        }
        let bad = |m: String| OAuthError::new(400, "invalid_client", m);
        let parsed = reqwest::Url::parse(url)
            .map_err(|e| bad(format!("client_id {url:?} is not a URL: {e}")))?;
        let allowed = match parsed.scheme() {
            "https" => true,
            "http" => self.private_clients,
            _ => false,
        };
        if !allowed {
            return Err(bad(format!(
                "client_id {url:?}: a client ID metadata document must be served over https"
            )));
        }
        if parsed.fragment().is_some()
            || !parsed.username().is_empty()
            || parsed.password().is_some()
            || parsed.path() == "/"
            || parsed.path().split('/').any(|s| s == "." || s == "..")
        {
            return Err(bad(format!(
                "client_id {url:?}: a metadata document's URL has a path, and no fragment, credentials or dot segments"
            )));
        }
        let host = parsed.host_str().unwrap_or_default().to_string();
        let policy = Policy::private_if(self.private_clients);
        // Checked here to say why; the client's resolver checks again as it connects.
        tokio::time::timeout(FETCH_TIME, outbound::resolve(&host, policy))
            .await
            .map_err(|_| bad(format!("client_id {url:?}: resolving {host} took too long")))?
            .map_err(|r| {
                let allow = if r.is_address() {
                    "; the owner may allow private, loopback or link-local addresses with --oauth-private-clients"
                } else {
                    ""
                };
                bad(format!("client_id {url:?}: {r}{allow}"))
            })?;
        let body = fetch_bounded(&parsed, policy)
            .await
            .map_err(|why| bad(format!("client_id {url:?}: {why}")))?;
        let doc: Value = serde_json::from_slice(&body).map_err(|e| {
            bad(format!(
                "client_id {url:?}: the metadata document is not JSON: {e}"
            ))
        })?;
        let info = read_document(url, &doc)
            .map_err(|why| bad(format!("client_id {url:?}: the metadata document {why}")))?;
        let mut docs = self.flow.documents.0.lock().unwrap();
        if docs.len() >= CACHE_MAX {
            docs.retain(|_, (at, _)| at.elapsed() < CACHE_FOR);
            if docs.len() >= CACHE_MAX {
                docs.clear();
            }
        }
        docs.insert(url.to_string(), (Instant::now(), info.clone()));
        Ok(info)
    }
}

/// GETs a document from addresses `policy` allows: no redirect, at most [`MAX_DOCUMENT`] bytes,
/// in [`FETCH_TIME`].
async fn fetch_bounded(url: &reqwest::Url, policy: Policy) -> Result<Vec<u8>, String> {
    let client = outbound::builder(policy)
        .timeout(FETCH_TIME)
        .connect_timeout(Duration::from_secs(3))
        .build()
        .map_err(|e| format!("cannot build a client: {e}"))?;
    let work = async {
        let mut r = client
            .get(url.clone())
            .header("accept", "application/json")
            .send()
            .await
            .map_err(|e| fetch_error("cannot fetch the metadata document", &e))?;
        if r.status().is_redirection() {
            return Err(format!(
                "the metadata document answered a redirect ({}); redirects are not followed",
                r.status()
            ));
        }
        if !r.status().is_success() {
            return Err(format!("the metadata document answered {}", r.status()));
        }
        if r.content_length().is_some_and(|n| n > MAX_DOCUMENT as u64) {
            return Err(format!(
                "the metadata document is larger than {MAX_DOCUMENT} bytes"
            ));
        }
        let mut body = Vec::new();
        while let Some(chunk) = r
            .chunk()
            .await
            .map_err(|e| fetch_error("reading the metadata document failed", &e))?
        {
            if body.len() + chunk.len() > MAX_DOCUMENT {
                return Err(format!(
                    "the metadata document is larger than {MAX_DOCUMENT} bytes"
                ));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    };
    tokio::time::timeout(FETCH_TIME, work).await.map_err(|_| {
        format!(
            "the metadata document took longer than {} s",
            FETCH_TIME.as_secs()
        )
    })?
}

/// A fetch's error, saying so when it took too long.
fn fetch_error(what: &str, e: &reqwest::Error) -> String {
    if e.is_timeout() {
        format!(
            "the metadata document took longer than {} s",
            FETCH_TIME.as_secs()
        )
    } else {
        format!("{what}: {}", outbound::describe(e))
    }
}

/// Reads a client ID metadata document: its `client_id` is its URL, its `redirect_uris` are
/// valid, it is a public client.
fn read_document(url: &str, doc: &Value) -> Result<ClientInfo, String> {
    let o = doc.as_object().ok_or("is not a JSON object")?;
    if o.get("client_id").and_then(Value::as_str) != Some(url) {
        return Err("must have client_id equal to its own URL".into());
    }
    let uris: Vec<String> = o
        .get("redirect_uris")
        .and_then(Value::as_array)
        .filter(|a| !a.is_empty() && a.len() <= MAX_REDIRECTS)
        .and_then(|a| a.iter().map(|v| v.as_str().map(str::to_string)).collect())
        .ok_or(format!(
            "must list 1 to {MAX_REDIRECTS} redirect_uris, as strings"
        ))?;
    for u in &uris {
        check_redirect_uri(u).map_err(|why| format!("has redirect URI {u:?}: {why}"))?;
    }
    match o.get("token_endpoint_auth_method").and_then(Value::as_str) {
        None | Some("none") => {}
        Some(m) => {
            return Err(format!(
                "asks for token_endpoint_auth_method {m:?}: a client identified by a metadata document is a public client here (none)"
            ));
        }
    }
    let origin = reqwest::Url::parse(url)
        .map(|u| u.origin().ascii_serialization())
        .unwrap_or_default();
    let name = match o.get("client_name").and_then(Value::as_str) {
        Some(n) => check_name(n)?,
        None => origin.clone(),
    };
    Ok(ClientInfo {
        client_id: url.to_string(),
        client_name: name,
        redirect_uris: uris,
        origin: Some(origin),
        auth_method: "none".into(),
        secret_hash: None,
    })
}

/// A client name: 1 to 200 characters, no control character, and not a name the journal
/// gives another principal (a grant's writes carry its client's name).
fn check_name(s: &str) -> Result<String, String> {
    let s = s.trim();
    if s.is_empty() || s.chars().count() > MAX_NAME || s.chars().any(char::is_control) {
        return Err(format!(
            "client_name must be 1 to {MAX_NAME} characters without control characters"
        ));
    }
    let lower = s.to_lowercase();
    if ["owner", "hand edit", "semantic index"].contains(&lower.as_str())
        || ["app:", "client:"].iter().any(|p| lower.starts_with(p))
    {
        return Err(format!(
            "client_name {s:?} is what the journal calls another author (owner, hand edit, semantic index, app:..., client:...): choose the agent's own name"
        ));
    }
    Ok(s.to_string())
}

/// A redirect URI a client may register: absolute, no fragment; https, http to a loopback
/// address (a native app, RFC 8252), or a private-use scheme (`cursor://...`); never a scheme
/// that runs or reads something in the browser.
pub(crate) fn check_redirect_uri(u: &str) -> Result<(), &'static str> {
    if u.len() > 2000 {
        return Err("longer than 2000 characters");
    }
    let p = reqwest::Url::parse(u).map_err(|_| "not an absolute URI")?;
    if p.fragment().is_some() {
        return Err("a redirect URI has no fragment");
    }
    match p.scheme() {
        "https" => Ok(()),
        "http" => {
            let h = p.host_str().unwrap_or("").trim_matches(['[', ']']);
            if h.eq_ignore_ascii_case("localhost")
                || h.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
            {
                Ok(())
            } else {
                Err("http is allowed only to a loopback address; use https")
            }
        }
        "javascript" | "data" | "file" | "vbscript" | "about" | "blob" | "ftp" | "ws" | "wss" => {
            Err("this scheme cannot be a redirect URI")
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redirect_uris() {
        assert!(check_redirect_uri("https://claude.ai/api/callback").is_ok());
        assert!(check_redirect_uri("http://127.0.0.1:33418/cb").is_ok());
        assert!(check_redirect_uri("http://localhost/cb").is_ok());
        assert!(check_redirect_uri("cursor://anysphere.cursor-mcp/oauth/callback").is_ok());
        assert!(check_redirect_uri("http://example.com/cb").is_err());
        assert!(check_redirect_uri("javascript:alert(1)").is_err());
        assert!(check_redirect_uri("https://a.example/cb#x").is_err());
        assert!(check_redirect_uri("/cb").is_err());
    }
}
