//! A remote app: an MCP server over streamable HTTP, reached with rmcp's client, behind
//! [`AppBackend`]. `client.rs` is its HTTP client (the caller's actor on each call, the answer
//! limits, the session's route); `direct.rs` posts a call on the caller's own task.
//!
//! Here: the timeouts, the listing read page by page under the caps, and the calls.

mod client;
mod content;
mod direct;
pub(crate) mod oauth;
mod pending;
mod raw;
mod relay;
mod sessions;
mod subscriptions;

use self::client::{ActorClient, ActorHeader, Route};
use crate::apps::backend::{
    AppAnswer, AppBackend, AppRequest, BackendError, CallContext, ClientChannel, ClientRefusal,
    Listing, ToolFields,
};
use crate::apps::limits::ListingCaps;
use crate::apps::plain::{self, Peer};
use futures_util::future::BoxFuture;
use http::HeaderName;
use rmcp::RoleClient;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, ClientJsonRpcMessage, ClientRequest, ClientResult,
    ErrorCode, ErrorData, NumberOrString, PaginatedRequestParams, ServerJsonRpcMessage,
    ServerResult, Tool,
};
use rmcp::service::RunningService;
use rmcp::transport::streamable_http_client::{StreamableHttpClient, StreamableHttpError};
use serde_json::Value;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

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

type Session = Arc<RunningService<RoleClient, relay::Relay>>;

/// An open session with an app: rmcp's, and the HTTP client it posts with.
#[derive(Clone)]
struct Open {
    service: Session,
    client: ActorClient,
}

/// Which of an app's sessions (see `sessions.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Purpose {
    /// The one that lists (its answers bounded by the listing's byte cap).
    List,
    /// The one shared by every caller without an MCP session (HTTP `apps/call/`, a client of
    /// 2026-07-28): its calls, reads and subscriptions.
    Call,
    /// An agent's own session (kept by agent, never in a slot).
    Agent,
}

/// A remote app: an MCP server over streamable HTTP, reached with rmcp's client, on sessions
/// kept and re-opened after a failure (the actor travels as the `X-Datanotes-Actor` header of
/// each call's request, not per session).
pub struct RemoteApp {
    url: String,
    /// The addresses its connections may reach.
    policy: crate::outbound::Policy,
    token: Option<String>,
    /// Without a static token: the app's OAuth sign-in (its tokens, if it uses one).
    oauth: Option<Arc<oauth::AppOAuth>>,
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
    /// Where the app's notifications outside calls go (list changes, resource updates).
    events: relay::Events,
    /// The sessions of agents: one per agent's MCP session (see `sessions.rs`).
    agents: tokio::sync::Mutex<std::collections::HashMap<String, sessions::AgentOpen>>,
    /// The subscriptions made at the app, to make again when it forgets them.
    subs: subscriptions::Subscriptions,
}

impl RemoteApp {
    /// A remote app at `url`, sent `token` as its bearer; without one, `oauth` is its OAuth
    /// sign-in (used once the app asks for it); `policy`: the addresses its connections may
    /// reach (`self_url::policy`).
    pub(crate) fn new(
        url: String,
        policy: crate::outbound::Policy,
        token: Option<String>,
        oauth: Option<Arc<oauth::AppOAuth>>,
        timeouts: Timeouts,
        caps: ListingCaps,
        events: relay::Events,
    ) -> RemoteApp {
        RemoteApp {
            policy,
            events,
            agents: Default::default(),
            subs: Default::default(),
            url,
            oauth: if token.is_none() { oauth } else { None },
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

    /// The bearer of a request now: the static token, or the OAuth access token (renewed
    /// first when it is about to expire).
    async fn bearer(&self) -> Result<Option<String>, BackendError> {
        match &self.oauth {
            None => Ok(self.token.clone()),
            Some(o) => o.bearer().await.map_err(|e| self.no_token(e)),
        }
    }

    /// The bearer known now, without waiting (for a notification sent on the way out).
    fn bearer_now(&self) -> Option<String> {
        match &self.oauth {
            None => self.token.clone(),
            Some(o) => o.cached(),
        }
    }

    fn no_token(&self, e: oauth::NoToken) -> BackendError {
        match (e, &self.oauth) {
            (oauth::NoToken::SignIn(why), Some(o)) => BackendError(o.sign_in_error(&why)),
            (oauth::NoToken::SignIn(why) | oauth::NoToken::Failed(why), _) => BackendError(why),
        }
    }

    /// `e`, or the sentence that the owner must sign in, when that is why it failed.
    fn or_sign_in(&self, e: BackendError) -> BackendError {
        match self
            .oauth
            .as_ref()
            .and_then(|o| o.needs().map(|w| o.sign_in_error(&w)))
        {
            Some(why) => BackendError(why),
            None => e,
        }
    }

    fn slot(&self, p: Purpose) -> &tokio::sync::Mutex<Option<Open>> {
        match p {
            Purpose::List => &self.list,
            Purpose::Call | Purpose::Agent => &self.call,
        }
    }

    /// Every page of the app's tools, stopping at the caps (tools, bytes, pages), with the
    /// fields of each that rmcp does not model (see [`Listing::fields`]). Read as the app wrote
    /// it once the session's route is known; else through rmcp's session (its types).
    async fn list_capped(&self, open: &Open) -> Result<(Vec<Tool>, ToolFields), BackendError> {
        let caps = self.caps;
        let mut tools: Vec<Tool> = vec![];
        let mut fields = ToolFields::new();
        let (mut bytes, mut pages) = (0usize, 0usize);
        let mut cursor: Option<String> = None;
        self.too_big.store(false, Ordering::Relaxed);
        let over = || {
            caps.listing_over(0, usize::MAX, 0)
                .unwrap_or_else(|| "the app's listing is too big".into())
        };
        let version = open
            .service
            .peer_info()
            .map(|i| i.protocol_version.to_string())
            .unwrap_or_default();
        let route = open.client.route_soon(&version, ROUTE_WAIT).await;
        loop {
            pages += 1;
            if let Some(why) = caps.listing_over(tools.len(), bytes, pages) {
                return Err(BackendError(why));
            }
            let page = match route.clone() {
                Some(route) => {
                    let params = match cursor.take() {
                        Some(c) => serde_json::json!({"cursor": c}),
                        None => serde_json::json!({}),
                    };
                    let max = caps.max_bytes;
                    match self
                        .post_request(&open.client, route, "tools/list", params, None, max)
                        .await
                    {
                        Ok(page) => match crate::apps::backend::rpc_error_in(&page) {
                            Some(e) => {
                                return Err(BackendError(format!(
                                    "listing tools failed: the app answered with an error: {}",
                                    e["message"].as_str().unwrap_or("(no message)")
                                )));
                            }
                            None => page,
                        },
                        Err(raw::RawError::TooBig) => return Err(BackendError(over())),
                        Err(e) => return Err(e.into_backend("listing tools")),
                    }
                }
                None => {
                    let params = PaginatedRequestParams::default().with_cursor(cursor.take());
                    let page = open.service.list_tools(Some(params)).await.map_err(|e| {
                        // One answer over the byte cap was cut by the HTTP client: name the cap.
                        if self.too_big.swap(false, Ordering::Relaxed) {
                            return BackendError(over());
                        }
                        BackendError(format!(
                            "listing tools failed: {}",
                            plain::service_error(&self.url, Peer::App, &e)
                        ))
                    })?;
                    serde_json::to_value(page).unwrap_or_default()
                }
            };
            let Some(listed) = page.get("tools").and_then(Value::as_array) else {
                return Err(BackendError(
                    "listing tools failed: the app's answer has no tools".into(),
                ));
            };
            for t in listed {
                bytes += serde_json::to_vec(t).map_or(0, |v| v.len());
                let tool: Tool = serde_json::from_value(t.clone()).map_err(|e| {
                    BackendError(format!(
                        "listing tools failed: a tool the app listed is not valid: {e}"
                    ))
                })?;
                if let Some(extra) = unmodelled(t) {
                    fields.insert(tool.name.to_string(), extra);
                }
                tools.push(tool);
                if let Some(why) = caps.listing_over(tools.len(), bytes, pages) {
                    return Err(BackendError(why));
                }
            }
            match page.get("nextCursor").and_then(Value::as_str) {
                Some(c) => cursor = Some(c.to_string()),
                None => return Ok((tools, fields)),
            }
        }
    }
}

/// The longest a listing waits for its new session's route (see [`ActorClient::route_soon`]).
const ROUTE_WAIT: Duration = Duration::from_secs(1);

/// The fields of a listed tool that rmcp's `Tool` does not model, if any.
fn unmodelled(t: &Value) -> Option<serde_json::Map<String, Value>> {
    const MODELLED: [&str; 8] = [
        "name",
        "title",
        "description",
        "inputSchema",
        "outputSchema",
        "annotations",
        "icons",
        "_meta",
    ];
    let extra: serde_json::Map<String, Value> = t
        .as_object()?
        .iter()
        .filter(|(k, _)| !MODELLED.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    (!extra.is_empty()).then_some(extra)
}

impl AppBackend for RemoteApp {
    fn kind(&self) -> &'static str {
        "remote"
    }

    fn list(&self) -> BoxFuture<'_, Result<Listing, BackendError>> {
        Box::pin(async move {
            let open = self
                .session(Purpose::List)
                .await
                .map_err(|e| self.or_sign_in(e))?;
            let s = open.service.clone();
            let r = match tokio::time::timeout(self.timeouts.list, self.list_capped(&open)).await {
                Err(_) => Err(BackendError(format!(
                    "timed out listing tools ({})",
                    secs(self.timeouts.list)
                ))),
                Ok(Err(e)) => Err(e),
                Ok(Ok((tools, fields))) => {
                    let instructions = s.peer_info().and_then(|i| i.instructions.clone());
                    let mut l = Listing {
                        tools,
                        fields,
                        instructions,
                        ..Listing::default()
                    };
                    self.list_content(&open, &mut l).await;
                    Ok(l)
                }
            };
            if r.is_err() {
                self.forget(Purpose::List).await;
            }
            r.map_err(|e| self.or_sign_in(e))
        })
    }

    fn call<'a>(&'a self, tool: &'a str, args: Value, ctx: &'a CallContext) -> AppAnswer<'a> {
        Box::pin(async move {
            let open = self.for_call(ctx).await.map_err(|e| self.or_sign_in(e))?;
            let mut params = CallToolRequestParams::new(tool.to_string());
            if let Value::Object(m) = args {
                params = params.with_arguments(m);
            }
            let header = |v: &Option<String>| {
                v.as_deref()
                    .filter(|a| !a.is_empty())
                    .and_then(|a| a.parse::<http::HeaderValue>().ok())
            };
            // The call's trace context goes in `params._meta` and the HTTP headers alike.
            let traced = ctx
                .trace
                .as_ref()
                .map(crate::telemetry::trace::inject)
                .unwrap_or_default();
            let mut trace_headers = Vec::new();
            if !traced.is_empty() {
                let mut meta = params.meta.take().unwrap_or_default();
                for (k, v) in traced {
                    if let Ok(hv) = v.parse::<http::HeaderValue>() {
                        trace_headers.push((http::HeaderName::from_static(k), hv));
                    }
                    meta.0.insert(k.to_string(), Value::String(v));
                }
                params.meta = Some(meta);
            }
            let who = ActorHeader(header(&ctx.actor), header(&ctx.caller), trace_headers);
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
                        self.forget_for(ctx).await;
                        let open = self.for_call(ctx).await.map_err(|e| self.or_sign_in(e))?;
                        break 'direct (open.service, params);
                    }
                };
                if r.is_err() {
                    self.forget_for(ctx).await;
                }
                return r.map_err(|e| self.or_sign_in(e));
            };
            let mut req = CallToolRequest::new(params);
            req.extensions.insert(who);
            let sent = async {
                let options = rmcp::service::PeerRequestOptions::no_options();
                let handle = s
                    .send_cancellable_request(ClientRequest::CallToolRequest(req), options)
                    .await?;
                // A caller that gives up drops this future: the app is told.
                let mut abandon = Abandon(Some((handle.peer.clone(), handle.id.clone())));
                let r = handle.await_response().await;
                abandon.0 = None;
                r
            };
            let r = match tokio::time::timeout(self.timeouts.call, sent).await {
                Err(_) => Err(timed_out(tool, self.timeouts.call)),
                // The app answered, with a protocol error: it is reachable; the caller sees the error.
                Ok(Err(rmcp::ServiceError::McpError(e))) => return Ok(error_result(&e)),
                Ok(Err(e)) => Err(BackendError(format!(
                    "calling {tool} failed: {}",
                    plain::service_error(&self.url, Peer::App, &e)
                ))),
                Ok(Ok(result)) => tool_result(tool, result),
            };
            if r.is_err() {
                self.forget_for(ctx).await;
            }
            r.map_err(|e| self.or_sign_in(e))
        })
    }

    fn request<'a>(
        &'a self,
        req: AppRequest,
        params: Value,
        ctx: &'a CallContext,
    ) -> AppAnswer<'a> {
        Box::pin(async move {
            match req.is_task() {
                true => self.task_request(req, params, ctx).await,
                false => self.content_request(req, params, ctx).await,
            }
        })
    }

    fn roots_changed<'a>(&'a self, agent: &'a str) -> BoxFuture<'a, ()> {
        Box::pin(self.agent_roots_changed(agent))
    }

    fn set_log_level<'a>(&'a self, agent: &'a str, level: &'static str) -> BoxFuture<'a, ()> {
        Box::pin(self.agent_log_level(agent, level))
    }

    fn keep_up(&self) -> BoxFuture<'_, ()> {
        Box::pin(self.keep_subscriptions())
    }

    fn subscriptions(&self) -> Vec<crate::apps::backend::Subscribed> {
        self.subs.export()
    }

    fn adopt(&self, subscriptions: Vec<crate::apps::backend::Subscribed>) {
        self.subs.adopt(subscriptions);
    }

    /// Its notifications and requests during a call are passed to the caller (on the direct
    /// path; the one call that goes through rmcp's session after the app forgot the session
    /// passes them over).
    fn streams(&self) -> bool {
        true
    }

    fn sign_in(&self) -> Option<Value> {
        self.oauth.as_ref().and_then(|o| o.status())
    }
}

/// A call through rmcp's session whose answer is not read yet: dropped armed (its caller
/// cancelled it, or hung up), it sends the app `notifications/cancelled` for its request.
struct Abandon(Option<(rmcp::service::Peer<RoleClient>, rmcp::model::RequestId)>);

impl Drop for Abandon {
    fn drop(&mut self) {
        let Some((peer, id)) = self.0.take() else {
            return;
        };
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let Ok(n) = serde_json::from_value::<rmcp::model::ClientNotification>(serde_json::json!({
            "method": "notifications/cancelled",
            "params": {"requestId": id, "reason": "the caller cancelled the call"},
        })) else {
            return;
        };
        rt.spawn(async move {
            let _ = peer.send_notification(n).await;
        });
    }
}

/// The error of a call that ran out of time.
fn timed_out(tool: &str, limit: Duration) -> BackendError {
    BackendError(format!("timed out calling {tool} ({})", secs(limit)))
}

/// A JSON-RPC error the app answered to a call: an error result (what an HTTP caller reads),
/// carrying the error whole in `_meta` ([`crate::apps::backend::RPC_ERROR_META`]), which the
/// MCP door answers as the JSON-RPC error itself, `data` and all.
fn error_result(e: &ErrorData) -> Value {
    serde_json::json!({
        "content": [{"type": "text", "text": e.message}],
        "isError": true,
        "_meta": {crate::apps::backend::RPC_ERROR_META: e},
    })
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
