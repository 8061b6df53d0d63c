//! Group commit: the journal, the batch's files, the index, in that order.
//!
//! Read it for durability, with `recovery.rs`. A file that cannot be staged refuses the batch and
//! takes it back out of the journal. One that cannot be put in place after the journal commit is
//! not acknowledged: the writer then refuses every write (503, with the reason) and runs no scan
//! (it would take the old files for hand edits) until a redo gets through.

use super::*;
use crate::engine::files::{self};
use crate::engine::index::{self};
use crate::engine::journal::{self};
use crate::error::{Error, Result};
use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;

pub(super) enum FileOp {
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
            FileOp::MakeDir(d) => files::is_real_dir(d),
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

impl Writer {
    /// Journal, files, index, publish. On error nothing was acknowledged.
    pub(super) fn commit(&mut self) -> Result<()> {
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
        let stage_err = staged
            .iter()
            .flatten()
            .find_map(|r| r.as_ref().err())
            .cloned();
        if journaled.is_err() || stage_err.is_some() {
            for tmp in staged.into_iter().flatten().flatten() {
                let _ = files::remove_file(&tmp);
            }
            journaled?;
            // A file could not be written: the batch is refused, so the journal must not keep it
            // (nobody has seen it: the feed is published below, after the files).
            self.unjournal();
            return Err(file_error(
                stage_err.unwrap_or_else(|| Error::internal("?")),
            ));
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
        committed?;
        if let Err(e) = placed {
            // Journaled and indexed, but a file is not in place: the callers are not told it
            // worked, and no other write is taken until the redo puts the files in place.
            let e = file_error(e);
            self.fall_behind(&e.message);
            self.unplaced = Some(e);
        }
        let t3 = t0.elapsed();
        let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
        tracing::debug!(
            migrations = self.migs.len(),
            journal_ms = ms(t1),
            place_ms = ms(t2 - t1),
            index_ms = ms(t3 - t2),
            "batch committed"
        );
        crate::telemetry::metrics::metrics().committed(t3.as_secs_f64());
        if let Some(last) = last {
            self.unsynced.extend(dirs);
            self.unsynced_seq = last;
            if self.unsynced.is_empty() && self.behind.is_none() {
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

    /// Takes the batch's migrations back out of the journal (its files could not be written).
    /// Should that fail too, the journal keeps them and the files are behind it: the redo writes
    /// them once it can.
    fn unjournal(&mut self) {
        let (Some(first), Some(last)) = (self.migs.first(), self.migs.last()) else {
            return;
        };
        let r = self.jr.execute(
            "DELETE FROM migrations WHERE seq BETWEEN ?1 AND ?2",
            [first.seq, last.seq],
        );
        if let Err(e) = r {
            self.fall_behind(&format!("a refused batch stays in the journal: {e}"));
        }
    }

    /// The files are behind the journal: say why, and refuse writes until they catch up.
    pub(super) fn fall_behind(&mut self, why: &str) {
        tracing::error!(
            "the files are behind the journal; writes are refused until they catch up: {why}"
        );
        self.behind = Some(why.to_string());
    }

    /// While the files are behind, tries the redo again: true once they have caught up.
    pub(super) fn catch_up(&mut self) -> bool {
        if self.behind.is_none() {
            return true;
        }
        self.unsynced.clear();
        let mut tables = self.tables.clone();
        match crate::engine::recovery::redo(&self.root, &self.jr, &mut tables) {
            Ok(None) => {
                tracing::info!("the files caught up with the journal; writes are taken again");
                self.behind = None;
                self.files_seq = journal::last_seq(&self.jr).unwrap_or(self.files_seq);
                self.unsynced_seq = self.files_seq;
                true
            }
            Ok(Some(why)) => {
                self.behind = Some(why);
                false
            }
            Err(e) => {
                self.behind = Some(e.message.clone());
                false
            }
        }
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
                self.pacer.pace();
            }
            self.jr.execute_batch("COMMIT")?;
            Ok::<_, Error>(())
        })();
        if r.is_err() {
            journal::rollback(&self.jr, "a journal commit");
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
    pub(super) fn sync_unsynced(&mut self) {
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
            Err(e) => self.fall_behind(&format!("fsync of the row folders failed: {}", e.message)),
            Ok(()) if self.behind.is_none() => self.files_seq = self.files_seq.max(seq),
            Ok(()) => {}
        }
    }

    /// Records the files checkpoint so that the next start has nothing to redo.
    pub(super) fn checkpoint(&mut self) {
        self.sync_unsynced();
        if let Err(e) = journal::set_meta(&self.jr, "files_seq", &self.files_seq.to_string()) {
            // The next start redoes from the checkpoint recorded last (idempotent): slower, safe.
            tracing::error!("recording the files checkpoint at stop failed: {e}");
        }
    }
}

/// What a caller reads when the files could not be written.
fn file_error(e: Error) -> Error {
    Error::new(
        503,
        "files_unavailable",
        format!("the row files could not be written: {}", e.message),
    )
    .hint("check the database folder (free space, permissions, open files, a folder in the way of a row file), then try again")
}
