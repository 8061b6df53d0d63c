//! `subscriptions/listen` (protocol 2026-07-28, where a client has no session): one request
//! whose stream carries the notifications its filter accepts, until the client cancels it: the
//! resources it names (the vault's followed through the change feed; an app's subscribed to at
//! the app, on its shared session, for the caller, and unsubscribed at the end), and the
//! `list_changed` of tools, resources and prompts. rmcp acknowledges the subscription and
//! keeps to the filter; this runs it. rmcp acknowledges before it runs a subscription, and a
//! client may act on the acknowledgment at once (call a tool that updates the resource): the
//! door subscribes at the apps before rmcp sees the request ([`Mcp::subscribe_first`]).

use super::Mcp;
use super::content::{MAX_SUBSCRIPTIONS, vault_changes};
use crate::auth::{self, Access, Target};
use crate::engine::resources::VaultUri;
use rmcp::ErrorData;
use rmcp::model::{ServerNotification, SubscriptionFilter};
use rmcp::service::SubscriptionContext;
use serde_json::json;
use std::collections::HashSet;
use std::sync::Arc;

/// The app resources a `subscriptions/listen` names, subscribed at their apps by the door
/// before rmcp saw the request (carried to [`Mcp::listen_for`] in the request's extensions).
#[derive(Clone)]
pub(super) struct Subscribed(Arc<Vec<String>>);

/// A notification of `method` with `params`, as rmcp's type.
fn notification(method: &str, params: serde_json::Value) -> Option<ServerNotification> {
    serde_json::from_value(json!({"method": method, "params": params})).ok()
}

impl Mcp {
    /// For a `subscriptions/listen` (`body`, without a session): subscribes to the app
    /// resources it names (as [`Mcp::listen_filter`] accepts them) and notes them in the
    /// request's extensions. None: not such a request.
    pub(super) async fn subscribe_first(
        &self,
        parts: &mut http::request::Parts,
        body: &[u8],
    ) -> Option<Subscribed> {
        const METHOD: &[u8] = b"subscriptions/listen";
        if !body.windows(METHOD.len()).any(|w| w == METHOD)
            || super::session_id(&parts.headers).is_some()
        {
            return None;
        }
        #[derive(serde::Deserialize)]
        struct Listen {
            method: String,
            params: rmcp::model::SubscriptionsListenRequestParams,
        }
        let listen: Listen = serde_json::from_slice(body).ok()?;
        if listen.method != "subscriptions/listen" {
            return None;
        }
        let ctx = self.server_ctx(parts, None).ok()?;
        let accepted = self.listen_filter(&listen.params.notifications);
        let mut done = vec![];
        for u in accepted.resource_subscriptions.iter().flatten() {
            if VaultUri::parse(u).is_none()
                && (self.server.agg)
                    .subscribe_app_resource(&ctx, None, u, true)
                    .await
                    .is_ok()
            {
                done.push(u.clone());
            }
        }
        let s = Subscribed(Arc::new(done));
        parts.extensions.insert(s.clone());
        Some(s)
    }

    /// Ends what [`Mcp::subscribe_first`] subscribed to (rmcp refused the request).
    pub(super) fn unsubscribe(&self, parts: &http::request::Parts, s: Subscribed) {
        let Ok(ctx) = self.server_ctx(parts, None) else {
            return;
        };
        let agg = self.server.agg.clone();
        tokio::spawn(async move {
            for u in s.0.iter() {
                let _ = agg.subscribe_app_resource(&ctx, None, u, false).await;
            }
        });
    }

    /// What `subscriptions/listen` accepts: what the client asks, up to
    /// [`MAX_SUBSCRIPTIONS`] resources (rmcp keeps to what `initialize` advertised).
    pub(super) fn listen_filter(&self, requested: &SubscriptionFilter) -> SubscriptionFilter {
        let mut f = requested.clone();
        if let Some(uris) = f.resource_subscriptions.as_mut() {
            uris.truncate(MAX_SUBSCRIPTIONS);
        }
        f
    }

    /// Runs one `subscriptions/listen` until the client cancels it or the server closes.
    pub(super) async fn listen_for(&self, sc: SubscriptionContext) -> Result<(), ErrorData> {
        let ctx = self.ctx(sc.request_context())?;
        let accepted = sc.accepted().clone();
        // A resource of the vault is followed only if the caller may read its table (refused
        // ones are left, as an app's).
        let readable = |u: &String| match VaultUri::parse(u) {
            Some(Ok(v)) => {
                auth::authorize(&ctx.caller, Access::Read, Target::Table(v.table())).is_ok()
            }
            _ => true,
        };
        let uris: HashSet<String> = accepted
            .resource_subscriptions
            .clone()
            .unwrap_or_default()
            .into_iter()
            .filter(readable)
            .collect();
        let agg = &self.server.agg;
        // An app's resource: subscribed at the app for this caller (refused ones are left),
        // by the door already.
        let first = sc
            .request_context()
            .extensions
            .get::<http::request::Parts>()
            .and_then(|p| p.extensions.get::<Subscribed>());
        let mut apps = first.map(|s| s.0.to_vec()).unwrap_or_default();
        let todo = first.is_none().then_some(&uris).into_iter().flatten();
        for u in todo.filter(|u| VaultUri::parse(u).is_none()) {
            if agg
                .subscribe_app_resource(&ctx, None, u, true)
                .await
                .is_ok()
            {
                apps.push(u.clone());
            }
        }
        let vault = uris.iter().any(|u| VaultUri::parse(u).is_some());
        // An app's resources read from the vault: followed through the feed too.
        let followers = agg.follow_the_vault(&apps);
        let mut updates = agg.resource_updates();
        let mut content = agg.subscribe_content();
        let mut tools = agg.subscribe();
        let mut seq = self.server.engine.seq.subscribe();
        let mut since = self.server.engine.last_seq();
        let mut closing = self.server.closing.subscribe();
        let sink = sc.sink().clone();
        let send = |n: Option<ServerNotification>| {
            let sink = sink.clone();
            async move {
                if let Some(n) = n {
                    let _ = sink.send(n).await;
                }
            }
        };
        let updated =
            |uri: &str| notification("notifications/resources/updated", json!({"uri": uri}));
        loop {
            tokio::select! {
                _ = sc.cancelled() => break,
                _ = async { closing.wait_for(|v| *v).await.map(|_| ()) } => break,
                u = updates.recv() => match u {
                    Ok(update) => {
                        for u in apps.iter().filter(|u| update.concerns(u, None)) {
                            send(updated(u)).await;
                        }
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                    Err(_) => break,
                },
                r = content.changed() => {
                    if r.is_err() { break }
                    content.borrow_and_update();
                    if accepted.resources_list_changed == Some(true) {
                        send(notification("notifications/resources/list_changed", json!({}))).await;
                    }
                    if accepted.prompts_list_changed == Some(true) {
                        send(notification("notifications/prompts/list_changed", json!({}))).await;
                    }
                }
                r = tools.changed() => {
                    if r.is_err() { break }
                    tools.borrow_and_update();
                    if accepted.tools_list_changed == Some(true) {
                        send(notification("notifications/tools/list_changed", json!({}))).await;
                    }
                }
                r = seq.changed() => {
                    if r.is_err() { break }
                    let last = *seq.borrow_and_update();
                    if !vault && followers.is_empty() {
                        since = last;
                        continue;
                    }
                    let Some((changed, next)) = vault_changes(&self.server, since).await else {
                        since = last;
                        continue;
                    };
                    since = next;
                    for u in changed.iter().filter(|u| uris.contains(*u)) {
                        send(updated(u)).await;
                    }
                    if !changed.is_empty() {
                        for u in &followers {
                            send(updated(u)).await;
                        }
                    }
                }
            }
        }
        for u in &apps {
            let _ = agg.subscribe_app_resource(&ctx, None, u, false).await;
        }
        Ok(())
    }
}
