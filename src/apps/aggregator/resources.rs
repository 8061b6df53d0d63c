//! The apps' resources, resource templates and prompts in the one namespace, beside their tools,
//! and the one rule that names an app's resource URIs.
//!
//! **URIs.** An app's resource `S://R` is served as `S://<app>/R`: two apps' `file:///a` never
//! collide, the scheme is kept (an MCP Apps `ui://` stays `ui://`), and the app of a URI is
//! read back from it alone. The rewriting is the same everywhere a URI appears (listings,
//! templates, `resource_link` and embedded resources in tool results and prompts,
//! `_meta.ui.resourceUri` of a tool, `notifications/resources/updated`) and undone for the app
//! on the way in (`resources/read`, `resources/subscribe`, completions). A URI that cannot be
//! named so is skipped, with why, in the app's `skippedResources`: one without `://`, of the
//! engine's scheme `datanotes`, with a `..` segment, a control character, or over
//! [`MAX_URI_BYTES`].
//!
//! **Prompts** follow the tool-name rules: the engine's operation names and earlier apps'
//! prompts first (registration order); a name that is taken, listed twice or not a valid name
//! is skipped, shown in the app's `skippedPrompts`.

use super::Slot;
use crate::apps::limits::ListingCaps;
use crate::ops;
use serde_json::{Value, json};
use std::collections::{HashMap, HashSet};

/// The longest URI (or URI template) of an app that is served.
pub const MAX_URI_BYTES: usize = 2048;
/// The longest prompt description served (longer ones are cut).
const MAX_DESCRIPTION_BYTES: usize = 16 << 10;

/// The apps' resources, templates and prompts as served (URIs named by app), with the app of
/// each, in registration order.
#[derive(Default)]
pub(crate) struct Content {
    pub resources: Vec<(String, Value)>,
    pub templates: Vec<(String, Value)>,
    pub prompts: Vec<(String, Value)>,
    /// Each prompt's name as its app knows it (its served name without the app's prefix).
    pub prompt_own: Vec<String>,
    /// A prompt's index in `prompts`, by name.
    pub prompt_by_name: HashMap<String, usize>,
    /// What each app lists but cannot be served, with why.
    pub skipped_resources: HashMap<String, Vec<Value>>,
    pub skipped_prompts: HashMap<String, Vec<Value>>,
}

impl PartialEq for Content {
    fn eq(&self, o: &Content) -> bool {
        self.resources == o.resources && self.templates == o.templates && self.prompts == o.prompts
    }
}

/// Why an app's URI (or URI template) cannot be served, or None.
fn unfit_uri(uri: &str) -> Option<&'static str> {
    if uri.len() > MAX_URI_BYTES {
        return Some("the URI is longer than 2048 bytes");
    }
    if uri.chars().any(char::is_control) {
        return Some("the URI holds a control character");
    }
    let Some((scheme, rest)) = uri.split_once("://") else {
        return Some("the URI has no scheme://");
    };
    let valid_scheme = scheme.starts_with(|c: char| c.is_ascii_alphabetic())
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    if !valid_scheme {
        return Some("the URI's scheme is not valid");
    }
    if scheme.eq_ignore_ascii_case(crate::engine::resources::SCHEME) {
        return Some("the datanotes: scheme is the engine's");
    }
    if rest.split(['/', '?', '#']).any(|seg| seg == "..") {
        return Some("the URI has a .. segment");
    }
    None
}

/// The URI an app's `uri` is served as: `S://R` → `S://<app>/R`; or why it cannot be.
pub fn outer(app: &str, uri: &str) -> Result<String, &'static str> {
    if let Some(why) = unfit_uri(uri) {
        return Err(why);
    }
    let (scheme, rest) = uri.split_once("://").unwrap_or_default();
    Ok(format!("{scheme}://{app}/{rest}"))
}

/// What changed of the apps' resources, for the subscribed agents.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ResourceUpdate {
    /// One resource.
    One {
        /// The agent's session it is for (none: every subscriber).
        agent: Option<String>,
        /// Its served URI.
        uri: String,
    },
    /// Any resource of the app may have changed: a new version of it replaced the one that
    /// served them (an app whose resources follow the vault; its subscriptions are the door's).
    App(String),
}

impl ResourceUpdate {
    /// Whether the served URI `uri` is concerned, for the agent's session `agent` (none: a
    /// caller without one).
    pub fn concerns(&self, uri: &str, agent: Option<&str>) -> bool {
        match self {
            ResourceUpdate::One { agent: to, uri: u } => {
                u == uri && to.as_deref().is_none_or(|to| Some(to) == agent)
            }
            ResourceUpdate::App(app) => inner(uri).is_some_and(|(a, _)| a == app),
        }
    }
}

/// The app of a served URI and the URI as the app knows it; None: not an app's URI.
pub fn inner(uri: &str) -> Option<(&str, String)> {
    let (scheme, rest) = uri.split_once("://")?;
    let (app, rest) = rest.split_once('/')?;
    if app.is_empty() || scheme.eq_ignore_ascii_case(crate::engine::resources::SCHEME) {
        return None;
    }
    Some((app, format!("{scheme}://{rest}")))
}

/// Rewrites the URI at `v[key]` for `app`; false: it cannot be served (left as it is).
fn rename(app: &str, v: &mut Value, key: &str) -> bool {
    let Some(Value::String(u)) = v.get_mut(key) else {
        return false;
    };
    match outer(app, u) {
        Ok(o) => {
            *u = o;
            true
        }
        Err(_) => false,
    }
}

/// Names the URIs in an app's answer (a tool result, a read, a prompt) for the caller:
/// `resource_link` blocks, embedded resources, and a read's `contents`. A URI of the vault
/// (`datanotes:`) is left as it is: it names the engine's resource, which the caller reads
/// from the engine under its own rights. Any other URI that cannot be named is replaced by a
/// `datanotes:invalid-uri` marker, so it never points at another app.
pub fn name_uris(app: &str, v: &mut Value) {
    let fix = |b: &mut Value, key: &str| {
        let vault = b.get(key).and_then(Value::as_str).is_some_and(|u| {
            u.split_once(':')
                .is_some_and(|(s, _)| s.eq_ignore_ascii_case(crate::engine::resources::SCHEME))
        });
        if vault {
            return;
        }
        if b.get(key).is_some() && !rename(app, b, key) {
            b[key] = json!("datanotes:invalid-uri");
        }
    };
    let blocks = |arr: Option<&mut Value>, f: &dyn Fn(&mut Value)| {
        if let Some(Value::Array(a)) = arr {
            a.iter_mut().for_each(f);
        }
    };
    let block = |b: &mut Value| match b.get("type").and_then(Value::as_str) {
        Some("resource_link") => fix(b, "uri"),
        Some("resource") => {
            if let Some(r) = b.get_mut("resource") {
                fix(r, "uri")
            }
        }
        _ => {}
    };
    let Some(obj) = v.as_object_mut() else { return };
    // A tool result's content, or a read's contents.
    blocks(obj.get_mut("content"), &block);
    blocks(obj.get_mut("contents"), &|c| fix(c, "uri"));
    // A prompt's messages: each one content block.
    blocks(obj.get_mut("messages"), &|m| {
        if let Some(c) = m.get_mut("content") {
            block(c)
        }
    });
}

/// A tool's `_meta.ui.resourceUri` (the MCP Apps extension; also its older
/// `_meta["ui/resourceUri"]`), named for the app. One that cannot be named is removed.
pub fn name_tool_ui(app: &str, meta: &mut serde_json::Map<String, Value>) {
    if let Some(ui) = meta.get_mut("ui").and_then(Value::as_object_mut)
        && let Some(Value::String(u)) = ui.get("resourceUri")
    {
        match outer(app, u) {
            Ok(o) => {
                ui.insert("resourceUri".into(), json!(o));
            }
            Err(_) => {
                ui.remove("resourceUri");
            }
        }
    }
    if let Some(Value::String(u)) = meta.get("ui/resourceUri") {
        match outer(app, u) {
            Ok(o) => {
                meta.insert("ui/resourceUri".into(), json!(o));
            }
            Err(_) => {
                meta.remove("ui/resourceUri");
            }
        }
    }
}

/// Whether a tool is for the model: not one the MCP Apps extension marks as callable by its
/// view only (`_meta.ui.visibility` without `"model"`). Such a tool is still listed (hosts keep
/// it from the model); what the engine itself tells agents about tools leaves it out.
pub fn for_the_model(t: &rmcp::model::Tool) -> bool {
    let v = t
        .meta
        .as_ref()
        .and_then(|m| m.get("ui"))
        .and_then(|ui| ui.get("visibility"))
        .and_then(Value::as_array);
    match v {
        None => true,
        Some(v) => v.is_empty() || v.iter().any(|x| x == "model"),
    }
}

/// The content of the namespace from the apps' last known listings.
pub(super) fn resolve(slots: &[Slot], prefixes: &[String], caps: &ListingCaps) -> Content {
    let mut c = Content::default();
    let mut taken: HashMap<String, String> = ops::CATALOG
        .iter()
        .map(|o| (o.name.to_string(), "engine".to_string()))
        .collect();
    for (s, prefix) in slots.iter().zip(prefixes) {
        let Some(l) = &s.listing else { continue };
        let app = &s.name;
        let mut skip_r = |what: &Value, why: &str| {
            let uri: String = what
                .as_str()
                .unwrap_or("")
                .chars()
                .take(200)
                .map(|c| if c.is_control() { '\u{fffd}' } else { c })
                .collect::<String>();
            c.skipped_resources
                .entry(app.clone())
                .or_default()
                .push(json!({"uri": uri, "reason": why}));
        };
        for (items, key, out) in [
            (&l.resources, "uri", &mut c.resources),
            (&l.templates, "uriTemplate", &mut c.templates),
        ] {
            for r in items {
                let mut r = r.clone();
                let Some(u) = r.get(key).and_then(Value::as_str) else {
                    skip_r(&Value::Null, &format!("it has no {key}"));
                    continue;
                };
                match outer(app, u) {
                    Ok(o) => {
                        r[key] = json!(o);
                        out.push((app.clone(), r));
                    }
                    Err(why) => skip_r(&json!(u), why),
                }
            }
        }
        let mut seen = HashSet::new();
        for p in &l.prompts {
            let own = p.get("name").and_then(Value::as_str).unwrap_or("");
            // Listed with the app's tool prefix, as its tools are.
            let served = format!("{prefix}{own}");
            let name = served.as_str();
            let skip = if !super::valid_tool_name(own) || !super::valid_tool_name(name) {
                Some(
                    json!({"name": name.chars().take(80).collect::<String>(), "takenBy": null,
                            "reason": "the name must match ^[a-zA-Z0-9_-]{1,64}$"}),
                )
            } else if let Some(by) = taken.get(name) {
                Some(json!({"name": name, "takenBy": by}))
            } else if !seen.insert(name.to_string()) {
                Some(json!({"name": name, "takenBy": app, "reason": "listed twice by the app"}))
            } else if serde_json::to_vec(p).map_or(0, |v| v.len()) > caps.max_schema {
                Some(json!({"name": name, "takenBy": null,
                            "reason": format!("the prompt is over {} bytes", caps.max_schema)}))
            } else {
                None
            };
            match skip {
                Some(v) => c.skipped_prompts.entry(app.clone()).or_default().push(v),
                None => {
                    let mut p = p.clone();
                    p["name"] = json!(name);
                    if let Some(Value::String(d)) = p.get_mut("description")
                        && d.len() > MAX_DESCRIPTION_BYTES
                    {
                        *d = crate::feed::cut(d, MAX_DESCRIPTION_BYTES / 4);
                    }
                    taken.insert(name.to_string(), app.clone());
                    c.prompt_by_name.insert(name.to_string(), c.prompts.len());
                    c.prompts.push((app.clone(), p));
                    c.prompt_own.push(own.to_string());
                }
            }
        }
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_apps_uris_are_named_by_the_app_and_read_back() {
        for (uri, served) in [
            ("file:///a", "file://notes//a"),
            ("ui://widget/view.html", "ui://notes/widget/view.html"),
            (
                "test://static/resource/{id}",
                "test://notes/static/resource/{id}",
            ),
            ("https://x.org/a?b=c", "https://notes/x.org/a?b=c"),
        ] {
            let o = outer("notes", uri).unwrap();
            assert_eq!(o, served);
            assert_eq!(inner(&o), Some(("notes", uri.to_string())));
        }
        // Another app's prefix in a URI stays the app's own.
        let o = outer("a", "file://b/x").unwrap();
        assert_eq!(inner(&o), Some(("a", "file://b/x".to_string())));
        for bad in [
            "file:///a/../b",
            "x:no-authority",
            "datanotes://tables/a.b.c",
            "file:///a\u{0}b",
            "1x://a",
        ] {
            assert!(outer("a", bad).is_err(), "{bad}");
        }
        assert!(outer("a", &format!("file:///{}", "x".repeat(3000))).is_err());
        assert_eq!(inner("datanotes://tables/a.b.c"), None);
    }

    #[test]
    fn uris_in_answers_are_named_and_bad_ones_neutralised() {
        let mut v = json!({"content": [
            {"type": "text", "text": "file:///a"},
            {"type": "resource_link", "uri": "file:///a", "name": "a"},
            {"type": "resource", "resource": {"uri": "ui://w", "text": "x"}},
            {"type": "resource_link", "uri": "file:///../etc/passwd", "name": "b"},
            {"type": "resource_link", "uri": "datanotes://tables/a.b.c/rows/x", "name": "c"},
        ]});
        name_uris("app", &mut v);
        assert_eq!(v["content"][0]["text"], "file:///a");
        assert_eq!(v["content"][1]["uri"], "file://app//a");
        assert_eq!(v["content"][2]["resource"]["uri"], "ui://app/w");
        assert_eq!(v["content"][3]["uri"], "datanotes:invalid-uri");
        assert_eq!(v["content"][4]["uri"], "datanotes://tables/a.b.c/rows/x");
        let mut meta = json!({"ui": {"resourceUri": "ui://w"}, "ui/resourceUri": "ui://w"});
        name_tool_ui("app", meta.as_object_mut().unwrap());
        assert_eq!(meta["ui"]["resourceUri"], "ui://app/w");
        assert_eq!(meta["ui/resourceUri"], "ui://app/w");
    }
}
