//! A remote datanotes app in Rust on rmcp: an MCP server (streamable HTTP) whose tools read and
//! write the engine's tables through its HTTP API, with its own app token.
//!
//! At start it binds its listener, updates its own registry entry (`apps/update` with its
//! `mcp_url`, and its `mcp_token` if it requires one), starts following the change feed, then
//! prints `listening on http://ADDR/mcp`.
//!
//! ```sh
//! # as the owner: create the app with a write scope at a loopback address (any port), keep its
//! # token; it moves itself to the port it listens on (another loopback port: allowed)
//! curl -s -H "Authorization: Bearer $OWNER" http://127.0.0.1:5234/datanotes/apps/create/ \
//!      -d '{"name": "planning", "write": ["personal.tasks.items"], "mcp_url": "http://127.0.0.1:9/mcp"}'
//! cargo run --example remote_app -- --engine http://127.0.0.1:5234 --token dn_app_... --name planning
//! ```
//!
//! Tools (prefixed with `--prefix`, by default the app's name with `-` as `_`):
//! `<p>_add_task`, `<p>_list_tasks`, `<p>_complete_task` (on `personal.tasks.items`, declared in
//! `_meta["datanotes/tables"]`), `<p>_changes_seen` (what the feed follower saw), `<p>_echo`
//! (what the request carried: bearer, actor, caller, session, arguments), `<p>_mixed` (a result
//! mixing text, image, audio, an embedded resource and structured content); with
//! `--array-result`, `<p>_names` (an array as `structuredContent`). Its writes carry the
//! caller's actor and calling token as the engine forwarded them (`X-Datanotes-Actor`,
//! `X-Datanotes-Caller`). `--tool NAME` adds trivial
//! tools (to force name collisions); `--bare` serves only those. `--resources N` and
//! `--prompts N` offer N trivial text resources (`test://r1` … `test://r<N>`) and N trivial
//! prompts (`<p>_p1` … `<p>_p<N>`), answering `resources/read` and `prompts/get` for them.
//!
//! Test knobs: `--json` answers `application/json` (stateless) instead of SSE; `--nagle` leaves
//! Nagle's algorithm on;
//! `--slow-open-ms`, `--slow-list-ms`, `--slow-call-ms` delay `initialize`, `tools/list` and
//! `tools/call`; `--mcp-token` is required as the bearer of every MCP request.
//!
//! Hostile knobs (for the engine's caps): `--endless-listing` serves `tools/list` as an endless
//! `nextCursor` chain of `--page-tools` tools a page; `--huge-listing N` adds N tools to one page;
//! `--pad-bytes` pads those tools' descriptions; `--big-description BYTES` and `--big-schema BYTES`
//! add a tool with a description or an input schema that big; `--instructions-bytes` pads the
//! instructions; `--fail-list` refuses every `tools/list`. The unlisted tool
//! `datanotes_test_stats` answers how many `initialize` and `tools/list` requests were served.

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use clap::Parser;
use futures_util::future::BoxFuture;
use rmcp::handler::server::router::tool::{ToolRoute, ToolRouter};
use rmcp::handler::server::tool::{Extension, ToolCallContext};
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, GetPromptRequestParams,
    GetPromptResponse, GetPromptResult, Implementation, InitializeRequestParams, InitializeResult,
    ListPromptsResult, ListResourcesResult, ListToolsResult, MetaObject, PaginatedRequestParams,
    PromptsCapability, ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult,
    ResourcesCapability, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::schemars::{self, JsonSchema};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler, tool, tool_router};
use serde::Deserialize;
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The table the planning tools work on.
const TABLE: &str = "personal.tasks.items";

#[derive(Parser, Debug, Clone)]
#[command(about = "A remote datanotes app (MCP over streamable HTTP)")]
struct Args {
    /// The engine's base URL.
    #[arg(long, default_value = "http://127.0.0.1:5234")]
    engine: String,
    /// The app's token (from apps/create).
    #[arg(long, env = "DATANOTES_APP_TOKEN", hide_env_values = true)]
    token: String,
    /// The app's name in the registry.
    #[arg(long, default_value = "planning")]
    name: String,
    /// Where to serve MCP (`/mcp`).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// Answer `application/json` (stateless) instead of SSE streams.
    #[arg(long)]
    json: bool,
    /// Leave Nagle's algorithm on (no `TCP_NODELAY`), as a plain `axum::serve` does: an SSE
    /// answer (a priming event, then the result) then waits for the client's delayed ACK on a
    /// kept connection.
    #[arg(long)]
    nagle: bool,
    /// Require this bearer token on every MCP request (registered as the app's `mcp_token`).
    #[arg(long)]
    mcp_token: Option<String>,
    /// The tools' name prefix (default: the app name, `-` as `_`).
    #[arg(long)]
    prefix: Option<String>,
    /// Serve only the `--tool` tools.
    #[arg(long)]
    bare: bool,
    /// An extra trivial tool (repeatable).
    #[arg(long = "tool")]
    tools: Vec<String>,
    /// Delay `initialize` by this much.
    #[arg(long, default_value_t = 0)]
    slow_open_ms: u64,
    /// Delay `tools/list` by this much.
    #[arg(long, default_value_t = 0)]
    slow_list_ms: u64,
    /// Delay `tools/call` by this much.
    #[arg(long, default_value_t = 0)]
    slow_call_ms: u64,
    /// Serve `tools/list` as an endless `nextCursor` chain.
    #[arg(long)]
    endless_listing: bool,
    /// Tools per page of the endless listing.
    #[arg(long, default_value_t = 100)]
    page_tools: usize,
    /// Add this many trivial tools to the listing's one page.
    #[arg(long, default_value_t = 0)]
    huge_listing: usize,
    /// Pad the descriptions of the endless and huge listings' tools to this many bytes.
    #[arg(long, default_value_t = 0)]
    pad_bytes: usize,
    /// Add a tool `<prefix>_big_description` whose description is this many bytes.
    #[arg(long, default_value_t = 0)]
    big_description: usize,
    /// Add a tool `<prefix>_big_schema` whose input schema is about this many bytes.
    #[arg(long, default_value_t = 0)]
    big_schema: usize,
    /// Pad the instructions to this many bytes.
    #[arg(long, default_value_t = 0)]
    instructions_bytes: usize,
    /// Refuse every `tools/list` with an error.
    #[arg(long)]
    fail_list: bool,
    /// Add a tool `<prefix>_names` whose result's `structuredContent` is an array (not an
    /// object, as MCP 2026-07-28 allows).
    #[arg(long)]
    array_result: bool,
    /// Offer this many trivial text resources, `test://r1` … `test://r<N>`.
    #[arg(long, default_value_t = 0)]
    resources: usize,
    /// Offer this many trivial prompts, `<prefix>_p1` … `<prefix>_p<N>`.
    #[arg(long, default_value_t = 0)]
    prompts: usize,
}

/// What every session shares.
struct Shared {
    args: Args,
    http: reqwest::Client,
    /// Changes to the table seen by the feed follower, and its cursor.
    seen: AtomicU64,
    cursor: AtomicI64,
    last_ops: Mutex<Vec<String>>,
    feed_error: Mutex<Option<String>>,
    /// `initialize` and `tools/list` requests served.
    initializes: AtomicU64,
    lists: AtomicU64,
    /// `echo` calls served.
    echoes: AtomicU64,
}

impl Shared {
    /// Runs an engine operation (or route) with the app token, on behalf of the caller of the
    /// tool call `call` (its actor and calling token, as the engine forwarded them).
    async fn engine(
        &self,
        path: &str,
        body: Value,
        call: Option<&http::request::Parts>,
    ) -> Result<Value, Value> {
        let url = format!(
            "{}/datanotes/{path}/",
            self.args.engine.trim_end_matches('/')
        );
        let mut req = self
            .http
            .post(url)
            .bearer_auth(&self.args.token)
            .json(&body);
        for name in ["x-datanotes-actor", "x-datanotes-caller"] {
            if let Some(v) = call.and_then(|p| p.headers.get(name)) {
                req = req.header(name, v.clone());
            }
        }
        let resp = req.send().await.map_err(
            |e| json!({"error": {"message": format!("the engine did not answer: {e}")}}),
        )?;
        let ok = resp.status().is_success();
        let v: Value = resp.json().await.unwrap_or(Value::Null);
        if ok { Ok(v) } else { Err(v) }
    }
}

#[derive(Clone)]
struct App {
    s: Arc<Shared>,
    router: Arc<ToolRouter<App>>,
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
    fn new(s: Arc<Shared>) -> App {
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
fn trivial(name: &str, app: &str, pad: usize) -> Tool {
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

/// The URI of the trivial resource `i` (`--resources`; the engine serves it as
/// `test://<app>/r<i>`).
fn resource_uri(i: usize) -> String {
    format!("test://r{i}")
}

/// The name of the trivial prompt `i` (`--prompts`).
fn prompt_name(a: &Args, i: usize) -> String {
    let prefix = a.prefix.clone().unwrap_or_else(|| a.name.replace('-', "_"));
    format!("{prefix}_p{i}")
}

/// A JSON answer as rmcp's typed result.
fn typed<T: serde::de::DeserializeOwned>(v: Value) -> Result<T, ErrorData> {
    serde_json::from_value(v).map_err(|e| ErrorData::internal_error(e.to_string(), None))
}

async fn pause(ms: u64) {
    if ms > 0 {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
}

impl ServerHandler for App {
    fn get_info(&self) -> ServerConfig {
        let mut caps = ServerCapabilities::builder().enable_tools().build();
        if self.s.args.resources > 0 {
            caps.resources = Some(ResourcesCapability::default());
        }
        if self.s.args.prompts > 0 {
            caps.prompts = Some(PromptsCapability::default());
        }
        ServerConfig::new(caps)
            .with_server_info(Implementation::new(
                self.s.args.name.clone(),
                env!("CARGO_PKG_VERSION"),
            ))
            .with_instructions({
                let mut i = format!(
                    "App {}: plan tasks in {TABLE} with its add, list and complete tools.",
                    self.s.args.name
                );
                let want = self.s.args.instructions_bytes;
                if i.len() < want {
                    i.push_str(&"i".repeat(want - i.len()));
                }
                i
            })
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, ErrorData> {
        pause(self.s.args.slow_open_ms).await;
        self.s.initializes.fetch_add(1, Ordering::SeqCst);
        context.peer.set_peer_info(request.clone());
        self.negotiate_initialize(&request)
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        pause(self.s.args.slow_list_ms).await;
        self.s.lists.fetch_add(1, Ordering::SeqCst);
        let a = &self.s.args;
        if a.fail_list {
            return Err(ErrorData::internal_error(
                "this app refuses to list its tools (--fail-list)",
                None,
            ));
        }
        if a.endless_listing {
            let page: u64 = request
                .and_then(|r| r.cursor)
                .and_then(|c| c.parse().ok())
                .unwrap_or(0);
            let tools = (0..a.page_tools)
                .map(|i| trivial(&format!("endless_{page}_{i}"), &a.name, a.pad_bytes))
                .collect();
            let mut r = ListToolsResult::with_all_items(tools);
            r.next_cursor = Some((page + 1).to_string());
            return Ok(r);
        }
        let mut tools = self.router.list_all();
        tools.extend(
            (0..a.huge_listing).map(|i| trivial(&format!("huge_{i}"), &a.name, a.pad_bytes)),
        );
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        pause(self.s.args.slow_call_ms).await;
        if request.name == "datanotes_test_stats" {
            let stats = json!({
                "initializes": self.s.initializes.load(Ordering::SeqCst),
                "lists": self.s.lists.load(Ordering::SeqCst),
            });
            return Ok(CallToolResult::structured(stats).into());
        }
        self.router
            .call(ToolCallContext::new(self, request, context))
            .await
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.router.get(name).cloned()
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let a = &self.s.args;
        let resources: Vec<Value> = (1..=a.resources)
            .map(|i| {
                json!({"uri": resource_uri(i), "name": format!("r{i}"),
                       "description": format!("A trivial resource of app {}.", a.name),
                       "mimeType": "text/plain"})
            })
            .collect();
        typed(json!({"resources": resources}))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let a = &self.s.args;
        let Some(i) = (1..=a.resources).find(|&i| resource_uri(i) == request.uri) else {
            return Err(ErrorData::resource_not_found(
                format!("no resource {}", request.uri),
                None,
            ));
        };
        let text = format!("resource r{i} of app {}", a.name);
        let r: ReadResourceResult = typed(json!({"contents": [
            {"uri": request.uri, "mimeType": "text/plain", "text": text}
        ]}))?;
        Ok(r.into())
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        let a = &self.s.args;
        let prompts: Vec<Value> = (1..=a.prompts)
            .map(|i| {
                json!({"name": prompt_name(a, i),
                       "description": format!("A trivial prompt of app {}.", a.name)})
            })
            .collect();
        typed(json!({"prompts": prompts}))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        let a = &self.s.args;
        let Some(i) = (1..=a.prompts).find(|&i| prompt_name(a, i) == request.name) else {
            return Err(ErrorData::invalid_params(
                format!("no prompt {}", request.name),
                None,
            ));
        };
        let text = format!("prompt p{i} of app {}", a.name);
        let r: GetPromptResult = typed(json!({
            "description": format!("A trivial prompt of app {}.", a.name),
            "messages": [{"role": "user", "content": {"type": "text", "text": text}}]
        }))?;
        Ok(r.into())
    }
}

/// Refuses MCP requests without the expected bearer token.
async fn require_bearer(
    State(want): State<Arc<Option<String>>>,
    req: Request,
    next: Next,
) -> Response {
    if let Some(want) = want.as_deref() {
        let got = req
            .headers()
            .get(http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        if got != Some(want) {
            return (
                http::StatusCode::UNAUTHORIZED,
                [(http::header::WWW_AUTHENTICATE, "Bearer")],
                "this app needs its mcp_token as bearer",
            )
                .into_response();
        }
    }
    next.run(req).await
}

/// Follows the change feed for the table: a long-poll on `changes/`, counting what it sees.
async fn follow(s: Arc<Shared>) {
    let mut since = match s
        .http
        .get(format!(
            "{}/datanotes/health",
            s.args.engine.trim_end_matches('/')
        ))
        .send()
        .await
    {
        Ok(r) => r
            .json::<Value>()
            .await
            .ok()
            .and_then(|v| v["seq"].as_i64())
            .unwrap_or(0),
        Err(_) => 0,
    };
    s.cursor.store(since, Ordering::SeqCst);
    loop {
        let r = s
            .engine(
                "changes",
                json!({"since": since, "tables": [TABLE], "wait_ms": 10_000}),
                None,
            )
            .await;
        match r {
            Ok(page) => {
                *s.feed_error.lock().unwrap() = None;
                let changes = page["changes"].as_array().cloned().unwrap_or_default();
                s.seen.fetch_add(changes.len() as u64, Ordering::SeqCst);
                if !changes.is_empty() {
                    let mut ops = s.last_ops.lock().unwrap();
                    ops.extend(
                        changes
                            .iter()
                            .filter_map(|c| c["op"].as_str().map(String::from)),
                    );
                    let n = ops.len();
                    ops.drain(..n.saturating_sub(20));
                }
                since = page["next"].as_i64().unwrap_or(since);
                s.cursor.store(since, Ordering::SeqCst);
            }
            Err(e) => {
                *s.feed_error.lock().unwrap() = Some(e.to_string());
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let s = Arc::new(Shared {
        args: args.clone(),
        http: reqwest::Client::new(),
        seen: AtomicU64::new(0),
        cursor: AtomicI64::new(0),
        last_ops: Mutex::new(vec![]),
        feed_error: Mutex::new(None),
        initializes: AtomicU64::new(0),
        lists: AtomicU64::new(0),
        echoes: AtomicU64::new(0),
    });
    let app = App::new(s.clone());
    let config = if args.json {
        StreamableHttpServerConfig::default()
            .with_legacy_session_mode(false)
            .with_json_response(true)
    } else {
        StreamableHttpServerConfig::default()
    };
    let service = StreamableHttpService::new(
        move || Ok(app.clone()),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    let router = axum::Router::new().nest_service("/mcp", service).layer(
        axum::middleware::from_fn_with_state(Arc::new(args.mcp_token.clone()), require_bearer),
    );
    let listener = tokio::net::TcpListener::bind(args.listen).await?;
    let url = format!("http://{}/mcp", listener.local_addr()?);
    // TCP_NODELAY: an MCP answer is a priming SSE event then the result; without it the result
    // waits for the client's delayed ACK on a kept connection (unless `--nagle`).
    use axum::serve::ListenerExt;
    let nodelay = !args.nagle;
    let listener = listener.tap_io(move |tcp| {
        let _ = tcp.set_nodelay(nodelay);
    });
    let router = router.into_make_service_with_connect_info::<SocketAddr>();
    let server = tokio::spawn(async move { axum::serve(listener, router).await });

    // Tell the engine where we are (and the bearer it must send us).
    let update = json!({"name": args.name, "mcp_url": url, "mcp_token": args.mcp_token});
    if let Err(e) = s.engine("apps/update", update, None).await {
        eprintln!("remote_app: cannot update the app entry: {e}");
        std::process::exit(1);
    }
    tokio::spawn(follow(s.clone()));
    println!("listening on {url}");
    use std::io::Write;
    std::io::stdout().flush()?;
    tokio::select! {
        r = server => r??,
        _ = tokio::signal::ctrl_c() => {},
    }
    Ok(())
}
