//! Requests posted to a remote app as the engine writes them, with their answers read as the
//! app wrote them, on a session rmcp opened (its [`Route`]): for what rmcp's typed messages
//! would reshape or drop. A tool listing's fields that rmcp does not model (`execution`, its
//! `taskSupport`), and the tasks of protocol 2025-11-25 (a task-augmented `tools/call`, whose
//! answer is a `CreateTaskResult`, and `tasks/get`, `tasks/result`, `tasks/list`,
//! `tasks/cancel`). The answer is one JSON message or an SSE stream, each bounded; what the app
//! sends on the stream before its answer is handled as during a call (see `direct.rs`).
//!
//! A tool's fields rmcp does not model are kept in `Listing::fields` and written back by
//! `tools/list`.

use super::client::HttpErr;
use super::pending::{Abandon, Events};
use super::{ActorClient, BackendError, CallContext, ClientChannel, RemoteApp, Route, secs};
use crate::apps::backend::AppRequest;
use crate::apps::plain::{self, Peer};
use futures_util::{Stream, StreamExt};
use rmcp::model::NumberOrString;
use rmcp::transport::streamable_http_client::{AuthRequiredError, InsufficientScopeError};
use serde_json::{Value, json};
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};

/// The most bytes of one answer to a read (a resource, a prompt, a completion): 16 MiB. A
/// bigger answer is refused unread.
pub(crate) const MAX_ANSWER_BYTES: usize = 16 << 20;

/// An answer to a request posted raw.
pub(super) enum Posted {
    /// One JSON message.
    Json(Value),
    /// An SSE stream, read up to the answer.
    Sse(Events),
}

/// Why a request posted raw got no answer.
pub(super) enum RawError {
    /// The app no longer knows the session (HTTP 404): nothing was done.
    Expired,
    /// The answer was over the bound: cut unread.
    TooBig,
    /// Anything else, in plain words.
    Failed(String),
}

/// An SSE byte stream cut with an error once one of its events is over `max` bytes: its events
/// are read one at a time, so what is held stays bounded however long the stream runs.
struct Bounded<S> {
    inner: S,
    max: usize,
    /// The bytes since the last event's end.
    counted: usize,
    /// The last byte seen was a line feed (an event's end may span two chunks).
    at_line_end: bool,
}

impl<S> Bounded<S> {
    fn new(inner: S, max: usize) -> Bounded<S> {
        Bounded {
            inner,
            max,
            counted: 0,
            at_line_end: false,
        }
    }

    /// Counts `b`; whether the bound still holds after it.
    fn within(&mut self, b: &[u8]) -> bool {
        let end = event_end(b, self.at_line_end);
        self.at_line_end = b.last() == Some(&b'\n');
        self.counted = match end {
            Some(at) => b.len() - at,
            None => self.counted + b.len(),
        };
        self.counted <= self.max
    }
}

/// Where the bytes after the last event end in `b` begin (a blank line: `\n\n` or
/// `\n\r\n`), if one ends there; `after_line_end`: the bytes before `b` ended a line.
fn event_end(b: &[u8], after_line_end: bool) -> Option<usize> {
    let within = (1..b.len())
        .rev()
        .find(|&i| b[i] == b'\n' && (b[i - 1] == b'\n' || (i >= 2 && &b[i - 2..i] == b"\n\r")));
    within.map(|i| i + 1).or_else(|| {
        let starts = b.starts_with(b"\n") || b.starts_with(b"\r\n");
        (after_line_end && starts).then(|| b.iter().position(|&c| c == b'\n').unwrap_or(0) + 1)
    })
}

#[derive(Debug)]
struct TooBig(usize);

/// What a cut answer's error says.
pub(super) const TOO_BIG: &str = "the answer is over its bound";

/// Whether `e` (or what caused it) is an answer cut at its bound.
pub(super) fn too_big(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut at = Some(e);
    while let Some(e) = at {
        if e.downcast_ref::<TooBig>().is_some() || e.to_string().contains(TOO_BIG) {
            return true;
        }
        at = e.source();
    }
    false
}

impl std::fmt::Display for TooBig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{TOO_BIG} ({} bytes)", self.0)
    }
}

impl std::error::Error for TooBig {}

impl<S> Stream for Bounded<S>
where
    S: Stream<Item = Result<bytes::Bytes, reqwest::Error>> + Unpin,
{
    type Item = Result<bytes::Bytes, std::io::Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        match self.inner.poll_next_unpin(cx) {
            Poll::Ready(Some(Ok(b))) => {
                if !self.within(&b) {
                    let max = self.max;
                    return Poll::Ready(Some(Err(std::io::Error::other(TooBig(max)))));
                }
                Poll::Ready(Some(Ok(b)))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(std::io::Error::other(e)))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl ActorClient {
    /// Posts `message` on `route` and answers what came back, at most `max` bytes of it. An
    /// app that signs in with OAuth is sent its access token, and its refusals handled as for
    /// every other request ([`ActorClient::authed`]: renewed once, or the owner asked to
    /// connect it again); any other is sent `bearer`.
    pub(super) async fn post_raw(
        &self,
        url: &str,
        route: &Route,
        bearer: Option<&str>,
        message: &Value,
        max: usize,
    ) -> Result<Posted, RawError> {
        let bearer = bearer.map(String::from);
        let sent = self
            .authed(bearer, (), |t, ()| {
                self.post_raw_once(url, route, t, message, max)
            })
            .await;
        match sent {
            Ok(r) => r,
            Err(e) => Err(RawError::Failed(plain::error_words(url, Peer::App, &e))),
        }
    }

    /// One post of [`Self::post_raw`]: a refusal of its credentials is the HTTP client's error
    /// (as rmcp's client reports it), anything else the answer.
    pub(super) async fn post_raw_once(
        &self,
        url: &str,
        route: &Route,
        bearer: Option<String>,
        message: &Value,
        max: usize,
    ) -> Result<Result<Posted, RawError>, HttpErr> {
        let mut req = self
            .http()
            .post(url)
            .header(http::header::ACCEPT, "application/json, text/event-stream")
            .json(message);
        for (k, v) in &route.headers {
            req = req.header(k, v);
        }
        if let Some(s) = &route.session {
            req = req.header("mcp-session-id", s.as_ref());
        }
        if let Some(t) = bearer {
            req = req.bearer_auth(t);
        }
        let r = match req.send().await {
            Ok(r) => r,
            Err(e) => {
                return Ok(Err(RawError::Failed(plain::error_words(
                    url,
                    Peer::App,
                    &e,
                ))));
            }
        };
        let status = r.status();
        if status == reqwest::StatusCode::NOT_FOUND && route.session.is_some() {
            return Ok(Err(RawError::Expired));
        }
        let challenge = r
            .headers()
            .get(http::header::WWW_AUTHENTICATE)
            .and_then(|v| v.to_str().ok())
            .map(String::from);
        match (status.as_u16(), challenge) {
            (401, Some(c)) => return Err(HttpErr::AuthRequired(AuthRequiredError::new(c))),
            (403, Some(c)) => {
                let scope = scope_of(&c);
                return Err(HttpErr::InsufficientScope(InsufficientScopeError::new(
                    c, scope,
                )));
            }
            (401 | 403, None) => {
                return Ok(Err(RawError::Failed(format!(
                    "{url} refused the engine's credentials (HTTP {status}): connect the app again"
                ))));
            }
            _ => {}
        }
        Ok(self.read_raw(url, r, max).await)
    }

    /// The answer of a raw post: one JSON message of at most `max` bytes, or an SSE stream whose
    /// events are each at most `max` bytes.
    async fn read_raw(
        &self,
        url: &str,
        r: reqwest::Response,
        max: usize,
    ) -> Result<Posted, RawError> {
        let status = r.status();
        let kind = r
            .headers()
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_ascii_lowercase();
        if kind.starts_with("text/event-stream") && status.is_success() {
            let body = Bounded::new(r.bytes_stream(), max);
            return Ok(Posted::Sse(
                sse_stream::SseStream::from_bytes_stream(body).boxed(),
            ));
        }
        if !kind.starts_with("application/json") {
            return Err(RawError::Failed(format!(
                "{url} answered HTTP {status} without a JSON-RPC message (is it an MCP server?)"
            )));
        }
        if r.content_length().is_some_and(|n| n > max as u64) {
            return Err(RawError::TooBig);
        }
        let mut body = Vec::new();
        let mut bytes = r.bytes_stream();
        while let Some(chunk) = bytes.next().await {
            let chunk =
                chunk.map_err(|e| RawError::Failed(plain::error_words(url, Peer::App, &e)))?;
            if body.len() + chunk.len() > max {
                return Err(RawError::TooBig);
            }
            body.extend_from_slice(&chunk);
        }
        serde_json::from_slice(&body)
            .map(Posted::Json)
            .map_err(|_| RawError::Failed(format!("{url} answered, but not with JSON-RPC")))
    }
}

/// The scope a `WWW-Authenticate` challenge asks for (`scope="..."`), if it names one.
fn scope_of(challenge: &str) -> Option<String> {
    let at = challenge.find("scope=")? + "scope=".len();
    let rest = &challenge[at..];
    let value = match rest.strip_prefix('"') {
        Some(quoted) => quoted.split('"').next()?,
        None => rest.split([',', ' ']).next()?,
    };
    (!value.is_empty()).then(|| value.to_string())
}

impl RemoteApp {
    /// Sends one request (`method`, `params` as the engine writes them) on a session's route and
    /// answers the app's answer as it wrote it: its `result`, or its JSON-RPC error as
    /// `{"_meta": {RPC_ERROR_META: error}}`, whole. What the app asks during it goes to
    /// `channel` (else it is refused); a caller that gives up (drops this future) has the app
    /// told with `notifications/cancelled`.
    pub(super) async fn post_request(
        &self,
        client: &ActorClient,
        route: Route,
        method: &str,
        params: Value,
        channel: Option<&dyn ClientChannel>,
        max: usize,
    ) -> Result<Value, RawError> {
        let n = self.next_id.fetch_add(1, Ordering::Relaxed);
        let id = NumberOrString::String(format!("datanotes-{n}").into());
        let message = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let bearer = self
            .bearer()
            .await
            .map_err(|e| RawError::Failed(self.or_sign_in(e).0))?;
        let mut abandon = Abandon::new(self, client, route, &id);
        let route = &abandon.route;
        let posted = client
            .post_raw(&self.url, route, bearer.as_deref(), &message, max)
            .await;
        let answer = match posted {
            Err(e) => {
                abandon.armed = false;
                return Err(e);
            }
            Ok(Posted::Json(v)) => v,
            Ok(Posted::Sse(mut events)) => {
                let data = self
                    .read_answer(client, route, &mut events, &id, channel)
                    .await
                    .map_err(|why| match why.contains(TOO_BIG) {
                        true => RawError::TooBig,
                        false => RawError::Failed(why),
                    })?;
                serde_json::from_str(&data).map_err(|_| {
                    RawError::Failed(format!("{} answered, but not with JSON-RPC", self.url))
                })?
            }
        };
        abandon.armed = false;
        answer_of(answer, &id, method, &self.url)
    }
}

impl RemoteApp {
    /// A request of MCP's tasks ([`AppRequest::is_task`]) on the agent's own session with the
    /// app (a task lives in the session that made it), posted raw: rmcp's types do not carry
    /// the tasks of 2025-11-25. What the app asks meanwhile (the input a task needs, on
    /// `tasks/result`) goes to the agent. Within the call timeout; given up when the caller
    /// cancels (the app is told).
    pub(super) async fn task_request(
        &self,
        req: AppRequest,
        params: Value,
        ctx: &CallContext,
    ) -> Result<Value, BackendError> {
        let what = req.method();
        let open = self.for_call(ctx).await.map_err(|e| self.or_sign_in(e))?;
        let version = open
            .service
            .peer_info()
            .map(|i| i.protocol_version.to_string())
            .unwrap_or_default();
        let route = open.client.route_soon(&version, super::ROUTE_WAIT).await;
        let Some(mut route) = route else {
            return Ok(json!({"_meta": {crate::apps::backend::RPC_ERROR_META: {
                "code": -32601,
                "message": format!("{what}: the app speaks a protocol version without these tasks (the engine passes those of 2025-11-25)"),
            }}}));
        };
        if req == AppRequest::CallAsTask {
            let header = |v: &Option<String>| {
                v.as_deref()
                    .filter(|a| !a.is_empty())
                    .and_then(|a| a.parse::<http::HeaderValue>().ok())
            };
            if let Some(a) = header(&ctx.actor) {
                route
                    .headers
                    .insert(http::HeaderName::from_static("x-datanotes-actor"), a);
            }
            if let Some(c) = header(&ctx.caller) {
                route
                    .headers
                    .insert(http::HeaderName::from_static("x-datanotes-caller"), c);
            }
        }
        let channel = ctx.channel();
        let max = MAX_ANSWER_BYTES;
        let sent = self.post_request(&open.client, route, what, params, channel, max);
        let limit = self.timeouts.call;
        let r = tokio::select! {
            r = tokio::time::timeout(limit, sent) => r,
            _ = ctx.cancel.cancelled() => return Err(BackendError::cancelled()),
        };
        match r {
            Err(_) => Err(BackendError(format!(
                "timed out: {what} took more than {}",
                secs(limit)
            ))),
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => {
                if matches!(e, RawError::Expired) {
                    self.forget_for(ctx).await;
                }
                Err(e.into_backend(what))
            }
        }
    }
}

/// The `result` of a JSON-RPC answer to `id` (its error, whole, under `_meta`).
fn answer_of(
    mut answer: Value,
    id: &NumberOrString,
    method: &str,
    url: &str,
) -> Result<Value, RawError> {
    if answer.get("id") != Some(&json!(id)) {
        return Err(RawError::Failed(format!(
            "{url} answered {method} with a message that is not its answer"
        )));
    }
    if let Some(e) = answer.get_mut("error").map(Value::take) {
        return Ok(json!({"_meta": {crate::apps::backend::RPC_ERROR_META: e}}));
    }
    match answer.get_mut("result").map(Value::take) {
        Some(r @ Value::Object(_)) => Ok(r),
        _ => Err(RawError::Failed(format!(
            "{url} answered {method} without a result"
        ))),
    }
}

impl RawError {
    /// As a backend's error.
    pub(super) fn into_backend(self, what: &str) -> BackendError {
        match self {
            RawError::Expired => BackendError(format!(
                "{what} failed: the app no longer knows this session (it restarted); try again"
            )),
            RawError::TooBig => BackendError(format!(
                "{what} failed: the app's answer is over {} bytes",
                MAX_ANSWER_BYTES
            )),
            RawError::Failed(why) => BackendError(format!("{what} failed: {why}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Bounded, scope_of};

    /// An SSE stream's bound holds per event: many small events pass, however many; one event
    /// over the bound is cut, even when its end or its start spans two chunks.
    #[test]
    fn an_event_over_the_bound_is_cut_not_a_long_stream() {
        let mut b = Bounded::new((), 10);
        for _ in 0..100 {
            assert!(b.within(b"data: 1\n\n"));
        }
        assert!(b.within(b"data: 12\n"));
        assert!(
            b.within(b"\ndata: 1234"),
            "the event ended across the chunks"
        );
        assert!(b.within(b"\r\n\r\n"));
        assert!(!b.within(b"data: 123456"), "one event of 12 bytes");
        let mut b = Bounded::new((), 10);
        assert!(b.within(b"data: 1\n"));
        assert!(
            !b.within(b"data: 2\n"),
            "no blank line: one event of 16 bytes"
        );
    }

    #[test]
    fn the_scope_a_challenge_asks_for() {
        let c = r#"Bearer error="insufficient_scope", scope="files:read files:write", resource_metadata="x""#;
        assert_eq!(scope_of(c).as_deref(), Some("files:read files:write"));
        assert_eq!(
            scope_of("Bearer scope=admin, realm=x").as_deref(),
            Some("admin")
        );
        assert_eq!(scope_of(r#"Bearer error="invalid_token""#), None);
    }
}
