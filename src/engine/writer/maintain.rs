//! Maintenance: vacuum and rebuilding the index, and the re-indexing helpers recovery shares.
//!
//! `rebuild_index` and `vacuum` are each one transaction.

use super::*;
use crate::engine::Tables;
use crate::engine::files::{self};
use crate::engine::index::{self, FileFacts, IndexedRow};
use crate::engine::journal::{self, Actor};
use crate::engine::schema::{ColumnType, Table};
use crate::error::{Error, Result};
use rusqlite::Connection;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::path::Path;
use std::sync::mpsc;

impl Writer {
    pub(super) fn vacuum(&mut self, before_seq: i64) -> Result<Value> {
        let last = journal::last_seq(&self.jr)?;
        if before_seq < 0 || before_seq > last + 1 {
            return Err(Error::invalid(format!(
                "before_seq {before_seq} is outside the journal (1 to {})",
                last + 1
            ))
            .rule("before_seq")
            .hint("list_migrations shows the seqs"));
        }
        // The redo at start needs every migration past the files' checkpoint: bring the
        // checkpoint up first, and never remove what it still needs.
        self.checkpoint();
        if before_seq > self.files_seq + 1 {
            return Err(Error::new(
                503,
                "files_unavailable",
                format!(
                    "migrations from {} on are not on the files yet, so they cannot be vacuumed",
                    self.files_seq + 1
                ),
            )
            .rule("before_seq")
            .hint("try again in a moment, or give a smaller before_seq"));
        }
        // One transaction: the feed's start moves with the migrations it loses.
        self.jr.execute_batch("BEGIN IMMEDIATE")?;
        let r = (|| -> Result<(usize, i64)> {
            let removed = self
                .jr
                .execute("DELETE FROM migrations WHERE seq < ?1", [before_seq])?;
            let start = before_seq.max(self.vacuumed_before()?);
            journal::set_meta(&self.jr, "vacuumed_before", &start.to_string())?;
            self.jr.execute_batch("COMMIT")?;
            Ok((removed, start))
        })();
        if r.is_err() {
            journal::rollback(&self.jr, "vacuum");
        }
        let (removed, start) = r?;
        self.jr.execute_batch("VACUUM")?;
        if let Some(engine) = self.engine.upgrade() {
            engine.recent.forget_before(start);
        }
        Ok(json!({"removed": removed, "feed_starts_at": start}))
    }

    pub(super) fn rebuild_index(&mut self) -> Result<Value> {
        // Hand edits are found by comparing the files with the index: journal them against the
        // index as it is, before rebuilding it from the files (which would take them silently).
        let found = match self.run_scan() {
            Ok(v) => v["hand_edits"].as_i64().unwrap_or(0),
            Err(e) => {
                tracing::warn!("scan before the rebuild failed, rebuilding anyway: {e}");
                0
            }
        };
        // One transaction: a crash half-way leaves the old index whole (never a half-built one
        // that the next start would trust, taking missing rows for hand-deleted ones).
        self.idx.execute_batch("BEGIN")?;
        let rebuilt = (|| -> Result<usize> {
            let mut versions = HashMap::new();
            for name in self.tables.keys() {
                versions.insert(name.clone(), known_versions(&self.idx, &self.jr, name)?);
            }
            wipe_index(&self.idx)?;
            let mut rows = 0;
            for t in self.tables.values() {
                let versions = versions.remove(&t.name).unwrap_or_default();
                rows += reindex_table(&self.idx, &self.root, t, &versions, self.max_body())?;
            }
            flag_ref_violations(&self.idx, &self.tables)?;
            index::set_meta(
                &self.idx,
                "applied_seq",
                &journal::last_seq(&self.jr)?.to_string(),
            )?;
            index::flush_fts(&self.idx)?;
            self.idx.execute_batch("COMMIT")?;
            Ok(rows)
        })();
        if rebuilt.is_err() {
            journal::rollback(&self.idx, "the index rebuild");
        }
        let rows = rebuilt?;
        let mut out = self.run_scan()?;
        out["hand_edits"] = Value::from(found + out["hand_edits"].as_i64().unwrap_or(0));
        out["tables"] = Value::from(self.tables.len());
        out["rows"] = Value::from(rows);
        Ok(out)
    }

    pub(super) fn run_scan(&mut self) -> Result<Value> {
        let (tx, rx) = mpsc::sync_channel(1);
        self.run_batch(vec![Job {
            cmd: Cmd::Scan {
                table: None,
                id: None,
            },
            actor: Actor::hand_edit(),
            reply: Some(tx),
            trace: None,
        }]);
        rx.recv().map_err(|_| Error::internal("scan lost"))?
    }
}

pub(in crate::engine) fn wipe_index(c: &Connection) -> Result<()> {
    for t in index::indexed_tables(c)? {
        index::drop_table(c, &t)?;
    }
    c.execute_batch(
        "DELETE FROM files; DELETE FROM fts; DELETE FROM fts_pending; DELETE FROM tables;",
    )?;
    index::set_meta(c, "layout", index::LAYOUT)?;
    Ok(())
}

pub(super) fn index_versions(c: &Connection, t: Option<&Table>) -> Result<HashMap<String, i64>> {
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

pub(super) fn journal_versions(j: &Connection, table: &str) -> Result<HashMap<String, i64>> {
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
pub(in crate::engine) fn known_versions(
    c: &Connection,
    j: &Connection,
    table: &str,
) -> Result<HashMap<String, i64>> {
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
pub(in crate::engine) fn flag_ref_violations(c: &Connection, tables: &Tables) -> Result<()> {
    loop {
        let mut bad: Vec<(String, String, String)> = vec![];
        for (name, t) in tables {
            let tn = index::tname(name);
            for (cname, col) in &t.def.columns {
                let cn = index::cname(cname);
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
/// Files that are not read (see `files::read_row`) are invalid rows; a table folder reached
/// through a link has no rows.
pub(in crate::engine) fn reindex_table(
    c: &Connection,
    root: &Path,
    t: &Table,
    versions: &HashMap<String, i64>,
    max_body: i64,
) -> Result<usize> {
    index::create_table(c, t, &defhash(&t.def)?)?;
    let dir = files::table_dir(root, &t.name);
    if !matches!(files::check_dirs(root, &dir), Ok(true)) {
        return Ok(0);
    }
    let mut n = 0;
    for f in files::list_rows(&dir) {
        let path = dir.join(format!("{}.md", f.id));
        let Some(read) = files::read_row(&path, max_body) else {
            continue;
        };
        let version = versions.get(&f.id).copied().unwrap_or(1);
        n += index_read(c, t, f.id, read, version, max_body)? as usize;
    }
    Ok(n)
}

/// Indexes a row file as it was read (`files::read_row`): the row at `version` when it
/// validates, otherwise an invalid entry with the reason. Answers whether the row is valid.
pub(in crate::engine) fn index_read(
    c: &Connection,
    t: &Table,
    id: String,
    read: files::Read,
    version: i64,
    max_body: i64,
) -> Result<bool> {
    let facts = FileFacts {
        mtime: read.mtime_ns,
        size: read.size,
        hash: read.hash(),
    };
    match check_read(t, read.bytes, max_body) {
        Ok(rf) => {
            let row = IndexedRow {
                id,
                version,
                values: rf.values,
                body: rf.body,
            };
            index::put_row(c, t, &row, &facts)?;
            Ok(true)
        }
        Err(msg) => {
            index::put_invalid(c, &t.name, &id, &facts, msg.as_str())?;
            Ok(false)
        }
    }
}
