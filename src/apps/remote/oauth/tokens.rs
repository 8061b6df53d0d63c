//! The access token of each request to the app: cached, renewed before it expires and once
//! after a 401, and what the owner is told when none can be had.

use super::*;

/// Why a request to the app could not carry a token.
#[derive(Debug, Clone)]
pub(crate) enum NoToken {
    /// The owner must connect the app (again): why.
    SignIn(String),
    /// Renewing the token failed for now (the authorization server is not reachable): why.
    Failed(String),
}

#[derive(Default)]
pub(super) struct State {
    /// The access token and when it must be renewed (Unix seconds).
    pub(super) token: Option<(String, u64)>,
    /// Tokens for the app's address exist.
    pub(super) has_tokens: bool,
    /// Why the owner must sign in, if they must.
    pub(super) needs: Option<String>,
    /// The app's last 401 challenge.
    pub(super) challenge: Option<String>,
}

pub(super) fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs()
}

/// When a token just obtained must be renewed: rmcp's own margin before it expires
/// (`min(30 s, half its life)`, at least 1 s); never, without an expiry (a 401 renews it).
pub(super) fn renew_at(c: &StoredCredentials) -> u64 {
    let (Some(life), Some(at)) = (
        token_field(c, "expires_in").and_then(|v| v.as_u64()),
        c.token_received_at,
    ) else {
        return u64::MAX;
    };
    let margin = 30.min(life / 2).max(1);
    (at + life).saturating_sub(margin)
}

impl AppOAuth {
    /// The sentence of a call refused because the owner must sign in.
    pub(crate) fn sign_in_error(&self, why: &str) -> String {
        format!(
            "needs sign-in: {why}; the owner must connect app {} again in the console (the \
             Connect button of its entry in Apps, or POST /datanotes/apps/connect/ \
             {{\"name\": \"{}\"}})",
            self.app, self.app
        )
    }

    /// Why the owner must sign in, if they must.
    pub(crate) fn needs(&self) -> Option<String> {
        self.state.lock().unwrap().needs.clone()
    }

    /// What the app's entry shows (`signIn`), once the app turned out to use OAuth.
    pub(crate) fn status(&self) -> Option<serde_json::Value> {
        let s = self.state.lock().unwrap();
        (s.has_tokens || s.needs.is_some()).then(|| {
            serde_json::json!({
                "required": s.needs.is_some(),
                "connected": s.has_tokens && s.needs.is_none(),
                "reason": s.needs.as_ref().map(|w| self.sign_in_error(w)),
            })
        })
    }

    /// The token to send now, if one is known and fresh (no waiting).
    pub(crate) fn cached(&self) -> Option<String> {
        let s = self.state.lock().unwrap();
        s.token.as_ref().map(|(t, _)| t.clone())
    }

    /// The bearer of the next request: the access token (renewed first when it is about to
    /// expire); none while the app has no tokens (an app that needs none, or one that will
    /// answer 401 and so be found to need sign-in).
    pub(crate) async fn bearer(&self) -> Result<Option<String>, NoToken> {
        {
            let s = self.state.lock().unwrap();
            if !s.has_tokens {
                return Ok(None);
            }
            if let Some((t, until)) = &s.token
                && now_secs() < *until
            {
                return Ok(Some(t.clone()));
            }
        }
        let mut m = self.manager.lock().await;
        {
            let s = self.state.lock().unwrap();
            if let Some((t, until)) = &s.token
                && now_secs() < *until
            {
                return Ok(Some(t.clone()));
            }
        }
        if m.is_none() {
            *m = Some(self.load().await?);
        }
        let mgr = m.as_ref().expect("set above");
        let r = mgr.get_access_token().await;
        self.took(r).map(Some)
    }

    /// The app refused `used` (401): the token is renewed once (unless another request
    /// renewed it already). The new token, or why there is none.
    pub(crate) async fn rejected(&self, used: &str) -> Result<String, NoToken> {
        let mut m = self.manager.lock().await;
        if let Some(t) = self.cached().filter(|t| t != used) {
            return Ok(t);
        }
        if m.is_none() {
            *m = Some(self.load().await?);
        }
        let mgr = m.as_ref().expect("set above");
        let r = mgr.refresh_token().await.and_then(|t| {
            access_token_of(&t).ok_or_else(|| {
                AuthError::TokenRefreshFailed("no access token in the answer".into())
            })
        });
        self.took(r)
    }

    /// Notes the outcome of getting a token.
    pub(super) fn took(&self, r: Result<String, AuthError>) -> Result<String, NoToken> {
        match r {
            Ok(t) => {
                // The token just obtained, with the expiry the file holds for it.
                let until = FileStore::read(&self.path, &self.url)
                    .filter(|(_, c)| {
                        token_field(c, "access_token").is_some_and(|v| v == t.as_str())
                    })
                    .map_or(0, |(_, c)| renew_at(&c));
                let mut s = self.state.lock().unwrap();
                s.token = Some((t.clone(), until.max(now_secs() + 1)));
                s.needs = None;
                Ok(t)
            }
            Err(
                e @ (AuthError::AuthorizationRequired
                | AuthError::TokenRefreshRejected(_)
                | AuthError::TokenExpired),
            ) => {
                // rmcp says "authorization required" for both a refused refresh and none to try.
                let refreshable = FileStore::read(&self.path, &self.url)
                    .is_some_and(|(_, c)| token_field(&c, "refresh_token").is_some());
                let why = match e {
                    AuthError::AuthorizationRequired if refreshable => {
                        "its authorization server refused to renew the sign-in (the grant was \
                         revoked or has expired)"
                            .to_string()
                    }
                    AuthError::AuthorizationRequired => "its sign-in expired, and its \
                         authorization server gave no refresh token to renew it"
                        .to_string(),
                    e => format!("its authorization server refused to renew the sign-in ({e})"),
                };
                tracing::warn!(app = %self.app, "app {} needs sign-in: {why}", self.app);
                let mut s = self.state.lock().unwrap();
                s.token = None;
                s.has_tokens = false;
                s.needs = Some(why.clone());
                Err(NoToken::SignIn(why))
            }
            Err(e) => Err(NoToken::Failed(format!("renewing its sign-in failed: {e}"))),
        }
    }

    /// A manager for the tokens in the file (its metadata discovered again).
    pub(super) async fn load(&self) -> Result<AuthorizationManager, NoToken> {
        let gone = || {
            let mut s = self.state.lock().unwrap();
            s.has_tokens = false;
            s.needs = Some("its tokens are missing".into());
            NoToken::SignIn("its tokens are missing".into())
        };
        let Some((extra, creds)) = FileStore::read(&self.path, &self.url) else {
            return Err(gone());
        };
        let failed = |e: AuthError| NoToken::Failed(format!("discovering its sign-in: {e}"));
        let mut mgr = AuthorizationManager::new_allowing_private_addresses(self.url.as_str())
            .await
            .map_err(failed)?;
        let res = mgr
            .resolve_metadata_from_challenge(extra.challenge.as_deref())
            .await
            .map_err(failed)?;
        mgr.set_metadata(res.metadata);
        let secret = extra.client_secret.clone();
        let redirect = extra.redirect_uri.clone();
        let client_id = creds.client_id.clone();
        mgr.set_credential_store(FileStore::new(self.path.clone(), extra, Some(creds)));
        if !mgr.initialize_from_store().await.map_err(failed)? {
            return Err(gone());
        }
        if let Some(secret) = secret {
            let cfg = OAuthClientConfig::new(client_id, redirect.unwrap_or(self.url.clone()))
                .with_client_secret(secret);
            mgr.configure_client(cfg).map_err(failed)?;
        }
        Ok(mgr)
    }

    /// The app answered 401 to a request without a token: it needs sign-in.
    pub(crate) fn challenged(&self, www_authenticate: &str) {
        let mut s = self.state.lock().unwrap();
        s.challenge = Some(www_authenticate.to_string());
        if s.needs.is_none() {
            tracing::info!(app = %self.app, "app {} requires OAuth sign-in", self.app);
            s.needs = Some("the app requires OAuth sign-in (it answered 401)".into());
        }
    }

    /// The app refused the token for a missing scope (403 `insufficient_scope`): a scope the
    /// owner's sign-in did not grant means signing in again (the next connect asks for it, from
    /// the challenge); a scope already granted is only this call's refusal.
    pub(crate) fn insufficient(&self, www_authenticate: &str, required: Option<&str>) {
        let granted = FileStore::read(&self.path, &self.url)
            .map(|(_, c)| c.granted_scopes)
            .unwrap_or_default();
        let wanted: Vec<&str> = required.unwrap_or("").split_whitespace().collect();
        if wanted.is_empty() || wanted.iter().all(|w| granted.iter().any(|g| g == w)) {
            return;
        }
        let mut s = self.state.lock().unwrap();
        s.challenge = Some(www_authenticate.to_string());
        tracing::info!(app = %self.app, "app {} asks for more scopes: {}", self.app, wanted.join(" "));
        s.needs = Some(format!(
            "the app asks for more scopes ({}) than its sign-in granted",
            wanted.join(" ")
        ));
    }

    /// The owner connected the app: its manager, with the new tokens, takes over.
    pub(super) async fn signed_in(&self, mgr: AuthorizationManager) {
        let mut m = self.manager.lock().await;
        *m = Some(mgr);
        let mut s = self.state.lock().unwrap();
        s.has_tokens = true;
        s.needs = None;
        s.token = None;
    }
}
