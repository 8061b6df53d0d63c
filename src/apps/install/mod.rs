//! The owner's app lifecycle, below the doors: `apps/create` (a component from a file or
//! base64, a remote app's address, or a source by reference: [`by_reference`]), `apps/update`,
//! `apps/upgrade`, `apps/rollback` and `apps/delete`. Each step checks every field before it
//! stores or compiles anything (a refusal changes nothing), writes the registry, lets the
//! aggregator take the new backend over (calls in flight finish on the old one), and removes
//! the component files no app uses any more.
//!
//! The HTTP door's routes (`http/routes.rs`) read the body, authorize and answer what these
//! functions return; nothing here knows about HTTP.

mod by_reference;

use super::aggregator::Aggregator;
use super::source::SourceOptions;
use super::wasm::WasmInfo;
use super::{AppFields, AppRecord, Registry};
use crate::engine::{Actor, Engine};
use crate::error::Error;
use serde_json::{Value, json};
use std::sync::Arc;

/// What the lifecycle works on: the registry, the aggregator that serves it, the engine (its
/// settings, its journal) and the owner's options for sources.
pub struct Installer<'a> {
    /// The engine: its settings (trusted keys), its journal (`app` events).
    pub engine: &'a Arc<Engine>,
    /// The apps registry.
    pub apps: &'a Arc<Registry>,
    /// The aggregator, whose backends follow the registry.
    pub agg: &'a Arc<Aggregator>,
    /// Registry credentials and redirects for sources.
    pub sources: &'a SourceOptions,
}

impl Installer<'_> {
    /// `apps/create`: a new app (by reference: a plan first, see [`by_reference`]), listed
    /// before the answer (bounded by the app timeouts), with its token.
    pub async fn create(&self, actor: Actor, f: AppFields) -> Result<Value, Error> {
        if f.source.is_some() {
            return by_reference::create(self, actor, f).await;
        }
        let wasm = self.component(&f).await?;
        let (rec, token) = self.apps.create(f, wasm)?;
        // Also when a concurrent create's sync already made its slot.
        self.agg.sync();
        let _ = self.agg.refresh(&rec.name).await;
        Ok(json!({"app": self.agg.entry(&rec), "token": token}))
    }

    /// `apps/update` of app `name`, by the owner (`by_owner`: a new component or limits too)
    /// or by the app itself (an address it gives for itself is checked: never a private one
    /// unless allowed).
    pub async fn update(&self, name: &str, f: AppFields, by_owner: bool) -> Result<Value, Error> {
        if f.source.is_some() || f.confirm.is_some() || f.digest.is_some() {
            return Err(Error::invalid("apps/update does not pull a source")
                .column("source")
                .hint("use apps/upgrade {\"name\", \"source\"} for a new version by reference"));
        }
        let wasm = if by_owner {
            self.component(&f).await?
        } else {
            None
        };
        let old = self.apps.get(name);
        super::check(&f)?;
        if !by_owner
            && let (Some(Some(url)), Some(o)) = (&f.mcp_url, &old)
            && o.self_url
            && o.mcp_url.as_ref() != Some(url)
        {
            super::self_url::check(o, url).await?;
        }
        let rec = self.apps.update(name, f, by_owner, wasm)?;
        self.forget_component(old.as_ref());
        // The new backend takes over; calls in flight finish on the old one.
        if self.agg.sync().contains(&rec.name) {
            let _ = self.agg.refresh(&rec.name).await;
        }
        Ok(json!({"app": self.agg.entry(&rec)}))
    }

    /// `apps/upgrade`: see [`by_reference`].
    pub async fn upgrade(&self, actor: Actor, v: Value) -> Result<Value, Error> {
        by_reference::upgrade(self, actor, v).await
    }

    /// `apps/rollback`: see [`by_reference`].
    pub async fn rollback(&self, actor: Actor, v: Value) -> Result<Value, Error> {
        by_reference::rollback(self, actor, v).await
    }

    /// `apps/delete`: the entry goes, and its component files when no app uses them; the
    /// backends follow (their refresh is not waited for).
    pub fn delete(&self, name: &str) -> Result<Value, Error> {
        let rec = self.apps.delete(name)?;
        self.forget_component(Some(&rec));
        for name in self.agg.sync() {
            let agg = self.agg.clone();
            tokio::spawn(async move {
                let _ = agg.refresh(&name).await;
            });
        }
        Ok(json!({"deleted": rec.name}))
    }

    /// Installs the component a create or update names (compiling it: seconds for Python or
    /// JS), or applies new limits to the one installed; None: no component is concerned.
    async fn component(&self, f: &AppFields) -> Result<Option<WasmInfo>, Error> {
        use super::wasm::component_bytes;
        // Every field is checked before a component is stored or compiled.
        super::check(f)?;
        if f.wasm_path.is_none() && f.wasm_base64.is_none() {
            let Some(change) = &f.limits else {
                return Ok(None);
            };
            // New limits for an installed component: the same component, without sending it
            // again.
            let installed = f
                .name
                .as_deref()
                .and_then(|n| self.apps.get(n))
                .and_then(|p| p.wasm);
            let Some(mut w) = installed else {
                return Err(Error::invalid("limits apply to WASM apps")
                    .column("limits")
                    .hint("give wasm_path or wasm_base64 too"));
            };
            w.limits = w.limits.merged(change)?;
            return Ok(Some(w));
        }
        if f.mcp_url.as_ref().is_some_and(Option::is_some) {
            return Err(Error::invalid(
                "an app is either remote (mcp_url) or WASM (a component), not both",
            )
            .column("mcp_url")
            .hint("drop mcp_url, or the component"));
        }
        let name = f.name.clone().unwrap_or_default();
        let prev = self.apps.get(&name);
        let base = prev
            .as_ref()
            .and_then(|p| p.wasm.as_ref())
            .map(|w| w.limits.clone())
            .unwrap_or_default();
        let limits = match &f.limits {
            Some(l) => base.merged(l)?,
            None => base,
        };
        let bytes = component_bytes(f.wasm_path.as_deref(), f.wasm_base64.as_deref())?;
        let mut scope = prev.map(|p| p.scope()).unwrap_or_default();
        scope.name = name;
        scope.rights = f.rights_over(&scope.rights);
        let (info, _) = self.agg.wasm.install(bytes, scope, limits).await?;
        Ok(Some(info))
    }

    /// Removes a replaced or deleted app's component files (its version and the one kept for
    /// a rollback) when no app uses them any more.
    fn forget_component(&self, old: Option<&AppRecord>) {
        let Some(w) = old.and_then(|o| o.wasm.as_ref()) else {
            return;
        };
        let kept = w.previous.as_ref().map(|p| p.sha256.as_str());
        for sha in std::iter::once(w.sha256.as_str()).chain(kept) {
            self.forget_file(sha);
        }
    }

    /// Removes the component file `sha` unless an app uses it.
    fn forget_file(&self, sha: &str) {
        if !self.apps.uses_component(sha) {
            let _ = std::fs::remove_file(self.agg.wasm.apps_dir.join(format!("{sha}.wasm")));
        }
    }
}
