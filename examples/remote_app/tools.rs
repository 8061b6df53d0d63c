//! The app's tools: the planning tools on the engine's table, `echo`, `mixed`, and the extras the
//! arguments add (`--tool`, `--array-result`, `--big-description`, `--big-schema`).

use crate::{Shared, TABLE};
use futures_util::future::BoxFuture;
use rmcp::handler::server::router::tool::{ToolRoute, ToolRouter};
use rmcp::handler::server::tool::{Extension, ToolCallContext};
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResponse, CallToolResult, ContentBlock, MetaObject, Tool};
use rmcp::schemars::{self, JsonSchema};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, tool, tool_router};
use serde::Deserialize;
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;

#[derive(Clone)]
pub(crate) struct App {
    pub(crate) s: Arc<Shared>,
    pub(crate) router: Arc<ToolRouter<App>>,
}

fn tables_meta() -> MetaObject {
    let mut m = MetaObject::new();
    m.0.insert("datanotes/tables".into(), json!([TABLE]));
    m
}

/// An engine answer as a tool result: its JSON as text and structured content, or an error.
fn answer(r: Result<Value, Value>) -> CallToolResult {
    let (v, ok) = match r {
        Ok(v) => (v, true),
        Err(v) => (v, false),
    };
    let text = v.to_string();
    let mut out = if ok {
        CallToolResult::success(vec![ContentBlock::text(text)])
    } else {
        CallToolResult::error(vec![ContentBlock::text(text)])
    };
    out.structured_content = Some(v);
    out
}

#[derive(Debug, Deserialize, JsonSchema)]
struct AddTask {
    /// The task's title.
    title: String,
    /// An estimate in hours (0 to 100).
    estimate: Option<i64>,
    /// A due date, YYYY-MM-DD.
    due: Option<String>,
    /// Tags.
    tags: Option<Vec<String>>,
}

#[derive(Debug, Deserialize, JsonSchema)]
struct ListTasks {
    /// Only tasks with this status (todo, doing, done).
    status: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
struct CompleteTask {
    /// The task's row id.
    id: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
struct Echo {
    /// Any text; echoed back.
    text: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
struct Mixed {
    /// Answer the mix as an error result (`isError`).
    #[serde(default)]
    fail: bool,
}

/// A 1x1 PNG and an empty WAV, base64.
const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";
const WAV: &str = "UklGRiQAAABXQVZFZm10IBAAAAABAAEAQB8AAEAfAAABAAgAZGF0YQAAAAA=";

#[tool_router]
impl App {
    #[tool(description = "Add a task to personal.tasks.items.", meta = tables_meta())]
    async fn add_task(
        &self,
        Parameters(a): Parameters<AddTask>,
        Extension(parts): Extension<http::request::Parts>,
    ) -> CallToolResult {
        let mut values = json!({"title": a.title});
        if let Some(e) = a.estimate {
            values["estimate"] = json!(e);
        }
        if let Some(d) = a.due {
            values["due"] = json!(d);
        }
        if let Some(t) = a.tags {
            values["tags"] = json!(t);
        }
        let r = self
            .s
            .engine(
                "insert_row",
                json!({"table": TABLE, "values": values}),
                Some(&parts),
            )
            .await;
        answer(r)
    }

    #[tool(description = "List tasks, optionally by status.", meta = tables_meta())]
    async fn list_tasks(
        &self,
        Parameters(a): Parameters<ListTasks>,
        Extension(parts): Extension<http::request::Parts>,
    ) -> CallToolResult {
        let mut q = json!({"table": TABLE, "order_by": [{"column": "title", "dir": "asc"}]});
        if let Some(s) = a.status {
            q["where"] = json!([{"column": "status", "op": "=", "value": s}]);
        }
        answer(self.s.engine("select_rows", q, Some(&parts)).await)
    }

    #[tool(description = "Mark a task done.", meta = tables_meta())]
    async fn complete_task(
        &self,
        Parameters(a): Parameters<CompleteTask>,
        Extension(parts): Extension<http::request::Parts>,
    ) -> CallToolResult {
        let r = self
            .s
            .engine(
                "update_row",
                json!({"table": TABLE, "id": a.id, "values": {"status": "done"}}),
                Some(&parts),
            )
            .await;
        answer(r)
    }

    #[tool(
        description = "How many changes to personal.tasks.items the app's feed follower has seen."
    )]
    async fn changes_seen(&self) -> CallToolResult {
        answer(Ok(json!({
            "seen": self.s.seen.load(Ordering::SeqCst),
            "cursor": self.s.cursor.load(Ordering::SeqCst),
            "ops": *self.s.last_ops.lock().unwrap(),
            "error": *self.s.feed_error.lock().unwrap(),
        })))
    }

    #[tool(
        description = "Echo what this request carried: bearer, actor, session, JSON-RPC id and arguments."
    )]
    async fn echo(
        &self,
        Parameters(a): Parameters<Echo>,
        Extension(parts): Extension<http::request::Parts>,
        rc: RequestContext<RoleServer>,
    ) -> CallToolResult {
        let h = |n: &str| {
            parts
                .headers
                .get(n)
                .and_then(|v| v.to_str().ok())
                .map(String::from)
        };
        let bearer = h("authorization").and_then(|v| v.strip_prefix("Bearer ").map(String::from));
        let matched = match (&self.s.args.mcp_token, &bearer) {
            (Some(want), Some(got)) => Some(want == got),
            (Some(_), None) => Some(false),
            (None, _) => None,
        };
        answer(Ok(json!({
            "app": self.s.args.name,
            "bearerPresent": bearer.is_some(),
            "bearerMatched": matched,
            "actor": h("x-datanotes-actor"),
            "caller": h("x-datanotes-caller"),
            "session": h("mcp-session-id"),
            "requestId": rc.id,
            "text": a.text,
            // The engine's end of the connection the call came on, and how many calls of
            // `echo` this process served (counting this one).
            "peer": parts
                .extensions
                .get::<axum::extract::ConnectInfo<SocketAddr>>()
                .map(|c| c.0.to_string()),
            "calls": self.s.echoes.fetch_add(1, Ordering::SeqCst) + 1,
        })))
    }

    #[tool(
        description = "A result mixing text, image, audio, an embedded resource and structured content."
    )]
    async fn mixed(&self, Parameters(a): Parameters<Mixed>) -> Result<CallToolResult, ErrorData> {
        serde_json::from_value(json!({
            "content": [
                {"type": "text", "text": "a mix of contents", "annotations": {"audience": ["user"], "priority": 0.5}},
                {"type": "image", "data": PNG, "mimeType": "image/png"},
                {"type": "audio", "data": WAV, "mimeType": "audio/wav"},
                {"type": "resource", "resource": {"uri": "datanotes://tables/personal.tasks.items/rows/x", "mimeType": "text/markdown", "text": "# A task\n\nwith a body"}},
                {"type": "resource", "resource": {"uri": "file:///blob.bin", "mimeType": "application/octet-stream", "blob": "AAECAw=="}}
            ],
            "structuredContent": {"kinds": ["text", "image", "audio", "resource"], "count": 5, "nested": {"ok": !a.fail}},
            "isError": a.fail,
            "_meta": {"example/trace": "mixed-1"}
        }))
        .map_err(|e| ErrorData::internal_error(e.to_string(), None))
    }
}

/// An extra trivial tool: answers who served it.
fn extra_tool(ctx: ToolCallContext<'_, App>) -> BoxFuture<'_, Result<CallToolResponse, ErrorData>> {
    Box::pin(async move {
        let text = format!("{} served by {}", ctx.name, ctx.service.s.args.name);
        Ok(CallToolResult::success(vec![ContentBlock::text(text)]).into())
    })
}

/// The `<prefix>_names` tool: an array as `structuredContent`, a sentence as text.
fn names_tool(
    _ctx: ToolCallContext<'_, App>,
) -> BoxFuture<'_, Result<CallToolResponse, ErrorData>> {
    Box::pin(async move {
        let mut r = CallToolResult::success(vec![ContentBlock::text("two names: a, b")]);
        r.structured_content = Some(json!(["a", "b"]));
        Ok(r.into())
    })
}

impl App {
    pub(crate) fn new(s: Arc<Shared>) -> App {
        let a = &s.args;
        let prefix = a.prefix.clone().unwrap_or_else(|| a.name.replace('-', "_"));
        let mut router = ToolRouter::new();
        if !a.bare {
            for mut route in App::tool_router() {
                route.attr.name = format!("{prefix}_{}", route.attr.name).into();
                router.add_route(route);
            }
        }
        for t in &a.tools {
            router.add_route(ToolRoute::new_dyn(trivial(t, &a.name, 0), extra_tool));
        }
        if a.array_result {
            let t = trivial(&format!("{prefix}_names"), &a.name, 0);
            router.add_route(ToolRoute::new_dyn(t, names_tool));
        }
        if a.big_description > 0 {
            let mut t = trivial(&format!("{prefix}_big_description"), &a.name, 0);
            t.description = Some("d".repeat(a.big_description).into());
            router.add_route(ToolRoute::new_dyn(t, extra_tool));
        }
        if a.big_schema > 0 {
            let schema = json!({"type": "object", "properties": {
                "x": {"type": "string", "description": "s".repeat(a.big_schema)}
            }});
            let Value::Object(schema) = schema else {
                unreachable!()
            };
            let mut t = trivial(&format!("{prefix}_big_schema"), &a.name, 0);
            t.input_schema = Arc::new(schema);
            router.add_route(ToolRoute::new_dyn(t, extra_tool));
        }
        App {
            s,
            router: Arc::new(router),
        }
    }
}

/// A trivial tool's description: its description padded to `pad` bytes.
pub(crate) fn trivial(name: &str, app: &str, pad: usize) -> Tool {
    let schema = json!({"type": "object", "properties": {}});
    let Value::Object(schema) = schema else {
        unreachable!()
    };
    let mut d = format!("A trivial tool of app {app}.");
    if d.len() < pad {
        d.push_str(&" ".repeat(pad - d.len()));
    }
    Tool::new(name.to_string(), d, Arc::new(schema))
}
