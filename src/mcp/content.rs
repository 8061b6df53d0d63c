//! `/mcp`'s resources, resource templates, prompts and completions: each request goes to the
//! aggregator (the vault's resources first, then the apps'; the caller's rights through
//! `auth::authorize`), and its answer is passed on. Subscriptions are kept per session: a
//! resource of the vault is followed through the change feed, an app's through the app
//! (`notifications/resources/updated`, named for the caller). A change of the apps' resources
//! or prompts reaches every session as `list_changed`.
//!
//! An app whose resources are read from the vault (`AppBackend::resources_follow_the_vault`, as a
//! WASM app's) has its subscribed resources followed through the feed: each change of the vault may
//! change them, and so may a new backend for the app, a new component or new rights, which the
//! aggregator says as `ResourceUpdate::App` (`apps/aggregator/resources.rs`).

use super::{Mcp, Session, Sessions, exact, rounds};
use crate::apps::aggregator::resources::ResourceUpdate;
use crate::apps::backend::AgentChannel;
use crate::auth::{self, Access, Target};
use crate::engine::resources::VaultUri;
use crate::engine::skills;
use crate::error::Error;
use crate::server::Shared;
use rmcp::model::{
    CompleteRequestParams, CompleteResult, GetPromptRequestParams, GetPromptResult,
    ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult, PaginatedRequestParams,
    ReadResourceRequestParams, ReadResourceResult, ResourceUpdatedNotificationParam,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer};
use serde_json::Value;
use std::collections::HashSet;
use std::sync::Arc;

/// The most resources one session may be subscribed to.
pub(super) const MAX_SUBSCRIPTIONS: usize = 1000;

/// An error of the engine as an MCP error: its message, with its `code` and teaching fields as
/// `data`. A resource that is not there is MCP's "resource not found" (-32002). An app's own
/// JSON-RPC error is passed on as it is.
pub(super) fn mcp_error(e: Error) -> ErrorData {
    if let Some(rpc) = e.rpc.clone()
        && let Ok(e) = serde_json::from_value::<ErrorData>(rpc)
    {
        return e;
    }
    let data = Some(e.to_json()["error"].clone());
    match e.status {
        404 => ErrorData::new(rmcp::model::ErrorCode(-32002), e.message.clone(), data),
        400 | 403 => ErrorData::invalid_params(e.message.clone(), data),
        _ => ErrorData::internal_error(e.message.clone(), data),
    }
}

/// An answer as the typed result rmcp writes, once it reads as one; the answer itself is
/// what goes out (`exact.rs`: rmcp's types would write its integers as floats, and drop the
/// fields they do not model).
fn typed<T: serde::de::DeserializeOwned>(
    v: Value,
    what: &str,
    rc: &RequestContext<RoleServer>,
) -> Result<T, ErrorData> {
    // An app of an earlier protocol version sends no `resultType`; a 2026-07-28 client needs
    // it (rmcp takes it off again for earlier clients).
    let v = exact::for_era(v, true);
    let t = T::deserialize(&v).map_err(|e| {
        ErrorData::internal_error(format!("the {what} answer is not valid MCP: {e}"), None)
    })?;
    if let Some(exact) = exact::Exact::of(rc) {
        exact.result(exact::for_era(v, rounds::era(rc)));
    }
    Ok(t)
}

impl Mcp {
    pub(super) async fn list_resources_for(
        &self,
        req: Option<PaginatedRequestParams>,
        rc: &RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let ctx = self.ctx(rc)?;
        let cursor = req.and_then(|r| r.cursor);
        let page = self
            .server
            .agg
            .resource_page(&ctx.caller, cursor.as_deref())
            .map_err(mcp_error)?;
        typed(page, "resources/list", rc)
    }

    pub(super) fn list_templates_for(
        &self,
        rc: &RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        let ctx = self.ctx(rc)?;
        typed(
            self.server.agg.resource_templates(&ctx.caller),
            "resources/templates/list",
            rc,
        )
    }

    pub(super) async fn read_resource_for(
        &self,
        req: ReadResourceRequestParams,
        rc: &RequestContext<RoleServer>,
    ) -> Result<ReadResourceResult, ErrorData> {
        let ctx = self.ctx(rc)?;
        let agent = self.agent_of(rc).await;
        let r = self
            .server
            .agg
            .read_resource(&ctx, agent.as_ref(), &req.uri)
            .await;
        typed(r.map_err(mcp_error)?, "resources/read", rc)
    }

    pub(super) fn list_prompts_for(
        &self,
        rc: &RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        let ctx = self.ctx(rc)?;
        typed(self.server.agg.prompts(&ctx.caller), "prompts/list", rc)
    }

    pub(super) async fn get_prompt_for(
        &self,
        req: GetPromptRequestParams,
        rc: &RequestContext<RoleServer>,
    ) -> Result<GetPromptResult, ErrorData> {
        let ctx = self.ctx(rc)?;
        let args = req.arguments.map(Value::Object).unwrap_or(Value::Null);
        let agent = self.agent_of(rc).await;
        let r = self
            .server
            .agg
            .get_prompt(&ctx, agent.as_ref(), &req.name, args)
            .await;
        typed(r.map_err(mcp_error)?, "prompts/get", rc)
    }

    pub(super) async fn complete_for(
        &self,
        req: CompleteRequestParams,
        rc: &RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        let ctx = self.ctx(rc)?;
        let params = serde_json::to_value(&req).map_err(|e| {
            ErrorData::invalid_params(format!("the completion cannot be read: {e}"), None)
        })?;
        let agent = self.agent_of(rc).await;
        let r = self.server.agg.complete(&ctx, agent.as_ref(), params).await;
        typed(r.map_err(mcp_error)?, "completion/complete", rc)
    }

    /// `resources/subscribe` (`on`) and `resources/unsubscribe`: noted on the session; an
    /// app's resource is subscribed to at the app too.
    pub(super) async fn subscribe_for(
        &self,
        uri: &str,
        on: bool,
        rc: &RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let ctx = self.ctx(rc)?;
        let Some(session) = self.session_of(rc).await else {
            return Err(ErrorData::invalid_request(
                "subscriptions need a session (initialize first)",
                None,
            ));
        };
        let vault_skill = match skills::SkillUri::parse(uri) {
            None => false,
            Some(skills::SkillUri::Index) => true,
            Some(skills::SkillUri::Skill(name)) => {
                let (engine, caller) = (self.server.engine.clone(), ctx.caller.clone());
                let found = tokio::task::spawn_blocking(move || {
                    crate::ops::reads_of(&caller, |r| engine.skills(&r, Some(&name)))
                })
                .await
                .ok()
                .and_then(|r| r.ok())
                .is_some_and(|s| !s.is_empty());
                // Not the vault's (or not the caller's to read): an app's URI, named under it.
                found
            }
        };
        if vault_skill {
            if on {
                auth::authorize(&ctx.caller, Access::Read, Target::None).map_err(mcp_error)?;
            }
        } else {
            match VaultUri::parse(uri) {
                Some(v) => {
                    let v = v.map_err(mcp_error)?;
                    if on {
                        let table = Target::Table(v.table());
                        auth::authorize(&ctx.caller, Access::Read, table).map_err(mcp_error)?;
                    }
                    self.server.engine.table(v.table()).map_err(mcp_error)?;
                }
                None => {
                    let agent = Some(session.clone() as Arc<dyn AgentChannel>);
                    self.server
                        .agg
                        .subscribe_app_resource(&ctx, agent.as_ref(), uri, on)
                        .await
                        .map_err(mcp_error)?
                }
            }
        }
        let mut subs = session.subs.lock().unwrap();
        if on {
            if subs.len() >= MAX_SUBSCRIPTIONS && !subs.contains(uri) {
                return Err(ErrorData::invalid_params(
                    format!(
                        "this session holds {MAX_SUBSCRIPTIONS} subscriptions, the most there may be: unsubscribe from some first"
                    ),
                    None,
                ));
            }
            subs.insert(uri.to_string());
        } else {
            subs.remove(uri);
        }
        Ok(())
    }
}

/// The lean path's `resources/read`, `resources/list`, `resources/templates/list` and
/// `prompts/list` (`msg`, the request): the aggregator's answer as it is (no `resultType`:
/// this path serves versions before 2026-07-28 only), or its error as MCP's. None: a request
/// this path does not read (rmcp serves it).
pub(super) async fn lean(
    server: &Shared,
    ctx: &crate::ops::Ctx,
    agent: Option<&Arc<dyn AgentChannel>>,
    msg: &Value,
) -> Option<Result<Value, ErrorData>> {
    let agg = &server.agg;
    let r = match msg.get("method")?.as_str()? {
        "resources/read" => {
            let uri = msg.pointer("/params/uri")?.as_str()?;
            agg.read_resource(ctx, agent, uri).await
        }
        "resources/list" => {
            let cursor = msg.pointer("/params/cursor").filter(|c| !c.is_null());
            let cursor = match cursor {
                Some(c) => Some(c.as_str()?),
                None => None,
            };
            agg.resource_page(&ctx.caller, cursor)
        }
        "resources/templates/list" => Ok(agg.resource_templates(&ctx.caller)),
        "prompts/list" => Ok(agg.prompts(&ctx.caller)),
        _ => return None,
    };
    Some(r.map_err(mcp_error).map(|mut r| {
        if let Some(o) = r.as_object_mut()
            && o.get("resultType").and_then(Value::as_str) == Some("complete")
        {
            o.remove("resultType");
        }
        r
    }))
}

impl Mcp {
    /// The agent's session behind a request, as apps see it.
    async fn agent_of(&self, rc: &RequestContext<RoleServer>) -> Option<Arc<dyn AgentChannel>> {
        self.session_of(rc)
            .await
            .map(|s| s as Arc<dyn AgentChannel>)
    }
}

impl Session {
    /// Sends the session `notifications/resources/updated` for `uri`, without waiting.
    fn tell_updated(&self, uri: String) {
        let peer = self.peer.clone();
        tokio::spawn(async move {
            let _ = peer
                .notify_resource_updated(ResourceUpdatedNotificationParam::new(uri))
                .await;
        });
    }

    fn subscribed(&self, uris: &[String]) -> Vec<String> {
        let subs = self.subs.lock().unwrap();
        uris.iter().filter(|u| subs.contains(*u)).cloned().collect()
    }
}

impl Sessions {
    /// Sends `notifications/resources/updated` for `uris` to every session subscribed to one.
    fn notify_updated(&self, uris: &[String]) {
        let all = self.open.read().unwrap();
        for s in all.values() {
            for uri in s.subscribed(uris) {
                s.tell_updated(uri);
            }
        }
    }

    /// Sends `notifications/resources/updated` for an app's resources that changed to every
    /// session subscribed to one it concerns.
    fn notify_app_update(&self, update: &ResourceUpdate) {
        let all = self.open.read().unwrap();
        for (id, s) in all.iter() {
            let told: Vec<String> = match update {
                // One resource: a look-up (a flood of updates costs one a session).
                ResourceUpdate::One { uri, .. } => s.subscribed(std::slice::from_ref(uri)),
                ResourceUpdate::App(_) => s.subs.lock().unwrap().iter().cloned().collect(),
            };
            for uri in told {
                if update.concerns(&uri, Some(id)) {
                    s.tell_updated(uri);
                }
            }
        }
    }

    /// Sends `notifications/resources/list_changed` and `notifications/prompts/list_changed`
    /// to every open session.
    fn notify_content_changed(&self) {
        let all = self.open.read().unwrap();
        for s in all.values() {
            let peer = s.peer.clone();
            tokio::spawn(async move {
                let _ = peer.notify_resource_list_changed().await;
                let _ = peer.notify_prompt_list_changed().await;
            });
        }
    }

    /// Sends `notifications/resources/updated` for every subscribed resource of an app whose
    /// resources follow the vault (the vault changed).
    fn notify_followers(&self, agg: &crate::apps::aggregator::Aggregator) {
        let all = self.open.read().unwrap();
        for s in all.values() {
            let subs: Vec<String> = s.subs.lock().unwrap().iter().cloned().collect();
            for uri in agg.follow_the_vault(&subs) {
                s.tell_updated(uri);
            }
        }
    }

    fn any_subscription(&self) -> bool {
        let all = self.open.read().unwrap();
        all.values().any(|s| !s.subs.lock().unwrap().is_empty())
    }
}

/// The row a change's JSON names (`"row"`), if any, and the `name` values of its state before
/// and after (a skill's name, in a skills table).
fn row_of(json: &str) -> (Option<String>, Vec<String>) {
    #[derive(serde::Deserialize)]
    struct Values {
        name: Option<Value>,
    }
    #[derive(serde::Deserialize)]
    struct State {
        values: Option<Values>,
    }
    #[derive(serde::Deserialize)]
    struct Row {
        row: Option<String>,
        before: Option<State>,
        after: Option<State>,
    }
    let Ok(r) = serde_json::from_str::<Row>(json) else {
        return (None, vec![]);
    };
    let names = [r.before, r.after]
        .into_iter()
        .flatten()
        .filter_map(|s| s.values?.name?.as_str().map(String::from))
        .collect();
    (r.row, names)
}

/// The vault's resources that changed after `since` (each change's table and row), and the
/// seq read up to; None: the feed could not be read.
pub(super) async fn vault_changes(server: &Shared, since: i64) -> Option<(Vec<String>, i64)> {
    let engine = server.engine.clone();
    let filter = crate::feed::Filter::default();
    let page =
        tokio::task::spawn_blocking(move || crate::feed::read(&engine, since, 10_000, &filter))
            .await
            .ok()?
            .ok()?;
    let mut uris = HashSet::new();
    for c in &page.changes {
        let Some(t) = &c.table else { continue };
        uris.insert(VaultUri::Table(t.clone()).to_uri());
        let (row, names) = row_of(&c.json);
        if let Some(id) = row {
            uris.insert(VaultUri::Row(t.clone(), id).to_uri());
        }
        // A skills table's change: its skills (as named before and after) and the index.
        if server.engine.table(t).is_ok_and(|t| t.def.skills)
            || c.op == crate::engine::Op::AlterTable
        {
            uris.insert(skills::INDEX.to_string());
            uris.insert(skills::INDEX_JSON.to_string());
            uris.extend(names.iter().map(|n| skills::SkillUri::of(n)));
        }
    }
    Some((uris.into_iter().collect(), page.next))
}

/// Follows what subscribed sessions and listings need, until the server closes: the apps'
/// resource updates, the vault's changes (through the feed, read only while a session holds a
/// subscription), and changes of the apps' resources and prompts.
pub(super) fn follow(server: Shared, sessions: Arc<Sessions>) {
    let mut updates = server.agg.resource_updates();
    let mut content = server.agg.subscribe_content();
    let mut seq = server.engine.seq.subscribe();
    let mut closing = server.closing.subscribe();
    let mut since = server.engine.last_seq();
    tokio::spawn(async move {
        loop {
            tokio::select! {
                u = updates.recv() => match u {
                    Ok(update) => sessions.notify_app_update(&update),
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                    Err(_) => return,
                },
                r = content.changed() => {
                    if r.is_err() { return }
                    content.borrow_and_update();
                    sessions.notify_content_changed();
                }
                r = seq.changed() => {
                    if r.is_err() { return }
                    let last = *seq.borrow_and_update();
                    if !sessions.any_subscription() {
                        since = last;
                        continue;
                    }
                    let Some((uris, next)) = vault_changes(&server, since).await else {
                        since = last;
                        continue;
                    };
                    since = next;
                    sessions.notify_updated(&uris);
                    if !uris.is_empty() {
                        sessions.notify_followers(&server.agg);
                    }
                }
                _ = async { closing.wait_for(|v| *v).await.map(|_| ()) } => return,
            }
        }
    });
}
