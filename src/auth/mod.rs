//! Tokens and the one function that decides whether a caller may run an operation.
//!
//! Tokens are 256 random bits with a prefix per kind (`dn_owner_`, `dn_app_`, and the OAuth
//! tokens of [`oauth`]). Only their SHA-256 is kept; they are compared in constant time and
//! never logged or echoed. An OAuth grant is one more kind of caller ([`Caller::Grant`]), with
//! rights in an app's vocabulary, decided by the same [`authorize`]; a read-only metrics token
//! ([`metrics_tokens`], `dn_metrics_`) is another, that reads the metrics and nothing else.
//!
//! The callers ([`Caller`]): the owner, an app with its [`AppScope`], an OAuth grant with the same
//! `Rights`, a metrics token. The access classes ([`Access`]): read, row write, schema change,
//! maintain, self-service, call tool, app content, metrics, owner. `authorize(caller, access,
//! target)` decides for the operations, for the routes beside them (apps, webhooks, the feed), and
//! for the tools a token may list and call (class `CallTool`, target a tool). A grant reads only
//! the tables of its read patterns (`AppScope::read`; `None`, every table, for apps).

pub mod metrics_tokens;
pub mod oauth;
mod patterns;
mod rights;
mod secrets;
mod tool_listing;

pub use patterns::{pattern_matches, tool_pattern_matches, valid_pattern, valid_tool_pattern};
pub use rights::Rights;
pub use secrets::{
    APP_PREFIX, OWNER_PREFIX, ensure_owner_token, matches, new_token, read_owner_token, token_hash,
    write_private,
};
pub use tool_listing::{MAX_PINNED, ToolListing, check_pinned};

use crate::error::{Error, Result};
use serde::Serialize;
use std::sync::Arc;

/// The rights of an app token.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AppScope {
    /// The app's name (its tools are prefixed with it).
    pub name: String,
    /// What it may do beyond reading: write, ddl, maintain.
    pub rights: Rights,
    /// The tools it may list and call (engine operations and apps' tools): tool names or glob
    /// patterns (`*` matches any run of characters: `*`, `planning_*`, `select_rows`).
    pub call_tools: Vec<String>,
    /// The tables it may read (patterns as `write`); `None`: every table (an app's token,
    /// which reads everything). A grant's are what its consent gave.
    pub read: Option<Vec<String>>,
}

/// An OAuth grant: what the owner gave a client on the consent page (see [`oauth`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Grant {
    /// The grant's id (`datanotes grants revoke ID`).
    pub id: String,
    /// The client's name, as it registered (the journal's actor).
    pub client: String,
    /// The resource its tokens are for: this server's `/mcp`.
    pub resource: String,
    /// Its rights, in an app entry's vocabulary (`name` is the client's name).
    pub scope: AppScope,
    /// How its tokens are listed on `/mcp`.
    pub tool_listing: ToolListing,
    /// The tools its search listing shows besides the search (see [`check_pinned`]).
    pub pinned_tools: Vec<String>,
}

/// Who is calling.
#[derive(Debug, Clone)]
pub enum Caller {
    /// The owner: every right.
    Owner,
    /// An app, with its token's rights.
    App(Arc<AppScope>),
    /// An agent connected with OAuth, with the rights of its grant.
    Grant(Arc<Grant>),
    /// A read-only metrics token ([`metrics_tokens`]), by its name: `GET /datanotes/metrics`
    /// and nothing else.
    Metrics(Arc<str>),
}

impl Caller {
    /// The token's name for the journal (never the token).
    pub fn token_name(&self) -> String {
        match self {
            Caller::Owner => "owner".into(),
            Caller::App(a) => format!("app:{}", a.name),
            Caller::Grant(g) => format!("client:{} ({})", g.client, g.id),
            Caller::Metrics(name) => format!("metrics:{name}"),
        }
    }
    /// The app's name, or `None` for the owner and a grant.
    pub fn app(&self) -> Option<&str> {
        match self {
            Caller::Owner | Caller::Grant(_) | Caller::Metrics(_) => None,
            Caller::App(a) => Some(&a.name),
        }
    }
}

/// The read patterns of a caller: `None` when it reads every table, as the owner and apps do.
fn read_patterns(caller: &Caller) -> Option<&[String]> {
    match caller {
        Caller::Owner => None,
        Caller::App(a) => a.read.as_deref(),
        Caller::Grant(g) => g.scope.read.as_deref(),
        Caller::Metrics(_) => Some(&[]),
    }
}

/// Whether `caller` reads every table, also those created later (the owner, an app, a grant
/// whose read patterns hold `*`): what is not a table's (the journal's migrations of no table)
/// is read only by such a caller.
pub fn reads_every_table(caller: &Caller) -> bool {
    read_patterns(caller).is_none_or(|r| r.iter().any(|p| p == "*"))
}

/// Whether `caller` may read some table, now or once created (a grant without read patterns
/// reads none).
pub fn reads_some_table(caller: &Caller) -> bool {
    read_patterns(caller).is_none_or(|r| !r.is_empty())
}

/// What an operation acts on, for the permission check.
#[derive(Debug, Clone, Copy)]
pub enum Target<'a> {
    /// Nothing in particular (reads of the whole database, owner routes).
    None,
    /// One table, by full name.
    Table(&'a str),
    /// An app's registry entry (self-service routes).
    App(&'a str),
    /// A tool of the namespace (an engine operation or an app's tool), by name.
    Tool(&'a str),
    /// An engine setting, by name (`set_engine_settings` asks for each it changes).
    Setting(&'a str),
    /// An app's resources, resource templates, prompts and completions: the app, and the
    /// names of the tools it serves now.
    AppContent {
        /// The app.
        app: &'a str,
        /// The names of the tools it serves now.
        tools: &'a [&'a str],
    },
}

/// What running an operation requires.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Access {
    /// Any valid token; a grant reading a table: a read pattern matching it.
    Read,
    /// Apps: a write pattern matching the table.
    RowWrite,
    /// Apps: `ddl` and a write pattern matching the table.
    SchemaChange,
    /// Apps: `maintain`.
    Maintain,
    /// Apps: only on their own registry entry.
    SelfService,
    /// Listing or calling a tool as a tool (MCP, `apps/tools/`, `apps/call/`): apps, a
    /// `call_tools` pattern matching its name.
    CallTool,
    /// Listing and reading an app's resources, getting its prompts, completing their
    /// arguments (MCP): apps, a `call_tools` pattern matching one of the app's tools (what an
    /// app offers besides its tools serves them: an MCP Apps view, a prompt that drives them)
    /// or matching everything (`*`).
    AppContent,
    /// Reading the metrics (`GET /datanotes/metrics`): the owner, and a metrics token.
    Metrics,
    /// The owner alone.
    Owner,
}

/// The engine settings only the owner may change, whatever other rights a caller has: those
/// that widen what is trusted (the keys apps are signed with, whether a signature is required)
/// or where the engine reads files (the semantic model's folder).
pub const OWNER_SETTINGS: &[&str] = &["trusted_keys", "require_signature", "semantic_model"];

/// Whether `caller` could pass a check of class `access` on any target at all: listings leave
/// out the operations a token's rights can never pass (an empty write scope never writes, no
/// `ddl` never changes a schema, no `maintain` never maintains). [`authorize`] still decides
/// each call.
pub fn may_ever(caller: &Caller, access: Access) -> bool {
    let scope = match caller {
        Caller::Owner => return true,
        Caller::App(a) => &**a,
        Caller::Grant(g) => &g.scope,
        Caller::Metrics(_) => return access == Access::Metrics,
    };
    let r = &scope.rights;
    match access {
        Access::RowWrite => !r.write.is_empty(),
        Access::SchemaChange => r.ddl && !r.write.is_empty(),
        Access::Maintain => r.maintain,
        Access::Owner | Access::Metrics => false,
        _ => true,
    }
}

/// The one permission check: may `caller` run something of class `access` on `target`?
pub fn authorize(caller: &Caller, access: Access, target: Target) -> Result<()> {
    // Who, as an answer names them, and how the owner widens their rights.
    let (app, name, widen, who): (&AppScope, String, &str, &str) = match caller {
        Caller::Owner => return Ok(()),
        // A metrics token reads the metrics, and nothing else: no table, journal, tool or
        // session.
        Caller::Metrics(_) if access == Access::Metrics => return Ok(()),
        Caller::Metrics(name) => {
            return Err(Error::forbidden(format!(
                "the metrics token {name} may only read the metrics (GET /datanotes/metrics)"
            ))
            .rule("metrics")
            .hint("use an app token or the owner token for anything else"));
        }
        Caller::App(a) => (a, format!("app {}", a.name), "apps/update", "app"),
        Caller::Grant(g) => (
            &g.scope,
            format!("client {}", g.client),
            "a new consent (revoke the grant, then connect the client again)",
            "client",
        ),
    };
    let name = &name;
    let rights = &app.rights;
    let scope = || {
        if rights.write.is_empty() {
            "empty".to_string()
        } else {
            rights.write.join(", ")
        }
    };
    let in_scope = |t: &str| rights.write.iter().any(|p| pattern_matches(p, t));
    match access {
        Access::Read => match (target, &app.read) {
            (Target::Table(t), Some(read)) if !read.iter().any(|p| pattern_matches(p, t)) => {
                let t: String = t.chars().take(200).collect();
                let allowed = if read.is_empty() {
                    "none".to_string()
                } else {
                    read.join(", ")
                };
                Err(Error::forbidden(format!(
                    "{name} may not read {t}: the tables it may read are {allowed}"
                ))
                .table(t.as_str())
                .rule("read")
                .hint(format!(
                    "the owner can widen the {who}'s read patterns with {widen}"
                )))
            }
            _ => Ok(()),
        },
        Access::RowWrite | Access::SchemaChange => {
            let t = match target {
                Target::Table(t) => t,
                _ => "",
            };
            if access == Access::SchemaChange && !rights.ddl {
                return Err(Error::forbidden(format!(
                    "{name} may not change the schema of {t}: it has no ddl right"
                ))
                .table(t)
                .rule("ddl")
                .hint(if who == "app" {
                    "the owner can grant it with apps/update {\"ddl\": true}".to_string()
                } else {
                    format!("the owner can grant it with {widen}")
                }));
            }
            if !in_scope(t) {
                return Err(Error::forbidden(format!(
                    "{name} may not write {t}: its write scope is {}",
                    scope()
                ))
                .table(t)
                .rule("write")
                .hint(format!(
                    "the owner can widen the {who}'s write patterns with {widen}"
                )));
            }
            Ok(())
        }
        Access::Maintain => {
            if let Target::Setting(k) = target
                && OWNER_SETTINGS.contains(&k)
            {
                return Err(Error::forbidden(format!(
                    "only the owner may change {k}: it decides what the engine trusts or which files it reads"
                ))
                .column(k)
                .rule("owner")
                .hint("ask the owner to change it with the owner token (datanotes apps trust, or set_engine_settings)"));
            }
            if rights.maintain {
                Ok(())
            } else {
                Err(Error::forbidden(format!(
                    "{name} may not run maintenance operations: it has no maintain right"
                ))
                .rule("maintain")
                .hint(if who == "app" {
                    "the owner can grant it with apps/update {\"maintain\": true}".to_string()
                } else {
                    format!("the owner can grant it with {widen}")
                }))
            }
        }
        Access::SelfService => match (caller, target) {
            (Caller::App(a), Target::App(t)) if t == a.name => Ok(()),
            (Caller::Grant(_), _) => Err(Error::forbidden(format!(
                "{name} has no app entry to see or change"
            ))
            .rule("self")
            .hint("only an app's own token or the owner token may use this route")),
            // Same answer whether the other app exists or not.
            _ => Err(
                Error::forbidden(format!("{name} may only see and change its own entry"))
                    .rule("self")
                    .hint(format!(
                        "use \"name\": \"{}\", or the owner token",
                        app.name
                    )),
            ),
        },
        Access::CallTool => {
            let t = match target {
                Target::Tool(t) => t,
                _ => "",
            };
            if app.call_tools.iter().any(|p| tool_pattern_matches(p, t)) {
                return Ok(());
            }
            // The name as the caller sent it: no longer than a tool name may be, and a bit.
            let t: String = t.chars().take(80).collect();
            let allowed = if app.call_tools.is_empty() {
                "none".to_string()
            } else {
                app.call_tools.join(", ")
            };
            Err(Error::forbidden(format!(
                "{name} may not call the tool {t}: the tools it may call are {allowed}"
            ))
            .column("tool")
            .rule("call_tools")
            .hint(format!(
                "the owner can widen the {who}'s call_tools patterns with {widen}"
            )))
        }
        Access::AppContent => {
            let (of, tools) = match target {
                Target::AppContent { app, tools } => (app, tools),
                _ => ("", &[][..]),
            };
            let may = |t: &str| app.call_tools.iter().any(|p| tool_pattern_matches(p, t));
            if app.call_tools.iter().any(|p| p == "*") || tools.iter().any(|t| may(t)) {
                return Ok(());
            }
            let of: String = of.chars().take(80).collect();
            Err(Error::forbidden(format!(
                "{name} may not use the resources and prompts of app {of}: it may call none of its tools"
            ))
            .rule("call_tools")
            .hint(format!("the owner can widen the {who}'s call_tools patterns with {widen}")))
        }
        Access::Metrics => Err(Error::forbidden(format!(
            "{name} may not read the metrics: the names of apps and tools are the owner's"
        ))
        .rule("owner")
        .hint("use the owner token, or a metrics token the owner creates (datanotes metrics-tokens create NAME)")),
        Access::Owner => Err(Error::forbidden("only the owner may do this")
            .rule("owner")
            .hint("use the owner token")),
    }
}

/// May `reader` see the MCP session of a change made by the principal named `actor_token`
/// (its `Caller::token_name`)? The owner sees every session, any other principal only its own:
/// a session id is the handle of a session, and the journal is read by every token.
pub fn sees_session(reader: &Caller, actor_token: Option<&str>) -> bool {
    matches!(reader, Caller::Owner) || actor_token == Some(reader.token_name().as_str())
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn a_grant_reads_only_the_tables_of_its_read_patterns() {
        let grant = |read: Option<Vec<&str>>| {
            Caller::Grant(Arc::new(Grant {
                id: "g_1".into(),
                client: "agent".into(),
                resource: "http://x/mcp".into(),
                tool_listing: ToolListing::All,
                pinned_tools: vec![],
                scope: AppScope {
                    name: "agent".into(),
                    read: read.map(|r| r.into_iter().map(String::from).collect()),
                    ..Default::default()
                },
            }))
        };
        let read = |c: &Caller, t| authorize(c, Access::Read, Target::Table(t));
        let crm = grant(Some(vec!["work.crm.*"]));
        assert!(read(&crm, "work.crm.tasks").is_ok());
        let e = read(&crm, "home.notes.diary").unwrap_err();
        assert_eq!((e.status, e.rule.as_deref()), (403, Some("read")));
        assert!(
            e.message
                .contains("client agent may not read home.notes.diary")
        );
        assert!(e.hint.as_deref().unwrap_or("").contains("a new consent"));
        // Nothing of a table: decided by what the caller reads.
        assert!(authorize(&crm, Access::Read, Target::None).is_ok());
        assert!(!reads_every_table(&crm) && reads_some_table(&crm));
        let none = grant(Some(vec![]));
        assert!(read(&none, "work.crm.tasks").is_err() && !reads_some_table(&none));
        let all = grant(Some(vec!["*"]));
        assert!(read(&all, "a.b.c").is_ok() && reads_every_table(&all));
        // An app's token reads everything, as before.
        let app = Caller::App(Arc::new(AppScope::default()));
        assert!(read(&app, "a.b.c").is_ok() && reads_every_table(&app));
        assert!(read(&grant(None), "a.b.c").is_ok());
    }
}
