//! The one app abstraction: every kind of app (a remote MCP server, a WASM component) lists its
//! tools and serves calls through [`AppBackend`]. Scopes, namespacing, skippedTools and
//! reachability live above it, in the aggregator, written once.

use super::limits::ListingCaps;
use super::plain::{self, Peer};
use futures_util::StreamExt;
use futures_util::future::BoxFuture;
use futures_util::stream::BoxStream;
use http::HeaderName;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, ClientJsonRpcMessage, ClientRequest,
    PaginatedRequestParams, ServerResult, Tool,
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
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// What an app offers: its tools and its instructions for agents.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Listing {
    pub tools: Vec<Tool>,
    #[serde(default)]
    pub instructions: Option<String>,
}

/// Who a call is made for: forwarded to the app.
#[derive(Debug, Clone, Default)]
pub struct CallContext {
    /// `harness / model`, as the caller sent it.
    pub actor: Option<String>,
    pub session: Option<String>,
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
    /// Whether a call may send notifications or requests (progress, logs, sampling) before its
    /// result: the MCP door then answers it as a stream rather than as one JSON answer.
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

fn secs(d: Duration) -> String {
    format!("{} s", d.as_secs_f64())
}

type Session = Arc<RunningService<RoleClient, ()>>;

/// The actor of one tool call, carried in the request's extensions to [`ActorClient`].
#[derive(Debug, Clone)]
struct ActorHeader(http::HeaderValue);

/// The HTTP client of a remote app's sessions: reqwest's, which adds the caller's actor
/// (`X-Datanotes-Actor`) to the request of each tool call. The actor travels per request, so
/// one session serves every caller.
/// It also notes an answer cut at the response limits (`too_big`): rmcp's session then only
/// says that the connection closed.
#[derive(Clone)]
struct ActorClient {
    http: reqwest::Client,
    too_big: Arc<AtomicBool>,
}

impl ActorClient {
    fn new(too_big: Arc<AtomicBool>) -> ActorClient {
        // As rmcp's own client: no idle connection reuse (delayed-ACK stalls), no redirects.
        let http = reqwest::Client::builder()
            .pool_max_idle_per_host(0)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap_or_default();
        ActorClient { http, too_big }
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
        headers.insert(HeaderName::from_static("x-datanotes-actor"), a.0.clone());
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
        let h = with_actor(&message, custom_headers);
        let r = self
            .http
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
        let h = with_actor(&message, custom_headers);
        let r = self
            .http
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
        let h = with_actor(&message, custom_headers);
        let r = self
            .http
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
        self.http
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
        self.http
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
        self.http
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
    list: tokio::sync::Mutex<Option<Session>>,
    call: tokio::sync::Mutex<Option<Session>>,
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
        }
    }

    fn slot(&self, p: Purpose) -> &tokio::sync::Mutex<Option<Session>> {
        match p {
            Purpose::List => &self.list,
            Purpose::Call => &self.call,
        }
    }

    async fn session(&self, p: Purpose) -> Result<Session, BackendError> {
        let mut slot = self.slot(p).lock().await;
        if let Some(s) = slot.as_ref()
            && !s.is_closed()
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
        let transport = StreamableHttpClientTransport::with_client(ActorClient::new(too_big), cfg);
        let client = match tokio::time::timeout(self.timeouts.open, ().serve(transport)).await {
            Err(_) => {
                return Err(BackendError(format!(
                    "timed out opening a session ({})",
                    secs(self.timeouts.open)
                )));
            }
            Ok(Err(e)) => return Err(BackendError(plain::init_error(&self.url, Peer::App, &e))),
            Ok(Ok(c)) => Arc::new(c),
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
    fn streams(&self) -> bool {
        true
    }

    fn list(&self) -> BoxFuture<'_, Result<Listing, BackendError>> {
        Box::pin(async move {
            let s = self.session(Purpose::List).await?;
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
            let s = self.session(Purpose::Call).await?;
            let mut params = CallToolRequestParams::new(tool.to_string());
            if let Value::Object(m) = args {
                params = params.with_arguments(m);
            }
            let mut req = CallToolRequest::new(params);
            if let Some(a) = ctx.actor.as_deref().filter(|a| !a.is_empty())
                && let Ok(v) = a.parse()
            {
                req.extensions.insert(ActorHeader(v));
            }
            let sent = s.send_request(ClientRequest::CallToolRequest(req));
            let r = match tokio::time::timeout(self.timeouts.call, sent).await {
                Err(_) => Err(BackendError(format!(
                    "timed out calling {tool} ({})",
                    secs(self.timeouts.call)
                ))),
                // The app answered, with a protocol error: it is reachable; the caller sees the error.
                Ok(Err(rmcp::ServiceError::McpError(e))) => {
                    return Ok(
                        serde_json::json!({"content": [{"type": "text", "text": e.message}], "isError": true}),
                    );
                }
                Ok(Err(e)) => Err(BackendError(format!(
                    "calling {tool} failed: {}",
                    plain::service_error(&self.url, Peer::App, &e)
                ))),
                Ok(Ok(ServerResult::CallToolResult(result))) => {
                    serde_json::to_value(result).map_err(|e| BackendError(e.to_string()))
                }
                Ok(Ok(_)) => Err(BackendError(format!(
                    "calling {tool} failed: the app answered something other than a tool result"
                ))),
            };
            if r.is_err() {
                self.forget(Purpose::Call).await;
            }
            r
        })
    }
}
