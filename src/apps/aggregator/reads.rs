//! The namespace's resources, resource templates, prompts and completions served to a caller:
//! the engine's own first (the vault, `engine/resources.rs`), then the apps' (named by
//! `resources.rs`), each app's only to a caller that may use it (`Access::AppContent`, through
//! `auth::authorize`), each request to an app through its `AppBackend` like a tool call. And
//! what apps say outside calls: list changes (a refresh) and resource updates (passed on to
//! the subscribed agents).

use super::resources::{self, inner};
use super::{Aggregator, Namespace};
use crate::apps::backend::{AgentChannel, AppBackend, AppEvent, AppRequest, CallContext};
use crate::auth::{self, Access, Caller, Target};
use crate::engine::resources::{self as vault, VaultCursor, VaultUri};
use crate::engine::skills;
use crate::error::{Error, Result};
use crate::ops::{Ctx, reads_of};
use serde_json::{Value, json};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// The agent a request is made for (its MCP session), if any: the app answers on its session
/// for that agent.
pub type Agent<'a> = Option<&'a Arc<dyn AgentChannel>>;

/// The most app resources on one page of `resources/list` (an app lists at most the listing
/// caps' items, so a page of them stays small; the vault's pages are of 100).
const APP_PAGE: usize = 1000;
/// The cursor prefix of the apps' pages.
const APPS_CURSOR: &str = "apps:";

impl Aggregator {
    /// Where the app `app`'s events go: tagged and queued for [`Self::follow_events`]; a full
    /// queue drops them (a flood costs nothing but the flood).
    pub(super) fn events_of(&self, app: &str) -> Arc<dyn Fn(AppEvent) + Send + Sync> {
        let (tx, app) = (self.events.clone(), app.to_string());
        Arc::new(move |e| {
            let _ = tx.try_send((app.clone(), e));
        })
    }

    /// Handles the apps' events: a list change refreshes the app (once for a burst); a resource
    /// update goes to the agents subscribed to it, under its served URI.
    pub(super) fn follow_events(self: &Arc<Self>) {
        let Some(mut rx) = self.events_rx.lock().unwrap().take() else {
            return;
        };
        let me = Arc::downgrade(self);
        tokio::spawn(async move {
            while let Some((app, e)) = rx.recv().await {
                let Some(agg) = me.upgrade() else { return };
                match e {
                    AppEvent::ListChanged => {
                        let _ = agg.refresh(&app).await;
                        // The agents are told even when the listing looks the same (the app
                        // may list per session).
                        agg.content_changed.send_modify(|v| *v += 1);
                    }
                    AppEvent::ResourceUpdated(agent, uri) => {
                        if let Ok(served) = resources::outer(&app, &uri) {
                            let one = resources::ResourceUpdate::One { agent, uri: served };
                            let _ = agg.updated.send(one);
                        }
                    }
                }
            }
        });
    }

    /// An agent's roots changed: every app that keeps a session for it is told.
    pub async fn roots_changed(&self, agent: &str) {
        let backends: Vec<Arc<dyn AppBackend>> = {
            let slots = self.slots.read().unwrap();
            slots.iter().map(|s| s.backend.clone()).collect()
        };
        for b in backends {
            b.roots_changed(agent).await;
        }
    }

    /// An agent set its log level: every app that keeps a session for it is set to it.
    pub async fn set_log_level(&self, agent: &str, level: &'static str) {
        let backends: Vec<Arc<dyn AppBackend>> = {
            let slots = self.slots.read().unwrap();
            slots.iter().map(|s| s.backend.clone()).collect()
        };
        for b in backends {
            b.set_log_level(agent, level).await;
        }
    }

    /// Changes whenever the apps' resources, templates or prompts change.
    pub fn subscribe_content(&self) -> tokio::sync::watch::Receiver<u64> {
        self.content_changed.subscribe()
    }

    /// The served URIs of apps' resources that changed (for subscribed agents), each with the
    /// agent session it is for (`None`: any subscribed).
    pub fn resource_updates(&self) -> tokio::sync::broadcast::Receiver<resources::ResourceUpdate> {
        self.updated.subscribe()
    }

    /// The entry's view of an app's resources and prompts.
    pub(super) fn content_entry(&self, app: &str, ns: &Namespace, e: &mut Value) {
        let c = &ns.content;
        let of = |v: &[(String, Value)]| v.iter().filter(|(a, _)| a == app).count();
        e["resources"] = json!(of(&c.resources) + of(&c.templates));
        e["prompts"] = json!(
            c.prompts
                .iter()
                .filter(|(a, _)| a == app)
                .map(|(_, p)| p["name"].clone())
                .collect::<Vec<_>>()
        );
        e["skippedResources"] = json!(c.skipped_resources.get(app).cloned().unwrap_or_default());
        e["skippedPrompts"] = json!(c.skipped_prompts.get(app).cloned().unwrap_or_default());
    }

    /// The apps whose resources and prompts `caller` may use, each decided once (a listing
    /// asks for every item).
    fn usable<'n>(&self, caller: &Caller, ns: &'n Namespace) -> HashSet<&'n str> {
        let mut tools: HashMap<&str, Vec<&str>> = HashMap::new();
        for (app, t) in &ns.tools {
            tools.entry(app.as_str()).or_default().push(t.name.as_ref());
        }
        let apps = ns.content.resources.iter().chain(&ns.content.templates);
        let apps = apps.chain(&ns.content.prompts).map(|(a, _)| a.as_str());
        let mut out = HashSet::new();
        for app in apps {
            if out.contains(app) {
                continue;
            }
            let t = tools.get(app).map_or(&[][..], |v| &v[..]);
            let target = Target::AppContent { app, tools: t };
            if auth::authorize(caller, Access::AppContent, target).is_ok() {
                out.insert(app);
            }
        }
        out
    }

    /// Whether `caller` may use what `app` offers besides its tools.
    pub(super) fn may_use(&self, caller: &Caller, ns: &Namespace, app: &str) -> Result<()> {
        let tools: Vec<&str> = ns
            .tools
            .iter()
            .filter(|(a, _)| a == app)
            .map(|(_, t)| t.name.as_ref())
            .collect();
        auth::authorize(
            caller,
            Access::AppContent,
            Target::AppContent { app, tools: &tools },
        )
    }

    /// One page of `resources/list`: the vault's resources first, page by page, then those of
    /// the apps the caller may use. `cursor`: the previous page's `nextCursor`.
    pub fn resource_page(&self, caller: &Caller, cursor: Option<&str>) -> Result<Value> {
        let bad = || {
            Error::invalid("the cursor is not one this server gave")
                .column("cursor")
                .hint("start again without a cursor")
        };
        let apps_from = match cursor {
            Some(c) if c.starts_with(APPS_CURSOR) => {
                Some(c[APPS_CURSOR.len()..].parse::<usize>().map_err(|_| bad())?)
            }
            _ => None,
        };
        let mut out = vec![];
        let from = match apps_from {
            Some(from) => from,
            None => {
                let at = match cursor {
                    None => VaultCursor::Start,
                    Some(c) => VaultCursor::parse(c).ok_or_else(bad)?,
                };
                auth::authorize(caller, Access::Read, Target::None)?;
                let (mut page, next) =
                    reads_of(caller, |r| self.engine.resource_page(&at, vault::PAGE, r))?;
                // The vault's skills lead its first page: the index, then each skill.
                if at == VaultCursor::Start {
                    let skills = reads_of(caller, |r| {
                        if !self.engine.has_skills(&r) {
                            return Ok(vec![]);
                        }
                        let mut out = vec![json!({"uri": skills::INDEX, "name": "skills",
                            "title": "The vault's skills",
                            "description": "Every skill of the vault: name, description and the URI of its SKILL.md.",
                            "mimeType": "application/json"})];
                        out.extend(self.engine.skills(&r, None)?.iter().map(|s| s.resource()));
                        Ok::<_, Error>(out)
                    })?;
                    page.splice(0..0, skills);
                }
                if let Some(next) = next {
                    return Ok(json!({"resources": page, "nextCursor": next.text()}));
                }
                // The vault is listed: the apps' resources follow on the same page.
                out = page;
                0
            }
        };
        let ns = self.ns.read().unwrap().clone();
        let usable = self.usable(caller, &ns);
        let mut i = from;
        while i < ns.content.resources.len() && out.len() < APP_PAGE {
            let (app, r) = &ns.content.resources[i];
            if usable.contains(app.as_str()) {
                out.push(r.clone());
            }
            i += 1;
        }
        let mut page = json!({"resources": out});
        if i < ns.content.resources.len() {
            page["nextCursor"] = json!(format!("{APPS_CURSOR}{i}"));
        }
        Ok(page)
    }

    /// `resources/templates/list`: the vault's (to a caller that may read some table), then
    /// those of the apps the caller may use.
    pub fn resource_templates(&self, caller: &Caller) -> Value {
        let ns = self.ns.read().unwrap().clone();
        let usable = self.usable(caller, &ns);
        let mut out = match auth::reads_some_table(caller) {
            true => vault::templates(),
            false => vec![],
        };
        out.extend(
            ns.content
                .templates
                .iter()
                .filter(|(app, _)| usable.contains(app.as_str()))
                .map(|(_, t)| t.clone()),
        );
        json!({"resourceTemplates": out})
    }

    /// `prompts/list`: those of the apps the caller may use.
    pub fn prompts(&self, caller: &Caller) -> Value {
        let ns = self.ns.read().unwrap().clone();
        let usable = self.usable(caller, &ns);
        let out: Vec<Value> = ns
            .content
            .prompts
            .iter()
            .filter(|(app, _)| usable.contains(app.as_str()))
            .map(|(_, p)| p.clone())
            .collect();
        json!({"prompts": out})
    }

    /// The backend of the app a served URI names, and the URI as the app knows it; the caller
    /// must be allowed to use it.
    fn app_of_uri(
        &self,
        caller: &Caller,
        uri: &str,
    ) -> Result<(String, Arc<dyn AppBackend>, String)> {
        let unknown = || {
            Error::not_found(format!("no resource {}", crate::feed::cut(uri, 200)))
                .column("uri")
                .hint("resources/list and resources/templates/list show what there is")
        };
        let (app, own) = inner(uri).ok_or_else(unknown)?;
        let ns = self.ns.read().unwrap().clone();
        self.may_use(caller, &ns, app)?;
        let backend = self.backend_of(app).ok_or_else(unknown)?;
        Ok((app.to_string(), backend, own))
    }

    pub(super) fn backend_of(&self, app: &str) -> Option<Arc<dyn AppBackend>> {
        let slots = self.slots.read().unwrap();
        slots
            .iter()
            .find(|s| s.name == app)
            .map(|s| s.backend.clone())
    }

    /// Asks an app, for a caller: its answer, or that it is not reachable. (A request that
    /// can be cancelled goes through [`Self::ask_in`] with its token in the context.)
    pub(super) async fn ask(
        &self,
        app: &str,
        backend: &dyn AppBackend,
        req: AppRequest,
        params: Value,
        ctx: &Ctx,
        agent: Agent<'_>,
    ) -> Result<Value> {
        let cc = super::call::context_of(ctx, None, agent.cloned(), Default::default());
        self.ask_in(app, backend, req, params, &cc).await
    }

    /// [`Self::ask`] in a request context of the caller's making.
    pub(super) async fn ask_in(
        &self,
        app: &str,
        backend: &dyn AppBackend,
        req: AppRequest,
        params: Value,
        cc: &CallContext,
    ) -> Result<Value> {
        let r = backend
            .request(req, params, cc)
            .await
            .map_err(|e| Error::new(502, "app_unreachable", format!("app {app}: {}", e.0)))?;
        // The app answered with a JSON-RPC error: passed on as it is.
        if let Some(e) = crate::apps::backend::rpc_error_in(&r)
            .filter(|_| r.as_object().is_some_and(|o| o.len() == 1))
        {
            let message = e["message"]
                .as_str()
                .unwrap_or("the app refused")
                .to_string();
            return Err(Error::new(400, "app_error", message).rpc(e.clone()));
        }
        Ok(r)
    }

    /// `resources/read`: a file of the vault, or an app's resource (its URIs named for the
    /// caller).
    pub async fn read_resource(&self, ctx: &Ctx, agent: Agent<'_>, uri: &str) -> Result<Value> {
        // A skill of the vault (`skill://<name>/SKILL.md`, the index); an app's skills are
        // namespaced under the app (`skill://<app>/...`), and a URI of that form that no vault
        // skill answers is tried as the app's.
        if let Some(s) = skills::SkillUri::parse(uri) {
            let (engine, caller) = (self.engine.clone(), ctx.caller.clone());
            let r = tokio::task::spawn_blocking(move || {
                reads_of(&caller, |r| engine.read_skill(&s, &r))
            })
            .await
            .unwrap_or_else(|_| Err(Error::internal("the read panicked")));
            if !r.as_ref().is_err_and(|e| e.status == 404) {
                return r;
            }
        }
        if let Some(v) = VaultUri::parse(uri) {
            let v = v?;
            auth::authorize(&ctx.caller, Access::Read, Target::Table(v.table()))?;
            let engine = self.engine.clone();
            return tokio::task::spawn_blocking(move || engine.read_resource(&v))
                .await
                .unwrap_or_else(|_| Err(Error::internal("the read panicked")));
        }
        let (app, backend, own) = self.app_of_uri(&ctx.caller, uri)?;
        let (req, params) = (AppRequest::ReadResource, json!({"uri": own}));
        let mut r = self.ask(&app, &*backend, req, params, ctx, agent).await?;
        resources::name_uris(&app, &mut r);
        Ok(r)
    }

    /// `prompts/get`: an app's prompt, by its served name.
    pub async fn get_prompt(
        &self,
        ctx: &Ctx,
        agent: Agent<'_>,
        name: &str,
        arguments: Value,
    ) -> Result<Value> {
        let (app, own) = {
            let ns = self.ns.read().unwrap().clone();
            let Some(&i) = ns.content.prompt_by_name.get(name) else {
                return Err(Error::not_found(format!(
                    "no prompt {:?}",
                    crate::feed::cut(name, 80)
                ))
                .column("name")
                .hint("prompts/list shows the prompts"));
            };
            let app = ns.content.prompts[i].0.clone();
            self.may_use(&ctx.caller, &ns, &app)?;
            (app, ns.content.prompt_own[i].clone())
        };
        let backend = self
            .backend_of(&app)
            .ok_or_else(|| Error::not_found(format!("app {app} is gone")))?;
        // Asked by the name the app gave it (listed with its app's prefix).
        let mut params = json!({"name": own});
        if !arguments.is_null() {
            params["arguments"] = arguments;
        }
        let mut r = self
            .ask(&app, &*backend, AppRequest::GetPrompt, params, ctx, agent)
            .await?;
        resources::name_uris(&app, &mut r);
        Ok(r)
    }

    /// `completion/complete`: of the vault's templates (table names, row ids), or passed to the
    /// app whose prompt or resource template it names.
    pub async fn complete(&self, ctx: &Ctx, agent: Agent<'_>, mut params: Value) -> Result<Value> {
        let kind = params.pointer("/ref/type").and_then(Value::as_str);
        let arg = params.pointer("/argument/name").and_then(Value::as_str);
        let value = params
            .pointer("/argument/value")
            .and_then(Value::as_str)
            .unwrap_or("");
        let answer = |values: Vec<String>, more: bool| json!({"completion": {"values": values, "total": null, "hasMore": more}});
        let app = match kind {
            Some("ref/resource") => {
                let uri = params.pointer("/ref/uri").and_then(Value::as_str);
                let uri = uri.unwrap_or("").to_string();
                if uri == vault::ROW_TEMPLATE || uri == vault::TABLE_TEMPLATE {
                    auth::authorize(&ctx.caller, Access::Read, Target::None)?;
                    return match arg {
                        Some("table") => {
                            let (v, more) =
                                reads_of(&ctx.caller, |r| self.engine.complete_tables(value, r));
                            Ok(answer(v, more))
                        }
                        Some("id") => {
                            let table = params.pointer("/context/arguments/table");
                            let table = table.and_then(Value::as_str).unwrap_or("");
                            // The ids of a table the caller may not read: none, as of an
                            // unknown table.
                            if auth::authorize(&ctx.caller, Access::Read, Target::Table(table))
                                .is_err()
                            {
                                return Ok(answer(vec![], false));
                            }
                            let (v, more) = self.engine.complete_ids(table, value)?;
                            Ok(answer(v, more))
                        }
                        _ => Ok(answer(vec![], false)),
                    };
                }
                let (app, _, own) = self.app_of_uri(&ctx.caller, &uri)?;
                params["ref"]["uri"] = json!(own);
                app
            }
            Some("ref/prompt") => {
                let name = params.pointer("/ref/name").and_then(Value::as_str);
                let ns = self.ns.read().unwrap().clone();
                let Some(&i) = name.and_then(|n| ns.content.prompt_by_name.get(n)) else {
                    return Ok(answer(vec![], false));
                };
                let app = ns.content.prompts[i].0.clone();
                self.may_use(&ctx.caller, &ns, &app)?;
                params["ref"]["name"] = json!(ns.content.prompt_own[i]);
                app
            }
            _ => {
                return Err(
                    Error::invalid("ref.type must be ref/prompt or ref/resource").column("ref"),
                );
            }
        };
        let backend = self
            .backend_of(&app)
            .ok_or_else(|| Error::not_found(format!("app {app} is gone")))?;
        self.ask(&app, &*backend, AppRequest::Complete, params, ctx, agent)
            .await
    }

    /// Of the served URIs `uris`, those of apps whose resources follow the vault
    /// ([`AppBackend::resources_follow_the_vault`]): a change of the vault may change them.
    pub fn follow_the_vault<'a>(&self, uris: impl IntoIterator<Item = &'a String>) -> Vec<String> {
        uris.into_iter()
            .filter(|u| {
                inner(u)
                    .and_then(|(app, _)| self.backend_of(app))
                    .is_some_and(|b| b.resources_follow_the_vault())
            })
            .cloned()
            .collect()
    }

    /// `resources/subscribe` (`on`) or `resources/unsubscribe` of an app's resource: passed to
    /// the app. (The vault's resources need nothing from an app: the door follows the feed.)
    pub async fn subscribe_app_resource(
        &self,
        ctx: &Ctx,
        agent: Agent<'_>,
        uri: &str,
        on: bool,
    ) -> Result<()> {
        let (app, backend, own) = self.app_of_uri(&ctx.caller, uri)?;
        let req = if on {
            AppRequest::Subscribe
        } else {
            AppRequest::Unsubscribe
        };
        let ask = self.ask(&app, &*backend, req, json!({"uri": own}), ctx, agent);
        match agent {
            Some(_) => ask.await.map(|_| ()),
            // On the app's shared session, which other callers' subscriptions share.
            None => self.shared_subscriptions.change(&app, &own, on, ask).await,
        }
    }
}
