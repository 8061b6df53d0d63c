//! Engine settings: a small typed set, stored in `.datanotes/settings.json`, changed through
//! `set_engine_settings` (a journaled migration).

use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Settings {
    /// Rows `select_rows` answers when the call gives no `limit`.
    pub default_limit: i64,
    /// The largest `limit` a `select_rows` or `list_migrations` call may ask for.
    pub max_limit: i64,
    /// The largest Markdown body a row may have, in bytes.
    pub max_body_bytes: i64,
    /// Watch the folder while serving and journal hand edits as they happen.
    pub watch_files: bool,
    /// The semantic index's model: a folder (relative to the database folder, or absolute);
    /// empty: the one given to `serve --model` or `DATANOTES_MODEL`, if any. Changing it
    /// re-embeds every row in the background.
    pub semantic_model: String,
    /// The public keys whose cosign signatures the owner trusts on WASM apps installed by
    /// reference (`{"name", "public_key"}`, the key in PEM).
    pub trusted_keys: Vec<TrustedKey>,
    /// Whether an app installed or upgraded by reference must be signed by a trusted key.
    pub require_signature: bool,
}

/// A public key the owner trusts to sign apps (`trusted_keys` in the engine settings).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrustedKey {
    /// The name the owner knows the signer by ("signed by alice").
    pub name: String,
    /// The public key, PEM (`-----BEGIN PUBLIC KEY-----`, as in `cosign.pub`).
    pub public_key: String,
}

impl TrustedKey {
    /// Refuses an empty name or a key that is not a PEM public key.
    pub fn check(&self) -> Result<(), Error> {
        let why = if self.name.trim().is_empty() {
            "a trusted key has an empty name".to_string()
        } else if sigstore::crypto::CosignVerificationKey::try_from_pem(self.public_key.as_bytes())
            .is_err()
        {
            format!("the trusted key {:?} is not a PEM public key", self.name)
        } else {
            return Ok(());
        };
        let hint = "give each key a name and the text of a public key file (-----BEGIN PUBLIC KEY-----), such as the PREFIX.pub that `datanotes apps keygen PREFIX` writes (or a cosign.pub)";
        Err(Error::invalid(why).column("trusted_keys").hint(hint))
    }
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            default_limit: 100,
            max_limit: 10_000,
            max_body_bytes: 1 << 20,
            watch_files: true,
            semantic_model: String::new(),
            trusted_keys: vec![],
            require_signature: false,
        }
    }
}

impl Settings {
    /// The settings in `.datanotes/settings.json` (`meta_dir`); defaults when there is none. A
    /// file that cannot be read does not stop the engine: it is reported and the defaults apply.
    pub fn load(meta_dir: &std::path::Path) -> Settings {
        let path = meta_dir.join("settings.json");
        match std::fs::read(&path) {
            Ok(b) => serde_json::from_slice(&b).unwrap_or_else(|e| {
                tracing::error!(path = %path.display(), "the settings cannot be read, using the defaults: {e}");
                Settings::default()
            }),
            Err(_) => Settings::default(),
        }
    }

    /// Applies a partial change, checking every key and value.
    pub fn merged(&self, change: &Map<String, Value>) -> Result<Settings> {
        let mut cur = serde_json::to_value(self).map_err(|e| Error::internal(e.to_string()))?;
        let known: Vec<String> = cur
            .as_object()
            .map(|o| o.keys().cloned().collect())
            .unwrap_or_default();
        for (k, v) in change {
            if !known.contains(k) {
                return Err(Error::invalid(format!("unknown setting {k:?}"))
                    .column(k.as_str())
                    .rule("unknown_setting")
                    .hint(format!("known settings: {}", known.join(", "))));
            }
            cur[k] = v.clone();
        }
        let s: Settings = serde_json::from_value(cur).map_err(|e| {
            Error::invalid(format!("invalid settings: {e}"))
                .hint("see get_engine_settings for each setting's type")
        })?;
        for (k, v, lo) in [
            ("default_limit", s.default_limit, 1),
            ("max_limit", s.max_limit, 1),
            ("max_body_bytes", s.max_body_bytes, 0),
        ] {
            if v < lo {
                return Err(Error::invalid(format!("setting {k} must be at least {lo}"))
                    .column(k)
                    .rule("min")
                    .hint(format!("give {k} a value of {lo} or more")));
            }
        }
        let mut names = std::collections::HashSet::new();
        for k in &s.trusted_keys {
            k.check()?;
            if !names.insert(k.name.as_str()) {
                return Err(
                    Error::invalid(format!("two trusted keys are named {:?}", k.name))
                        .column("trusted_keys")
                        .rule("unique")
                        .hint("give each trusted key a name of its own"),
                );
            }
        }
        if s.require_signature && s.trusted_keys.is_empty() {
            return Err(Error::invalid("require_signature needs a trusted key")
                .column("require_signature")
                .hint("add the author's public key to trusted_keys first (datanotes apps trust NAME --key KEY.pub)"));
        }
        if s.default_limit > s.max_limit {
            return Err(Error::invalid("default_limit may not exceed max_limit")
                .column("default_limit")
                .rule("max")
                .hint("lower default_limit or raise max_limit"));
        }
        Ok(s)
    }
}
