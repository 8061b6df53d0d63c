//! A remote app's calls posted raw on the caller's own task (`ActorClient::post_raw_once`), on
//! the session rmcp opened (its id and headers, noted by [`ActorClient`]), their results kept as
//! the app wrote them (rmcp's types would read its numbers as floats). rmcp's
//! session hands every request to a service task and then to a transport task, and on the
//! engine's multi-threaded runtime each hand-over wakes another thread: a call costs a few tens
//! of microseconds more than the app takes. Everything else (opening, listing, closing, a
//! session the app forgot, a later protocol version's per-message headers) stays rmcp's.
//!
//! The answer is one JSON message, or an SSE stream (bounded per event) read up to the call's
//! result: the app's
//! notifications before it (log messages, progress) are passed to the caller's
//! [`ClientChannel`] if the call has one (else passed over), its requests answered (a `ping`
//! here; `sampling/createMessage` and `elicitation/create` by the caller, whose answer or error
//! is posted back to the app; anything else refused), and a stream the app closes before the
//! result is resumed from its last event id, after the wait the app asked for. The app is
//! given a progress token only when the caller gave one. A call whose app sends nothing costs
//! nothing more.

use super::pending::{Abandon, Events};
use super::raw::{Posted, RawError};
use super::{
    ActorClient, ActorHeader, BackendError, CallContext, CallToolRequestParams, ClientChannel,
    ClientJsonRpcMessage, ClientRefusal, ClientResult, ErrorCode, ErrorData, HeaderName,
    NumberOrString, Peer, RemoteApp, Route, ServerJsonRpcMessage, StreamableHttpClient,
    StreamableHttpError, error_result, plain,
};
use futures_util::StreamExt;
use rmcp::model::{CallToolResult, CustomResult, ProgressToken};
use serde_json::Value;
use serde_json::value::RawValue;
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

/// A JSON-RPC message with its result left unread.
#[derive(serde::Deserialize)]
struct Envelope<'a> {
    id: Option<NumberOrString>,
    #[serde(borrow)]
    result: Option<&'a RawValue>,
    #[serde(borrow)]
    error: Option<&'a RawValue>,
    method: Option<serde::de::IgnoredAny>,
}

/// Whether the message `data` answers the request `id` (its result or its error).
fn answers(data: &str, id: &NumberOrString) -> bool {
    serde_json::from_str::<Envelope>(data).is_ok_and(|e| {
        e.method.is_none() && e.id.as_ref() == Some(id) && (e.result.is_some() || e.error.is_some())
    })
}

/// The app's answer to the call `id`, as it wrote it (rmcp's types would read its numbers as
/// floats), once it reads as a `CallToolResult`: the result, or the error result of its
/// JSON-RPC error; anything else is the error that it is no tool result.
fn tool_answer(tool: &str, mut answer: Value, id: &NumberOrString) -> Result<Value, BackendError> {
    let not_one = || {
        BackendError(format!(
            "calling {tool} failed: the app answered something other than a tool result"
        ))
    };
    let to_call = answer.get("id") == Some(&serde_json::json!(id));
    // The app answered, with a protocol error (its own id for it may be null: a request it
    // could not read): it is reachable; the caller sees the error.
    let unread = answer.get("id").is_none_or(Value::is_null);
    if (to_call || unread)
        && let Some(e) = answer.get_mut("error").map(Value::take)
    {
        let e = serde_json::from_value::<ErrorData>(e).map_err(|_| not_one())?;
        return Ok(error_result(&e));
    }
    if !to_call {
        return Err(not_one());
    }
    let result = answer
        .get_mut("result")
        .map(Value::take)
        .ok_or_else(not_one)?;
    <CallToolResult as serde::Deserialize>::deserialize(&result).map_err(|_| not_one())?;
    Ok(result)
}

/// How long the rest of an answer's stream is read after its result, so that its connection is
/// kept for the next call (an app ends the stream right after the result).
const DRAIN: Duration = Duration::from_millis(100);

/// Reads the rest of an answer's stream after its result, off the call's path, when the
/// connection is to be kept: an HTTP/1.1 connection goes back to the pool only once its answer
/// was read to the end. Otherwise the stream is dropped, and its connection closed.
fn drain(client: &ActorClient, mut events: Events) {
    if client.reusing() {
        tokio::spawn(async move {
            let _ =
                tokio::time::timeout(DRAIN, async { while events.next().await.is_some() {} }).await;
        });
    }
}

/// The most times an answer's stream is resumed after the app closed it.
const MAX_RESUMES: usize = 100;
/// The longest wait before resuming that an app may ask for (its SSE `retry`).
const MAX_RETRY: Duration = Duration::from_secs(5);

impl RemoteApp {
    /// Posts one `tools/call` on the session's route and reads its answer.
    pub(super) async fn call_direct(
        &self,
        client: &ActorClient,
        route: Route,
        mut params: CallToolRequestParams,
        who: ActorHeader,
        ctx: &CallContext,
    ) -> Direct {
        let tool = params.name.to_string();
        let n = self.next_id.fetch_add(1, Ordering::Relaxed);
        let id = NumberOrString::String(format!("datanotes-{n}").into());
        let channel = ctx.channel();
        if channel.is_some_and(|c| c.wants_progress()) {
            // The app's progress comes back with this token; the caller's replaces it.
            let mut meta = params.meta.take().unwrap_or_default();
            meta.set_progress_token(ProgressToken(id.clone()));
            params.meta = Some(meta);
        }
        let mut headers = route.headers.clone();
        // Until the answer is read: a caller that gives up (cancels, or hangs up) drops this
        // future, and the app is told.
        let mut abandon = Abandon::new(self, client, route, &id);
        let route = &abandon.route;
        if let Some(a) = who.0 {
            headers.insert(HeaderName::from_static("x-datanotes-actor"), a);
        }
        if let Some(c) = who.1 {
            headers.insert(HeaderName::from_static("x-datanotes-caller"), c);
        }
        for (k, v) in who.2 {
            headers.insert(k, v);
        }
        let message = serde_json::json!({
            "jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params,
        });
        let failed = |why: String| {
            Direct::Answered(Err(BackendError(format!("calling {tool} failed: {why}"))))
        };
        let token = match self.bearer().await {
            Ok(t) => t,
            Err(e) => {
                abandon.armed = false;
                return Direct::Answered(Err(e));
            }
        };
        let posting = Route {
            session: route.session.clone(),
            headers,
        };
        let max = super::content::MAX_ANSWER_BYTES;
        let sent = client
            .post_raw_once(&self.url, &posting, token.clone(), &message, max)
            .await;
        let answer = match sent {
            // The app refused the token (revoked, or expired early): renewed once, and the
            // call goes on a new session (the app has not run it).
            Err(StreamableHttpError::AuthRequired(e)) => {
                abandon.armed = false;
                let Some(o) = &self.oauth else {
                    let e = StreamableHttpError::<reqwest::Error>::AuthRequired(e);
                    return failed(plain::error_words(&self.url, Peer::App, &e));
                };
                let Some(t) = &token else {
                    o.challenged(&e.www_authenticate_header);
                    return Direct::Answered(Err(self.or_sign_in(BackendError(String::new()))));
                };
                if let Err(e) = o.rejected(t).await {
                    return Direct::Answered(Err(self.no_token(e)));
                }
                return Direct::Expired(params);
            }
            // A scope the sign-in did not grant: the owner connects the app again.
            Err(StreamableHttpError::InsufficientScope(e)) => {
                abandon.armed = false;
                if let Some(o) = &self.oauth {
                    o.insufficient(&e.www_authenticate_header, e.required_scope.as_deref());
                }
                let e = StreamableHttpError::<reqwest::Error>::InsufficientScope(e);
                return failed(plain::error_words(&self.url, Peer::App, &e));
            }
            Err(e) => return failed(plain::error_words(&self.url, Peer::App, &e)),
            Ok(Err(RawError::Expired)) => {
                abandon.armed = false;
                return Direct::Expired(params);
            }
            Ok(Err(RawError::TooBig)) => {
                return failed(format!("the app's answer is over {max} bytes"));
            }
            Ok(Err(RawError::Failed(why))) => return failed(why),
            Ok(Ok(Posted::Json(answer))) => answer,
            Ok(Ok(Posted::Sse(mut events))) => {
                let data = match self
                    .read_answer(client, route, &mut events, &id, channel)
                    .await
                {
                    Ok(data) => data,
                    Err(why) => return failed(why),
                };
                drain(client, events);
                match serde_json::from_str(&data) {
                    Ok(answer) => answer,
                    Err(_) => {
                        return failed(format!(
                            "{} answered, but not as an MCP server (is the path /mcp?)",
                            self.url
                        ));
                    }
                }
            }
        };
        abandon.armed = false;
        Direct::Answered(tool_answer(&tool, answer, &id))
    }

    /// Reads an answer's SSE stream up to the message that answers `id`: its text, as the app
    /// wrote it.
    pub(super) async fn read_answer(
        &self,
        client: &ActorClient,
        route: &Route,
        events: &mut Events,
        id: &NumberOrString,
        channel: Option<&dyn ClientChannel>,
    ) -> Result<String, String> {
        let (mut last, mut retry, mut resumes) = (None::<String>, None::<u64>, 0);
        loop {
            while let Some(ev) = events.next().await {
                let ev = ev.map_err(|e| match super::raw::too_big(&e) {
                    true => super::raw::TOO_BIG.to_string(),
                    false => plain::error_words(&self.url, Peer::App, &e),
                })?;
                if ev.id.is_some() {
                    last = ev.id.clone();
                }
                if ev.retry.is_some() {
                    retry = ev.retry;
                }
                let Some(owned) = ev.data.filter(|d| !d.trim().is_empty()) else {
                    continue;
                };
                if answers(&owned, id) {
                    return Ok(owned);
                }
                let data = owned.as_str();
                let msg = match serde_json::from_str::<ServerJsonRpcMessage>(data) {
                    Ok(m) => m,
                    // A request whose parameters rmcp's types do not read (a newer schema):
                    // passed on as it is.
                    Err(_) if self.reply_raw(client, route, data, channel).await => continue,
                    Err(_) => {
                        return Err(format!(
                            "{} answered, but not as an MCP server (is the path /mcp?)",
                            self.url
                        ));
                    }
                };
                match &msg {
                    ServerJsonRpcMessage::Request(_) => {
                        self.reply_raw(client, route, data, channel).await;
                    }
                    // Notifications during the call (log messages, progress) go to the caller
                    // as the app sent them; without a channel they are passed over.
                    ServerJsonRpcMessage::Notification(_) => {
                        if let Some(c) = channel
                            && let Ok(mut v) = serde_json::from_str::<Value>(data)
                            && let Some(Value::String(method)) = v.get("method").cloned()
                        {
                            let params = v.get_mut("params").map(Value::take);
                            c.notify(&method, params.unwrap_or(Value::Null)).await;
                        }
                    }
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
            *events = client
                .http()
                .get_stream(
                    self.url.as_str().into(),
                    route.session.clone(),
                    Some(from),
                    self.bearer_now(),
                    route.headers.clone(),
                )
                .await
                .map_err(|e| plain::error_words(&self.url, Peer::App, &e))?;
        }
    }

    /// Answers a request the app sent during a call, read from its JSON as the app sent it:
    /// `ping` here; `sampling/createMessage`, `elicitation/create`, `roots/list` and the
    /// caller's own tasks (`tasks/*`, of a request it ran as a task) by the caller (through
    /// `channel`; without one, refused as undeclared); anything else refused. False: `data` is
    /// no request.
    async fn reply_raw(
        &self,
        client: &ActorClient,
        route: &Route,
        data: &str,
        channel: Option<&dyn ClientChannel>,
    ) -> bool {
        let Ok(mut v) = serde_json::from_str::<Value>(data) else {
            return false;
        };
        let (Some(Value::String(method)), Some(id)) = (v.get("method").cloned(), v.get("id"))
        else {
            return false;
        };
        let Ok(id) = serde_json::from_value::<NumberOrString>(id.clone()) else {
            return false;
        };
        let answer = match method.as_str() {
            "ping" => Ok(ClientResult::empty(())),
            "sampling/createMessage"
            | "elicitation/create"
            | "roots/list"
            | "tasks/get"
            | "tasks/result"
            | "tasks/list"
            | "tasks/cancel" => {
                let mut params = v.get_mut("params").map(Value::take).unwrap_or(Value::Null);
                // The app's own progress token means nothing to the caller; the rest of its
                // `_meta` (the task a request belongs to) goes on.
                if let Some(p) = params.as_object_mut()
                    && let Some(Value::Object(m)) = p.get_mut("_meta")
                {
                    m.remove("progressToken");
                    if m.is_empty() {
                        p.remove("_meta");
                    }
                }
                match channel {
                    Some(c) => c
                        .request(&method, params)
                        .await
                        .map(|r| ClientResult::CustomResult(CustomResult(r))),
                    None => Err(ClientRefusal::undeclared(&method)),
                }
            }
            _ => Err(ClientRefusal::undeclared(&method)),
        };
        let msg = match answer {
            Ok(r) => ClientJsonRpcMessage::response(r, id),
            Err(e) => ClientJsonRpcMessage::error(
                ErrorData::new(ErrorCode(e.code), e.message, e.data),
                Some(id),
            ),
        };
        let _ = client
            .http()
            .post_message(
                self.url.as_str().into(),
                msg,
                route.session.clone(),
                self.bearer_now(),
                route.headers.clone(),
            )
            .await;
        true
    }
}
