//! The server: the state both doors share ([`Server`]) and who a request's caller is
//! ([`Server::caller`]).
//!
//! Both doors ([`crate::http`], [`crate::mcp`]) depend on this module, never on each other; the
//! start-up that mounts them is [`crate::start`], above all three.
//!
//! `Server::mcp_caller` is the same for `/mcp`, where an OAuth access token is accepted only for
//! the resource it was issued for; `server::challenge` writes a 401's `WWW-Authenticate`.

use crate::apps::Registry;
use crate::apps::aggregator::Aggregator;
use crate::auth::oauth::{self, OAuth};
use crate::auth::{self, Caller};
use crate::engine::{Actor, Engine};
use crate::error::{Error, Result};
use crate::feed::webhooks::Webhooks;
use crate::ops::Ctx;
use axum::http::{HeaderMap, header};
use std::sync::Arc;

/// The largest request body accepted (the owner's component uploads excepted, see
/// [`crate::http::MAX_COMPONENT_BODY`]).
pub(crate) const MAX_BODY: usize = 8 << 20;

/// What every handler of both doors shares.
pub struct Server {
    /// The database.
    pub engine: Arc<Engine>,
    /// The apps registry (`.datanotes/apps.json`).
    pub apps: Arc<Registry>,
    /// The namespace of engine operations and app tools, and the app backends.
    pub agg: Arc<Aggregator>,
    /// The webhook subscriptions and their deliveries.
    pub webhooks: Arc<Webhooks>,
    /// Set when the server begins to shut down: open streams end so that it can.
    pub closing: tokio::sync::watch::Sender<bool>,
    /// The OAuth authorization server of `/mcp`: clients, grants, tokens.
    pub oauth: Arc<OAuth>,
    /// The owner's read-only metrics tokens.
    pub metrics_tokens: auth::metrics_tokens::MetricsTokens,
    /// The owner's options for WASM apps installed by reference.
    pub sources: crate::apps::source::SourceOptions,
    owner_hash: String,
}

/// The server state as handlers hold it.
pub type Shared = Arc<Server>;

impl Server {
    /// Builds the server state (inside the tokio runtime: webhook deliveries start here).
    /// `oauth_private_clients`: whether OAuth client metadata documents may be fetched from
    /// private and loopback addresses; `sources`: registry credentials and redirects for apps
    /// installed by reference.
    pub fn new(
        engine: Arc<Engine>,
        owner_hash: String,
        oauth_private_clients: bool,
        sources: crate::apps::source::SourceOptions,
    ) -> anyhow::Result<Shared> {
        let apps = Registry::open(&engine.meta_dir)?;
        let oauth = Arc::new(OAuth::open(&engine.meta_dir, oauth_private_clients)?);
        let metrics_tokens = auth::metrics_tokens::MetricsTokens::open(&engine.meta_dir)?;
        let webhooks = Webhooks::start(engine.clone())?;
        let wasm = crate::apps::wasm::WasmRuntime::new(engine.clone())?;
        // Components fetched for plans never confirmed go after a day.
        let swept = crate::apps::source::sweep(
            &wasm.apps_dir,
            |sha| apps.uses_component(sha),
            crate::apps::source::PLAN_KEPT_FOR,
        );
        if swept > 0 {
            tracing::info!("removed {swept} components fetched for plans never confirmed");
        }
        let agg = Aggregator::new(engine.clone(), apps.clone(), wasm);
        agg.start();
        let server = Arc::new(Server {
            engine,
            apps,
            agg,
            webhooks,
            closing: tokio::sync::watch::Sender::new(false),
            oauth,
            metrics_tokens,
            sources,
            owner_hash,
        });
        // The gauges of the metrics (a scrape, an OTLP export) read this server's state.
        let weak = Arc::downgrade(&server);
        crate::telemetry::metrics::set_gauge_source(Box::new(move || {
            let s = weak.upgrade()?;
            Some(crate::telemetry::metrics::GaugeValues {
                apps: s.agg.gauges(),
                semantic_lag: s.engine.semantic_pending().unwrap_or(0),
                feed_subscribers: (crate::feed::waiting() + s.webhooks.count()) as i64,
                grants_active: s.oauth.grants().len() as i64,
            })
        }));
        Ok(server)
    }

    /// The owner's app lifecycle (create, update, upgrade, rollback, delete) on this server's
    /// registry and aggregator.
    pub(crate) fn installer(&self) -> crate::apps::install::Installer<'_> {
        crate::apps::install::Installer {
            engine: &self.engine,
            apps: &self.apps,
            agg: &self.agg,
            sources: &self.sources,
        }
    }

    /// Who holds this token, if anyone.
    pub(crate) fn identify(&self, token: &str) -> Option<Caller> {
        if token.starts_with(auth::OWNER_PREFIX) && auth::matches(token, &self.owner_hash) {
            return Some(Caller::Owner);
        }
        if let Some(name) = self.metrics_tokens.identify(token) {
            return Some(Caller::Metrics(name.into()));
        }
        self.apps.identify(token)
    }

    /// Whether a request carries the owner's token (the listener's reserve connections serve
    /// only the owner and the health check).
    pub(crate) fn is_owner(&self, headers: &HeaderMap) -> bool {
        bearer(headers)
            .and_then(|t| self.identify(t))
            .is_some_and(|c| matches!(c, Caller::Owner))
    }

    /// The caller of an HTTP door request, or the error to answer: its bearer token, then its
    /// actor headers. An OAuth access token is refused here: it is valid only for `/mcp`.
    pub(crate) fn caller(&self, headers: &HeaderMap) -> Result<Ctx> {
        self.caller_at(headers, None)
    }

    /// The caller of a `/mcp` request: a static token, or an OAuth access token issued for
    /// this server's `/mcp` as the request reached it.
    pub(crate) fn mcp_caller(&self, headers: &HeaderMap) -> Result<Ctx> {
        let resource = format!("{}/mcp", base_url(headers));
        self.caller_at(headers, Some(&resource))
    }

    /// The one place a request's token becomes a caller, for both doors: `resource` is the
    /// resource an OAuth access token must be for (`None`: OAuth tokens are not accepted).
    fn caller_at(&self, headers: &HeaderMap, resource: Option<&str>) -> Result<Ctx> {
        let Some(token) = bearer(headers) else {
            return Err(Error::unauthorized("no token").hint(
                "send Authorization: Bearer <token> (the owner token is in .datanotes/owner-token), or connect with OAuth (/mcp only)",
            ));
        };
        let caller = if token.starts_with(oauth::ACCESS_PREFIX) {
            let Some(resource) = resource else {
                return Err(Error::unauthorized(
                    "an OAuth access token is valid only for this server's /mcp",
                )
                .hint("call the operation through /mcp, or use an app or owner token"));
            };
            self.oauth.identify(token, resource).map_err(|why| {
                Error::unauthorized(why.to_string())
                    .rule("invalid_token")
                    .hint("refresh the token, or connect the client again")
            })?
        } else {
            self.identify(token).ok_or_else(|| {
                Error::unauthorized("invalid token")
                    .hint("the token is unknown, was rotated or its app was deleted")
            })?
        };
        let mut ctx = ctx_for(caller, headers);
        // Only a remote app passes on the caller of its tool (the engine sent it): another
        // token's `X-Datanotes-Caller` is not recorded.
        if let Some(app) = ctx.caller.app()
            && ctx.actor.caller.is_some()
            && self.apps.get(app).is_none_or(|r| r.mcp_url.is_none())
        {
            ctx.actor.caller = None;
        }
        Ok(ctx)
    }
}

/// This server's base URL as a request reached it (`scheme://host[:port]`), the issuer of
/// its OAuth tokens and the base of its `/mcp` resource: the `Host` header, over `https`
/// unless the host is `localhost` or an IP address (a name is served through a TLS tunnel or
/// proxy) or the browser's `Origin` (naming this host) or `X-Forwarded-Proto` says otherwise.
pub(crate) fn base_url(headers: &HeaderMap) -> String {
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|h| !h.is_empty() && !h.contains(['/', '@', ' ', '?', '#', '\\']))
        .unwrap_or("localhost");
    let name = match host.strip_prefix('[') {
        Some(rest) => rest.split(']').next().unwrap_or(""),
        None => host.rsplit_once(':').map_or(host, |(n, _)| n),
    };
    let local = name.eq_ignore_ascii_case("localhost") || name.parse::<std::net::IpAddr>().is_ok();
    // A browser's `Origin` naming this very host says the scheme it used.
    let origin = headers
        .get(header::ORIGIN)
        .and_then(|o| o.to_str().ok())
        .and_then(|o| o.split_once("://"))
        .filter(|(_, rest)| rest.eq_ignore_ascii_case(host))
        .map(|(scheme, _)| scheme.to_ascii_lowercase());
    let forwarded = headers
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .map(|v| v.trim().to_ascii_lowercase());
    let scheme = match origin.as_deref().or(forwarded.as_deref()) {
        Some("https") => "https",
        Some("http") => "http",
        _ if local => "http",
        _ => "https",
    };
    format!("{scheme}://{}", host.to_ascii_lowercase())
}

/// The `WWW-Authenticate` of a `/mcp` 401 (RFC 9728 §5.1): where to start.
pub(crate) fn challenge(headers: &HeaderMap, invalid: Option<&str>) -> axum::http::HeaderValue {
    let base = base_url(headers);
    let mut v =
        format!("Bearer resource_metadata=\"{base}/.well-known/oauth-protected-resource/mcp\"");
    if let Some(why) = invalid {
        let why: String = why
            .chars()
            .filter(|c| *c != '"' && *c != '\\' && !c.is_control())
            .collect();
        v.push_str(&format!(
            ", error=\"invalid_token\", error_description=\"{why}\""
        ));
    }
    axum::http::HeaderValue::from_str(&v)
        .unwrap_or_else(|_| axum::http::HeaderValue::from_static("Bearer"))
}

/// The bearer token of a request, if any.
pub(crate) fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            // The scheme is case-insensitive (RFC 9110): `Bearer`, `bearer`, `BEARER`.
            let (scheme, token) = v.trim_start().split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then_some(token)
        })
        .map(str::trim)
}

/// The actor of a call: `X-Datanotes-Actor: harness / model`, `X-Datanotes-Session`, and the caller.
fn ctx_for(caller: Caller, headers: &HeaderMap) -> Ctx {
    let h = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
            .filter(|s| !s.is_empty())
    };
    let (harness, model) = match (&caller, h("x-datanotes-actor")) {
        // An OAuth client is named by the name it registered with (shown on the consent page,
        // never another principal's: `clients::check_name`): what its `X-Datanotes-Actor`
        // says follows that name (`name / what it says`), and never replaces it.
        (Caller::Grant(g), said) => (Some(g.client.clone()), said.map(Into::into)),
        (_, Some(a)) => match a.split_once('/') {
            Some((x, y)) => (
                Some(x.trim().to_string()).filter(|s| !s.is_empty()),
                Some(y.trim().to_string()).filter(|s| !s.is_empty()),
            ),
            None => (Some(a.to_string()), None),
        },
        (_, None) => (None, None),
    };
    // Actor::new cuts each field at 200 characters.
    let actor = Actor::new(
        harness,
        model,
        caller.app().map(Into::into),
        h("x-datanotes-session").map(Into::into),
        Some(caller.token_name()),
    )
    // A remote app's write on behalf of a caller of its tool: the caller as the engine sent
    // it (`X-Datanotes-Caller`), kept as the app says it (`Server::caller` drops it for a token
    // that is not a remote app's).
    .with_caller(caller.app().and(h("x-datanotes-caller")).map(Into::into));
    Ctx::new(caller, actor)
}
