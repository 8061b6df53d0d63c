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
mod door;
mod exact;
mod guards;
mod handler;
mod headers;
pub mod hosts;
mod lean;
mod listen;
mod listing;
mod observe;
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
use door::{Door, TOUCH_EVERY};
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
    /// The tools its searches found, in search mode (`listing.rs`), at most
    /// [`listing::MAX_FOUND`].
    found: Mutex<Vec<String>>,
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
        let mut ctx = client_actor(ctx, &parts.headers, client);
        if listing::search_mode(&self.server, parts, &ctx.caller) {
            ctx.caller = listing::widen(ctx.caller);
        }
        Ok(ctx)
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

/// The MCP door's one address.
pub const PATH: &str = "/mcp";

pub use door::router;

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
