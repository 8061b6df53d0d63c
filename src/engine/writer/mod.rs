//! The single writer. Every write, hand-edit scan and maintenance step runs here, in order.
//!
//! Jobs that arrive together form one batch (group commit): each job is validated and applied to
//! the index inside a savepoint (a refused job rolls back alone and changes nothing), then the
//! batch's migrations are committed to the journal (one fsync) while the row files are staged (temp
//! files written and fsynced, in parallel), the temp files are renamed into place, the index is
//! committed, and only then is anyone answered. The folders holding the renames are fsynced while
//! the next batch's journal commits (or when the writer goes idle, or at stop); the files
//! checkpoint (`files_seq`, where the redo at start begins) only moves past a batch once they are.

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

    fn run(&mut self, jobs: Vec<Job>) {
        let was_behind = self.behind.is_some();
        let jobs = if self.catch_up() {
            if was_behind {
                // Hand edits made while no scan could run (the watcher's scans were dropped).
                if let Err(e) = self.run_scan() {
                    tracing::warn!("the folder scan after catching up failed: {}", e.message);
                }
            }
            jobs
        } else {
            self.refuse_while_behind(jobs)
        };
        // Maintenance that cannot share a transaction runs on its own.
        let mut batch: Vec<Job> = vec![];
        for job in jobs {
            // A scan compares the files with the index, so it must not follow a write in its
            // batch: that write is in the index already but its file is only written at commit,
            // and the scan would journal the old file as a hand edit.
            if matches!(job.cmd, Cmd::Scan { .. })
                && batch.iter().any(|j| !matches!(j.cmd, Cmd::Scan { .. }))
            {
                self.run_batch(std::mem::take(&mut batch));
            }
            // A folder scan runs alone in its batch, so that it may commit as it goes.
            if matches!(job.cmd, Cmd::Scan { id: None, .. }) {
                self.run_batch(std::mem::take(&mut batch));
                self.run_batch(vec![job]);
            } else if matches!(job.cmd, Cmd::Vacuum(_) | Cmd::RebuildIndex) {
                self.run_batch(std::mem::take(&mut batch));
                let r = match &job.cmd {
                    Cmd::Vacuum(v) => self.vacuum(v.before_seq),
                    _ => self.rebuild_index(),
                };
                if let Some(tx) = job.reply {
                    let _ = tx.send(r);
                }
            } else {
                batch.push(job);
            }
        }
        self.run_batch(batch);
    }

    /// While the files are behind the journal, only events (which have no file) are taken.
    fn refuse_while_behind(&mut self, jobs: Vec<Job>) -> Vec<Job> {
        let why = self.behind.clone().unwrap_or_default();
        let mut keep = vec![];
        for job in jobs {
            if matches!(job.cmd, Cmd::Event { .. }) {
                keep.push(job);
            } else if let Some(tx) = job.reply {
                let e = Error::new(
                    503,
                    "files_unavailable",
                    format!("the engine cannot write its files, so it takes no writes: {why}"),
                )
                .hint("fix the cause in the database folder (free space, permissions, a folder in the way); writes resume by themselves once the files are written");
                let _ = tx.send(Err(e));
            }
        }
        keep
    }

    fn run_batch(&mut self, jobs: Vec<Job>) {
        if jobs.is_empty() {
            return;
        }
        if let Err(e) = self.idx.execute_batch("BEGIN") {
            let e: Error = e.into();
            for j in jobs {
                if let Some(tx) = j.reply {
                    let _ = tx.send(Err(e.clone()));
                }
            }
            return;
        }
        let started = std::time::Instant::now();
        let n_jobs = jobs.len();
        self.pacer.start(jobs.iter().all(Job::quiet));
        self.solo_scan = jobs.len() == 1 && matches!(jobs[0].cmd, Cmd::Scan { id: None, .. });
        self.batch_base = (self.tables.clone(), self.settings.clone());
        self.real_dirs.clear();
        let mut results = vec![];
        for job in jobs {
            // A hand edit of the row a job is about to write is journaled first, on its own: it
            // stays even if the job is refused.
            self.hand_edits_first(&job.cmd);
            let m0 = self.migs.len();
            let r = match job.cmd {
                // An event touches neither the index, the files, the tables nor the settings,
                // and adds its migration only once its report is built: nothing to roll back,
                // so no savepoint (two statements and a copy of the tables per event).
                Cmd::Event { op, call } => {
                    let r = self.event(op, call, job.actor);
                    self.pacer.pace();
                    r
                }
                cmd => self.in_savepoint(|w| {
                    let f0 = w.fops.len();
                    let v = w.apply(cmd, &job.actor)?;
                    w.check_folders(f0)?;
                    Ok(v)
                }),
            };
            results.push((job.reply, r, m0..self.migs.len()));
        }
        self.solo_scan = false;
        tracing::debug!(
            jobs = n_jobs,
            apply_ms = started.elapsed().as_secs_f64() * 1e3,
            "batch applied"
        );
        let outcome = match self.poisoned.take() {
            Some(e) => Err(e),
            None => self.commit(),
        };
        if let Err(e) = &outcome {
            tracing::error!("batch failed: {e}");
            journal::rollback(&self.idx, "a failed batch");
            (self.tables, self.settings) = self.batch_base.clone();
        }
        let migs = std::mem::take(&mut self.migs);
        let unplaced = self.unplaced.take();
        for (reply, r, range) in results {
            let r = match (&outcome, r) {
                (Err(e), _) => Err(e.clone()),
                (Ok(()), Ok(_)) if unplaced.is_some() => Err(unplaced.clone().unwrap()),
                (Ok(()), Ok(mut v)) => {
                    // The operation's own migration: the first of its job (an alter_table's
                    // table migration, before the rows it rewrote), the one undo takes back.
                    if let (Some(obj), Some(m)) =
                        (v.as_object_mut(), range.clone().next().map(|i| &migs[i]))
                        && obj.contains_key("seq")
                    {
                        obj.insert("seq".into(), Value::from(m.seq));
                    }
                    Ok(v)
                }
                (Ok(()), Err(e)) => Err(e),
            };
            if let Some(tx) = reply {
                let _ = tx.send(r);
            }
        }
    }

    /// Runs `f` in a savepoint of the batch's index transaction: on error the index, the
    /// migrations, the file operations, the tables and the settings go back to where they were.
    fn in_savepoint(&mut self, f: impl FnOnce(&mut Self) -> Result<Value>) -> Result<Value> {
        let (m0, f0) = (self.migs.len(), self.fops.len());
        self.job_base = (self.tables.clone(), self.settings.clone());
        self.idx.execute_batch("SAVEPOINT job")?;
        let r = f(self);
        let r = match r {
            Ok(v) => self
                .idx
                .execute_batch("RELEASE job")
                .map(|()| v)
                .map_err(Error::from),
            Err(e) => Err(e),
        };
        if r.is_err() {
            // If even the rollback fails, the whole batch must not commit.
            if let Err(e) = self.idx.execute_batch("ROLLBACK TO job; RELEASE job") {
                self.poisoned = Some(e.into());
            }
            self.migs.truncate(m0);
            self.fops.truncate(f0);
            (self.tables, self.settings) = self.job_base.clone();
        }
        r
    }

    /// The folders the file operations of a job (those from `from` on) go through must be real
    /// folders, not links: a write through a link would land outside the database. Checked
    /// before anything is journaled (so the caller is refused), each folder once per batch.
    fn check_folders(&mut self, from: usize) -> Result<()> {
        for op in &self.fops[from..] {
            let dir = match op {
                FileOp::Write { path, .. } | FileOp::Remove { path } => path.parent(),
                FileOp::MakeDir(d) | FileOp::RemoveTableDir(d) => Some(d.as_path()),
            };
            let Some(dir) = dir else { continue };
            if !self.real_dirs.contains(dir) && files::check_dirs(&self.root, dir)? {
                self.real_dirs.insert(dir.to_path_buf());
            }
        }
        Ok(())
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
