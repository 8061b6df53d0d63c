//! The semantic index: every row's meaning as vectors, beside the full-text index, derived from
//! the files like the rest of `.datanotes/` and kept fresh off the write path.
//!
//! - `model.rs`: the embedding model (a model2vec folder, read safely);
//! - `chunk.rs`: what of a row is embedded, and a long body's chunks;
//! - `matrix.rs`: the vectors in memory (int8) and the exact nearest-neighbour scan;
//! - `store.rs`: the vectors on disk (`.datanotes/semantic.db`), tagged with the model;
//! - `worker/`: the thread that catches up with the journal, reconciles with the index at
//!   start, and rebuilds;
//! - this file: the shared state ([`Semantic`]), its status, and the searches it answers.
//!
//! A write never waits for it: the writer publishes a commit and nudges the worker, which reads
//! the rows the journal says changed (at their current version, from the index) and embeds them.
//! The index records the journal seq it covers (`through`); every answer says it.
//!
//! A hit names the version its vector was computed from. Vectors are tagged with the model's
//! fingerprint, and those of another model are never compared.

pub mod chunk;
pub mod matrix;
pub mod model;
pub mod pinned;
mod store;
mod worker;

use matrix::Matrix;
use model::Model;
use serde_json::{Value, json};
use std::path::PathBuf;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::time::Instant;

pub use worker::spawn;

/// Why there is no semantic index when no model was given.
pub(crate) const NO_MODEL: &str = "no model (datanotes model install puts one where serve finds it; or give serve --model DIR, DATANOTES_MODEL or the setting semantic_model)";

/// What the index can do now.
#[derive(Debug, Clone, PartialEq)]
pub enum State {
    /// The worker has not looked yet.
    Starting,
    /// Searches are answered and the index follows every write.
    Ready,
    /// Embedding every row (`done` of `total`); searches are answered from the previous index,
    /// if there is one, until this one is complete.
    Building {
        /// Rows embedded so far.
        done: u64,
        /// Rows to embed.
        total: u64,
    },
    /// No model (or a model that cannot be read): why, in plain words.
    Unavailable(String),
}

impl State {
    /// `ready`, `building 120/1000`, `unavailable: why`.
    pub fn text(&self) -> String {
        match self {
            State::Starting => "starting".into(),
            State::Ready => "ready".into(),
            State::Building { done, total } => format!("building {done}/{total}"),
            State::Unavailable(why) => format!("unavailable: {why}"),
        }
    }
    fn word(&self) -> &'static str {
        match self {
            State::Starting => "starting",
            State::Ready => "ready",
            State::Building { .. } => "building",
            State::Unavailable(_) => "unavailable",
        }
    }
}

/// The vectors searches use, with the model that made them (queries are embedded by it).
pub(crate) struct Live {
    pub model: Arc<Model>,
    pub matrix: Matrix,
}

/// What the worker is asked to do.
#[derive(Default)]
struct Control {
    nudged: bool,
    stop: bool,
    /// Rebuilds asked for, and done (a ticket each).
    asked: u64,
    done: u64,
    /// The outcome of the last rebuild.
    last: Option<Result<Value, String>>,
}

/// The semantic index's shared state: the engine holds it; the worker thread fills it.
pub struct Semantic {
    live: RwLock<Option<Live>>,
    state: Mutex<State>,
    /// The journal seq the vectors cover.
    through: AtomicI64,
    /// Since when the index has been behind the journal (none: caught up).
    behind_since: Mutex<Option<Instant>>,
    /// The longest it has been behind, in ms, since the start.
    max_lag_ms: AtomicU64,
    control: Mutex<Control>,
    wake: Condvar,
    /// The model folder of `--model` / `DATANOTES_MODEL` (the setting `semantic_model` wins),
    /// once the server has said (until then the worker waits: a commit at start must not
    /// report "no model" before the server gave one).
    default_model: Mutex<Option<Option<PathBuf>>>,
}

impl Default for Semantic {
    fn default() -> Self {
        Semantic {
            live: RwLock::new(None),
            state: Mutex::new(State::Starting),
            through: AtomicI64::new(0),
            behind_since: Mutex::new(None),
            max_lag_ms: AtomicU64::new(0),
            control: Mutex::new(Control::default()),
            wake: Condvar::new(),
            default_model: Mutex::new(None),
        }
    }
}

/// The fusion of the two rankings (reciprocal rank fusion): a hit's score is the sum over the
/// rankings that found it of `weight / (K + rank)`. Fixed on the "tune" half of the retrieval
/// benchmark (BENCHMARKS.md, `semantic`), which sets them with `DATANOTES_RRF_K` and
/// `DATANOTES_RRF_TEXT_WEIGHT_PCT` to try others.
pub const RRF_K: u64 = 5;
/// The full-text ranking's weight in the fusion, in percent of the semantic one's.
pub const RRF_TEXT_WEIGHT_PCT: u64 = 200;
/// How many of each ranking the fusion reads.
pub const FUSION_DEPTH: usize = 50;

/// The fusion's parameters in force: `(K, the full-text ranking's weight)`.
pub fn fusion() -> (f64, f64) {
    static P: std::sync::OnceLock<(f64, f64)> = std::sync::OnceLock::new();
    *P.get_or_init(|| {
        (
            crate::knobs::num("DATANOTES_RRF_K", RRF_K) as f64,
            crate::knobs::num("DATANOTES_RRF_TEXT_WEIGHT_PCT", RRF_TEXT_WEIGHT_PCT) as f64 / 100.0,
        )
    })
}

/// Fuses rankings (each a list of keys, best first) into one: (key, score, rank in each).
pub fn fuse<K: Clone + Eq + std::hash::Hash>(
    rankings: &[(&[K], f64)],
    k: f64,
) -> Vec<(K, f64, Vec<Option<usize>>)> {
    let parts: Vec<Vec<(K, f64)>> = rankings
        .iter()
        .map(|(ranking, weight)| {
            (ranking.iter().enumerate())
                .map(|(i, key)| (key.clone(), weight / (k + (i + 1) as f64)))
                .collect()
        })
        .collect();
    combine(&parts)
}

/// Adds up rankings (each a list of keys, best first, with what each adds to its key's
/// score) into one: (key, score, rank in each), best first (ties in the order first met).
/// Rank fusion here and the tool index's fusion by score both add up this way.
pub fn combine<K: Clone + Eq + std::hash::Hash>(
    rankings: &[Vec<(K, f64)>],
) -> Vec<(K, f64, Vec<Option<usize>>)> {
    let mut at: std::collections::HashMap<K, usize> = Default::default();
    let mut out: Vec<(K, f64, Vec<Option<usize>>)> = vec![];
    for (n, ranking) in rankings.iter().enumerate() {
        for (i, (key, part)) in ranking.iter().enumerate() {
            let ix = *at.entry(key.clone()).or_insert_with(|| {
                out.push((key.clone(), 0.0, vec![None; rankings.len()]));
                out.len() - 1
            });
            out[ix].1 += part;
            out[ix].2[n] = Some(i + 1);
        }
    }
    out.sort_by(|a, b| b.1.total_cmp(&a.1));
    out
}

/// A row found by meaning.
#[derive(Debug, Clone)]
pub struct Near {
    /// Its table.
    pub table: String,
    /// Its id.
    pub id: String,
    /// The version of the row the vector was computed from.
    pub version: i64,
    /// Cosine similarity (about: the vectors are int8).
    pub score: f32,
    /// The best chunk (0 = the first).
    pub chunk: usize,
}

impl Semantic {
    /// Sets the model folder used when the setting `semantic_model` is empty.
    pub fn set_default_model(&self, dir: Option<PathBuf>) {
        if dir.is_none() {
            // Said at once (the worker says it again, or loads the setting's model).
            self.set_state(State::Unavailable(NO_MODEL.into()));
        }
        *self.default_model.lock().unwrap() = Some(dir);
        self.nudge();
    }

    /// Wakes the worker (after a commit, a settings change).
    pub fn nudge(&self) {
        let mut c = self.control.lock().unwrap();
        c.nudged = true;
        self.wake.notify_one();
    }

    /// Notes a commit at `seq`: the worker will catch up with it.
    pub(crate) fn committed(&self, seq: i64) {
        if seq > self.through.load(Ordering::Acquire) {
            let mut b = self.behind_since.lock().unwrap();
            if b.is_none() {
                *b = Some(Instant::now());
            }
        }
        self.nudge();
    }

    pub(crate) fn stop(&self) {
        let mut c = self.control.lock().unwrap();
        c.stop = true;
        self.wake.notify_all();
    }

    /// The state now.
    pub fn state(&self) -> State {
        self.state.lock().unwrap().clone()
    }

    fn set_state(&self, s: State) {
        let building = matches!(s, State::Building { .. });
        *self.state.lock().unwrap() = s;
        if building {
            // A rebuild's callers report its progress.
            let _c = self.control.lock().unwrap();
            self.wake.notify_all();
        }
    }

    /// The journal seq the index covers.
    pub fn through(&self) -> i64 {
        self.through.load(Ordering::Acquire)
    }

    fn set_through(&self, seq: i64, last: i64) {
        self.through.store(seq, Ordering::Release);
        if seq >= last {
            let mut b = self.behind_since.lock().unwrap();
            if let Some(t) = b.take() {
                let ms = t.elapsed().as_millis() as u64;
                self.max_lag_ms.fetch_max(ms, Ordering::Relaxed);
            }
        }
    }

    /// How long the index has been behind the journal, in ms (0: caught up).
    pub fn lag_ms(&self) -> u64 {
        self.behind_since
            .lock()
            .unwrap()
            .map_or(0, |t| t.elapsed().as_millis() as u64)
    }

    /// Whether searches by meaning can be answered now.
    pub fn ready(&self) -> bool {
        self.live.read().unwrap().is_some()
    }

    /// The status as the API shows it (`full`: with the model's folder and the memory, for the
    /// owner).
    pub fn status(&self, full: bool) -> Value {
        let state = self.state();
        let mut v = json!({"state": state.word(), "status": state.text()});
        if let State::Building { done, total } = state {
            v["done"] = json!(done);
            v["total"] = json!(total);
        }
        if full {
            let live = self.live.read().unwrap();
            if let Some(l) = live.as_ref() {
                let (rows, chunks) = l.matrix.counts();
                v["model"] = json!(l.model.dir.display().to_string());
                v["fingerprint"] = json!(l.model.fingerprint);
                v["dimensions"] = json!(l.model.dim);
                v["rows"] = json!(rows);
                v["chunks"] = json!(chunks);
                v["memoryBytes"] = json!(l.matrix.bytes());
                v["modelBytes"] = json!(l.model.bytes);
            }
            v["indexedThrough"] = json!(self.through());
            v["lagMs"] = json!(self.lag_ms());
            v["maxLagMs"] = json!(self.max_lag_ms.load(Ordering::Relaxed));
        }
        v
    }

    /// The model the index runs on, once it is loaded.
    pub fn model(&self) -> Option<Arc<Model>> {
        Some(self.live.read().unwrap().as_ref()?.model.clone())
    }

    /// The `k` rows nearest in meaning to `text`, in the tables `allowed` accepts, never
    /// `except` (a row); `None` when the index is not ready.
    pub fn nearest(
        &self,
        text: &str,
        k: usize,
        allowed: &dyn Fn(&str) -> bool,
        except: Option<(&str, &str)>,
    ) -> Option<Vec<Near>> {
        let model = self.live.read().unwrap().as_ref()?.model.clone();
        let v = embed_mean(&model, text)?;
        let (q, qs) = matrix::quantize(&v);
        let live = self.live.read().unwrap();
        let l = live.as_ref()?;
        if !Arc::ptr_eq(&l.model, &model) {
            // The index switched models while the query was embedded: embed it again.
            drop(live);
            return self.nearest(text, k, allowed, except);
        }
        let m = &l.matrix;
        let ok: Vec<bool> = m.tables.iter().map(|t| allowed(t)).collect();
        let except_slot = except.and_then(|(t, id)| m.slot(t, id));
        let hits = m.nearest(&q, qs, k, &|t| ok[t as usize], except_slot);
        Some(
            hits.into_iter()
                .filter_map(|h| {
                    let e = m.entry(h.slot)?;
                    Some(Near {
                        table: m.tables[e.table as usize].to_string(),
                        id: e.id.to_string(),
                        version: e.version,
                        score: h.score,
                        chunk: h.chunk,
                    })
                })
                .collect(),
        )
    }

    /// Asks for a rebuild without waiting for it.
    pub fn ask_rebuild(&self) {
        let mut c = self.control.lock().unwrap();
        c.asked += 1;
        c.nudged = true;
        self.wake.notify_all();
    }

    /// Asks for a rebuild and waits for it, calling `progress(done, total)` while it runs.
    pub fn rebuild(&self, progress: &dyn Fn(u64, u64)) -> Result<Value, String> {
        let ticket = {
            let mut c = self.control.lock().unwrap();
            c.asked += 1;
            c.nudged = true;
            self.wake.notify_all();
            c.asked
        };
        let mut last = (u64::MAX, u64::MAX);
        let mut c = self.control.lock().unwrap();
        loop {
            if c.done >= ticket {
                let r = c
                    .last
                    .clone()
                    .unwrap_or_else(|| Err("the rebuild did not run".into()));
                drop(c);
                // The end, also when the rebuild went by between two looks.
                if let Ok(rows) = r.as_ref().map(|v| v["rows"].as_u64().unwrap_or(0))
                    && last != (rows, rows)
                {
                    progress(rows, rows);
                }
                return r;
            }
            if c.stop {
                return Err("the server is stopping".into());
            }
            c = self
                .wake
                .wait_timeout(c, std::time::Duration::from_millis(100))
                .unwrap()
                .0;
            if let State::Building { done, total } = self.state()
                && (done, total) != last
            {
                last = (done, total);
                drop(c);
                progress(done, total);
                c = self.control.lock().unwrap();
            }
        }
    }
}

/// The vector of a text: the mean of its chunks' (unit length), or `None` if the model fails.
pub(crate) fn embed_mean(model: &Model, text: &str) -> Option<Vec<f32>> {
    let chunks: Vec<String> = chunk::chunks("", text)
        .into_iter()
        .map(|c| c.text)
        .collect();
    let texts = if chunks.is_empty() {
        vec![text.to_string()]
    } else {
        chunks
    };
    let flat = model.embed(&texts)?;
    let mut v = vec![0f32; model.dim];
    for c in flat.chunks_exact(model.dim) {
        for (a, b) in v.iter_mut().zip(c) {
            *a += b;
        }
    }
    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if n > 0.0 {
        v.iter_mut().for_each(|x| *x /= n);
    }
    Some(v)
}
