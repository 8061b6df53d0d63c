//! The single writer. Every write, hand-edit scan and maintenance step runs here, in order.
//!
//! Jobs that arrive together form one batch (group commit): each job is validated and applied to
//! the index inside a savepoint (a refused job rolls back alone and changes nothing), then the
//! batch's migrations are committed to the journal (one fsync) while the row files are staged (temp
//! files written and fsynced, in parallel), the temp files are renamed into place, the index is
//! committed, and only then is anyone answered. The folders holding the renames are fsynced while
//! the next batch's journal commits (or when the writer goes idle, or at stop); the files
//! checkpoint (`files_seq`, where the redo at start begins) only moves past a batch once they are.
//!
//! The folders are fsynced after 20 ms idle at the latest. A rename lost to a crash leaves the file
//! in its before state, which the redo fixes.

mod batch;
mod commit;
mod history;
mod maintain;
mod queue;
mod rows;
mod scan;
mod tables;
#[cfg(test)]
mod tests;

use super::args;
use super::files;
use super::index::IndexedRow;
use super::journal::{self, Actor, Migration, Op, RowState};
use super::schema::{Table, TableDef};
use super::settings::Settings;
use super::{Engine, Tables, no_table};
use crate::error::{Error, Result};
use crate::names::TableName;
use queue::{Msg, Queue};
use rusqlite::Connection;
use serde_json::value::RawValue;
use serde_json::{Value, json};
use std::collections::{BTreeSet, HashSet};
use std::path::PathBuf;
use std::sync::mpsc;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

/// A write the engine can be asked to do.
#[derive(Debug)]
pub enum Cmd {
    /// Operation `insert_row`.
    Insert(args::InsertRow),
    /// Operation `update_row`.
    Update(args::UpdateRow),
    /// Operation `delete_row`.
    Delete(args::RowRef),
    /// Operation `create_table`.
    CreateTable(args::CreateTable),
    /// Operation `alter_table`.
    AlterTable(args::AlterTable),
    /// Operation `drop_table`.
    DropTable(args::TableArg),
    /// Operation `set_engine_settings`.
    SetSettings(args::SetSettings),
    /// Operation `undo`.
    Undo(args::SeqArg),
    /// Operation `restore`.
    Restore(args::Restore),
    /// Operation `vacuum`.
    Vacuum(args::Vacuum),
    /// Operation `rebuild_index`.
    RebuildIndex,
    /// Compare files with the index and journal any hand edit (all tables, one table, one row).
    Scan {
        /// One table, or every table.
        table: Option<String>,
        /// One row of that table, or every row.
        id: Option<String>,
    },
    /// Append a non-row event (e.g. a tool call) to the journal.
    Event {
        /// The event's kind.
        op: Op,
        /// Its report, built by the writer thread (off the path of the answer it reports on).
        call: EventCall,
    },
}

/// The report of an event, built when the writer takes it: its JSON text, encoded once.
pub struct EventCall(Box<dyn FnOnce() -> Result<Box<RawValue>> + Send>);

impl EventCall {
    /// A report built by `f` on the writer thread.
    pub fn later(f: impl FnOnce() -> Result<Box<RawValue>> + Send + 'static) -> EventCall {
        EventCall(Box::new(f))
    }
}

impl std::fmt::Debug for EventCall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("EventCall")
    }
}

struct Job {
    cmd: Cmd,
    actor: Actor,
    reply: Option<mpsc::SyncSender<Result<Value>>>,
    /// The trace of the operation that asked for it (export on): its commit gets a span.
    trace: Option<opentelemetry::trace::SpanContext>,
}

impl Job {
    /// An event nobody waits for (a tool call's report).
    fn quiet(&self) -> bool {
        self.reply.is_none() && matches!(self.cmd, Cmd::Event { .. })
    }
}

pub struct Handle {
    queue: Arc<Queue>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Handle {
    pub fn submit(&self, cmd: Cmd, actor: Actor) -> Result<Value> {
        let (tx, rx) = mpsc::sync_channel(1);
        self.send(Job {
            cmd,
            actor,
            reply: Some(tx),
            trace: crate::telemetry::trace::current(),
        })?;
        rx.recv()
            .map_err(|_| Error::internal("the writer stopped"))?
    }
    /// Queues a job whose answer nobody waits for (the file watcher's scans, tool-call events).
    pub fn submit_nowait(&self, cmd: Cmd, actor: Actor) {
        let _ = self.send(Job {
            cmd,
            actor,
            reply: None,
            trace: None,
        });
    }
    fn send(&self, job: Job) -> Result<()> {
        if self.queue.push(Msg::Job(Box::new(job))) {
            Ok(())
        } else {
            Err(Error::internal("the writer stopped"))
        }
    }
    pub fn stop(&self) {
        self.queue.push(Msg::Stop);
        if let Some(t) = self.thread.lock().unwrap().take() {
            let _ = t.join();
        }
    }
}

impl Drop for Handle {
    /// The writer finishes what it was handed, then ends.
    fn drop(&mut self) {
        self.queue.push(Msg::Stop);
    }
}

/// Closes the queue when the writer thread ends, however it ends.
struct Closing(Arc<Queue>);

impl Drop for Closing {
    fn drop(&mut self) {
        self.0.close();
    }
}

/// The most jobs in one batch.
const MAX_BATCH: usize = 256;

/// How long after answering a batch the writer may wait for its callers' next writes.
const LINGER: Duration = Duration::from_millis(2);

/// How long a batch of events alone (tool calls: nobody waits for them) gathers the next events
/// before it commits (a write someone waits for ends the interval at once): one journal commit
/// serves every call of the interval, and the events of the interval are queued without waking
/// the writer. A crash loses at most the events of the interval being gathered or committed.
const EVENT_INTERVAL: Duration = Duration::from_millis(5);

/// How much work the writer does at most, while it builds and journals events nobody waits for,
/// before it offers its core to another thread (see [`Pacer`]).
const EVENT_SLICE: Duration = Duration::from_micros(20);

/// Events are committed while the next calls are being answered, and on a small machine the
/// writer shares a core with those calls' threads: the events of an interval are a burst of work
/// (10–20 µs each: half a millisecond at 2,000 calls a second) that a call's thread, woken on
/// that core meanwhile, used to wait behind (see BENCHMARKS.md, the tail of a call through
/// `/mcp`). So while it works on a batch of events nobody waits for, the writer yields its core
/// every [`EVENT_SLICE`] (a system call, which does nothing when no thread waits for it). A batch
/// someone waits for is not paced.
struct Pacer {
    /// Since when it has worked without a yield.
    since: Instant,
    /// The batch is paced.
    on: bool,
}

impl Pacer {
    /// A new batch: paced if nobody waits for it.
    fn start(&mut self, quiet: bool) {
        self.on = quiet;
        self.since = Instant::now();
    }

    /// Called between two pieces of a batch's work.
    fn pace(&mut self) {
        if self.on && self.since.elapsed() >= EVENT_SLICE {
            std::thread::yield_now();
            self.since = Instant::now();
        }
    }
}

/// How long the writer stays idle before it fsyncs the folders of the batches it answered.
const IDLE_SYNC: Duration = Duration::from_millis(20);

pub fn spawn(mut w: Writer) -> Handle {
    let queue = Arc::new(Queue::default());
    let q = queue.clone();
    let thread = std::thread::Builder::new()
        .name("datanotes-writer".into())
        .spawn(move || {
            let _closing = Closing(q.clone());
            let mut stop = false;
            // The callers the previous batch answered, and when.
            let mut answered = (0, Instant::now());
            while !stop {
                let first = if w.unsynced.is_empty() {
                    q.recv(None)
                } else {
                    match q.recv(Some(Instant::now() + IDLE_SYNC)) {
                        Some(m) => Some(m),
                        None => {
                            w.sync_unsynced();
                            continue;
                        }
                    }
                };
                let Some(first) = first else { break };
                let mut jobs = vec![];
                match first {
                    Msg::Job(j) => jobs.push(*j),
                    Msg::Stop => stop = true,
                }
                let take = |jobs: &mut Vec<Job>, stop: &mut bool| {
                    while jobs.len() < MAX_BATCH && !*stop {
                        match q.try_recv() {
                            Some(Msg::Job(j)) => jobs.push(*j),
                            Some(Msg::Stop) => *stop = true,
                            None => break,
                        }
                    }
                };
                take(&mut jobs, &mut stop);
                // Events alone: gather the interval's events (queued without waking this
                // thread) and commit them together; a write someone waits for ends the
                // interval at once.
                if !stop && jobs.len() < MAX_BATCH && jobs.iter().all(Job::quiet) {
                    q.gather(Instant::now() + EVENT_INTERVAL);
                    take(&mut jobs, &mut stop);
                }
                // Group commit: the callers the previous batch just answered are likely about to
                // write again; wait a moment for them, so that one round of fsyncs serves them
                // all (a lone caller never waits).
                let deadline = answered.1 + LINGER;
                while jobs.len() < answered.0 && !stop {
                    match q.recv(Some(deadline)) {
                        Some(Msg::Job(j)) => jobs.push(*j),
                        Some(Msg::Stop) => stop = true,
                        None => break,
                    }
                }
                let waiting = jobs.iter().filter(|j| j.reply.is_some()).count();
                w.run(jobs);
                answered = (waiting, Instant::now());
            }
            w.checkpoint();
        })
        .expect("spawn writer thread");
    Handle {
        queue,
        thread: Mutex::new(Some(thread)),
    }
}

pub struct Writer {
    root: PathBuf,
    idx: Connection,
    jr: Connection,
    tables: Tables,
    settings: Settings,
    engine: Weak<Engine>,
    migs: Vec<Migration>,
    fops: Vec<FileOp>,
    tables_dirty: bool,
    settings_dirty: bool,
    /// The newest seq whose files are durable; recorded in the next journal commit.
    files_seq: i64,
    /// Why the files are behind the journal (a file could not be written after its journal
    /// commit, or at the redo): `files_seq` stays where it was, every write is refused (503)
    /// and scans do not run (they would take the old files for hand edits) until a redo gets
    /// through (`catch_up`, tried before each batch).
    behind: Option<String>,
    /// A batch was journaled but its files could not be put in place: what its callers read.
    unplaced: Option<Error>,
    /// A job's savepoint could not be rolled back: the batch must not commit.
    poisoned: Option<Error>,
    /// Folders whose renames are not fsynced yet, and the seq `files_seq` reaches once they are.
    /// A batch is answered once its journal commit and its row files (fsynced before their
    /// rename) are done; its folders are fsynced while the next batch's journal commits, or after
    /// `IDLE_SYNC` of quiet, or at stop. A crash before that may lose a rename: the file is then
    /// in its before state, and the redo at the next start (everything past `files_seq`) puts it
    /// in place from the journal.
    unsynced: BTreeSet<PathBuf>,
    unsynced_seq: i64,
    /// The tables and settings a failed batch, and a failed job, roll back to.
    batch_base: (Tables, Settings),
    job_base: (Tables, Settings),
    /// The batch is one folder scan, which commits every `SCAN_CHUNK` hand edits.
    solo_scan: bool,
    /// Folders found to be real folders (not links) during this batch (see `check_folders`).
    real_dirs: HashSet<PathBuf>,
    pacer: Pacer,
}

/// The hand edits a folder scan journals per commit: a folder of new files (a first start over
/// hand-made rows, a checkout) is not held in memory all at once (each pending migration takes
/// ~2.5 KB). Smaller chunks cost CPU: each commit rewrites the index pages the chunk touched.
#[cfg(not(test))]
const SCAN_CHUNK: usize = 20_000;
#[cfg(test)]
const SCAN_CHUNK: usize = 3;

fn state(r: &IndexedRow) -> RowState {
    r.state()
}

/// The journal's JSON of a definition or the settings: one that cannot be written refuses the
/// job (it would journal `null`, which reads as "no table").
fn to_json(v: &impl serde::Serialize) -> Result<Value> {
    serde_json::to_value(v).map_err(|e| Error::internal(format!("cannot journal the change: {e}")))
}

impl Writer {
    pub fn new(
        root: PathBuf,
        idx: Connection,
        jr: Connection,
        tables: Tables,
        engine: Weak<Engine>,
        behind: Option<String>,
    ) -> Writer {
        let settings = Settings::load(&root.join(".datanotes"));
        let files_seq = match behind {
            Some(_) => journal::meta_i64(&jr, "files_seq").unwrap_or(0),
            None => journal::last_seq(&jr).unwrap_or(0),
        };
        Writer {
            root,
            idx,
            jr,
            tables,
            settings,
            engine,
            migs: vec![],
            fops: vec![],
            tables_dirty: false,
            settings_dirty: false,
            files_seq,
            behind,
            unplaced: None,
            poisoned: None,
            unsynced: BTreeSet::new(),
            unsynced_seq: files_seq,
            batch_base: Default::default(),
            job_base: Default::default(),
            solo_scan: false,
            real_dirs: HashSet::new(),
            pacer: Pacer {
                since: Instant::now(),
                on: false,
            },
        }
    }

    /// The largest body a row may have (hand-edited files included).
    pub(super) fn max_body(&self) -> i64 {
        self.settings.max_body_bytes
    }

    pub(super) fn table(&self, name: &str) -> Result<Arc<Table>> {
        TableName::parse(name)?;
        self.tables.get(name).cloned().ok_or_else(|| no_table(name))
    }

    pub(super) fn mig(
        &mut self,
        op: Op,
        table: Option<&str>,
        row: Option<&str>,
        before: impl Into<Value>,
        after: impl Into<Value>,
        actor: &Actor,
    ) {
        self.migs.push(Migration {
            seq: 0,
            ts: String::new(),
            op,
            table: table.map(Into::into),
            row: row.map(Into::into),
            before: before.into(),
            after: after.into(),
            actor: actor.clone(),
            call: None,
        });
    }

    pub(super) fn apply(&mut self, cmd: Cmd, actor: &Actor) -> Result<Value> {
        match cmd {
            Cmd::Insert(a) => self.insert(a, actor),
            Cmd::Update(a) => self.update(a, actor),
            Cmd::Delete(a) => self.delete(a, actor),
            Cmd::CreateTable(a) => self.create_table(a, actor),
            Cmd::AlterTable(a) => self.alter_table(a, actor),
            Cmd::DropTable(a) => self.drop_table(a, actor),
            Cmd::SetSettings(a) => self.set_settings(a, actor),
            Cmd::Undo(a) => self.undo(a.seq, actor),
            Cmd::Restore(a) => self.restore(a, actor),
            Cmd::Scan { table, id } => self.scan(table, id),
            Cmd::Event { op, call } => self.event(op, call, actor.clone()),
            Cmd::Vacuum(_) | Cmd::RebuildIndex => unreachable!("run outside batches"),
        }
    }

    /// A non-row event: its report is built here, then journaled with the batch.
    fn event(&mut self, op: Op, call: EventCall, actor: Actor) -> Result<Value> {
        let call = (call.0)()?;
        self.migs.push(Migration {
            seq: 0,
            ts: String::new(),
            op,
            table: None,
            row: None,
            before: Value::Null,
            after: Value::Null,
            actor,
            call: Some(call),
        });
        Ok(json!({"seq": null}))
    }

    // ---- rows ----
}

/// The hash of a definition as its file renders it (the index records it per table).
pub fn defhash(def: &TableDef) -> Result<String> {
    Ok(files::hash(&files::render_table_def(def)?))
}
use commit::FileOp;
use maintain::index_versions;
pub(in crate::engine) use maintain::{
    flag_ref_violations, index_read, known_versions, reindex_table, wipe_index,
};
pub(in crate::engine) use scan::check_read;
