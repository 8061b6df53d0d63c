//! A remote app's subscriptions, kept so that they hold when the app forgets them.
//!
//! An agent subscribes to an app's resource on its own session with the app (the shared
//! session of callers without one, for a client of 2026-07-28). An app that restarts forgets
//! its sessions and what was subscribed on them, and nothing tells the engine until the next
//! request on that session. So each subscription is noted with the session it was made on, and
//! at each probe of the app ([`crate::apps::backend::AppBackend::keep_up`]) every session that
//! holds subscriptions is pinged: one the app no longer knows is opened again, its
//! subscriptions are made again on the new session, and the subscribers are told that the
//! resources may have changed meanwhile (`notifications/resources/updated`). A backend that
//! replaces this one (the app got a new address or token) takes them over, and makes them at
//! its first probe.

use super::{Open, RemoteApp};
use crate::apps::backend::{AgentChannel, AppEvent, CallContext, Subscribed};
use serde_json::json;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

/// The most subscriptions kept for one session (the door keeps as many for an agent).
const MAX_PER_SESSION: usize = 1000;
/// The most bytes of an answer to a ping or a subscription made again.
const MAX_ANSWER: usize = 1 << 16;

/// The subscriptions made on one session with the app.
struct Held {
    agent: Option<Arc<dyn AgentChannel>>,
    /// The session (its `Mcp-Session-Id`) they were made on: on another, they are gone.
    session: Option<Arc<str>>,
    /// Taken over from the backend this one replaced: made on none of this one's sessions yet.
    adopted: bool,
    /// The resources, by the app's own URIs.
    uris: HashSet<String>,
}

/// The subscriptions made at the app, by agent (the shared session's under `""`).
#[derive(Default)]
pub(super) struct Subscriptions(Mutex<HashMap<String, Held>>);

/// One session's subscriptions, as [`RemoteApp::keep_subscriptions`] checks them.
struct Kept {
    key: String,
    agent: Option<Arc<dyn AgentChannel>>,
    session: Option<Arc<str>>,
    adopted: bool,
    uris: Vec<String>,
}

impl Subscriptions {
    /// Notes `uri` subscribed (`on`) or unsubscribed for the caller `ctx`, on `session`. The
    /// session is noted with the first subscription: a later one made on a new session leaves
    /// it, so that the earlier ones are made again there too.
    pub(super) fn note(&self, ctx: &CallContext, session: Option<Arc<str>>, uri: &str, on: bool) {
        let key = ctx.agent.as_ref().map_or("", |a| a.id()).to_string();
        let mut all = self.0.lock().unwrap();
        if !on {
            if let Some(h) = all.get_mut(&key) {
                h.uris.remove(uri);
                if h.uris.is_empty() {
                    all.remove(&key);
                }
            }
            return;
        }
        let held = all.entry(key).or_insert_with(|| Held {
            agent: ctx.agent.clone(),
            session,
            adopted: false,
            uris: HashSet::new(),
        });
        if held.uris.len() < MAX_PER_SESSION {
            held.uris.insert(uri.to_string());
        }
    }

    fn kept(&self) -> Vec<Kept> {
        let mut all = self.0.lock().unwrap();
        // An agent gone: its subscriptions with it.
        all.retain(|_, h| !h.agent.as_ref().is_some_and(|a| a.is_closed()));
        all.iter()
            .map(|(key, h)| Kept {
                key: key.clone(),
                agent: h.agent.clone(),
                session: h.session.clone(),
                adopted: h.adopted,
                uris: h.uris.iter().cloned().collect(),
            })
            .collect()
    }

    /// Every caller's subscriptions, for the backend that replaces this one.
    pub(super) fn export(&self) -> Vec<Subscribed> {
        let all = self.0.lock().unwrap();
        all.values()
            .map(|h| Subscribed {
                agent: h.agent.clone(),
                uris: h.uris.iter().cloned().collect(),
            })
            .collect()
    }

    /// Takes over the subscriptions of the backend this one replaced.
    pub(super) fn adopt(&self, subs: Vec<Subscribed>) {
        let mut all = self.0.lock().unwrap();
        for s in subs {
            let key = s.agent.as_ref().map_or("", |a| a.id()).to_string();
            let held = all.entry(key).or_insert_with(|| Held {
                agent: s.agent.clone(),
                session: None,
                adopted: true,
                uris: HashSet::new(),
            });
            held.uris.extend(s.uris.into_iter().take(MAX_PER_SESSION));
        }
    }

    /// The subscriptions of `key` were made again on `session`.
    fn moved(&self, key: &str, session: Option<Arc<str>>) {
        if let Some(h) = self.0.lock().unwrap().get_mut(key) {
            h.session = session;
            h.adopted = false;
        }
    }
}

impl RemoteApp {
    /// Makes the subscriptions the app forgot again (see the module's documentation).
    pub(super) async fn keep_subscriptions(&self) {
        for k in self.subs.kept() {
            let ctx = CallContext {
                actor: None,
                session: k.agent.as_ref().map(|a| a.id().to_string()),
                caller: None,
                client: None,
                cancel: Default::default(),
                agent: k.agent.clone(),
                trace: None,
            };
            let Some(open) = self.known_session(&ctx).await else {
                continue;
            };
            let now = open.client.route().and_then(|r| r.session);
            if now == k.session && !k.adopted {
                continue;
            }
            for uri in &k.uris {
                let params = json!({"uri": uri});
                let _ = self
                    .ask(&open, "resources/subscribe", params, None, MAX_ANSWER)
                    .await;
            }
            self.subs.moved(&k.key, now);
            if let Some(tell) = &self.events {
                let agent = k.agent.as_ref().map(|a| a.id().to_string());
                for uri in k.uris {
                    tell(AppEvent::ResourceUpdated(agent.clone(), uri));
                }
            }
        }
    }

    /// The caller's session with the app, pinged: opened again if the app no longer knows it.
    /// None: the app cannot be reached now.
    async fn known_session(&self, ctx: &CallContext) -> Option<Open> {
        let open = self.for_call(ctx).await.ok()?;
        match self.ask(&open, "ping", json!({}), None, MAX_ANSWER).await {
            Ok(_) => Some(open),
            Err((_, true)) => {
                self.forget_for(ctx).await;
                let open = self.for_call(ctx).await.ok()?;
                // Once answered, the new session's route is known.
                self.ask(&open, "ping", json!({}), None, MAX_ANSWER)
                    .await
                    .ok()?;
                Some(open)
            }
            Err(_) => None,
        }
    }
}
