//! A `tools/call` served through `/mcp`: the call through the aggregator (cancelled when the
//! client gives up on it), its result as an agent sees it, and its `tool_call` event.
//!
//! The call is raced against its cancellation (`notifications/cancelled`, rmcp's or the lean path's
//! own registry of calls in flight; a closed connection drops the call). Its `tool_call` event is
//! handed to the writer without waiting (`Engine::write_nowait`). A call of `call_tool {name,
//! arguments}` is the call of the tool it names, unwrapped before anything else.

use super::Shared;
use crate::apps::aggregator::CallOutcome;
use crate::apps::backend::{AgentChannel, ClientChannel};
use crate::ops::Ctx;
use rmcp::ErrorData;
use rmcp::model::{CallToolResult, ContentBlock as Content};
use serde_json::Value;
use std::sync::Arc;
use std::time::Instant;
use tokio_util::sync::CancellationToken;

/// A served call's result, typed for rmcp, and as the app wrote it.
pub(super) struct Served {
    pub(super) result: CallToolResult,
    /// The app's result as it wrote it, if it reads as one (none: an operation's answer, or
    /// what the engine made of an app's answer).
    app: Option<Value>,
}

impl Served {
    /// The result to write for a client (`newer`: of protocol 2026-07-28 or later): the app's,
    /// as it wrote it, with what rmcp would add or take off for that client; none where rmcp's
    /// writing of [`Self::result`] is the only right one.
    pub(super) fn written(&self, newer: bool) -> Option<Value> {
        let v = self.app.clone().filter(Value::is_object)?;
        // Before 2026-07-28, structured content is an object: rmcp reshapes any other.
        if !newer && v.get("structuredContent").is_some_and(|c| !c.is_object()) {
            return None;
        }
        Some(super::exact::for_era(v, newer))
    }
}

/// An app's result, read as one (none: not an app's, or not one). App results pass through
/// intact.
fn app_result(o: &CallOutcome) -> Option<CallToolResult> {
    if !o.is_mcp_result {
        return None;
    }
    let mut r = <CallToolResult as serde::Deserialize>::deserialize(&o.value).ok()?;
    // An app of an earlier protocol version sends none; a 2026-07-28 client needs it (rmcp
    // takes it off again for earlier clients).
    r.result_type
        .get_or_insert(rmcp::model::ResultType::COMPLETE);
    Some(r)
}

/// The engine's result of a call (an operation's answer, a refusal, an unreachable app, an
/// app's answer that reads as no result): its JSON as text (a string as it is), plus
/// `structuredContent` if it is an object; an `isError` result if the call failed.
fn engine_result(o: &CallOutcome) -> CallToolResult {
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
pub(super) fn estimate_tokens(chars: usize) -> u64 {
    chars.div_ceil(4) as u64
}

/// Reports a served call to the change feed (the tool-call recording path). The event is handed
/// to the single writer without waiting for its commit: the answer does not wait on the journal.
/// Events keep the order of these calls; the writer commits them with its next batch (at the
/// latest at shutdown).
pub(super) fn record_call(
    server: &Shared,
    ctx: Ctx,
    tool: String,
    args: Value,
    o: CallOutcome,
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
    let report = crate::feed::ToolCallRecord {
        tool,
        args,
        ok: o.ok,
        value: o.value,
        served_by: o.served_by,
        duration_ms: started.elapsed().as_secs_f64() * 1000.0,
        summary,
        session: ctx.actor.session.clone(),
        result_chars: result_chars as u64,
        result_tokens: estimate_tokens(result_chars),
        cancelled: o.cancelled,
        trace_id: ctx.observed.trace_id(),
    };
    if let Err(e) = report.record(&server.engine, ctx.actor) {
        tracing::warn!("recording a tool call failed: {}", e.message);
    }
}

/// The length of a value's JSON, counted without writing it out.
fn json_len(v: &impl serde::Serialize) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0 += b.len();
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut c = Count(0);
    match serde_json::to_writer(&mut c, v) {
        Ok(()) => c.0,
        Err(_) => 0,
    }
}

/// Serves one `tools/call` for a caller and records it; `client`: where an app's messages
/// during the call go. `cancel` is the client's cancellation of the call
/// (`notifications/cancelled`); dropping this future (the request's connection closed) cancels
/// it too. A cancelled call is answered at once (nobody reads the answer), its app is told
/// (see `CallContext::cancel`), and its event records it as cancelled, with how long it ran.
/// A JSON-RPC error the app answered is the call's error, as the app sent it.
pub(super) async fn serve_call(
    server: &Shared,
    ctx: Ctx,
    tool: String,
    args: Value,
    client: Option<Arc<dyn ClientChannel>>,
    cancel: CancellationToken,
    agent: Option<Arc<dyn AgentChannel>>,
) -> Result<Served, ErrorData> {
    // `call_tool {name, arguments}` is the call of the tool it names.
    let (tool, args) = super::listing::unwrap(tool, args)?;
    let started = Instant::now();
    let hung_up = cancel.clone().drop_guard();
    let call = server.agg.call_with(
        &tool,
        args.clone(),
        ctx.clone(),
        client,
        cancel.clone(),
        agent,
    );
    let outcome = tokio::select! {
        o = call => o,
        _ = cancel.cancelled() => CallOutcome {
            served_by: server.agg.served_by(&tool),
            ..CallOutcome::cancelled()
        },
    };
    hung_up.disarm();
    let read = app_result(&outcome);
    // The app's own writing, where its answer reads as a result.
    let app = read.as_ref().map(|_| outcome.value.clone());
    let result = read.unwrap_or_else(|| engine_result(&outcome));
    let chars = json_len(&result.content);
    let rpc_error = rpc_error(&outcome);
    record_call(server, ctx, tool, args, outcome, started, chars);
    match rpc_error {
        Some(e) => Err(e),
        None => Ok(Served { result, app }),
    }
}

/// The JSON-RPC error an app answered to the call, if it did: the client gets it as it is.
fn rpc_error(o: &CallOutcome) -> Option<ErrorData> {
    if !o.is_mcp_result || o.ok {
        return None;
    }
    let e = crate::apps::backend::rpc_error_in(&o.value)?;
    serde_json::from_value(e.clone()).ok()
}
