//! The apps registry: who the apps are, their tokens' hashes and their rights.
//!
//! One entry format for every kind of app (a plain API client, a remote MCP server, a WASM
//! component). Stored in `.datanotes/apps.json` (atomic, 0600). App tokens are kept as SHA-256
//! only; `mcp_token` is kept because the engine must send it to the app, and is never returned.

pub mod aggregator;
pub(crate) mod backend;
pub mod install;
pub(crate) mod limits;
pub(crate) mod plain;
mod registry;
pub(crate) mod remote;
pub(crate) mod self_url;
pub mod source;
pub mod wasm;

pub use registry::{Registry, no_app};

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
    /// What it may do beyond reading: `write`, `ddl`, `maintain` (saved as keys of the entry).
    #[serde(flatten)]
    pub rights: Rights,
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
    /// What its token is listed on `/mcp`: every tool, or the search listing.
    #[serde(default, skip_serializing_if = "ToolListing::is_all")]
    pub tool_listing: ToolListing,
    /// The tools (names or patterns) its search listing shows besides `search_tools` and
    /// `call_tool`, those it may call.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pinned_tools: Vec<String>,
    /// What its tools' names are listed with in front (`gh_`: its `search` is `gh_search`),
    /// set by the owner so that two apps' tools of one name both stay reachable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_prefix: Option<String>,
}

pub use crate::auth::{Rights, ToolListing};

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
            rights: self.rights.clone(),
            call_tools: self.call_tools.clone(),
            read: None,
        }
    }
    /// The entry as answered: never a token.
    pub fn entry(&self) -> Value {
        json!({
            "name": self.name,
            "kind": self.kind(),
            "write": self.rights.write,
            "ddl": self.rights.ddl,
            "maintain": self.rights.maintain,
            "call_tools": self.call_tools,
            "tool_listing": self.tool_listing,
            "pinned_tools": self.pinned_tools,
            "tool_prefix": self.tool_prefix,
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
    /// See [`Rights::write`].
    pub write: Option<Vec<String>>,
    /// See [`Rights::ddl`].
    pub ddl: Option<bool>,
    /// See [`Rights::maintain`].
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
    /// See [`AppRecord::tool_listing`].
    pub tool_listing: Option<ToolListing>,
    /// See [`AppRecord::pinned_tools`].
    pub pinned_tools: Option<Vec<String>>,
    #[serde(default, deserialize_with = "some")]
    /// See [`AppRecord::tool_prefix`]; `null` removes it.
    pub tool_prefix: Option<Option<String>>,
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
    /// `rights` with the rights these fields set instead (an absent field keeps its right).
    pub fn rights_over(&self, rights: &Rights) -> Rights {
        Rights {
            write: self.write.clone().unwrap_or_else(|| rights.write.clone()),
            ddl: self.ddl.unwrap_or(rights.ddl),
            maintain: self.maintain.unwrap_or(rights.maintain),
        }
    }

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
        } else if self.tool_listing.is_some() {
            Some("tool_listing")
        } else if self.pinned_tools.is_some() {
            Some("pinned_tools")
        } else if self.tool_prefix.is_some() {
            Some("tool_prefix")
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

/// A tool prefix: 1 to 20 of the characters a tool name may have.
fn valid_prefix(p: &str) -> bool {
    (1..=20).contains(&p.len())
        && p.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
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
    if let Some(p) = &f.pinned_tools {
        auth::check_pinned(p)?;
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
    if let Some(Some(p)) = &f.tool_prefix
        && !valid_prefix(p)
    {
        return Err(Error::invalid(format!("invalid tool_prefix {p:?}"))
            .column("tool_prefix")
            .rule("pattern")
            .hint(
                "a tool prefix is 1 to 20 of a-z, A-Z, 0-9, _ and -, e.g. \"gh_\"; null removes it",
            ));
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
