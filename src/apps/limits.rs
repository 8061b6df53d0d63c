//! What one app may put in front of every agent, and how often a failing app is probed: the caps
//! on a listing (tools, bytes, pages), on each tool (description, input schema) and on an app's
//! instructions, and the probes' exponential backoff. Read once from the environment.

use rmcp::model::Tool;
use std::time::Duration;

/// The caps on what an app lists. A listing over `max_tools`, `max_bytes` or `max_pages` is
/// refused as a whole (its previous tools stay listed); a tool over `max_description` or
/// `max_schema` is skipped; instructions over `max_instructions` are cut.
#[derive(Debug, Clone, Copy)]
pub struct ListingCaps {
    /// Tools in one app's listing (`DATANOTES_APP_MAX_TOOLS`, 2,000).
    pub max_tools: usize,
    /// Bytes of one app's listing, its tools as JSON (`DATANOTES_APP_MAX_LISTING_BYTES`, 4 MiB);
    /// also the most one answer of a remote listing may hold.
    pub max_bytes: usize,
    /// Pages of one remote listing (`DATANOTES_APP_MAX_LISTING_PAGES`, 100).
    pub max_pages: usize,
    /// Bytes of one tool's description (`DATANOTES_APP_MAX_DESCRIPTION_BYTES`, 16 KiB).
    pub max_description: usize,
    /// Bytes of one tool's input schema as JSON (`DATANOTES_APP_MAX_SCHEMA_BYTES`, 64 KiB).
    pub max_schema: usize,
    /// Bytes of one app's instructions (`DATANOTES_APP_MAX_INSTRUCTIONS_BYTES`, 16 KiB).
    pub max_instructions: usize,
}

impl Default for ListingCaps {
    fn default() -> Self {
        ListingCaps {
            max_tools: 2_000,
            max_bytes: 4 << 20,
            max_pages: 100,
            max_description: 16 << 10,
            max_schema: 64 << 10,
            max_instructions: 16 << 10,
        }
    }
}

impl ListingCaps {
    /// The defaults, overridden by the `DATANOTES_APP_MAX_*` variables.
    pub fn from_env() -> ListingCaps {
        let d = ListingCaps::default();
        let n = |k: &str, v: usize| crate::knobs::num(k, v as u64).max(1) as usize;
        ListingCaps {
            max_tools: n("DATANOTES_APP_MAX_TOOLS", d.max_tools),
            max_bytes: n("DATANOTES_APP_MAX_LISTING_BYTES", d.max_bytes),
            max_pages: n("DATANOTES_APP_MAX_LISTING_PAGES", d.max_pages),
            max_description: n("DATANOTES_APP_MAX_DESCRIPTION_BYTES", d.max_description),
            max_schema: n("DATANOTES_APP_MAX_SCHEMA_BYTES", d.max_schema),
            max_instructions: n("DATANOTES_APP_MAX_INSTRUCTIONS_BYTES", d.max_instructions),
        }
    }

    /// Why a listing of `tools` tools, `bytes` bytes and `pages` pages is refused, if it is.
    pub fn listing_over(&self, tools: usize, bytes: usize, pages: usize) -> Option<String> {
        if tools > self.max_tools {
            Some(format!(
                "the app lists more than {} tools (the cap, DATANOTES_APP_MAX_TOOLS); its previous tools stay listed",
                self.max_tools
            ))
        } else if bytes > self.max_bytes {
            Some(format!(
                "the app's listing is over {} bytes (the cap, DATANOTES_APP_MAX_LISTING_BYTES); its previous tools stay listed",
                self.max_bytes
            ))
        } else if pages > self.max_pages {
            Some(format!(
                "the app's listing runs over more than {} pages (the cap, DATANOTES_APP_MAX_LISTING_PAGES); its previous tools stay listed",
                self.max_pages
            ))
        } else {
            None
        }
    }

    /// Cuts an app's resources, templates and prompts to the caps: `max_tools` of each, and
    /// `max_bytes` of them in all, in the app's order (a remote app's listing stops there as it
    /// is read; a WASM app's comes whole from its instance). Says what was cut, if anything.
    pub fn bound_content(&self, l: &mut crate::apps::backend::Listing) -> Option<String> {
        let mut bytes = 0usize;
        let mut cut = vec![];
        for (what, items) in [
            ("resources", &mut l.resources),
            ("resource templates", &mut l.templates),
            ("prompts", &mut l.prompts),
        ] {
            let keep = items
                .iter()
                .take(self.max_tools)
                .take_while(|i| {
                    bytes += serde_json::to_vec(i).map_or(0, |v| v.len());
                    bytes <= self.max_bytes
                })
                .count();
            if keep < items.len() {
                cut.push(format!(
                    "{} of its {} {what}",
                    items.len() - keep,
                    items.len()
                ));
                items.truncate(keep);
            }
        }
        (!cut.is_empty()).then(|| {
            format!(
                "the app lists more than the caps allow (DATANOTES_APP_MAX_TOOLS of each kind, DATANOTES_APP_MAX_LISTING_BYTES in all): {} are left out",
                cut.join(", ")
            )
        })
    }

    /// Why a tool is skipped for its size, if it is.
    pub fn tool_over(&self, t: &Tool) -> Option<String> {
        let desc = t.description.as_deref().map_or(0, str::len);
        if desc > self.max_description {
            return Some(format!(
                "its description is {desc} bytes, over the cap of {} (DATANOTES_APP_MAX_DESCRIPTION_BYTES)",
                self.max_description
            ));
        }
        let schema = serde_json::to_vec(&t.input_schema).map_or(0, |v| v.len());
        if schema > self.max_schema {
            return Some(format!(
                "its input schema is {schema} bytes, over the cap of {} (DATANOTES_APP_MAX_SCHEMA_BYTES)",
                self.max_schema
            ));
        }
        None
    }

    /// An app's instructions, cut at the cap (on a character boundary) with a note saying so.
    pub fn instructions<'a>(&self, app: &str, text: &'a str) -> std::borrow::Cow<'a, str> {
        if text.len() <= self.max_instructions {
            return text.into();
        }
        let mut end = self.max_instructions;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        format!(
            "{}\n[instructions of app {app} cut at {} bytes of {} (DATANOTES_APP_MAX_INSTRUCTIONS_BYTES)]",
            &text[..end],
            self.max_instructions,
            text.len()
        )
        .into()
    }
}

/// How long to wait before probing again an app that failed `failures` times in a row: the
/// base interval, doubled at each failure, at most `max`.
pub fn backoff(base: Duration, max: Duration, failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(20);
    base.saturating_mul(1 << doublings).min(max.max(base))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_max() {
        let s = Duration::from_secs;
        let got: Vec<_> = (1..=8).map(|f| backoff(s(10), s(300), f)).collect();
        assert_eq!(
            got,
            [s(10), s(20), s(40), s(80), s(160), s(300), s(300), s(300)]
        );
        assert_eq!(backoff(s(10), s(300), 1000), s(300));
    }

    #[test]
    fn instructions_are_cut_on_a_char_boundary() {
        let caps = ListingCaps {
            max_instructions: 5,
            ..ListingCaps::default()
        };
        assert_eq!(caps.instructions("a", "short"), "short");
        let cut = caps.instructions("a", "ééééé");
        assert!(cut.starts_with("éé\n[instructions of app a cut at 5 bytes of 10"));
    }

    #[test]
    fn content_is_cut_to_the_caps_in_the_apps_order() {
        use serde_json::json;
        let caps = ListingCaps {
            max_tools: 3,
            max_bytes: 200,
            ..ListingCaps::default()
        };
        let mut l = crate::apps::backend::Listing {
            resources: (0..5)
                .map(|i| json!({"uri": format!("note://{i}")}))
                .collect(),
            prompts: vec![json!({"name": "p"})],
            ..Default::default()
        };
        let why = caps.bound_content(&mut l).unwrap();
        assert_eq!(l.resources.len(), 3, "{why}");
        assert_eq!(l.prompts.len(), 1);
        assert!(why.contains("2 of its 5 resources"), "{why}");
        // Over the bytes: what comes after is left out.
        let mut big = crate::apps::backend::Listing {
            resources: vec![json!({"uri": "x".repeat(185)}), json!({"uri": "note://y"})],
            prompts: vec![json!({"name": "p"})],
            ..Default::default()
        };
        caps.bound_content(&mut big).unwrap();
        assert_eq!((big.resources.len(), big.prompts.len()), (1, 0));
        assert!(
            caps.bound_content(&mut big).is_none(),
            "within the caps now"
        );
    }
}
