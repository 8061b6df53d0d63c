//! The authorization request and the owner's decision: a request checked and held while the
//! owner decides on the consent page (10 minutes), and the code the decision makes (single
//! use, 2 minutes, bound to its client, redirect URI, PKCE challenge and resource). The token
//! endpoint that takes the code is [`super::tokens`].

use super::bounds::{self, Registrations};
use super::clients::{ClientInfo, Documents};
use super::{CODE_PREFIX, OAuth, OAuthError, Ticked, hash32, mint, same_resource, short_id};
use crate::error::Error;
use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long the owner has to decide.
const REQUEST_FOR: Duration = Duration::from_secs(600);
/// How long a code may wait for its exchange.
pub(super) const CODE_FOR: Duration = Duration::from_secs(120);
/// The most codes held at once (the oldest go first: only the owner's decisions make codes).
const MAX_HELD: usize = 256;

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
    /// The address it came from ([`bounds::address`]).
    from: Option<IpAddr>,
}

pub(super) struct Code {
    pub(super) client_id: String,
    pub(super) client_name: String,
    pub(super) origin: Option<String>,
    pub(super) redirect_uri: String,
    pub(super) challenge: String,
    pub(super) resource: String,
    pub(super) consent: Ticked,
    pub(super) at: Instant,
}

/// The requests and codes held in memory (a restart drops them: the client starts again).
#[derive(Default)]
pub(super) struct Flow {
    pending: Mutex<HashMap<String, Pending>>,
    pub(super) codes: Mutex<HashMap<[u8; 32], Code>>,
    /// Codes exchanged in the last [`CODE_FOR`], with the grant each made: one presented again
    /// revokes that grant (RFC 6749 §4.1.2: the code leaked).
    pub(super) spent: Mutex<HashMap<[u8; 32], (String, Instant)>>,
    pub(super) documents: Documents,
    /// The registrations of the last hour, by address.
    pub(super) registrations: Registrations,
}

impl Flow {
    /// The clients of the requests waiting for the owner (a registration cannot make room by
    /// removing one of them).
    pub(super) fn waiting_clients(&self) -> HashSet<String> {
        let pending = self.pending.lock().unwrap();
        pending
            .values()
            .filter(|p| p.at.elapsed() < REQUEST_FOR)
            .map(|p| p.consent.client.client_id.clone())
            .collect()
    }
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

pub(super) fn bounded<K: std::hash::Hash + Eq + Clone, V>(
    m: &mut HashMap<K, V>,
    at: impl Fn(&V) -> Instant,
    ttl: Duration,
) {
    m.retain(|_, v| at(v).elapsed() < ttl);
    crate::bounded::evict_oldest(m, MAX_HELD - 1, |_, v| Some(at(v)));
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

impl OAuth {
    /// Checks an authorization request and holds it for the owner's decision. `resource` is
    /// this server's `/mcp`, `issuer` its base URL, `from` the address of the client that
    /// asked (bounded per address, [`bounds`]).
    pub async fn begin(
        &self,
        q: &AuthRequest,
        resource: &str,
        issuer: &str,
        from: Option<IpAddr>,
    ) -> Result<Consent, Refusal> {
        let from = from.map(bounds::address);
        // Before anything is fetched: at a bound, the new request is refused (on a page), and
        // no request waiting for the owner is pushed out.
        self.room_for_request(from).map_err(Refusal::Page)?;
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
        // A client the owner never granted anything is anyone's, and so are the redirect URIs
        // it registered: an error is shown here, never sent there (an open redirector, RFC 9700
        // §4.11.2). Only a client the owner trusted with a grant gets its errors back.
        let granted = self.store.lock().unwrap().granted(&client.client_id);
        let back = |error: &'static str, why: &str| {
            if !granted {
                return Refusal::Page(OAuthError::new(400, error, why));
            }
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
        pending.retain(|_, p| p.at.elapsed() < REQUEST_FOR);
        // Again, under the lock (others came while the client was looked up).
        bounds::room_for_request(pending.values().map(|p| (p.from, p.at)), from, REQUEST_FOR)
            .map_err(Refusal::Page)?;
        pending.insert(
            consent.request.clone(),
            Pending {
                consent: consent.clone(),
                challenge: challenge.to_string(),
                state: q.state.clone(),
                issuer: issuer.to_string(),
                at: Instant::now(),
                from,
            },
        );
        Ok(consent)
    }

    /// Whether one more authorization request from `from` may wait for the owner.
    fn room_for_request(&self, from: Option<IpAddr>) -> Result<(), OAuthError> {
        let mut pending = self.flow.pending.lock().unwrap();
        pending.retain(|_, p| p.at.elapsed() < REQUEST_FOR);
        bounds::room_for_request(pending.values().map(|p| (p.from, p.at)), from, REQUEST_FOR)
    }

    /// The owner's decision on a held request (taken: a request is decided once): the URL to
    /// send the browser to, with a code or `error=access_denied`, and the `state`.
    pub fn decide(
        &self,
        request: &str,
        allow: bool,
        consent: Ticked,
    ) -> crate::error::Result<String> {
        consent.check()?;
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
                    consent,
                    at: Instant::now(),
                },
            );
        }
        // A client a code was issued to is used: a registration never makes room by removing it.
        self.store
            .lock()
            .unwrap()
            .note_used(&p.consent.client.client_id);
        Ok(with_params(
            &p.consent.redirect_uri,
            &[("code", Some(&code)), ("state", state), ("iss", iss)],
        ))
    }
}
