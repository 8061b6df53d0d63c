//! MCP's tasks (protocol 2025-11-25) at the door, on the lean path: a `tools/call` with a
//! `task`, and `tasks/get`, `tasks/result`, `tasks/list`, `tasks/cancel`. rmcp's types carry
//! neither (its tasks are a later version's), so these are read and answered here as JSON,
//! through the aggregator (`apps/aggregator/tasks.rs`). Each session keeps which app made each
//! of its tasks ([`Made`]): a task is asked of that app alone, and another session's task ids
//! mean nothing here. The client's own `tasks` capability (what an app may run on the client
//! as a task) is read from its `initialize` ([`declared`]) and passed to its apps' sessions;
//! the door's is written into its answer ([`announce`]).

use super::{Session, Shared, content};
use crate::apps::backend::{AgentChannel, AppRequest};
use crate::ops::Ctx;
use rmcp::ErrorData;
use serde_json::{Value, json};
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// The most tasks a session keeps track of: beyond it, the oldest is forgotten (asked of
/// again, it is unknown).
pub(super) const MAX_TASKS: usize = 1000;
/// The most pages of an app's `tasks/list` read for one listing.
const LIST_PAGES: usize = 20;

/// The tasks made on one session, by task id: the app that made each.
#[derive(Default)]
pub(super) struct Made {
    by_id: HashMap<String, String>,
    order: VecDeque<String>,
}

impl Made {
    /// Notes that `app` made the task `id`; false if another app's task has that id here.
    pub(super) fn note(&mut self, id: &str, app: &str) -> bool {
        if let Some(by) = self.by_id.get(id) {
            return by == app;
        }
        while self.order.len() >= MAX_TASKS {
            if let Some(old) = self.order.pop_front() {
                self.by_id.remove(&old);
            }
        }
        self.by_id.insert(id.to_string(), app.to_string());
        self.order.push_back(id.to_string());
        true
    }

    pub(super) fn app(&self, id: &str) -> Option<String> {
        self.by_id.get(id).cloned()
    }

    /// Each app that made tasks here, once, with the ids of its tasks.
    fn by_app(&self) -> Vec<(String, Vec<String>)> {
        let mut out: Vec<(String, Vec<String>)> = vec![];
        for id in &self.order {
            let app = &self.by_id[id];
            match out.iter_mut().find(|(a, _)| a == app) {
                Some((_, ids)) => ids.push(id.clone()),
                None => out.push((app.clone(), vec![id.clone()])),
            }
        }
        out
    }
}

/// The `tasks` capability a client declared in its `initialize` (`body`), as it wrote it.
pub(super) fn declared(body: &[u8]) -> Option<Value> {
    let mut msg: Value = serde_json::from_slice(body).ok()?;
    if msg.get("method").and_then(Value::as_str) != Some("initialize") {
        return None;
    }
    msg.pointer_mut("/params/capabilities/tasks")
        .filter(|t| t.is_object())
        .map(Value::take)
}

/// Whether `body` is an `initialize` request.
pub(super) fn is_initialize(body: &[u8]) -> bool {
    #[derive(serde::Deserialize)]
    struct Method<'a> {
        #[serde(borrow)]
        method: Option<&'a str>,
    }
    serde_json::from_slice::<Method>(body).is_ok_and(|m| m.method == Some("initialize"))
}

/// The `tasks` capability the door declares: the tasks of 2025-11-25 for tools, listed and
/// cancelled (a tool runs as a task if its app says it may, see `apps/aggregator/tasks.rs`).
fn tasks_capability() -> Value {
    json!({"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}})
}

/// rmcp's answer to an `initialize`, with the door's `tasks` capability written into the
/// server's capabilities (rmcp's capability type has no such field).
pub(super) fn announce(r: axum::response::Response) -> axum::response::Response {
    let mut done = false;
    super::exact::edit(r, move |data| {
        if done {
            return None;
        }
        let mut msg: Value = serde_json::from_slice(data).ok()?;
        let caps = msg.pointer_mut("/result/capabilities")?.as_object_mut()?;
        caps.insert("tasks".into(), tasks_capability());
        done = true;
        Some(msg)
    })
}

/// Whether the lean path serves `msg` here.
pub(super) fn is_task(msg: &Value) -> bool {
    match msg.get("method").and_then(Value::as_str) {
        Some("tools/call") => msg.pointer("/params/task").is_some_and(Value::is_object),
        Some("tasks/get" | "tasks/result" | "tasks/list" | "tasks/cancel") => true,
        _ => false,
    }
}

fn invalid(message: String) -> ErrorData {
    ErrorData::invalid_params(message, None)
}

/// Serves a request [`is_task`] says is one: its result, or its error as MCP's.
pub(super) async fn serve(
    server: &Shared,
    ctx: &Ctx,
    session: &Arc<Session>,
    msg: &Value,
    cancel: CancellationToken,
) -> Result<Value, ErrorData> {
    let agg = &server.agg;
    let agent = session.clone() as Arc<dyn AgentChannel>;
    let agent = Some(&agent);
    let params = msg.get("params").cloned().unwrap_or_else(|| json!({}));
    let method = msg.get("method").and_then(Value::as_str).unwrap_or("");
    let req = match method {
        "tools/call" => {
            let (app, r) = agg
                .call_as_task(ctx, agent, params, cancel)
                .await
                .map_err(content::mcp_error)?;
            if let Some(id) = r.pointer("/task/taskId").and_then(Value::as_str)
                && !session.tasks.lock().unwrap().note(id, &app)
            {
                return Err(ErrorData::internal_error(
                    format!("app {app} answered with the id of another app's task: refused"),
                    None,
                ));
            }
            return Ok(r);
        }
        "tasks/list" => {
            let made = session.tasks.lock().unwrap().by_app();
            let mut tasks = vec![];
            for (app, ids) in made {
                // Every page of the app's (at most LIST_PAGES), this session's tasks kept.
                let mut cursor = None;
                for _ in 0..LIST_PAGES {
                    let params = match &cursor {
                        Some(c) => json!({ "cursor": c }),
                        None => json!({}),
                    };
                    let req = AppRequest::ListTasks;
                    let r = (agg.task_request(ctx, agent, &app, req, params, cancel.clone())).await;
                    // An app that cannot answer now lists no more; the others still do.
                    let Ok(Value::Object(mut r)) = r else {
                        break;
                    };
                    if let Some(Value::Array(listed)) = r.remove("tasks") {
                        tasks.extend(listed.into_iter().filter(|t| {
                            t.get("taskId")
                                .and_then(Value::as_str)
                                .is_some_and(|id| ids.iter().any(|i| i == id))
                        }));
                    }
                    cursor = match r.remove("nextCursor") {
                        Some(Value::String(c)) if !c.is_empty() => Some(c),
                        _ => break,
                    };
                }
            }
            return Ok(json!({"tasks": tasks}));
        }
        "tasks/get" => AppRequest::GetTask,
        "tasks/result" => AppRequest::TaskResult,
        "tasks/cancel" => AppRequest::CancelTask,
        _ => return Err(invalid(format!("{method} is not a request of tasks"))),
    };
    let Some(id) = params.get("taskId").and_then(Value::as_str) else {
        return Err(invalid(format!(
            "{method} needs params.taskId, the id of a task this session made"
        )));
    };
    let Some(app) = session.tasks.lock().unwrap().app(id) else {
        return Err(invalid(format!(
            "no task {:?} on this session (tasks/list shows its tasks)",
            crate::feed::cut(id, 100)
        )));
    };
    agg.task_request(ctx, agent, &app, req, params, cancel)
        .await
        .map_err(content::mcp_error)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_id_belongs_to_the_app_that_made_it_first() {
        let mut m = Made::default();
        assert!(m.note("t1", "a"));
        assert!(m.note("t1", "a"), "the same app again");
        assert!(!m.note("t1", "b"), "another app's task id is refused");
        assert_eq!(m.app("t1").as_deref(), Some("a"));
        assert!(m.note("t2", "b"));
        assert_eq!(
            m.by_app(),
            vec![
                ("a".into(), vec!["t1".into()]),
                ("b".into(), vec!["t2".into()])
            ]
        );
    }

    #[test]
    fn a_session_keeps_its_newest_tasks() {
        let mut m = Made::default();
        for i in 0..MAX_TASKS + 5 {
            assert!(m.note(&format!("t{i}"), "a"));
        }
        assert_eq!(m.by_id.len(), MAX_TASKS);
        assert!(m.app("t0").is_none() && m.app("t4").is_none());
        assert!(m.app("t5").is_some());
    }

    #[tokio::test]
    async fn the_door_declares_its_tasks_in_its_initialize_answer() {
        use axum::response::IntoResponse;
        let sse = [(http::header::CONTENT_TYPE, "text/event-stream")];
        let json = [(http::header::CONTENT_TYPE, "application/json")];
        let answer = "data: {\"jsonrpc\":\"2.0\",\"id\":0,\"result\":{\"capabilities\":{\"tools\":{}},\"serverInfo\":{\"name\":\"x\",\"version\":\"1\"}}}\nid: 0\n\n";
        let r = announce((sse, answer).into_response());
        let body = axum::body::to_bytes(r.into_body(), 1 << 20).await.unwrap();
        let text = String::from_utf8(body.to_vec()).unwrap();
        let data = text.strip_prefix("data: ").unwrap();
        assert!(data.ends_with("\nid: 0\n\n"), "{text}");
        let v: Value = serde_json::from_str(data.lines().next().unwrap()).unwrap();
        assert_eq!(
            v["result"]["capabilities"]["tasks"]["requests"]["tools"]["call"],
            json!({})
        );
        assert_eq!(v["result"]["capabilities"]["tools"], json!({}));
        let empty = announce((json, r#"{"result":{"capabilities":{}}}"#).into_response());
        let body = axum::body::to_bytes(empty.into_body(), 1 << 20)
            .await
            .unwrap();
        let v: Value = serde_json::from_slice(&body).unwrap();
        assert!(v["result"]["capabilities"]["tasks"].is_object());
        assert!(is_initialize(
            br#"{"jsonrpc":"2.0","id":0,"method":"initialize"}"#
        ));
        assert!(!is_initialize(
            br#"{"jsonrpc":"2.0","id":0,"method":"ping"}"#
        ));
    }

    #[test]
    fn the_tasks_a_client_declares_are_read_from_its_initialize() {
        let init = br#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"capabilities":{"tasks":{"list":{}}}}}"#;
        assert_eq!(declared(init), Some(json!({"list": {}})));
        let other =
            br#"{"jsonrpc":"2.0","id":0,"method":"ping","params":{"capabilities":{"tasks":{}}}}"#;
        assert_eq!(declared(other), None);
        assert_eq!(declared(b"not json"), None);
        let call = json!({"method": "tools/call", "params": {"name": "x", "task": {"ttl": 1}}});
        assert!(is_task(&call));
        assert!(!is_task(
            &json!({"method": "tools/call", "params": {"name": "x"}})
        ));
        assert!(is_task(
            &json!({"method": "tasks/result", "params": {"taskId": "t"}})
        ));
    }
}
