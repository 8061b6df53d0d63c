//! The search operations: `search_notes` (full text, meaning, or both fused) and
//! `similar_notes` (the rows nearest in meaning to a row).
//!
//! `text` is the full-text index alone: every word must appear, ranked by BM25. `semantic` is
//! the semantic index alone. `hybrid` (the default while the semantic index is ready) fuses the
//! two rankings by reciprocal rank fusion, its full-text ranking taking any of the words, so a
//! question whose words are not all in a note still finds the notes closest to it.
//!
//! Here too: the operations' checks (query, limit, tables), and `rebuild_semantic_index`.

use super::args::{SearchMode, SearchNotes, SimilarNotes};
use super::semantic::{self, FUSION_DEPTH, Near, chunk};
use super::{Engine, Reads, index, journal, no_row};
use crate::error::{Error, Result};
use crate::names;
use serde_json::{Map, Value, json};

/// Where a long operation reports how far it is: `(done, total, message)`.
pub type ProgressFn = dyn Fn(u64, u64, &str) + Send + Sync;

/// The longest query, in bytes.
pub const MAX_QUERY_BYTES: usize = 4096;
/// The most hits an answer has.
pub const MAX_HITS: i64 = 1000;
/// The characters of a snippet made from a chunk.
const SNIPPET_CHARS: usize = 160;

fn check_limit(limit: Option<i64>, default: i64) -> Result<usize> {
    let limit = limit.unwrap_or(default);
    if !(1..=MAX_HITS).contains(&limit) {
        return Err(Error::invalid(format!("limit {limit} is out of range"))
            .column("limit")
            .rule("limit")
            .hint(format!("give a limit from 1 to {MAX_HITS}")));
    }
    Ok(limit as usize)
}

pub(super) fn check_query(q: &str) -> Result<()> {
    let bad = |msg: String, hint: &str| {
        Error::invalid(msg)
            .column("query")
            .rule("query")
            .hint(hint.to_string())
    };
    if q.trim().is_empty() {
        return Err(bad(
            "the query is empty".into(),
            "give words to look for, or a question in your own words",
        ));
    }
    if q.len() > MAX_QUERY_BYTES {
        return Err(bad(
            format!(
                "the query is {} bytes, over the {MAX_QUERY_BYTES} a query may have",
                q.len()
            ),
            "shorten it to its key words or a sentence or two; similar_notes finds notes like a whole row",
        ));
    }
    if q.chars()
        .any(|c| c.is_control() && !matches!(c, '\n' | '\r' | '\t'))
    {
        return Err(bad(
            "the query holds control characters (binary data?)".into(),
            "send plain text",
        ));
    }
    Ok(())
}

/// What to do when the semantic index has no model.
const HOW_TO_INSTALL: &str = "run datanotes model install (serve then finds the model by itself), or give one to serve --model DIR, DATANOTES_MODEL or the setting semantic_model";

impl Engine {
    /// The 409 of a search by meaning while the index cannot answer: `what`, and its state.
    fn not_ready(&self, what: &str) -> Error {
        Error::new(
            409,
            "semantic_unavailable",
            format!("{what}: {}", self.semantic.state().text()),
        )
        .hint(HOW_TO_INSTALL)
    }

    /// Checks `tables` (each readable by the caller, then served) and answers the tables to
    /// search: those, or none given, the tables the caller may read (None: every table).
    fn search_scope(
        &self,
        tables: Option<Vec<String>>,
        reads: Reads,
    ) -> Result<Option<Vec<String>>> {
        match tables.filter(|t| !t.is_empty()) {
            Some(tables) => {
                for t in &tables {
                    (reads.table)(t).map_err(|e| e.column("tables"))?;
                    self.table(t).map_err(|e| e.column("tables"))?;
                }
                Ok(Some(tables))
            }
            None => Ok(reads.among(self.table_names())),
        }
    }

    /// The rows changed since the semantic index's `through` (at most a million counted), while
    /// it is ready; `None` while it is not.
    pub fn semantic_pending(&self) -> Option<i64> {
        if !self.semantic.ready() {
            return None;
        }
        let through = self.semantic.through();
        Some(if through >= self.last_seq() {
            0
        } else {
            self.with_journal(|c| journal::rows_touched_after(c, through, 1_000_000))
                .unwrap_or(0)
        })
    }

    /// How far the semantic index is: `indexedThrough`, `pending` (rows changed since), and its
    /// state.
    fn index_progress(&self, out: &mut Map<String, Value>) {
        let status = self.semantic.status(false);
        if let Some(pending) = self.semantic_pending() {
            out.insert("indexedThrough".into(), json!(self.semantic.through()));
            out.insert("pending".into(), json!(pending));
        } else {
            out.insert("indexedThrough".into(), Value::Null);
            out.insert("pending".into(), Value::Null);
        }
        out.insert("semantic".into(), status);
    }

    /// A snippet of a row found by meaning: its best chunk, from the row as it is now.
    fn chunk_snippet(&self, near: &Near) -> String {
        let Ok(t) = self.table(&near.table) else {
            return String::new();
        };
        let Ok(Some(row)) = self.with_index(|c| index::get_row(c, &t, &near.id)) else {
            return String::new();
        };
        let cols = chunk::columns(&t).unwrap_or_default();
        let chunks = chunk::chunks(&chunk::head(&cols, &row.values), &row.body);
        chunks
            .get(near.chunk)
            .or(chunks.first())
            .map(|c| chunk::snippet(c.own(), SNIPPET_CHARS))
            .unwrap_or_default()
    }

    fn near_hit(&self, rank: usize, n: &Near) -> Value {
        json!({
            "table": n.table, "id": n.id, "score": round(n.score as f64), "snippet": self.chunk_snippet(n),
            "version": n.version, "ranks": {"semantic": rank},
        })
    }

    /// Operation `search_notes`: in the tables the caller may read.
    pub fn search_notes(&self, a: SearchNotes, reads: Reads) -> Result<Value> {
        check_query(&a.query)?;
        let limit = check_limit(a.limit, 20)?;
        let only = self.search_scope(a.tables, reads)?;
        let allowed = in_scope(&only);
        let ready = self.semantic.ready();
        let mut out = Map::new();
        let mode = match (a.mode, ready) {
            (Some(SearchMode::Semantic), false) => {
                return Err(self
                    .not_ready("the semantic index is not ready")
                    .column("mode")
                    .rule("mode"));
            }
            (Some(m), _) if m != SearchMode::Hybrid || ready => m,
            (None, true) => SearchMode::Hybrid,
            (_, false) => {
                out.insert(
                    "note".into(),
                    json!(format!(
                        "answered by full text only: the semantic index is {}",
                        self.semantic.state().text()
                    )),
                );
                SearchMode::Text
            }
            (Some(m), true) => m,
        };
        let text = |any: bool, n: usize| match &only {
            Some(names) if names.is_empty() => Ok(vec![]),
            names => {
                let names = names.as_deref().unwrap_or_default();
                self.with_index(|c| index::search(c, &a.query, names, n as i64, any))
            }
        };
        let hits: Vec<Value> = match mode {
            SearchMode::Text => text(false, limit)?
                .into_iter()
                .enumerate()
                .map(|(i, (table, id, score, snippet))| {
                    json!({"table": table, "id": id, "score": score, "snippet": snippet, "ranks": {"text": i + 1}})
                })
                .collect(),
            SearchMode::Semantic => self
                .semantic
                .nearest(&a.query, limit, &allowed, None)
                .unwrap_or_default()
                .iter()
                .enumerate()
                .map(|(i, n)| self.near_hit(i + 1, n))
                .collect(),
            SearchMode::Hybrid => {
                let depth = FUSION_DEPTH.max(limit);
                let by_text = text(true, depth)?;
                let by_meaning = self
                    .semantic
                    .nearest(&a.query, depth, &allowed, None)
                    .unwrap_or_default();
                let tk: Vec<(String, String)> =
                    by_text.iter().map(|h| (h.0.clone(), h.1.clone())).collect();
                let sk: Vec<(String, String)> = by_meaning
                    .iter()
                    .map(|h| (h.table.clone(), h.id.clone()))
                    .collect();
                let (k, text_weight) = semantic::fusion();
                semantic::fuse(&[(&tk, text_weight), (&sk, 1.0)], k)
                    .into_iter()
                    .take(limit)
                    .map(|((table, id), score, ranks)| {
                        let mut r = Map::new();
                        let mut hit = json!({"table": table, "id": id, "score": round(score)});
                        let mut snippet = String::new();
                        if let Some(t) = ranks[0] {
                            r.insert("text".into(), json!(t));
                            snippet = by_text[t - 1].3.clone();
                        }
                        if let Some(s) = ranks[1] {
                            r.insert("semantic".into(), json!(s));
                            let n = &by_meaning[s - 1];
                            hit["version"] = json!(n.version);
                            if snippet.is_empty() {
                                snippet = self.chunk_snippet(n);
                            }
                        }
                        hit["snippet"] = json!(snippet);
                        hit["ranks"] = Value::Object(r);
                        hit
                    })
                    .collect()
            }
        };
        out.insert("hits".into(), Value::Array(hits));
        out.insert("mode".into(), json!(mode));
        self.index_progress(&mut out);
        Ok(Value::Object(out))
    }

    /// Operation `similar_notes`: of a row the caller may read, in the tables it may read.
    pub fn similar_notes(&self, a: SimilarNotes, reads: Reads) -> Result<Value> {
        (reads.table)(&a.table)?;
        let t = self.table(&a.table)?;
        names::check_row_id(&a.table, &a.id)?;
        let limit = check_limit(a.limit, 10)?;
        let allowed = in_scope(&self.search_scope(a.tables, reads)?);
        let row = self
            .with_index(|c| index::get_row(c, &t, &a.id))?
            .ok_or_else(|| no_row(&a.table, &a.id))?;
        if !self.semantic.ready() {
            return Err(self.not_ready("the semantic index is not ready"));
        }
        let cols =
            chunk::columns(&t).unwrap_or_else(|| t.text_columns().map(str::to_string).collect());
        let text = format!("{}{}", chunk::head(&cols, &row.values), row.body);
        let hits: Vec<Value> = self
            .semantic
            .nearest(&text, limit, &allowed, Some((&a.table, &a.id)))
            .unwrap_or_default()
            .iter()
            .enumerate()
            .map(|(i, n)| self.near_hit(i + 1, n))
            .collect();
        let mut out = Map::new();
        out.insert("hits".into(), Value::Array(hits));
        self.index_progress(&mut out);
        Ok(Value::Object(out))
    }
}

/// The test of a table name of a search's scope (None: every table).
fn in_scope(only: &Option<Vec<String>>) -> impl Fn(&str) -> bool + use<> {
    let only = only.clone();
    move |t: &str| only.as_ref().is_none_or(|o| o.iter().any(|x| x == t))
}

/// A score to 6 significant decimals (the fusion's are sums of small fractions).
fn round(x: f64) -> f64 {
    (x * 1e6).round() / 1e6
}

impl Engine {
    /// Operation `rebuild_semantic_index`: embeds every row anew and switches to the new index
    /// once it is complete; `progress(done, total, message)` is called while it runs.
    pub fn rebuild_semantic_index(&self, progress: Option<&ProgressFn>) -> Result<Value> {
        self.semantic
            .rebuild(&|done, total| {
                if let Some(p) = progress {
                    p(done, total, &format!("embedded {done} of {total} rows"));
                }
            })
            .map_err(|why| {
                Error::new(
                    409,
                    "semantic_unavailable",
                    format!("the semantic index cannot be rebuilt: {why}"),
                )
                .hint(HOW_TO_INSTALL)
            })
    }

    /// Refuses a `semantic_model` setting whose folder does not hold a model that loads (the
    /// error names the file and what is wrong with it).
    pub fn check_semantic_model(&self, change: &Map<String, Value>) -> Result<()> {
        let Some(Value::String(dir)) = change.get("semantic_model") else {
            return Ok(());
        };
        if dir.trim().is_empty() {
            return Ok(());
        }
        semantic::model::Model::load(std::path::Path::new(dir.trim()), &self.root)
            .map(drop)
            .map_err(|why| {
                Error::invalid(why)
                    .column("semantic_model")
                    .rule("semantic_model")
                    .hint("give a folder with a model2vec model's config.json, tokenizer.json and model.safetensors (bash scripts/fetch-model installs one under target/models/), or \"\" for the one given to serve")
            })
    }
}
