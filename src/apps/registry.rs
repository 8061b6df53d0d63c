//! The owner's app entries (`.datanotes/apps.json`, written atomically and privately): made,
//! changed, their tokens rotated, deleted, and a component swapped on an upgrade.

use super::*;

/// The registry. Registration order is kept: it orders the apps' tools for agents.
pub struct Registry {
    path: PathBuf,
    apps: RwLock<Vec<AppRecord>>,
}

impl Registry {
    /// Opens `.datanotes/apps.json` (no file: no apps yet).
    pub fn open(meta_dir: &std::path::Path) -> anyhow::Result<Arc<Registry>> {
        let path = meta_dir.join("apps.json");
        let apps: Vec<AppRecord> = match std::fs::read(&path) {
            Ok(b) => serde_json::from_slice(&b)?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => vec![],
            Err(e) => return Err(e.into()),
        };
        Ok(Arc::new(Registry {
            path,
            apps: RwLock::new(apps),
        }))
    }

    pub(super) fn save(&self, apps: &[AppRecord]) -> Result<()> {
        let bytes = serde_json::to_vec_pretty(apps).map_err(|e| Error::internal(e.to_string()))?;
        auth::write_private(&self.path, &bytes)?;
        Ok(())
    }

    /// Changes the registry under its lock; the file is written before the change is visible.
    pub(super) fn modify<T>(&self, f: impl FnOnce(&mut Vec<AppRecord>) -> Result<T>) -> Result<T> {
        let mut apps = self.apps.write().unwrap();
        let mut next = apps.clone();
        let out = f(&mut next)?;
        self.save(&next)?;
        *apps = next;
        Ok(out)
    }

    /// Every app, in registration order.
    pub fn list(&self) -> Vec<AppRecord> {
        self.apps.read().unwrap().clone()
    }

    /// One app by name.
    pub fn get(&self, name: &str) -> Option<AppRecord> {
        self.apps
            .read()
            .unwrap()
            .iter()
            .find(|a| a.name == name)
            .cloned()
    }

    /// The app holding this token, checked by hash in constant time against every app.
    pub fn identify(&self, token: &str) -> Option<Caller> {
        if !token.starts_with(auth::APP_PREFIX) {
            return None;
        }
        let apps = self.apps.read().unwrap();
        let mut found = None;
        for a in apps.iter() {
            if auth::matches(token, &a.token_sha256) {
                found = Some(a.scope());
            }
        }
        found.map(|s| Caller::App(Arc::new(s)))
    }

    /// Registers an app; answers its record and its token, shown once.
    pub fn create(
        &self,
        f: AppFields,
        wasm: Option<wasm::WasmInfo>,
    ) -> Result<(AppRecord, String)> {
        check(&f)?;
        let name = f.name.clone().ok_or_else(|| {
            Error::invalid("an app needs a name")
                .column("name")
                .rule("required")
                .hint("add \"name\": \"planning\"")
        })?;
        let mut wasm = wasm;
        if let Some(h) = &f.allow_hosts {
            let hosts = net::allow_hosts(h)?;
            wasm.as_mut().ok_or_else(not_wasm)?.allow_hosts = hosts;
        }
        let token = auth::new_token(auth::APP_PREFIX);
        let rec = AppRecord {
            name: name.clone(),
            rights: f.rights_over(&Rights::default()),
            mcp_url: f.mcp_url.flatten(),
            mcp_token: f.mcp_token.flatten(),
            description: f.description.unwrap_or_default(),
            instructions: f.instructions.unwrap_or_default(),
            created: crate::engine::journal::now(),
            token_sha256: auth::token_hash(&token),
            wasm,
            call_tools: f.call_tools.unwrap_or_else(every_tool),
            self_url: f.self_url.unwrap_or(true),
            self_url_private: f.self_url_private.unwrap_or(false),
            url_change: None,
            tool_listing: f.tool_listing.unwrap_or_default(),
            pinned_tools: f.pinned_tools.unwrap_or_default(),
            tool_prefix: f.tool_prefix.flatten(),
        };
        self.modify(|apps| {
            if apps.iter().any(|a| a.name == name) {
                return Err(Error::conflict(format!("app {name} already exists"))
                    .column("name")
                    .rule("unique")
                    .hint("pick another name, or change it with datanotes apps update (over HTTP: apps/update)"));
            }
            apps.push(rec.clone());
            Ok(())
        })?;
        Ok((rec, token))
    }

    /// Updates an entry. `by_owner` false: the app itself, which may change only its own
    /// `mcp_url` (unless the owner pinned it, `self_url: false`; its address was checked by
    /// [`self_url::check`]), `mcp_token`, `description` and `instructions`. A change of
    /// `mcp_url` is logged and kept on the entry (`urlChangedAt`, `previousUrl`).
    pub fn update(
        &self,
        name: &str,
        f: AppFields,
        by_owner: bool,
        wasm: Option<wasm::WasmInfo>,
    ) -> Result<AppRecord> {
        check(&f)?;
        if let Some(n) = &f.name
            && n != name
        {
            return Err(Error::invalid("an app cannot be renamed")
                .column("name")
                .rule("immutable")
                .hint("delete it and create a new one"));
        }
        if !by_owner && let Some(field) = f.touches_rights() {
            return Err(Error::forbidden(format!("app {name} may not change its own {field}"))
                .column(field)
                .rule("owner")
                .hint("an app may change only its mcp_url, mcp_token, description and instructions; the owner changes rights"));
        }
        let hosts = f.allow_hosts.as_ref().map(net::allow_hosts).transpose()?;
        self.modify(|apps| {
            let a = apps
                .iter_mut()
                .find(|a| a.name == name)
                .ok_or_else(|| no_app(name))?;
            a.rights = f.rights_over(&a.rights);
            if let Some(v) = f.mcp_url
                && v != a.mcp_url
            {
                if !by_owner && !a.self_url {
                    return Err(Error::forbidden(format!(
                        "app {name} may not change its own mcp_url: the owner pinned it"
                    ))
                    .column("mcp_url")
                    .rule("self_url")
                    .hint("ask the owner to change it, or to allow it (apps/update {\"self_url\": true})"));
                }
                let by = if by_owner {
                    "owner".to_string()
                } else {
                    format!("app:{name}")
                };
                tracing::info!(
                    app = %name,
                    "app {name}'s mcp_url changed from {} to {} by {by}",
                    a.mcp_url.as_deref().unwrap_or("none"),
                    v.as_deref().unwrap_or("none")
                );
                a.url_change = Some(UrlChange {
                    at: crate::engine::journal::now(),
                    previous: a.mcp_url.take(),
                    by,
                });
                a.mcp_url = v;
            }
            if let Some(v) = f.call_tools {
                a.call_tools = v;
            }
            if let Some(v) = f.self_url {
                a.self_url = v;
            }
            if let Some(v) = f.self_url_private {
                a.self_url_private = v;
            }
            if let Some(v) = f.tool_listing {
                a.tool_listing = v;
            }
            if let Some(v) = f.pinned_tools {
                a.pinned_tools = v;
            }
            if let Some(v) = f.tool_prefix {
                a.tool_prefix = v;
            }
            if let Some(v) = f.mcp_token {
                a.mcp_token = v;
            }
            if let Some(v) = f.description {
                a.description = v;
            }
            if let Some(v) = f.instructions {
                a.instructions = v;
            }
            if let Some(mut w) = wasm {
                // A new component keeps the app's grants unless they change too.
                if let Some(old) = &a.wasm {
                    w.allow_hosts = old.allow_hosts.clone();
                }
                a.wasm = Some(w);
            }
            if let Some(h) = hosts {
                a.wasm.as_mut().ok_or_else(not_wasm)?.allow_hosts = h;
            }
            Ok(a.clone())
        })
    }

    /// Gives an app a new token (the old one stops working at once); answers it, shown once.
    pub fn rotate_token(&self, name: &str) -> Result<String> {
        let token = auth::new_token(auth::APP_PREFIX);
        self.modify(|apps| {
            let a = apps
                .iter_mut()
                .find(|a| a.name == name)
                .ok_or_else(|| no_app(name))?;
            a.token_sha256 = auth::token_hash(&token);
            Ok(())
        })?;
        Ok(token)
    }

    /// Deletes an app (its token stops working at once); answers what it was.
    pub fn delete(&self, name: &str) -> Result<AppRecord> {
        self.modify(|apps| {
            let i = apps
                .iter()
                .position(|a| a.name == name)
                .ok_or_else(|| no_app(name))?;
            Ok(apps.remove(i))
        })
    }

    /// Is this component still used by an app, as its version or the one kept for a rollback?
    pub fn uses_component(&self, sha: &str) -> bool {
        self.apps.read().unwrap().iter().any(|a| {
            a.wasm.as_ref().is_some_and(|w| {
                w.sha256 == sha || w.previous.as_ref().is_some_and(|p| p.sha256 == sha)
            })
        })
    }

    /// Puts another version of a WASM app's component in place (an upgrade or a rollback), with
    /// the rights `grant` gives, if its version is still `from` (sha256): two concurrent
    /// upgrades cannot both win.
    /// Answers the entry as it was and as it is.
    pub fn swap_component(
        &self,
        name: &str,
        from: &str,
        to: wasm::WasmInfo,
        grant: Option<Rights>,
    ) -> Result<(AppRecord, AppRecord)> {
        self.modify(|apps| {
            let a = apps
                .iter_mut()
                .find(|a| a.name == name)
                .ok_or_else(|| no_app(name))?;
            if a.wasm.as_ref().map(|w| w.sha256.as_str()) != Some(from) {
                return Err(
                    Error::conflict(format!("app {name}'s component changed meanwhile"))
                        .column("name")
                        .rule("concurrent")
                        .hint("look at the app's entry and try again"),
                );
            }
            let before = a.clone();
            a.wasm = Some(to);
            if let Some(g) = grant {
                a.rights = g;
            }
            Ok((before, a.clone()))
        })
    }
}

pub(super) fn not_wasm() -> Error {
    Error::invalid("allow_hosts apply to WASM apps")
        .column("allow_hosts")
        .rule("wasm")
        .hint("a remote app or an API client makes its own requests: drop allow_hosts, or give a component (wasm_path or wasm_base64)")
}

/// The 404 for an app that is not registered.
pub fn no_app(name: &str) -> Error {
    Error::not_found(format!("no app {name}"))
        .column("name")
        .hint("datanotes apps status lists the apps (over HTTP: POST /datanotes/apps/)")
}
