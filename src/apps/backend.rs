//! The one app abstraction: every kind of app (a remote MCP server, a WASM component) lists its
//! tools and serves calls through [`AppBackend`]. Scopes, namespacing, skippedTools and
//! reachability live above it, in the aggregator, written once.

mod direct;

use super::limits::ListingCaps;
use super::plain::{self, Peer};
use futures_util::StreamExt;
use futures_util::future::BoxFuture;
use futures_util::stream::BoxStream;
use http::HeaderName;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, ClientJsonRpcMessage, ClientRequest, ClientResult,
    ErrorCode, ErrorData, NumberOrString, PaginatedRequestParams, ServerJsonRpcMessage,
    ServerResult, Tool,
};
use rmcp::service::RunningService;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::{
    SseError, StreamableHttpClient, StreamableHttpClientTransportConfig, StreamableHttpError,
    StreamableHttpPostResponse, StreamableHttpResponseLimits,
};
use rmcp::{RoleClient, ServiceExt};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// What an app offers: its tools and its instructions for agents.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Listing {
    pub tools: Vec<Tool>,
    #[serde(default)]
    pub instructions: Option<String>,
    /// Tools the app has but cannot offer, with why (`{"name", "takenBy": null, "reason"}`):
    /// shown in its `skippedTools` (a typed component's function with a resource parameter).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<Value>,
}

/// Who a call is made for: forwarded to the app.
#[derive(Debug, Clone, Default)]
pub struct CallContext {
    /// `harness / model`, as the caller sent it.
    pub actor: Option<String>,
    pub session: Option<String>,
    /// The calling token's name (`owner`, `app:<name>`): a WASM app's writes record it as
    /// `actor.caller`; a remote app receives it as `X-Datanotes-Caller`.
    pub caller: Option<String>,
    /// The caller's side of the call, for what the app sends before its result (log messages,
    /// progress, sampling and elicitation requests); `None` when the caller cannot receive them
    /// (an HTTP `apps/call/`, an MCP client that asked for none of them).
    pub client: Option<Arc<dyn ClientChannel>>,
}

/// The caller of a tool call, as an app sees it while the call runs: where its log messages
/// and progress go, and who answers its requests. The MCP door implements it on the client's
/// session; the app's backend uses it without knowing the door.
pub trait ClientChannel: Send + Sync {
    /// Whether the caller asked for progress (it gave a progress token): the app is then given
    /// one with the call.
    fn wants_progress(&self) -> bool;
    /// A notification of the app during the call: `notifications/message` (passed on at or
    /// above the level the caller set) and `notifications/progress` (passed on with the
    /// caller's own progress token); any other is dropped.
    fn notify<'a>(&'a self, method: &'a str, params: Value) -> BoxFuture<'a, ()>;
    /// A request of the app to the caller (`sampling/createMessage`, `elicitation/create`):
    /// the caller's result, or its error (also when it did not declare the capability).
    fn request<'a>(
        &'a self,
        method: &'a str,
        params: Value,
    ) -> BoxFuture<'a, Result<Value, ClientRefusal>>;
}

impl std::fmt::Debug for dyn ClientChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClientChannel")
    }
}

/// Why the caller did not answer an app's request: a JSON-RPC error, passed back to the app.
#[derive(Debug, Clone)]
pub struct ClientRefusal {
    /// The JSON-RPC error code.
    pub code: i32,
    /// What went wrong, in plain words.
    pub message: String,
    /// The error's `data`, if the caller sent one.
    pub data: Option<Value>,
}

impl ClientRefusal {
    /// The refusal of a request the caller cannot answer: it did not declare the capability
    /// (or there is no MCP client behind the call).
    pub fn undeclared(method: &str) -> ClientRefusal {
        let capability = match method {
            "sampling/createMessage" => "sampling",
            "elicitation/create" => "elicitation",
            _ => {
                return ClientRefusal {
                    code: -32601,
                    message: format!(
                        "the engine does not pass {method} on to the client of this call"
                    ),
                    data: None,
                };
            }
        };
        ClientRefusal {
            code: -32601,
            message: format!(
                "the client of this call cannot answer {method}: it is not an MCP client that \
                 declared the {capability} capability"
            ),
            data: None,
        }
    }
}

/// Why an app could not answer. The message names what failed (and which limit ran out).
#[derive(Debug, Clone)]
pub struct BackendError(pub String);

impl std::fmt::Display for BackendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// An app the engine can list and call.
pub trait AppBackend: Send + Sync {
    fn list(&self) -> BoxFuture<'_, Result<Listing, BackendError>>;
    /// Calls a tool; the answer is an MCP `CallToolResult` as JSON, passed through intact.
    fn call<'a>(
        &'a self,
        tool: &'a str,
        args: Value,
        ctx: &'a CallContext,
    ) -> BoxFuture<'a, Result<Value, BackendError>>;
    /// Whether a call may send notifications or requests (progress, logs, sampling) to the
    /// caller before its result, through [`CallContext::client`]: the MCP door then answers
    /// it as a stream rather than as one JSON answer, to a client that may receive them.
    /// A remote app does (see `backend/direct.rs`).
    fn streams(&self) -> bool {
        false
    }
    /// What the app holds in this server now (a WASM app: its instances and their memory), for
    /// `apps/get` and the apps listing; `None` for an app that runs elsewhere.
    fn stats(&self) -> Option<Value> {
        None
    }
}

/// The limits for talking to an app.
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    pub open: Duration,
    pub list: Duration,
    pub call: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            open: Duration::from_secs(15),
            list: Duration::from_secs(30),
            call: Duration::from_secs(180),
        }
    }
}

impl Timeouts {
    /// The defaults, overridden by `DATANOTES_APP_{OPEN,LIST,CALL}_TIMEOUT_MS`.
    pub fn from_env() -> Timeouts {
        let d = Timeouts::default();
        let ms = |k: &str, v: Duration| crate::knobs::ms(k, v.as_millis() as u64);
        Timeouts {
            open: ms("DATANOTES_APP_OPEN_TIMEOUT_MS", d.open),
            list: ms("DATANOTES_APP_LIST_TIMEOUT_MS", d.list),
            call: ms("DATANOTES_APP_CALL_TIMEOUT_MS", d.call),
        }
    }
}

/// The one rule for an app's result, whichever door serves it (`/mcp`, `apps/call/`):
/// `structuredContent` is a JSON object (as MCP requires up to 2025-11-25), so a non-object
/// one is moved into the content: it becomes the first text block, unless that block already
/// holds the same JSON. rmcp's `strip_non_object_output_for_legacy_peer`, applied to every
/// result and on the JSON as the app sent it (nothing else in it changes).
pub(crate) fn structured_as_object(result: &mut Value) {
    let Some(obj) = result.as_object_mut() else {
        return;
    };
    if obj.get("structuredContent").is_none_or(Value::is_object) {
        return;
    }
    let Some(value) = obj.remove("structuredContent") else {
        return;
    };
    if value.is_null() {
        return;
    }
    let content = obj
        .entry("content")
        .or_insert_with(|| serde_json::json!([]));
    let Some(blocks) = content.as_array_mut() else {
        return;
    };
    let in_first = blocks.first().is_some_and(|b| {
        b.get("type").and_then(Value::as_str) == Some("text")
            && b.get("text")
                .and_then(Value::as_str)
                .and_then(|t| serde_json::from_str::<Value>(t).ok())
                .is_some_and(|v| v == value)
    });
    if !in_first {
        blocks.insert(
            0,
            serde_json::json!({"type": "text", "text": value.to_string()}),
        );
    }
}

fn secs(d: Duration) -> String {
    format!("{} s", d.as_secs_f64())
}

type Session = Arc<RunningService<RoleClient, ()>>;

/// An open session with an app: rmcp's, and the HTTP client it posts with.
#[derive(Clone)]
struct Open {
    service: Session,
    client: ActorClient,
}

/// The actor (`X-Datanotes-Actor`) and the calling token's name (`X-Datanotes-Caller`) of one
/// tool call, carried in the request's extensions to [`ActorClient`].
#[derive(Debug, Clone)]
struct ActorHeader(Option<http::HeaderValue>, Option<http::HeaderValue>);

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
struct ActorClient {
    /// A client that opens a new connection for every request.
    fresh: reqwest::Client,
    /// A client that keeps up to [`IDLE_PER_APP`] idle connections to the app; used while
    /// `reuse` holds.
    pooled: Option<reqwest::Client>,
    reuse: Arc<AtomicBool>,
    too_big: Arc<AtomicBool>,
    route: Arc<std::sync::Mutex<Option<Route>>>,
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
struct Route {
    session: Option<Arc<str>>,
    headers: HashMap<HeaderName, http::HeaderValue>,
}

/// The protocol versions whose requests carry no per-message headers: a call posted directly
/// needs only the session's headers. (A later version's calls go through rmcp's session.)
const DIRECT_VERSIONS: [&str; 4] = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];

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
        let known = headers
            .get("mcp-protocol-version")
            .is_none_or(|v| DIRECT_VERSIONS.iter().any(|k| v.as_bytes() == k.as_bytes()));
        let route = known.then(|| Route {
            session: session.clone(),
            headers: headers.clone(),
        });
        *self.route.lock().unwrap() = route;
    }

    fn route(&self) -> Option<Route> {
        self.route.lock().unwrap().clone()
    }

    /// A client; `reuse`: one that keeps connections open while that flag holds.
    fn new(too_big: Arc<AtomicBool>, reuse: Option<Arc<AtomicBool>>) -> ActorClient {
        // No redirects; reqwest sets TCP_NODELAY on its side.
        let build = |idle: usize| {
            reqwest::Client::builder()
                .pool_max_idle_per_host(idle)
                .pool_idle_timeout(IDLE_TIMEOUT)
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .unwrap_or_default()
        };
        ActorClient {
            fresh: build(0),
            pooled: reuse.is_some().then(|| build(IDLE_PER_APP)),
            reuse: reuse.unwrap_or_default(),
            too_big,
            route: Arc::new(std::sync::Mutex::new(None)),
        }
    }

    /// The client to post with now.
    fn http(&self) -> &reqwest::Client {
        match &self.pooled {
            Some(p) if self.reuse.load(Ordering::Relaxed) => p,
            _ => &self.fresh,
        }
    }

    /// Whether requests go over kept connections.
    fn reusing(&self) -> bool {
        self.pooled.is_some() && self.reuse.load(Ordering::Relaxed)
    }

    /// Notes how long a call's answer took: a slow one turns the kept connections off.
    fn answered_in(&self, took: Duration) {
        if took >= *SLOW_ANSWER && self.reuse.swap(false, Ordering::Relaxed) {
            tracing::debug!("a slow answer: new connections from now on");
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
    }
    headers
}

type HttpErr = StreamableHttpError<reqwest::Error>;
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
        self.note(&message, &session_id, &custom_headers);
        let h = with_actor(&message, custom_headers);
        let r = self
            .http()
            .post_message(uri, message, session_id, auth_header, h)
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
        self.note(&message, &session_id, &custom_headers);
        let h = with_actor(&message, custom_headers);
        let r = self
            .http()
            .post_message_with_max_sse_event_size(
                uri,
                message,
                session_id,
                auth_header,
                h,
                max_sse_event_size,
            )
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
        self.note(&message, &session_id, &custom_headers);
        let h = with_actor(&message, custom_headers);
        let r = self
            .http()
            .post_message_with_response_limits(uri, message, session_id, auth_header, h, limits)
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
        self.http()
            .delete_session(uri, session_id, auth_header, custom_headers)
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
        self.http()
            .get_stream(uri, session_id, last_event_id, auth_header, custom_headers)
            .await
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
        self.http()
            .get_stream_with_max_sse_event_size(
                uri,
                session_id,
                last_event_id,
                auth_header,
                custom_headers,
                max_sse_event_size,
            )
            .await
    }
}

/// Which of an app's two sessions: the one that lists (its answers bounded by the listing's
/// byte cap) or the one every call goes through (each call carrying its caller's actor).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Purpose {
    List,
    Call,
}

/// A remote app: an MCP server over streamable HTTP, reached with rmcp's client. Two sessions
/// per app, kept and re-opened after a failure: one lists, one serves every call (the actor
/// travels as the `X-Datanotes-Actor` header of each call's request, not per session).
pub struct RemoteApp {
    url: String,
    token: Option<String>,
    timeouts: Timeouts,
    caps: ListingCaps,
    /// An answer of the listing session was over the byte cap.
    too_big: Arc<AtomicBool>,
    list: tokio::sync::Mutex<Option<Open>>,
    call: tokio::sync::Mutex<Option<Open>>,
    /// The ids of calls posted directly (`datanotes-<n>`: never one of rmcp's numbers).
    next_id: AtomicU64,
    /// Whether calls keep their connection to the app open (see [`ActorClient`]).
    reuse: Arc<AtomicBool>,
}

impl RemoteApp {
    /// A remote app at `url`, sent `token` as its bearer.
    pub fn new(
        url: String,
        token: Option<String>,
        timeouts: Timeouts,
        caps: ListingCaps,
    ) -> RemoteApp {
        RemoteApp {
            url,
            token,
            timeouts,
            caps,
            too_big: Arc::new(AtomicBool::new(false)),
            list: tokio::sync::Mutex::new(None),
            call: tokio::sync::Mutex::new(None),
            next_id: AtomicU64::new(1),
            reuse: Arc::new(AtomicBool::new(true)),
        }
    }

    fn slot(&self, p: Purpose) -> &tokio::sync::Mutex<Option<Open>> {
        match p {
            Purpose::List => &self.list,
            Purpose::Call => &self.call,
        }
    }

    async fn session(&self, p: Purpose) -> Result<Open, BackendError> {
        let mut slot = self.slot(p).lock().await;
        if let Some(s) = slot.as_ref()
            && !s.service.is_closed()
        {
            return Ok(s.clone());
        }
        let mut cfg = StreamableHttpClientTransportConfig::with_uri(self.url.as_str());
        if let Some(t) = &self.token {
            cfg = cfg.auth_header(t.clone());
        }
        cfg = match p {
            // One page of a listing holds at most the listing's byte cap.
            Purpose::List => cfg
                .max_json_response_size(self.caps.max_bytes)
                .max_sse_event_size(self.caps.max_bytes),
            // Every caller's calls share this session.
            Purpose::Call => cfg.max_concurrent_requests(256),
        };
        let too_big = match p {
            Purpose::List => self.too_big.clone(),
            Purpose::Call => Arc::new(AtomicBool::new(false)),
        };
        let reuse = (p == Purpose::Call).then(|| self.reuse.clone());
        let http = ActorClient::new(too_big, reuse);
        let transport = StreamableHttpClientTransport::with_client(http.clone(), cfg);
        let client = match tokio::time::timeout(self.timeouts.open, ().serve(transport)).await {
            Err(_) => {
                return Err(BackendError(format!(
                    "timed out opening a session ({})",
                    secs(self.timeouts.open)
                )));
            }
            Ok(Err(e)) => return Err(BackendError(plain::init_error(&self.url, Peer::App, &e))),
            Ok(Ok(c)) => Open {
                service: Arc::new(c),
                client: http,
            },
        };
        *slot = Some(client.clone());
        Ok(client)
    }

    async fn forget(&self, p: Purpose) {
        self.slot(p).lock().await.take();
    }

    /// Every page of the app's tools, stopping at the caps (tools, bytes, pages).
    async fn list_capped(&self, s: &Session) -> Result<Vec<Tool>, BackendError> {
        let caps = self.caps;
        let mut tools: Vec<Tool> = vec![];
        let (mut bytes, mut pages) = (0usize, 0usize);
        let mut cursor = None;
        self.too_big.store(false, Ordering::Relaxed);
        loop {
            pages += 1;
            if let Some(why) = caps.listing_over(tools.len(), bytes, pages) {
                return Err(BackendError(why));
            }
            let params = PaginatedRequestParams::default().with_cursor(cursor.take());
            let page = s.list_tools(Some(params)).await.map_err(|e| {
                // One answer over the byte cap was cut by the HTTP client: name the cap.
                if self.too_big.swap(false, Ordering::Relaxed) {
                    return BackendError(
                        caps.listing_over(0, usize::MAX, 0)
                            .unwrap_or_else(|| "the app's listing is too big".into()),
                    );
                }
                BackendError(format!(
                    "listing tools failed: {}",
                    plain::service_error(&self.url, Peer::App, &e)
                ))
            })?;
            for t in page.tools {
                bytes += serde_json::to_vec(&t).map_or(0, |v| v.len());
                tools.push(t);
                if let Some(why) = caps.listing_over(tools.len(), bytes, pages) {
                    return Err(BackendError(why));
                }
            }
            match page.next_cursor {
                Some(c) => cursor = Some(c),
                None => return Ok(tools),
            }
        }
    }
}

impl AppBackend for RemoteApp {
    fn list(&self) -> BoxFuture<'_, Result<Listing, BackendError>> {
        Box::pin(async move {
            let s = self.session(Purpose::List).await?.service;
            let r = match tokio::time::timeout(self.timeouts.list, self.list_capped(&s)).await {
                Err(_) => Err(BackendError(format!(
                    "timed out listing tools ({})",
                    secs(self.timeouts.list)
                ))),
                Ok(Err(e)) => Err(e),
                Ok(Ok(tools)) => {
                    let instructions = s.peer_info().and_then(|i| i.instructions.clone());
                    Ok(Listing {
                        tools,
                        instructions,
                        skipped: vec![],
                    })
                }
            };
            if r.is_err() {
                self.forget(Purpose::List).await;
            }
            r
        })
    }

    fn call<'a>(
        &'a self,
        tool: &'a str,
        args: Value,
        ctx: &'a CallContext,
    ) -> BoxFuture<'a, Result<Value, BackendError>> {
        Box::pin(async move {
            let open = self.session(Purpose::Call).await?;
            let mut params = CallToolRequestParams::new(tool.to_string());
            if let Value::Object(m) = args {
                params = params.with_arguments(m);
            }
            let header = |v: &Option<String>| {
                v.as_deref()
                    .filter(|a| !a.is_empty())
                    .and_then(|a| a.parse::<http::HeaderValue>().ok())
            };
            let who = ActorHeader(header(&ctx.actor), header(&ctx.caller));
            // Once the session's route is known, the call is posted on this task: no hop
            // through rmcp's service and transport tasks (each a wake-up of another thread).
            let (s, params) = 'direct: {
                let Some(route) = open.client.route() else {
                    break 'direct (open.service, params);
                };
                let direct = self.call_direct(&open.client, route, params, who.clone(), ctx);
                let t0 = std::time::Instant::now();
                let r = tokio::time::timeout(self.timeouts.call, direct).await;
                open.client.answered_in(t0.elapsed());
                let r = match r {
                    Err(_) => Err(timed_out(tool, self.timeouts.call)),
                    Ok(direct::Direct::Answered(r)) => r,
                    Ok(direct::Direct::Expired(params)) => {
                        // The app forgot the session (it restarted): a new one, through rmcp.
                        self.forget(Purpose::Call).await;
                        break 'direct (self.session(Purpose::Call).await?.service, params);
                    }
                };
                if r.is_err() {
                    self.forget(Purpose::Call).await;
                }
                return r;
            };
            let mut req = CallToolRequest::new(params);
            req.extensions.insert(who);
            let sent = s.send_request(ClientRequest::CallToolRequest(req));
            let r = match tokio::time::timeout(self.timeouts.call, sent).await {
                Err(_) => Err(timed_out(tool, self.timeouts.call)),
                // The app answered, with a protocol error: it is reachable; the caller sees the error.
                Ok(Err(rmcp::ServiceError::McpError(e))) => return Ok(error_result(&e.message)),
                Ok(Err(e)) => Err(BackendError(format!(
                    "calling {tool} failed: {}",
                    plain::service_error(&self.url, Peer::App, &e)
                ))),
                Ok(Ok(result)) => tool_result(tool, result),
            };
            if r.is_err() {
                self.forget(Purpose::Call).await;
            }
            r
        })
    }

    /// Its notifications and requests during a call are passed to the caller (on the direct
    /// path; the one call that goes through rmcp's session after the app forgot the session
    /// passes them over).
    fn streams(&self) -> bool {
        true
    }
}

/// The error of a call that ran out of time.
fn timed_out(tool: &str, limit: Duration) -> BackendError {
    BackendError(format!("timed out calling {tool} ({})", secs(limit)))
}

/// A protocol error the app answered, as the caller sees it: an error result.
fn error_result(message: &str) -> Value {
    serde_json::json!({"content": [{"type": "text", "text": message}], "isError": true})
}

/// The app's answer to a call, as JSON: a tool result, or the error that it is not one.
fn tool_result(tool: &str, result: ServerResult) -> Result<Value, BackendError> {
    match result {
        ServerResult::CallToolResult(result) => {
            serde_json::to_value(result).map_err(|e| BackendError(e.to_string()))
        }
        _ => Err(BackendError(format!(
            "calling {tool} failed: the app answered something other than a tool result"
        ))),
    }
}

#[cfg(test)]
mod tests;
