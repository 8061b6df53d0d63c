//! The one app abstraction: every kind of app (a remote MCP server, a WASM component) lists its
//! tools and serves calls through [`AppBackend`]. Scopes, namespacing, skippedTools and
//! reachability live above it, in the aggregator, written once.

use super::plain::{self, Peer};
use futures_util::future::BoxFuture;
use rmcp::model::{CallToolRequestParams, Tool};
use rmcp::service::RunningService;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{RoleClient, ServiceExt};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// What an app offers: its tools and its instructions for agents.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Listing {
    pub tools: Vec<Tool>,
    #[serde(default)]
    pub instructions: Option<String>,
}

/// Who a call is made for: forwarded to the app.
#[derive(Debug, Clone, Default)]
pub struct CallContext {
    /// `harness / model`, as the caller sent it.
    pub actor: Option<String>,
    pub session: Option<String>,
}

/// Why an app could not answer. The message names what failed (and which limit ran out).
#[derive(Debug, Clone)]
pub struct BackendError(pub String);

impl std::fmt::Display for BackendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// An app the engine can list and call.
pub trait AppBackend: Send + Sync {
    fn list(&self) -> BoxFuture<'_, Result<Listing, BackendError>>;
    /// Calls a tool; the answer is an MCP `CallToolResult` as JSON, passed through intact.
    fn call<'a>(
        &'a self,
        tool: &'a str,
        args: Value,
        ctx: &'a CallContext,
    ) -> BoxFuture<'a, Result<Value, BackendError>>;
    /// Whether a call may send notifications or requests (progress, logs, sampling) before its
    /// result: the MCP door then answers it as a stream rather than as one JSON answer.
    fn streams(&self) -> bool {
        false
    }
}

/// The limits for talking to an app.
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    pub open: Duration,
    pub list: Duration,
    pub call: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            open: Duration::from_secs(15),
            list: Duration::from_secs(30),
            call: Duration::from_secs(180),
        }
    }
}

impl Timeouts {
    /// The defaults, overridden by `DATANOTES_APP_{OPEN,LIST,CALL}_TIMEOUT_MS`.
    pub fn from_env() -> Timeouts {
        let d = Timeouts::default();
        let ms = |k: &str, v: Duration| {
            std::env::var(k)
                .ok()
                .and_then(|s| s.parse().ok())
                .map(Duration::from_millis)
                .unwrap_or(v)
        };
        Timeouts {
            open: ms("DATANOTES_APP_OPEN_TIMEOUT_MS", d.open),
            list: ms("DATANOTES_APP_LIST_TIMEOUT_MS", d.list),
            call: ms("DATANOTES_APP_CALL_TIMEOUT_MS", d.call),
        }
    }
}

fn secs(d: Duration) -> String {
    format!("{} s", d.as_secs_f64())
}

type Session = Arc<RunningService<RoleClient, ()>>;

/// A remote app: an MCP server over streamable HTTP, reached with rmcp's client. Sessions are
/// kept per forwarded actor (the actor travels as the `X-Datanotes-Actor` header of the session),
/// reused across calls and re-opened after a failure.
pub struct RemoteApp {
    url: String,
    token: Option<String>,
    timeouts: Timeouts,
    sessions: tokio::sync::Mutex<HashMap<String, Session>>,
}

impl RemoteApp {
    pub fn new(url: String, token: Option<String>, timeouts: Timeouts) -> RemoteApp {
        RemoteApp {
            url,
            token,
            timeouts,
            sessions: tokio::sync::Mutex::new(HashMap::new()),
        }
    }

    async fn session(&self, actor: &str) -> Result<Session, BackendError> {
        let mut sessions = self.sessions.lock().await;
        if let Some(s) = sessions.get(actor)
            && !s.is_closed()
        {
            return Ok(s.clone());
        }
        let mut cfg = StreamableHttpClientTransportConfig::with_uri(self.url.as_str());
        if let Some(t) = &self.token {
            cfg = cfg.auth_header(t.clone());
        }
        if !actor.is_empty()
            && let Ok(v) = actor.parse()
        {
            cfg = cfg.custom_headers(HashMap::from([(
                http::HeaderName::from_static("x-datanotes-actor"),
                v,
            )]));
        }
        let transport = StreamableHttpClientTransport::from_config(cfg);
        let client = match tokio::time::timeout(self.timeouts.open, ().serve(transport)).await {
            Err(_) => {
                return Err(BackendError(format!(
                    "timed out opening a session ({})",
                    secs(self.timeouts.open)
                )));
            }
            Ok(Err(e)) => return Err(BackendError(plain::init_error(&self.url, Peer::App, &e))),
            Ok(Ok(c)) => Arc::new(c),
        };
        sessions.insert(actor.to_string(), client.clone());
        Ok(client)
    }

    async fn forget(&self, actor: &str) {
        self.sessions.lock().await.remove(actor);
    }
}

impl AppBackend for RemoteApp {
    fn streams(&self) -> bool {
        true
    }

    fn list(&self) -> BoxFuture<'_, Result<Listing, BackendError>> {
        Box::pin(async move {
            let s = self.session("").await?;
            let r = match tokio::time::timeout(self.timeouts.list, s.list_all_tools()).await {
                Err(_) => Err(BackendError(format!(
                    "timed out listing tools ({})",
                    secs(self.timeouts.list)
                ))),
                Ok(Err(e)) => Err(BackendError(format!(
                    "listing tools failed: {}",
                    plain::service_error(&self.url, Peer::App, &e)
                ))),
                Ok(Ok(tools)) => {
                    let instructions = s.peer_info().and_then(|i| i.instructions.clone());
                    Ok(Listing {
                        tools,
                        instructions,
                    })
                }
            };
            if r.is_err() {
                self.forget("").await;
            }
            r
        })
    }

    fn call<'a>(
        &'a self,
        tool: &'a str,
        args: Value,
        ctx: &'a CallContext,
    ) -> BoxFuture<'a, Result<Value, BackendError>> {
        Box::pin(async move {
            let actor = ctx.actor.clone().unwrap_or_default();
            let s = self.session(&actor).await?;
            let mut params = CallToolRequestParams::new(tool.to_string());
            if let Value::Object(m) = args {
                params = params.with_arguments(m);
            }
            let r = match tokio::time::timeout(self.timeouts.call, s.call_tool(params)).await {
                Err(_) => Err(BackendError(format!(
                    "timed out calling {tool} ({})",
                    secs(self.timeouts.call)
                ))),
                // The app answered, with a protocol error: it is reachable; the caller sees the error.
                Ok(Err(rmcp::ServiceError::McpError(e))) => {
                    return Ok(
                        serde_json::json!({"content": [{"type": "text", "text": e.message}], "isError": true}),
                    );
                }
                Ok(Err(e)) => Err(BackendError(format!(
                    "calling {tool} failed: {}",
                    plain::service_error(&self.url, Peer::App, &e)
                ))),
                Ok(Ok(result)) => {
                    serde_json::to_value(result).map_err(|e| BackendError(e.to_string()))
                }
            };
            if r.is_err() {
                self.forget(&actor).await;
            }
            r
        })
    }
}
