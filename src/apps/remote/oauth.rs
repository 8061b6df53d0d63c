//! A remote app whose MCP server requires OAuth 2.1: the engine is the OAuth client, with
//! rmcp's `AuthorizationManager` doing the protocol (discovery of the protected-resource and
//! authorization-server metadata, dynamic client registration or a client ID metadata
//! document, PKCE S256, the `resource` parameter, the code exchange and refreshes).
//!
//! - An app registered without `mcp_token` that answers 401 with a `WWW-Authenticate: Bearer`
//!   challenge needs sign-in ([`AppOAuth::challenged`]). The owner connects it
//!   ([`start`]: `apps/connect`, which answers the authorization URL); the browser comes back
//!   to the callback ([`finish`]), whose `state` names one pending connect (single use, 10
//!   minutes).
//! - The tokens are kept in `.datanotes/app-oauth/<app>.json` (0600, written atomically), bound
//!   to the app's `mcp_url`: never sent to another address, never answered by any API.
//! - Every request to the app carries the access token ([`AppOAuth::bearer`]), refreshed before
//!   it expires and once after a 401 ([`AppOAuth::rejected`]). A refresh the authorization
//!   server refuses (or no refresh token) means the owner must connect the app again.

use rmcp::transport::auth::{
    AuthError, AuthorizationManager, AuthorizationMetadataSource, AuthorizationRequest,
    AuthorizationSession, CredentialRefreshGuard, CredentialStore, OAuthClientConfig,
    StoredCredentials,
};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How long a connect waits for its callback.
const PENDING_FOR: Duration = Duration::from_secs(600);
/// The most connects waiting for their callback at once (the oldest goes first).
const MAX_PENDING: usize = 64;
/// The name the engine registers under.
const CLIENT_NAME: &str = "datanotes";

/// What the tokens file holds (never answered by any API).
#[derive(serde::Serialize, serde::Deserialize, Clone, Default)]
struct Extra {
    /// The app's address the tokens are for: they are sent nowhere else.
    url: String,
    /// The app's last `WWW-Authenticate` challenge (discovery starts from it).
    #[serde(default)]
    challenge: Option<String>,
    /// A confidential client's secret, when the registration gave one.
    #[serde(default)]
    client_secret: Option<String>,
    #[serde(default)]
    redirect_uri: Option<String>,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct TokensFile {
    #[serde(flatten)]
    extra: Extra,
    credentials: Option<StoredCredentials>,
}

/// The tokens file as rmcp's credential store: read once, kept in memory, written through
/// `write_private` at each save (atomic, 0600).
#[derive(Clone)]
struct FileStore(Arc<FileInner>);

struct FileInner {
    path: PathBuf,
    extra: Extra,
    creds: Mutex<Option<StoredCredentials>>,
    /// One refresh at a time (a rotated refresh token is used once).
    guard: Arc<tokio::sync::Mutex<()>>,
}

impl FileStore {
    fn new(path: PathBuf, extra: Extra, creds: Option<StoredCredentials>) -> FileStore {
        FileStore(Arc::new(FileInner {
            path,
            extra,
            creds: Mutex::new(creds),
            guard: Default::default(),
        }))
    }

    /// The file at `path`, if it holds tokens for `url`.
    fn read(path: &Path, url: &str) -> Option<(Extra, StoredCredentials)> {
        let bytes = std::fs::read(path).ok()?;
        let f: TokensFile = serde_json::from_slice(&bytes).ok()?;
        (f.extra.url == url)
            .then_some(())
            .and(f.credentials)
            .filter(|c| c.token_response.is_some())
            .map(|c| (f.extra, c))
    }

    fn write(&self, creds: Option<&StoredCredentials>) -> std::io::Result<()> {
        if let Some(d) = self.0.path.parent() {
            std::fs::create_dir_all(d)?;
            crate::engine::lock::set_mode(d, 0o700)?;
        }
        let f = serde_json::json!({
            "url": self.0.extra.url,
            "challenge": self.0.extra.challenge,
            "client_secret": self.0.extra.client_secret,
            "redirect_uri": self.0.extra.redirect_uri,
            "credentials": creds,
        });
        crate::auth::write_private(&self.0.path, f.to_string().as_bytes())
    }
}

type Fut<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;

// rmcp's trait is declared with `async_trait`: its methods, written out.
impl CredentialStore for FileStore {
    fn load<'a, 'b>(&'a self) -> Fut<'b, Result<Option<StoredCredentials>, AuthError>>
    where
        'a: 'b,
        Self: 'b,
    {
        Box::pin(async move { Ok(self.0.creds.lock().unwrap().clone()) })
    }

    fn save<'a, 'b>(&'a self, credentials: StoredCredentials) -> Fut<'b, Result<(), AuthError>>
    where
        'a: 'b,
        Self: 'b,
    {
        Box::pin(async move {
            self.write(Some(&credentials))
                .map_err(|e| AuthError::CredentialStoreError(format!("writing the tokens: {e}")))?;
            *self.0.creds.lock().unwrap() = Some(credentials);
            Ok(())
        })
    }

    fn clear<'a, 'b>(&'a self) -> Fut<'b, Result<(), AuthError>>
    where
        'a: 'b,
        Self: 'b,
    {
        Box::pin(async move {
            let _ = std::fs::remove_file(&self.0.path);
            *self.0.creds.lock().unwrap() = None;
            Ok(())
        })
    }

    fn acquire_refresh_guard<'a, 'b>(
        &'a self,
    ) -> Fut<'b, Result<Option<CredentialRefreshGuard>, AuthError>>
    where
        'a: 'b,
        Self: 'b,
    {
        Box::pin(async move {
            let g = self.0.guard.clone().lock_owned().await;
            Ok(Some(CredentialRefreshGuard::new(g)))
        })
    }
}

/// A token response's fields, read through its JSON (`access_token`, `expires_in`).
fn token_field(c: &StoredCredentials, field: &str) -> Option<serde_json::Value> {
    let t = c.token_response.as_ref()?;
    serde_json::to_value(t).ok()?.get(field).cloned()
}

fn access_token_of(t: &rmcp::transport::auth::OAuthTokenResponse) -> Option<String> {
    serde_json::to_value(t)
        .ok()?
        .get("access_token")?
        .as_str()
        .map(str::to_string)
}

/// Why a request to the app could not carry a token.
#[derive(Debug, Clone)]
pub(crate) enum NoToken {
    /// The owner must connect the app (again): why.
    SignIn(String),
    /// Renewing the token failed for now (the authorization server is not reachable): why.
    Failed(String),
}

#[derive(Default)]
struct State {
    /// The access token and when it must be renewed (Unix seconds).
    token: Option<(String, u64)>,
    /// Tokens for the app's address exist.
    has_tokens: bool,
    /// Why the owner must sign in, if they must.
    needs: Option<String>,
    /// The app's last 401 challenge.
    challenge: Option<String>,
}

/// One app's OAuth state, shared by its backends (one per app and `mcp_url`, see [`for_app`]).
pub(crate) struct AppOAuth {
    app: String,
    url: String,
    path: PathBuf,
    state: Mutex<State>,
    /// The manager that refreshes (built from the file at first use), one refresh at a time.
    manager: tokio::sync::Mutex<Option<AuthorizationManager>>,
}

/// Every app's OAuth state in this process, by tokens file.
static HUB: LazyLock<Mutex<HashMap<PathBuf, Arc<AppOAuth>>>> = LazyLock::new(Default::default);

/// Where an app's tokens are kept: `.datanotes/app-oauth/<app>.json`.
pub(crate) fn tokens_path(meta_dir: &Path, app: &str) -> PathBuf {
    meta_dir.join("app-oauth").join(format!("{app}.json"))
}

/// The OAuth state of `app` at `url` (shared while the app keeps its address).
pub(crate) fn for_app(meta_dir: &Path, app: &str, url: &str) -> Arc<AppOAuth> {
    let path = tokens_path(meta_dir, app);
    let mut hub = HUB.lock().unwrap();
    if let Some(o) = hub.get(&path)
        && o.url == url
    {
        return o.clone();
    }
    let has_tokens = FileStore::read(&path, url).is_some();
    let o = Arc::new(AppOAuth {
        app: app.to_string(),
        url: url.to_string(),
        path: path.clone(),
        state: Mutex::new(State {
            has_tokens,
            ..State::default()
        }),
        manager: Default::default(),
    });
    hub.insert(path, o.clone());
    o
}

/// An app was deleted: its tokens go, and any connect of it still waiting.
pub(crate) fn forget(meta_dir: &Path, app: &str) {
    let path = tokens_path(meta_dir, app);
    let _ = std::fs::remove_file(&path);
    HUB.lock().unwrap().remove(&path);
    PENDING.lock().unwrap().retain(|_, p| p.path != path);
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs()
}

/// When a token just obtained must be renewed: rmcp's own margin before it expires
/// (`min(30 s, half its life)`, at least 1 s); never, without an expiry (a 401 renews it).
fn renew_at(c: &StoredCredentials) -> u64 {
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
    fn took(&self, r: Result<String, AuthError>) -> Result<String, NoToken> {
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
    async fn load(&self) -> Result<AuthorizationManager, NoToken> {
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
    async fn signed_in(&self, mgr: AuthorizationManager) {
        let mut m = self.manager.lock().await;
        *m = Some(mgr);
        let mut s = self.state.lock().unwrap();
        s.has_tokens = true;
        s.needs = None;
        s.token = None;
    }
}

/// A connect waiting for its callback.
struct Pending {
    app: String,
    path: PathBuf,
    oauth: Arc<AppOAuth>,
    session: AuthorizationSession,
    at: Instant,
}

/// The connects waiting for their callback, by `state`.
static PENDING: LazyLock<Mutex<HashMap<String, Pending>>> = LazyLock::new(Default::default);

/// Whether `base` is a public https address (a client ID metadata document must be reachable
/// by the authorization server there).
pub(crate) fn is_public_https(base: &str) -> bool {
    let Ok(u) = reqwest::Url::parse(base) else {
        return false;
    };
    let Some(host) = u.host_str().filter(|_| u.scheme() == "https") else {
        return false;
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    match host.parse::<std::net::IpAddr>() {
        Ok(ip) => crate::outbound::is_public(ip),
        Err(_) => {
            let d = host.trim_end_matches('.').to_ascii_lowercase();
            d.contains('.')
                && !(d.ends_with(".localhost")
                    || d.ends_with(".local")
                    || d.ends_with(".internal")
                    || d.ends_with(".home.arpa"))
        }
    }
}

/// Starts connecting `app` (at `url`): discovery, registration (a client ID metadata document
/// at `client_metadata_url` when the authorization server takes one, else dynamic client
/// registration), PKCE; answers the authorization URL for the owner's browser.
pub(crate) async fn start(
    meta_dir: &Path,
    app: &str,
    url: &str,
    redirect_uri: &str,
    client_metadata_url: Option<&str>,
) -> Result<String, String> {
    let oauth = for_app(meta_dir, app, url);
    let challenge = oauth.state.lock().unwrap().challenge.clone();
    let mut mgr = AuthorizationManager::new_allowing_private_addresses(url)
        .await
        .map_err(|e| format!("the app's address cannot be used for sign-in: {e}"))?;
    let res = mgr
        .resolve_metadata_from_challenge(challenge.as_deref())
        .await
        .map_err(|e| format!("discovering the app's authorization server failed: {e}"))?;
    if res.source == AuthorizationMetadataSource::LegacyEndpointFallback {
        return Err(format!(
            "{url} publishes no OAuth metadata (RFC 9728 or RFC 8414): it does not use OAuth \
             sign-in; give its token as mcp_token instead"
        ));
    }
    let cimd = res
        .metadata
        .additional_fields
        .get("client_id_metadata_document_supported")
        .and_then(serde_json::Value::as_bool)
        .unwrap_or(false);
    mgr.set_metadata(res.metadata);
    let mut extra = Extra {
        url: url.to_string(),
        challenge,
        client_secret: None,
        redirect_uri: Some(redirect_uri.to_string()),
    };
    let mut request = AuthorizationRequest::new(redirect_uri).with_client_name(CLIENT_NAME);
    match client_metadata_url.filter(|_| cimd) {
        Some(doc) => {
            request = request
                .with_client_metadata_url(doc)
                .with_application_type("web");
        }
        None => {
            // Registered here (rmcp's dynamic client registration) to keep a secret it may give.
            let scopes = mgr.select_scopes(None, &[]);
            let refs: Vec<&str> = scopes.iter().map(String::as_str).collect();
            let cfg = mgr
                .register_client(CLIENT_NAME, redirect_uri, &refs)
                .await
                .map_err(|e| format!("registering with the app's authorization server: {e}"))?;
            request = request.with_preregistered_client(cfg.client_id.clone());
            if let Some(s) = cfg.client_secret {
                request = request.with_client_secret(s.clone());
                extra.client_secret = Some(s);
            }
        }
    }
    let path = tokens_path(meta_dir, app);
    mgr.set_credential_store(FileStore::new(path.clone(), extra, None));
    let session = AuthorizationSession::new(mgr, request)
        .await
        .map_err(|(_, e)| format!("starting the sign-in failed: {e}"))?;
    let auth_url = session.get_authorization_url().to_string();
    let state = reqwest::Url::parse(&auth_url)
        .ok()
        .and_then(|u| {
            u.query_pairs()
                .find(|(k, _)| k == "state")
                .map(|(_, v)| v.into_owned())
        })
        .ok_or("the authorization URL has no state")?;
    let mut pending = PENDING.lock().unwrap();
    pending.retain(|_, p| p.at.elapsed() < PENDING_FOR);
    while pending.len() >= MAX_PENDING {
        let Some(k) = pending
            .iter()
            .min_by_key(|(_, p)| p.at)
            .map(|(k, _)| k.clone())
        else {
            break;
        };
        pending.remove(&k);
    }
    pending.insert(
        state,
        Pending {
            app: app.to_string(),
            path,
            oauth,
            session,
            at: Instant::now(),
        },
    );
    Ok(auth_url)
}

/// The owner's browser came back with `code` (or `error`) for `state`: the code is exchanged
/// for tokens, which are saved. Answers the app's name, or why it failed.
pub(crate) async fn finish(
    meta_dir: &Path,
    state: &str,
    code: Option<&str>,
    error: Option<&str>,
    iss: Option<&str>,
) -> Result<String, String> {
    let p = {
        let mut pending = PENDING.lock().unwrap();
        match pending.get(state) {
            Some(p) if p.path.starts_with(meta_dir) => pending.remove(state),
            _ => None,
        }
    };
    let Some(p) = p else {
        return Err(
            "this sign-in is unknown or was already used: start it again with the \
                    Connect button of the app in the console"
                .into(),
        );
    };
    if p.at.elapsed() >= PENDING_FOR {
        return Err(format!(
            "this sign-in of app {} expired (10 minutes): start it again with the Connect button",
            p.app
        ));
    }
    if let Some(e) = error {
        return Err(format!(
            "the app's authorization server did not grant access to app {} ({e})",
            p.app
        ));
    }
    let Some(code) = code else {
        return Err("the callback has no code".into());
    };
    // The app's address changed meanwhile: these tokens would be for the old one.
    let current = HUB.lock().unwrap().get(&p.path).cloned();
    let Some(oauth) = current.filter(|o| o.url == p.oauth.url) else {
        return Err(format!(
            "app {} was deleted or changed its address during its sign-in: connect it again",
            p.app
        ));
    };
    p.session
        .handle_callback_with_issuer(code, state, iss)
        .await
        .map_err(|e| format!("exchanging the code of app {} failed: {e}", p.app))?;
    // The backend of the app now uses these tokens.
    oauth.signed_in(p.session.auth_manager).await;
    tracing::info!(app = %p.app, "app {} is connected (OAuth)", p.app);
    Ok(p.app)
}

/// A client ID metadata document for the engine at `base` (served at
/// `<base>/datanotes/apps/oauth/client`).
pub(crate) fn client_metadata(base: &str) -> serde_json::Value {
    serde_json::json!({
        "client_id": format!("{base}/datanotes/apps/oauth/client"),
        "client_name": CLIENT_NAME,
        "redirect_uris": [format!("{base}/datanotes/apps/oauth/callback")],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": "none",
        "application_type": "web",
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_id_metadata_document_only_from_a_public_https_address() {
        for yes in [
            "https://notes.example.com",
            "https://notes.example.com:8443",
            "https://8.8.8.8",
        ] {
            assert!(is_public_https(yes), "{yes}");
        }
        for no in [
            "http://notes.example.com",
            "https://localhost:7777",
            "https://127.0.0.1:7777",
            "https://192.168.1.5",
            "https://10.0.0.1",
            "https://[::1]:7777",
            "https://[fd00::1]",
            "https://100.64.0.1",
            "https://0.1.2.3",
            "https://[64:ff9b::a00:1]",
            "https://nas.local",
            "https://box.internal",
            "https://intranet",
        ] {
            assert!(!is_public_https(no), "{no}");
        }
    }

    fn creds(v: serde_json::Value) -> StoredCredentials {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn a_token_is_renewed_before_it_expires() {
        let c = |expires: serde_json::Value| {
            creds(serde_json::json!({
                "client_id": "c",
                "token_response": {"access_token": "a", "token_type": "bearer", "expires_in": expires},
                "token_received_at": 1000,
            }))
        };
        // An hour: 30 s before; 2 s: 1 s before; no expiry: never (a 401 renews it).
        assert_eq!(renew_at(&c(serde_json::json!(3600))), 1000 + 3600 - 30);
        assert_eq!(renew_at(&c(serde_json::json!(2))), 1000 + 2 - 1);
        assert_eq!(renew_at(&c(serde_json::Value::Null)), u64::MAX);
    }

    #[test]
    fn tokens_are_for_one_address() {
        let dir = tempfile::tempdir().unwrap();
        let path = tokens_path(dir.path(), "app");
        let c = creds(serde_json::json!({
            "client_id": "c",
            "token_response": {"access_token": "secret", "token_type": "bearer"},
        }));
        let extra = Extra {
            url: "http://127.0.0.1:1/mcp".into(),
            ..Extra::default()
        };
        FileStore::new(path.clone(), extra, None)
            .write(Some(&c))
            .unwrap();
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(&path).unwrap().permissions(),
        );
        assert_eq!(mode & 0o777, 0o600);
        assert!(FileStore::read(&path, "http://127.0.0.1:1/mcp").is_some());
        assert!(FileStore::read(&path, "http://127.0.0.1:2/mcp").is_none());
        let o = for_app(dir.path(), "app", "http://127.0.0.1:2/mcp");
        assert!(!o.state.lock().unwrap().has_tokens);
        let o = for_app(dir.path(), "app", "http://127.0.0.1:1/mcp");
        assert!(o.state.lock().unwrap().has_tokens);
        forget(dir.path(), "app");
        assert!(!path.exists());
    }
}
