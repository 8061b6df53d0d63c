//! Recovery at open: the index checked, the journal redone on the files, the index reconciled.
//!
//! Each migration is redone under the definition in force around it (an `alter_table` or its undo
//! cut short finishes), idempotently: a file already in the after state is left alone, and one in
//! neither state was edited by hand. Versions never go back. No file state stops the engine from
//! starting: the redo reports and the writer waits.

use super::writer::{
    defhash, flag_ref_violations, index_read, known_versions, reindex_table, wipe_index,
};
use crate::engine::Tables;
use crate::engine::files::{self};
use crate::engine::index;
use crate::engine::journal::{self, Op, RowState};
use crate::engine::schema::{Table, TableDef};
use crate::engine::settings::Settings;
use crate::error::{Error, Result};
use rusqlite::Connection;
use serde_json::{Value, json};
use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::sync::Arc;

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

/// Redoes, on the files, the migrations the journal holds beyond the files' checkpoint, and
/// moves the checkpoint to the end of the journal.
///
/// Idempotent: a file already in the after state is left alone, and one that is in neither the
/// before nor the after state was edited by hand and is left for the scan. Each row migration is
/// compared under the definitions in force around it: an `alter_table` (or its undo) interrupted
/// half-way leaves rows in the old shape, which only the definition before it renders.
///
/// A file that cannot be written does not stop the engine: the redo stops there (the checkpoint
/// stays before that migration, so nothing is skipped) and answers why; the writer refuses
/// writes until a later redo gets through.
pub fn redo(root: &Path, j: &Connection, tables: &mut Tables) -> Result<Option<String>> {
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
    // The definition each table had before its latest table migration in this redo.
    let mut before_defs: HashMap<String, Arc<Table>> = HashMap::new();
    for m in &migs {
        if let Err(e) = redo_one(root, m, tables, &mut before_defs, &mut touched_dirs) {
            let why = format!(
                "migration {} ({}) could not be redone on the files: {}",
                m.seq, m.op, e.message
            );
            tracing::error!("{why}");
            return Ok(Some(why));
        }
    }
    for d in touched_dirs {
        if d.exists()
            && let Err(e) = files::fsync_dir(&d)
        {
            return Ok(Some(format!("cannot fsync {}: {}", d.display(), e.message)));
        }
    }
    journal::set_meta(j, "files_seq", &journal::last_seq(j)?.to_string())?;
    Ok(None)
}

fn def_of(table: &str, v: &Value) -> Option<Table> {
    if v.is_null() {
        return None;
    }
    let def = serde_json::from_value::<TableDef>(
        json!({"description": v.get("description"), "columns": v.get("columns")}),
    )
    .ok()?;
    Table::compile(table, def).ok()
}

fn redo_one(
    root: &Path,
    m: &journal::Migration,
    tables: &mut Tables,
    before_defs: &mut HashMap<String, Arc<Table>>,
    touched_dirs: &mut BTreeSet<std::path::PathBuf>,
) -> Result<()> {
    let Some(table) = m.table.clone() else {
        if matches!(m.op, Op::Settings | Op::Undo)
            && !m.after.is_null()
            && m.row.is_none()
            && let Ok(s) = serde_json::from_value::<Settings>(m.after.clone())
        {
            let bytes =
                serde_json::to_vec_pretty(&s).map_err(|e| Error::internal(e.to_string()))?;
            files::write_atomic(&root.join(".datanotes/settings.json"), &bytes)?;
        }
        return Ok(());
    };
    if m.op == Op::HandEdit {
        return Ok(());
    }
    let dir = files::table_dir(root, &table);
    match &m.row {
        Some(id) => {
            let Some(t) = tables.get(&table).cloned() else {
                return Ok(());
            };
            let path = files::row_path(root, &table, id);
            // Only hand edits (which the redo leaves alone) journal an invalid state.
            let render = |t: &Table, s: &Value| -> Result<Option<Vec<u8>>> {
                Ok(match RowState::of(s) {
                    RowState::Absent => None,
                    RowState::Row { values, body, .. } => {
                        Some(files::render_row(t, &values, &body))
                    }
                    RowState::Invalid(_) => None,
                })
            };
            let want = render(&t, &m.after)?;
            // The file still in the before state, under the definition now or the one before.
            let was_now = render(&t, &m.before)?;
            let was_then = match before_defs.get(&table) {
                Some(old) => Some(render(old, &m.before)?),
                None => None,
            };
            // Read like any row file (bounded, never through a link): only a file of one of
            // these sizes can be in either state. One that is not read is left to the scan,
            // which reports it.
            let size = [&want, &was_now]
                .into_iter()
                .chain(was_then.as_ref())
                .flatten()
                .map(Vec::len)
                .max()
                .unwrap_or(0);
            let cur = match files::read_row(&path, size as i64).map(|r| r.bytes) {
                None => None,
                Some(Ok(b)) => Some(b),
                Some(Err(_)) => return Ok(()),
            };
            if cur == want {
                return Ok(());
            }
            let in_before = cur == was_now || was_then.is_some_and(|w| w == cur);
            if !in_before && cur.is_some() {
                return Ok(());
            }
            files::check_dirs(root, &dir)?;
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
            if let Some(old) = def_of(&table, &m.before) {
                before_defs.insert(table.clone(), Arc::new(old));
            }
            if m.after.is_null() {
                if dir.exists() {
                    files::remove_table_dir(root, &dir)?;
                }
                tables.remove(&table);
            } else if let Some(t) = def_of(&table, &m.after) {
                files::create_dirs(root, &dir)?;
                let bytes = files::render_table_def(&t.def)?;
                let cur =
                    files::read_table_def(&dir.join(files::TABLE_FILE)).and_then(|r| r.bytes.ok());
                if cur.as_deref() != Some(&bytes[..]) {
                    files::write_atomic(&dir.join(files::TABLE_FILE), &bytes)?;
                    touched_dirs.insert(dir.clone());
                }
                tables.insert(table.clone(), Arc::new(t));
            }
        }
    }
    Ok(())
}

/// Brings the index in line with the files after a start: tables whose definition changed are
/// re-indexed, rows touched by migrations the index has not seen are re-read, silently.
pub fn reconcile_index(
    root: &Path,
    c: &Connection,
    j: &Connection,
    tables: &Tables,
    max_body: i64,
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
            if index::defhash(c, name)?.as_deref() != Some(defhash(&t.def)?.as_str()) {
                reindex_table(c, root, t, &known_versions(c, j, name)?, max_body)?;
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
                latest.insert((t, r), RowState::of(&m.after).version());
            }
        }
        for ((table, id), version) in latest {
            let Some(t) = tables.get(&table).filter(|_| !fresh.contains(&table)) else {
                continue;
            };
            let path = files::row_path(root, &table, &id);
            let Some(read) = files::read_row(&path, max_body) else {
                index::delete_row(c, &table, &id)?;
                continue;
            };
            index_read(c, t, id, read, version.max(1), max_body)?;
        }
        index::set_meta(c, "applied_seq", &journal::last_seq(j)?.to_string())?;
        index::flush_fts(c)?;
        Ok(())
    })();
    match r {
        Ok(()) => c.execute_batch("COMMIT")?,
        Err(e) => {
            journal::rollback(c, "the index reconciliation");
            return Err(e.into());
        }
    }
    Ok(())
}
