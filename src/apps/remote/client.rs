//! The HTTP client of a remote app's sessions.
//!
//! It adds the caller's actor to each call's request, and the app's OAuth access token when it has
//! one, and writes a session's `tasks` capability into its `initialize`. The call session keeps up
//! to 2 idle connections to its app for 4 s, until an answer takes 30 ms or more: then it opens a
//! new connection per request for that app, as rmcp's client does (a kept connection to an app that
//! writes an answer in two segments with Nagle on waits ~40 ms for a delayed ACK).

use futures_util::StreamExt;
use futures_util::stream::BoxStream;
use http::HeaderName;
use rmcp::model::{ClientJsonRpcMessage, ClientRequest};
use rmcp::transport::streamable_http_client::{
    SseError, StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
    StreamableHttpResponseLimits,
};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// The actor (`X-Datanotes-Actor`) and the calling token's name (`X-Datanotes-Caller`) of one
/// tool call, carried in the request's extensions to [`ActorClient`].
#[derive(Debug, Clone)]
pub(super) struct ActorHeader(
    pub(super) Option<http::HeaderValue>,
    pub(super) Option<http::HeaderValue>,
    /// The call's trace context (`traceparent`, `tracestate`), export on.
    pub(super) Vec<(HeaderName, http::HeaderValue)>,
);

/// The HTTP client of a remote app's sessions: reqwest's, which adds the caller's actor
/// (`X-Datanotes-Actor`) to the request of each tool call. The actor travels per request, so
/// one session serves every caller.
/// It also notes an answer cut at the response limits (`too_big`): rmcp's session then only
/// says that the connection closed.
/// It also notes the session id and headers its session posts with ([`Route`]), so that calls
/// can be posted on the caller's own task (see [`RemoteApp::call_direct`]).
///
/// The call session's client keeps its connection to the app open between calls (`pooled`),
/// while the app's answers come fast. A kept connection is only safe from stalls when the app
/// sends each answer in one write or sets `TCP_NODELAY`: an app that writes an answer in two
/// small writes with Nagle's algorithm on (rmcp's SSE server behind a plain `axum::serve`
/// writes a priming event, then the result) waits for the engine's delayed ACK, ~40 ms per call
/// on a kept connection (a new connection's first segments are acknowledged at once). So the
/// first call of an app that takes [`SLOW_ANSWER`] or more turns the kept connections off for
/// that app (`reuse`, shared by its sessions): a new connection per request, as rmcp's own
/// client does. The listing session never keeps one (it lists rarely).
#[derive(Clone)]
pub(super) struct ActorClient {
    /// A client that opens a new connection for every request.
    fresh: reqwest::Client,
    /// A client that keeps up to [`IDLE_PER_APP`] idle connections to the app; used while
    /// `reuse` holds.
    pooled: Option<reqwest::Client>,
    reuse: Arc<AtomicBool>,
    too_big: Arc<AtomicBool>,
    route: Arc<std::sync::Mutex<Option<Route>>>,
    /// Notified when the route is noted.
    routed: Arc<tokio::sync::Notify>,
    /// The app's OAuth sign-in: every request carries its access token (see [`Self::authed`]).
    oauth: Option<Arc<super::oauth::AppOAuth>>,
    /// The session's standalone stream (`GET`) was answered (opened, or refused by an app
    /// that has none): until then, what the app sends outside a request may be lost.
    standalone: Arc<tokio::sync::watch::Sender<bool>>,
    /// The `tasks` capability the session declares (MCP 2025-11-25, which rmcp's types do not
    /// carry): written into its `initialize` (see [`Self::declare`]).
    tasks: Option<serde_json::Value>,
}

/// The most idle connections kept open to one app, between its calls.
const IDLE_PER_APP: usize = 2;
/// How long an idle connection to an app is kept: shorter than the usual keep-alive of an
/// HTTP server (5 s in uvicorn and Node), so that the engine closes it before the app does and
/// never sends a call on a connection the app is closing (such a call would fail: a call is
/// never sent twice).
const IDLE_TIMEOUT: Duration = Duration::from_secs(4);
/// An answer that took this long may have waited for a delayed ACK (see [`ActorClient`]):
/// `DATANOTES_APP_SLOW_ANSWER_MS`, 30 ms by default (a delayed ACK is at least 40 ms).
static SLOW_ANSWER: std::sync::LazyLock<Duration> =
    std::sync::LazyLock::new(|| crate::knobs::ms("DATANOTES_APP_SLOW_ANSWER_MS", 30));

/// Where and how rmcp's session posts once it is open: its `Mcp-Session-Id` (none when the app
/// is stateless) and its headers (`MCP-Protocol-Version`, the custom ones).
#[derive(Clone)]
pub(super) struct Route {
    pub(super) session: Option<Arc<str>>,
    pub(super) headers: HashMap<HeaderName, http::HeaderValue>,
}

/// The protocol versions whose requests carry no per-message headers: a call posted directly
/// needs only the session's headers. (A later version's calls go through rmcp's session.)
const DIRECT_VERSIONS: [&str; 4] = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];

/// A header that belongs to one message (SEP-2243), not to its session.
fn per_message(name: &str) -> bool {
    name == "mcp-method" || name == "mcp-name" || name.starts_with("mcp-param-")
}

impl ActorClient {
    /// Notes the route of a message rmcp's session posts (any but `initialize`).
    fn note(
        &self,
        message: &ClientJsonRpcMessage,
        session: &Option<Arc<str>>,
        headers: &HashMap<HeaderName, http::HeaderValue>,
    ) {
        if let rmcp::model::JsonRpcMessage::Request(r) = message
            && matches!(r.request, ClientRequest::InitializeRequest(_))
        {
            return;
        }
        // By `HeaderName`: a `&str` key hashes differently and is never found (so a session of
        // 2026-07-28 was taken for one of an earlier version, and its calls went out with the
        // `Mcp-Method` of `notifications/initialized`).
        let known = headers
            .get(&HeaderName::from_static("mcp-protocol-version"))
            .is_none_or(|v| DIRECT_VERSIONS.iter().any(|k| v.as_bytes() == k.as_bytes()));
        // A route carries the session's headers, never one message's (SEP-2243).
        let route = known.then(|| Route {
            session: session.clone(),
            headers: headers
                .iter()
                .filter(|(k, _)| !per_message(k.as_str()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        });
        *self.route.lock().unwrap() = route;
        self.routed.notify_waiters();
    }

    pub(super) fn route(&self) -> Option<Route> {
        self.route.lock().unwrap().clone()
    }

    /// The route of a session just opened at a protocol version that has one
    /// ([`DIRECT_VERSIONS`]): rmcp's worker posts `notifications/initialized`, which notes it, in
    /// its own time; waited for up to `limit`.
    pub(super) async fn route_soon(&self, version: &str, limit: Duration) -> Option<Route> {
        let routed = self.routed.notified();
        if let Some(r) = self.route() {
            return Some(r);
        }
        if !DIRECT_VERSIONS.contains(&version) {
            return None;
        }
        let _ = tokio::time::timeout(limit, routed).await;
        self.route()
    }

    /// A client; `reuse`: one that keeps connections open while that flag holds; `policy`: the
    /// addresses it may connect to (the outbound client: each new connection resolves the
    /// app's host again under it; no system proxy).
    pub(super) fn new(
        too_big: Arc<AtomicBool>,
        reuse: Option<Arc<AtomicBool>>,
        oauth: Option<Arc<super::oauth::AppOAuth>>,
        policy: crate::outbound::Policy,
    ) -> ActorClient {
        // No redirects; reqwest sets TCP_NODELAY on its side. A client that cannot be built
        // connects nowhere (reqwest's default client would ignore the policy).
        let build = |idle: usize| {
            crate::outbound::builder(policy)
                .pool_max_idle_per_host(idle)
                .pool_idle_timeout(IDLE_TIMEOUT)
                .build()
                .unwrap_or_else(|_| nowhere())
        };
        ActorClient {
            fresh: build(0),
            pooled: reuse.is_some().then(|| build(IDLE_PER_APP)),
            reuse: reuse.unwrap_or_default(),
            too_big,
            route: Arc::new(std::sync::Mutex::new(None)),
            routed: Default::default(),
            oauth,
            standalone: Arc::new(tokio::sync::watch::Sender::new(false)),
            tasks: None,
        }
    }

    /// The client of a session that declares `tasks` (the capability as the agent declared
    /// it), if any.
    pub(super) fn declaring_tasks(mut self, tasks: Option<serde_json::Value>) -> ActorClient {
        self.tasks = tasks;
        self
    }

    /// The message posted for `message`: the session's `initialize` declares its `tasks`
    /// capability (written as JSON: rmcp's capability type has no such field); any other goes
    /// as it is.
    fn declare(&self, message: ClientJsonRpcMessage) -> ClientJsonRpcMessage {
        let Some(tasks) = &self.tasks else {
            return message;
        };
        let rmcp::model::JsonRpcMessage::Request(r) = &message else {
            return message;
        };
        let ClientRequest::InitializeRequest(init) = &r.request else {
            return message;
        };
        let Ok(mut params) = serde_json::to_value(&init.params) else {
            return message;
        };
        params["capabilities"]["tasks"] = tasks.clone();
        let custom = rmcp::model::CustomRequest::new("initialize", Some(params));
        ClientJsonRpcMessage::request(ClientRequest::CustomRequest(custom), r.id.clone())
    }

    /// Waits (up to `limit`) until the session's standalone stream was answered.
    pub(super) async fn standalone_open(&self, limit: Duration) {
        let mut rx = self.standalone.subscribe();
        let _ = tokio::time::timeout(limit, rx.wait_for(|open| *open)).await;
    }

    fn standalone_answered(&self) {
        self.standalone.send_replace(true);
    }

    /// The client to post with now.
    pub(super) fn http(&self) -> &reqwest::Client {
        match &self.pooled {
            Some(p) if self.reuse.load(Ordering::Relaxed) => p,
            _ => &self.fresh,
        }
    }

    /// Whether requests go over kept connections.
    pub(super) fn reusing(&self) -> bool {
        self.pooled.is_some() && self.reuse.load(Ordering::Relaxed)
    }

    /// Notes how long a call's answer took: a slow one turns the kept connections off.
    pub(super) fn answered_in(&self, took: Duration) {
        if took >= *SLOW_ANSWER && self.reuse.swap(false, Ordering::Relaxed) {
            tracing::debug!("a slow answer: new connections from now on");
        }
    }

    /// Sends a request with the app's OAuth access token (renewed first when it is about to
    /// expire): a 401 renews it once and sends the request again (the app did not run it); a
    /// 401 to a request without a token means the app needs sign-in. An app without OAuth is
    /// sent `given` (its `mcp_token`, or none), and `args` without a copy: `send` gets the
    /// request's owned arguments, cloned only for an app that may need the second send.
    pub(super) async fn authed<A, T, F, Fut>(
        &self,
        given: Option<String>,
        args: A,
        send: F,
    ) -> Result<T, HttpErr>
    where
        A: Clone,
        F: Fn(Option<String>, A) -> Fut,
        Fut: std::future::Future<Output = Result<T, HttpErr>>,
    {
        use super::oauth::NoToken;
        use rmcp::transport::auth::AuthError;
        let Some(o) = &self.oauth else {
            return send(given, args).await;
        };
        let token = o.bearer().await.map_err(|e| {
            StreamableHttpError::Auth(match e {
                NoToken::SignIn(_) => AuthError::AuthorizationRequired,
                NoToken::Failed(why) => AuthError::TokenRefreshFailed(why),
            })
        })?;
        match send(token.clone(), args.clone()).await {
            Err(StreamableHttpError::AuthRequired(e)) => match token {
                Some(t) => match o.rejected(&t).await {
                    Ok(n) => send(Some(n), args).await,
                    Err(_) => Err(StreamableHttpError::AuthRequired(e)),
                },
                None => {
                    o.challenged(&e.www_authenticate_header);
                    Err(StreamableHttpError::AuthRequired(e))
                }
            },
            Err(StreamableHttpError::InsufficientScope(e)) => {
                o.insufficient(&e.www_authenticate_header, e.required_scope.as_deref());
                Err(StreamableHttpError::InsufficientScope(e))
            }
            r => r,
        }
    }

    /// Notes an answer (or an SSE event) over the response limits.
    fn watch(
        &self,
        r: Result<StreamableHttpPostResponse, HttpErr>,
    ) -> Result<StreamableHttpPostResponse, HttpErr> {
        match r {
            Err(e @ StreamableHttpError::ResponseBodyTooLarge { .. }) => {
                self.too_big.store(true, Ordering::Relaxed);
                Err(e)
            }
            Ok(StreamableHttpPostResponse::Sse(stream, sid)) => {
                let flag = self.too_big.clone();
                let stream = stream.inspect(move |item| {
                    if let Err(e) = item
                        && e.to_string().contains("exceeded the maximum size")
                    {
                        flag.store(true, Ordering::Relaxed);
                    }
                });
                Ok(StreamableHttpPostResponse::Sse(Box::pin(stream), sid))
            }
            r => r,
        }
    }
}

/// A client that connects to no address (a guard that refuses every one), should the outbound
/// client fail to build.
fn nowhere() -> reqwest::Client {
    struct Nowhere;
    impl crate::outbound::Lookup for Nowhere {
        fn lookup(
            &self,
            host: String,
        ) -> futures_util::future::BoxFuture<'static, std::io::Result<Vec<std::net::IpAddr>>>
        {
            Box::pin(async move { Err(std::io::Error::other(format!("{host}: no HTTP client"))) })
        }
    }
    crate::outbound::builder_with(crate::outbound::Policy::Public, Arc::new(Nowhere))
        .build()
        .unwrap_or_default()
}

/// The headers of a message: the custom ones, plus the actor of a tool call.
fn with_actor(
    message: &ClientJsonRpcMessage,
    mut headers: HashMap<HeaderName, http::HeaderValue>,
) -> HashMap<HeaderName, http::HeaderValue> {
    if let rmcp::model::JsonRpcMessage::Request(r) = message
        && let ClientRequest::CallToolRequest(c) = &r.request
        && let Some(a) = c.extensions.get::<ActorHeader>()
    {
        if let Some(v) = &a.0 {
            headers.insert(HeaderName::from_static("x-datanotes-actor"), v.clone());
        }
        if let Some(v) = &a.1 {
            headers.insert(HeaderName::from_static("x-datanotes-caller"), v.clone());
        }
        for (k, v) in &a.2 {
            headers.insert(k.clone(), v.clone());
        }
    }
    headers
}

pub(super) type HttpErr = StreamableHttpError<reqwest::Error>;

/// What a message is posted with: the URL, the message, the session and the headers.
type PostArgs = (
    Arc<str>,
    ClientJsonRpcMessage,
    Option<Arc<str>>,
    HashMap<HeaderName, http::HeaderValue>,
);

impl ActorClient {
    /// A message about to be posted: noted, given its caller's actor headers, and declared.
    fn prepare(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        custom_headers: HashMap<HeaderName, http::HeaderValue>,
    ) -> PostArgs {
        self.note(&message, &session_id, &custom_headers);
        let h = with_actor(&message, custom_headers);
        (uri, self.declare(message), session_id, h)
    }
}
type SseResult = Result<BoxStream<'static, Result<sse_stream::Sse, SseError>>, HttpErr>;

impl StreamableHttpClient for ActorClient {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, http::HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, HttpErr> {
        let args = self.prepare(uri, message, session_id, custom_headers);
        let r = self
            .authed(auth_header, args, |t, (u, m, s, h)| {
                self.http().post_message(u, m, s, t, h)
            })
            .await;
        self.watch(r)
    }

    async fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, http::HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<StreamableHttpPostResponse, HttpErr> {
        let args = self.prepare(uri, message, session_id, custom_headers);
        let r = self
            .authed(auth_header, args, |t, (u, m, s, h)| {
                let max = max_sse_event_size;
                self.http()
                    .post_message_with_max_sse_event_size(u, m, s, t, h, max)
            })
            .await;
        self.watch(r)
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, http::HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> Result<StreamableHttpPostResponse, HttpErr> {
        let args = self.prepare(uri, message, session_id, custom_headers);
        let r = self
            .authed(auth_header, args, |t, (u, m, s, h)| {
                self.http()
                    .post_message_with_response_limits(u, m, s, t, h, limits)
            })
            .await;
        self.watch(r)
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, http::HeaderValue>,
    ) -> Result<(), HttpErr> {
        let args = (uri, session_id, custom_headers);
        self.authed(auth_header, args, |t, (u, s, h)| {
            self.http().delete_session(u, s, t, h)
        })
        .await
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, http::HeaderValue>,
    ) -> SseResult {
        let args = (uri, session_id, last_event_id, custom_headers);
        let r = self
            .authed(auth_header, args, |t, (u, s, l, h)| {
                self.http().get_stream(u, s, l, t, h)
            })
            .await;
        self.standalone_answered();
        r
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, http::HeaderValue>,
        max_sse_event_size: usize,
    ) -> SseResult {
        let args = (uri, session_id, last_event_id, custom_headers);
        let r = self
            .authed(auth_header, args, |t, (u, s, l, h)| {
                self.http()
                    .get_stream_with_max_sse_event_size(u, s, l, t, h, max_sse_event_size)
            })
            .await;
        self.standalone_answered();
        r
    }
}
