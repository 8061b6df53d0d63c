//! datanotes as an OAuth 2.1 authorization server for its own `/mcp` (the MCP authorization
//! specification): web and mobile agents register (a client ID metadata document, or dynamic
//! registration, RFC 7591), send the owner to the consent page, and receive short-lived access
//! tokens bound to this server's `/mcp` (RFC 8707) with refresh tokens that rotate on use.
//!
//! What the owner gives on the consent page is a *grant*: rights in an app entry's vocabulary
//! (`write`, `ddl`, `maintain`, `call_tools`). A grant's access token makes a
//! [`Caller::Grant`](crate::auth::Caller::Grant), decided by [`crate::auth::authorize`] like
//! every caller; nothing here decides what a grant may do.
//!
//! One concern per file: [`store`] (what is kept, `.datanotes/oauth.json`, hashes only),
//! [`clients`] (registration and metadata documents, fetched as hostile input), [`authorize`]
//! (the authorization requests held for the consent, and the codes), [`tokens`] (the token
//! endpoint, refresh and revocation), [`bounds`] (what anonymous callers may hold: requests and
//! registrations, per address and in total). The HTTP side (metadata documents, the consent
//! page, the endpoints' wire shapes) is the HTTP door's `http/oauth.rs`.
//!
//! [`OAuth::identify`] takes a token and the resource it is presented at: a token makes a
//! `Caller::Grant` only at the resource it was issued for.

pub mod authorize;
mod bounds;
pub mod clients;
mod store;
mod tokens;

pub use authorize::{AuthRequest, Consent, Refusal};

use crate::auth::{Caller, Rights, token_hash};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// An access token's prefix.
pub const ACCESS_PREFIX: &str = "dn_oat_";
/// A refresh token's prefix.
pub const REFRESH_PREFIX: &str = "dn_ort_";
/// An authorization code's prefix.
pub const CODE_PREFIX: &str = "dn_oac_";
/// A confidential client's secret's prefix.
pub const SECRET_PREFIX: &str = "dn_ocs_";

/// An error of the OAuth endpoints, in their wire shape (RFC 6749 §5.2):
/// `{"error": code, "error_description": why}`.
#[derive(Debug, Clone, PartialEq)]
pub struct OAuthError {
    /// The HTTP status.
    pub status: u16,
    /// The RFC's error code (`invalid_grant`, ...).
    pub error: &'static str,
    /// What went wrong and how to fix it.
    pub description: String,
    /// For a `429`: when to try again (seconds, the `Retry-After` header).
    pub retry_after: Option<u64>,
}

impl OAuthError {
    /// An error.
    pub fn new(status: u16, error: &'static str, description: impl Into<String>) -> Self {
        OAuthError {
            status,
            error,
            description: description.into(),
            retry_after: None,
        }
    }
    /// Its body.
    pub fn to_json(&self) -> Value {
        json!({"error": self.error, "error_description": self.description})
    }
}

/// A token's SHA-256.
fn hash32(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// What the owner ticked on the consent page: the rights of an app entry ([`Rights`]), the
/// tools, the read patterns and the listing.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Ticked {
    /// Write, ddl, maintain: the keys of an app entry.
    #[serde(flatten)]
    pub rights: Rights,
    /// The tools it may list and call (patterns as an app's `call_tools`).
    #[serde(default)]
    pub call_tools: Vec<String>,
    /// The tables it may read (patterns as `write`). None chosen (and a grant saved before
    /// there were read patterns): what its tools imply, [`Ticked::reads`].
    #[serde(default)]
    pub read: Vec<String>,
    /// How its tokens are listed on `/mcp`: every tool, or the search listing.
    #[serde(default, skip_serializing_if = "crate::auth::ToolListing::is_all")]
    pub tool_listing: crate::auth::ToolListing,
    /// The tools its search listing shows besides the search.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pinned_tools: Vec<String>,
}

/// The engine operations that read rows (their values, bodies, ids or changes): a grant that
/// may call one reads every table unless its consent chose read patterns. The other read
/// operations (`list_tables`, `get_engine_settings`) read no row; `ops`' tests hold the
/// catalog to this list.
pub const ROW_READS: &[&str] = &[
    "describe_table",
    "get_row",
    "select_rows",
    "search_notes",
    "similar_notes",
    "list_migrations",
];

impl Ticked {
    /// The keys of a consent, as the consent form sends them.
    pub const KEYS: [&'static str; 7] = [
        "write",
        "ddl",
        "maintain",
        "call_tools",
        "read",
        "tool_listing",
        "pinned_tools",
    ];

    /// The tables the grant reads: its read patterns; none chosen, `*` if it may call an
    /// operation that reads rows ([`ROW_READS`]), else none.
    pub fn reads(&self) -> Vec<String> {
        if !self.read.is_empty() {
            return self.read.clone();
        }
        let calls =
            |op: &str| (self.call_tools.iter()).any(|p| crate::auth::tool_pattern_matches(p, op));
        if ROW_READS.iter().any(|op| calls(op)) {
            vec!["*".to_string()]
        } else {
            vec![]
        }
    }

    /// Checks every pattern's form; an error names the field and the pattern.
    pub fn check(&self) -> crate::error::Result<()> {
        use crate::error::Error;
        for (field, patterns) in [("write", &self.rights.write), ("read", &self.read)] {
            if let Some(p) = patterns.iter().find(|p| !crate::auth::valid_pattern(p)) {
                return Err(
                    Error::invalid(format!("{field} pattern {p:?} is not valid"))
                        .column(field)
                        .hint("a table (catalog.schema.table), catalog.schema.*, catalog.* or *"),
                );
            }
        }
        if let Some(p) = self
            .call_tools
            .iter()
            .find(|p| !crate::auth::valid_tool_pattern(p))
        {
            return Err(
                Error::invalid(format!("call_tools pattern {p:?} is not valid"))
                    .column("call_tools")
                    .hint("a tool name, or a pattern with * (planning_*, *)"),
            );
        }
        crate::auth::check_pinned(&self.pinned_tools)?;
        if self.rights.write.len() > 1000 || self.call_tools.len() > 1000 || self.read.len() > 1000
        {
            return Err(Error::invalid(
                "at most 1000 write, 1000 read and 1000 call_tools patterns",
            )
            .hint("use patterns (catalog.*, planning_*)"));
        }
        Ok(())
    }
}

/// The lifetimes of tokens.
#[derive(Debug, Clone, Copy)]
pub struct Lifetimes {
    /// An access token (`DATANOTES_OAUTH_ACCESS_TTL`, seconds; 1 hour).
    pub access: Duration,
    /// A refresh token, renewed at each rotation (`DATANOTES_OAUTH_REFRESH_TTL`; 30 days).
    pub refresh: Duration,
}

impl Lifetimes {
    /// From the environment, else the defaults.
    pub fn from_env() -> Lifetimes {
        let n = |k, d| Duration::from_secs(crate::knobs::num(k, d).max(1));
        Lifetimes {
            access: n("DATANOTES_OAUTH_ACCESS_TTL", 3600),
            refresh: n("DATANOTES_OAUTH_REFRESH_TTL", 30 * 86400),
        }
    }
}

/// Why an access token does not make a caller (each a 401 with `error="invalid_token"`).
#[derive(Debug, Clone, PartialEq)]
pub enum Refused {
    /// No grant holds it: forged, revoked, or from before a revocation.
    Unknown,
    /// It expired.
    Expired,
    /// It was issued for another resource.
    OtherResource(String),
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refused::Unknown => {
                f.write_str("the access token is not valid (unknown, or its grant was revoked)")
            }
            Refused::Expired => f.write_str("the access token expired"),
            Refused::OtherResource(r) => write!(
                f,
                "the access token was issued for another resource ({r}), not this server's /mcp"
            ),
        }
    }
}

/// The authorization server's state.
pub struct OAuth {
    store: Mutex<store::Store>,
    flow: authorize::Flow,
    /// Token lifetimes.
    pub lifetimes: Lifetimes,
    /// Whether client metadata documents may be fetched from private and loopback addresses
    /// (`--oauth-private-clients`; off by default).
    pub private_clients: bool,
}

impl OAuth {
    /// Opens `.datanotes/oauth.json`.
    pub fn open(meta_dir: &Path, private_clients: bool) -> anyhow::Result<OAuth> {
        Ok(OAuth {
            store: Mutex::new(store::Store::open(meta_dir)?),
            flow: authorize::Flow::default(),
            lifetimes: Lifetimes::from_env(),
            private_clients,
        })
    }

    /// The caller an access token makes at `resource` (this server's `/mcp` as the request
    /// reached it), or why not. A token is found by its SHA-256; the last step compares in
    /// constant time.
    pub fn identify(&self, token: &str, resource: &str) -> Result<Caller, Refused> {
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let store = self.store.lock().unwrap();
        let Some(store::Found::Access { grant, expires }) = store.tokens.get(&digest) else {
            return Err(Refused::Unknown);
        };
        let now = now_secs();
        if *expires <= now {
            return Err(Refused::Expired);
        }
        let Some(live) = store.live.get(grant) else {
            return Err(Refused::Unknown);
        };
        if !same_resource(&live.grant.resource, resource) {
            return Err(Refused::OtherResource(live.grant.resource.clone()));
        }
        live.last_used.store(now, Ordering::Relaxed);
        Ok(Caller::Grant(live.grant.clone()))
    }

    /// Every grant, for the owner (no token, no hash).
    pub fn grants(&self) -> Vec<serde_json::Value> {
        let store = self.store.lock().unwrap();
        store
            .saved
            .grants
            .iter()
            .map(|g| {
                let used = store
                    .live
                    .get(&g.id)
                    .map(|l| l.last_used.load(Ordering::Relaxed))
                    .filter(|t| *t > 0)
                    .or(g.last_used);
                serde_json::json!({
                    "id": g.id,
                    "client_name": g.client_name,
                    "client_id": g.client_id,
                    "client_origin": g.client_origin,
                    "redirect_uri": g.redirect_uri,
                    "resource": g.resource,
                    "rights": Ticked { read: g.consent.reads(), ..g.consent.clone() },
                    "created": iso(g.created),
                    "last_used": used.map(iso),
                    "expires": iso(g.refresh.expires),
                })
            })
            .collect()
    }

    /// Revokes a grant and every token of its chain; it takes effect at the next request.
    pub fn revoke_grant(&self, id: &str) -> crate::error::Result<()> {
        let mut store = self.store.lock().unwrap();
        if !store.revoke(id) {
            return Err(crate::error::Error::not_found(format!("no grant {id:?}"))
                .column("id")
                .hint("datanotes grants list shows the grants and their ids"));
        }
        store
            .save()
            .map_err(|e| crate::error::Error::internal(format!("cannot save the grants: {e}")))
    }
}

/// Whether two resource URLs name the same resource: equal, or equal but for a trailing `/`
/// and the case of scheme and host.
pub(crate) fn same_resource(a: &str, b: &str) -> bool {
    let norm = |s: &str| {
        let s = s.trim_end_matches('/');
        match s.split_once("://") {
            Some((scheme, rest)) => {
                let (auth, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
                format!(
                    "{}://{}{}",
                    scheme.to_ascii_lowercase(),
                    auth.to_ascii_lowercase(),
                    path
                )
            }
            None => s.to_string(),
        }
    };
    let (a, b) = (norm(a), norm(b));
    bool::from(subtle::ConstantTimeEq::ct_eq(a.as_bytes(), b.as_bytes()))
}

/// Unix seconds now.
pub(crate) fn now_secs() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// Unix seconds as an RFC 3339 UTC time.
fn iso(t: i64) -> String {
    chrono::DateTime::from_timestamp(t, 0)
        .map(|d| d.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
        .unwrap_or_default()
}

/// A new random token with a prefix, and its hash.
fn mint(prefix: &str) -> (String, String) {
    let t = crate::auth::new_token(prefix);
    let h = token_hash(&t);
    (t, h)
}

/// A short random id (grants, requests, clients).
fn short_id(prefix: &str) -> String {
    let b: [u8; 12] = rand::random();
    format!("{prefix}{}", hex::encode(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resources_compare_by_scheme_host_and_path() {
        assert!(same_resource(
            "http://127.0.0.1:5/mcp",
            "HTTP://127.0.0.1:5/mcp/"
        ));
        assert!(!same_resource(
            "http://127.0.0.1:5/mcp",
            "http://127.0.0.1:6/mcp"
        ));
        assert!(!same_resource("http://a/mcp", "http://a/MCP"));
    }

    #[test]
    fn a_grant_reads_what_its_consent_chose_or_what_its_tools_imply() {
        let rights = |tools: &[&str], read: &[&str]| Ticked {
            call_tools: tools.iter().map(|s| s.to_string()).collect(),
            read: read.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        };
        assert!(rights(&["list_tables"], &[]).reads().is_empty());
        assert!(
            rights(&["list_tables", "get_engine_settings"], &[])
                .reads()
                .is_empty()
        );
        assert_eq!(rights(&["list_tables", "select_rows"], &[]).reads(), ["*"]);
        assert_eq!(rights(&["*"], &[]).reads(), ["*"]);
        assert_eq!(rights(&["search_*"], &[]).reads(), ["*"]);
        assert_eq!(
            rights(&["get_row"], &["work.crm.*"]).reads(),
            ["work.crm.*"]
        );
        // A grant saved before read patterns reads what its tools imply.
        let old: Ticked = serde_json::from_str(r#"{"call_tools": ["get_row"]}"#).unwrap();
        assert_eq!(old.reads(), ["*"]);
        let e = rights(&[], &["work"]).check().unwrap_err();
        assert_eq!((e.status, e.column.as_deref()), (400, Some("read")));
        assert!(e.message.contains("read pattern \"work\""), "{}", e.message);
    }
}
