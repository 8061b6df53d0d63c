//! The client side of a remote app's sessions: what the engine declares to the app and how it
//! answers what the app says outside a call. On an agent's own session ([`Relay::agent`]) the
//! app sees that agent: its capabilities (sampling, elicitation, roots, extensions such as MCP
//! Apps), its roots, its answers to sampling and elicitation, and the agent gets the app's log
//! messages. On the shared sessions (listing, content) there is no agent: roots are none and
//! requests are refused in plain words; list changes and resource updates go to the
//! aggregator.
#![allow(deprecated)] // sampling, roots, logging (SEP-2577 deprecates them; clients use them)

use super::Purpose;
use crate::apps::backend::{AgentChannel, AppEvent, ClientRefusal};
use rmcp::model::{
    ClientCapabilities, ClientConfig, CreateMessageRequestParams, CreateMessageResult,
    ElicitRequestParams, ElicitResult, Implementation, ListRootsResult,
    LoggingMessageNotificationParam, ResourceUpdatedNotificationParam,
};
use rmcp::service::{NotificationContext, RequestContext};
use rmcp::{ErrorData, RoleClient};
use serde_json::{Value, json};
use std::sync::Arc;

/// The MIME type of an MCP Apps view.
const MCP_APP_MIME: &str = "text/html;profile=mcp-app";

/// Where an app's events go: the aggregator's, tagged with the app's name.
pub(crate) type Events = Option<Arc<dyn Fn(AppEvent) + Send + Sync>>;

/// One session's client side.
#[derive(Clone)]
pub(crate) struct Relay {
    events: Events,
    /// This session passes resource updates (a session where subscriptions are made: the
    /// shared call session, an agent's).
    updates: bool,
    /// The agent this session is for.
    pub(super) agent: Option<Arc<dyn AgentChannel>>,
}

impl Relay {
    pub(super) fn new(events: &Events, purpose: Purpose) -> Relay {
        Relay {
            events: events.clone(),
            updates: purpose != Purpose::List,
            agent: None,
        }
    }

    /// The relay of an agent's own session: resource updates and list changes go to the
    /// aggregator too (an update for that agent alone).
    pub(super) fn for_agent(events: &Events, agent: Arc<dyn AgentChannel>) -> Relay {
        Relay {
            events: events.clone(),
            updates: true,
            agent: Some(agent),
        }
    }

    /// The `tasks` capability the session declares (MCP 2025-11-25): the agent's, on its own
    /// session; on the shared ones, every kind of task, so that the app lists every tool it
    /// has (what it then asks there is refused in plain words).
    pub(super) fn tasks(&self) -> Option<Value> {
        match &self.agent {
            Some(a) => a.capabilities().get("tasks").cloned(),
            None => Some(json!({
                "list": {}, "cancel": {},
                "requests": {"sampling": {"createMessage": {}}, "elicitation": {"create": {}}},
            })),
        }
    }

    fn send(&self, e: AppEvent) {
        if let Some(f) = &self.events {
            f(e);
        }
    }

    /// Asks the agent; without one, the request is refused as undeclared.
    async fn ask(&self, method: &str, params: Value) -> Result<Value, ErrorData> {
        let r = match &self.agent {
            Some(a) => a.request(method, params).await,
            None => Err(ClientRefusal::undeclared(method)),
        };
        r.map_err(|e| ErrorData::new(rmcp::model::ErrorCode(e.code), e.message, e.data))
    }
}

/// An answer as rmcp's type.
fn typed<T: serde::de::DeserializeOwned>(v: Value, method: &str) -> Result<T, ErrorData> {
    serde_json::from_value(v).map_err(|e| {
        ErrorData::internal_error(
            format!("the client's answer to {method} is not valid: {e}"),
            None,
        )
    })
}

impl rmcp::ClientHandler for Relay {
    /// The agent's capabilities on its own session; on the shared ones, those that let the app
    /// list every tool it has (what it then asks on them is refused in plain words).
    fn get_info(&self) -> ClientConfig {
        let caps = match &self.agent {
            Some(a) => a.capabilities(),
            None => json!({
                "sampling": {}, "elicitation": {"form": {}, "url": {}}, "roots": {},
                "extensions": {"io.modelcontextprotocol/ui": {"mimeTypes": [MCP_APP_MIME]}},
            }),
        };
        let caps: ClientCapabilities = serde_json::from_value(caps).unwrap_or_default();
        ClientConfig::new(
            caps,
            Implementation::new("datanotes", env!("CARGO_PKG_VERSION")),
        )
    }

    async fn list_roots(
        &self,
        _c: RequestContext<RoleClient>,
    ) -> Result<ListRootsResult, ErrorData> {
        if self.agent.is_none() {
            return Ok(ListRootsResult::default());
        }
        typed(self.ask("roots/list", json!({})).await?, "roots/list")
    }

    async fn create_message(
        &self,
        params: CreateMessageRequestParams,
        _c: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, ErrorData> {
        let p = serde_json::to_value(params).unwrap_or_default();
        typed(
            self.ask("sampling/createMessage", p).await?,
            "sampling/createMessage",
        )
    }

    async fn create_elicitation(
        &self,
        params: ElicitRequestParams,
        _c: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        let p = serde_json::to_value(params).unwrap_or_default();
        typed(
            self.ask("elicitation/create", p).await?,
            "elicitation/create",
        )
    }

    async fn on_logging_message(
        &self,
        params: LoggingMessageNotificationParam,
        _c: NotificationContext<RoleClient>,
    ) {
        if let Some(a) = &self.agent {
            let p = serde_json::to_value(params).unwrap_or_default();
            a.notify("notifications/message", p).await;
        }
    }

    async fn on_resource_updated(
        &self,
        params: ResourceUpdatedNotificationParam,
        _c: NotificationContext<RoleClient>,
    ) {
        if self.updates {
            let agent = self.agent.as_ref().map(|a| a.id().to_string());
            self.send(AppEvent::ResourceUpdated(agent, params.uri));
        }
    }

    async fn on_resource_list_changed(&self, _c: NotificationContext<RoleClient>) {
        self.send(AppEvent::ListChanged);
    }

    async fn on_tool_list_changed(&self, _c: NotificationContext<RoleClient>) {
        self.send(AppEvent::ListChanged);
    }

    async fn on_prompt_list_changed(&self, _c: NotificationContext<RoleClient>) {
        self.send(AppEvent::ListChanged);
    }
}
