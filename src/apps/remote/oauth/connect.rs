//! Connecting an app (`apps/connect`): discovery, registration (or a client ID metadata
//! document), the authorization URL, and the callback that finishes it (its `state` names one
//! pending connect, single use, 10 minutes).

use super::*;

/// A connect waiting for its callback.
pub(super) struct Pending {
    pub(super) app: String,
    pub(super) path: PathBuf,
    pub(super) oauth: Arc<AppOAuth>,
    pub(super) session: AuthorizationSession,
    pub(super) at: Instant,
}

/// The connects waiting for their callback, by `state`.
pub(super) static PENDING: LazyLock<Mutex<HashMap<String, Pending>>> =
    LazyLock::new(Default::default);

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
    crate::bounded::evict_oldest(&mut *pending, MAX_PENDING - 1, |_, p| Some(p.at));
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
