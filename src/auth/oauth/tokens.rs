//! The token endpoint: codes and refresh tokens exchanged for tokens, refresh tokens rotating
//! on use. A refresh token used again after its rotation revokes the whole chain (OAuth 2.1
//! §4.3.1), except within a few seconds of the rotation, when it is only refused (a client
//! that retried a refresh whose answer it lost). And revocation (RFC 7009).

use super::authorize::{CODE_FOR, Code, bounded};
use super::clients::ClientInfo;
use super::store::{Found, GrantRecord, Held};
use super::{OAuth, OAuthError, REFRESH_PREFIX, hash32, mint, now_secs, same_resource, short_id};
use base64::Engine as _;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::time::Instant;
use subtle::ConstantTimeEq;

/// A refresh token used again this soon after its rotation (seconds) is refused without
/// revoking (`DATANOTES_OAUTH_RETRY_GRACE`, 30).
fn retry_grace() -> i64 {
    crate::knobs::num("DATANOTES_OAUTH_RETRY_GRACE", 30) as i64
}

/// A PKCE verifier's S256 challenge.
fn s256(verifier: &str) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()))
}

impl OAuth {
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
            consent: c.consent,
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
        // Expiry is checked at use (the index keeps a token until the next save drops it): a
        // chain whose refresh token expired is over, whichever of its tokens comes.
        if let Some(Found::Refresh { grant } | Found::Retired { grant, .. }) = &found
            && store
                .grant_mut(grant)
                .is_some_and(|g| g.refresh.expires <= now)
        {
            store.save().map_err(server_error)?;
            return Err(grant_err(
                "the refresh token expired: connect the client again",
            ));
        }
        match found {
            Some(Found::Refresh { grant }) => {
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
            Some(Found::Retired { grant, at }) => {
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
