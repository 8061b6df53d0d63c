//! MCP's tasks (protocol 2025-11-25) through the namespace. A tool whose app lists it with
//! `execution.taskSupport` `optional` or `required` may be called as a task (a `tools/call`
//! with a `task`); the app answers a `CreateTaskResult`, and the agent then asks `tasks/get`,
//! `tasks/result`, `tasks/list` and `tasks/cancel` of that task. Each goes to the app that made
//! the task, on the agent's own session with it (a task lives in the session that made it),
//! for a caller that may still use the app (`auth::authorize`, as for its other content). The
//! door keeps which app made which of an agent's tasks; the task ids are the app's own.

use super::call::context_of;
use super::reads::Agent;
use super::{Aggregator, resources};
use crate::apps::backend::{AppBackend, AppRequest, ClientChannel, structured_as_object};
use crate::auth::{self, Access, Target};
use crate::error::{Error, Result};
use crate::ops::{self, Ctx};
use serde_json::{Value, json};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// The refusal of a task-augmented call of a tool that does not run as a task: MCP's
/// "method not found" for it.
fn not_a_task(tool: &str) -> Error {
    let message = format!(
        "{tool} does not run as a task (its execution.taskSupport is not optional or required): call it without a task"
    );
    Error::invalid(message.clone())
        .column("task")
        .rpc(json!({"code": -32601, "message": message}))
}

impl Aggregator {
    /// The `execution.taskSupport` an app lists for its tool (`optional`, `required`), if any.
    pub fn task_support(&self, tool: &str) -> Option<String> {
        let ns = self.ns.read().unwrap().clone();
        let i = *ns.by_name.get(tool)?;
        let execution = ns.fields.get(&i)?.get("execution")?;
        Some(execution.get("taskSupport")?.as_str()?.to_string())
    }

    /// A `tools/call` with a `task` (`params` as the agent sent them), for a caller that may
    /// call the tool: answers the app that serves it and its answer, a `CreateTaskResult` (or
    /// the tool's result, its URIs named, if the app ran it at once).
    pub async fn call_as_task(
        &self,
        ctx: &Ctx,
        agent: Agent<'_>,
        mut params: Value,
        cancel: CancellationToken,
    ) -> Result<(String, Value)> {
        let tool = params.get("name").and_then(Value::as_str).unwrap_or("");
        let tool = tool.to_string();
        let tool = tool.as_str();
        auth::authorize(&ctx.caller, Access::CallTool, Target::Tool(tool))?;
        if ops::find(tool).is_some() {
            return Err(not_a_task(tool));
        }
        let app = {
            let ns = self.ns.read().unwrap().clone();
            let Some(&i) = ns.by_name.get(tool) else {
                return Err(Error::not_found(format!("no tool {tool:?}"))
                    .column("name")
                    .hint("tools/list lists the tools"));
            };
            let support = ns.fields.get(&i).and_then(|f| f.get("execution"));
            let support = support.and_then(|e| e.get("taskSupport"));
            if !matches!(
                support.and_then(Value::as_str),
                Some("optional" | "required")
            ) {
                return Err(not_a_task(tool));
            }
            // The app is asked by the name it gave the tool.
            params["name"] = Value::from(ns.own_name(i));
            ns.tools[i].0.clone()
        };
        let backend = self
            .backend_of(&app)
            .ok_or_else(|| Error::not_found(format!("app {app} is gone")))?;
        let req = AppRequest::CallAsTask;
        let mut r = self
            .ask_in(
                &app,
                &*backend,
                req,
                params,
                &context_of(ctx, None, agent.cloned(), cancel),
            )
            .await?;
        if r.get("task").is_none() {
            structured_as_object(&mut r);
            resources::name_uris(&app, &mut r);
        }
        Ok((app, r))
    }

    /// `tasks/get`, `tasks/result`, `tasks/list` or `tasks/cancel` (`req`) of the tasks `app`
    /// made for the agent, for a caller that may still use the app: the app's answer (a
    /// task's result with its URIs named).
    pub async fn task_request(
        &self,
        ctx: &Ctx,
        agent: Agent<'_>,
        app: &str,
        req: AppRequest,
        params: Value,
        cancel: CancellationToken,
    ) -> Result<Value> {
        let backend = self.task_app(ctx, app)?;
        let r = self
            .ask_in(
                app,
                &*backend,
                req,
                params,
                &context_of(ctx, None, agent.cloned(), cancel),
            )
            .await?;
        Ok(task_answer(app, req, r))
    }

    /// `tasks/result` of the task `task_id` that `app` made for a caller without a session
    /// (the tasks extension of 2026-07-28): what the app asks of the client while it waits
    /// (the input a task needs) goes to `client`.
    pub async fn task_result_to(
        &self,
        ctx: &Ctx,
        app: &str,
        task_id: &str,
        client: Arc<dyn ClientChannel>,
        cancel: CancellationToken,
    ) -> Result<Value> {
        let backend = self.task_app(ctx, app)?;
        let cc = super::call::context_of(ctx, Some(client), None, cancel);
        let req = AppRequest::TaskResult;
        let params = json!({"taskId": task_id});
        let r = self.ask_in(app, &*backend, req, params, &cc).await?;
        Ok(task_answer(app, req, r))
    }

    /// The backend of `app`, for a caller that may still use it.
    fn task_app(&self, ctx: &Ctx, app: &str) -> Result<Arc<dyn AppBackend>> {
        {
            let ns = self.ns.read().unwrap().clone();
            self.may_use(&ctx.caller, &ns, app)?;
        }
        self.backend_of(app)
            .ok_or_else(|| Error::not_found(format!("app {app} is gone")))
    }
}

/// An app's answer to a task request: a task's result with its URIs named.
fn task_answer(app: &str, req: AppRequest, mut r: Value) -> Value {
    if req == AppRequest::TaskResult {
        structured_as_object(&mut r);
        resources::name_uris(app, &mut r);
    }
    r
}
