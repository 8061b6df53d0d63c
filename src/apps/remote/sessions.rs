//! A remote app's sessions: opened with rmcp's client, kept, and opened again after a failure.
//!
//! - Shared ones, without an agent: the listing session (its answers bounded by the listing's
//!   byte cap; it declares the capabilities that let the app list every tool), and the session
//!   of every caller without an MCP session (HTTP `apps/call/`, a client of 2026-07-28, which
//!   has none): its calls, reads and subscriptions, so that what one of them turns on at the
//!   app (a toggle, a subscription) is on the same session as the rest.
//! - One per agent: a call made for an agent's MCP session goes on the app's session for that
//!   agent, opened at its first call with the agent's capabilities, so that what the app keeps
//!   per session (log level, subscriptions, toggles) and what it asks (roots, sampling,
//!   elicitation) are that agent's. At most [`MAX_AGENTS`] per app; one whose agent's session
//!   ended, or idle for [`AGENT_IDLE`], is closed when another opens (the least recently used
//!   goes first beyond the cap).

use super::relay::Relay;
use super::{ActorClient, BackendError, Open, Purpose, RemoteApp, content, plain, secs};
use crate::apps::backend::{AgentChannel, CallContext};
use crate::apps::plain::Peer;
use rmcp::ServiceExt;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

/// The most sessions one app keeps for agents.
pub(super) const MAX_AGENTS: usize = 64;
/// The longest a new agent session waits for its standalone stream to open.
const STANDALONE_WAIT: Duration = Duration::from_millis(500);
/// An agent's session unused this long is closed when another opens.
pub(super) const AGENT_IDLE: Duration = Duration::from_secs(600);

/// An agent's session with the app.
pub(crate) struct AgentOpen {
    open: Open,
    agent: Arc<dyn AgentChannel>,
    used: Instant,
}

impl RemoteApp {
    /// The shared session of `p`, opened if needed.
    pub(super) async fn session(&self, p: Purpose) -> Result<Open, BackendError> {
        let mut slot = self.slot(p).lock().await;
        if let Some(s) = slot.as_ref()
            && !s.service.is_closed()
        {
            return Ok(s.clone());
        }
        let open = self.connect(p, Relay::new(&self.events, p)).await?;
        *slot = Some(open.clone());
        Ok(open)
    }

    pub(super) async fn forget(&self, p: Purpose) {
        self.slot(p).lock().await.take();
    }

    /// The session a call goes on: its agent's, or the shared call session.
    pub(super) async fn for_call(&self, ctx: &CallContext) -> Result<Open, BackendError> {
        let Some(agent) = &ctx.agent else {
            return self.session(Purpose::Call).await;
        };
        let mut agents = self.agents.lock().await;
        if let Some(a) = agents.get_mut(agent.id())
            && !a.open.service.is_closed()
        {
            a.used = Instant::now();
            return Ok(a.open.clone());
        }
        // Room first: sessions of agents gone or idle, then the least recently used.
        agents.retain(|_, a| !a.agent.is_closed() && a.used.elapsed() < AGENT_IDLE);
        crate::bounded::evict_oldest(&mut agents, MAX_AGENTS - 1, |_, a| Some(a.used));
        let open = self
            .connect(
                Purpose::Agent,
                Relay::for_agent(&self.events, agent.clone()),
            )
            .await?;
        // The app may ask the agent something at once (its roots, on its standalone stream):
        // the first call waits until that stream is open (or refused), a moment.
        // (An app without sessions has no such stream.)
        if open.client.route().is_some_and(|r| r.session.is_some()) {
            open.client.standalone_open(STANDALONE_WAIT).await;
        }
        if let Some(level) = agent.log_level() {
            set_level(&open, level).await;
        }
        agents.insert(
            agent.id().to_string(),
            AgentOpen {
                open: open.clone(),
                agent: agent.clone(),
                used: Instant::now(),
            },
        );
        Ok(open)
    }

    /// Forgets the session a call went on (it failed): the next call opens a new one.
    pub(super) async fn forget_for(&self, ctx: &CallContext) {
        match &ctx.agent {
            Some(a) => {
                self.agents.lock().await.remove(a.id());
            }
            None => self.forget(Purpose::Call).await,
        }
    }

    /// The agent's roots changed: its session with the app is told.
    pub(super) async fn agent_roots_changed(&self, agent: &str) {
        let open = self.agents.lock().await.get(agent).map(|a| a.open.clone());
        if let Some(open) = open {
            let _ = open.service.notify_roots_list_changed().await;
        }
    }

    /// An agent set its log level: its session with the app, if there is one, is set to it.
    pub(super) async fn agent_log_level(&self, agent: &str, level: &'static str) {
        let open = self.agents.lock().await.get(agent).map(|a| a.open.clone());
        if let Some(open) = open {
            set_level(&open, level).await;
        }
    }

    /// Opens a session for `p` with `relay` as its client side.
    async fn connect(&self, p: Purpose, relay: Relay) -> Result<Open, BackendError> {
        // A literal address reaches no resolver: judged here (a name, at each connection).
        if let Ok(u) = reqwest::Url::parse(&self.url)
            && let Err(r) = crate::outbound::check_url(&u, self.policy)
        {
            return Err(BackendError(format!("{} was not reached: {r}", self.url)));
        }
        let mut cfg = StreamableHttpClientTransportConfig::with_uri(self.url.as_str());
        if let Some(t) = &self.token {
            cfg = cfg.auth_header(t.clone());
        }
        cfg = match p {
            // One page of a listing holds at most the listing's byte cap.
            Purpose::List => cfg
                .max_json_response_size(self.caps.max_bytes)
                .max_sse_event_size(self.caps.max_bytes),
            // Calls, reads, subscriptions: an answer through rmcp bounded as a read's (a call
            // posted directly reads its answer itself).
            Purpose::Call | Purpose::Agent => cfg
                .max_concurrent_requests(256)
                .max_json_response_size(content::MAX_ANSWER_BYTES)
                .max_sse_event_size(content::MAX_ANSWER_BYTES),
        };
        let too_big = match p {
            Purpose::List => self.too_big.clone(),
            _ => Arc::new(AtomicBool::new(false)),
        };
        let reuse = matches!(p, Purpose::Call | Purpose::Agent).then(|| self.reuse.clone());
        let http = ActorClient::new(too_big, reuse, self.oauth.clone(), self.policy)
            .declaring_tasks(relay.tasks());
        let transport = StreamableHttpClientTransport::with_client(http.clone(), cfg);
        match tokio::time::timeout(self.timeouts.open, relay.serve(transport)).await {
            Err(_) => Err(BackendError(format!(
                "timed out opening a session ({})",
                secs(self.timeouts.open)
            ))),
            // A 401 of an app that signs in with OAuth: the owner must connect it.
            Ok(Err(e)) => {
                Err(self.or_sign_in(BackendError(plain::init_error(&self.url, Peer::App, &e))))
            }
            Ok(Ok(c)) => Ok(Open {
                service: Arc::new(c),
                client: http,
            }),
        }
    }
}

/// `logging/setLevel` on a session, if the app declared logging (what it answers is not
/// waited on for more than a second).
async fn set_level(open: &Open, level: &str) {
    let logs = open
        .service
        .peer_info()
        .is_some_and(|i| i.capabilities.logging.is_some());
    if !logs {
        return;
    }
    let Ok(req) = serde_json::from_value::<rmcp::model::ClientRequest>(serde_json::json!({
        "method": "logging/setLevel", "params": {"level": level},
    })) else {
        return;
    };
    let _ = tokio::time::timeout(Duration::from_secs(1), open.service.send_request(req)).await;
}
