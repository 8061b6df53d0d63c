//! The semantic index's worker: one thread (at a lower priority than the server's) that loads
//! the model, reconciles the stored vectors with the index at start, follows the journal after
//! every commit, and rebuilds on demand. Nothing on a write's path waits for it.
//!
//! Catching up: the rows the journal names after `through` (a table-wide migration: every row
//! of that table) are read from the index at their current version in one read transaction; a
//! row whose file hash and embedded columns are unchanged is skipped; the others are chunked
//! and embedded, written to the store with the new `through` in one transaction, then swapped
//! into the matrix. A crash anywhere leaves a store that the next start reconciles by hash.
//!
//! The thread is `datanotes-semantic`, at nice 10. It waits until `serve` says which model
//! (`--model`, `DATANOTES_MODEL`; the setting `semantic_model` wins); then stored vectors of that
//! model's fingerprint are loaded and reconciled by the files' hashes, else everything is embedded
//! anew. `Engine::publish` nudges it after every commit; a round runs at most once per 15 ms. An
//! answer's `indexedThrough` is `through`.

mod follow;
use follow::{embed, put};

use super::chunk;
use super::matrix::{Matrix, quantize};
use super::model::Model;
use super::store::{self, Stored, short_hash};
use super::{Live, Semantic, State};
use crate::engine::journal::{self, Op};
use crate::engine::{Cmd, Engine, EventCall, index};
use rusqlite::Connection;
use serde_json::{Value, json};
use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

/// Rows embedded per batch (one store transaction, one matrix update).
const BATCH: usize = 512;
/// The most journal entries read per catch-up round.
const ROUND: i64 = 20_000;
/// The least time between two catch-up rounds: a stream of writes is embedded in batches of
/// 100 ms (fewer, larger transactions on the store, less of the writer's time taken).
const MIN_ROUND: Duration = Duration::from_millis(100);

/// Starts the worker thread of `engine`'s semantic index.
pub fn spawn(engine: &Arc<Engine>) {
    let weak = Arc::downgrade(engine);
    let sem = engine.semantic.clone();
    let r = std::thread::Builder::new()
        .name("datanotes-semantic".into())
        .spawn(move || {
            #[cfg(target_os = "linux")]
            // SAFETY: setpriority on this thread's own id (Linux: a thread's nice value).
            unsafe {
                libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t, 10);
            }
            let mut w = Worker {
                weak,
                sem,
                conn: None,
                model_dir: None,
                failed: None,
                configs: HashMap::new(),
            };
            w.run();
        });
    if let Err(e) = r {
        engine
            .semantic
            .set_state(State::Unavailable(format!("its thread did not start: {e}")));
    }
}

struct Worker {
    weak: Weak<Engine>,
    sem: Arc<Semantic>,
    /// The store, once a model is there.
    conn: Option<Connection>,
    /// The folder of the model in use.
    model_dir: Option<PathBuf>,
    /// A folder that failed to load, and why (tried again when asked to rebuild or when the
    /// setting changes).
    failed: Option<(PathBuf, String)>,
    /// The columns each table's vectors were made from, as stored.
    configs: HashMap<String, String>,
}

/// A row to look at again, or a whole table.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Dirty {
    Row(String, String),
    Table(String),
}

/// A table's embedded columns as stored (`None`: the table is not in the index).
fn config_of(t: &crate::engine::schema::Table) -> Option<(Vec<String>, String)> {
    let cols = chunk::columns(t)?;
    let text = serde_json::to_string(&cols).unwrap_or_default();
    Some((cols, text))
}

impl Worker {
    fn run(&mut self) {
        let mut last_round = Instant::now() - MIN_ROUND;
        loop {
            {
                let mut c = self.sem.control.lock().unwrap();
                while !c.nudged && !c.stop && c.asked == c.done {
                    c = self.sem.wake.wait(c).unwrap();
                }
                if c.stop {
                    return;
                }
                c.nudged = false;
            }
            let since = last_round.elapsed();
            if since < MIN_ROUND {
                std::thread::sleep(MIN_ROUND - since);
            }
            last_round = Instant::now();
            let Some(engine) = self.weak.upgrade() else {
                return;
            };
            if let Err(why) = self.step(&engine) {
                tracing::error!("the semantic index: {why}");
            }
        }
    }

    /// The model folder wanted now: the setting, else `--model` / `DATANOTES_MODEL`.
    fn wanted(&self, engine: &Engine) -> Option<PathBuf> {
        let s = engine.settings().semantic_model;
        if !s.trim().is_empty() {
            return Some(PathBuf::from(s.trim()));
        }
        self.sem.default_model.lock().unwrap().clone().flatten()
    }

    fn step(&mut self, engine: &Engine) -> Result<(), String> {
        if self.sem.default_model.lock().unwrap().is_none() {
            // The server has not said which model yet.
            return Ok(());
        }
        let rebuild_asked = {
            let c = self.sem.control.lock().unwrap();
            c.asked > c.done
        };
        let Some(dir) = self.wanted(engine) else {
            *self.sem.live.write().unwrap() = None;
            self.model_dir = None;
            self.sem
                .set_state(State::Unavailable(super::NO_MODEL.into()));
            self.finish_rebuilds(Err("the semantic index has no model: run datanotes model install (serve then finds it), or give serve --model DIR, DATANOTES_MODEL or the setting semantic_model".into()));
            return Ok(());
        };
        if self.model_dir.as_ref() != Some(&dir) {
            if !rebuild_asked && self.failed.as_ref().is_some_and(|(d, _)| d == &dir) {
                return Ok(());
            }
            match Model::load(&dir, &engine.root) {
                Ok(m) => {
                    self.failed = None;
                    self.switch(engine, Arc::new(m))?;
                    self.model_dir = Some(dir);
                }
                Err(why) => {
                    tracing::error!("the semantic index has no model: {why}");
                    self.failed = Some((dir, why.clone()));
                    if self.sem.live.read().unwrap().is_none() {
                        self.sem.set_state(State::Unavailable(why.clone()));
                    }
                    self.finish_rebuilds(Err(why));
                    return Ok(());
                }
            }
        } else if rebuild_asked {
            let model = self
                .sem
                .live
                .read()
                .unwrap()
                .as_ref()
                .map(|l| l.model.clone());
            match model {
                Some(model) => {
                    self.rebuild(engine, model, "asked")?;
                }
                None => self.finish_rebuilds(Err(self.sem.state().text())),
            }
        }
        self.catch_up(engine)
    }

    /// Answers every rebuild asked so far.
    fn finish_rebuilds(&self, r: Result<Value, String>) {
        let upto = self.sem.control.lock().unwrap().asked;
        self.answer(upto, r);
    }

    /// Answers the rebuilds asked up to ticket `upto` (those asked later wait for the next).
    fn answer(&self, upto: u64, r: Result<Value, String>) {
        let mut c = self.sem.control.lock().unwrap();
        if upto > c.done {
            c.done = upto;
            c.last = Some(r);
            self.sem.wake.notify_all();
        }
    }

    fn store(&mut self, engine: &Engine) -> Result<&mut Connection, String> {
        if self.conn.is_none() {
            let path = engine.meta_dir.join("semantic.db");
            let c = store::open(&path)
                .map_err(|e| format!("its store cannot be opened: {}", e.message))?;
            if let Err(e) = crate::engine::lock::make_private(&engine.meta_dir) {
                tracing::warn!(".datanotes/ modes: {e}");
            }
            self.configs = store::table_configs(&c).map_err(|e| e.message.clone())?;
            self.conn = Some(c);
        }
        Ok(self.conn.as_mut().expect("opened above"))
    }

    /// Starts serving with `model`: the stored vectors if they are this model's (reconciled
    /// with the index by hash), else a rebuild.
    fn switch(&mut self, engine: &Engine, model: Arc<Model>) -> Result<(), String> {
        let asked = {
            let c = self.sem.control.lock().unwrap();
            c.asked > c.done
        };
        let c = self.store(engine)?;
        let stored = store::meta(c, "model").map_err(|e| e.message.clone())?;
        if stored.as_deref() == Some(model.fingerprint.as_str()) && !asked {
            let t0 = Instant::now();
            let matrix = store::load(c, model.dim).map_err(|e| e.message.clone())?;
            let through: i64 = store::meta(c, "through")
                .map_err(|e| e.message.clone())?
                .and_then(|s| s.parse().ok())
                .unwrap_or(0);
            tracing::info!(
                rows = matrix.counts().0,
                ms = t0.elapsed().as_millis() as u64,
                "the semantic index is loaded"
            );
            *self.sem.live.write().unwrap() = Some(Live { model, matrix });
            self.sem.set_through(through, engine.last_seq());
            self.sem.set_state(State::Ready);
            // Whatever changed while the engine was stopped (or the index was rebuilt).
            let dirty: Vec<Dirty> = engine.table_names().into_iter().map(Dirty::Table).collect();
            let mut gone: Vec<Dirty> = {
                let live = self.sem.live.read().unwrap();
                let held = live
                    .as_ref()
                    .map(|l| l.matrix.held_tables())
                    .unwrap_or_default();
                held.into_iter()
                    .chain(self.configs.keys().cloned())
                    .map(Dirty::Table)
                    .collect()
            };
            gone.extend(dirty);
            gone.sort();
            gone.dedup();
            let from = engine.last_seq();
            self.apply(engine, gone, Some(from))?;
            give_back_memory();
            Ok(())
        } else {
            let why = if stored.is_some() {
                "model changed"
            } else {
                "first build"
            };
            self.rebuild(engine, model, why).map(|_| ())
        }
    }

    /// Embeds every row anew into `rows_next` and a new matrix, then swaps both in. Searches
    /// are answered from the previous index (if any) until then.
    /// Answers the rebuilds asked before it started.
    fn rebuild(&mut self, engine: &Engine, model: Arc<Model>, why: &str) -> Result<Value, String> {
        let upto = self.sem.control.lock().unwrap().asked;
        let r = self.build(engine, model, why);
        self.answer(upto, r.clone());
        r
    }

    fn build(&mut self, engine: &Engine, model: Arc<Model>, why: &str) -> Result<Value, String> {
        let t0 = Instant::now();
        let from = engine.last_seq();
        let tables: Vec<_> = engine
            .table_names()
            .into_iter()
            .filter_map(|n| engine.table(&n).ok())
            .filter_map(|t| config_of(&t).map(|c| (t, c)))
            .collect();
        let total: u64 = engine
            .with_index(|c| {
                tables
                    .iter()
                    .map(|(t, _)| index::count(c, &t.name).map(|n| n as u64))
                    .sum()
            })
            .map_err(|e| e.message.clone())?;
        let sem = self.sem.clone();
        sem.set_state(State::Building { done: 0, total });
        let mut matrix = Matrix::new(model.dim);
        let mut done = 0u64;
        let mut configs = vec![];
        let conn = self.store(engine)?;
        store::begin_rebuild(conn).map_err(|e| e.message.clone())?;
        let tx = conn.transaction().map_err(|e| e.to_string())?;
        for (t, (cols, cfg)) in &tables {
            configs.push((t.name.clone(), cfg.clone()));
            // Page by page (in id order): what the rebuild holds at once stays small.
            let mut after = String::new();
            loop {
                let page = engine
                    .with_index(|c| index::rows_after(c, t, &after, BATCH as i64))
                    .map_err(|e| e.message.clone())?;
                let Some((last, _)) = page.last() else {
                    break;
                };
                after = last.id.clone();
                let n = page.len();
                let items: Vec<Item> = page
                    .into_iter()
                    .map(|(r, hash)| Item {
                        table: t.name.clone(),
                        chunks: chunk::chunks(&chunk::head(cols, &r.values), &r.body),
                        id: r.id,
                        version: r.version,
                        hash,
                    })
                    .collect();
                for s in embed(&model, items)? {
                    store::put(&tx, "rows_next", &s).map_err(|e| e.message.clone())?;
                    put(&mut matrix, &s);
                }
                done += n as u64;
                sem.set_state(State::Building { done, total });
            }
        }
        store::finish_rebuild(&tx, &model.fingerprint, from, &configs)
            .map_err(|e| e.message.clone())?;
        tx.commit().map_err(|e| e.to_string())?;
        self.configs = configs.into_iter().collect();
        matrix.shrink();
        let (rows, chunks) = matrix.counts();
        let bytes = matrix.bytes();
        *self.sem.live.write().unwrap() = Some(Live {
            model: model.clone(),
            matrix,
        });
        let ms = t0.elapsed().as_millis() as u64;
        tracing::info!(rows, chunks, ms, why, "the semantic index is built");
        let report = json!({
            "rows": rows, "chunks": chunks, "ms": ms, "reason": why,
            "model": model.dir.display().to_string(), "fingerprint": model.fingerprint,
            "memoryBytes": bytes, "through": from,
        });
        let event = report.clone();
        // Journaled before the index says it is ready: once it says so and covers the journal's
        // end, the event is in.
        let _ = engine.write(
            Cmd::Event {
                op: Op::SemanticIndex,
                call: EventCall::later(move || {
                    serde_json::value::to_raw_value(&event)
                        .map_err(|e| crate::error::Error::internal(e.to_string()))
                }),
            },
            journal::Actor::new(Some("semantic index".into()), None, None, None, None),
        );
        self.sem.set_through(from, engine.last_seq());
        self.sem.set_state(State::Ready);
        give_back_memory();
        Ok(report)
    }
}

/// Returns the heap a build or a reconciliation freed to the system (glibc keeps it otherwise).
fn give_back_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases free memory of the allocator's arenas.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// A row to embed.
struct Item {
    table: String,
    id: String,
    version: i64,
    hash: String,
    chunks: Vec<chunk::Chunk>,
}
