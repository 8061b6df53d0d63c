//! What an app asks for: the manifest an artifact carries (the OCI annotation
//! [`ANNOTATION`], or a URL's sidecar `.datanotes.json`), and the comparison of the rights it
//! asks with those the owner grants, which the plan shows.

use crate::apps::wasm::Limits;
use crate::auth::Rights;
use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// The OCI manifest annotation that carries an app's manifest (its JSON text).
pub const ANNOTATION: &str = "dev.datanotes.app";

/// The largest app manifest read.
pub const MAX_MANIFEST_BYTES: usize = 64 << 10;

/// An app's manifest: who it is and the rights it asks for. Every field is optional.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AppManifest {
    /// The app's suggested name (the owner's `name` wins).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// What the app does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The app's version, as its author numbers it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// The rights it asks for.
    #[serde(default)]
    pub rights: AppRights,
}

/// What an app asks for, or is granted: the rights of an app entry ([`Rights`]), and a WASM
/// app's hosts and limits.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AppRights {
    /// Write, ddl, maintain: the keys of an app entry.
    #[serde(flatten)]
    pub rights: Rights,
    /// Hosts it may send HTTP requests to.
    #[serde(default)]
    pub allow_hosts: Vec<String>,
    /// Limits it needs above the defaults (memory_mb, cpu_ms, timeout_ms, ...).
    #[serde(default)]
    pub limits: serde_json::Map<String, Value>,
}

impl AppManifest {
    /// Parses a manifest's JSON text: bounded, every field checked, unknown fields refused.
    pub fn parse(text: &[u8], from: &str) -> Result<AppManifest> {
        let bad = |why: String| {
            Error::invalid(format!("the app's manifest ({from}) is malformed: {why}"))
                .column("source")
                .rule("manifest")
                .hint("the manifest is JSON: {\"name\", \"description\", \"version\", \"rights\": {\"write\", \"ddl\", \"maintain\", \"allow_hosts\", \"limits\"}} (docs/apps.md, \"Publish an app\")")
        };
        if text.len() > MAX_MANIFEST_BYTES {
            return Err(bad(format!("it is larger than {MAX_MANIFEST_BYTES} bytes")));
        }
        let v: Value = serde_json::from_slice(text).map_err(|e| bad(e.to_string()))?;
        // Unknown keys of `rights` are refused here: serde does not across a flattened struct.
        let known = [&Rights::KEYS[..], &["allow_hosts", "limits"][..]].concat();
        if let Some(k) = (v.get("rights").and_then(Value::as_object))
            .and_then(|r| r.keys().find(|k| !known.contains(&k.as_str())))
        {
            let k: String = k.chars().take(80).collect();
            return Err(bad(format!(
                "rights: unknown field `{k}`, expected one of {}",
                known.join(", ")
            )));
        }
        let m: AppManifest = serde_json::from_value(v).map_err(|e| bad(e.to_string()))?;
        for p in &m.rights.rights.write {
            if !crate::auth::valid_pattern(p) {
                return Err(bad(format!(
                    "rights.write: {p:?} is not a table name or pattern"
                )));
            }
        }
        crate::apps::wasm::net::allow_hosts(&json!(m.rights.allow_hosts))
            .map_err(|e| bad(format!("rights.allow_hosts: {}", e.message)))?;
        Limits::default()
            .merged(&Value::Object(m.rights.limits.clone()))
            .map_err(|e| bad(format!("rights.limits: {}", e.message)))?;
        if let Some(n) = &m.name
            && !crate::apps::valid_name(n)
        {
            return Err(bad(format!(
                "name: {n:?} is not an app name ([a-z][a-z0-9_-]{{0,63}})"
            )));
        }
        for (k, v) in [("description", &m.description), ("version", &m.version)] {
            if v.as_ref().is_some_and(|s| s.len() > 16_384) {
                return Err(bad(format!("{k} is longer than 16384 bytes")));
            }
        }
        Ok(m)
    }

    /// The manifest from OCI annotations: [`ANNOTATION`], else the standard title, description
    /// and version (asking for no rights). None: none of them.
    pub fn from_annotations(
        a: &std::collections::BTreeMap<String, String>,
    ) -> Result<Option<AppManifest>> {
        if let Some(text) = a.get(ANNOTATION) {
            return Self::parse(text.as_bytes(), &format!("annotation {ANNOTATION}")).map(Some);
        }
        let get = |k: &str| a.get(&format!("org.opencontainers.image.{k}")).cloned();
        let m = AppManifest {
            name: None,
            description: get("description"),
            version: get("version"),
            rights: AppRights::default(),
        };
        Ok((m != AppManifest::default()).then_some(m))
    }
}

impl AppRights {
    /// The rights a create or upgrade call grants: exactly what it gives.
    pub fn granted(f: &crate::apps::AppFields) -> AppRights {
        AppRights {
            rights: f.rights_over(&Rights::default()),
            allow_hosts: f
                .allow_hosts
                .as_ref()
                .and_then(|v| serde_json::from_value(v.clone()).ok())
                .unwrap_or_default(),
            limits: f
                .limits
                .as_ref()
                .and_then(|v| v.as_object().cloned())
                .unwrap_or_default(),
        }
    }

    /// Each right where asked and granted differ: `not granted` (asked, none given), `less`
    /// (given in part), `more` (given, not asked).
    pub fn differences(asked: &AppRights, granted: &AppRights) -> Vec<Value> {
        let mut out = vec![];
        let mut diff = |right: &str, a: Value, g: Value, change: &str| {
            out.push(json!({"right": right, "asked": a, "granted": g, "change": change}));
        };
        let set_diff = |a: &[String], g: &[String]| -> Option<&'static str> {
            let missing = a.iter().any(|x| !g.contains(x));
            let extra = g.iter().any(|x| !a.contains(x));
            match (missing, extra) {
                (false, false) => None,
                (true, _) if g.is_empty() => Some("not granted"),
                (true, _) => Some("less"),
                (false, true) => Some("more"),
            }
        };
        for (right, a, g) in [
            ("write", &asked.rights.write, &granted.rights.write),
            ("allow_hosts", &asked.allow_hosts, &granted.allow_hosts),
        ] {
            if let Some(c) = set_diff(a, g) {
                diff(right, json!(a), json!(g), c);
            }
        }
        for (right, a, g) in [
            ("ddl", asked.rights.ddl, granted.rights.ddl),
            ("maintain", asked.rights.maintain, granted.rights.maintain),
        ] {
            if a != g {
                diff(
                    right,
                    a.into(),
                    g.into(),
                    if a { "not granted" } else { "more" },
                );
            }
        }
        // A limit is a budget, not a right: only what the app asked for and does not get (a
        // smaller budget than it says it needs) is a difference.
        let lg = limits_of(&granted.limits);
        for (k, a) in &asked.limits {
            let g = &lg[k];
            if let (Some(x), Some(y)) = (a.as_u64(), g.as_u64())
                && y < x
            {
                diff(&format!("limits.{k}"), a.clone(), g.clone(), "less");
            }
        }
        out
    }

    /// Whether `self` asks for anything `than` does not: a wider write, ddl, maintain, a new
    /// host, or a limit above what `than` comes to.
    pub fn exceeds(&self, than: &AppRights) -> bool {
        Self::differences(self, than)
            .iter()
            .any(|d| d["change"] != "more")
    }
}

/// The limits a partial set comes to, over the defaults (as JSON, every key).
fn limits_of(partial: &serde_json::Map<String, Value>) -> Value {
    let l = Limits::default()
        .merged(&Value::Object(partial.clone()))
        .unwrap_or_default();
    serde_json::to_value(l).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manifest_is_checked_field_by_field() {
        let ok = AppManifest::parse(
            br#"{"name":"planning","version":"0.2.0","rights":{"write":["work.planning.*"],"ddl":true,"limits":{"memory_mb":128}}}"#,
            "t",
        )
        .unwrap();
        assert_eq!(ok.rights.rights.write, ["work.planning.*"]);
        for bad in [
            r#"{"rights":{"write":["not a pattern"]}}"#,
            r#"{"rights":{"writes":[]}}"#,
            r#"{"rights":{"write":[],"call_tools":["*"]}}"#,
            r#"{"rights":{"write":[]},"extra":1}"#,
            r#"{"name":"Bad Name"}"#,
            r#"{"rights":{"limits":{"memory_mb":"lots"}}}"#,
            r#"[1,2]"#,
        ] {
            let e = AppManifest::parse(bad.as_bytes(), "t").unwrap_err();
            assert!(e.message.contains("malformed"), "{bad}: {}", e.message);
        }
    }

    #[test]
    fn differences_say_what_was_not_granted() {
        let asked = AppRights {
            rights: Rights {
                write: vec!["work.a.*".into()],
                ddl: true,
                ..Default::default()
            },
            ..Default::default()
        };
        let none = AppRights::default();
        let d = AppRights::differences(&asked, &none);
        assert_eq!(d.len(), 2, "{d:?}");
        assert!(d.iter().all(|x| x["change"] == "not granted"));
        assert!(asked.exceeds(&none));
        assert!(!none.exceeds(&asked));
        assert!(!asked.exceeds(&asked));
        // A limit below the default is no difference; one above what is granted is.
        let mut small = serde_json::Map::new();
        small.insert("timeout_ms".into(), 10_000.into());
        let modest = AppRights {
            limits: small,
            ..Default::default()
        };
        assert!(AppRights::differences(&modest, &none).is_empty());
        let mut big = serde_json::Map::new();
        big.insert("memory_mb".into(), 1024.into());
        let hungry = AppRights {
            limits: big,
            ..Default::default()
        };
        let d = AppRights::differences(&hungry, &none);
        assert_eq!(d[0]["right"], "limits.memory_mb");
        assert_eq!(d[0]["change"], "less");
        assert!(hungry.exceeds(&modest));
    }
}
