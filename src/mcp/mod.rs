//! The MCP door (`datanotes-mcp`): one MCP address for agents, built on rmcp.
//!
//! Streamable HTTP at `/mcp` on the engine's listener (behind the same bearer tokens), and a stdio
//! proxy (`datanotes mcp`, see [`stdio`]) for desktop clients. `tools/list` is the aggregator's
//! namespace: engine operations first, then every app's tools. Every `tools/call` goes through
//! the aggregator (so engine operations go through `ops::call` and `auth::authorize`, as over
//! HTTP) and is reported to the change feed as a `tool_call` event.

pub mod stdio;

use crate::apps::aggregator::CallOutcome;
use crate::engine::Cmd;
use crate::http::{Shared, error_response};
use crate::ops::Ctx;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock as Content,
    Implementation, ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Instant;

#[derive(Clone)]
pub struct Mcp {
    server: Shared,
}

/// A result as an agent sees it. App results pass through intact; an operation's answer is its
/// JSON as text plus `structuredContent`; a refusal or an unreachable app is an `isError` result.
pub fn to_mcp_result(o: &CallOutcome) -> CallToolResult {
    if o.is_mcp_result
        && let Ok(r) = serde_json::from_value::<CallToolResult>(o.value.clone())
    {
        return r;
    }
    let text = match &o.value {
        Value::String(s) => s.clone(),
        v => v.to_string(),
    };
    let mut r = if o.ok {
        CallToolResult::success(vec![Content::text(text)])
    } else {
        CallToolResult::error(vec![Content::text(text)])
    };
    if o.value.is_object() {
        r.structured_content = Some(o.value.clone());
    }
    r
}

/// An honest estimate of a result's size in tokens: about four characters a token.
pub fn estimate_tokens(chars: usize) -> u64 {
    chars.div_ceil(4) as u64
}

/// Reports a served call to the change feed (the tool-call recording path).
pub async fn record_call(
    server: &Shared,
    ctx: &Ctx,
    tool: &str,
    args: &Value,
    o: &CallOutcome,
    started: Instant,
    result_chars: usize,
) {
    let summary = match &o.value {
        Value::String(s) => s.lines().next().unwrap_or("").to_string(),
        // An app's error result says what went wrong in its first text content.
        v if !o.ok && o.is_mcp_result => v
            .pointer("/content/0/text")
            .and_then(Value::as_str)
            .and_then(|t| t.lines().next())
            .unwrap_or("error")
            .to_string(),
        v if !o.ok => v
            .pointer("/error/message")
            .and_then(Value::as_str)
            .unwrap_or("error")
            .to_string(),
        _ => format!("{tool} ok"),
    };
    let report = json!({
        "tool": tool,
        "args": args,
        "ok": o.ok,
        "value": o.value,
        "servedBy": o.served_by,
        "durationMs": started.elapsed().as_secs_f64() * 1000.0,
        "summary": summary,
        "session": ctx.actor.session,
        "resultChars": result_chars,
        "resultTokens": estimate_tokens(result_chars),
    });
    let engine = server.engine.clone();
    let actor = ctx.actor.clone();
    let r = tokio::task::spawn_blocking(move || {
        let call = crate::feed::tool_call_event(report)?;
        engine.write(
            Cmd::Event {
                op: "tool_call".into(),
                call,
            },
            actor,
        )
    })
    .await;
    if let Ok(Err(e)) = r {
        tracing::warn!("recording a tool call failed: {e}");
    }
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
        let mut ctx = self
            .server
            .ctx(&parts.headers)
            .map_err(|e| ErrorData::invalid_request(e.message.clone(), None))?;
        if ctx.actor.session.is_none() {
            ctx.actor.session = parts
                .headers
                .get("mcp-session-id")
                .and_then(|v| v.to_str().ok())
                .map(|s| crate::feed::cut(s, crate::engine::journal::ACTOR_FIELD_CHARS));
        }
        if ctx.actor.harness.is_none()
            && let Some(info) = rc.peer.peer_info()
        {
            let c = &info.client_info;
            ctx.actor = crate::engine::Actor::new(
                Some(format!("{} {}", c.name, c.version)),
                None,
                ctx.actor.app.clone(),
                ctx.actor.session.clone(),
                ctx.actor.token.clone(),
            );
        }
        Ok(ctx)
    }
}

impl ServerHandler for Mcp {
    fn get_info(&self) -> ServerConfig {
        let mut imp = Implementation::new("datanotes-mcp", env!("CARGO_PKG_VERSION"));
        imp.title = Some("datanotes".into());
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(imp)
            .with_instructions(self.server.agg.instructions())
    }

    async fn list_tools(
        &self,
        _req: Option<PaginatedRequestParams>,
        rc: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        self.ctx(&rc)?;
        Ok(ListToolsResult::with_all_items(self.server.agg.tools()))
    }

    async fn call_tool(
        &self,
        req: CallToolRequestParams,
        rc: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let ctx = self.ctx(&rc)?;
        let started = Instant::now();
        let args = Value::Object(req.arguments.unwrap_or_default());
        let tool = req.name.to_string();
        let outcome = self.server.agg.call(&tool, args.clone(), ctx.clone()).await;
        let result = to_mcp_result(&outcome);
        let chars = serde_json::to_string(&result.content)
            .map(|s| s.len())
            .unwrap_or(0);
        record_call(&self.server, &ctx, &tool, &args, &outcome, started, chars).await;
        Ok(result.into())
    }
}

/// Refuses `/mcp` requests without a valid token before they reach the MCP layer.
async fn require_token(State(s): State<Shared>, req: Request, next: Next) -> Response {
    match s.ctx(req.headers()) {
        Ok(_) => next.run(req).await,
        Err(e) => error_response(&e),
    }
}

/// The `/mcp` service, mounted on the engine's router.
pub fn router(server: Shared) -> axum::Router {
    let mcp = Mcp {
        server: server.clone(),
    };
    let config = StreamableHttpServerConfig::default();
    // At shutdown, end every session: an open SSE stream must not hold the server up.
    let ct = config.cancellation_token.clone();
    let mut closing = server.closing.subscribe();
    tokio::spawn(async move {
        let _ = closing.wait_for(|v| *v).await;
        ct.cancel();
    });
    let service = StreamableHttpService::new(
        move || Ok(mcp.clone()),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    axum::Router::new()
        .nest_service("/mcp", service)
        .layer(axum::middleware::from_fn_with_state(server, require_token))
}
