//! The tokens file, `.datanotes/app-oauth/<app>.json` (0600, written atomically), as rmcp's
//! credential store: read once, kept in memory, bound to the app's address.

use super::*;

/// What the tokens file holds (never answered by any API).
#[derive(serde::Serialize, serde::Deserialize, Clone, Default)]
pub(super) struct Extra {
    /// The app's address the tokens are for: they are sent nowhere else.
    pub(super) url: String,
    /// The app's last `WWW-Authenticate` challenge (discovery starts from it).
    #[serde(default)]
    pub(super) challenge: Option<String>,
    /// A confidential client's secret, when the registration gave one.
    #[serde(default)]
    pub(super) client_secret: Option<String>,
    #[serde(default)]
    pub(super) redirect_uri: Option<String>,
}

#[derive(serde::Serialize, serde::Deserialize)]
pub(super) struct TokensFile {
    #[serde(flatten)]
    pub(super) extra: Extra,
    pub(super) credentials: Option<StoredCredentials>,
}

/// The tokens file as rmcp's credential store: read once, kept in memory, written through
/// `write_private` at each save (atomic, 0600).
#[derive(Clone)]
pub(super) struct FileStore(Arc<FileInner>);

pub(super) struct FileInner {
    pub(super) path: PathBuf,
    pub(super) extra: Extra,
    pub(super) creds: Mutex<Option<StoredCredentials>>,
    /// One refresh at a time (a rotated refresh token is used once).
    pub(super) guard: Arc<tokio::sync::Mutex<()>>,
}

impl FileStore {
    pub(super) fn new(path: PathBuf, extra: Extra, creds: Option<StoredCredentials>) -> FileStore {
        FileStore(Arc::new(FileInner {
            path,
            extra,
            creds: Mutex::new(creds),
            guard: Default::default(),
        }))
    }

    /// The file at `path`, if it holds tokens for `url`.
    pub(super) fn read(path: &Path, url: &str) -> Option<(Extra, StoredCredentials)> {
        let bytes = std::fs::read(path).ok()?;
        let f: TokensFile = serde_json::from_slice(&bytes).ok()?;
        (f.extra.url == url)
            .then_some(())
            .and(f.credentials)
            .filter(|c| c.token_response.is_some())
            .map(|c| (f.extra, c))
    }

    pub(super) fn write(&self, creds: Option<&StoredCredentials>) -> std::io::Result<()> {
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

pub(super) type Fut<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;

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
pub(super) fn token_field(c: &StoredCredentials, field: &str) -> Option<serde_json::Value> {
    let t = c.token_response.as_ref()?;
    serde_json::to_value(t).ok()?.get(field).cloned()
}

pub(super) fn access_token_of(t: &rmcp::transport::auth::OAuthTokenResponse) -> Option<String> {
    serde_json::to_value(t)
        .ok()?
        .get("access_token")?
        .as_str()
        .map(str::to_string)
}
