//! Calls of the namespace's tools: the permission check, engine operations, an app's tool
//! through its backend, and the slot's bookkeeping of the answer.

use super::{Aggregator, CallOutcome, Slot, record};
use crate::apps::backend::{AgentChannel, CallContext, ClientChannel, structured_as_object};
use crate::auth::{self, Access, Target};
use crate::error::Error;
use crate::ops::{self, Ctx};
use crate::telemetry::AppCall;
use crate::telemetry::metrics::{self, metrics};
use serde_json::Value;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

impl Aggregator {
    /// Calls a tool of the namespace for a caller (if its `call_tools` let it: the check is
    /// `auth::authorize`'s, before anything else, so a refused name says nothing of the tool).
    pub async fn call(&self, tool: &str, args: Value, ctx: Ctx) -> CallOutcome {
        self.call_with(tool, args, ctx, None, CancellationToken::new(), None)
            .await
    }

    /// [`Self::call`], with the caller's side of the call (`client`): where an app's log
    /// messages and progress go and who answers its requests while the call runs; and `cancel`,
    /// cancelled when the caller gives up on the call (the app is told, see
    /// [`CallContext::cancel`]); and `agent`, the caller's MCP session, if any (see
    /// [`CallContext::agent`]).
    pub async fn call_with(
        &self,
        tool: &str,
        args: Value,
        ctx: Ctx,
        client: Option<Arc<dyn ClientChannel>>,
        cancel: CancellationToken,
        agent: Option<Arc<dyn AgentChannel>>,
    ) -> CallOutcome {
        if let Err(e) = auth::authorize(&ctx.caller, Access::CallTool, Target::Tool(tool)) {
            ctx.observed
                .note(String::new(), "", "engine", Some(metrics::TOOL_ERROR));
            return CallOutcome::of_engine(Err(e));
        }
        if crate::telemetry::trace::records_content() {
            let a = args.to_string();
            ctx.observed
                .attribute(|| opentelemetry::KeyValue::new("gen_ai.tool.call.arguments", a));
        }
        if ops::find(tool).is_some() {
            let mut ctx = ctx;
            if let Some(client) = client.filter(|c| c.wants_progress()) {
                ctx.progress = Some(progress_to(client));
            }
            let engine = self.engine.clone();
            let name = tool.to_string();
            let observed = ctx.observed.clone();
            let r = tokio::task::spawn_blocking(move || ops::call(&engine, &ctx, &name, args))
                .await
                .unwrap_or_else(|_| Err(Error::internal("the operation panicked")));
            let failed = r.is_err().then_some(metrics::TOOL_ERROR);
            observed.note(metrics().tool_label("", tool), "", "engine", failed);
            content_of(&observed, &r);
            return CallOutcome::of_engine(r);
        }
        let ns = self.ns.read().unwrap().clone();
        let Some(&i) = ns.by_name.get(tool) else {
            ctx.observed
                .note(String::new(), "", "engine", Some(metrics::TOOL_ERROR));
            let e = Error::not_found(format!("no tool {tool:?}"))
                .hint("tools/list (or apps/tools/) lists the tools");
            return CallOutcome::of_engine(Err(e));
        };
        let app = &ns.tools[i].0;
        let backend = {
            let slots = self.slots.read().unwrap();
            slots
                .iter()
                .find(|s| &s.name == app)
                .map(|s| s.backend.clone())
        };
        let Some(backend) = backend else {
            ctx.observed
                .note(String::new(), app, "", Some(metrics::UNREACHABLE));
            return unreachable(app, "it has no backend");
        };
        let mut cc = context_of(&ctx, client, agent, cancel);
        let label = metrics().tool_label(app, tool);
        let kind = backend.kind();
        let own = ns.own_name(i);
        let timed = AppCall::start(
            &ctx.observed,
            label.clone(),
            own,
            app,
            kind,
            !backend.in_process(),
        );
        cc.trace = timed.context().cloned();
        // Called by the name the app gave it (listed with its app's prefix).
        let r = backend.call(own, args, &cc).await;
        let failed = match &r {
            Ok(v) if v.get("isError").and_then(Value::as_bool) == Some(true) => {
                Some(metrics::TOOL_ERROR)
            }
            Ok(_) => None,
            Err(e) if e.is_cancelled() => Some(metrics::CANCELLED),
            Err(_) => Some(metrics::UNREACHABLE),
        };
        timed.end(failed);
        ctx.observed.note(label, app, kind, failed);
        content_of(&ctx.observed, &r);
        tracing::debug!(app = %app, tool, ok = r.is_ok(), "app call");
        // The slot of this backend (not of a newer one, after an update): an answer from an app
        // known to be reachable only moves `last_seen` (under the read lock); anything else
        // (a failure, a recovery) is recorded under the write lock.
        let same = |s: &Slot| &s.name == app && Arc::ptr_eq(&s.backend, &backend);
        let seen = r.is_ok() && {
            let slots = self.slots.read().unwrap();
            slots.iter().find(|s| same(s)).is_none_or(|s| {
                let steady = s.reachable == Some(true) && s.last_error.is_none();
                if steady {
                    s.seen_now();
                }
                steady
            })
        };
        if !seen {
            let mut slots = self.slots.write().unwrap();
            if let Some(s) = slots.iter_mut().find(|s| same(s)) {
                record(s, r.as_ref().err());
            }
        }
        let app = app.clone();
        match r {
            Ok(mut v) => {
                structured_as_object(&mut v);
                super::resources::name_uris(&app, &mut v);
                let ok = !v.get("isError").and_then(Value::as_bool).unwrap_or(false);
                CallOutcome {
                    ok,
                    value: v,
                    served_by: app,
                    is_mcp_result: true,
                    cancelled: false,
                }
            }
            Err(e) if e.is_cancelled() => CallOutcome {
                served_by: app,
                ..CallOutcome::cancelled()
            },
            Err(e) => unreachable(&app, &e.0),
        }
    }
}

/// The call's result on the request's span, when the owner opted in.
fn content_of<E>(observed: &crate::telemetry::Observed, r: &Result<Value, E>) {
    if let Ok(v) = r
        && crate::telemetry::trace::records_content()
    {
        let v = v.to_string();
        observed.attribute(|| opentelemetry::KeyValue::new("gen_ai.tool.call.result", v));
    }
}

/// An operation's progress passed on to the MCP client of the call, in order.
fn progress_to(client: Arc<dyn ClientChannel>) -> ops::Progress {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Value>();
    tokio::spawn(async move {
        while let Some(p) = rx.recv().await {
            client.notify("notifications/progress", p).await;
        }
    });
    ops::Progress(Arc::new(move |done, total, message| {
        let _ = tx.send(serde_json::json!({"progress": done, "total": total, "message": message}));
    }))
}

fn unreachable(app: &str, why: &str) -> CallOutcome {
    CallOutcome {
        ok: false,
        value: Value::String(format!("app {app} is not reachable: {why}")),
        served_by: app.to_string(),
        is_mcp_result: false,
        cancelled: false,
    }
}

/// The request context an app is given for a caller: its actor (`harness / model`), session
/// and token, where what the app says during the request goes (`client`), the agent it is made
/// for, and when the caller gave up.
pub(super) fn context_of(
    ctx: &Ctx,
    client: Option<Arc<dyn ClientChannel>>,
    agent: Option<Arc<dyn AgentChannel>>,
    cancel: CancellationToken,
) -> CallContext {
    CallContext {
        actor: match (&ctx.actor.harness, &ctx.actor.model) {
            (Some(h), Some(m)) => Some(format!("{h} / {m}")),
            (Some(h), None) => Some(h.clone()),
            _ => None,
        },
        session: ctx.actor.session.clone(),
        caller: Some(ctx.caller.token_name()),
        client,
        cancel,
        agent,
        trace: None,
    }
}
