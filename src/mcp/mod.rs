//! The MCP door (`datanotes-mcp`): one MCP address for agents, built on rmcp.
//!
//! Streamable HTTP at `/mcp` on the engine's listener (behind the same bearer tokens), and a stdio
//! proxy (`datanotes mcp`, see [`stdio`]) for desktop clients. `tools/list` is the aggregator's
//! namespace: engine operations first, then every app's tools. Every `tools/call` goes through
//! the aggregator (so engine operations go through `ops::call` and `auth::authorize`, as over
//! HTTP) and is reported to the change feed as a `tool_call` event, handed to the writer
//! without waiting for its commit.
//!
//! The transport is rmcp's (sessions, SSE streams, resumption), with one lean path beside it:
//! `ping`, `tools/list` and `tools/call` on an open session from a client that accepts JSON are
//! answered here as one `application/json` answer, written once from the result, without the
//! session worker's hops or an SSE stream per call. (rmcp's own `json_response` applies only to
//! stateless requests; this door keeps sessions, for `list_changed` and the session caps.) Everything else (initialize, notifications, GET streams, DELETE, calls of
//! tools whose app may stream, calls that ask for progress) goes to rmcp. Every open session
//! gets `notifications/tools/list_changed` when the namespace changes (the first change at once;
//! the rest of a burst once it has been quiet for 200 ms, at most one a second while it lasts).
//!
//! While an app's tool runs, what the app sends reaches the client of the call (see
//! [`channel`]): its log messages, its progress and its sampling and elicitation requests. Such
//! a call is served by rmcp (an SSE answer) when the client may receive any of them: it gave a
//! progress token, set a log level, or declared sampling or elicitation.

mod answers;
mod calls;
mod channel;
mod content;
mod exact;
mod guards;
mod headers;
pub mod hosts;
mod lean;
mod listen;
mod outgoing;
mod rounds;
mod sessions;
pub mod stdio;
mod task_ext;
mod task_inputs;
mod tasks;

use crate::apps::backend::{AgentChannel, ClientChannel};
use crate::ops::Ctx;
use crate::server::Shared;
use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ClientJsonRpcMessage, Implementation,
    InitializeRequestParams, InitializeResult, ListToolsResult, PaginatedRequestParams,
    ServerCapabilities, ServerConfig, ServerResult,
};
use rmcp::model::{
    CompleteRequestParams, CompleteResult, GetPromptRequestParams, GetPromptResponse,
    ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult, ReadResourceRequestParams,
    ReadResourceResponse, SubscribeRequestParams, UnsubscribeRequestParams,
};
use rmcp::service::{NotificationContext, Peer, RequestContext};
use rmcp::transport::streamable_http_server::session::SessionManager;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Value, json};
use sessions::{Sessions, session_id};
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

pub(crate) struct Session {
    peer: Peer<RoleServer>,
    /// The client's name (from `initialize`): the actor's harness unless the caller names one.
    client: Option<String>,
    /// The client declared `sampling` and `elicitation`.
    sampling: bool,
    elicitation: bool,
    /// The session's id, and what the client declared that an app may ask of it or show it
    /// (`sampling`, `elicitation`, `roots`, `extensions` such as MCP Apps: its capabilities,
    /// as it sent them).
    id: String,
    asks: Value,
    /// `asks` spelled one way (`capabilities_key`).
    asks_key: String,
    /// The lowest level of log messages the client asked for (`logging/setLevel`,
    /// [`channel::rank`]); 0 before it asks.
    level: std::sync::atomic::AtomicU8,
    /// When rmcp's session last saw traffic (its idle timeout counts only what it sees).
    touched: Mutex<Instant>,
    /// The lean path's calls in flight, by JSON-RPC id (its JSON text): what a
    /// `notifications/cancelled` for one of them cancels (rmcp knows only its own requests).
    inflight: Mutex<HashMap<String, CancellationToken>>,
    /// The resources this session is subscribed to (their served URIs), at most
    /// [`content::MAX_SUBSCRIPTIONS`].
    subs: Mutex<std::collections::HashSet<String>>,
    /// The tasks apps made for this session: which app made each.
    tasks: Mutex<tasks::Made>,
    /// The client's answers to apps' requests, as it wrote them, until the relay takes them.
    answers: Arc<answers::Answers>,
}

impl Session {
    /// Whether the client may receive what an app sends during a call (beyond progress, which
    /// it asks for per call).
    fn listens(&self) -> bool {
        self.sampling || self.elicitation || self.level.load(Ordering::Relaxed) > 0
    }
}

#[derive(Clone)]
pub(crate) struct Mcp {
    server: Shared,
    sessions: Arc<Sessions>,
    /// The calls of 2026-07-28 clients waiting for their input (`rounds.rs`).
    rounds: Arc<rounds::Rounds>,
    /// The tasks apps made for callers without a session (`task_ext.rs`).
    sessionless: Arc<task_ext::Sessionless>,
}

impl Mcp {
    fn ctx(&self, rc: &RequestContext<RoleServer>) -> Result<Ctx, ErrorData> {
        let parts = rc.extensions.get::<http::request::Parts>();
        let Some(parts) = parts else {
            return Err(ErrorData::internal_error(
                "no HTTP request behind this MCP request",
                None,
            ));
        };
        let info = rc.peer.peer_info();
        self.server_ctx(parts, info.as_ref().map(|i| i.client_info.name.as_str()))
    }

    /// The caller: the token's (checked once, by [`require_token`]), the session, and the
    /// actor: `X-Datanotes-Actor` if sent, else the client's name as the harness.
    fn server_ctx(
        &self,
        parts: &http::request::Parts,
        client: Option<&str>,
    ) -> Result<Ctx, ErrorData> {
        let ctx = match parts.extensions.get::<Ctx>() {
            Some(c) => c.clone(),
            None => self
                .server
                .mcp_caller(&parts.headers)
                .map_err(|e| ErrorData::invalid_request(e.message.clone(), None))?,
        };
        Ok(client_actor(ctx, &parts.headers, client))
    }
}

/// The actor of an MCP call, the one rule for every MCP door (`/mcp`, and `datanotes mcp`, which
/// introduces itself with its desktop client's `clientInfo`): `X-Datanotes-Actor`
/// (`harness / model`) when the caller sent one, else the MCP client's name (`clientInfo.name`)
/// as the harness and no model (a client's version is never taken as a model); the session is
/// the `Mcp-Session-Id`.
fn client_actor(mut ctx: Ctx, headers: &HeaderMap, client: Option<&str>) -> Ctx {
    if ctx.actor.session.is_none() {
        ctx.actor.session = headers
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .map(|s| crate::feed::cut(s, crate::engine::journal::ACTOR_FIELD_CHARS));
    }
    if ctx.actor.harness.is_none()
        && let Some(name) = client.map(str::trim).filter(|n| !n.is_empty())
    {
        // Actor::new cuts the name at 200 characters; a `/` in it is part of the name.
        ctx.actor = crate::engine::Actor::new(
            Some(name.to_string()),
            None,
            ctx.actor.app.take(),
            ctx.actor.session.take(),
            ctx.actor.token.take(),
        );
    }
    ctx
}

impl ServerHandler for Mcp {
    #[allow(deprecated)] // MCP logging (SEP-2577 deprecates it; clients still use it)
    fn get_info(&self) -> ServerConfig {
        let mut imp = Implementation::new("datanotes-mcp", env!("CARGO_PKG_VERSION"));
        imp.title = Some("datanotes".into());
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_logging()
                .enable_tools()
                .enable_tool_list_changed()
                .enable_resources()
                .enable_resources_subscribe()
                .enable_resources_list_changed()
                .enable_prompts()
                .enable_prompts_list_changed()
                .enable_completions()
                .enable_tasks()
                .build(),
        )
        .with_server_info(imp)
        .with_instructions(self.server.agg.instructions(&crate::auth::Caller::Owner))
    }

    /// `initialize`: the instructions are those of the apps whose tools the caller may call.
    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, ErrorData> {
        context.peer.set_peer_info(request.clone());
        let mut r = self.negotiate_initialize(&request)?;
        // The tasks extension is 2026-07-28's; a session has the tasks of 2025-11-25.
        let ext = &mut r.capabilities.extensions;
        ext.iter_mut()
            .for_each(|e| _ = e.remove(rmcp::model::TASKS_EXTENSION_ID));
        ext.take_if(|e| e.is_empty());
        // Without the request's caller (never over /mcp): the engine's instructions only.
        let caller = match self.ctx(&context) {
            Ok(ctx) => ctx.caller,
            Err(_) => crate::auth::Caller::App(Arc::new(crate::auth::AppScope::default())),
        };
        r.instructions = Some(self.server.agg.instructions(&caller));
        Ok(r)
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        let Some(id) = context
            .extensions
            .get::<http::request::Parts>()
            .and_then(|p| p.headers.get("mcp-session-id"))
            .and_then(|v| v.to_str().ok())
            .map(String::from)
        else {
            return;
        };
        let info = context.peer.peer_info();
        let client = info.as_ref().map(|i| i.client_info.name.clone());
        let caps = info.as_ref().map(|i| &i.capabilities);
        let asks = caps
            .and_then(|c| serde_json::to_value(c).ok())
            .map(crate::apps::backend::agent_capabilities)
            .unwrap_or_else(|| json!({}));
        let mut asks = asks;
        if let Some(t) = self.sessions.declared.lock().unwrap().remove(&id) {
            asks["tasks"] = t;
        }
        let session = Session {
            id: id.clone(),
            asks_key: crate::apps::backend::capabilities_key(&asks),
            asks,
            client,
            sampling: caps.is_some_and(|c| c.sampling.is_some()),
            elicitation: caps.is_some_and(|c| c.elicitation.is_some()),
            level: Default::default(),
            peer: context.peer,
            touched: Mutex::new(Instant::now()),
            inflight: Mutex::default(),
            subs: Mutex::default(),
            tasks: Mutex::default(),
            answers: Arc::default(),
        };
        self.sessions
            .open
            .write()
            .unwrap()
            .insert(id, Arc::new(session));
        self.sessions.added.notify_waiters();
    }

    async fn list_tools(
        &self,
        _req: Option<PaginatedRequestParams>,
        rc: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let ctx = self.ctx(&rc)?;
        let agg = &self.server.agg;
        let hidden = match (self.session_of(&rc).await, rc.meta.client_capabilities()) {
            (Some(s), _) => agg.hidden_from(&(s as Arc<dyn AgentChannel>)).await,
            // A client of 2026-07-28 declares its capabilities with each request.
            (None, Some(c)) => agg.hidden_from_declared(json!(c)).await,
            (None, None) => Arc::default(),
        };
        Ok(ListToolsResult::with_all_items(
            self.server.agg.tools(&ctx.caller, &hidden),
        ))
    }

    async fn call_tool(
        &self,
        req: CallToolRequestParams,
        rc: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let ctx = self.ctx(&rc)?;
        let args = Value::Object(req.arguments.unwrap_or_default());
        let name = req.name.to_string();
        let session = self.session_of(&rc).await;
        let agent = session.clone().map(|s| s as Arc<dyn AgentChannel>);
        // A client of 2026-07-28 (no session) takes the app's requests as input requests.
        if agent.is_none() && rounds::era(&rc) {
            if let Some(r) = self.call_as_ext_task(&rc, &ctx, &name, &args).await {
                return r;
            }
            let responses = req.input_responses.as_ref();
            let limit = self.server.agg.call_timeout();
            let client = self.channel(&rc, None);
            let state = req.request_state;
            return self
                .rounds
                .serve(
                    &self.server,
                    ctx,
                    name,
                    args,
                    state,
                    responses,
                    limit,
                    client,
                    rc.ct.clone(),
                    exact::Exact::of(&rc),
                )
                .await;
        }
        let client = self.channel(&rc, session);
        let cancel = rc.ct.clone();
        let served =
            calls::serve_call(&self.server, ctx, name, args, client, cancel, agent).await?;
        if let (Some(exact), Some(app)) = (exact::Exact::of(&rc), served.written(rounds::era(&rc)))
        {
            exact.result(app);
        }
        Ok(served.result.into())
    }

    async fn list_resources(
        &self,
        req: Option<PaginatedRequestParams>,
        rc: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        self.list_resources_for(req, &rc).await
    }

    async fn list_resource_templates(
        &self,
        _req: Option<PaginatedRequestParams>,
        rc: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        self.list_templates_for(&rc)
    }

    async fn read_resource(
        &self,
        req: ReadResourceRequestParams,
        rc: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        Ok(self.read_resource_for(req, &rc).await?.into())
    }

    async fn subscribe(
        &self,
        req: SubscribeRequestParams,
        rc: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.subscribe_for(&req.uri, true, &rc).await
    }

    async fn unsubscribe(
        &self,
        req: UnsubscribeRequestParams,
        rc: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.subscribe_for(&req.uri, false, &rc).await
    }

    async fn list_prompts(
        &self,
        _req: Option<PaginatedRequestParams>,
        rc: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        self.list_prompts_for(&rc)
    }

    async fn get_prompt(
        &self,
        req: GetPromptRequestParams,
        rc: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        Ok(self.get_prompt_for(req, &rc).await?.into())
    }

    async fn complete(
        &self,
        req: CompleteRequestParams,
        rc: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        self.complete_for(req, &rc).await
    }

    /// `subscriptions/listen` (2026-07-28): what it accepts, and running it (`listen.rs`).
    fn accepted_subscription_filter(
        &self,
        requested: &rmcp::model::SubscriptionFilter,
    ) -> Option<rmcp::model::SubscriptionFilter> {
        Some(self.listen_filter(requested))
    }

    async fn listen(&self, context: rmcp::service::SubscriptionContext) -> Result<(), ErrorData> {
        self.listen_for(context).await
    }

    /// `notifications/roots/list_changed`: the agent's sessions with apps are told.
    async fn on_roots_list_changed(&self, context: NotificationContext<RoleServer>) {
        let id = context
            .extensions
            .get::<http::request::Parts>()
            .and_then(|p| session_id(&p.headers).map(String::from));
        if let Some(id) = id {
            self.server.agg.roots_changed(&id).await;
        }
    }

    /// `tasks/get` of the tasks extension (2026-07-28, `task_ext.rs`).
    async fn get_task(
        &self,
        req: rmcp::model::GetTaskParams,
        rc: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::GetTaskResult, ErrorData> {
        self.get_ext_task(req, &rc).await
    }

    /// `tasks/update` of the tasks extension: the client's input to a task (`task_inputs.rs`).
    async fn update_task(
        &self,
        req: rmcp::model::UpdateTaskParams,
        rc: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.update_ext_task(req, &rc)
    }

    /// `tasks/cancel` of the tasks extension (2026-07-28, `task_ext.rs`).
    async fn cancel_task(
        &self,
        req: rmcp::model::CancelTaskParams,
        rc: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.cancel_ext_task(req, &rc).await
    }

    /// `logging/setLevel`: the lowest level of the apps' log messages this session receives.
    #[allow(deprecated)] // MCP logging (SEP-2577 deprecates it; clients still use it)
    async fn set_level(
        &self,
        req: rmcp::model::SetLevelRequestParams,
        rc: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        if let Some(s) = self.session_of(&rc).await {
            s.level.store(channel::rank(req.level), Ordering::Relaxed);
            // The agent's sessions with apps are set to it too.
            if let Some(level) = s.log_level() {
                self.server.agg.set_log_level(&s.id, level).await;
            }
        }
        Ok(())
    }
}

impl Mcp {
    /// The session of a request served by rmcp. A client may ask at once after
    /// `notifications/initialized`, which rmcp may not have handed over yet: a session named
    /// and not yet known is waited for (a second at most).
    async fn session_of(&self, rc: &RequestContext<RoleServer>) -> Option<Arc<Session>> {
        let id = session_id_of(rc)?;
        self.sessions.soon(id, Duration::from_secs(1)).await
    }

    /// The client's side of a call served by rmcp, on its `session`: none if it may receive
    /// nothing (no progress token, no log level, neither sampling nor elicitation).
    fn channel(
        &self,
        rc: &RequestContext<RoleServer>,
        session: Option<Arc<Session>>,
    ) -> Option<Arc<dyn ClientChannel>> {
        let progress = rc.meta.get_progress_token();
        if progress.is_none() && !session.as_ref().is_some_and(|s| s.listens()) {
            return None;
        }
        Some(Arc::new(channel::Channel {
            peer: rc.peer.clone(),
            progress,
            level: session
                .as_ref()
                .map_or(0, |s| s.level.load(Ordering::Relaxed)),
            sampling: session.as_ref().is_some_and(|s| s.sampling),
            elicitation: session.as_ref().is_some_and(|s| s.elicitation),
            roots: session
                .as_ref()
                .is_some_and(|s| s.asks.get("roots").is_some()),
            tasks: session
                .as_ref()
                .is_some_and(|s| s.asks.get("tasks").is_some()),
            answers: session.map(|s| s.answers.clone()),
            exact: exact::Exact::of(rc),
        }))
    }
}

/// The session id of a request served by rmcp (none: a client without a session).
fn session_id_of(rc: &RequestContext<RoleServer>) -> Option<&str> {
    session_id(&rc.extensions.get::<http::request::Parts>()?.headers)
}

/// The `/mcp` address: the lean path, then rmcp's service.
struct Door {
    mcp: Mcp,
    manager: Arc<outgoing::Outgoing>,
    service: StreamableHttpService<Mcp, outgoing::Outgoing>,
    /// The open sessions' tokens and last uses (their caps and idle expiry).
    ledger: sessions::Ledger,
}

/// rmcp closes a session after this long without traffic it sees: the lean path tells it
/// about its calls at most this often.
const TOUCH_EVERY: Duration = Duration::from_secs(30);

/// Coalesces bursts of namespace changes: after a `list_changed`, the next waits for this long
/// without a change...
const LIST_CHANGED_QUIET: Duration = Duration::from_millis(200);
/// ... or for this long while the changes go on.
const LIST_CHANGED_MOST: Duration = Duration::from_secs(1);

impl Door {
    async fn handle(self: Arc<Self>, req: Request) -> Response {
        if let Some(r) = self.gate(&req) {
            return r;
        }
        if req.method() == Method::POST && session_id(req.headers()).is_none() {
            return self.open_session(req).await;
        }
        self.serve(req).await
    }

    /// A request on a session the ledger does not hold open is answered 404 here, saying why;
    /// so is one on another principal's session (a POST, its GET stream or a resume, DELETE),
    /// which leaves that session as it was.
    fn gate(&self, req: &Request) -> Option<Response> {
        let id = session_id(req.headers())?;
        let token = req
            .extensions()
            .get::<Ctx>()
            .map(|c| c.caller.token_name())
            .unwrap_or_default();
        match self.ledger.seen(id, &token) {
            sessions::Seen::Open => None,
            sessions::Seen::Foreign => Some(self.ledger.closed_answer(false)),
            seen => {
                let expired = matches!(seen, sessions::Seen::Expired);
                self.close(vec![id.to_string()]);
                Some(self.ledger.closed_answer(expired))
            }
        }
    }

    /// A request without a session (`initialize`): a session it opens is admitted to the
    /// ledger, which may close others (idle, or least recently used beyond a cap).
    async fn open_session(&self, req: Request) -> Response {
        let token = req
            .extensions()
            .get::<Ctx>()
            .map(|c| c.caller.token_name())
            .unwrap_or_default();
        let r = self.serve(req).await;
        if let Some(id) = sessions::opened(r.headers()) {
            let gone = self.ledger.admit(&id, &token);
            self.close(gone);
        }
        r
    }

    /// Closes sessions: rmcp's worker and the lean path's entry.
    fn close(&self, ids: Vec<String>) {
        for id in ids {
            self.mcp.sessions.forget(&id);
            let manager = self.manager.clone();
            tokio::spawn(async move {
                let _ = manager.close_session(&id.into()).await;
            });
        }
    }

    async fn serve(&self, req: Request) -> Response {
        if req.method() == Method::POST {
            let (mut parts, body) = req.into_parts();
            let bytes = match axum::body::to_bytes(body, crate::server::MAX_BODY).await {
                Ok(b) => b,
                Err(_) => {
                    return (
                        StatusCode::PAYLOAD_TOO_LARGE,
                        "the request body is too large",
                    )
                        .into_response();
                }
            };
            if let Some(r) = self.lean(&parts, &bytes).await {
                return r;
            }
            // A new session's client's `tasks`, kept for `notifications/initialized`.
            let opens = session_id(&parts.headers).is_none() && tasks::is_initialize(&bytes);
            let tasks = opens.then(|| tasks::declared(&bytes)).flatten();
            if let Some(s) = session_id(&parts.headers).and_then(|id| self.mcp.sessions.get(id)) {
                s.answers.keep(&bytes);
            }
            let listens = self.mcp.subscribe_first(&mut parts, &bytes).await;
            let kept = listens.as_ref().map(|_| parts.clone());
            let exact = exact::wanted(&bytes).map(|id| (id, exact::Exact::default()));
            if let Some((_, e)) = &exact {
                parts.extensions.insert(e.clone());
            }
            let req = Request::from_parts(parts, Body::from(bytes));
            let mut r = self.service.handle(req).await.into_response();
            if let Some((id, e)) = exact {
                r = exact::written(r, id, e);
            }
            if let (Some(s), Some(p)) = (listens, kept)
                && !sessions::streams(&r)
            {
                self.mcp.unsubscribe(&p, s);
            }
            if opens && r.status().is_success() {
                r = tasks::announce(r);
            }
            if let (Some(t), Some(id)) = (tasks, sessions::opened(r.headers())) {
                self.mcp.sessions.declared.lock().unwrap().insert(id, t);
            }
            return r;
        }
        if req.method() == Method::DELETE {
            let id = session_id(req.headers()).map(String::from);
            let mut r = self.service.handle(req).await.into_response();
            if r.status() == StatusCode::ACCEPTED {
                // A session ended: clients expect 200 or 204.
                *r.status_mut() = StatusCode::NO_CONTENT;
                *r.body_mut() = Body::empty();
            }
            if let Some(id) = id {
                self.mcp.sessions.forget(&id);
                self.ledger.forget(&id);
            }
            return r;
        }
        let mut req = req;
        sessions::resume_after(req.headers_mut());
        self.service.handle(req).await.into_response()
    }
}

/// The MCP door's one address.
pub const PATH: &str = "/mcp";

/// The `/mcp` service, mounted on the engine's router, answering the `Host` and `Origin`
/// that `hosts` accepts.
pub fn router(server: Shared, hosts: hosts::Hosts) -> axum::Router {
    let sessions = Arc::new(Sessions::default());
    let mcp = Mcp {
        server: server.clone(),
        sessions: sessions.clone(),
        rounds: Default::default(),
        sessionless: Default::default(),
    };
    // Host and Origin are checked by `hosts`, first, for the lean path and rmcp's alike.
    let config = StreamableHttpServerConfig::default().disable_allowed_hosts();
    let caps = sessions::SessionCaps::from_env();
    // At shutdown, end every session: an open SSE stream must not hold the server up.
    let ct = config.cancellation_token.clone();
    let mut closing = server.closing.subscribe();
    tokio::spawn(async move {
        let _ = closing.wait_for(|v| *v).await;
        ct.cancel();
    });
    let mut manager = LocalSessionManager::default();
    manager.session_config.keep_alive = Some(caps.idle);
    let manager = Arc::new(outgoing::Outgoing(manager));
    let factory = mcp.clone();
    let service = StreamableHttpService::new(move || Ok(factory.clone()), manager.clone(), config);
    // list_changed: the first change of a burst at once, the rest once the burst has been
    // quiet for 200 ms (at most one a second while it lasts).
    let mut changes = server.agg.subscribe();
    let mut closing = server.closing.subscribe();
    let notified = sessions.clone();
    tokio::spawn(async move {
        loop {
            tokio::select! {
                r = changes.changed() => if r.is_err() { return },
                _ = closing.wait_for(|v| *v) => return,
            }
            loop {
                changes.borrow_and_update();
                notified.notify_list_changed();
                let at = Instant::now();
                let mut pending = false;
                loop {
                    tokio::time::sleep(LIST_CHANGED_QUIET).await;
                    if !changes.has_changed().unwrap_or(false) {
                        break;
                    }
                    changes.borrow_and_update();
                    pending = true;
                    if at.elapsed() >= LIST_CHANGED_MOST {
                        break;
                    }
                }
                if !pending {
                    break;
                }
            }
        }
    });
    content::follow(server.clone(), sessions.clone());
    let door = Arc::new(Door {
        mcp,
        manager,
        service,
        ledger: sessions::Ledger::new(caps),
    });
    // Outermost first: `Host` and `Origin` (DNS rebinding protection), then the token.
    let hosts = Arc::new(hosts);
    axum::Router::new()
        .route(
            PATH,
            axum::routing::any(move |req: Request| door.clone().handle(req)),
        )
        .layer(axum::middleware::from_fn_with_state(
            server,
            guards::require_token,
        ))
        .layer(axum::middleware::from_fn(
            move |req: Request, next: Next| {
                let hosts = hosts.clone();
                async move {
                    match hosts.refuse(req.headers()) {
                        Some(r) => r,
                        None => next.run(req).await,
                    }
                }
            },
        ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::Caller;
    use crate::engine::Actor;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, v.parse().unwrap());
        }
        h
    }

    fn owner(actor: Actor) -> Ctx {
        Ctx::new(Caller::Owner, actor)
    }

    /// The client's name is the harness, whole (a `/` in it too), and there is no model.
    #[test]
    fn the_client_name_is_the_harness_and_no_model() {
        let none = Actor::new(None, None, None, None, Some("owner".into()));
        let h = headers(&[("mcp-session-id", "s1")]);
        let c = client_actor(owner(none.clone()), &h, Some(" claude/desktop "));
        assert_eq!(c.actor.harness.as_deref(), Some("claude/desktop"));
        assert_eq!(c.actor.model, None);
        assert_eq!(c.actor.session.as_deref(), Some("s1"));
        assert_eq!(c.actor.label, "claude/desktop");
        // No name: no harness; the token names the actor.
        let c = client_actor(owner(none), &h, Some("  "));
        assert_eq!(c.actor.harness, None);
        assert_eq!(c.actor.label, "owner");
    }

    /// `X-Datanotes-Actor` (already in the caller's actor) wins over the client's name.
    #[test]
    fn the_actor_header_wins() {
        let sent = Actor::new(Some("cli".into()), Some("m1".into()), None, None, None);
        let c = client_actor(owner(sent), &HeaderMap::new(), Some("rmcp"));
        assert_eq!(c.actor.label, "cli / m1");
    }
}
