//! The apps registry: who the apps are, their tokens' hashes and their rights.
//!
//! One entry format for every kind of app (a plain API client, a remote MCP server, a WASM
//! component). Stored in `.datanotes/apps.json` (atomic, 0600). App tokens are kept as SHA-256
//! only; `mcp_token` is kept because the engine must send it to the app, and is never returned.

pub mod aggregator;
pub(crate) mod backend;
pub(crate) mod limits;
pub(crate) mod plain;
pub(crate) mod remote;
pub(crate) mod self_url;
pub mod source;
pub mod wasm;

use crate::auth::{self, AppScope, Caller};
use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use wasm::net;

/// An app as stored.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AppRecord {
    /// The app's name: its tools' prefix and its token's name.
    pub name: String,
    #[serde(default)]
    /// The tables it may write (names or patterns).
    pub write: Vec<String>,
    #[serde(default)]
    /// Whether it may create, alter and drop tables.
    pub ddl: bool,
    #[serde(default)]
    /// Whether it may run maintenance.
    pub maintain: bool,
    #[serde(default)]
    /// A remote app's MCP address.
    pub mcp_url: Option<String>,
    #[serde(default)]
    /// The token the engine sends to a remote app (never answered).
    pub mcp_token: Option<String>,
    #[serde(default)]
    /// What the app does, for agents.
    pub description: String,
    #[serde(default)]
    /// Instructions for agents using its tools.
    pub instructions: String,
    /// When it was registered (RFC 3339).
    pub created: String,
    /// Its token's SHA-256 (the token itself is never stored).
    pub token_sha256: String,
    /// Set for a WASM app: its installed component, limits and allow_hosts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wasm: Option<wasm::WasmInfo>,
    /// The tools its token may list and call as tools (engine operations and apps' tools):
    /// names or glob patterns, `["*"]` (every tool) unless the owner says otherwise.
    #[serde(default = "every_tool")]
    pub call_tools: Vec<String>,
    /// Whether the app may change its own `mcp_url` (true unless the owner pinned it).
    #[serde(default = "yes")]
    pub self_url: bool,
    /// Whether an `mcp_url` the app sets for itself may be any loopback, private or link-local
    /// address (the owner's grant; false by default: only a public one, or one within the
    /// place its `mcp_url` is now, another port of its IP address or, on loopback, any
    /// loopback address of this machine; see `self_url.rs`).
    #[serde(default)]
    pub self_url_private: bool,
    /// The last change of `mcp_url`: when, what it was, who changed it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url_change: Option<UrlChange>,
}

/// The rights on tables an upgrade grants with its new version.
#[derive(Debug, Clone)]
pub struct Grant {
    /// See [`AppRecord::write`].
    pub write: Vec<String>,
    /// See [`AppRecord::ddl`].
    pub ddl: bool,
    /// See [`AppRecord::maintain`].
    pub maintain: bool,
}

/// A change of an app's `mcp_url`, kept on its entry (and logged).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct UrlChange {
    /// When (RFC 3339).
    pub at: String,
    /// The address before the change (`None`: it had none).
    pub previous: Option<String>,
    /// Who changed it: `owner`, or `app:<name>` (the app itself).
    pub by: String,
}

fn every_tool() -> Vec<String> {
    vec!["*".into()]
}

fn yes() -> bool {
    true
}

impl AppRecord {
    /// `wasm`, `remote`, or `client` (an app that only calls the engine).
    pub fn kind(&self) -> &'static str {
        if self.wasm.is_some() {
            "wasm"
        } else if self.mcp_url.is_some() {
            "remote"
        } else {
            "client"
        }
    }
    /// Its token's rights, for `auth::authorize`.
    pub fn scope(&self) -> AppScope {
        AppScope {
            name: self.name.clone(),
            write: self.write.clone(),
            ddl: self.ddl,
            maintain: self.maintain,
            call_tools: self.call_tools.clone(),
            read: None,
        }
    }
    /// The entry as answered: never a token.
    pub fn entry(&self) -> Value {
        json!({
            "name": self.name,
            "kind": self.kind(),
            "write": self.write,
            "ddl": self.ddl,
            "maintain": self.maintain,
            "call_tools": self.call_tools,
            "mcp_url": self.mcp_url,
            "self_url": self.self_url,
            "self_url_private": self.self_url_private,
            "urlChangedAt": self.url_change.as_ref().map(|c| &c.at),
            "previousUrl": self.url_change.as_ref().and_then(|c| c.previous.as_ref()),
            "urlChangedBy": self.url_change.as_ref().map(|c| &c.by),
            "hasMcpToken": self.mcp_token.is_some(),
            "description": self.description,
            "instructions": self.instructions,
            "created": self.created,
            "tools": [],
            "skippedTools": [],
            "reachable": Value::Null,
            "lastError": Value::Null,
            "lastErrorAt": Value::Null,
            "previousError": Value::Null,
            "lastSeen": Value::Null,
            "wasm": self.wasm,
        })
    }
}

/// The fields `apps/create/` and `apps/update/` take.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AppFields {
    /// See [`AppRecord::name`].
    pub name: Option<String>,
    /// See [`AppRecord::write`].
    pub write: Option<Vec<String>>,
    /// See [`AppRecord::ddl`].
    pub ddl: Option<bool>,
    /// See [`AppRecord::maintain`].
    pub maintain: Option<bool>,
    #[serde(default, deserialize_with = "some")]
    /// See [`AppRecord::mcp_url`]; `null` removes it.
    pub mcp_url: Option<Option<String>>,
    #[serde(default, deserialize_with = "some")]
    /// See [`AppRecord::mcp_token`]; `null` removes it.
    pub mcp_token: Option<Option<String>>,
    /// See [`AppRecord::description`].
    pub description: Option<String>,
    /// See [`AppRecord::instructions`].
    pub instructions: Option<String>,
    /// A WASM component: a file on the server's machine...
    pub wasm_path: Option<String>,
    /// ...or its bytes in base64.
    pub wasm_base64: Option<String>,
    /// WASM limits (memory_mb, cpu_ms, timeout_ms, max_result_bytes, max_instances, idle_ms).
    pub limits: Option<Value>,
    /// The hosts a WASM app may send HTTP requests to (`[]`: none).
    pub allow_hosts: Option<Value>,
    /// See [`AppRecord::call_tools`].
    pub call_tools: Option<Vec<String>>,
    /// See [`AppRecord::self_url`].
    pub self_url: Option<bool>,
    /// See [`AppRecord::self_url_private`].
    pub self_url_private: Option<bool>,
    /// A component by reference: `oci://...` or an `https://` URL (see `source/`).
    pub source: Option<String>,
    /// A URL source's SHA-256.
    pub sha256: Option<String>,
    /// The digest a plan showed: the confirm must find the same.
    pub digest: Option<String>,
    /// Install by reference at once (true) or answer a plan first (absent or false).
    pub confirm: Option<bool>,
}

/// Tells a field set to null (`Some(None)`) from an absent one (`None`).
fn some<'de, D: serde::Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> std::result::Result<Option<T>, D::Error> {
    T::deserialize(d).map(Some)
}

impl AppFields {
    /// The first field only the owner may change, if any.
    fn touches_rights(&self) -> Option<&'static str> {
        if self.write.is_some() {
            Some("write")
        } else if self.ddl.is_some() {
            Some("ddl")
        } else if self.maintain.is_some() {
            Some("maintain")
        } else if self.wasm_path.is_some() || self.wasm_base64.is_some() || self.source.is_some() {
            Some("component")
        } else if self.limits.is_some() {
            Some("limits")
        } else if self.allow_hosts.is_some() {
            Some("allow_hosts")
        } else if self.call_tools.is_some() {
            Some("call_tools")
        } else if self.self_url.is_some() {
            Some("self_url")
        } else if self.self_url_private.is_some() {
            Some("self_url_private")
        } else {
            None
        }
    }
}

/// An app name: 1 to 64 of `[a-z0-9_-]`, starting with a letter.
pub fn valid_name(n: &str) -> bool {
    let b = n.as_bytes();
    !b.is_empty()
        && b.len() <= 64
        && b[0].is_ascii_lowercase()
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'_' || *c == b'-')
}

/// An http(s) URL with a host.
fn is_http_url(u: &str) -> bool {
    let rest = u
        .strip_prefix("http://")
        .or_else(|| u.strip_prefix("https://"));
    match rest {
        Some(r) => {
            let host = r.split(['/', '?', '#']).next().unwrap_or("");
            !host.is_empty() && !u.contains(char::is_whitespace)
        }
        None => false,
    }
}

/// Checks the fields of a create or an update (before anything is installed or changed).
pub fn check(f: &AppFields) -> Result<()> {
    if let Some(n) = &f.name
        && !valid_name(n)
    {
        return Err(Error::invalid(format!("invalid app name {n:?}"))
            .column("name")
            .rule("pattern")
            .hint("an app name matches [a-z][a-z0-9_-]{0,63}"));
    }
    for p in f.write.iter().flatten() {
        if !auth::valid_pattern(p) {
            return Err(Error::invalid(format!("invalid write pattern {p:?}"))
                .column("write")
                .rule("pattern")
                .hint(
                    "each write pattern is catalog.schema.table, catalog.schema.*, catalog.* or *",
                ));
        }
    }
    for p in f.call_tools.iter().flatten() {
        if !auth::valid_tool_pattern(p) {
            return Err(Error::invalid(format!("invalid tool pattern {p:?}"))
                .column("call_tools")
                .rule("pattern")
                .hint("each call_tools entry is a tool name or a pattern with *, e.g. \"select_rows\", \"planning_*\" or \"*\""));
        }
    }
    if let Some(Some(u)) = &f.mcp_url
        && !is_http_url(u)
    {
        return Err(Error::invalid(format!("invalid mcp_url {u:?}"))
            .column("mcp_url")
            .rule("url")
            .hint("give an http(s) URL, e.g. http://127.0.0.1:5235/mcp"));
    }
    if let Some(h) = &f.allow_hosts {
        net::allow_hosts(h)?;
    }
    for (k, v) in [
        ("description", &f.description),
        ("instructions", &f.instructions),
    ] {
        if v.as_ref().is_some_and(|s| s.len() > 16_384) {
            return Err(Error::invalid(format!("{k} is longer than 16384 bytes"))
                .column(k)
                .rule("max")
                .hint("shorten it"));
        }
    }
    Ok(())
}

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

    fn save(&self, apps: &[AppRecord]) -> Result<()> {
        let bytes = serde_json::to_vec_pretty(apps).map_err(|e| Error::internal(e.to_string()))?;
        auth::write_private(&self.path, &bytes)?;
        Ok(())
    }

    /// Changes the registry under its lock; the file is written before the change is visible.
    fn modify<T>(&self, f: impl FnOnce(&mut Vec<AppRecord>) -> Result<T>) -> Result<T> {
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
            write: f.write.unwrap_or_default(),
            ddl: f.ddl.unwrap_or(false),
            maintain: f.maintain.unwrap_or(false),
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
        };
        self.modify(|apps| {
            if apps.iter().any(|a| a.name == name) {
                return Err(Error::conflict(format!("app {name} already exists"))
                    .column("name")
                    .rule("unique")
                    .hint("pick another name, or use apps/update"));
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
            if let Some(v) = f.write {
                a.write = v;
            }
            if let Some(v) = f.ddl {
                a.ddl = v;
            }
            if let Some(v) = f.maintain {
                a.maintain = v;
            }
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
        grant: Option<Grant>,
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
                (a.write, a.ddl, a.maintain) = (g.write, g.ddl, g.maintain);
            }
            Ok((before, a.clone()))
        })
    }
}

fn not_wasm() -> Error {
    Error::invalid("allow_hosts apply to WASM apps")
        .column("allow_hosts")
        .rule("wasm")
        .hint("a remote app or an API client makes its own requests: drop allow_hosts, or give a component (wasm_path or wasm_base64)")
}

/// The 404 for an app that is not registered.
pub fn no_app(name: &str) -> Error {
    Error::not_found(format!("no app {name}"))
        .column("name")
        .hint("apps/ lists the apps")
}
