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
//!
//! The "needs sign-in" state an entry shows is `AppBackend::sign_in`. The owner's `apps/connect`
//! and the browser's callback are the HTTP door's `http/app_connect.rs`.

mod connect;
mod token_file;
mod tokens;

use connect::PENDING;
pub(crate) use connect::{client_metadata, finish, is_public_https, start};
use token_file::{Extra, FileStore, access_token_of, token_field};
pub(crate) use tokens::NoToken;
use tokens::State;

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

// rmcp's trait is declared with `async_trait`: its methods, written out.

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

#[cfg(test)]
mod tests {
    use super::tokens::renew_at;
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
