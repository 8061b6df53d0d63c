//! What each agent is shown of the apps' tools.
//!
//! The aggregator lists an app once, on a session that declares every capability, so that an
//! agent that has one finds the tools that need it. But an app may list a tool only to clients
//! that declared a capability: the everything server lists the tools that make a client's
//! sampling a task only to a client that declares `tasks`, and would refuse anyone else's call.
//! So an agent is not shown what its apps do not list to a client like it: the first agent of
//! each set of capabilities has every app that keeps sessions asked, on the agent's own session
//! with it (opened with the agent's capabilities, as its first call would), which tools it
//! lists; the answer serves every agent with the same capabilities until the namespace changes.
//! An app that does not answer in time, answers an error (a WASM app lists the same tools to
//! every caller), or lists more pages than [`PAGES`] hides nothing.

use super::Aggregator;
use crate::apps::backend::{
    AgentChannel, AppRequest, CallContext, ClientChannel, agent_capabilities, capabilities_key,
    rpc_error_in,
};
use serde_json::{Value, json};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Sets of capabilities kept; one more replaces them all.
const PROFILES: usize = 16;
/// The longest an app's listing for an agent is waited for.
const WAIT: Duration = Duration::from_secs(2);
/// The most pages of an app's listing read.
const PAGES: usize = 10;

/// The names of the tools hidden from an agent.
type Hidden = Arc<HashSet<String>>;

/// The tools hidden from agents, per set of capabilities (as JSON), for the namespace's tools
/// they were worked out for (its generation: [`Aggregator::subscribe`]'s count, which a
/// refresh that changes no tool leaves as it is); worked out one set at a time (agents that
/// connect at once ask apps once).
#[derive(Default)]
pub(super) struct Shown {
    kept: Mutex<HashMap<String, (u64, Hidden)>>,
    working: tokio::sync::Mutex<()>,
}

impl Shown {
    fn get(&self, profile: &str, now: u64) -> Option<Hidden> {
        let kept = self.kept.lock().unwrap();
        let (of, hidden) = kept.get(profile)?;
        (*of == now).then(|| hidden.clone())
    }
}

impl Aggregator {
    /// The apps' tools not shown to `agent` (by name): those its apps do not list to a client
    /// with its capabilities.
    pub async fn hidden_from(&self, agent: &Arc<dyn AgentChannel>) -> Hidden {
        // The generation first: a change after it is seen by the next listing.
        let now = *self.changed.borrow();
        let ns = self.ns.read().unwrap().clone();
        if ns.tools.is_empty() {
            return Arc::default();
        }
        let profile = agent.capabilities_key();
        if let Some(hidden) = self.shown.get(profile, now) {
            return hidden;
        }
        let _working = self.shown.working.lock().await;
        if let Some(hidden) = self.shown.get(profile, now) {
            return hidden;
        }
        let apps: Vec<_> = {
            let slots = self.slots.read().unwrap();
            slots
                .iter()
                .filter(|s| s.reachable == Some(true))
                .filter(|s| ns.tools.iter().any(|(app, _)| *app == s.name))
                .map(|s| (s.name.clone(), s.backend.clone()))
                .collect()
        };
        let asks = apps.iter().map(|(app, backend)| async move {
            let listed = tokio::time::timeout(WAIT, listed(&**backend, agent)).await;
            (app, listed.ok().flatten())
        });
        let mut hidden = HashSet::new();
        for (app, listed) in futures_util::future::join_all(asks).await {
            let Some(listed) = listed else { continue };
            for (i, (a, t)) in ns.tools.iter().enumerate() {
                if a == app && !listed.contains(ns.own_name(i)) {
                    hidden.insert(t.name.to_string());
                }
            }
        }
        let hidden = Arc::new(hidden);
        let mut kept = self.shown.kept.lock().unwrap();
        kept.retain(|_, (of, _)| *of == now);
        if kept.len() >= PROFILES {
            kept.clear();
        }
        kept.insert(profile.to_string(), (now, hidden.clone()));
        hidden
    }
}

impl Aggregator {
    /// The apps' tools not shown to a client without a session (2026-07-28), which declares
    /// its `capabilities` with each request: as for an agent with those capabilities (the apps
    /// keep a session for that set of capabilities, as for an agent).
    pub async fn hidden_from_declared(&self, capabilities: Value) -> Hidden {
        let caps = agent_capabilities(capabilities);
        let key = capabilities_key(&caps);
        let agent: Arc<dyn AgentChannel> = Arc::new(Declared {
            id: format!("declared:{key}"),
            key,
            caps,
        });
        self.hidden_from(&agent).await
    }
}

/// A set of capabilities declared without a session, as an agent: the app's session for it
/// lists tools, and is asked nothing (there is no one to answer).
struct Declared {
    id: String,
    key: String,
    caps: Value,
}

/// Tells nothing and asks nothing: the trait's defaults.
impl ClientChannel for Declared {}

impl AgentChannel for Declared {
    fn id(&self) -> &str {
        &self.id
    }

    fn capabilities(&self) -> Value {
        self.caps.clone()
    }

    fn capabilities_key(&self) -> &str {
        &self.key
    }

    fn is_closed(&self) -> bool {
        false
    }

    fn log_level(&self) -> Option<&'static str> {
        None
    }
}

/// The names of the tools an app lists on `agent`'s session with it, every page; None: not
/// known (an error, an app that lists the same tools to everyone, too many pages).
async fn listed(
    backend: &dyn crate::apps::backend::AppBackend,
    agent: &Arc<dyn AgentChannel>,
) -> Option<HashSet<String>> {
    let cc = CallContext {
        actor: None,
        session: Some(agent.id().to_string()),
        caller: None,
        client: None,
        cancel: Default::default(),
        agent: Some(agent.clone()),
        trace: None,
    };
    let mut names = HashSet::new();
    let mut cursor: Option<String> = None;
    for _ in 0..PAGES {
        let params = match &cursor {
            Some(c) => json!({ "cursor": c }),
            None => json!({}),
        };
        let page = backend
            .request(AppRequest::ListTools, params, &cc)
            .await
            .ok()?;
        if rpc_error_in(&page).is_some() {
            return None;
        }
        for t in page.get("tools")?.as_array()? {
            names.insert(t.get("name")?.as_str()?.to_string());
        }
        match page.get("nextCursor").and_then(Value::as_str) {
            Some(c) if !c.is_empty() => cursor = Some(c.to_string()),
            _ => return Some(names),
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_spelling_for_one_set_of_capabilities() {
        let a = json!({"sampling": {}, "elicitation": {"url": {}, "form": {}}});
        let b = json!({"elicitation": {"form": {}, "url": {}}, "sampling": {}});
        assert_eq!(capabilities_key(&a), capabilities_key(&b));
        assert_ne!(
            capabilities_key(&a),
            capabilities_key(&json!({"sampling": {}}))
        );
    }
}
