//! WASM apps on version 0.2 of the world (`wit/0.2`), end to end through `/mcp` with rmcp's
//! client: the Rust example `planning2` (`plugins/planning-v2`) reports progress, which reaches
//! the client with its progress token; learns that its caller cancelled (`engine.cancelled`)
//! and returns, its instance kept warm and its slot free at once; and offers resources, a
//! resource template and a prompt, which join the namespace like a remote app's (its URIs named
//! by the app: `tasks://open` of the app `plan` is `tasks://plan/open`). The 0.1 guests keep
//! working: `wasm::` runs them all, on the same server build.
//!
//! - `progress_and_cancel`: progress with its token, and guests that learn they were cancelled;
//! - `resources`: resources, templates and prompts in the namespace, followed by subscription;
//! - `python_and_javascript`: the Python and JavaScript examples on 0.2;
//! - `hostile`: a guest whose content misbehaves.

mod hostile;
mod progress_and_cancel;
mod python_and_javascript;
mod resources;

use crate::kit::mcp::{ask, transport_config};
use crate::kit::*;
use crate::wasm::shared_cache;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, ClientRequest, ProgressNotificationParam,
};
use rmcp::service::{NotificationContext, PeerRequestOptions, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A server (the shared compile cache) with `planning2` installed as `plan`.
fn server(limits: Value) -> Server {
    let s = Server::start_with_env(&[("DATANOTES_CACHE_DIR", &shared_cache())]);
    s.install(
        "plan",
        "planning2",
        json!({"write": ["personal.tasks.items"], "ddl": true, "limits": limits}),
    );
    s
}

/// The client: keeps the progress notifications it receives, and the URIs of the
/// `resources/updated` ones.
#[derive(Clone, Default)]
struct Progress(
    Arc<Mutex<Vec<ProgressNotificationParam>>>,
    Arc<Mutex<Vec<String>>>,
);

impl ClientHandler for Progress {
    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _c: NotificationContext<RoleClient>,
    ) {
        self.0.lock().unwrap().push(params);
    }

    async fn on_resource_updated(
        &self,
        params: rmcp::model::ResourceUpdatedNotificationParam,
        _c: NotificationContext<RoleClient>,
    ) {
        self.1.lock().unwrap().push(params.uri.to_string());
    }
}

type Client = RunningService<RoleClient, Progress>;

fn connect(rt: &tokio::runtime::Runtime, s: &Server) -> (Client, Progress) {
    let p = Progress::default();
    let cfg = transport_config(&format!("{}/mcp", s.url), Some(&s.token), None);
    let c = rt
        .block_on(async {
            p.clone()
                .serve(StreamableHttpClientTransport::from_config(cfg))
                .await
        })
        .unwrap();
    (c, p)
}

/// Calls a tool; its structured result.
fn call(rt: &tokio::runtime::Runtime, c: &Client, tool: &str, args: Value) -> Value {
    let r = ask(
        rt,
        c,
        "tools/call",
        json!({"name": tool, "arguments": args}),
    );
    assert_ne!(r["isError"], true, "{tool}: {r}");
    r["structuredContent"].clone()
}

/// The app's live instances (in a call or warm) and its warm ones.
fn instances(s: &Server) -> (u64, u64) {
    instances_of(s, "plan")
}

/// The live instances of the app `app` (in a call or warm) and its warm ones.
fn instances_of(s: &Server, app: &str) -> (u64, u64) {
    let r = s.app(app)["runtime"].clone();
    (
        r["instances"].as_u64().unwrap(),
        r["warm"].as_u64().unwrap(),
    )
}
