//! The tool index: every tool an agent can reach through the engine (its operations and each
//! app's tools), searchable by words and by meaning, so an agent finds the right one among
//! thousands without listing them all (operation `search_tools`).
//!
//! The aggregator hands the index each app's listing whenever the namespace changes
//! ([`ToolIndex::set_apps`]); the engine's operations are an app named `engine`. Each app is a
//! [`Segment`] of its own: its words ([`words`]) in an inverted index ranked by BM25, and one
//! vector per tool from the semantic index's model (when it has one). A changed listing is
//! applied at the next search, at most once a second per app (an app that floods
//! `list_changed` costs one rebuild a second); a removed app leaves at once. Nothing here is
//! saved: the listings the aggregator keeps are the truth, and the index is rebuilt from them
//! at start.
//!
//! Both rankings are fused by their scores ([`fusion`]), and a query's arguments are read as
//! what they are ([`words::typed`]).

mod fusion;
mod segment;
mod words;

use crate::engine::args::{SearchMode, SearchTools};
use crate::engine::semantic::{self, model::Model};
use crate::engine::{Engine, Reads};
use crate::error::{Error, Result};
use segment::{Segment, ToolDoc};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

pub use segment::ToolDoc as Tool;

/// The most tools one answer holds.
pub const MAX_LIMIT: u64 = 50;
/// The "app" the vault's skills are found under (no app can be named so): `search_tools`
/// finds skills too, as `kind: "skill"`.
pub const SKILLS: &str = "@skills";
/// How often an app's changed listing is applied at most.
const MIN_REBUILD: Duration = Duration::from_secs(1);

/// The index (the engine holds one).
#[derive(Default)]
pub struct ToolIndex {
    /// The applied segments, by app.
    segments: RwLock<BTreeMap<String, Arc<Segment>>>,
    /// The listings not applied yet.
    pending: Mutex<Pending>,
    /// When the index last changed (ms since the epoch).
    changed_at: std::sync::atomic::AtomicI64,
    /// The vault's skills, as last read.
    skills: Mutex<Skills>,
}

/// The vault's skills in the index: their segment, each one's table, and the journal's seq
/// they were read at (read again after a write, at most once a second).
#[derive(Default)]
struct Skills {
    seq: Option<i64>,
    read: Option<std::time::Instant>,
    tables: HashMap<String, String>,
    segment: Option<Arc<Segment>>,
}

/// The apps listed last, and their listings not applied yet (their app's last rebuild was
/// under a second ago, or no search came since).
#[derive(Default)]
struct Pending {
    listed: std::collections::HashSet<String>,
    waiting: HashMap<String, (u64, Vec<ToolDoc>)>,
}

/// One tool found (tool `doc` of `segment`, the app `app`'s), with its fused score and where
/// it ranked by words and by meaning.
pub struct Hit {
    /// The app that serves it (`engine` for operations).
    pub app: String,
    doc: usize,
    segment: Arc<Segment>,
    /// Its fused score.
    pub score: f64,
    /// Its rank by words, if they found it.
    pub text_rank: Option<usize>,
    /// Its rank by meaning, if it found it.
    pub meaning_rank: Option<usize>,
    /// The query's words the tool holds.
    pub words: Vec<String>,
}

impl Hit {
    /// The tool.
    pub fn tool(&self) -> &ToolDoc {
        &self.segment.docs[self.doc]
    }
}

impl ToolIndex {
    /// The listings now, every app's (its tools, in order): an app not named is removed at
    /// once; a changed one is applied at the next search (at most once a second per app).
    pub fn set_apps(&self, apps: Vec<(String, Vec<ToolDoc>)>) {
        let mut pending = self.pending.lock().unwrap();
        pending.listed = apps.iter().map(|(a, _)| a.clone()).collect();
        let Pending { listed, waiting } = &mut *pending;
        {
            let mut segs = self.segments.write().unwrap();
            let before = segs.len();
            segs.retain(|app, _| listed.contains(app));
            if segs.len() != before {
                self.touch();
            }
        }
        waiting.retain(|app, _| listed.contains(app));
        let segs = self.segments.read().unwrap();
        for (app, docs) in apps {
            let hash = segment::hash(&docs);
            if segs.get(&app).is_some_and(|s| s.hash == hash) {
                waiting.remove(&app);
            } else if waiting.get(&app).is_none_or(|p| p.0 != hash) {
                waiting.insert(app, (hash, docs));
            }
        }
    }

    fn touch(&self) {
        let now = chrono::Utc::now().timestamp_millis();
        self.changed_at
            .store(now, std::sync::atomic::Ordering::Relaxed);
    }

    /// Applies the pending listings that are due, and gives vectors of `model` to segments
    /// that have none of it.
    fn apply_due(&self, model: Option<&Arc<Model>>) {
        let due: Vec<(String, u64, Vec<ToolDoc>)> = {
            let mut pending = self.pending.lock().unwrap();
            let segs = self.segments.read().unwrap();
            let ready: Vec<String> = pending
                .waiting
                .keys()
                .filter(|app| {
                    segs.get(*app)
                        .is_none_or(|s| s.built.elapsed() >= MIN_REBUILD)
                })
                .cloned()
                .collect();
            ready
                .into_iter()
                .filter_map(|app| pending.waiting.remove(&app).map(|(h, d)| (app, h, d)))
                .collect()
        };
        // Segments without vectors of this model (but those built anew just below).
        let stale: Vec<(String, Arc<Segment>)> = {
            let segs = self.segments.read().unwrap();
            segs.iter()
                .filter(|(a, _)| !due.iter().any(|(d, _, _)| d == *a))
                .filter(|(_, s)| model.is_some_and(|m| !s.has_vectors_of(m)))
                .map(|(a, s)| (a.clone(), s.clone()))
                .collect()
        };
        if due.is_empty() && stale.is_empty() {
            return;
        }
        let built: Vec<(String, Segment)> = due
            .into_iter()
            .map(|(app, hash, docs)| {
                let s = Segment::build(hash, docs, model.map(|m| &**m));
                (app, s)
            })
            .chain(stale.into_iter().map(|(app, s)| {
                let s = s.with_vectors(model.map(|m| &**m));
                (app, s)
            }))
            .collect();
        // The locks in the order `set_apps` takes them: the listings, then the segments.
        let pending = self.pending.lock().unwrap();
        let mut segs = self.segments.write().unwrap();
        for (app, s) in built {
            // Removed while it was built: it stays removed.
            if pending.listed.contains(&app) {
                segs.insert(app, Arc::new(s));
            }
        }
        drop(segs);
        drop(pending);
        self.touch();
    }

    /// Tools by words, and by meaning when `model` is given: the `limit` best of the tools
    /// `may` accepts (app, tool name), in the apps `only` names (all if none).
    pub fn search(
        &self,
        query: &str,
        limit: usize,
        only: Option<&[String]>,
        may: &dyn Fn(&str, &str) -> bool,
        model: Option<&Arc<Model>>,
        mode: SearchMode,
    ) -> Vec<Hit> {
        self.apply_due(model);
        let skills = self.skills.lock().unwrap().segment.clone();
        let segs: Vec<(String, Arc<Segment>)> = self
            .segments
            .read()
            .unwrap()
            .iter()
            .map(|(a, s)| (a.clone(), s.clone()))
            .chain(skills.map(|s| (SKILLS.to_string(), s)))
            .filter(|(app, _)| only.is_none_or(|o| o.iter().any(|a| a == app)))
            .collect();
        // Its arguments (paths, file names, addresses) as what they are: a tool's words say
        // "path", not "/home/dana/web".
        let query = &words::typed(query);
        let forms = words::forms(query);
        let q: Vec<String> = forms.iter().map(|(_, w)| w.clone()).collect();
        // Keys: (segment, doc) of the tools the caller may call.
        let ok: Vec<Vec<bool>> = segs
            .iter()
            .map(|(app, s)| s.docs.iter().map(|d| may(app, &d.name)).collect())
            .collect();
        let depth = semantic::FUSION_DEPTH.max(limit);
        let by_text = match mode {
            SearchMode::Semantic => vec![],
            _ => segment::bm25(&segs, &ok, &q, depth),
        };
        let by_meaning = model
            .filter(|_| mode != SearchMode::Text)
            .and_then(|m| semantic::embed_mean(m, query).map(|v| (m, v)))
            .map(|(m, v)| segment::nearest(&segs, &ok, m, &v, depth))
            .unwrap_or_default();
        fusion::fuse(&by_text, &by_meaning)
            .into_iter()
            .take(limit)
            .map(|((si, di), score, ranks)| {
                let (app, s) = &segs[si];
                Hit {
                    app: app.clone(),
                    doc: di,
                    segment: s.clone(),
                    score,
                    text_rank: ranks[0],
                    meaning_rank: ranks[1],
                    words: s.matched(di, &forms),
                }
            })
            .collect()
    }

    /// How many tools it holds (applied), and about how many bytes.
    pub fn size(&self) -> (usize, usize) {
        let segs = self.segments.read().unwrap();
        segs.values()
            .fold((0, 0), |(n, b), s| (n + s.docs.len(), b + s.bytes()))
    }

    /// The table of the skill `name`, as last read.
    pub fn skill_table(&self, name: &str) -> Option<String> {
        self.skills.lock().unwrap().tables.get(name).cloned()
    }

    /// Whether an app's listing is waiting to be applied.
    pub fn pending(&self) -> usize {
        self.pending.lock().unwrap().waiting.len()
    }
}

impl Engine {
    /// Reads the vault's skills into the index again if the journal moved since they were read
    /// (at most once a second), or the model changed.
    fn refresh_skills(&self, model: Option<&Arc<Model>>) {
        let seq = self.last_seq();
        {
            let s = self.tools.skills.lock().unwrap();
            let fresh = s.seq == Some(seq) || s.read.is_some_and(|t| t.elapsed() < MIN_REBUILD);
            let vectors = s
                .segment
                .as_ref()
                .is_none_or(|seg| model.is_none_or(|m| seg.has_vectors_of(m)));
            if fresh && vectors {
                return;
            }
        }
        let Ok(found) = self.skills(&Reads::EVERY, None) else {
            return;
        };
        let context = ToolDoc::context("skill", "an agent skill of the vault");
        let docs: Vec<ToolDoc> = found
            .iter()
            .map(|s| ToolDoc::new(&s.name, &s.description, json!({}), context.clone()))
            .collect();
        let hash = segment::hash(&docs);
        let mut s = self.tools.skills.lock().unwrap();
        s.seq = Some(seq);
        s.read = Some(std::time::Instant::now());
        s.tables = found.into_iter().map(|k| (k.name, k.table)).collect();
        let same = s
            .segment
            .as_ref()
            .is_some_and(|seg| seg.hash == hash && model.is_none_or(|m| seg.has_vectors_of(m)));
        if !same {
            s.segment = (!docs.is_empty())
                .then(|| Arc::new(Segment::build(hash, docs, model.map(|m| &**m))));
            self.tools.touch();
        }
    }

    /// Operation `search_tools`: the tools `may` accepts (the caller's `call_tools`, its
    /// rights), best first.
    pub fn search_tools(&self, a: SearchTools, may: &dyn Fn(&str, &str) -> bool) -> Result<Value> {
        super::search::check_query(&a.query)?;
        let limit = a.limit.unwrap_or(10);
        if !(1..=MAX_LIMIT as i64).contains(&limit) {
            return Err(Error::invalid(format!("limit {limit} is out of range"))
                .column("limit")
                .rule("limit")
                .hint(format!("give a limit from 1 to {MAX_LIMIT}")));
        }
        if let Some(apps) = &a.apps {
            let pending = self.tools.pending.lock().unwrap();
            if let Some(bad) = apps
                .iter()
                .find(|a| *a != SKILLS && !pending.listed.contains(*a))
            {
                return Err(Error::invalid(format!("no app named {bad:?} lists tools"))
                    .column("apps")
                    .rule("apps")
                    .hint("name apps that list tools (each tool found names its app), engine for the engine's operations, or @skills for the vault's skills"));
            }
        }
        let model = self.semantic.model();
        let mode = match (a.mode, &model) {
            (Some(SearchMode::Semantic), None) => {
                return Err(Error::invalid(format!(
                    "tools cannot be found by meaning: the semantic index is {}",
                    self.semantic.state().text()
                ))
                .column("mode")
                .rule("mode")
                .hint("leave mode out (words only), or give the server a model"));
            }
            (Some(m), Some(_)) => m,
            (_, None) => SearchMode::Text,
            (None, Some(_)) => SearchMode::Hybrid,
        };
        self.refresh_skills(model.as_ref());
        let hits = self.tools.search(
            &a.query,
            limit as usize,
            a.apps.as_deref(),
            may,
            model.as_ref(),
            mode,
        );
        let tools: Vec<Value> = hits
            .iter()
            .map(|h| {
                let d = h.tool();
                let mut ranks = serde_json::Map::new();
                if let Some(r) = h.text_rank {
                    ranks.insert("text".into(), json!(r));
                }
                if let Some(r) = h.meaning_rank {
                    ranks.insert("semantic".into(), json!(r));
                }
                let score = (h.score * 10_000.0).round() / 10_000.0;
                if h.app == SKILLS {
                    // A skill: read its SKILL.md (resources/read) for its instructions.
                    return json!({
                        "kind": "skill",
                        "name": d.name,
                        "description": d.description,
                        "uri": super::skills::SkillUri::of(&d.name),
                        "score": score,
                        "ranks": ranks,
                        "words": h.words,
                    });
                }
                json!({
                    "kind": "tool",
                    "name": d.name,
                    "description": d.description,
                    "inputSchema": d.input_schema,
                    "app": h.app,
                    "score": score,
                    "ranks": ranks,
                    "words": h.words,
                })
            })
            .collect();
        let at = self
            .tools
            .changed_at
            .load(std::sync::atomic::Ordering::Relaxed);
        let indexed_at = chrono::DateTime::from_timestamp_millis(at)
            .map(|d| d.to_rfc3339_opts(chrono::SecondsFormat::Millis, true));
        let mut out = json!({"tools": tools, "indexedAt": indexed_at, "mode": mode});
        if model.is_none() {
            out["note"] = json!(format!(
                "ranked by words only: the semantic index is {}",
                self.semantic.state().text()
            ));
        }
        Ok(out)
    }

    /// The tool index (the aggregator keeps it current).
    pub fn tools(&self) -> &ToolIndex {
        &self.tools
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn app(names: &[&str]) -> Vec<ToolDoc> {
        let context = ToolDoc::context("app", "");
        names
            .iter()
            .map(|n| ToolDoc::new(n, &format!("{n} things"), json!({}), context.clone()))
            .collect()
    }

    fn found(index: &ToolIndex, query: &str) -> Vec<String> {
        let hits = index.search(query, 10, None, &|_, _| true, None, SearchMode::Text);
        hits.iter().map(|h| h.tool().name.clone()).collect()
    }

    /// A new app is searchable at once; a changed listing is applied at most once a second
    /// (an app that floods its listing costs one rebuild a second); a removed app leaves at
    /// once.
    #[test]
    fn listings_are_applied_at_most_once_a_second_and_removals_at_once() {
        let index = ToolIndex::default();
        index.set_apps(vec![("a".into(), app(&["list_issues"]))]);
        assert_eq!(found(&index, "issues"), ["list_issues"]);
        for n in 0..50 {
            let name = format!("create_issue_{n}");
            index.set_apps(vec![("a".into(), app(&["list_issues", &name]))]);
        }
        // Within the second: the first listing still, the last one waiting.
        assert_eq!(found(&index, "issues"), ["list_issues"]);
        assert_eq!(index.pending(), 1);
        std::thread::sleep(MIN_REBUILD);
        let now = found(&index, "issues");
        assert_eq!(now.len(), 2, "{now:?}");
        assert!(now.contains(&"create_issue_49".to_string()), "{now:?}");
        assert_eq!(index.pending(), 0);
        index.set_apps(vec![]);
        assert!(found(&index, "issues").is_empty());
        assert_eq!(index.size().0, 0);
    }

    /// Only what the caller may call is found, and only in the apps asked.
    #[test]
    fn a_search_answers_only_what_may_be_called_in_the_apps_asked() {
        let index = ToolIndex::default();
        index.set_apps(vec![
            ("a".into(), app(&["read_notes", "write_notes"])),
            ("b".into(), app(&["read_mail"])),
        ]);
        let may = |_: &str, name: &str| name != "write_notes";
        let hits = index.search(
            "read write notes mail",
            10,
            None,
            &may,
            None,
            SearchMode::Text,
        );
        let names: Vec<&str> = hits.iter().map(|h| h.tool().name.as_str()).collect();
        assert!(!names.contains(&"write_notes"), "{names:?}");
        assert!(names.contains(&"read_mail"), "{names:?}");
        let only = ["b".to_string()];
        let hits = index.search(
            "read",
            10,
            Some(&only),
            &|_, _| true,
            None,
            SearchMode::Text,
        );
        assert!(hits.iter().all(|h| h.app == "b"));
    }
}
