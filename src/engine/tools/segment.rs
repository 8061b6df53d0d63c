//! One app's tools in the index: their words in an inverted index (BM25 over every segment
//! at once) and one vector per tool from the model.

use super::fusion::Key;
use super::words::words;
use crate::engine::semantic::model::Model;
use serde_json::Value;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::Instant;

/// The most bytes of a description, of a schema's words and of an app's instructions read
/// into the index (a tool's own listing bounds the rest).
const MAX_TEXT: usize = 4096;
const MAX_CONTEXT: usize = 600;
/// How many times a name's words count against a description's (2 to 5 were tried on the
/// retrieval set: 2 is best by a hair).
const NAME_WEIGHT: u32 = 2;
/// BM25's parameters (the usual ones).
const K1: f64 = 1.2;
const B: f64 = 0.75;

/// A tool as the index reads it.
#[derive(Clone, Debug)]
pub struct ToolDoc {
    /// Its name as agents call it.
    pub name: String,
    /// Its description.
    pub description: String,
    /// Its input schema.
    pub input_schema: Value,
    /// What is said of its app: its name and the start of its instructions.
    pub context: Arc<str>,
}

impl ToolDoc {
    /// The tool `name` of the app `app` (whose instructions are `instructions`).
    pub fn new(name: &str, description: &str, input_schema: Value, context: Arc<str>) -> Self {
        ToolDoc {
            name: name.to_string(),
            description: description.to_string(),
            input_schema,
            context,
        }
    }

    /// An app's context: its name and the start of its instructions.
    pub fn context(app: &str, instructions: &str) -> Arc<str> {
        format!("{app}. {}", cut(instructions, MAX_CONTEXT)).into()
    }

    /// Its parameters' names and descriptions, bounded.
    fn parameters(&self) -> String {
        let mut out = String::new();
        walk(&self.input_schema, &mut out, 0);
        cut(&out, MAX_TEXT).to_string()
    }

    /// What its vector is computed from: its app's name, its name and the first sentence of
    /// its description. A description's first sentence says what the tool does; the rest
    /// (when to use it, its caveats, its parameters) blurs a mean of word vectors. On the
    /// retrieval set the whole description made hybrid recall@5 0.893, its first sentence
    /// 0.909; its parameters made it worse (BENCHMARKS.md, `tools`).
    fn meaning(&self) -> String {
        format!(
            "{} {}. {}",
            self.context.split('.').next().unwrap_or(""),
            words(&self.name).join(" "),
            cut(first_sentence(&self.description), MAX_SENTENCE),
        )
    }
}

/// The most bytes of a description's first sentence that its vector is computed from.
const MAX_SENTENCE: usize = 400;

/// The first sentence of `text`: up to its first `. ` or line break (blank lines skipped).
fn first_sentence(text: &str) -> &str {
    let first = text.split(". ").next().unwrap_or("");
    first
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim()
}

/// A schema's property names and descriptions, two levels deep.
fn walk(schema: &Value, out: &mut String, depth: usize) {
    if depth > 2 || out.len() > MAX_TEXT {
        return;
    }
    let Some(props) = schema.get("properties").and_then(Value::as_object) else {
        return;
    };
    for (name, p) in props {
        out.push_str(name);
        out.push(' ');
        if let Some(d) = p.get("description").and_then(Value::as_str) {
            out.push_str(cut(d, 300));
            out.push(' ');
        }
        walk(p, out, depth + 1);
        if let Some(items) = p.get("items") {
            walk(items, out, depth + 1);
        }
    }
}

/// At most `n` bytes of `s`, cut at a character.
fn cut(s: &str, n: usize) -> &str {
    if s.len() <= n {
        return s;
    }
    let mut i = n;
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    &s[..i]
}

/// A digest of a listing: an app whose digest did not change is not rebuilt.
pub fn hash(docs: &[ToolDoc]) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for d in docs {
        d.name.hash(&mut h);
        d.description.hash(&mut h);
        d.input_schema.to_string().hash(&mut h);
        d.context.hash(&mut h);
    }
    h.finish()
}

/// One app's tools, indexed.
pub struct Segment {
    pub hash: u64,
    pub docs: Arc<Vec<ToolDoc>>,
    /// Word → (tool, how many times), by tool.
    postings: Arc<HashMap<String, Vec<(u32, u32)>>>,
    /// Each tool's length in words (weighted).
    lens: Arc<Vec<u32>>,
    /// The model's fingerprint and one vector per tool (`dim` floats each, unit length).
    vectors: Option<(String, usize, Vec<f32>)>,
    /// When it was built.
    pub built: Instant,
}

impl Segment {
    /// Indexes `docs`, with vectors of `model` if there is one.
    pub fn build(hash: u64, docs: Vec<ToolDoc>, model: Option<&Model>) -> Segment {
        let mut postings: HashMap<String, Vec<(u32, u32)>> = HashMap::new();
        let mut lens = Vec::with_capacity(docs.len());
        for (i, d) in docs.iter().enumerate() {
            let mut tf: HashMap<String, u32> = HashMap::new();
            let mut len = 0;
            let mut add = |text: &str, weight: u32| {
                for w in words(text) {
                    *tf.entry(w).or_default() += weight;
                    len += weight;
                }
            };
            add(&d.name, NAME_WEIGHT);
            add(cut(&d.description, MAX_TEXT), 1);
            add(&d.parameters(), 1);
            add(&d.context, 1);
            lens.push(len);
            for (w, n) in tf {
                postings.entry(w).or_default().push((i as u32, n));
            }
        }
        let s = Segment {
            hash,
            docs: Arc::new(docs),
            postings: Arc::new(postings),
            lens: Arc::new(lens),
            vectors: None,
            built: Instant::now(),
        };
        s.with_vectors(model)
    }

    /// The same segment with vectors of `model` (none without one).
    pub fn with_vectors(&self, model: Option<&Model>) -> Segment {
        let vectors = model.and_then(|m| {
            let texts: Vec<String> = self.docs.iter().map(ToolDoc::meaning).collect();
            let flat = if texts.is_empty() {
                vec![]
            } else {
                m.embed(&texts)?
            };
            Some((m.fingerprint.clone(), m.dim, flat))
        });
        Segment {
            hash: self.hash,
            docs: self.docs.clone(),
            postings: self.postings.clone(),
            lens: self.lens.clone(),
            vectors,
            built: self.built,
        }
    }

    /// Whether its vectors are `model`'s.
    pub fn has_vectors_of(&self, model: &Model) -> bool {
        self.vectors
            .as_ref()
            .is_some_and(|(f, _, _)| *f == model.fingerprint)
    }

    /// The words of a query (as written, as compared) tool `doc` holds, as written.
    pub fn matched(&self, doc: usize, query: &[(String, String)]) -> Vec<String> {
        let mut out: Vec<String> = query
            .iter()
            .filter(|(_, w)| {
                self.postings
                    .get(w)
                    .is_some_and(|p| p.binary_search_by_key(&(doc as u32), |e| e.0).is_ok())
            })
            .map(|(written, _)| written.clone())
            .collect();
        out.dedup();
        out
    }

    /// About how many bytes it holds.
    pub fn bytes(&self) -> usize {
        let docs: usize = self
            .docs
            .iter()
            .map(|d| d.name.len() + d.description.len() + d.input_schema.to_string().len() + 96)
            .sum();
        let postings: usize = self
            .postings
            .iter()
            .map(|(w, p)| w.len() + 48 + p.len() * 8)
            .sum();
        let vectors = self.vectors.as_ref().map_or(0, |v| v.2.len() * 4);
        docs + postings + vectors + self.lens.len() * 4
    }
}

/// The `depth` best tools (segment, tool), with their scores, for the words `q` by BM25, over
/// every segment's statistics, among those `ok` accepts.
pub fn bm25(
    segs: &[(String, Arc<Segment>)],
    ok: &[Vec<bool>],
    q: &[String],
    depth: usize,
) -> Vec<(Key, f64)> {
    let n: usize = segs.iter().map(|(_, s)| s.docs.len()).sum();
    if n == 0 || q.is_empty() {
        return vec![];
    }
    let total: u64 = segs
        .iter()
        .flat_map(|(_, s)| s.lens.iter())
        .map(|&l| l as u64)
        .sum();
    let avg = (total as f64 / n as f64).max(1.0);
    let mut terms: Vec<&String> = q.iter().collect();
    terms.sort();
    terms.dedup();
    let mut scores: HashMap<(usize, usize), f64> = HashMap::new();
    for t in terms {
        let df: usize = segs
            .iter()
            .filter_map(|(_, s)| s.postings.get(t))
            .map(Vec::len)
            .sum();
        if df == 0 {
            continue;
        }
        let idf = (1.0 + (n as f64 - df as f64 + 0.5) / (df as f64 + 0.5)).ln();
        for (si, (_, s)) in segs.iter().enumerate() {
            for &(d, tf) in s.postings.get(t).map_or(&[][..], |p| &p[..]) {
                if !ok[si][d as usize] {
                    continue;
                }
                let tf = tf as f64;
                let len = s.lens[d as usize] as f64;
                let part = idf * tf * (K1 + 1.0) / (tf + K1 * (1.0 - B + B * len / avg));
                *scores.entry((si, d as usize)).or_default() += part;
            }
        }
    }
    top(scores.into_iter().collect(), depth)
}

/// The `depth` tools (segment, tool), with their cosines, nearest to the unit vector `v` by
/// `model`, among those `ok` accepts.
pub fn nearest(
    segs: &[(String, Arc<Segment>)],
    ok: &[Vec<bool>],
    model: &Model,
    v: &[f32],
    depth: usize,
) -> Vec<(Key, f64)> {
    let mut scores = vec![];
    for (si, (_, s)) in segs.iter().enumerate() {
        let Some((f, dim, flat)) = &s.vectors else {
            continue;
        };
        if *f != model.fingerprint || *dim != v.len() {
            continue;
        }
        for (d, row) in flat.chunks_exact(*dim).enumerate() {
            if ok[si][d] {
                let dot: f32 = row.iter().zip(v).map(|(a, b)| a * b).sum();
                scores.push(((si, d), dot as f64));
            }
        }
    }
    top(scores, depth)
}

/// The `depth` best keys with their scores, best first (ties in listing order).
fn top(mut scores: Vec<(Key, f64)>, depth: usize) -> Vec<(Key, f64)> {
    scores.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    scores.truncate(depth);
    scores
}
