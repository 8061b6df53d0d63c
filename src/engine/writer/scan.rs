//! Hand edits: files compared with the index, differences journaled as `hand_edit`.
//!
//! This holds the folder scan and the check before every row write: before a job writes a row (or
//! every row of a table), the file is compared with the index (stat and hash). A hand edit found
//! then is journaled first, in its own savepoint, and the job applies on top of it or is refused
//! (`expect_version`: 409 naming it).

use super::*;
use crate::engine::files::{self, FileProblem, RowFile};
use crate::engine::index::{self, FileFacts, IndexedRow};
use crate::engine::journal::Actor;
use crate::engine::schema::Table;
use crate::error::{Error, Result};
use serde_json::{Value, json};
use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc;

impl Writer {
    /// Before a job writes a row (or every row of a table), journals a hand edit of it that no
    /// scan has seen yet, so that the write neither overwrites nor hides it. One stat per row
    /// write. Skipped for paths this batch already writes: their files are only written at the
    /// commit, and the old file is no hand edit.
    pub(super) fn hand_edits_first(&mut self, cmd: &Cmd) {
        let target = match cmd {
            Cmd::Insert(a) => a.id.clone().map(|id| (a.table.clone(), Some(id))),
            Cmd::Update(a) => Some((a.table.clone(), Some(a.id.clone()))),
            Cmd::Delete(a) => Some((a.table.clone(), Some(a.id.clone()))),
            Cmd::Restore(a) => Some((a.table.clone(), a.id.clone())),
            Cmd::AlterTable(a) => Some((a.table.clone(), None)),
            Cmd::DropTable(a) => Some((a.table.clone(), None)),
            Cmd::Undo(a) => journal::get(&self.jr, a.seq)
                .ok()
                .flatten()
                .and_then(|m| Some((m.table?, m.row))),
            _ => None,
        };
        let Some((table, id)) = target else { return };
        if !self.tables.contains_key(&table)
            || id.as_deref().is_some_and(|i| !crate::names::is_row_id(i))
        {
            return;
        }
        let dir = files::table_dir(&self.root, &table);
        let path = id
            .as_deref()
            .map(|i| files::row_path(&self.root, &table, i));
        let pending = self.fops.iter().any(|op| match (op, &path) {
            (FileOp::Write { path: p, .. } | FileOp::Remove { path: p }, Some(row)) => p == row,
            (FileOp::Write { path: p, .. } | FileOp::Remove { path: p }, None) => {
                p.starts_with(&dir)
            }
            (FileOp::MakeDir(d) | FileOp::RemoveTableDir(d), _) => d.starts_with(&dir),
        });
        if pending {
            return;
        }
        // A row's file is read and hashed, not only stat'ed: a hand edit of the same size
        // within the file system's clock tick of the last write has the same stat.
        let r = self.in_savepoint(|w| match id {
            Some(id) => {
                let t = w.tables[&table].clone();
                let known = index::known_file(&w.idx, &table, &id)?;
                let seen = look_at(&w.root, &t, id, known, w.max_body())?;
                w.check_file(&t, seen, &Actor::hand_edit())?;
                Ok(Value::Null)
            }
            None => w.scan(Some(table), None),
        });
        if let Err(e) = r {
            tracing::warn!(
                "looking for a hand edit before a write failed: {}",
                e.message
            );
        }
    }

    /// Whether this batch journaled a hand edit of the row (for errors that name it).
    pub(super) fn hand_edited_in_batch(&self, table: &str, id: &str) -> bool {
        self.migs.iter().any(|m| {
            m.op == Op::HandEdit
                && m.table.as_deref() == Some(table)
                && m.row.as_deref() == Some(id)
        })
    }

    pub(super) fn scan(&mut self, table: Option<String>, id: Option<String>) -> Result<Value> {
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
                // A table folder that became a link is a change of the table (it is gone).
                if files::check_dirs(&self.root, &files::table_dir(&self.root, &name)).is_err() {
                    found += self.scan_defs(Some(&name), &actor)?;
                    continue;
                }
                let known = index::known_file(&self.idx, &name, id)?;
                let path = files::row_path(&self.root, &name, id);
                let same = match (&known, files::stat(&path)) {
                    (Some(k), Some((m, s))) => k.mtime == m && k.size == s,
                    (None, None) => true,
                    _ => false,
                };
                if !same {
                    let seen = look_at(&self.root, &t, id.clone(), known, self.max_body())?;
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
    pub(super) fn commit_scan_chunk(&mut self) -> Result<()> {
        if !self.solo_scan || self.migs.len() < SCAN_CHUNK {
            return Ok(());
        }
        self.idx.execute_batch("RELEASE job")?;
        let r = self.commit();
        self.migs.clear();
        if r.is_err() {
            journal::rollback(&self.idx, "a scan chunk");
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
    pub(super) fn check_file(&mut self, t: &Table, seen: SeenRow, actor: &Actor) -> Result<bool> {
        let SeenRow { id, known, file } = seen;
        let id = id.as_str();
        let cur = self.get(t, id)?;
        let before = cur.as_ref().map(state).unwrap_or(RowState::Absent);
        let Some(file) = file else {
            if known.is_none() {
                return Ok(false);
            }
            index::delete_row(&self.idx, &t.name, id)?;
            self.mig(
                Op::HandEdit,
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
                    Op::HandEdit,
                    Some(&t.name),
                    Some(id),
                    before,
                    state(&row),
                    actor,
                );
            }
            Err(msg) => {
                tracing::warn!(table = %t.name, row = id, "hand-edited row is invalid: {msg}");
                index::put_invalid(&self.idx, &t.name, id, &facts, msg.as_str())?;
                self.mig(
                    Op::HandEdit,
                    Some(&t.name),
                    Some(id),
                    before,
                    RowState::Invalid(msg.into()),
                    actor,
                );
            }
        }
        Ok(true)
    }

    /// Checks many files of a table: another thread reads, hashes and validates them ahead
    /// while this one compares them with the index and journals the differences.
    pub(super) fn check_files(
        &mut self,
        t: &Table,
        todo: Vec<(String, Option<index::KnownFile>)>,
        actor: &Actor,
    ) -> Result<usize> {
        let mut found = 0;
        if todo.len() < 64 {
            for (id, known) in todo {
                let seen = look_at(&self.root, t, id, known, self.max_body())?;
                found += self.check_file(t, seen, actor)? as usize;
                self.commit_scan_chunk()?;
            }
            return Ok(found);
        }
        let root = self.root.clone();
        let max_body = self.max_body();
        std::thread::scope(|s| {
            let (tx, rx) = mpsc::sync_channel(256);
            s.spawn(move || {
                for (id, known) in todo {
                    let seen = look_at(&root, t, id, known, max_body);
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
    pub(super) fn scan_defs(&mut self, only: Option<&str>, actor: &Actor) -> Result<usize> {
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
                    Op::HandEdit,
                    Some(name),
                    None,
                    to_json(&t.def)?,
                    Value::Null,
                    actor,
                );
                found += 1;
            }
        }
        for (name, dir) in on_disk {
            let t = match files::read_table_text(&dir.join(files::TABLE_FILE))
                .and_then(|text| files::parse_table_def(&text))
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
                Some(cur) => to_json(&cur.def)?,
                None => Value::Null,
            };
            if before.is_null() {
                // A new table: its rows are left to the row scan that follows, which journals them.
                index::create_table(&self.idx, &t, &defhash(&t.def)?)?;
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
                // The newest version of each row the journal or the index knows: a row that was
                // invalid under the old definition has none in the index.
                let mut versions = index_versions(&self.idx, old.as_deref())?;
                for (id, v) in known_versions(&self.idx, &self.jr, &name)? {
                    let e = versions.entry(id).or_insert(v);
                    *e = (*e).max(v);
                }
                reindex_table(&self.idx, &self.root, &t, &versions, self.max_body())?;
                // Checked against the new definition: the old one may name columns that the
                // index no longer has (a link or unique column removed by hand).
                let mut tables = self.tables.clone();
                tables.insert(name.clone(), Arc::new(t.clone()));
                flag_ref_violations(&self.idx, &tables)?;
                // Rows whose files changed along with the definition are hand edits too.
                let new_files = index::known_files(&self.idx, &name)?;
                let mut ids: BTreeSet<&String> = old_files.keys().collect();
                ids.extend(new_files.keys());
                for id in ids {
                    let (was, now) = (old_files.get(id), new_files.get(id));
                    // A row whose file is unchanged counts too when the new definition changed
                    // whether it is valid (a row made invalid by a column it used before the
                    // definition named it, now valid).
                    let valid_before = old_rows.contains_key(id);
                    let valid_now = now.is_some_and(|k| k.error.is_none());
                    if was.map(|k| &k.hash) == now.map(|k| &k.hash) && valid_before == valid_now {
                        continue;
                    }
                    let before = match (old_rows.get(id), was) {
                        (Some(r), _) => state(r),
                        (None, Some(k)) => RowState::Invalid(k.error.clone().unwrap_or_default()),
                        (None, None) => RowState::Absent,
                    };
                    let version = old_rows
                        .get(id)
                        .map(|r| r.version)
                        .or_else(|| versions.get(id.as_str()).copied())
                        .unwrap_or(0)
                        + 1;
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
                        (Some(k), None) => RowState::Invalid(k.error.clone().unwrap_or_default()),
                        (None, _) => RowState::Absent,
                    };
                    self.mig(Op::HandEdit, Some(&name), Some(id), before, after, actor);
                }
            }
            self.mig(
                Op::HandEdit,
                Some(&name),
                None,
                before,
                to_json(&t.def)?,
                actor,
            );
            self.tables.insert(name, Arc::new(t));
            self.tables_dirty = true;
            found += 1;
        }
        Ok(found)
    }
}

/// A row file as a scan sees it, before comparing it with the index.
pub(super) struct SeenRow {
    id: String,
    known: Option<index::KnownFile>,
    /// None: there is no such file.
    file: Option<SeenFile>,
}

pub(super) struct SeenFile {
    facts: FileFacts,
    /// The parsed and validated row; None when the content is the one the index knows (only
    /// the file's stat changed).
    checked: Option<std::result::Result<RowFile, FileProblem>>,
}

/// Reads (bounded, never following a link: see `files::read_row`), hashes and validates a row
/// file: everything a scan does without the index, so it can run on another thread. The stat is
/// taken on the open file before the read, so a change racing the scan is seen again by the
/// next one. A file that is not read (a link, a pipe, too big, a bad name) is an invalid row.
pub(super) fn look_at(
    root: &Path,
    t: &Table,
    id: String,
    known: Option<index::KnownFile>,
    max_body: i64,
) -> Result<SeenRow> {
    let path = files::row_path(root, &t.name, &id);
    let file = files::read_row(&path, max_body).map(|read| {
        let hash = read.hash();
        let checked = known
            .as_ref()
            .is_none_or(|k| k.hash != hash)
            .then(|| check_read(t, read.bytes, max_body));
        SeenFile {
            facts: FileFacts {
                mtime: read.mtime_ns,
                size: read.size,
                hash,
            },
            checked,
        }
    });
    Ok(SeenRow { id, known, file })
}

/// Validates what `files::read_row` answered: a file that was not read is invalid for the
/// reason it was not.
pub(in crate::engine) fn check_read(
    t: &Table,
    bytes: std::result::Result<Vec<u8>, FileProblem>,
    max_body: i64,
) -> std::result::Result<RowFile, FileProblem> {
    validate_file(t, &bytes?, max_body)
}

pub(in crate::engine) fn validate_file(
    t: &Table,
    bytes: &[u8],
    max_body: i64,
) -> std::result::Result<RowFile, FileProblem> {
    let text = std::str::from_utf8(bytes).map_err(|_| "the file is not UTF-8 text")?;
    let rf = files::parse_row(text)?;
    // The same limit as for writes through the API.
    if rf.body.len() as i64 > max_body {
        return Err(format!(
            "the body has {} bytes, more than the limit {max_body} (max_body_bytes): shorten the body or split the note",
            rf.body.len()
        )
        .into());
    }
    let values = t.check_row(&rf.values).map_err(|e| match &e.hint {
        Some(h) => FileProblem::from(format!("{} ({h})", e.message)),
        None => FileProblem::from(e.message.clone()),
    })?;
    Ok(RowFile {
        values,
        body: rf.body,
    })
}
