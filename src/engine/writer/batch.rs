//! The writer's loop: jobs taken in batches (a scan, a vacuum or a rebuild alone in its own),
//! each job in a savepoint of the batch's transaction, writes refused while the files are behind
//! the journal, and the row folders checked before anything is written into them.
//!
//! A hand-edit scan runs in a batch of its own, after the files of earlier writes exist. No SQL
//! result is ignored: a `SAVEPOINT` or `RELEASE` that fails refuses the job, a failed `ROLLBACK TO`
//! refuses the whole batch, and a definition or settings value that cannot be serialized refuses
//! the job rather than journal `null`.

use super::*;

impl Writer {
    pub(super) fn run(&mut self, jobs: Vec<Job>) {
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
    pub(super) fn refuse_while_behind(&mut self, jobs: Vec<Job>) -> Vec<Job> {
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

    pub(super) fn run_batch(&mut self, jobs: Vec<Job>) {
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
        let since = std::time::SystemTime::now();
        let n_jobs = jobs.len();
        let traces: Vec<opentelemetry::trace::SpanContext> =
            jobs.iter().filter_map(|j| j.trace.clone()).collect();
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
        // The commit as each traced write's caller waited for it: applied with the batch's
        // other jobs, journaled, files placed, indexed.
        for cx in &traces {
            crate::telemetry::trace::span_since(
                cx,
                "journal commit",
                since,
                vec![
                    opentelemetry::KeyValue::new("datanotes.batch.jobs", n_jobs as i64),
                    opentelemetry::KeyValue::new(
                        "datanotes.batch.migrations",
                        self.migs.len() as i64,
                    ),
                ],
                outcome.as_ref().err().map(|e| e.code),
            );
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
    pub(super) fn in_savepoint(
        &mut self,
        f: impl FnOnce(&mut Self) -> Result<Value>,
    ) -> Result<Value> {
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
    pub(super) fn check_folders(&mut self, from: usize) -> Result<()> {
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
}
