//! The one vocabulary of what a principal may do beyond reading: write rows of some tables,
//! change schemas, run maintenance. An app entry, a grant's consent, an app's manifest (what it
//! asks) and the consent form all hold this type; [`super::authorize`] reads it.
//!
//! It is flattened into an app entry (`AppRecord`), a grant's consent (`oauth::Ticked`, also the
//! consent form's), an app's manifest (`AppRights`, with its hosts and limits) and a token's
//! `AppScope`.

use serde::{Deserialize, Serialize};

/// Rights beyond reading, given to an app entry or a grant, or asked by an app's manifest.
/// Flattened into each of those, so its keys are theirs: `write`, `ddl`, `maintain`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rights {
    /// The tables it may write: full names or patterns (`catalog.schema.*`, `catalog.*`, `*`).
    #[serde(default)]
    pub write: Vec<String>,
    /// Whether it may create, alter and drop tables (those its write patterns cover).
    #[serde(default)]
    pub ddl: bool,
    /// Whether it may run maintenance (vacuum, rebuild_index, settings but the owner's).
    #[serde(default)]
    pub maintain: bool,
}

impl Rights {
    /// The keys of the rights, as every form of them spells them.
    pub const KEYS: [&'static str; 3] = ["write", "ddl", "maintain"];
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rights_flatten_into_their_holder_with_the_same_keys() {
        #[derive(Serialize, Deserialize)]
        struct Holder {
            name: String,
            #[serde(flatten)]
            rights: Rights,
        }
        let h: Holder =
            serde_json::from_str(r#"{"name": "a", "write": ["x.y.*"], "maintain": true}"#).unwrap();
        assert_eq!(h.rights.write, ["x.y.*"]);
        assert!(h.rights.maintain && !h.rights.ddl);
        let v = serde_json::to_value(&h).unwrap();
        let mut keys: Vec<&str> = v.as_object().unwrap().keys().map(|k| k.as_str()).collect();
        keys.sort();
        assert_eq!(keys, ["ddl", "maintain", "name", "write"]);
    }
}
