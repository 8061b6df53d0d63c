//! The authorization code flow with PKCE (S256 only): an authorization request checked and
//! held while the owner decides on the consent page (10 minutes), the code the decision makes
//! (single use, 2 minutes, bound to its client, redirect URI, PKCE challenge and resource), and
//! the token endpoint: codes and refresh tokens exchanged for tokens, refresh tokens rotating on
//! use. A refresh token used again after its rotation revokes the whole chain (OAuth 2.1
//! §4.3.1), except within a few seconds of the rotation, when it is only refused (a client
//! that retried a refresh whose answer it lost).

use super::clients::{ClientInfo, Documents};
use super::store::{GrantRecord, Held};
use super::{CODE_PREFIX, OAuth, REFRESH_PREFIX, Rights, mint, now_secs, same_resource, short_id};
use crate::error::Error;
use base64::Engine as _;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use subtle::ConstantTimeEq;

/// How long the owner has to decide.
const REQUEST_FOR: Duration = Duration::from_secs(600);
/// How long a code may wait for its exchange.
const CODE_FOR: Duration = Duration::from_secs(120);
/// The most requests and codes held at once (the oldest go first).
const MAX_HELD: usize = 256;
/// A refresh token used again this soon after its rotation (seconds) is refused without
/// revoking (`DATANOTES_OAUTH_RETRY_GRACE`, 30).
fn retry_grace() -> i64 {
    crate::knobs::num("DATANOTES_OAUTH_RETRY_GRACE", 30) as i64
}

/// An error of the OAuth endpoints, in their wire shape (RFC 6749 §5.2):
/// `{"error": code, "error_description": why}`.
#[derive(Debug, Clone, PartialEq)]
pub struct OAuthError {
    /// The HTTP status.
    pub status: u16,
    /// The RFC's error code (`invalid_grant`, ...).
    pub error: &'static str,
    /// What went wrong and how to fix it.
    pub description: String,
}

impl OAuthError {
    /// An error.
    pub fn new(status: u16, error: &'static str, description: impl Into<String>) -> Self {
        OAuthError {
            status,
            error,
            description: description.into(),
        }
    }
    /// Its body.
    pub fn to_json(&self) -> Value {
        json!({"error": self.error, "error_description": self.description})
    }
}

/// An authorization request as its query string says it.
#[derive(Debug, Default, Clone, serde::Deserialize)]
pub struct AuthRequest {
    /// `code`, the only one.
    pub response_type: Option<String>,
    /// A registered client's id, or the URL of its metadata document.
    pub client_id: Option<String>,
    /// Where the answer goes: exactly one the client registered.
    pub redirect_uri: Option<String>,
    /// PKCE: the S256 challenge.
    pub code_challenge: Option<String>,
    /// PKCE: `S256`, the only one.
    pub code_challenge_method: Option<String>,
    /// Carried back to the client unchanged.
    pub state: Option<String>,
    /// RFC 8707: this server's `/mcp`.
    pub resource: Option<String>,
    /// Scopes are not used (the owner chooses the rights on the consent page).
    pub scope: Option<String>,
}

/// A request that did not become a consent page.
#[derive(Debug)]
pub enum Refusal {
    /// The client or its redirect URI cannot be trusted: shown on a page, never redirected.
    Page(OAuthError),
    /// Sent back to the client: its redirect URI with `error`, `error_description`, `state`.
    Redirect(String),
}

/// What the consent page shows and the decision refers to.
#[derive(Debug, Clone)]
pub struct Consent {
    /// The request's id (the page's `data-request`).
    pub request: String,
    /// The client.
    pub client: ClientInfo,
    /// Where the answer goes.
    pub redirect_uri: String,
    /// The resource asked for: this server's `/mcp`.
    pub resource: String,
}

struct Pending {
    consent: Consent,
    challenge: String,
    state: Option<String>,
    issuer: String,
    at: Instant,
}

struct Code {
    client_id: String,
    client_name: String,
    origin: Option<String>,
    redirect_uri: String,
    challenge: String,
    resource: String,
    rights: Rights,
    at: Instant,
}

/// The requests and codes held in memory (a restart drops them: the client starts again).
#[derive(Default)]
pub(super) struct Flow {
    pending: Mutex<HashMap<String, Pending>>,
    codes: Mutex<HashMap<[u8; 32], Code>>,
    /// Codes exchanged in the last [`CODE_FOR`], with the grant each made: one presented again
    /// revokes that grant (RFC 6749 §4.1.2: the code leaked).
    spent: Mutex<HashMap<[u8; 32], (String, Instant)>>,
    pub(super) documents: Documents,
}

/// `uri` with query parameters added.
fn with_params(uri: &str, params: &[(&str, Option<&str>)]) -> String {
    match reqwest::Url::parse(uri) {
        Ok(mut u) => {
            {
                let mut q = u.query_pairs_mut();
                for (k, v) in params {
                    if let Some(v) = v {
                        q.append_pair(k, v);
                    }
                }
            }
            u.to_string()
        }
        Err(_) => uri.to_string(),
    }
}

fn bounded<K: std::hash::Hash + Eq + Clone, V>(
    m: &mut HashMap<K, V>,
    at: impl Fn(&V) -> Instant,
    ttl: Duration,
) {
    m.retain(|_, v| at(v).elapsed() < ttl);
    while m.len() >= MAX_HELD {
        let Some(oldest) = m.iter().min_by_key(|(_, v)| at(v)).map(|(k, _)| k.clone()) else {
            break;
        };
        m.remove(&oldest);
    }
}

/// Whether a redirect URI of a request is one a client registered: the same string, or, for
/// an `http` loopback address (a native app, RFC 8252 §7.3, which OAuth 2.1 §8.4.2 makes a
/// MUST), the same but for the port, which the app picks when it listens.
fn same_redirect(registered: &str, asked: &str) -> bool {
    if registered == asked {
        return true;
    }
    let (Ok(mut r), Ok(mut a)) = (reqwest::Url::parse(registered), reqwest::Url::parse(asked))
    else {
        return false;
    };
    let loopback = |u: &reqwest::Url| {
        u.scheme() == "http"
            && u.host_str()
                .map(|h| h.trim_matches(['[', ']']))
                .is_some_and(|h| {
                    h.parse::<std::net::IpAddr>()
                        .is_ok_and(|ip| ip.is_loopback())
                })
    };
    if !loopback(&r) || !loopback(&a) {
        return false;
    }
    let _ = r.set_port(None);
    let _ = a.set_port(None);
    r.as_str() == a.as_str()
}

/// A PKCE verifier's S256 challenge.
fn s256(verifier: &str) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()))
}

fn hash32(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

impl OAuth {
    /// Checks an authorization request and holds it for the owner's decision. `resource` is
    /// this server's `/mcp`, `issuer` its base URL.
    pub async fn begin(
        &self,
        q: &AuthRequest,
        resource: &str,
        issuer: &str,
    ) -> Result<Consent, Refusal> {
        let page = |e: &'static str, m: String| Refusal::Page(OAuthError::new(400, e, m));
        let Some(client_id) = q.client_id.as_deref().filter(|s| !s.is_empty()) else {
            return Err(page("invalid_request", "client_id is missing".into()));
        };
        let client = self.client(client_id).await.map_err(Refusal::Page)?;
        let redirect_uri = match q.redirect_uri.as_deref() {
            Some(r) => r.to_string(),
            None if client.redirect_uris.len() == 1 => client.redirect_uris[0].clone(),
            None => {
                return Err(page(
                    "invalid_request",
                    "redirect_uri is missing, and the client registered more than one".into(),
                ));
            }
        };
        // Exactly as registered: no prefix, no added query, no other port but a loopback one.
        if !client
            .redirect_uris
            .iter()
            .any(|r| same_redirect(r, &redirect_uri))
        {
            return Err(page(
                "invalid_request",
                format!(
                    "redirect_uri {redirect_uri:?} is not one the client registered ({})",
                    client.redirect_uris.join(", ")
                ),
            ));
        }
        let back = |error: &str, why: &str| {
            Refusal::Redirect(with_params(
                &redirect_uri,
                &[
                    ("error", Some(error)),
                    ("error_description", Some(why)),
                    ("state", q.state.as_deref()),
                    ("iss", Some(issuer)),
                ],
            ))
        };
        if q.response_type.as_deref() != Some("code") {
            return Err(back(
                "unsupported_response_type",
                "response_type must be code",
            ));
        }
        let Some(challenge) = q.code_challenge.as_deref().filter(|c| {
            (43..=128).contains(&c.len())
                && c.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        }) else {
            return Err(back(
                "invalid_request",
                "code_challenge is required (PKCE, S256: 43 characters of base64url)",
            ));
        };
        if q.code_challenge_method.as_deref() != Some("S256") {
            return Err(back(
                "invalid_request",
                "code_challenge_method must be S256",
            ));
        }
        if let Some(r) = q.resource.as_deref()
            && !same_resource(r, resource)
        {
            return Err(back(
                "invalid_target",
                &format!("this server issues tokens only for {resource}"),
            ));
        }
        if q.state.as_ref().is_some_and(|s| s.len() > 2000) {
            return Err(back(
                "invalid_request",
                "state is longer than 2000 characters",
            ));
        }
        let consent = Consent {
            request: short_id("r_"),
            client,
            redirect_uri,
            resource: resource.to_string(),
        };
        let mut pending = self.flow.pending.lock().unwrap();
        bounded(&mut pending, |p| p.at, REQUEST_FOR);
        pending.insert(
            consent.request.clone(),
            Pending {
                consent: consent.clone(),
                challenge: challenge.to_string(),
                state: q.state.clone(),
                issuer: issuer.to_string(),
                at: Instant::now(),
            },
        );
        Ok(consent)
    }

    /// The owner's decision on a held request (taken: a request is decided once): the URL to
    /// send the browser to, with a code or `error=access_denied`, and the `state`.
    pub fn decide(
        &self,
        request: &str,
        allow: bool,
        rights: Rights,
    ) -> crate::error::Result<String> {
        rights.check()?;
        let p = {
            let mut pending = self.flow.pending.lock().unwrap();
            pending
                .remove(request)
                .filter(|p| p.at.elapsed() < REQUEST_FOR)
        };
        let Some(p) = p else {
            return Err(Error::not_found("this authorization request is unknown, was already decided, or expired (10 minutes)")
                .column("request")
                .hint("start again from the client: it opens a new consent page"));
        };
        let state = p.state.as_deref();
        let iss = Some(p.issuer.as_str());
        if !allow {
            return Ok(with_params(
                &p.consent.redirect_uri,
                &[
                    ("error", Some("access_denied")),
                    ("error_description", Some("the owner declined")),
                    ("state", state),
                    ("iss", iss),
                ],
            ));
        }
        let (code, _) = mint(CODE_PREFIX);
        {
            let mut codes = self.flow.codes.lock().unwrap();
            bounded(&mut codes, |c| c.at, CODE_FOR);
            codes.insert(
                hash32(&code),
                Code {
                    client_id: p.consent.client.client_id.clone(),
                    client_name: p.consent.client.client_name.clone(),
                    origin: p.consent.client.origin.clone(),
                    redirect_uri: p.consent.redirect_uri.clone(),
                    challenge: p.challenge,
                    resource: p.consent.resource.clone(),
                    rights,
                    at: Instant::now(),
                },
            );
        }
        Ok(with_params(
            &p.consent.redirect_uri,
            &[("code", Some(&code)), ("state", state), ("iss", iss)],
        ))
    }

    /// The token endpoint (`grant_type` `authorization_code` or `refresh_token`): the answer's
    /// body. `basic` is the client's `Authorization: Basic` credentials, if sent.
    pub async fn token(
        &self,
        form: &HashMap<String, String>,
        basic: Option<(String, String)>,
    ) -> Result<Value, OAuthError> {
        let client = self.authenticate(form, basic).await?;
        let grant = |m: String| OAuthError::new(400, "invalid_grant", m);
        let field = |k: &str| form.get(k).map(String::as_str).filter(|s| !s.is_empty());
        match field("grant_type") {
            Some("authorization_code") => {
                let code = field("code")
                    .ok_or_else(|| OAuthError::new(400, "invalid_request", "code is missing"))?;
                // Taken whatever follows: a code is tried once.
                let key = hash32(code);
                let c = self.flow.codes.lock().unwrap().remove(&key);
                let Some(c) = c.filter(|c| c.at.elapsed() < CODE_FOR) else {
                    let spent = self.flow.spent.lock().unwrap().remove(&key);
                    if let Some((id, _)) = spent {
                        let mut store = self.store.lock().unwrap();
                        if store.revoke(&id) {
                            store.save().map_err(server_error)?;
                            tracing::warn!(grant = %id, "an authorization code was used again: grant {id} revoked");
                        }
                        return Err(grant(
                            "the authorization code was already used; as a precaution the tokens it gave are revoked: start the authorization again".into(),
                        ));
                    }
                    return Err(grant(
                        "the authorization code is unknown, was already used, or expired (2 minutes): start the authorization again".into(),
                    ));
                };
                if !bool::from(c.client_id.as_bytes().ct_eq(client.client_id.as_bytes())) {
                    return Err(grant(
                        "the authorization code was issued to another client".into(),
                    ));
                }
                if field("redirect_uri") != Some(c.redirect_uri.as_str()) {
                    return Err(grant(
                        "redirect_uri must be the one of the authorization request".into(),
                    ));
                }
                let verifier = field("code_verifier").unwrap_or("");
                let ok_form = (43..=128).contains(&verifier.len())
                    && verifier
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"-._~".contains(&b));
                if !ok_form || !bool::from(s256(verifier).as_bytes().ct_eq(c.challenge.as_bytes()))
                {
                    return Err(grant(
                        "code_verifier does not match the code_challenge of the authorization request (PKCE)".into(),
                    ));
                }
                if let Some(r) = field("resource")
                    && !same_resource(r, &c.resource)
                {
                    return Err(OAuthError::new(
                        400,
                        "invalid_target",
                        format!("the code was issued for {}", c.resource),
                    ));
                }
                let (answer, id) = self.new_grant(c)?;
                let mut spent = self.flow.spent.lock().unwrap();
                bounded(&mut spent, |(_, at)| *at, CODE_FOR);
                spent.insert(key, (id, Instant::now()));
                Ok(answer)
            }
            Some("refresh_token") => {
                let token = field("refresh_token").ok_or_else(|| {
                    OAuthError::new(400, "invalid_request", "refresh_token is missing")
                })?;
                self.refresh(token, &client, field("resource"))
            }
            Some(other) => Err(OAuthError::new(
                400,
                "unsupported_grant_type",
                format!(
                    "grant_type {other:?} is not supported: use authorization_code or refresh_token"
                ),
            )),
            None => Err(OAuthError::new(
                400,
                "invalid_request",
                "grant_type is missing",
            )),
        }
    }

    /// The client of a token or revocation request, authenticated as it registered.
    async fn authenticate(
        &self,
        form: &HashMap<String, String>,
        basic: Option<(String, String)>,
    ) -> Result<ClientInfo, OAuthError> {
        let unauthorized = |m: &str| OAuthError::new(401, "invalid_client", m);
        let (id, secret) = match basic {
            Some((id, secret)) => (id, Some(secret)),
            None => (
                form.get("client_id").cloned().unwrap_or_default(),
                form.get("client_secret").cloned(),
            ),
        };
        if id.is_empty() {
            return Err(unauthorized("client_id is missing"));
        }
        let client = self.client(&id).await.map_err(|e| {
            if e.error == "invalid_client" {
                OAuthError::new(401, "invalid_client", e.description)
            } else {
                e
            }
        })?;
        if let Some(hash) = &client.secret_hash {
            let ok = secret
                .as_deref()
                .is_some_and(|s| crate::auth::matches(s, hash));
            if !ok {
                return Err(unauthorized(
                    "the client secret is missing or wrong (send it as registered: client_secret_basic or client_secret_post)",
                ));
            }
        }
        Ok(client)
    }

    /// A new grant from a code: its first tokens, and its id.
    fn new_grant(&self, c: Code) -> Result<(Value, String), OAuthError> {
        let now = now_secs();
        let (access, access_hash) = mint(super::ACCESS_PREFIX);
        let (refresh, refresh_hash) = mint(REFRESH_PREFIX);
        let l = self.lifetimes;
        let mut store = self.store.lock().unwrap();
        let id = short_id("g_");
        store.saved.grants.push(GrantRecord {
            id: id.clone(),
            client_id: c.client_id,
            client_name: c.client_name,
            client_origin: c.origin,
            redirect_uri: c.redirect_uri,
            resource: c.resource,
            rights: c.rights,
            created: now,
            last_used: None,
            refresh: Held {
                hash: refresh_hash,
                expires: now + l.refresh.as_secs() as i64,
            },
            retired: Vec::new(),
            access: vec![Held {
                hash: access_hash,
                expires: now + l.access.as_secs() as i64,
            }],
        });
        store.save().map_err(server_error)?;
        Ok((self.answer(&access, &refresh), id))
    }

    /// A refresh: the chain's current token rotates; an old one revokes the chain.
    fn refresh(
        &self,
        token: &str,
        client: &ClientInfo,
        resource: Option<&str>,
    ) -> Result<Value, OAuthError> {
        let grant_err = |m: &str| OAuthError::new(400, "invalid_grant", m);
        let mut store = self.store.lock().unwrap();
        let found = store.tokens.get(&hash32(token)).cloned();
        let now = now_secs();
        match found {
            Some(super::store::Found::Refresh { grant }) => {
                let g = store
                    .grant_mut(&grant)
                    .ok_or_else(|| grant_err("unknown refresh token"))?;
                if !bool::from(g.client_id.as_bytes().ct_eq(client.client_id.as_bytes())) {
                    return Err(grant_err("the refresh token was issued to another client"));
                }
                if let Some(r) = resource
                    && !same_resource(r, &g.resource)
                {
                    return Err(OAuthError::new(
                        400,
                        "invalid_target",
                        format!("the refresh token is for {}", g.resource),
                    ));
                }
                let (access, access_hash) = mint(super::ACCESS_PREFIX);
                let (refresh, refresh_hash) = mint(REFRESH_PREFIX);
                let l = self.lifetimes;
                store.rotate(
                    &grant,
                    Held {
                        hash: refresh_hash,
                        expires: now + l.refresh.as_secs() as i64,
                    },
                    Held {
                        hash: access_hash,
                        expires: now + l.access.as_secs() as i64,
                    },
                );
                store.save().map_err(server_error)?;
                Ok(self.answer(&access, &refresh))
            }
            Some(super::store::Found::Retired { grant, at }) => {
                let latest = store
                    .grant_mut(&grant)
                    .and_then(|g| g.retired.last().map(|r| r.at))
                    == Some(at);
                if latest && now - at < retry_grace() {
                    return Err(grant_err(
                        "this refresh token was already exchanged moments ago: use the refresh token that exchange returned",
                    ));
                }
                store.revoke(&grant);
                store.save().map_err(server_error)?;
                tracing::warn!(grant = %grant, "a replaced refresh token was used again: grant {grant} revoked");
                Err(grant_err(
                    "this refresh token was already replaced by a newer one; as a precaution the grant is revoked: connect the client again",
                ))
            }
            _ => Err(grant_err(
                "the refresh token is unknown, expired or revoked: connect the client again",
            )),
        }
    }

    fn answer(&self, access: &str, refresh: &str) -> Value {
        json!({
            "access_token": access,
            "token_type": "Bearer",
            "expires_in": self.lifetimes.access.as_secs(),
            "refresh_token": refresh,
        })
    }

    /// Token revocation (RFC 7009): a refresh token (current or replaced) revokes its whole
    /// chain; an access token, itself. An unknown token is no error.
    pub async fn revoke_token(
        &self,
        form: &HashMap<String, String>,
        basic: Option<(String, String)>,
    ) -> Result<(), OAuthError> {
        let client = self.authenticate(form, basic).await?;
        let Some(token) = form.get("token").filter(|t| {
            [super::ACCESS_PREFIX, REFRESH_PREFIX]
                .iter()
                .any(|p| t.starts_with(p))
        }) else {
            return Ok(());
        };
        let mut store = self.store.lock().unwrap();
        let found = store.tokens.get(&hash32(token)).cloned();
        use super::store::Found;
        let (grant, access) = match found {
            Some(Found::Refresh { grant }) | Some(Found::Retired { grant, .. }) => (grant, false),
            Some(Found::Access { grant, .. }) => (grant, true),
            None => return Ok(()),
        };
        let hash = crate::auth::token_hash(token);
        let Some(g) = store.grant_mut(&grant) else {
            return Ok(());
        };
        if g.client_id != client.client_id {
            // RFC 7009 §2.1: the request is refused (the token stays valid).
            return Err(OAuthError::new(
                400,
                "unauthorized_client",
                "this token was not issued to this client",
            ));
        }
        if access {
            g.access.retain(|a| a.hash != hash);
        } else {
            store.revoke(&grant);
        }
        store.save().map_err(server_error)
    }
}

fn server_error(e: std::io::Error) -> OAuthError {
    OAuthError::new(500, "server_error", format!("cannot save the grants: {e}"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn s256_is_rfc_7636s_example() {
        assert_eq!(
            super::s256("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"),
            "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
        );
    }
}
