//! The single writer. Every write, hand-edit scan and maintenance step runs here, in order.
//!
//! Jobs that arrive together form one batch (group commit): each job is validated and applied to
//! the index inside a savepoint (a refused job rolls back alone and changes nothing), then the
//! batch's migrations are committed to the journal (one fsync) while the row files are staged (temp
//! files written and fsynced, in parallel), the temp files are renamed into place, the index is
//! committed, and only then is anyone answered. The folders holding the renames are fsynced while
//! the next batch's journal commits (or when the writer goes idle, or at stop); the files
//! checkpoint (`files_seq`, where the redo at start begins) only moves past a batch once they are.

use super::args;
use super::files::{self, RowFile};
use super::index::{self, FileFacts, IndexedRow};
use super::journal::{self, Actor, Migration};
use super::schema::{ColumnType, Table, TableDef};
use super::settings::Settings;
use super::{Engine, Tables, no_row, no_table};
use crate::error::{Error, Result};
use crate::names::{self, TableName};
use rusqlite::Connection;
use serde_json::{Map, Value, json};
use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

/// A write the engine can be asked to do.
#[derive(Debug)]
pub enum Cmd {
    Insert(args::InsertRow),
    Update(args::UpdateRow),
    Delete(args::RowRef),
    CreateTable(args::CreateTable),
    AlterTable(args::AlterTable),
    DropTable(args::TableArg),
    SetSettings(args::SetSettings),
    Undo(args::SeqArg),
    Restore(args::Restore),
    Vacuum(args::Vacuum),
    RebuildIndex,
    /// Compare files with the index and journal any hand edit (all tables, one table, one row).
    Scan {
        table: Option<String>,
        id: Option<String>,
    },
    /// Append a non-row event (e.g. a tool call) to the journal.
    Event {
        op: String,
        call: Value,
    },
}

struct Job {
    cmd: Cmd,
    actor: Actor,
    reply: Option<mpsc::SyncSender<Result<Value>>>,
}

enum Msg {
    Job(Box<Job>),
    Stop,
}

pub struct Handle {
    tx: Mutex<mpsc::Sender<Msg>>,
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
    /// Queues a job whose answer nobody waits for (the file watcher's scans).
    pub fn submit_nowait(&self, cmd: Cmd, actor: Actor) {
        let _ = self.send(Job {
            cmd,
            actor,
            reply: None,
        });
    }
    fn send(&self, job: Job) -> Result<()> {
        self.tx
            .lock()
            .unwrap()
            .send(Msg::Job(Box::new(job)))
            .map_err(|_| Error::internal("the writer stopped"))
    }
    pub fn stop(&self) {
        let _ = self.tx.lock().unwrap().send(Msg::Stop);
        if let Some(t) = self.thread.lock().unwrap().take() {
            let _ = t.join();
        }
    }
}

/// The most jobs in one batch.
const MAX_BATCH: usize = 256;

/// How long after answering a batch the writer may wait for its callers' next writes.
const LINGER: Duration = Duration::from_millis(2);

/// How long the writer stays idle before it fsyncs the folders of the batches it answered.
const IDLE_SYNC: Duration = Duration::from_millis(20);

pub fn spawn(mut w: Writer) -> Handle {
    let (tx, rx) = mpsc::channel::<Msg>();
    let thread = std::thread::Builder::new()
        .name("datanotes-writer".into())
        .spawn(move || {
            let mut stop = false;
            // The callers the previous batch answered, and when.
            let mut answered = (0, Instant::now());
            while !stop {
                let first = if w.unsynced.is_empty() {
                    rx.recv().ok()
                } else {
                    match rx.recv_timeout(IDLE_SYNC) {
                        Ok(m) => Some(m),
                        Err(mpsc::RecvTimeoutError::Timeout) => {
                            w.sync_unsynced();
                            continue;
                        }
                        Err(mpsc::RecvTimeoutError::Disconnected) => None,
                    }
                };
                let Some(first) = first else { break };
                let mut jobs = vec![];
                match first {
                    Msg::Job(j) => jobs.push(*j),
                    Msg::Stop => stop = true,
                }
                while jobs.len() < MAX_BATCH && !stop {
                    match rx.try_recv() {
                        Ok(Msg::Job(j)) => jobs.push(*j),
                        Ok(Msg::Stop) => stop = true,
                        Err(_) => break,
                    }
                }
                // Group commit: the callers the previous batch just answered are likely about to
                // write again; wait a moment for them, so that one round of fsyncs serves them
                // all (a lone caller never waits).
                let deadline = answered.1 + LINGER;
                while jobs.len() < answered.0 && !stop {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        break;
                    }
                    match rx.recv_timeout(left) {
                        Ok(Msg::Job(j)) => jobs.push(*j),
                        Ok(Msg::Stop) => stop = true,
                        Err(_) => break,
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
        tx: Mutex::new(tx),
        thread: Mutex::new(Some(thread)),
    }
}

enum FileOp {
    Write {
        path: PathBuf,
        bytes: Vec<u8>,
        row: Option<(String, String)>,
    },
    Remove {
        path: PathBuf,
    },
    MakeDir(PathBuf),
    RemoveTableDir(PathBuf),
}

/// The files of a batch. Row files on distinct paths in folders that exist (the common case) are
/// written in parallel, each thread mostly waiting on its fsync; a batch that makes or removes
/// folders is applied in order.
enum FilePlan {
    Rows(Vec<RowOp>),
    Ordered(Vec<FileOp>),
}

/// The last operation of the batch on one path.
struct RowOp {
    path: PathBuf,
    /// The new content; None removes the file.
    bytes: Option<Vec<u8>>,
    row: Option<(String, String)>,
}

impl FilePlan {
    fn new(fops: Vec<FileOp>) -> FilePlan {
        let rows_only = fops.iter().all(|op| match op {
            FileOp::Write { .. } | FileOp::Remove { .. } => true,
            FileOp::MakeDir(d) => d.is_dir(),
            FileOp::RemoveTableDir(_) => false,
        });
        if !rows_only {
            return FilePlan::Ordered(fops);
        }
        // Only the last operation on a path matters (a row written twice in one batch).
        let mut last = HashMap::new();
        for (i, op) in fops.iter().enumerate() {
            if let FileOp::Write { path, .. } | FileOp::Remove { path } = op {
                last.insert(path.clone(), i);
            }
        }
        let ops = fops
            .into_iter()
            .enumerate()
            .filter_map(|(i, op)| match op {
                FileOp::Write { path, bytes, row } if last[&path] == i => Some(RowOp {
                    path,
                    bytes: Some(bytes),
                    row,
                }),
                FileOp::Remove { path } if last[&path] == i => Some(RowOp {
                    path,
                    bytes: None,
                    row: None,
                }),
                _ => None,
            })
            .collect();
        FilePlan::Rows(ops)
    }

    /// Whether `stage` has files to write.
    fn writes(&self) -> bool {
        match self {
            FilePlan::Ordered(_) => false,
            FilePlan::Rows(ops) => ops.iter().any(|op| op.bytes.is_some()),
        }
    }

    /// What `stage` answers when it could not run.
    fn failed(&self, why: &str) -> Vec<Option<Result<PathBuf>>> {
        match self {
            FilePlan::Ordered(_) => vec![],
            FilePlan::Rows(ops) => ops
                .iter()
                .map(|op| op.bytes.as_ref().map(|_| Err(Error::internal(why))))
                .collect(),
        }
    }

    /// Writes and fsyncs the temp file of every row write, in parallel (nothing visible yet).
    fn stage(&self) -> Vec<Option<Result<PathBuf>>> {
        match self {
            FilePlan::Ordered(_) => vec![],
            FilePlan::Rows(ops) => parallel(ops, |op| {
                op.bytes.as_ref().map(|b| files::stage(&op.path, b))
            }),
        }
    }
}

/// Fsyncs folders (those since removed, by a dropped table, are skipped): the first failure.
fn sync_dirs(dirs: &BTreeSet<PathBuf>) -> Result<()> {
    let dirs: Vec<&PathBuf> = dirs.iter().filter(|d| d.exists()).collect();
    parallel(&dirs, |d| files::fsync_dir(d))
        .into_iter()
        .find_map(|r| r.err())
        .map_or(Ok(()), Err)
}

/// Runs `f` on every item, on up to 16 threads (for file I/O, which mostly waits on the disk).
fn parallel<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    if items.len() <= 1 {
        return items.iter().map(&f).collect();
    }
    let per_thread = items.len().div_ceil(16);
    std::thread::scope(|s| {
        let handles: Vec<_> = items
            .chunks(per_thread)
            .map(|chunk| s.spawn(|| chunk.iter().map(&f).collect::<Vec<R>>()))
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("file thread panicked"))
            .collect()
    })
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
    /// Files of a batch failed after its journal commit: `files_seq` stays where it was, so the
    /// next start redoes them.
    files_behind: bool,
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
}

/// The hand edits a folder scan journals per commit: a folder of new files (a first start over
/// hand-made rows, a checkout) is not held in memory all at once (each pending migration takes
/// ~2.5 KB). Smaller chunks cost CPU: each commit rewrites the index pages the chunk touched.
#[cfg(not(test))]
const SCAN_CHUNK: usize = 20_000;
#[cfg(test)]
const SCAN_CHUNK: usize = 3;

fn state(r: &IndexedRow) -> Value {
    r.state()
}

impl Writer {
    pub fn new(
        root: PathBuf,
        idx: Connection,
        jr: Connection,
        tables: Tables,
        engine: Weak<Engine>,
    ) -> Writer {
        let settings = std::fs::read(root.join(".datanotes/settings.json"))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default();
        let files_seq = journal::last_seq(&jr).unwrap_or(0);
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
            files_behind: false,
            unsynced: BTreeSet::new(),
            unsynced_seq: files_seq,
            batch_base: Default::default(),
            job_base: Default::default(),
            solo_scan: false,
        }
    }

    fn run(&mut self, jobs: Vec<Job>) {
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
        self.solo_scan = jobs.len() == 1 && matches!(jobs[0].cmd, Cmd::Scan { id: None, .. });
        self.batch_base = (self.tables.clone(), self.settings.clone());
        let mut results = vec![];
        for job in jobs {
            let (m0, f0) = (self.migs.len(), self.fops.len());
            self.job_base = (self.tables.clone(), self.settings.clone());
            let _ = self.idx.execute_batch("SAVEPOINT job");
            let r = self.apply(job.cmd, &job.actor);
            if r.is_ok() {
                let _ = self.idx.execute_batch("RELEASE job");
            } else {
                let _ = self.idx.execute_batch("ROLLBACK TO job; RELEASE job");
                self.migs.truncate(m0);
                self.fops.truncate(f0);
                (self.tables, self.settings) = self.job_base.clone();
            }
            results.push((job.reply, r, m0..self.migs.len()));
        }
        self.solo_scan = false;
        tracing::debug!(
            jobs = n_jobs,
            apply_ms = started.elapsed().as_secs_f64() * 1e3,
            "batch applied"
        );
        let outcome = self.commit();
        if let Err(e) = &outcome {
            tracing::error!("batch failed: {e}");
            let _ = self.idx.execute_batch("ROLLBACK");
            (self.tables, self.settings) = self.batch_base.clone();
        }
        let migs = std::mem::take(&mut self.migs);
        for (reply, r, range) in results {
            let r = match (&outcome, r) {
                (Err(e), _) => Err(e.clone()),
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

    /// Journal, files, index, publish. On error nothing was acknowledged.
    fn commit(&mut self) -> Result<()> {
        let t0 = std::time::Instant::now();
        let plan = FilePlan::new(std::mem::take(&mut self.fops));
        // The row files are staged (temp files written and fsynced) while the journal commits:
        // a temp file is not a row, and nothing is renamed into place before the journal holds
        // the batch, so a crash in between leaves only temp files behind.
        // The previous batches' folders are fsynced meanwhile too.
        let to_sync = std::mem::take(&mut self.unsynced);
        let synced_seq = self.unsynced_seq;
        let (journaled, staged, synced) = std::thread::scope(|s| {
            let syncing = (!to_sync.is_empty()).then(|| s.spawn(|| sync_dirs(&to_sync)));
            let (journaled, staged) = if plan.writes() {
                let staging = s.spawn(|| plan.stage());
                (self.commit_journal(), staging.join())
            } else {
                (self.commit_journal(), Ok(plan.stage()))
            };
            let synced = syncing.map_or(Ok(()), |h| {
                h.join()
                    .unwrap_or_else(|_| Err(Error::internal("fsync of the folders panicked")))
            });
            (journaled, staged, synced)
        });
        self.synced(synced, synced_seq);
        let staged = staged.unwrap_or_else(|_| plan.failed("staging the files panicked"));
        if let Err(e) = journaled {
            for tmp in staged.into_iter().flatten().flatten() {
                let _ = files::remove_file(&tmp);
            }
            return Err(e);
        }
        // From here on the journal holds the batch: a failure below is redone at the next start.
        let t1 = t0.elapsed();
        let (dirs, placed) = self.apply_files(plan, staged);
        let t2 = t0.elapsed();
        let last = self.migs.last().map(|m| m.seq);
        if let Some(last) = last {
            index::set_meta(&self.idx, "applied_seq", &last.to_string())?;
        }
        // The folders are fsynced later (see `unsynced`).
        let committed = index::flush_fts(&self.idx).and_then(|()| {
            self.idx.execute_batch("COMMIT")?;
            Ok(())
        });
        if let Err(e) = placed {
            tracing::error!(
                "writing files failed after the journal commit; they will be redone at the next start: {e}"
            );
            self.files_behind = true;
        }
        committed?;
        let t3 = t0.elapsed();
        let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
        tracing::debug!(
            migrations = self.migs.len(),
            journal_ms = ms(t1),
            place_ms = ms(t2 - t1),
            index_ms = ms(t3 - t2),
            "batch committed"
        );
        if let Some(last) = last {
            self.unsynced.extend(dirs);
            self.unsynced_seq = last;
            if self.unsynced.is_empty() && !self.files_behind {
                self.files_seq = last;
            }
        }
        if let Some(engine) = self.engine.upgrade() {
            let tables = std::mem::take(&mut self.tables_dirty).then(|| self.tables.clone());
            let settings = std::mem::take(&mut self.settings_dirty).then(|| self.settings.clone());
            engine.publish(
                tables,
                settings,
                last.unwrap_or_else(|| engine.last_seq()),
                &self.migs,
            );
        }
        Ok(())
    }

    /// Appends the batch's migrations to the journal and commits (fsync).
    fn commit_journal(&mut self) -> Result<()> {
        if self.migs.is_empty() {
            return Ok(());
        }
        let ts = journal::now();
        self.jr.execute_batch("BEGIN IMMEDIATE")?;
        let r = (|| {
            journal::set_meta(&self.jr, "files_seq", &self.files_seq.to_string())?;
            for m in self.migs.iter_mut() {
                m.ts = ts.clone();
                journal::append(&self.jr, m)?;
            }
            self.jr.execute_batch("COMMIT")?;
            Ok::<_, Error>(())
        })();
        if r.is_err() {
            let _ = self.jr.execute_batch("ROLLBACK");
        }
        r
    }

    /// Puts the batch's files in place (`staged` is what `plan.stage()` answered) and records the
    /// new files' stat facts in the index. Answers the folders left to fsync, and the first
    /// failure (it goes on past one).
    fn apply_files(
        &mut self,
        plan: FilePlan,
        staged: Vec<Option<Result<PathBuf>>>,
    ) -> (Vec<PathBuf>, Result<()>) {
        let ops = match plan {
            FilePlan::Ordered(fops) => return (vec![], self.apply_ordered(fops)),
            FilePlan::Rows(ops) => ops,
        };
        let mut first_err = None;
        let mut dirs = BTreeSet::new();
        let mut written = vec![];
        for (op, staged) in ops.into_iter().zip(staged) {
            let r = match staged {
                Some(Ok(tmp)) => std::fs::rename(&tmp, &op.path).map_err(Error::from),
                Some(Err(e)) => Err(e),
                None => files::remove_file(&op.path),
            };
            match r {
                Ok(()) => {
                    dirs.insert(op.path.parent().unwrap_or(&self.root).to_path_buf());
                    if let (Some(_), Some(row)) = (&op.bytes, op.row) {
                        written.push((op.path, row));
                    }
                }
                Err(e) => {
                    tracing::error!(path = %op.path.display(), "cannot write the file: {e}");
                    first_err.get_or_insert(e);
                }
            }
        }
        for (path, (table, id)) in written {
            if let Some((mtime, size)) = files::stat(&path)
                && let Err(e) = index::touch_file(&self.idx, &table, &id, mtime, size)
            {
                first_err.get_or_insert(e);
            }
        }
        let dirs = dirs.into_iter().filter(|d| d.exists()).collect();
        (dirs, first_err.map_or(Ok(()), Err))
    }

    /// Applies file operations one after the other, in order (batches that make or remove folders).
    fn apply_ordered(&mut self, fops: Vec<FileOp>) -> Result<()> {
        let mut dirs = BTreeSet::new();
        let mut written = vec![];
        for op in fops {
            match op {
                FileOp::Write { path, bytes, row } => {
                    files::write_atomic(&path, &bytes)?;
                    dirs.insert(path.parent().unwrap_or(&self.root).to_path_buf());
                    if let Some(r) = row {
                        written.push((path, r));
                    }
                }
                FileOp::Remove { path } => {
                    files::remove_file(&path)?;
                    dirs.insert(path.parent().unwrap_or(&self.root).to_path_buf());
                }
                FileOp::MakeDir(d) => files::create_dirs(&self.root, &d)?,
                FileOp::RemoveTableDir(d) => {
                    dirs.retain(|x| !x.starts_with(&d));
                    files::remove_table_dir(&self.root, &d)?
                }
            }
        }
        for d in dirs {
            if d.exists() {
                files::fsync_dir(&d)?;
            }
        }
        for (path, (table, id)) in written {
            if let Some((mtime, size)) = files::stat(&path) {
                index::touch_file(&self.idx, &table, &id, mtime, size)?;
            }
        }
        Ok(())
    }

    /// Fsyncs the folders of the batches answered so far, which brings `files_seq` up to them.
    fn sync_unsynced(&mut self) {
        if self.unsynced.is_empty() {
            return;
        }
        let dirs = std::mem::take(&mut self.unsynced);
        let r = sync_dirs(&dirs);
        self.synced(r, self.unsynced_seq);
    }

    /// After the folders of every batch up to `seq` were fsynced (or failed to be).
    fn synced(&mut self, r: Result<()>, seq: i64) {
        match r {
            Err(e) => {
                tracing::error!(
                    "fsync of the row folders failed; the files will be redone at the next start: {e}"
                );
                self.files_behind = true;
            }
            Ok(()) if !self.files_behind => self.files_seq = self.files_seq.max(seq),
            Ok(()) => {}
        }
    }

    /// Records the files checkpoint so that the next start has nothing to redo.
    fn checkpoint(&mut self) {
        self.sync_unsynced();
        let _ = journal::set_meta(&self.jr, "files_seq", &self.files_seq.to_string());
    }

    fn table(&self, name: &str) -> Result<Arc<Table>> {
        TableName::parse(name)?;
        self.tables.get(name).cloned().ok_or_else(|| no_table(name))
    }

    fn mig(
        &mut self,
        op: &str,
        table: Option<&str>,
        row: Option<&str>,
        before: Value,
        after: Value,
        actor: &Actor,
    ) {
        self.migs.push(Migration {
            seq: 0,
            ts: String::new(),
            op: op.into(),
            table: table.map(Into::into),
            row: row.map(Into::into),
            before,
            after,
            actor: actor.clone(),
            call: None,
        });
    }

    fn apply(&mut self, cmd: Cmd, actor: &Actor) -> Result<Value> {
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
            Cmd::Event { op, call } => {
                self.migs.push(Migration {
                    seq: 0,
                    ts: String::new(),
                    op,
                    table: None,
                    row: None,
                    before: Value::Null,
                    after: Value::Null,
                    actor: actor.clone(),
                    call: Some(call),
                });
                Ok(json!({"seq": null}))
            }
            Cmd::Vacuum(_) | Cmd::RebuildIndex => unreachable!("run outside batches"),
        }
    }

    // ---- rows ----

    fn get(&self, t: &Table, id: &str) -> Result<Option<IndexedRow>> {
        index::get_row(&self.idx, t, id)
    }

    fn check_body(&self, t: &Table, body: &str) -> Result<()> {
        if body.len() as i64 > self.settings.max_body_bytes {
            return Err(Error::constraint(&t.name, "body", "max", format!("the body has {} bytes, more than the limit {}", body.len(), self.settings.max_body_bytes))
                .hint("shorten the body, split the note, or raise max_body_bytes with set_engine_settings"));
        }
        Ok(())
    }

    /// Uniqueness and links, checked against the index (which includes this batch).
    fn check_refs(&self, t: &Table, id: &str, values: &Map<String, Value>) -> Result<()> {
        for (cname, c) in &t.def.columns {
            let Some(v) = values.get(cname) else { continue };
            if c.unique
                && let Some(other) = index::unique_holder(&self.idx, t, cname, v, id)?
            {
                return Err(Error::constraint(
                    &t.name,
                    cname,
                    "unique",
                    format!("{v} is already the {cname} of row {other}"),
                )
                .hint(format!(
                    "{cname} must be unique in {}: pick another value or update row {other}",
                    t.name
                )));
            }
            if c.ty == ColumnType::Link {
                let target = c.table.as_deref().unwrap_or_default();
                let tid = v.as_str().unwrap_or_default();
                let exists = if target == t.name && tid == id {
                    true
                } else {
                    self.tables.contains_key(target) && index::row_exists(&self.idx, target, tid)?
                };
                if !exists {
                    return Err(Error::constraint(&t.name, cname, "link", format!("{cname} links to {tid:?}, which is not a row of {target}"))
                        .hint(format!("give the id of an existing row of {target} (select_rows finds them), or insert that row first")));
                }
            }
        }
        Ok(())
    }

    /// Writes a validated row: file op, index. Returns its journal state.
    fn put(
        &mut self,
        t: &Table,
        id: &str,
        version: i64,
        values: Map<String, Value>,
        body: String,
    ) -> Result<Value> {
        let bytes = files::render_row(t, &values, &body);
        let facts = FileFacts {
            mtime: 0,
            size: bytes.len() as i64,
            hash: files::hash(&bytes),
        };
        let row = IndexedRow {
            id: id.into(),
            version,
            values,
            body,
        };
        index::put_row(&self.idx, t, &row, &facts)?;
        self.fops.push(FileOp::Write {
            path: files::row_path(&self.root, &t.name, id),
            bytes,
            row: Some((t.name.clone(), id.into())),
        });
        Ok(state(&row))
    }

    fn remove(&mut self, t: &Table, id: &str) -> Result<()> {
        index::delete_row(&self.idx, &t.name, id)?;
        self.fops.push(FileOp::Remove {
            path: files::row_path(&self.root, &t.name, id),
        });
        Ok(())
    }

    /// Validates then writes a complete row state (used by insert, update, undo, restore).
    fn set_row(
        &mut self,
        t: &Table,
        id: &str,
        values: &Map<String, Value>,
        body: String,
        version: i64,
    ) -> Result<Value> {
        let values = t.check_row(values)?;
        self.check_body(t, &body)?;
        self.check_refs(t, id, &values)?;
        self.put(t, id, version, values, body)
    }

    fn insert(&mut self, a: args::InsertRow, actor: &Actor) -> Result<Value> {
        let t = self.table(&a.table)?;
        let id = match a.id {
            Some(id) => {
                names::check_row_id(&t.name, &id)?;
                if index::row_exists(&self.idx, &t.name, &id)?
                    || index::known_file(&self.idx, &t.name, &id)?.is_some()
                {
                    return Err(
                        Error::conflict(format!("row {id} already exists in {}", t.name))
                            .table(t.name.as_str())
                            .column("id")
                            .rule("unique")
                            .hint("use update_row to change it, or give another id"),
                    );
                }
                id
            }
            None => self.new_id(&t, &a.values)?,
        };
        let mut values = a.values;
        t.apply_defaults(&mut values);
        let after = self.set_row(&t, &id, &values, a.body.unwrap_or_default(), 1)?;
        self.mig(
            "insert",
            Some(&t.name),
            Some(&id),
            Value::Null,
            after,
            actor,
        );
        Ok(json!({"id": id, "version": 1, "seq": null}))
    }

    fn new_id(&self, t: &Table, values: &Map<String, Value>) -> Result<String> {
        let text = t
            .def
            .columns
            .iter()
            .filter(|(_, c)| c.ty == ColumnType::Text)
            .find_map(|(n, _)| values.get(n).and_then(Value::as_str))
            .unwrap_or("");
        let mut slug = String::new();
        for ch in text.chars().flat_map(char::to_lowercase) {
            if ch.is_ascii_alphanumeric() {
                slug.push(ch);
            } else if !slug.is_empty() && !slug.ends_with('-') {
                slug.push('-');
            }
            if slug.len() >= 40 {
                break;
            }
        }
        let slug = slug.trim_end_matches('-').to_string();
        let taken = |id: &str| -> Result<bool> {
            Ok(index::row_exists(&self.idx, &t.name, id)?
                || index::known_file(&self.idx, &t.name, id)?.is_some())
        };
        if !slug.is_empty() {
            if !taken(&slug)? {
                return Ok(slug);
            }
            for n in 2..20 {
                let id = format!("{slug}-{n}");
                if !taken(&id)? {
                    return Ok(id);
                }
            }
        }
        loop {
            let r: String = (0..10)
                .map(|_| b"abcdefghijklmnopqrstuvwxyz0123456789"[rand::random_range(0..36)] as char)
                .collect();
            let id = if slug.is_empty() {
                r
            } else {
                format!("{slug}-{r}")
            };
            if !taken(&id)? {
                return Ok(id);
            }
        }
    }

    fn update(&mut self, a: args::UpdateRow, actor: &Actor) -> Result<Value> {
        let t = self.table(&a.table)?;
        names::check_row_id(&t.name, &a.id)?;
        let cur = self.get(&t, &a.id)?.ok_or_else(|| no_row(&t.name, &a.id))?;
        if let Some(v) = a.expect_version
            && v != cur.version
        {
            return Err(Error::conflict(format!("row {} is at version {}, not {v}", a.id, cur.version))
                .table(t.name.as_str())
                .rule("expect_version")
                .hint("someone changed it since you read it: get_row again, reapply your change, and send the new version"));
        }
        let mut values = cur.values.clone();
        for (k, v) in a.values {
            if v.is_null() {
                values.remove(&k);
            } else {
                values.insert(k, v);
            }
        }
        let body = a.body.unwrap_or_else(|| cur.body.clone());
        let version = cur.version + 1;
        let after = self.set_row(&t, &a.id, &values, body, version)?;
        self.mig(
            "update",
            Some(&t.name),
            Some(&a.id),
            state(&cur),
            after,
            actor,
        );
        Ok(json!({"id": a.id, "version": version, "seq": null}))
    }

    /// A row of another table that links to this one (deleting it would break the link).
    fn linked_from(&self, table: &str, id: &str) -> Result<Option<(String, String, String)>> {
        for (name, other) in &self.tables {
            for (cname, c) in &other.def.columns {
                if c.ty == ColumnType::Link
                    && c.table.as_deref() == Some(table)
                    && let Some(from) = index::linking_row(&self.idx, name, cname, id)?
                    && !(name == table && from == id)
                {
                    return Ok(Some((name.clone(), cname.clone(), from)));
                }
            }
        }
        Ok(None)
    }

    fn delete_checked(&mut self, t: &Table, id: &str) -> Result<()> {
        if let Some((tbl, col, from)) = self.linked_from(&t.name, id)? {
            return Err(Error::constraint(
                &t.name,
                "id",
                "link",
                format!("row {id} is linked from {tbl} row {from} (column {col})"),
            )
            .hint(format!("update or delete {tbl} row {from} first")));
        }
        self.remove(t, id)
    }

    fn delete(&mut self, a: args::RowRef, actor: &Actor) -> Result<Value> {
        let t = self.table(&a.table)?;
        names::check_row_id(&t.name, &a.id)?;
        let Some(cur) = self.get(&t, &a.id)? else {
            if index::known_file(&self.idx, &t.name, &a.id)?.is_some() {
                // An invalid (hand-edited) file: deleting it is how the owner may get rid of it.
                self.remove(&t, &a.id)?;
                self.mig(
                    "delete",
                    Some(&t.name),
                    Some(&a.id),
                    Value::Null,
                    Value::Null,
                    actor,
                );
                return Ok(json!({"seq": null}));
            }
            return Err(no_row(&t.name, &a.id));
        };
        self.delete_checked(&t, &a.id)?;
        self.mig(
            "delete",
            Some(&t.name),
            Some(&a.id),
            state(&cur),
            Value::Null,
            actor,
        );
        Ok(json!({"seq": null}))
    }

    // ---- tables ----

    fn define(&mut self, t: &Table) -> Result<()> {
        let dir = files::table_dir(&self.root, &t.name);
        self.fops.push(FileOp::MakeDir(dir.clone()));
        self.fops.push(FileOp::Write {
            path: dir.join(files::TABLE_FILE),
            bytes: files::render_table_def(&t.def),
            row: None,
        });
        Ok(())
    }

    fn check_link_targets(&self, t: &Table) -> Result<()> {
        for (cname, c) in &t.def.columns {
            if let Some(target) = &c.table
                && target != &t.name
                && !self.tables.contains_key(target)
            {
                return Err(Error::invalid(format!(
                    "link column {cname} points to {target}, which does not exist"
                ))
                .table(t.name.as_str())
                .column(cname.as_str())
                .rule("table")
                .hint("create the linked table first, or fix the name"));
            }
        }
        Ok(())
    }

    fn create_table(&mut self, a: args::CreateTable, actor: &Actor) -> Result<Value> {
        let name = TableName::parse(&a.table)?;
        if self.tables.contains_key(name.as_str()) {
            return Err(Error::conflict(format!("table {name} already exists"))
                .table(name.as_str())
                .hint("use alter_table to change it, or pick another name"));
        }
        let def = TableDef {
            description: a.description.unwrap_or_default(),
            columns: a.columns,
        };
        let t = Table::compile(name.as_str(), def)?;
        self.check_link_targets(&t)?;
        self.install_table(t, Value::Null, actor, "create_table")?;
        Ok(json!({"table": name.as_str(), "seq": null}))
    }

    fn install_table(&mut self, t: Table, before: Value, actor: &Actor, op: &str) -> Result<()> {
        self.define(&t)?;
        index::create_table(&self.idx, &t, &defhash(&t.def))?;
        let after = serde_json::to_value(&t.def).unwrap_or_default();
        self.mig(op, Some(&t.name), None, before, after, actor);
        self.tables.insert(t.name.clone(), Arc::new(t));
        self.tables_dirty = true;
        Ok(())
    }

    fn drop_table(&mut self, a: args::TableArg, actor: &Actor) -> Result<Value> {
        let t = self.table(&a.table)?;
        for (name, other) in &self.tables {
            if name != &t.name
                && let Some((cname, _)) = other
                    .def
                    .columns
                    .iter()
                    .find(|(_, c)| c.table.as_deref() == Some(t.name.as_str()))
            {
                return Err(Error::conflict(format!(
                    "table {name} links to {} (column {cname})",
                    t.name
                ))
                .table(t.name.as_str())
                .hint(format!("drop column {cname} of {name} first (alter_table)")));
            }
        }
        let rows: Vec<Value> = index::all_rows(&self.idx, &t)?
            .into_iter()
            .map(|r| json!({"id": r.id, "version": r.version, "values": r.values, "body": r.body}))
            .collect();
        let mut before = serde_json::to_value(&t.def).unwrap_or_default();
        before["rows"] = Value::Array(rows);
        index::drop_table(&self.idx, &t.name)?;
        self.fops.push(FileOp::RemoveTableDir(files::table_dir(
            &self.root, &t.name,
        )));
        self.tables.remove(&t.name);
        self.tables_dirty = true;
        self.mig(
            "drop_table",
            Some(&t.name),
            None,
            before,
            Value::Null,
            actor,
        );
        Ok(json!({"table": t.name, "seq": null}))
    }

    fn alter_table(&mut self, a: args::AlterTable, actor: &Actor) -> Result<Value> {
        let t = self.table(&a.table)?;
        let mut def = t.def.clone();
        let bad = |col: &str, msg: String, hint: &str| {
            Error::invalid(msg)
                .table(t.name.as_str())
                .column(col)
                .rule("alter_table")
                .hint(hint.to_string())
        };
        if let Some(d) = a.description {
            def.description = d;
        }
        for c in &a.drop {
            if def.columns.shift_remove(c).is_none() {
                return Err(bad(
                    c,
                    format!("no column {c} to drop"),
                    "describe_table lists the columns",
                ));
            }
        }
        for (old, new) in &a.rename {
            names::check_column_name(&t.name, new)?;
            if def.columns.contains_key(new) {
                return Err(bad(
                    new,
                    format!("column {new} already exists"),
                    "pick another new name",
                ));
            }
            let Some(i) = def.columns.get_index_of(old) else {
                return Err(bad(
                    old,
                    format!("no column {old} to rename"),
                    "describe_table lists the columns",
                ));
            };
            let (_, c) = def.columns.shift_remove_index(i).unwrap();
            def.columns.shift_insert(i, new.clone(), c);
        }
        for (c, cd) in &a.change {
            match def.columns.get_mut(c) {
                Some(slot) => *slot = cd.clone(),
                None => {
                    return Err(bad(
                        c,
                        format!("no column {c} to change"),
                        "use `add` for a new column",
                    ));
                }
            }
        }
        for (c, cd) in &a.add {
            if def.columns.contains_key(c) {
                return Err(bad(
                    c,
                    format!("column {c} already exists"),
                    "use `change` to alter it",
                ));
            }
            if cd.required && cd.default.is_none() {
                return Err(Error::constraint(&t.name, c, "required", format!("new column {c} is required but has no default, so existing rows would break"))
                    .hint("give it a default (existing rows receive it) or make it optional"));
            }
            def.columns.insert(c.clone(), cd.clone());
        }
        let nt = Table::compile(&t.name, def)?;
        self.check_link_targets(&nt)?;
        // Every row must fit the new definition; files change only where values do.
        let rows = index::all_rows(&self.idx, &t)?;
        let mut changed = vec![];
        for r in &rows {
            let mut v = r.values.clone();
            for c in &a.drop {
                v.remove(c);
            }
            for (old, new) in &a.rename {
                if let Some(x) = v.remove(old) {
                    v.insert(new.clone(), x);
                }
            }
            for (c, cd) in &a.add {
                if let Some(d) = &cd.default {
                    v.insert(c.clone(), d.clone());
                }
            }
            let v = nt.check_row(&v).map_err(|e| {
                let msg = format!("row {} would break: {}", r.id, e.message);
                e.with_message(msg).hint(
                    "fix or update those rows first, give a default, or loosen the constraint",
                )
            })?;
            if v != r.values || !a.rename.is_empty() {
                changed.push((r, v));
            }
        }
        let before = serde_json::to_value(&t.def).unwrap_or_default();
        index::create_table(&self.idx, &nt, &defhash(&nt.def))?;
        let after = serde_json::to_value(&nt.def).unwrap_or_default();
        self.define(&nt)?;
        let nt = Arc::new(nt);
        self.tables.insert(nt.name.clone(), nt.clone());
        self.tables_dirty = true;
        let mut after_meta = after.clone();
        after_meta["rows_changed"] = Value::from(changed.len());
        self.mig(
            "alter_table",
            Some(&nt.name),
            None,
            before,
            after_meta,
            actor,
        );
        // Re-index every row under the new definition (unique checks included).
        let changed_ids: HashMap<&str, Map<String, Value>> = changed
            .into_iter()
            .map(|(r, v)| (r.id.as_str(), v))
            .collect();
        for r in &rows {
            match changed_ids.get(r.id.as_str()) {
                Some(v) => {
                    self.check_refs(&nt, &r.id, v)?;
                    let st = self.put(&nt, &r.id, r.version + 1, v.clone(), r.body.clone())?;
                    self.mig(
                        "alter_table",
                        Some(&nt.name),
                        Some(&r.id),
                        state(r),
                        st,
                        actor,
                    );
                }
                None => {
                    self.check_refs(&nt, &r.id, &r.values)?;
                    let path = files::row_path(&self.root, &nt.name, &r.id);
                    let bytes = std::fs::read(&path).unwrap_or_default();
                    let (mtime, size) = files::stat(&path).unwrap_or((0, 0));
                    index::put_row(
                        &self.idx,
                        &nt,
                        r,
                        &FileFacts {
                            mtime,
                            size,
                            hash: files::hash(&bytes),
                        },
                    )?;
                }
            }
        }
        Ok(json!({"table": nt.name, "seq": null}))
    }

    // ---- settings ----

    fn set_settings(&mut self, a: args::SetSettings, actor: &Actor) -> Result<Value> {
        let new = self.settings.merged(&a.settings)?;
        self.put_settings(new, actor, "settings")
    }

    fn put_settings(&mut self, new: Settings, actor: &Actor, op: &str) -> Result<Value> {
        let before = serde_json::to_value(&self.settings).unwrap_or_default();
        let after = serde_json::to_value(&new).unwrap_or_default();
        let bytes = serde_json::to_vec_pretty(&new).unwrap_or_default();
        self.fops.push(FileOp::Write {
            path: self.root.join(".datanotes/settings.json"),
            bytes,
            row: None,
        });
        self.settings = new;
        self.settings_dirty = true;
        self.mig(op, None, None, before, after, actor);
        Ok(json!({"settings": self.settings, "seq": null}))
    }

    // ---- undo and restore ----

    fn vacuumed_before(&self) -> Result<i64> {
        journal::meta_i64(&self.jr, "vacuumed_before")
    }

    fn undo(&mut self, seq: i64, actor: &Actor) -> Result<Value> {
        let m = journal::get(&self.jr, seq)?.ok_or_else(|| {
            Error::not_found(format!("no migration {seq}"))
                .hint("list_migrations shows the migrations and their seq")
        })?;
        let conflict = |what: String| {
            Error::conflict(format!("cannot undo migration {seq}: {what}"))
                .rule("undo")
                .hint("undo the later migrations first (list_migrations), or use restore to go back to a point in time")
        };
        let table = m.table.clone().unwrap_or_default();
        match (m.op.as_str(), &m.row) {
            ("tool_call", _) => {
                Err(Error::invalid("a tool call changed nothing and cannot be undone").rule("undo"))
            }
            ("settings", _) => {
                if serde_json::to_value(&self.settings).unwrap_or_default() != m.after {
                    return Err(conflict("the settings changed since".into()));
                }
                let prev: Settings = serde_json::from_value(m.before.clone()).unwrap_or_default();
                self.put_settings(prev, actor, "undo")
            }
            (_, Some(id)) => {
                let t = self.table(&table)?;
                let cur = self.get(&t, id)?;
                if !same_state(cur.as_ref().map(state).as_ref(), &m.after) {
                    return Err(conflict(format!("row {id} changed since")));
                }
                let v = self.set_row_state(&t, id, cur, &m.before, actor, "undo")?;
                Ok(json!({"undone": seq, "row": v, "seq": null}))
            }
            // A table that appeared by hand is undone like one created.
            ("create_table", None) | ("hand_edit", None) if m.before.is_null() => {
                let t = self.table(&table)?;
                if index::count(&self.idx, &t.name)? > 0 {
                    return Err(conflict(format!("table {table} has rows now"))
                        .hint("delete its rows first, or drop_table it"));
                }
                self.drop_table(
                    args::TableArg {
                        table: table.clone(),
                    },
                    actor,
                )?;
                if let Some(last) = self.migs.last_mut() {
                    last.op = "undo".into();
                }
                Ok(json!({"undone": seq, "seq": null}))
            }
            ("drop_table", None) => {
                if self.tables.contains_key(&table) {
                    return Err(conflict(format!("table {table} exists again")));
                }
                let def: TableDef = serde_json::from_value(
                    json!({"description": m.before["description"], "columns": m.before["columns"]}),
                )
                .map_err(|e| Error::internal(format!("journal entry {seq} is unreadable: {e}")))?;
                let t = Table::compile(&table, def)?;
                self.install_table(t, Value::Null, actor, "undo")?;
                let t = self.table(&table)?;
                for r in m.before["rows"].as_array().cloned().unwrap_or_default() {
                    let id = r["id"].as_str().unwrap_or_default().to_string();
                    self.set_row_state(&t, &id, None, &r, actor, "undo")?;
                }
                Ok(json!({"undone": seq, "seq": null}))
            }
            ("alter_table", None) | ("hand_edit", None) => {
                let t = self.table(&table)?;
                let mut cur_def = serde_json::to_value(&t.def).unwrap_or_default();
                let mut want = m.after.clone();
                if let Some(o) = want.as_object_mut() {
                    o.remove("rows_changed");
                }
                if let Some(o) = cur_def.as_object_mut() {
                    o.remove("rows_changed");
                }
                if cur_def != want {
                    return Err(conflict(format!("table {table} was altered since")));
                }
                let n = m.after["rows_changed"].as_i64().unwrap_or(0);
                let row_migs = journal::list(
                    &self.jr,
                    &journal::Filter {
                        table: Some(table.clone()),
                        after: Some(seq),
                        before: Some(seq + n + 1),
                        limit: n,
                        ..Default::default()
                    },
                )?;
                let def: TableDef = serde_json::from_value(m.before.clone()).map_err(|e| {
                    Error::internal(format!("journal entry {seq} is unreadable: {e}"))
                })?;
                let old = Table::compile(&table, def)?;
                // Rows first leave the new shape, then the old definition comes back.
                let rows = index::all_rows(&self.idx, &t)?;
                let back: HashMap<String, Value> = row_migs
                    .iter()
                    .filter(|r| r.op == "alter_table")
                    .filter_map(|r| Some((r.row.clone()?, r.before.clone())))
                    .collect();
                let before_def = serde_json::to_value(&t.def).unwrap_or_default();
                index::create_table(&self.idx, &old, &defhash(&old.def))?;
                self.define(&old)?;
                let old = Arc::new(old);
                self.tables.insert(table.clone(), old.clone());
                self.tables_dirty = true;
                self.mig(
                    "undo",
                    Some(&table),
                    None,
                    before_def,
                    serde_json::to_value(&old.def).unwrap_or_default(),
                    actor,
                );
                for r in rows {
                    match back.get(&r.id) {
                        Some(prev) => {
                            let values = prev["values"].as_object().cloned().unwrap_or_default();
                            let body = prev["body"].as_str().unwrap_or_default().to_string();
                            let st = self.set_row(&old, &r.id, &values, body, r.version + 1)?;
                            self.mig("undo", Some(&table), Some(&r.id), state(&r), st, actor);
                        }
                        None => {
                            self.set_row(&old, &r.id, &r.values, r.body.clone(), r.version)?;
                        }
                    }
                }
                Ok(json!({"undone": seq, "seq": null}))
            }
            (op, _) => {
                Err(Error::invalid(format!("migration {seq} ({op}) cannot be undone")).rule("undo"))
            }
        }
    }

    /// Brings a row to a journal state (`{values, body}` or null), journaling it under `op`.
    fn set_row_state(
        &mut self,
        t: &Table,
        id: &str,
        cur: Option<IndexedRow>,
        target: &Value,
        actor: &Actor,
        op: &str,
    ) -> Result<Value> {
        let before = cur.as_ref().map(state).unwrap_or(Value::Null);
        let version = cur
            .as_ref()
            .map(|c| c.version)
            .unwrap_or(0)
            .max(target["version"].as_i64().unwrap_or(0))
            + 1;
        let after = if target.is_null() || target.get("invalid").is_some() {
            if cur.is_some() || index::known_file(&self.idx, &t.name, id)?.is_some() {
                self.delete_checked(t, id)?;
            }
            Value::Null
        } else {
            let values = target["values"].as_object().cloned().unwrap_or_default();
            let body = target["body"].as_str().unwrap_or_default().to_string();
            self.set_row(t, id, &values, body, version)?
        };
        self.mig(op, Some(&t.name), Some(id), before, after.clone(), actor);
        Ok(after)
    }

    fn restore(&mut self, a: args::Restore, actor: &Actor) -> Result<Value> {
        let t = self.table(&a.table)?;
        let vac = self.vacuumed_before()?;
        if a.seq < vac {
            return Err(
                Error::invalid(format!("history before migration {vac} was vacuumed"))
                    .table(t.name.as_str())
                    .rule("seq")
                    .hint(format!("restore to a seq of {vac} or later")),
            );
        }
        if a.seq > journal::last_seq(&self.jr)? {
            return Err(
                Error::invalid(format!("there is no migration {} yet", a.seq))
                    .rule("seq")
                    .hint("list_migrations shows the seqs"),
            );
        }
        let ids: Vec<String> = match &a.id {
            Some(id) => {
                names::check_row_id(&t.name, id)?;
                vec![id.clone()]
            }
            None => {
                let mut ids: BTreeSet<String> = index::all_rows(&self.idx, &t)?
                    .into_iter()
                    .map(|r| r.id)
                    .collect();
                // Every row the journal knows, also those whose history before seq was vacuumed.
                let mut st = self.jr.prepare(
                    "SELECT DISTINCT row FROM migrations WHERE tbl=?1 AND row IS NOT NULL",
                )?;
                for r in st.query_map([&t.name], |r| r.get::<_, String>(0))? {
                    ids.insert(r?);
                }
                ids.into_iter().collect()
            }
        };
        let mut restored = vec![];
        for id in ids {
            let target = journal::row_state_at(&self.jr, &t.name, &id, a.seq)?;
            let target = match target {
                Some(m) => m.after,
                // No migration of the row at or before seq (never, or vacuumed): its state then
                // is the before state of its next migration (null for its insert); with none,
                // it has not changed since.
                None => match journal::row_first_after(&self.jr, &t.name, &id, a.seq)? {
                    Some(m) => m.before,
                    None => continue,
                },
            };
            let cur = self.get(&t, &id)?;
            if same_state(cur.as_ref().map(state).as_ref(), &target) {
                continue;
            }
            self.set_row_state(&t, &id, cur, &target, actor, "restore")?;
            restored.push(id);
        }
        Ok(json!({"restored": restored, "seq": null}))
    }

    // ---- hand edits ----

    fn scan(&mut self, table: Option<String>, id: Option<String>) -> Result<Value> {
        let actor = Actor::hand_edit();
        let mut found = 0;
        if id.is_none() {
            found += self.scan_defs(table.as_deref(), &actor)?;
        }
        let names: Vec<String> = match &table {
            Some(t) => self
                .tables
                .contains_key(t)
                .then(|| t.clone())
                .into_iter()
                .collect(),
            None => self.tables.keys().cloned().collect(),
        };
        for name in names {
            let t = self.tables[&name].clone();
            if let Some(id) = &id {
                let known = index::known_file(&self.idx, &name, id)?;
                let path = files::row_path(&self.root, &name, id);
                let same = match (&known, files::stat(&path)) {
                    (Some(k), Some((m, s))) => k.mtime == m && k.size == s,
                    (None, None) => true,
                    _ => false,
                };
                if !same {
                    let seen = look_at(&self.root, &t, id.clone(), known)?;
                    found += self.check_file(&t, seen, &actor)? as usize;
                }
                continue;
            }
            let dir = files::table_dir(&self.root, &name);
            let mut known = index::known_files(&self.idx, &name)?;
            let mut todo = vec![];
            for f in files::list_rows(&dir) {
                let k = known.remove(&f.id);
                if k.as_ref()
                    .is_some_and(|k| k.mtime == f.mtime_ns && k.size == f.size)
                {
                    continue;
                }
                todo.push((f.id, k));
            }
            todo.extend(known.into_iter().map(|(id, k)| (id, Some(k))));
            found += self.check_files(&t, todo, &actor)?;
        }
        Ok(json!({"hand_edits": found}))
    }

    /// In a folder scan alone in its batch, commits the hand edits found so far once there are
    /// `SCAN_CHUNK` of them, and goes on in a new transaction (each hand edit stands on its own).
    fn commit_scan_chunk(&mut self) -> Result<()> {
        if !self.solo_scan || self.migs.len() < SCAN_CHUNK {
            return Ok(());
        }
        self.idx.execute_batch("RELEASE job")?;
        let r = self.commit();
        self.migs.clear();
        if r.is_err() {
            let _ = self.idx.execute_batch("ROLLBACK");
            (self.tables, self.settings) = self.job_base.clone();
        } else {
            self.batch_base = (self.tables.clone(), self.settings.clone());
            self.job_base = self.batch_base.clone();
        }
        self.idx.execute_batch("BEGIN; SAVEPOINT job")?;
        r
    }

    /// Compares one file (as `look_at` saw it) with the index; journals a difference as a hand
    /// edit.
    fn check_file(&mut self, t: &Table, seen: SeenRow, actor: &Actor) -> Result<bool> {
        let SeenRow { id, known, file } = seen;
        let id = id.as_str();
        let cur = self.get(t, id)?;
        let before = cur.as_ref().map(state).unwrap_or(Value::Null);
        let Some(file) = file else {
            if known.is_none() {
                return Ok(false);
            }
            index::delete_row(&self.idx, &t.name, id)?;
            self.mig(
                "hand_edit",
                Some(&t.name),
                Some(id),
                before,
                Value::Null,
                actor,
            );
            return Ok(true);
        };
        let facts = file.facts;
        let Some(checked) = file.checked else {
            index::touch_file(&self.idx, &t.name, id, facts.mtime, facts.size)?;
            return Ok(false);
        };
        let version = cur.as_ref().map(|c| c.version).unwrap_or(0) + 1;
        let checked = checked.and_then(|rf| {
            self.check_refs(t, id, &rf.values)
                .map_err(|e| e.message.clone())?;
            Ok(rf)
        });
        match checked {
            Ok(rf) => {
                let row = IndexedRow {
                    id: id.into(),
                    version,
                    values: rf.values,
                    body: rf.body,
                };
                index::put_row(&self.idx, t, &row, &facts)?;
                self.mig(
                    "hand_edit",
                    Some(&t.name),
                    Some(id),
                    before,
                    state(&row),
                    actor,
                );
            }
            Err(msg) => {
                tracing::warn!(table = %t.name, row = id, "hand-edited row is invalid: {msg}");
                index::put_invalid(&self.idx, &t.name, id, &facts, &msg)?;
                self.mig(
                    "hand_edit",
                    Some(&t.name),
                    Some(id),
                    before,
                    json!({"invalid": msg}),
                    actor,
                );
            }
        }
        Ok(true)
    }

    /// Checks many files of a table: another thread reads, hashes and validates them ahead
    /// while this one compares them with the index and journals the differences.
    fn check_files(
        &mut self,
        t: &Table,
        todo: Vec<(String, Option<index::KnownFile>)>,
        actor: &Actor,
    ) -> Result<usize> {
        let mut found = 0;
        if todo.len() < 64 {
            for (id, known) in todo {
                let seen = look_at(&self.root, t, id, known)?;
                found += self.check_file(t, seen, actor)? as usize;
                self.commit_scan_chunk()?;
            }
            return Ok(found);
        }
        let root = self.root.clone();
        std::thread::scope(|s| {
            let (tx, rx) = mpsc::sync_channel(256);
            s.spawn(move || {
                for (id, known) in todo {
                    let seen = look_at(&root, t, id, known);
                    let failed = seen.is_err();
                    if tx.send(seen).is_err() || failed {
                        break;
                    }
                }
            });
            for seen in rx {
                found += self.check_file(t, seen?, actor)? as usize;
                self.commit_scan_chunk()?;
            }
            Ok(found)
        })
    }

    /// Table definitions added, changed or removed by hand.
    fn scan_defs(&mut self, only: Option<&str>, actor: &Actor) -> Result<usize> {
        let on_disk: HashMap<String, PathBuf> = files::find_tables(&self.root)
            .into_iter()
            .filter(|(n, _)| only.is_none_or(|o| o == n))
            .collect();
        let mut found = 0;
        let known: Vec<String> = self
            .tables
            .keys()
            .filter(|n| only.is_none_or(|o| o == n.as_str()))
            .cloned()
            .collect();
        for name in &known {
            if !on_disk.contains_key(name) {
                let t = self.tables.remove(name).unwrap();
                index::drop_table(&self.idx, name)?;
                self.tables_dirty = true;
                self.mig(
                    "hand_edit",
                    Some(name),
                    None,
                    serde_json::to_value(&t.def).unwrap_or_default(),
                    Value::Null,
                    actor,
                );
                found += 1;
            }
        }
        for (name, dir) in on_disk {
            let text = std::fs::read_to_string(dir.join(files::TABLE_FILE)).unwrap_or_default();
            let t = match files::parse_table_def(&text)
                .map_err(Error::invalid)
                .and_then(|d| Table::compile(&name, d))
            {
                Ok(t) => t,
                Err(e) => {
                    tracing::error!(table = %name, "hand-edited definition is invalid, keeping the previous one: {e}");
                    continue;
                }
            };
            let before = match self.tables.get(&name) {
                Some(cur) if cur.def == t.def => continue,
                Some(cur) => serde_json::to_value(&cur.def).unwrap_or_default(),
                None => Value::Null,
            };
            if before.is_null() {
                // A new table: its rows are left to the row scan that follows, which journals them.
                index::create_table(&self.idx, &t, &defhash(&t.def))?;
            } else {
                let old = self.tables.get(&name).cloned();
                let old_rows: HashMap<String, IndexedRow> = match &old {
                    Some(o) => index::all_rows(&self.idx, o)?
                        .into_iter()
                        .map(|r| (r.id.clone(), r))
                        .collect(),
                    None => HashMap::new(),
                };
                let old_files = index::known_files(&self.idx, &name)?;
                let versions = index_versions(&self.idx, old.as_deref())?;
                reindex_table(&self.idx, &self.root, &t, &versions)?;
                flag_ref_violations(&self.idx, &self.tables)?;
                // Rows whose files changed along with the definition are hand edits too.
                let new_files = index::known_files(&self.idx, &name)?;
                let mut ids: BTreeSet<&String> = old_files.keys().collect();
                ids.extend(new_files.keys());
                for id in ids {
                    let (was, now) = (old_files.get(id), new_files.get(id));
                    if was.map(|k| &k.hash) == now.map(|k| &k.hash) {
                        continue;
                    }
                    let before = old_rows.get(id).map(state).unwrap_or(Value::Null);
                    let version = old_rows.get(id).map(|r| r.version).unwrap_or(0) + 1;
                    let after = match (now, index::get_row(&self.idx, &t, id)?) {
                        (Some(k), Some(mut r)) => {
                            r.version = version;
                            index::put_row(
                                &self.idx,
                                &t,
                                &r,
                                &FileFacts {
                                    mtime: k.mtime,
                                    size: k.size,
                                    hash: k.hash.clone(),
                                },
                            )?;
                            state(&r)
                        }
                        (Some(k), None) => json!({"invalid": k.error.clone().unwrap_or_default()}),
                        (None, _) => Value::Null,
                    };
                    self.mig("hand_edit", Some(&name), Some(id), before, after, actor);
                }
            }
            self.mig(
                "hand_edit",
                Some(&name),
                None,
                before,
                serde_json::to_value(&t.def).unwrap_or_default(),
                actor,
            );
            self.tables.insert(name, Arc::new(t));
            self.tables_dirty = true;
            found += 1;
        }
        Ok(found)
    }

    // ---- maintenance ----

    fn vacuum(&mut self, before_seq: i64) -> Result<Value> {
        let last = journal::last_seq(&self.jr)?;
        if before_seq < 0 || before_seq > last + 1 {
            return Err(Error::invalid(format!(
                "before_seq {before_seq} is outside the journal (1 to {})",
                last + 1
            ))
            .rule("before_seq")
            .hint("list_migrations shows the seqs"));
        }
        let removed = self
            .jr
            .execute("DELETE FROM migrations WHERE seq < ?1", [before_seq])?;
        let start = before_seq.max(self.vacuumed_before()?);
        journal::set_meta(&self.jr, "vacuumed_before", &start.to_string())?;
        self.jr.execute_batch("VACUUM")?;
        if let Some(engine) = self.engine.upgrade() {
            engine.recent.forget_before(start);
        }
        Ok(json!({"removed": removed, "feed_starts_at": start}))
    }

    fn rebuild_index(&mut self) -> Result<Value> {
        // Hand edits are found by comparing the files with the index: journal them against the
        // index as it is, before rebuilding it from the files (which would take them silently).
        let found = match self.run_scan() {
            Ok(v) => v["hand_edits"].as_i64().unwrap_or(0),
            Err(e) => {
                tracing::warn!("scan before the rebuild failed, rebuilding anyway: {e}");
                0
            }
        };
        let mut versions = HashMap::new();
        for name in self.tables.keys() {
            versions.insert(name.clone(), known_versions(&self.idx, &self.jr, name)?);
        }
        wipe_index(&self.idx)?;
        let mut rows = 0;
        for t in self.tables.values() {
            let versions = versions.remove(&t.name).unwrap_or_default();
            rows += reindex_table(&self.idx, &self.root, t, &versions)?;
        }
        flag_ref_violations(&self.idx, &self.tables)?;
        index::set_meta(
            &self.idx,
            "applied_seq",
            &journal::last_seq(&self.jr)?.to_string(),
        )?;
        let mut out = self.run_scan()?;
        out["hand_edits"] = Value::from(found + out["hand_edits"].as_i64().unwrap_or(0));
        out["tables"] = Value::from(self.tables.len());
        out["rows"] = Value::from(rows);
        Ok(out)
    }

    fn run_scan(&mut self) -> Result<Value> {
        let (tx, rx) = mpsc::sync_channel(1);
        self.run_batch(vec![Job {
            cmd: Cmd::Scan {
                table: None,
                id: None,
            },
            actor: Actor::hand_edit(),
            reply: Some(tx),
        }]);
        rx.recv().map_err(|_| Error::internal("scan lost"))?
    }
}

/// Two row states are the same if values and body are (versions differ by design).
fn same_state(cur: Option<&Value>, target: &Value) -> bool {
    match (cur, target.is_null() || target.get("invalid").is_some()) {
        (None, true) => true,
        (Some(c), false) => c["values"] == target["values"] && c["body"] == target["body"],
        _ => false,
    }
}

pub fn defhash(def: &TableDef) -> String {
    files::hash(&files::render_table_def(def))
}

/// A row file as a scan sees it, before comparing it with the index.
struct SeenRow {
    id: String,
    known: Option<index::KnownFile>,
    /// None: there is no such file.
    file: Option<SeenFile>,
}

struct SeenFile {
    facts: FileFacts,
    /// The parsed and validated row; None when the content is the one the index knows (only
    /// the file's stat changed).
    checked: Option<std::result::Result<RowFile, String>>,
}

/// Reads, hashes and validates a row file: everything a scan does without the index, so it can
/// run on another thread. The stat is taken before the read, so a change racing the scan is
/// seen again by the next one.
fn look_at(root: &Path, t: &Table, id: String, known: Option<index::KnownFile>) -> Result<SeenRow> {
    let path = files::row_path(root, &t.name, &id);
    let stat = files::stat(&path);
    let bytes = match std::fs::read(&path) {
        Ok(b) => Some(b),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(e.into()),
    };
    let file = bytes.map(|bytes| {
        let (mtime, size) = stat.unwrap_or((0, bytes.len() as i64));
        let hash = files::hash(&bytes);
        let checked = known
            .as_ref()
            .is_none_or(|k| k.hash != hash)
            .then(|| validate_file(t, &bytes));
        SeenFile {
            facts: FileFacts { mtime, size, hash },
            checked,
        }
    });
    Ok(SeenRow { id, known, file })
}

fn validate_file(t: &Table, bytes: &[u8]) -> std::result::Result<RowFile, String> {
    let text = std::str::from_utf8(bytes).map_err(|_| "the file is not UTF-8 text".to_string())?;
    let rf = files::parse_row(text)?;
    let values = t.check_row(&rf.values).map_err(|e| match &e.hint {
        Some(h) => format!("{} ({h})", e.message),
        None => e.message.clone(),
    })?;
    Ok(RowFile {
        values,
        body: rf.body,
    })
}

fn wipe_index(c: &Connection) -> Result<()> {
    for t in index::indexed_tables(c)? {
        index::drop_table(c, &t)?;
    }
    c.execute_batch(
        "DELETE FROM files; DELETE FROM fts; DELETE FROM fts_pending; DELETE FROM tables;",
    )?;
    index::set_meta(c, "layout", index::LAYOUT)?;
    Ok(())
}

fn index_versions(c: &Connection, t: Option<&Table>) -> Result<HashMap<String, i64>> {
    let Some(t) = t else {
        return Ok(HashMap::new());
    };
    let mut st = c.prepare(&format!(
        "SELECT id, version FROM {}",
        index::tname(&t.name)
    ))?;
    let v = st
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<rusqlite::Result<_>>()?;
    Ok(v)
}

fn journal_versions(j: &Connection, table: &str) -> Result<HashMap<String, i64>> {
    let mut st = j.prepare(
        "SELECT row, json_extract(after, '$.version') FROM migrations WHERE tbl=?1 AND row IS NOT NULL ORDER BY seq",
    )?;
    let mut out = HashMap::new();
    for r in st.query_map([table], |r| {
        Ok((r.get::<_, String>(0)?, r.get::<_, Option<i64>>(1)?))
    })? {
        let (id, v) = r?;
        if let Some(v) = v {
            out.insert(id, v);
        }
    }
    Ok(out)
}

/// The newest version of each row that the journal or the index (when it has the table) knows:
/// after a vacuum the journal may have forgotten a row's versions, and versions never go back.
fn known_versions(c: &Connection, j: &Connection, table: &str) -> Result<HashMap<String, i64>> {
    let mut out = journal_versions(j, table)?;
    if index::defhash(c, table)?.is_some() {
        let mut st = c.prepare(&format!("SELECT id, version FROM {}", index::tname(table)))?;
        for r in st.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))? {
            let (id, v) = r?;
            let e = out.entry(id).or_insert(v);
            *e = (*e).max(v);
        }
    }
    Ok(out)
}

/// After a table is re-read from its files, rows that break a uniqueness or a link (checked row
/// by row when they arrive while serving) are reported invalid, with the same messages. Of rows
/// sharing a unique value, the oldest file keeps it. Repeats while a removal breaks more links.
fn flag_ref_violations(c: &Connection, tables: &Tables) -> Result<()> {
    loop {
        let mut bad: Vec<(String, String, String)> = vec![];
        for (name, t) in tables {
            let tn = index::tname(name);
            for (cname, col) in &t.def.columns {
                let cn = format!("\"c:{cname}\"");
                if col.unique {
                    let sql = format!(
                        "SELECT x.id, x.{cn}, (SELECT y.id FROM {tn} y JOIN files fy ON fy.tbl=?1 AND fy.id=y.id
                           WHERE y.{cn}=x.{cn} AND y.id!=x.id AND (fy.mtime<fx.mtime OR (fy.mtime=fx.mtime AND y.id<x.id))
                           ORDER BY fy.mtime, y.id LIMIT 1)
                         FROM {tn} x JOIN files fx ON fx.tbl=?1 AND fx.id=x.id
                         WHERE x.{cn} IN (SELECT {cn} FROM {tn} WHERE {cn} IS NOT NULL GROUP BY {cn} HAVING count(*)>1)"
                    );
                    let mut st = c.prepare(&sql)?;
                    let rows = st.query_map([name], |r| {
                        Ok((
                            r.get::<_, String>(0)?,
                            r.get::<_, rusqlite::types::Value>(1)?,
                            r.get::<_, Option<String>>(2)?,
                        ))
                    })?;
                    for row in rows {
                        let (id, v, holder) = row?;
                        if let Some(holder) = holder {
                            let v = match v {
                                rusqlite::types::Value::Text(s) => Value::String(s),
                                rusqlite::types::Value::Integer(i) => Value::from(i),
                                rusqlite::types::Value::Real(f) => Value::from(f),
                                _ => Value::Null,
                            };
                            bad.push((
                                name.clone(),
                                id,
                                format!("{v} is already the {cname} of row {holder}"),
                            ));
                        }
                    }
                }
                if col.ty == ColumnType::Link {
                    let target = col.table.as_deref().unwrap_or_default();
                    let cond = if tables.contains_key(target) {
                        format!("AND {cn} NOT IN (SELECT id FROM {})", index::tname(target))
                    } else {
                        String::new()
                    };
                    let own = if target == name.as_str() {
                        format!("AND {cn} != id")
                    } else {
                        String::new()
                    };
                    let sql =
                        format!("SELECT id, {cn} FROM {tn} WHERE {cn} IS NOT NULL {own} {cond}");
                    let mut st = c.prepare(&sql)?;
                    let rows =
                        st.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))?;
                    for row in rows {
                        let (id, tid) = row?;
                        bad.push((
                            name.clone(),
                            id,
                            format!("{cname} links to {tid:?}, which is not a row of {target}"),
                        ));
                    }
                }
            }
        }
        if bad.is_empty() {
            return Ok(());
        }
        for (table, id, msg) in bad {
            if let Some(k) = index::known_file(c, &table, &id)? {
                index::put_invalid(
                    c,
                    &table,
                    &id,
                    &FileFacts {
                        mtime: k.mtime,
                        size: k.size,
                        hash: k.hash,
                    },
                    &msg,
                )?;
            }
        }
    }
}

/// Recreates a table's index from its files, silently (no journal). Returns the row count.
fn reindex_table(
    c: &Connection,
    root: &Path,
    t: &Table,
    versions: &HashMap<String, i64>,
) -> Result<usize> {
    index::create_table(c, t, &defhash(&t.def))?;
    let dir = files::table_dir(root, &t.name);
    let mut n = 0;
    for f in files::list_rows(&dir) {
        let path = dir.join(format!("{}.md", f.id));
        let Ok(bytes) = std::fs::read(&path) else {
            continue;
        };
        let facts = FileFacts {
            mtime: f.mtime_ns,
            size: f.size,
            hash: files::hash(&bytes),
        };
        match validate_file(t, &bytes) {
            Ok(rf) => {
                let version = versions.get(&f.id).copied().unwrap_or(1);
                index::put_row(
                    c,
                    t,
                    &IndexedRow {
                        id: f.id,
                        version,
                        values: rf.values,
                        body: rf.body,
                    },
                    &facts,
                )?;
                n += 1;
            }
            Err(msg) => index::put_invalid(c, &t.name, &f.id, &facts, &msg)?,
        }
    }
    Ok(n)
}

/// Opens the index; one that cannot be read, or has another layout, is replaced.
pub fn open_index_checked(path: &Path) -> anyhow::Result<Connection> {
    let check = |path: &Path| -> Result<Connection> {
        let c = index::open(path)?;
        c.query_row("SELECT count(*) FROM files", [], |r| r.get::<_, i64>(0))?;
        if index::get_meta(&c, "layout")?.as_deref() != Some(index::LAYOUT) {
            wipe_index(&c)?;
        }
        // Full-text changes queued but not applied (a rebuild stopped half-way).
        c.execute_batch("BEGIN")?;
        index::flush_fts(&c)?;
        c.execute_batch("COMMIT")?;
        Ok(c)
    };
    match check(path) {
        Ok(c) => Ok(c),
        Err(e) => {
            tracing::warn!("the index cannot be used ({e}); rebuilding it from the files");
            for suffix in ["", "-wal", "-shm"] {
                let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
            }
            Ok(check(path)?)
        }
    }
}

/// Redoes, on the files, the migrations the journal holds beyond the files' checkpoint.
/// Idempotent: a file already in the after state is left alone, and one that is in neither the
/// before nor the after state was edited by hand and is left for the scan.
pub fn redo(root: &Path, j: &Connection, tables: &mut Tables) -> anyhow::Result<()> {
    let files_seq = journal::meta_i64(j, "files_seq")?;
    let migs = journal::list(
        j,
        &journal::Filter {
            after: Some(files_seq),
            limit: i64::MAX,
            ..Default::default()
        },
    )?;
    let mut touched_dirs = BTreeSet::new();
    for m in migs {
        let Some(table) = m.table.clone() else {
            if matches!(m.op.as_str(), "settings" | "undo")
                && !m.after.is_null()
                && m.row.is_none()
                && let Ok(s) = serde_json::from_value::<Settings>(m.after.clone())
            {
                files::write_atomic(
                    &root.join(".datanotes/settings.json"),
                    &serde_json::to_vec_pretty(&s)?,
                )?;
            }
            continue;
        };
        if m.op == "hand_edit" {
            continue;
        }
        let dir = files::table_dir(root, &table);
        match &m.row {
            Some(id) => {
                let Some(t) = tables.get(&table).cloned() else {
                    continue;
                };
                let path = files::row_path(root, &table, id);
                let cur = std::fs::read(&path).ok();
                let render = |s: &Value| -> Option<Vec<u8>> {
                    if s.is_null() {
                        return None;
                    }
                    let values = s["values"].as_object().cloned().unwrap_or_default();
                    Some(files::render_row(
                        &t,
                        &values,
                        s["body"].as_str().unwrap_or_default(),
                    ))
                };
                let (want, was) = (render(&m.after), render(&m.before));
                if cur == want || (cur != was && cur.is_some()) {
                    continue;
                }
                match want {
                    Some(b) => {
                        files::create_dirs(root, &dir)?;
                        files::write_atomic(&path, &b)?
                    }
                    None => files::remove_file(&path)?,
                }
                touched_dirs.insert(dir);
            }
            None => {
                let def_after = serde_json::from_value::<TableDef>(
                    json!({"description": m.after.get("description"), "columns": m.after.get("columns")}),
                );
                match (m.after.is_null(), def_after) {
                    (true, _) => {
                        if dir.exists() {
                            files::remove_table_dir(root, &dir)?;
                        }
                        tables.remove(&table);
                    }
                    (false, Ok(def)) => {
                        if let Ok(t) = Table::compile(&table, def) {
                            files::create_dirs(root, &dir)?;
                            let bytes = files::render_table_def(&t.def);
                            if std::fs::read(dir.join(files::TABLE_FILE)).ok().as_deref()
                                != Some(&bytes[..])
                            {
                                files::write_atomic(&dir.join(files::TABLE_FILE), &bytes)?;
                                touched_dirs.insert(dir.clone());
                            }
                            tables.insert(table.clone(), Arc::new(t));
                        }
                    }
                    _ => {}
                }
            }
        }
    }
    for d in touched_dirs {
        if d.exists() {
            files::fsync_dir(&d)?;
        }
    }
    journal::set_meta(j, "files_seq", &journal::last_seq(j)?.to_string())?;
    Ok(())
}

/// Brings the index in line with the files after a start: tables whose definition changed are
/// re-indexed, rows touched by migrations the index has not seen are re-read, silently.
pub fn reconcile_index(
    root: &Path,
    c: &Connection,
    j: &Connection,
    tables: &Tables,
) -> anyhow::Result<()> {
    c.execute_batch("BEGIN")?;
    let r = (|| -> Result<()> {
        let mut flag_after = false;
        let mut fresh = BTreeSet::new();
        for name in index::indexed_tables(c)? {
            if !tables.contains_key(&name) {
                index::drop_table(c, &name)?;
            }
        }
        for (name, t) in tables {
            if index::defhash(c, name)?.as_deref() != Some(defhash(&t.def).as_str()) {
                reindex_table(c, root, t, &known_versions(c, j, name)?)?;
                flag_after = true;
                fresh.insert(name.clone());
            }
        }
        if flag_after {
            flag_ref_violations(c, tables)?;
        }
        let applied: i64 = index::get_meta(c, "applied_seq")?
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let migs = journal::list(
            j,
            &journal::Filter {
                after: Some(applied),
                limit: i64::MAX,
                ..Default::default()
            },
        )?;
        let mut latest: HashMap<(String, String), i64> = HashMap::new();
        for m in migs {
            if let (Some(t), Some(r)) = (m.table, m.row) {
                latest.insert((t, r), m.after["version"].as_i64().unwrap_or(0));
            }
        }
        for ((table, id), version) in latest {
            let Some(t) = tables.get(&table).filter(|_| !fresh.contains(&table)) else {
                continue;
            };
            let path = files::row_path(root, &table, &id);
            let Ok(bytes) = std::fs::read(&path) else {
                index::delete_row(c, &table, &id)?;
                continue;
            };
            let (mtime, size) = files::stat(&path).unwrap_or((0, 0));
            let facts = FileFacts {
                mtime,
                size,
                hash: files::hash(&bytes),
            };
            match validate_file(t, &bytes) {
                Ok(rf) => index::put_row(
                    c,
                    t,
                    &IndexedRow {
                        id,
                        version: version.max(1),
                        values: rf.values,
                        body: rf.body,
                    },
                    &facts,
                )?,
                Err(msg) => index::put_invalid(c, &table, &id, &facts, &msg)?,
            }
        }
        index::set_meta(c, "applied_seq", &journal::last_seq(j)?.to_string())?;
        index::flush_fts(c)?;
        Ok(())
    })();
    match r {
        Ok(()) => c.execute_batch("COMMIT")?,
        Err(e) => {
            let _ = c.execute_batch("ROLLBACK");
            return Err(e.into());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(cmd: Cmd) -> (Job, mpsc::Receiver<Result<Value>>) {
        let (tx, rx) = mpsc::sync_channel(1);
        let actor = Actor::new(Some("test".into()), None, None, None, None);
        (
            Job {
                cmd,
                actor,
                reply: Some(tx),
            },
            rx,
        )
    }

    fn args<T: serde::de::DeserializeOwned>(v: Value) -> T {
        serde_json::from_value(v).unwrap()
    }

    fn writer() -> (tempfile::TempDir, Writer) {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().to_path_buf();
        std::fs::create_dir_all(root.join(".datanotes")).unwrap();
        let jr = journal::open(&root.join(".datanotes/journal.db"), true).unwrap();
        let idx = open_index_checked(&root.join(".datanotes/index.db")).unwrap();
        (tmp, Writer::new(root, idx, jr, Tables::new(), Weak::new()))
    }

    fn run(w: &mut Writer, cmds: Vec<Cmd>) -> Vec<Value> {
        let (jobs, rxs): (Vec<_>, Vec<_>) = cmds.into_iter().map(job).unzip();
        w.run(jobs);
        rxs.into_iter()
            .map(|rx| rx.recv().unwrap().unwrap())
            .collect()
    }

    #[test]
    fn a_folder_scan_commits_in_chunks_and_loses_nothing() {
        let (tmp, mut w) = writer();
        let table = "a.b.c";
        run(
            &mut w,
            vec![Cmd::CreateTable(args(
                json!({"table": table, "columns": {"title": {"type": "text", "required": true}}}),
            ))],
        );
        let dir = tmp.path().join("a/b/c");
        for i in 0..70 {
            std::fs::write(
                dir.join(format!("r{i}.md")),
                format!("---\ntitle: row {i}\n---\n"),
            )
            .unwrap();
        }
        std::fs::write(dir.join("bad.md"), "---\nnope: 1\n---\n").unwrap();
        let out = run(
            &mut w,
            vec![Cmd::Scan {
                table: None,
                id: None,
            }],
        );
        assert_eq!(out[0]["hand_edits"], 71);
        let migs = journal::list(
            &w.jr,
            &journal::Filter {
                limit: 1000,
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(migs.len(), 72);
        assert!(migs[1..].iter().all(|m| m.op == "hand_edit"));
        let t = w.table(table).unwrap();
        assert_eq!(index::count(&w.idx, table).unwrap(), 70);
        assert_eq!(index::invalid_rows(&w.idx, table).unwrap().len(), 1);
        assert_eq!(
            index::get_meta(&w.idx, "applied_seq").unwrap().as_deref(),
            Some("72")
        );
        let row = index::get_row(&w.idx, &t, "r7").unwrap().unwrap();
        assert_eq!(row.values["title"], "row 7");
        // A second scan finds nothing new.
        let out = run(
            &mut w,
            vec![Cmd::Scan {
                table: None,
                id: None,
            }],
        );
        assert_eq!(out[0]["hand_edits"], 0);
    }

    /// The full-text index as (table, id, text), sorted.
    fn fts(w: &Writer) -> Vec<(String, String, String)> {
        let mut st = w
            .idx
            .prepare("SELECT files.tbl, files.id, fts.text FROM fts JOIN files ON files.fid = fts.rowid ORDER BY 1, 2")
            .unwrap();
        st.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap()
    }

    #[test]
    fn full_text_follows_every_write_of_a_batch() {
        let (tmp, mut w) = writer();
        let t = "a.b.c";
        run(
            &mut w,
            vec![
                Cmd::CreateTable(args(
                    json!({"table": t, "columns": {"title": {"type": "text"}}}),
                )),
                Cmd::CreateTable(args(
                    json!({"table": "a.b.d", "columns": {"title": {"type": "text"}}}),
                )),
            ],
        );
        // One batch: insert, update, insert then delete, a refused job, a row of another table.
        let (jobs, rxs): (Vec<_>, Vec<_>) = vec![
            Cmd::Insert(args(
                json!({"table": t, "id": "x", "values": {"title": "alpha"}, "body": "one"}),
            )),
            Cmd::Update(args(
                json!({"table": t, "id": "x", "values": {"title": "beta"}}),
            )),
            Cmd::Insert(args(
                json!({"table": t, "id": "y", "values": {"title": "gamma"}}),
            )),
            Cmd::Delete(args(json!({"table": t, "id": "y"}))),
            Cmd::Insert(args(
                json!({"table": t, "id": "x", "values": {"title": "refused"}}),
            )),
            Cmd::Insert(args(
                json!({"table": "a.b.d", "id": "z", "values": {"title": "delta"}}),
            )),
        ]
        .into_iter()
        .map(job)
        .unzip();
        w.run(jobs);
        let ok: Vec<bool> = rxs
            .into_iter()
            .map(|rx| rx.recv().unwrap().is_ok())
            .collect();
        assert_eq!(ok, [true, true, true, true, false, true]);
        let s = |a: &str, b: &str, c: &str| (a.to_string(), b.to_string(), c.to_string());
        assert_eq!(
            fts(&w),
            [s("a.b.c", "x", "beta\none"), s("a.b.d", "z", "delta\n")]
        );
        // Applied at the commit: nothing stays queued (see `index::flush_fts`).
        let queued: i64 = w
            .idx
            .query_row("SELECT count(*) FROM fts_pending", [], |r| r.get(0))
            .unwrap();
        assert_eq!(queued, 0);
        // A hand edit that breaks a row takes it out of the full-text index; a dropped table too.
        std::fs::write(tmp.path().join("a/b/c/x.md"), "---\ntitle: [1, 2]\n---\n").unwrap();
        run(
            &mut w,
            vec![Cmd::Scan {
                table: Some(t.into()),
                id: Some("x".into()),
            }],
        );
        run(
            &mut w,
            vec![Cmd::DropTable(args(json!({"table": "a.b.d"})))],
        );
        assert_eq!(fts(&w), []);
        // Rebuilding finds the same.
        std::fs::write(tmp.path().join("a/b/c/x.md"), "---\ntitle: back\n---\n").unwrap();
        w.rebuild_index().unwrap();
        assert_eq!(fts(&w), [s("a.b.c", "x", "back\n")]);
    }

    #[test]
    fn a_scan_batched_after_a_write_sees_no_hand_edit() {
        let (_tmp, mut w) = writer();
        let table = "a.b.c";
        run(
            &mut w,
            vec![Cmd::CreateTable(args(
                json!({"table": table, "columns": {"title": {"type": "text"}}}),
            ))],
        );
        run(
            &mut w,
            vec![Cmd::Insert(args(
                json!({"table": table, "id": "x", "values": {"title": "one"}}),
            ))],
        );
        // The file watcher's scan of row x lands in the same batch as the next write of x.
        run(
            &mut w,
            vec![
                Cmd::Update(args(
                    json!({"table": table, "id": "x", "values": {"title": "two"}}),
                )),
                Cmd::Scan {
                    table: Some(table.into()),
                    id: Some("x".into()),
                },
                Cmd::Scan {
                    table: None,
                    id: None,
                },
            ],
        );
        let migs = journal::list(
            &w.jr,
            &journal::Filter {
                limit: 100,
                ..Default::default()
            },
        )
        .unwrap();
        let ops: Vec<&str> = migs.iter().map(|m| m.op.as_str()).collect();
        assert_eq!(ops, ["create_table", "insert", "update"]);
        let t = w.table(table).unwrap();
        let row = index::get_row(&w.idx, &t, "x").unwrap().unwrap();
        assert_eq!((row.version, &row.values["title"]), (2, &json!("two")));
    }
}
