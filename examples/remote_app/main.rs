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
//!
//! Its parts: `tools.rs` (the tools and their router, with the `--tool`, `--array-result` and
//! `--big-*` extras), `handler.rs` (rmcp's `ServerHandler`: listings, calls, resources, prompts
//! and the slow and hostile knobs), and this file (arguments, the engine client, the feed
//! follower and the HTTP server).

mod handler;
mod tools;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use clap::Parser;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tools::App;

/// The table the planning tools work on.
pub(crate) const TABLE: &str = "personal.tasks.items";

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
