//! Recovery at open: the index checked, the journal redone on the files, the index reconciled.

use super::writer::{
    check_read, defhash, flag_ref_violations, known_versions, reindex_table, wipe_index,
};
use crate::engine::Tables;
use crate::engine::files::{self};
use crate::engine::index::{self, FileFacts, IndexedRow};
use crate::engine::journal::{self};
use crate::engine::schema::{Table, TableDef};
use crate::engine::settings::Settings;
use crate::error::Result;
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
                // Read like any row file (bounded, never through a link): only a file of one of
                // these two sizes can be in either state. One that is not read is left to the
                // scan, which reports it.
                let size = want.iter().chain(&was).map(Vec::len).max().unwrap_or(0);
                let cur = match files::read_row(&path, size as i64).map(|r| r.bytes) {
                    None => None,
                    Some(Ok(b)) => Some(b),
                    Some(Err(_)) => continue,
                };
                if cur == want || (cur != was && cur.is_some()) {
                    continue;
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
                            let cur = files::read_table_def(&dir.join(files::TABLE_FILE))
                                .and_then(|r| r.bytes.ok());
                            if cur.as_deref() != Some(&bytes[..]) {
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
            if index::defhash(c, name)?.as_deref() != Some(defhash(&t.def).as_str()) {
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
                latest.insert((t, r), m.after["version"].as_i64().unwrap_or(0));
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
            let facts = FileFacts {
                mtime: read.mtime_ns,
                size: read.size,
                hash: read.hash(),
            };
            match check_read(t, read.bytes, max_body) {
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
