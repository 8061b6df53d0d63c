//! MCP's tasks (protocol 2025-11-25) through `/mcp`, with two small remote apps written here
//! (`kit/fake_app.rs`) that run one tool as a task each and give their tasks the same id:
//! - a tool's `execution` (its `taskSupport`) is listed as the app wrote it;
//! - the door declares `tasks`, and the client's own `tasks` capability reaches the app;
//! - a task-augmented call reaches the app with its `task` and answers the app's
//!   `CreateTaskResult` as it wrote it (integers stay integers);
//! - `tasks/get`, `tasks/result` (its URIs named), `tasks/list` and `tasks/cancel` go to the app
//!   that made the task, on the agent's own session with it;
//! - refused, and nothing reaches an app: a task id this session never got (or another
//!   session's), a task call of a tool that runs none (an app's, an operation), and a second app
//!   that answers with the id of the first one's task.

use crate::kit::*;
use crate::mcp::RawSession;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};

/// What the client declares: it may run sampling and elicitation as tasks.
fn client_tasks() -> Value {
    json!({"list": {}, "cancel": {}, "requests": {"sampling": {"createMessage": {}}}})
}

/// A task as the apps write it (`ttl` an integer).
fn task(id: &str, status: &str) -> Value {
    json!({"taskId": id, "status": status, "createdAt": "2026-12-04T10:00:00Z",
           "lastUpdatedAt": "2026-12-04T10:00:01Z", "ttl": 60000, "pollInterval": 1000})
}

/// An app that runs `<name>_research` as a task (always `task-1`), notes every message.
struct TaskApp {
    name: &'static str,
    seen: Mutex<Vec<Value>>,
}

impl TaskApp {
    async fn post(self: Arc<Self>, v: Value) -> Response {
        self.seen.lock().unwrap().push(v.clone());
        let id = v["id"].clone();
        let Some(method) = v["method"].as_str() else {
            return StatusCode::ACCEPTED.into_response();
        };
        if id.is_null() {
            return StatusCode::ACCEPTED.into_response();
        }
        let p = &v["params"];
        match method {
            "initialize" => fake_app::initialized(
                &id,
                self.name,
                json!({"tools": {}, "tasks": {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}}),
                &format!("session-of-{}", self.name),
            ),
            "tools/list" => fake_app::rpc(
                &id,
                json!({"tools": [
                    {"name": format!("{}_research", self.name), "inputSchema": {"type": "object"},
                     "execution": {"taskSupport": "required"}},
                    {"name": format!("{}_plain", self.name), "inputSchema": {"type": "object"}},
                ]}),
            ),
            "tools/call" if p["task"].is_object() => {
                fake_app::rpc(&id, json!({"task": task("task-1", "working")}))
            }
            "tools/call" => {
                fake_app::rpc(&id, json!({"content": [{"type": "text", "text": "plain"}]}))
            }
            "tasks/get" => {
                fake_app::rpc(&id, task(p["taskId"].as_str().unwrap_or(""), "completed"))
            }
            "tasks/cancel" => {
                fake_app::rpc(&id, task(p["taskId"].as_str().unwrap_or(""), "cancelled"))
            }
            // Two pages: another session's task, then this one's.
            "tasks/list" if p["cursor"].is_null() => fake_app::rpc(
                &id,
                json!({"tasks": [task("of-another-session", "working")], "nextCursor": "page-2"}),
            ),
            "tasks/list" => fake_app::rpc(&id, json!({"tasks": [task("task-1", "completed")]})),
            "tasks/result" => fake_app::rpc(
                &id,
                json!({"content": [{"type": "resource_link", "uri": "file:///report.md", "name": "report"}],
                       "_meta": {"io.modelcontextprotocol/related-task": {"taskId": "task-1"}}}),
            ),
            _ => fake_app::rpc_error(&id, -32601, "method not found", None),
        }
    }

    fn received(&self, method: &str) -> Vec<Value> {
        let seen = self.seen.lock().unwrap();
        seen.iter()
            .filter(|m| m["method"] == method)
            .cloned()
            .collect()
    }
}

fn serve(rt: &tokio::runtime::Runtime, name: &'static str) -> (Arc<TaskApp>, String) {
    let app = Arc::new(TaskApp {
        name,
        seen: Mutex::default(),
    });
    let a = app.clone();
    let post: fake_app::Post = Arc::new(move |v| Box::pin(a.clone().post(v)));
    (app, fake_app::serve(rt, post, None))
}

#[test]
fn tasks_pass_through_to_the_app_that_made_them() {
    let s = Server::start();
    let rt = mcp::runtime();
    let (alpha, url) = serve(&rt, "alpha");
    create_app(&s, json!({"name": "alpha", "mcp_url": url}));

    let raw = RawSession::open_with(&s, json!({"tasks": client_tasks()}), "2025-11-25");
    // The door declares the tasks it serves.
    assert_eq!(
        raw.initialized["result"]["capabilities"]["tasks"]["requests"]["tools"]["call"],
        json!({}),
        "{}",
        raw.initialized
    );
    // Each tool's execution, as the app listed it.
    let mut tools = json!(null);
    eventually("alpha's tools are listed", || {
        tools = raw.ask(2, "tools/list", json!({}))["result"]["tools"].clone();
        tools
            .as_array()
            .is_some_and(|t| t.iter().any(|t| t["name"] == "alpha_research"))
    });
    let tool = |n: &str| {
        tools
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == n)
            .cloned()
            .unwrap()
    };
    assert_eq!(
        tool("alpha_research")["execution"],
        json!({"taskSupport": "required"}),
        "{tools}"
    );
    assert!(tool("alpha_plain").get("execution").is_none());

    // A task-augmented call: the app gets its task, the client the app's answer as written.
    let r = raw.ask(
        3,
        "tools/call",
        json!({"name": "alpha_research", "arguments": {}, "task": {"ttl": 60000}}),
    );
    assert_eq!(
        r["result"],
        json!({"task": task("task-1", "working")}),
        "{r}"
    );
    let calls = alpha.received("tools/call");
    assert_eq!(
        calls.last().unwrap()["params"]["task"],
        json!({"ttl": 60000})
    );
    // The call went on the agent's own session with the app, opened with its tasks.
    let inits = alpha.received("initialize");
    assert!(
        inits
            .iter()
            .any(|i| i["params"]["capabilities"]["tasks"] == client_tasks()),
        "the client's tasks reach the app: {inits:?}"
    );

    let r = raw.ask(4, "tasks/get", json!({"taskId": "task-1"}));
    assert_eq!(r["result"], task("task-1", "completed"), "{r}");
    let r = raw.ask(5, "tasks/result", json!({"taskId": "task-1"}));
    assert_eq!(
        r["result"]["content"][0]["uri"], "file://alpha//report.md",
        "the result's URIs are named for the app: {r}"
    );
    assert_eq!(
        r["result"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
        "task-1"
    );
    // Only this session's tasks are listed, from every page of the app's.
    let r = raw.ask(6, "tasks/list", json!({}));
    assert_eq!(
        r["result"],
        json!({"tasks": [task("task-1", "completed")]}),
        "{r}"
    );
    let r = raw.ask(7, "tasks/cancel", json!({"taskId": "task-1"}));
    assert_eq!(r["result"]["status"], "cancelled", "{r}");

    // Refused, and nothing reaches the app.
    let asked = alpha.seen.lock().unwrap().len();
    let r = raw.ask(8, "tasks/get", json!({"taskId": "never-made"}));
    assert_eq!(r["error"]["code"], -32602, "{r}");
    assert!(
        r["error"]["message"].as_str().unwrap().contains("no task"),
        "{r}"
    );
    let r = raw.ask(9, "tasks/result", json!({}));
    assert_eq!(r["error"]["code"], -32602, "{r}");
    for (i, tool) in ["alpha_plain", "list_tables"].iter().enumerate() {
        let r = raw.ask(
            10 + i as u64,
            "tools/call",
            json!({"name": tool, "arguments": {}, "task": {"ttl": 1000}}),
        );
        assert_eq!(r["error"]["code"], -32601, "{tool}: {r}");
        assert!(
            r["error"]["message"]
                .as_str()
                .unwrap()
                .contains("does not run as a task"),
            "{r}"
        );
    }
    let other = RawSession::open_with(&s, json!({"tasks": client_tasks()}), "2025-11-25");
    let r = other.ask(2, "tasks/get", json!({"taskId": "task-1"}));
    assert_eq!(r["error"]["code"], -32602, "another session's task: {r}");
    assert_eq!(
        alpha.seen.lock().unwrap().len(),
        asked,
        "nothing reached the app"
    );

    // A second app whose task has the first one's id: refused on this session.
    let (beta, url) = serve(&rt, "beta");
    create_app(&s, json!({"name": "beta", "mcp_url": url}));
    eventually("beta's tools are listed", || {
        raw.ask(20, "tools/list", json!({}))["result"]["tools"]
            .as_array()
            .is_some_and(|t| t.iter().any(|t| t["name"] == "beta_research"))
    });
    let r = raw.ask(
        21,
        "tools/call",
        json!({"name": "beta_research", "arguments": {}, "task": {"ttl": 60000}}),
    );
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("another app's task"),
        "{r}"
    );
    assert_eq!(beta.received("tools/call").len(), 1);
    // The first app's task is still the first app's.
    let before = beta.seen.lock().unwrap().len();
    let r = raw.ask(22, "tasks/get", json!({"taskId": "task-1"}));
    assert_eq!(r["result"]["taskId"], "task-1", "{r}");
    assert_eq!(beta.seen.lock().unwrap().len(), before);
    // A session that made its task with beta gets beta's.
    let r = other.ask(
        3,
        "tools/call",
        json!({"name": "beta_research", "arguments": {}, "task": {"ttl": 60000}}),
    );
    assert_eq!(r["result"]["task"]["taskId"], "task-1", "{r}");
    let r = other.ask(4, "tasks/get", json!({"taskId": "task-1"}));
    assert_eq!(r["result"]["status"], "completed", "{r}");
    assert_eq!(beta.received("tasks/get").len(), 1);
}

/// A stateless request of protocol 2026-07-28 with `token`, declaring `capabilities`: its
/// JSON-RPC answer.
fn ask_2026(s: &Server, token: &str, method: &str, params: Value, capabilities: Value) -> Value {
    let r = mcp::post_2026(s, token, method, params, capabilities, None);
    crate::mcp::answer_of(r)
}

/// A client of 2026-07-28 that declares the tasks extension (SEP-2663) gets a tool that
/// requires a task as the app's task: `tasks/get` asks the app for its status and inlines its
/// result once it ended (URIs named), `tasks/cancel` cancels it at the app; another token's
/// task ids, and ids never made, mean nothing. A client without the extension, or a tool
/// without task support, gets a plain call.
#[test]
fn a_2026_client_gets_an_apps_task_as_the_tasks_extension() {
    let s = Server::start();
    let rt = mcp::runtime();
    let (alpha, url) = serve(&rt, "alpha");
    create_app(&s, json!({"name": "alpha", "mcp_url": url}));
    let ext = json!({"extensions": {"io.modelcontextprotocol/tasks": {}}});
    let call = |tool: &str, caps: &Value| {
        let params = json!({"name": tool, "arguments": {}});
        ask_2026(&s, &s.token, "tools/call", params, caps.clone())
    };
    eventually("alpha's tools are listed", || {
        let r = ask_2026(&s, &s.token, "tools/list", json!({}), ext.clone());
        r.to_string().contains("alpha_research")
    });
    // The server offers the extension.
    let d = ask_2026(&s, &s.token, "server/discover", json!({}), ext.clone());
    assert!(
        d.pointer("/result/capabilities/extensions/io.modelcontextprotocol~1tasks")
            .is_some(),
        "{d}"
    );

    let r = call("alpha_research", &ext);
    let t = &r["result"];
    assert_eq!(t["resultType"], "task", "{r}");
    assert_eq!(t["taskId"], "task-1", "{r}");
    assert_eq!(t["status"], "working", "{r}");
    assert_eq!(
        (t["ttlMs"].clone(), t["pollIntervalMs"].clone()),
        (json!(60000), json!(1000))
    );
    let calls = alpha.received("tools/call");
    assert!(
        calls.last().unwrap()["params"]["task"].is_object(),
        "{calls:?}"
    );

    let get = |token: &str, id: &str| {
        ask_2026(&s, token, "tasks/get", json!({"taskId": id}), ext.clone())
    };
    let r = get(&s.token, "task-1");
    assert_eq!(r["result"]["status"], "completed", "{r}");
    assert_eq!(r["result"]["resultType"], "complete", "{r}");
    assert_eq!(
        r["result"]["result"]["content"][0]["uri"], "file://alpha//report.md",
        "the result inlined, its URIs named for the app: {r}"
    );
    assert_eq!(alpha.received("tasks/result").len(), 1);
    let r = ask_2026(
        &s,
        &s.token,
        "tasks/cancel",
        json!({"taskId": "task-1"}),
        ext.clone(),
    );
    assert!(r.get("error").is_none(), "{r}");
    assert_eq!(alpha.received("tasks/cancel").len(), 1);

    // Refused, and nothing reaches the app.
    let asked = alpha.seen.lock().unwrap().len();
    let r = get(&s.token, "never-made");
    assert_eq!(r["error"]["code"], -32602, "{r}");
    let other = create_app(&s, json!({"name": "other", "call_tools": ["alpha_*"]}));
    let r = get(&other, "task-1");
    assert_eq!(r["error"]["code"], -32602, "another token's task: {r}");
    assert_eq!(alpha.seen.lock().unwrap().len(), asked);

    // Without the extension, or for a tool without task support: a plain call.
    let r = call("alpha_research", &json!({}));
    assert_eq!(r["result"]["content"][0]["text"], "plain", "{r}");
    assert!(alpha.received("tools/call").last().unwrap()["params"]["task"].is_null());
    let r = call("alpha_plain", &ext);
    assert_eq!(r["result"]["content"][0]["text"], "plain", "{r}");
}

/// An app (of 2025-11-25) whose task `needy_research` needs the user's name: it says
/// `input_required` and asks `elicitation/create` on the stream of `tasks/result`, then ends
/// with a result that greets the name it was given.
#[derive(Default)]
struct Needy {
    /// The client's answer to its request, once given.
    answer: Mutex<Option<Value>>,
    /// Where the answer goes to the waiting `tasks/result`.
    pending: Mutex<Option<tokio::sync::oneshot::Sender<Value>>>,
    seen: Mutex<Vec<Value>>,
}

impl Needy {
    async fn post(self: Arc<Self>, v: Value) -> Response {
        self.seen.lock().unwrap().push(v.clone());
        let id = v["id"].clone();
        let Some(method) = v["method"].as_str() else {
            // The client's answer to the app's request.
            if v["id"] == "ask-name" {
                *self.answer.lock().unwrap() = Some(v.clone());
                if let Some(tx) = self.pending.lock().unwrap().take() {
                    let _ = tx.send(v);
                }
            }
            return StatusCode::ACCEPTED.into_response();
        };
        if id.is_null() {
            return StatusCode::ACCEPTED.into_response();
        }
        let status = || match self.answer.lock().unwrap().is_some() {
            true => "completed",
            false => "input_required",
        };
        match method {
            "initialize" => fake_app::initialized(
                &id,
                "needy",
                json!({"tools": {}, "tasks": {"requests": {"tools": {"call": {}}}}}),
                "session-of-needy",
            ),
            "tools/list" => fake_app::rpc(
                &id,
                json!({"tools": [{"name": "needy_research", "inputSchema": {"type": "object"},
                                  "execution": {"taskSupport": "required"}}]}),
            ),
            "tools/call" => fake_app::rpc(&id, json!({"task": task("needs-1", "working")})),
            "tasks/get" => fake_app::rpc(&id, task("needs-1", status())),
            "tasks/result" => {
                let (tx, rx) = tokio::sync::oneshot::channel();
                *self.pending.lock().unwrap() = Some(tx);
                let ask = json!({"jsonrpc": "2.0", "id": "ask-name", "method": "elicitation/create",
                    "params": {"message": "your name?", "requestedSchema": {"type": "object",
                        "properties": {"name": {"type": "string", "maxLength": 40},
                                       "age": {"type": "number", "minimum": 0}}},
                        "_meta": {"io.modelcontextprotocol/related-task": {"taskId": "needs-1"}}}});
                let result = async move {
                    let answer = rx.await.unwrap_or(Value::Null);
                    // Its status says completed before the result is out.
                    fake_app::take_time(std::time::Duration::from_millis(300)).await;
                    let name = answer["result"]["content"]["name"].as_str().unwrap_or("?");
                    json!({"jsonrpc": "2.0", "id": id, "result": {"content": [
                        {"type": "text", "text": format!("hello {name}")}]}})
                    .to_string()
                };
                use futures_util::StreamExt;
                let stream = futures_util::stream::once(async move { ask.to_string() })
                    .chain(futures_util::stream::once(result));
                fake_app::sse(stream)
            }
            _ => fake_app::rpc_error(&id, -32601, "method not found", None),
        }
    }
}

/// A client of 2026-07-28 gets the input an app's task needs as the extension has it: the
/// app's request (asked on the stream of `tasks/result`, as 2025-11-25 has it) is listed in
/// `tasks/get` as the task's `inputRequests`; the client's `tasks/update` answers it, the
/// answer reaches the app as the client wrote it, and the next `tasks/get` inlines the result.
/// An answer to no request, and another token's update, are refused and reach nothing.
#[test]
fn a_2026_client_answers_the_input_an_apps_task_needs() {
    let s = Server::start();
    let rt = mcp::runtime();
    let needy = Arc::new(Needy::default());
    let a = needy.clone();
    let post: fake_app::Post = Arc::new(move |v| Box::pin(a.clone().post(v)));
    let url = fake_app::serve(&rt, post, None);
    create_app(&s, json!({"name": "needy", "mcp_url": url}));
    let ext = json!({"extensions": {"io.modelcontextprotocol/tasks": {}}, "elicitation": {}});
    eventually("needy's tool is listed", || {
        let r = ask_2026(&s, &s.token, "tools/list", json!({}), ext.clone());
        r.to_string().contains("needy_research")
    });
    let params = json!({"name": "needy_research", "arguments": {}});
    let r = ask_2026(&s, &s.token, "tools/call", params, ext.clone());
    assert_eq!(r["result"]["taskId"], "needs-1", "{r}");
    let get = || {
        ask_2026(
            &s,
            &s.token,
            "tasks/get",
            json!({"taskId": "needs-1"}),
            ext.clone(),
        )
    };
    let r = get();
    let t = &r["result"];
    assert_eq!(t["status"], "input_required", "{r}");
    let requests = t["inputRequests"].as_object().expect("inputRequests");
    assert_eq!(requests.len(), 1, "{r}");
    let (key, request) = requests.iter().next().unwrap();
    assert_eq!(request["method"], "elicitation/create", "{r}");
    assert_eq!(request["params"]["message"], "your name?", "{r}");
    let schema = &request["params"]["requestedSchema"]["properties"]["name"];
    assert_eq!(schema["maxLength"], json!(40), "as the app wrote it: {r}");
    let age = &request["params"]["requestedSchema"]["properties"]["age"];
    assert_eq!(age["minimum"].to_string(), "0", "as the app wrote it: {r}");
    assert_eq!(
        request["params"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"], "needs-1",
        "{r}"
    );
    // Asked again, the same request (the app asked it once).
    assert_eq!(get()["result"]["inputRequests"][key], *request);

    let update = |token: &str, responses: Value| {
        let params = json!({"taskId": "needs-1", "inputResponses": responses});
        ask_2026(&s, token, "tasks/update", params, ext.clone())
    };
    let answer = json!({"action": "accept", "content": {"name": "Ada", "age": 36}});
    let r = update(&s.token, json!({"no-such-request": answer}));
    assert_eq!(r["error"]["code"], -32602, "{r}");
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no-such-request"),
        "{r}"
    );
    let other = create_app(&s, json!({"name": "other", "call_tools": ["needy_*"]}));
    let r = update(&other, json!({ key.clone(): answer }));
    assert_eq!(r["error"]["code"], -32602, "another token's task: {r}");
    assert!(
        needy.answer.lock().unwrap().is_none(),
        "nothing reached the app"
    );

    let r = update(&s.token, json!({ key.clone(): answer }));
    assert!(r.get("error").is_none(), "{r}");
    // Handed to the app's waiting request, which posts it to the app: it arrives soon after.
    eventually("the app gets the answer", || {
        needy.answer.lock().unwrap().is_some()
    });
    let got = needy.answer.lock().unwrap().clone().unwrap();
    assert_eq!(got["result"], answer, "as the client wrote it: {got}");
    let mut done = json!(null);
    eventually("the task ends with its result", || {
        done = get();
        done["result"]["status"] == "completed"
    });
    assert_eq!(
        done["result"]["result"]["content"][0]["text"], "hello Ada",
        "{done}"
    );
    let results = needy
        .seen
        .lock()
        .unwrap()
        .iter()
        .filter(|m| m["method"] == "tasks/result")
        .count();
    assert_eq!(
        results, 1,
        "the result the background request got is the one given"
    );
}
