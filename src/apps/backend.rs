//! The one app abstraction: every kind of app (a remote MCP server, a WASM component) lists its
//! tools and serves calls through [`AppBackend`]. Scopes, namespacing, skippedTools and
//! reachability live above it, in the aggregator, written once.
//!
//! [`AppBackend`] lists tools, resources, templates and prompts; calls a tool; serves the rest
//! through `request` (read a resource, get a prompt, complete, subscribe); keeps up at each probe
//! (`keep_up`); and hands its subscriptions to the backend that replaces it (`subscriptions`,
//! `adopt`). [`CallContext`] is a call's context: actor, caller, the call's `ClientChannel`, the
//! agent session's `AgentChannel`, cancellation. Resources and prompts flow through it exactly as
//! tools do. `AppBackend::kind` is a telemetry label, never a branch.

use futures_util::future::BoxFuture;
use rmcp::model::Tool;
use serde_json::Value;
use std::sync::Arc;

/// What an app offers: its tools and its instructions for agents.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Listing {
    pub tools: Vec<Tool>,
    #[serde(default)]
    pub instructions: Option<String>,
    /// Tools the app has but cannot offer, with why (`{"name", "takenBy": null, "reason"}`):
    /// shown in its `skippedTools` (a typed component's function with a resource parameter).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<Value>,
    /// Its resources (`resources/list`), resource templates (`resources/templates/list`) and
    /// prompts (`prompts/list`), each as the app sent it: the aggregator names them in the
    /// namespace (see `aggregator/resources.rs`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<Value>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub templates: Vec<Value>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub prompts: Vec<Value>,
    /// The fields of each tool (by its name) that the engine's tool type does not model, as
    /// the app wrote them: `execution` (its `taskSupport`), and whatever a later version of
    /// MCP adds. `tools/list` passes them on.
    #[serde(default, skip_serializing_if = "ToolFields::is_empty")]
    pub fields: ToolFields,
}

/// A tool's fields the engine does not model, by tool name.
pub type ToolFields = std::collections::BTreeMap<String, serde_json::Map<String, Value>>;

/// A request to an app beside its tools, for a caller: each one MCP method, its parameters and
/// answer passed as the app speaks them (its own URIs and names; the aggregator translates).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AppRequest {
    /// `resources/read`.
    ReadResource,
    /// `resources/subscribe`.
    Subscribe,
    /// `resources/unsubscribe`.
    Unsubscribe,
    /// `prompts/get`.
    GetPrompt,
    /// `completion/complete`.
    Complete,
    /// A task-augmented `tools/call` (MCP 2025-11-25: its `task` asks the app to run the tool
    /// as a task): answered with a `CreateTaskResult`, or with the tool's result.
    CallAsTask,
    /// `tasks/get`, of a task the app made.
    GetTask,
    /// `tasks/result`: the task's result, once it ended (the app may ask the caller something
    /// first, as during a call).
    TaskResult,
    /// `tasks/list`.
    ListTasks,
    /// `tasks/cancel`.
    CancelTask,
    /// `tools/list` on the caller's own session: what the app lists to a client like the
    /// agent (an app may list a tool only to clients that declared a capability). An app that
    /// lists the same tools to every client answers an error.
    ListTools,
}

impl AppRequest {
    /// The MCP method.
    pub fn method(self) -> &'static str {
        match self {
            AppRequest::ReadResource => "resources/read",
            AppRequest::Subscribe => "resources/subscribe",
            AppRequest::Unsubscribe => "resources/unsubscribe",
            AppRequest::GetPrompt => "prompts/get",
            AppRequest::Complete => "completion/complete",
            AppRequest::CallAsTask => "tools/call",
            AppRequest::GetTask => "tasks/get",
            AppRequest::TaskResult => "tasks/result",
            AppRequest::ListTasks => "tasks/list",
            AppRequest::CancelTask => "tasks/cancel",
            AppRequest::ListTools => "tools/list",
        }
    }

    /// A request of MCP's tasks (2025-11-25).
    pub fn is_task(self) -> bool {
        matches!(
            self,
            AppRequest::CallAsTask
                | AppRequest::GetTask
                | AppRequest::TaskResult
                | AppRequest::ListTasks
                | AppRequest::CancelTask
        )
    }
}

/// Subscriptions made at an app for one caller: an agent's session, or (none) the callers
/// without one.
pub struct Subscribed {
    /// The agent's session.
    pub agent: Option<Arc<dyn AgentChannel>>,
    /// The resources, by the app's own URIs.
    pub uris: Vec<String>,
}

/// What an app tells the engine outside any call (a remote app, on its session's stream).
#[derive(Debug, Clone)]
pub enum AppEvent {
    /// Its tools, resources or prompts changed: list them again.
    ListChanged,
    /// A resource it was subscribed to changed (its own URI), on the session of the agent
    /// named (its id), or on a shared session (`None`).
    ResourceUpdated(Option<String>, String),
}

/// Who a call is made for: forwarded to the app.
#[derive(Debug, Clone, Default)]
pub struct CallContext {
    /// `harness / model`, as the caller sent it.
    pub actor: Option<String>,
    pub session: Option<String>,
    /// The calling token's name (`owner`, `app:<name>`): a WASM app's writes record it as
    /// `actor.caller`; a remote app receives it as `X-Datanotes-Caller`.
    pub caller: Option<String>,
    /// The caller's side of the call, for what the app sends before its result (log messages,
    /// progress, sampling and elicitation requests); `None` when the caller cannot receive them
    /// (an HTTP `apps/call/`, an MCP client that asked for none of them).
    pub client: Option<Arc<dyn ClientChannel>>,
    /// Cancelled when the caller gives up on the call (MCP `notifications/cancelled`, or the
    /// request's connection closed): a remote app is sent `notifications/cancelled` for its
    /// request, a WASM guest is interrupted and its instance discarded. The backend then
    /// answers [`BackendError::cancelled`] (nobody reads it).
    pub cancel: tokio_util::sync::CancellationToken,
    /// The agent the call is made for, beyond this call: its MCP session at the door. A remote
    /// app gives each agent a session of its own (its subscriptions, log level and requests
    /// are that agent's), opened with the agent's capabilities; `None` (HTTP `apps/call/`):
    /// the app's shared session.
    pub agent: Option<Arc<dyn AgentChannel>>,
    /// The trace context of the call's span (export on): a remote app is sent it
    /// (`params._meta` and headers), a WASM call's spans go under it.
    pub trace: Option<opentelemetry::trace::SpanContext>,
}

impl CallContext {
    /// Where what an app says or asks during the request goes: the call's own channel, else
    /// the agent's session (for what the app asks of the agent: roots).
    pub fn channel(&self) -> Option<&dyn ClientChannel> {
        let agent = self.agent.as_deref().map(|a| a as &dyn ClientChannel);
        self.client.as_deref().or(agent)
    }
}

/// An agent's MCP session at the door, as an app's own session with the engine sees it: who
/// answers what the app asks outside a call (`roots/list`, sampling, elicitation, through
/// [`ClientChannel::request`]) and where its log messages go ([`ClientChannel::notify`]).
pub trait AgentChannel: ClientChannel {
    /// The session's id (the key of the app's session for it).
    fn id(&self) -> &str;
    /// What the agent declared that an app may ask of it (`sampling`, `elicitation`,
    /// `roots`), as MCP client capabilities: what the app's session declares in turn.
    fn capabilities(&self) -> Value;
    /// Its [`Self::capabilities`] spelled one way ([`capabilities_key`]), made once: agents
    /// with the same key are shown the same tools.
    fn capabilities_key(&self) -> &str;
    /// Whether the agent's session has ended (the app's session for it can go).
    fn is_closed(&self) -> bool;
    /// The log level the agent set (`logging/setLevel`), if it set one: the app's session
    /// for it is set to it too.
    fn log_level(&self) -> Option<&'static str>;
}

/// What an agent declared that an app may ask of it or show it, of its MCP client
/// `capabilities`: `sampling`, `elicitation`, `roots`, `extensions` (MCP Apps) and `tasks`.
pub fn agent_capabilities(mut capabilities: Value) -> Value {
    if let Some(o) = capabilities.as_object_mut() {
        o.retain(|k, _| {
            matches!(
                k.as_str(),
                "sampling" | "elicitation" | "roots" | "extensions" | "tasks"
            )
        });
    }
    capabilities
}

/// Capabilities spelled one way (every object's keys in order), as one string.
pub fn capabilities_key(v: &Value) -> String {
    fn sorted(v: &Value) -> Value {
        match v {
            Value::Object(o) => {
                let mut keys: Vec<&String> = o.keys().collect();
                keys.sort();
                Value::Object(
                    keys.into_iter()
                        .map(|k| (k.clone(), sorted(&o[k])))
                        .collect(),
                )
            }
            Value::Array(a) => Value::Array(a.iter().map(sorted).collect()),
            _ => v.clone(),
        }
    }
    sorted(v).to_string()
}

impl std::fmt::Debug for dyn AgentChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AgentChannel({})", self.id())
    }
}

/// What an agent answers an app's request: its result, or why not.
pub type ClientAnswer<'a> = BoxFuture<'a, Result<Value, ClientRefusal>>;

/// The caller of a tool call, as an app sees it while the call runs: where its log messages
/// and progress go, and who answers its requests. The MCP door implements it on the client's
/// session; the app's backend uses it without knowing the door.
///
/// The defaults are those of a channel with no client to tell or ask: no progress wanted,
/// notifications dropped, requests refused as undeclared.
pub trait ClientChannel: Send + Sync {
    /// Whether the caller asked for progress (it gave a progress token): the app is then given
    /// one with the call.
    fn wants_progress(&self) -> bool {
        false
    }
    /// A notification of the app during the call: `notifications/message` (passed on at or
    /// above the level the caller set) and `notifications/progress` (passed on with the
    /// caller's own progress token); any other is dropped.
    fn notify<'a>(&'a self, _method: &'a str, _params: Value) -> BoxFuture<'a, ()> {
        Box::pin(async {})
    }
    /// A request of the app to the caller (`sampling/createMessage`, `elicitation/create`):
    /// the caller's result, or its error (also when it did not declare the capability).
    fn request<'a>(&'a self, method: &'a str, _params: Value) -> ClientAnswer<'a> {
        Box::pin(async move { Err(ClientRefusal::undeclared(method)) })
    }
}

impl std::fmt::Debug for dyn ClientChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClientChannel")
    }
}

/// Why the caller did not answer an app's request: a JSON-RPC error, passed back to the app.
#[derive(Debug, Clone)]
pub struct ClientRefusal {
    /// The JSON-RPC error code.
    pub code: i32,
    /// What went wrong, in plain words.
    pub message: String,
    /// The error's `data`, if the caller sent one.
    pub data: Option<Value>,
}

impl ClientRefusal {
    /// The refusal of a request the caller cannot answer: it did not declare the capability
    /// (or there is no MCP client behind the call).
    pub fn undeclared(method: &str) -> ClientRefusal {
        let capability = match method {
            "sampling/createMessage" => "sampling",
            "elicitation/create" => "elicitation",
            "roots/list" => "roots",
            _ => {
                return ClientRefusal {
                    code: -32601,
                    message: format!(
                        "the engine does not pass {method} on to the client of this call"
                    ),
                    data: None,
                };
            }
        };
        ClientRefusal {
            code: -32601,
            message: format!(
                "the client of this call cannot answer {method}: it is not an MCP client that \
                 declared the {capability} capability"
            ),
            data: None,
        }
    }
}

/// The `_meta` key of a tool result that stands for a JSON-RPC error the app answered
/// (`{"code", "message", "data"}`): the MCP door answers that error to its client as it is.
pub const RPC_ERROR_META: &str = "datanotes/jsonrpcError";

/// The app's own JSON-RPC error an answer carries (`{"_meta": {RPC_ERROR_META: error}}`), if
/// it carries one.
pub fn rpc_error_in(answer: &Value) -> Option<&Value> {
    answer.get("_meta")?.get(RPC_ERROR_META)
}

/// Why an app could not answer. The message names what failed (and which limit ran out).
#[derive(Debug, Clone)]
pub struct BackendError(pub String);

impl BackendError {
    /// The answer of a call its caller cancelled.
    pub fn cancelled() -> BackendError {
        BackendError(CANCELLED.into())
    }

    /// Whether this is the answer of a cancelled call.
    pub fn is_cancelled(&self) -> bool {
        self.0 == CANCELLED
    }
}

const CANCELLED: &str = "the call was cancelled by its caller";

impl std::fmt::Display for BackendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// What an app answers a call or request: its JSON result, or why there is none.
pub type AppAnswer<'a> = BoxFuture<'a, Result<Value, BackendError>>;

/// An app the engine can list and call.
pub trait AppBackend: Send + Sync {
    /// What telemetry names the kind of this app (`remote`, `wasm`): a label, never a branch.
    fn kind(&self) -> &'static str;
    /// Whether its calls run inside the engine's process (a WASM guest): such a call is no
    /// CLIENT span of its own; what it does (its instance, its run) goes straight under the
    /// request's span. A call that leaves the process gets a CLIENT span whose context it sends.
    fn in_process(&self) -> bool {
        false
    }
    fn list(&self) -> BoxFuture<'_, Result<Listing, BackendError>>;
    /// Calls a tool; the answer is an MCP `CallToolResult` as JSON, passed through intact.
    fn call<'a>(&'a self, tool: &'a str, args: Value, ctx: &'a CallContext) -> AppAnswer<'a>;
    /// A request beside the tools (resources, prompts, completions), answered as the app's
    /// JSON result. An app that offers none answers that it does not.
    fn request<'a>(
        &'a self,
        req: AppRequest,
        params: Value,
        ctx: &'a CallContext,
    ) -> AppAnswer<'a> {
        let _ = (params, ctx);
        Box::pin(async move {
            Err(BackendError(format!(
                "the app does not answer {}",
                req.method()
            )))
        })
    }
    /// Whether the app's resources are computed from the vault when they are read (a WASM
    /// app's are): a subscription to one is then followed through the change feed, like the
    /// vault's own, rather than through the app's `notifications/resources/updated`.
    fn resources_follow_the_vault(&self) -> bool {
        false
    }
    /// An agent's roots changed (`notifications/roots/list_changed`): an app that keeps a
    /// session for that agent tells it.
    fn roots_changed<'a>(&'a self, agent: &'a str) -> BoxFuture<'a, ()> {
        let _ = agent;
        Box::pin(async {})
    }
    /// An agent set its log level: an app that keeps a session for it sets that session's.
    fn set_log_level<'a>(&'a self, agent: &'a str, level: &'static str) -> BoxFuture<'a, ()> {
        let _ = (agent, level);
        Box::pin(async {})
    }
    /// The subscriptions made at the app for its callers, for the backend that replaces this
    /// one (the owner gave the app a new address or token, or it moved itself).
    fn subscriptions(&self) -> Vec<Subscribed> {
        Vec::new()
    }
    /// Takes over the subscriptions of the backend this one replaces
    /// ([`Self::subscriptions`]): made at the app again at the next [`Self::keep_up`], and
    /// their subscribers told the resources may have changed.
    fn adopt(&self, subscriptions: Vec<Subscribed>) {
        let _ = subscriptions;
    }
    /// Called at each probe of the app while it is reachable: it keeps up what it holds for
    /// its callers (a remote app makes again the subscriptions it forgot, when it restarted).
    fn keep_up(&self) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }
    /// Whether a call may send notifications or requests (progress, logs, sampling) to the
    /// caller before its result, through [`CallContext::client`]: the MCP door then answers
    /// it as a stream rather than as one JSON answer, to a client that may receive them.
    /// A remote app does (see `remote/direct.rs`).
    fn streams(&self) -> bool {
        false
    }
    /// What the app holds in this server now (a WASM app: its instances and their memory), for
    /// `apps/get` and the apps listing; `None` for an app that runs elsewhere.
    fn stats(&self) -> Option<Value> {
        None
    }
    /// Whether the owner must sign in to the app (a remote app that requires OAuth), for its
    /// entry (`signIn`: `required`, `connected`, `reason`); `None` for an app without sign-in.
    fn sign_in(&self) -> Option<Value> {
        None
    }
}

/// The one rule for an app's result, whichever door serves it (`/mcp`, `apps/call/`):
/// `structuredContent` is a JSON object (as MCP requires up to 2025-11-25), so a non-object
/// one is moved into the content: it becomes the first text block, unless that block already
/// holds the same JSON. rmcp's `strip_non_object_output_for_legacy_peer`, applied to every
/// result and on the JSON as the app sent it (nothing else in it changes).
pub(crate) fn structured_as_object(result: &mut Value) {
    let Some(obj) = result.as_object_mut() else {
        return;
    };
    if obj.get("structuredContent").is_none_or(Value::is_object) {
        return;
    }
    let Some(value) = obj.remove("structuredContent") else {
        return;
    };
    if value.is_null() {
        return;
    }
    let content = obj
        .entry("content")
        .or_insert_with(|| serde_json::json!([]));
    let Some(blocks) = content.as_array_mut() else {
        return;
    };
    let in_first = blocks.first().is_some_and(|b| {
        b.get("type").and_then(Value::as_str) == Some("text")
            && b.get("text")
                .and_then(Value::as_str)
                .and_then(|t| serde_json::from_str::<Value>(t).ok())
                .is_some_and(|v| v == value)
    });
    if !in_first {
        blocks.insert(
            0,
            serde_json::json!({"type": "text", "text": value.to_string()}),
        );
    }
}

#[cfg(test)]
mod tests;
