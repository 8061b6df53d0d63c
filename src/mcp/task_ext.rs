//! The tasks extension of protocol 2026-07-28 (SEP-2663, `io.modelcontextprotocol/tasks`),
//! made of an app's tasks of 2025-11-25.
//!
//! A client of 2026-07-28 has no session and declares its capabilities with each request. When
//! it declares the extension, its call of a tool whose app lists `execution.taskSupport`
//! `required` runs as the app's task: the call answers the task (`resultType: "task"`);
//! `tasks/get` asks the app for the task's status and, once it ended, for its result, inlined
//! as the extension has it (`result`, or the app's `error`); `tasks/cancel` cancels it at the
//! app. A tool whose task support is `optional` runs as a plain call (the extension lets the
//! server decide). Tasks made for callers without a session are kept per calling token (at
//! most [`tasks::MAX_TASKS`] each, for [`TOKENS`] tokens): another token's task ids mean
//! nothing here. A task that needs the client's input lists the app's requests in
//! `tasks/get`, and `tasks/update` answers them (`task_inputs.rs`).

use super::task_inputs::{Asked, TaskInputs};
use super::{Mcp, content, tasks};
use crate::apps::backend::AppRequest;
use crate::ops::Ctx;
use rmcp::ErrorData;
use rmcp::RoleServer;
use rmcp::model::{
    CallToolResponse, CallToolResult, CancelTaskParams, CreateTaskResult, DetailedTask,
    GetTaskParams, GetTaskResult, JsonObject, Task, TaskPayload, TaskStatus, UpdateTaskParams,
};
use rmcp::service::RequestContext;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Calling tokens whose tasks are kept; one more forgets them all.
const TOKENS: usize = 256;

/// The tasks apps made for callers without a session, by calling token, and the input those
/// that need it wait for.
#[derive(Default)]
pub(super) struct Sessionless {
    made: Mutex<HashMap<String, tasks::Made>>,
    inputs: TaskInputs,
}

impl Sessionless {
    fn note(&self, token: &str, id: &str, app: &str) -> bool {
        let mut all = self.made.lock().unwrap();
        if all.len() >= TOKENS && !all.contains_key(token) {
            all.clear();
        }
        all.entry(token.to_string()).or_default().note(id, app)
    }

    fn app(&self, token: &str, id: &str) -> Option<String> {
        self.made.lock().unwrap().get(token)?.app(id)
    }
}

/// How long `tasks/get` of a task that ended waits for its result to reach the background
/// request (made while it needed input), before it asks the app for the result again.
const RESULT_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// How long `tasks/get` waits for the app to ask what its task needs (or to end it) once the
/// task says `input_required` and the door asked for the task's result.
const FIRST_INPUT_WAIT: std::time::Duration = std::time::Duration::from_secs(2);
/// The same wait on later polls: the app's status may lag behind an answer it got (the task
/// is then said to be working).
const NEXT_INPUT_WAIT: std::time::Duration = std::time::Duration::from_millis(250);

fn invalid(message: String) -> ErrorData {
    ErrorData::invalid_params(message, None)
}

/// A task as an app of 2025-11-25 writes it, as the extension's.
fn task_of(t: &Value) -> Result<Task, ErrorData> {
    let text = |k: &str| t.get(k).and_then(Value::as_str).unwrap_or("");
    let status: TaskStatus = serde_json::from_value(t["status"].clone()).map_err(|_| {
        ErrorData::internal_error(
            format!("the app's task has an unknown status {}", t["status"]),
            None,
        )
    })?;
    let mut task = Task::new(
        text("taskId"),
        status,
        text("createdAt"),
        text("lastUpdatedAt"),
    );
    if let Some(m) = t.get("statusMessage").and_then(Value::as_str) {
        task = task.with_status_message(m);
    }
    if let Some(ttl) = t.get("ttl").and_then(Value::as_u64) {
        task = task.with_ttl_ms(ttl);
    }
    if let Some(p) = t.get("pollInterval").and_then(Value::as_u64) {
        task = task.with_poll_interval_ms(p);
    }
    Ok(task)
}

/// The payload of a task that ended (`task`'s status), given the app's answer to
/// `tasks/result`: its result, or its error.
fn ended(task: &Task, result: crate::error::Result<Value>) -> TaskPayload {
    match result {
        Ok(result) if task.status == TaskStatus::Completed => TaskPayload::Completed {
            result: object(result),
        },
        Ok(_) => TaskPayload::Failed {
            error: object(json!({"code": -32603,
                "message": task.status_message.clone().unwrap_or_else(|| "the task failed".into())})),
        },
        Err(e) => TaskPayload::Failed {
            error: object(json!(content::mcp_error(e))),
        },
    }
}

fn object(v: Value) -> JsonObject {
    match v {
        Value::Object(o) => o,
        other => JsonObject::from_iter([("value".to_string(), other)]),
    }
}

impl Mcp {
    /// A call of a client of 2026-07-28 that runs as the app's task, if it does: the client
    /// declared the extension, and the tool's app requires a task.
    pub(super) async fn call_as_ext_task(
        &self,
        rc: &RequestContext<RoleServer>,
        ctx: &Ctx,
        name: &str,
        args: &Value,
    ) -> Option<Result<CallToolResponse, ErrorData>> {
        let declared = rc.client_capabilities().is_some_and(|c| c.supports_tasks());
        if !declared || self.server.agg.task_support(name).as_deref() != Some("required") {
            return None;
        }
        let params = json!({"name": name, "arguments": args, "task": {}});
        let agg = &self.server.agg;
        let made = agg.call_as_task(ctx, None, params, rc.ct.clone()).await;
        let (app, r) = match made {
            Ok(m) => m,
            Err(e) => return Some(Err(content::mcp_error(e))),
        };
        let Some(t) = r.get("task") else {
            // The app ran it at once: its result.
            let result = serde_json::from_value::<CallToolResult>(r)
                .map_err(|e| ErrorData::internal_error(format!("the app's result: {e}"), None));
            return Some(result.map(CallToolResponse::Complete));
        };
        let task = match task_of(t) {
            Ok(t) => t,
            Err(e) => return Some(Err(e)),
        };
        if !self
            .sessionless
            .note(&ctx.caller.token_name(), &task.task_id, &app)
        {
            return Some(Err(ErrorData::internal_error(
                format!("app {app} answered with the id of another app's task: refused"),
                None,
            )));
        }
        Some(Ok(CallToolResponse::Task(CreateTaskResult::new(task))))
    }

    /// The app that made the caller's task `id`.
    fn ext_task_app(&self, ctx: &Ctx, id: &str) -> Result<String, ErrorData> {
        self.sessionless
            .app(&ctx.caller.token_name(), id)
            .ok_or_else(|| {
                invalid(format!(
                    "no task {:?} of this caller (a task is made by a call of a tool that runs as one)",
                    crate::feed::cut(id, 100)
                ))
            })
    }

    /// `tasks/get` of the extension: the app's status of the task, with its result (or error)
    /// once it ended.
    pub(super) async fn get_ext_task(
        &self,
        p: GetTaskParams,
        rc: &RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        let ctx = self.ctx(rc)?;
        let app = self.ext_task_app(&ctx, &p.task_id)?;
        let agg = &self.server.agg;
        let ask = |req: AppRequest| {
            let params = json!({"taskId": p.task_id});
            agg.task_request(&ctx, None, &app, req, params, rc.ct.clone())
        };
        let t = ask(AppRequest::GetTask).await.map_err(content::mcp_error)?;
        let task = task_of(&t)?;
        let token = ctx.caller.token_name();
        let inputs = &self.sessionless.inputs;
        let payload = match task.status {
            TaskStatus::Cancelled => {
                inputs.forget(&token, &p.task_id);
                TaskPayload::Cancelled
            }
            TaskStatus::Completed | TaskStatus::Failed => {
                // The result the app gives the background request, if one was made.
                let kept = match inputs.get(&token, &p.task_id) {
                    Some(i) => i.result_within(RESULT_WAIT).await,
                    None => None,
                };
                inputs.forget(&token, &p.task_id);
                let result = match kept {
                    Some(r) => r,
                    None => ask(AppRequest::TaskResult).await,
                };
                ended(&task, result)
            }
            TaskStatus::InputRequired => {
                let (inbox, new) = inputs.open(&token, &p.task_id);
                if new {
                    // The app asks what the task needs on the stream of its result.
                    let (agg, ctx, app, id) =
                        (agg.clone(), ctx.clone(), app.clone(), p.task_id.clone());
                    let asked = Arc::new(Asked(inbox.clone()));
                    let (cancel, inbox) = (inbox.cancel.clone(), inbox.clone());
                    tokio::spawn(async move {
                        let r = agg.task_result_to(&ctx, &app, &id, asked, cancel).await;
                        inbox.end(r);
                    });
                }
                inbox
                    .settled(if new {
                        FIRST_INPUT_WAIT
                    } else {
                        NEXT_INPUT_WAIT
                    })
                    .await;
                let requests = inbox.requests();
                match inbox.ended() {
                    _ if !requests.is_empty() => {
                        let requests = json!(requests);
                        // Written as the app wrote them (rmcp's types read numbers as floats).
                        if let Some(exact) = super::exact::Exact::of(rc) {
                            exact.result(json!({"inputRequests": requests}));
                        }
                        let requests = serde_json::from_value(requests).map_err(|e| {
                            ErrorData::internal_error(
                                format!("app {app} asked what cannot be passed to the client: {e}"),
                                None,
                            )
                        })?;
                        TaskPayload::InputRequired {
                            input_requests: requests,
                        }
                    }
                    Some(Ok(r)) => {
                        inputs.forget(&token, &p.task_id);
                        TaskPayload::Completed { result: object(r) }
                    }
                    // The background request failed (the app stopped waiting, it timed
                    // out): the next `tasks/get` asks again.
                    Some(Err(_)) => {
                        inputs.forget(&token, &p.task_id);
                        TaskPayload::Working
                    }
                    None => TaskPayload::Working,
                }
            }
            // Working (or a status of a later version).
            _ => TaskPayload::Working,
        };
        Ok(GetTaskResult::new(DetailedTask::new(task, payload)))
    }

    /// `tasks/update` of the extension: the client's answers to the requests its task asked
    /// (`tasks/get`'s `inputRequests`), passed to the app, which has waited for them.
    pub(super) fn update_ext_task(
        &self,
        p: UpdateTaskParams,
        rc: &RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let ctx = self.ctx(rc)?;
        self.ext_task_app(&ctx, &p.task_id)?;
        let inbox = self
            .sessionless
            .inputs
            .get(&ctx.caller.token_name(), &p.task_id);
        let Some(inbox) = inbox else {
            return Err(invalid(format!(
                "task {:?} asks for no input now: tasks/get says what it needs",
                crate::feed::cut(&p.task_id, 100)
            )));
        };
        inbox.answer(&p.input_responses).map_err(|key| {
            invalid(format!(
                "inputResponses: {:?} answers no request the task asked (tasks/get lists them as inputRequests)",
                crate::feed::cut(&key, 100)
            ))
        })
    }

    /// `tasks/cancel` of the extension: the app cancels the task.
    pub(super) async fn cancel_ext_task(
        &self,
        p: CancelTaskParams,
        rc: &RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let ctx = self.ctx(rc)?;
        let app = self.ext_task_app(&ctx, &p.task_id)?;
        (self.sessionless.inputs).forget(&ctx.caller.token_name(), &p.task_id);
        let params = json!({"taskId": p.task_id});
        let req = AppRequest::CancelTask;
        (self.server.agg)
            .task_request(&ctx, None, &app, req, params, rc.ct.clone())
            .await
            .map_err(content::mcp_error)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_apps_task_is_the_extensions() {
        let t = json!({"taskId": "t1", "status": "working", "createdAt": "a",
                       "lastUpdatedAt": "b", "ttl": 60000, "pollInterval": 500,
                       "statusMessage": "on it"});
        let task = task_of(&t).unwrap();
        let v = serde_json::to_value(CreateTaskResult::new(task)).unwrap();
        assert_eq!(v["resultType"], "task");
        assert_eq!(v["taskId"], "t1");
        assert_eq!(v["ttlMs"], 60000);
        assert_eq!(v["pollIntervalMs"], 500);
        assert_eq!(v["statusMessage"], "on it");
        assert!(task_of(&json!({"taskId": "t", "status": "sleeping"})).is_err());
        let s = Sessionless::default();
        assert!(s.note("owner", "t1", "a"));
        assert!(!s.note("owner", "t1", "b"));
        assert_eq!(s.app("owner", "t1").as_deref(), Some("a"));
        assert!(s.app("app:x", "t1").is_none(), "another token's task id");
    }
}
