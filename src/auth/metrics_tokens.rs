//! Read-only metrics tokens: what a scraper (Prometheus, an agent's dashboard) presents at
//! `GET /datanotes/metrics`, and nothing else. The owner creates and revokes them
//! (`datanotes metrics-tokens ...`, or `POST /datanotes/metrics-tokens/create`); a token is
//! shown once, only its SHA-256 is kept, in `.datanotes/metrics-tokens.json` (0600).
//!
//! A metrics token is a principal of its own ([`super::Caller::Metrics`]): [`super::authorize`]
//! lets it pass [`super::Access::Metrics`] and refuses it everything else, so it reads no
//! table, no journal, no tool and opens no MCP session.

use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::RwLock;

/// A metrics token's prefix.
pub const METRICS_PREFIX: &str = "dn_metrics_";

/// At most this many metrics tokens: one per scraper is the use.
const MAX_TOKENS: usize = 64;

/// One token as kept: its name, its hash, when it was made.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Entry {
    name: String,
    sha256: String,
    created: String,
}

/// The owner's metrics tokens.
pub struct MetricsTokens {
    path: PathBuf,
    entries: RwLock<Vec<Entry>>,
}

impl MetricsTokens {
    /// Loads `.datanotes/metrics-tokens.json` (none yet: no tokens). A file that does not parse
    /// is an error naming it: tokens are never silently dropped or widened.
    pub fn open(meta_dir: &Path) -> anyhow::Result<Self> {
        let path = meta_dir.join("metrics-tokens.json");
        let entries = match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
                anyhow::anyhow!(
                    "{} is not a list of metrics tokens ({e}): fix it, or delete it to revoke them all",
                    path.display()
                )
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => vec![],
            Err(e) => anyhow::bail!("cannot read {}: {e}", path.display()),
        };
        Ok(MetricsTokens {
            path,
            entries: RwLock::new(entries),
        })
    }

    /// The name of the metrics token presented, if it is one.
    pub fn identify(&self, token: &str) -> Option<String> {
        if !token.starts_with(METRICS_PREFIX) {
            return None;
        }
        let entries = self.entries.read().unwrap();
        // Every entry is compared (constant time each): which one matched is not timed.
        let mut found = None;
        for e in entries.iter() {
            if super::matches(token, &e.sha256) {
                found = Some(e.name.clone());
            }
        }
        found
    }

    /// A new token named `name`: `{"name", "token", "created"}`, the token shown this once.
    pub fn create(&self, name: &str) -> Result<Value> {
        check_name(name)?;
        let mut entries = self.entries.write().unwrap();
        if entries.iter().any(|e| e.name == name) {
            return Err(
                Error::conflict(format!("a metrics token named {name} exists"))
                    .column("name")
                    .rule("unique")
                    .hint("choose another name, or revoke it first (metrics-tokens/revoke)"),
            );
        }
        if entries.len() >= MAX_TOKENS {
            return Err(
                Error::invalid(format!("there are already {MAX_TOKENS} metrics tokens"))
                    .rule("limit")
                    .hint("revoke the ones no scraper uses (metrics-tokens/revoke)"),
            );
        }
        let token = super::new_token(METRICS_PREFIX);
        let entry = Entry {
            name: name.to_string(),
            sha256: super::token_hash(&token),
            created: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        };
        let mut next = entries.clone();
        next.push(entry.clone());
        self.save(&next)?;
        *entries = next;
        Ok(json!({"name": entry.name, "created": entry.created, "token": token}))
    }

    /// The tokens, without their secrets: `{"tokens": [{"name", "created"}]}`.
    pub fn list(&self) -> Value {
        let entries = self.entries.read().unwrap();
        let tokens: Vec<Value> = entries
            .iter()
            .map(|e| json!({"name": e.name, "created": e.created}))
            .collect();
        json!({ "tokens": tokens })
    }

    /// Revokes the token named `name`: it stops working at once.
    pub fn revoke(&self, name: &str) -> Result<Value> {
        let mut entries = self.entries.write().unwrap();
        let Some(i) = entries.iter().position(|e| e.name == name) else {
            let names: Vec<&str> = entries.iter().map(|e| e.name.as_str()).collect();
            let name: String = name.chars().take(80).collect();
            return Err(Error::not_found(format!("no metrics token named {name}"))
                .column("name")
                .hint(if names.is_empty() {
                    "there are no metrics tokens".to_string()
                } else {
                    format!("the metrics tokens are {}", names.join(", "))
                }));
        };
        let mut next = entries.clone();
        next.remove(i);
        self.save(&next)?;
        *entries = next;
        Ok(json!({"revoked": name}))
    }

    fn save(&self, entries: &[Entry]) -> Result<()> {
        let bytes =
            serde_json::to_vec_pretty(entries).map_err(|e| Error::internal(e.to_string()))?;
        super::write_private(&self.path, &bytes).map_err(|e| {
            Error::internal(format!("cannot save the metrics tokens: {e}"))
                .hint("check that the database folder's .datanotes/ is writable")
        })
    }
}

/// A token's name: 1 to 64 of `[a-z0-9_-]`, as a scraper's job is named.
fn check_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-');
    if ok {
        return Ok(());
    }
    let shown: String = name.chars().take(80).collect();
    Err(
        Error::invalid(format!("{shown:?} is not a metrics token name"))
            .column("name")
            .rule("name")
            .hint("use 1 to 64 lowercase letters, digits, - and _, e.g. \"prometheus\""),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_made_found_listed_and_revoked() {
        let dir = tempfile::tempdir().unwrap();
        let t = MetricsTokens::open(dir.path()).unwrap();
        let made = t.create("prometheus").unwrap();
        let token = made["token"].as_str().unwrap().to_string();
        assert!(token.starts_with(METRICS_PREFIX));
        assert_eq!(t.identify(&token).as_deref(), Some("prometheus"));
        assert_eq!(t.identify("dn_metrics_nope"), None);
        assert_eq!(t.create("prometheus").unwrap_err().status, 409);
        let bad = t.create("Prom etheus").unwrap_err();
        assert_eq!((bad.status, bad.column.as_deref()), (400, Some("name")));
        // Kept across a restart, without the secret.
        let again = MetricsTokens::open(dir.path()).unwrap();
        assert_eq!(again.identify(&token).as_deref(), Some("prometheus"));
        let file = std::fs::read_to_string(dir.path().join("metrics-tokens.json")).unwrap();
        assert!(!file.contains(&token));
        assert_eq!(again.list()["tokens"][0]["name"], "prometheus");
        assert_eq!(again.revoke("nope").unwrap_err().status, 404);
        again.revoke("prometheus").unwrap();
        assert_eq!(again.identify(&token), None);
        assert_eq!(
            MetricsTokens::open(dir.path()).unwrap().identify(&token),
            None
        );
    }
}
