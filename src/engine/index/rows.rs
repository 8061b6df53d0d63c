//! Rows in the index: written (with their files' facts), deleted, read back one by one or in
//! id order, and the checks that need the index (a unique value's holder, a linking row).

use super::*;

/// Writes a valid row (typed table, files, fts).
pub fn put_row(c: &Connection, t: &Table, row: &IndexedRow, facts: &FileFacts) -> Result<()> {
    let tn = tname(&t.name);
    let mut cols = vec!["id".to_string(), "version".into(), "body".into()];
    let mut vals: Vec<Sql> = vec![
        Sql::Text(row.id.clone()),
        Sql::Integer(row.version),
        Sql::Text(row.body.clone()),
    ];
    for (n, col) in &t.def.columns {
        cols.push(cname(n));
        vals.push(to_sql(col.ty, row.values.get(n).unwrap_or(&Value::Null)));
    }
    let ph: Vec<String> = (1..=cols.len()).map(|i| format!("?{i}")).collect();
    // DELETE then INSERT rather than INSERT OR REPLACE: a REPLACE into a table with indexes opens
    // a statement journal, and every statement savepoint makes FTS5 flush its pending terms to
    // disk, so the FTS index would be written (and merged) one row at a time.
    c.prepare_cached(&format!("DELETE FROM {tn} WHERE id=?1"))?
        .execute([&row.id])?;
    c.prepare_cached(&format!(
        "INSERT INTO {tn}({}) VALUES({})",
        cols.join(","),
        ph.join(",")
    ))?
    .execute(params_from_iter(vals))?;
    let fid = put_file(c, &t.name, &row.id, facts, None)?;
    let mut text = String::new();
    for n in t.text_columns() {
        match row.values.get(n) {
            Some(Value::String(s)) => text.push_str(s),
            Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).for_each(|s| {
                text.push_str(s);
                text.push(' ');
            }),
            _ => {}
        }
        text.push('\n');
    }
    text.push_str(&row.body);
    c.prepare_cached("INSERT INTO fts_pending(fid, text) VALUES(?1, ?2)")?
        .execute(params![fid, text])?;
    Ok(())
}

pub(super) fn put_file(
    c: &Connection,
    table: &str,
    id: &str,
    f: &FileFacts,
    error: Option<&str>,
) -> Result<i64> {
    // Look up, then UPDATE or INSERT: an upsert with RETURNING would open a statement journal
    // (see put_row).
    let fid: Option<i64> = c
        .prepare_cached("SELECT fid FROM files WHERE tbl=?1 AND id=?2")?
        .query_row([table, id], |r| r.get(0))
        .optional()?;
    match fid {
        Some(fid) => {
            c.prepare_cached("UPDATE files SET mtime=?2, size=?3, hash=?4, error=?5 WHERE fid=?1")?
                .execute(params![fid, f.mtime, f.size, f.hash, error])?;
            Ok(fid)
        }
        None => {
            c.prepare_cached(
                "INSERT INTO files(tbl,id,mtime,size,hash,error) VALUES(?1,?2,?3,?4,?5,?6)",
            )?
            .execute(params![table, id, f.mtime, f.size, f.hash, error])?;
            Ok(c.last_insert_rowid())
        }
    }
}

/// Records a file that does not validate: it stays out of the typed table and is reported.
pub fn put_invalid(
    c: &Connection,
    table: &str,
    id: &str,
    facts: &FileFacts,
    error: &str,
) -> Result<()> {
    c.prepare_cached(&format!("DELETE FROM {} WHERE id=?1", tname(table)))?
        .execute([id])?;
    let fid = put_file(c, table, id, facts, Some(error))?;
    c.prepare_cached("INSERT INTO fts_pending(fid, text) VALUES(?1, NULL)")?
        .execute([fid])?;
    Ok(())
}

pub fn delete_row(c: &Connection, table: &str, id: &str) -> Result<()> {
    c.prepare_cached(&format!("DELETE FROM {} WHERE id=?1", tname(table)))?
        .execute([id])?;
    c.prepare_cached(
        "INSERT INTO fts_pending(fid, text) SELECT fid, NULL FROM files WHERE tbl=?1 AND id=?2",
    )?
    .execute([table, id])?;
    c.prepare_cached("DELETE FROM files WHERE tbl=?1 AND id=?2")?
        .execute([table, id])?;
    Ok(())
}

/// Only refreshes the stat facts of a file whose content did not change.
pub fn touch_file(c: &Connection, table: &str, id: &str, mtime: i64, size: i64) -> Result<()> {
    c.prepare_cached("UPDATE files SET mtime=?3, size=?4 WHERE tbl=?1 AND id=?2")?
        .execute(params![table, id, mtime, size])?;
    Ok(())
}

pub struct KnownFile {
    pub mtime: i64,
    pub size: i64,
    pub hash: String,
    pub error: Option<String>,
}

pub fn known_files(
    c: &Connection,
    table: &str,
) -> Result<std::collections::HashMap<String, KnownFile>> {
    let mut st = c.prepare_cached("SELECT id, mtime, size, hash, error FROM files WHERE tbl=?1")?;
    let rows = st.query_map([table], |r| {
        Ok((
            r.get::<_, String>(0)?,
            KnownFile {
                mtime: r.get(1)?,
                size: r.get(2)?,
                hash: r.get(3)?,
                error: r.get(4)?,
            },
        ))
    })?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

pub fn known_file(c: &Connection, table: &str, id: &str) -> Result<Option<KnownFile>> {
    Ok(
        c.prepare_cached("SELECT mtime, size, hash, error FROM files WHERE tbl=?1 AND id=?2")?
            .query_row([table, id], |r| {
                Ok(KnownFile {
                    mtime: r.get(0)?,
                    size: r.get(1)?,
                    hash: r.get(2)?,
                    error: r.get(3)?,
                })
            })
            .optional()?,
    )
}

pub(super) fn select_cols(t: &Table) -> String {
    let mut s = String::from("id, version, body");
    for n in t.def.columns.keys() {
        s.push(',');
        s.push_str(&cname(n));
    }
    s
}

pub(super) fn read_row(
    t: &Table,
    r: &rusqlite::Row,
    with_body: bool,
) -> rusqlite::Result<IndexedRow> {
    let mut values = Map::new();
    for (i, (n, col)) in t.def.columns.iter().enumerate() {
        let v = from_sql(col.ty, r.get::<_, Sql>(i + 3)?);
        if !v.is_null() {
            values.insert(n.clone(), v);
        }
    }
    Ok(IndexedRow {
        id: r.get(0)?,
        version: r.get(1)?,
        values,
        body: if with_body { r.get(2)? } else { String::new() },
    })
}

pub fn get_row(c: &Connection, t: &Table, id: &str) -> Result<Option<IndexedRow>> {
    Ok(c.prepare_cached(&format!(
        "SELECT {} FROM {} WHERE id=?1",
        select_cols(t),
        tname(&t.name)
    ))?
    .query_row([id], |r| read_row(t, r, true))
    .optional()?)
}

pub fn row_exists(c: &Connection, table: &str, id: &str) -> Result<bool> {
    Ok(
        c.prepare_cached(&format!("SELECT 1 FROM {} WHERE id=?1", tname(table)))?
            .query_row([id], |_| Ok(()))
            .optional()?
            .is_some(),
    )
}

pub fn count(c: &Connection, table: &str) -> Result<i64> {
    Ok(
        c.query_row(&format!("SELECT count(*) FROM {}", tname(table)), [], |r| {
            r.get(0)
        })?,
    )
}

/// Another row holding this value in a unique column.
pub fn unique_holder(
    c: &Connection,
    t: &Table,
    col: &str,
    v: &Value,
    except: &str,
) -> Result<Option<String>> {
    let ty = t.column(col).map(|c| c.ty).unwrap_or(ColumnType::Text);
    Ok(c.prepare_cached(&format!(
        "SELECT id FROM {} WHERE {}=?1 AND id!=?2 LIMIT 1",
        tname(&t.name),
        cname(col)
    ))?
    .query_row(params![to_sql(ty, v), except], |r| r.get(0))
    .optional()?)
}

/// A row of `table` whose link column `col` points at `id`.
pub fn linking_row(c: &Connection, table: &str, col: &str, id: &str) -> Result<Option<String>> {
    Ok(c.prepare_cached(&format!(
        "SELECT id FROM {} WHERE {}=?1 LIMIT 1",
        tname(table),
        cname(col)
    ))?
    .query_row([id], |r| r.get(0))
    .optional()?)
}

pub fn invalid_rows(c: &Connection, table: &str) -> Result<Vec<(String, String)>> {
    let mut st = c.prepare_cached(
        "SELECT id, error FROM files WHERE tbl=?1 AND error IS NOT NULL ORDER BY id",
    )?;
    let v = st
        .query_map([table], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(v)
}

/// Up to `limit` rows of a table after the id `after` (in id order), each with its file's hash.
pub fn rows_after(
    c: &Connection,
    t: &Table,
    after: &str,
    limit: i64,
) -> Result<Vec<(IndexedRow, String)>> {
    let mut cols = String::from("r.id, r.version, r.body");
    for n in t.def.columns.keys() {
        cols.push_str(", r.");
        cols.push_str(&cname(n));
    }
    // The hash in a subquery: as a join, SQLite would walk `files` and sort every page.
    let mut st = c.prepare_cached(&format!(
        "SELECT {cols}, (SELECT hash FROM files WHERE tbl = ?1 AND id = r.id) FROM {} AS r
         WHERE r.id > ?2 ORDER BY r.id LIMIT ?3",
        tname(&t.name)
    ))?;
    let hash_at = 3 + t.def.columns.len();
    let v = st
        .query_map(params![t.name, after, limit], |r| {
            Ok((
                read_row(t, r, true)?,
                r.get::<_, Option<String>>(hash_at)?.unwrap_or_default(),
            ))
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(v)
}

/// Up to `limit` row ids of a table after the id `after`, in id order.
pub fn ids_after(c: &Connection, table: &str, after: &str, limit: i64) -> Result<Vec<String>> {
    let mut st = c.prepare_cached(&format!(
        "SELECT id FROM {} WHERE id > ?1 ORDER BY id LIMIT ?2",
        tname(table)
    ))?;
    let v = st
        .query_map(params![after, limit], |r| r.get(0))?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(v)
}

/// Up to `limit` row ids of a table that start with `prefix`, in id order.
pub fn ids_with_prefix(
    c: &Connection,
    table: &str,
    prefix: &str,
    limit: i64,
) -> Result<Vec<String>> {
    // Row ids are [a-z0-9_-]: every id starting with `prefix` sorts before `prefix` + '~'.
    let end = format!("{prefix}~");
    let mut st = c.prepare_cached(&format!(
        "SELECT id FROM {} WHERE id >= ?1 AND id < ?2 ORDER BY id LIMIT ?3",
        tname(table)
    ))?;
    let v = st
        .query_map(params![prefix, end, limit], |r| r.get(0))?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(v)
}

pub fn all_rows(c: &Connection, t: &Table) -> Result<Vec<IndexedRow>> {
    let mut st = c.prepare(&format!(
        "SELECT {} FROM {} ORDER BY id",
        select_cols(t),
        tname(&t.name)
    ))?;
    let v = st
        .query_map([], |r| read_row(t, r, true))?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(v)
}
