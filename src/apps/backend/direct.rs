//! A remote app's calls posted on the caller's own task, with rmcp's HTTP client and message
//! types, on the session rmcp opened (its id and headers, noted by [`ActorClient`]). rmcp's
//! session hands every request to a service task and then to a transport task, and on the
//! engine's multi-threaded runtime each hand-over wakes another thread: a call costs a few tens
//! of microseconds more than the app takes. Everything else (opening, listing, closing, a
//! session the app forgot, a later protocol version's per-message headers) stays rmcp's.
//!
//! The answer is one JSON message, or an SSE stream read up to the call's result: the app's
//! notifications before it are passed over, its requests answered (a `ping`; anything else is
//! refused as rmcp's own client without handlers refuses it), and a stream the app closes
//! before the result is resumed from its last event id, after the wait the app asked for.

use super::{
    ActorClient, ActorHeader, BackendError, CallToolRequest, CallToolRequestParams,
    ClientJsonRpcMessage, ClientRequest, ClientResult, ErrorCode, ErrorData, HeaderName,
    NumberOrString, Peer, RemoteApp, Route, ServerJsonRpcMessage, ServerRequest,
    StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse, error_result, plain,
    tool_result,
};
use futures_util::StreamExt;
use futures_util::stream::BoxStream;
use serde_json::Value;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// How a call posted directly ended.
pub(super) enum Direct {
    /// The app answered (a result or an error), or could not be reached.
    Answered(Result<Value, BackendError>),
    /// The app no longer knows the session (HTTP 404): the call was not made; it goes through
    /// a new session.
    Expired(CallToolRequestParams),
}

/// The most times an answer's stream is resumed after the app closed it.
const MAX_RESUMES: usize = 100;
/// The longest wait before resuming that an app may ask for (its SSE `retry`).
const MAX_RETRY: Duration = Duration::from_secs(5);

type Events =
    BoxStream<'static, Result<sse_stream::Sse, rmcp::transport::streamable_http_client::SseError>>;

impl RemoteApp {
    /// Posts one `tools/call` on the session's route and reads its answer.
    pub(super) async fn call_direct(
        &self,
        client: &ActorClient,
        route: Route,
        params: CallToolRequestParams,
        who: ActorHeader,
    ) -> Direct {
        let tool = params.name.to_string();
        let n = self.next_id.fetch_add(1, Ordering::Relaxed);
        let id = NumberOrString::String(format!("datanotes-{n}").into());
        let mut headers = route.headers.clone();
        if let Some(a) = who.0 {
            headers.insert(HeaderName::from_static("x-datanotes-actor"), a);
        }
        if let Some(c) = who.1 {
            headers.insert(HeaderName::from_static("x-datanotes-caller"), c);
        }
        let uri: Arc<str> = self.url.as_str().into();
        let msg = ClientJsonRpcMessage::request(
            ClientRequest::CallToolRequest(CallToolRequest::new(params.clone())),
            id.clone(),
        );
        let failed = |why: String| {
            Direct::Answered(Err(BackendError(format!("calling {tool} failed: {why}"))))
        };
        let sent = client
            .http
            .post_message(uri, msg, route.session.clone(), self.token.clone(), headers)
            .await;
        let answer = match sent {
            Err(StreamableHttpError::SessionExpired) => return Direct::Expired(params),
            Err(e) => return failed(plain::error_words(&self.url, Peer::App, &e)),
            Ok(StreamableHttpPostResponse::Json(m, _)) => m,
            Ok(StreamableHttpPostResponse::Sse(events, _)) => {
                match self.read_answer(client, &route, events, &id).await {
                    Ok(m) => m,
                    Err(why) => return failed(why),
                }
            }
            Ok(_) => {
                return failed(format!(
                    "{} accepted the call without answering it (is it an MCP server?)",
                    self.url
                ));
            }
        };
        Direct::Answered(match answer {
            ServerJsonRpcMessage::Response(r) => tool_result(&tool, r.result),
            // The app answered, with a protocol error: it is reachable; the caller sees the error.
            ServerJsonRpcMessage::Error(e) => Ok(error_result(&e.error.message)),
            _ => Err(BackendError(format!(
                "calling {tool} failed: the app answered something other than a tool result"
            ))),
        })
    }

    /// Reads an answer's SSE stream up to the message that answers `id`.
    async fn read_answer(
        &self,
        client: &ActorClient,
        route: &Route,
        mut events: Events,
        id: &NumberOrString,
    ) -> Result<ServerJsonRpcMessage, String> {
        let (mut last, mut retry, mut resumes) = (None::<String>, None::<u64>, 0);
        loop {
            while let Some(ev) = events.next().await {
                let ev = ev.map_err(|e| plain::error_words(&self.url, Peer::App, &e))?;
                if ev.id.is_some() {
                    last = ev.id.clone();
                }
                if ev.retry.is_some() {
                    retry = ev.retry;
                }
                let Some(data) = ev.data.as_deref().filter(|d| !d.trim().is_empty()) else {
                    continue;
                };
                let msg: ServerJsonRpcMessage = serde_json::from_str(data).map_err(|_| {
                    format!(
                        "{} answered, but not as an MCP server (is the path /mcp?)",
                        self.url
                    )
                })?;
                match &msg {
                    ServerJsonRpcMessage::Response(r) if &r.id == id => return Ok(msg),
                    ServerJsonRpcMessage::Error(e) if e.id.as_ref() == Some(id) => return Ok(msg),
                    ServerJsonRpcMessage::Request(r) => {
                        self.reply(client, route, &r.request, r.id.clone()).await;
                    }
                    // Notifications during the call (progress, logging) are passed over.
                    _ => {}
                }
            }
            // The app closed the stream before the result: resume it (SSE polling).
            let Some(from) = last.clone() else {
                return Err(format!(
                    "{} closed the call's stream before its result",
                    self.url
                ));
            };
            resumes += 1;
            if resumes > MAX_RESUMES {
                return Err(format!(
                    "{} closed the call's stream {MAX_RESUMES} times before its result",
                    self.url
                ));
            }
            if let Some(ms) = retry {
                tokio::time::sleep(Duration::from_millis(ms).min(MAX_RETRY)).await;
            }
            events = client
                .http
                .get_stream(
                    self.url.as_str().into(),
                    route.session.clone(),
                    Some(from),
                    self.token.clone(),
                    route.headers.clone(),
                )
                .await
                .map_err(|e| plain::error_words(&self.url, Peer::App, &e))?;
        }
    }

    /// Answers a request the app sent during a call: `ping`; anything else is refused.
    async fn reply(
        &self,
        client: &ActorClient,
        route: &Route,
        request: &ServerRequest,
        id: NumberOrString,
    ) {
        let msg = match request {
            ServerRequest::PingRequest(_) => {
                ClientJsonRpcMessage::response(ClientResult::empty(()), id)
            }
            _ => ClientJsonRpcMessage::error(
                ErrorData::new(
                    ErrorCode::METHOD_NOT_FOUND,
                    "the engine does not pass this request on to its caller",
                    None,
                ),
                Some(id),
            ),
        };
        let _ = client
            .http
            .post_message(
                self.url.as_str().into(),
                msg,
                route.session.clone(),
                self.token.clone(),
                route.headers.clone(),
            )
            .await;
    }
}
