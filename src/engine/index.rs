//! The index: SQLite (WAL) with one typed table per datanotes table, an index per column, and an
//! FTS5 table over text columns and bodies. Derived from the files: a missing or corrupt index is
//! rebuilt from them, so it is written with `synchronous=NORMAL`.

use super::schema::{ColumnType, Table};
use crate::error::{Error, Result};
use rusqlite::types::Value as Sql;
use rusqlite::{Connection, OptionalExtension, params, params_from_iter};
use serde_json::{Map, Value};
use std::path::Path;

/// Bump when the index layout changes: an index of another version is rebuilt.
pub const LAYOUT: &str = "2";

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS tables(name TEXT PRIMARY KEY, defhash TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS files(
  fid INTEGER PRIMARY KEY, tbl TEXT NOT NULL, id TEXT NOT NULL,
  mtime INTEGER NOT NULL, size INTEGER NOT NULL, hash TEXT NOT NULL, error TEXT,
  UNIQUE(tbl, id));
CREATE VIRTUAL TABLE IF NOT EXISTS fts USING fts5(text, tokenize='unicode61 remove_diacritics 2');
CREATE TABLE IF NOT EXISTS fts_pending(n INTEGER PRIMARY KEY, fid INTEGER NOT NULL, text TEXT);
";

pub fn open(path: &Path) -> Result<Connection> {
    let c = Connection::open(path)?;
    c.busy_timeout(std::time::Duration::from_secs(10))?;
    c.pragma_update(None, "journal_mode", "WAL")?;
    c.pragma_update(None, "synchronous", "NORMAL")?;
    c.pragma_update(None, "cache_size", -32000)?;
    c.execute_batch(SCHEMA)?;
    Ok(c)
}

pub fn tname(table: &str) -> String {
    format!("\"t:{table}\"")
}
pub fn cname(col: &str) -> String {
    format!("\"c:{col}\"")
}

// Both databases keep their checkpoints in a `meta` table of the same shape.
pub use super::journal::{get_meta, set_meta};

/// (Re)creates the typed table of a datanotes table, empty.
pub fn create_table(c: &Connection, t: &Table, defhash: &str) -> Result<()> {
    drop_table(c, &t.name)?;
    let mut cols = vec![
        "id TEXT PRIMARY KEY".to_string(),
        "version INTEGER NOT NULL".into(),
        "body TEXT NOT NULL".into(),
    ];
    for (n, col) in &t.def.columns {
        let aff = match col.ty {
            ColumnType::Integer | ColumnType::Boolean => "INTEGER",
            ColumnType::Number => "REAL",
            _ => "TEXT",
        };
        cols.push(format!("{} {aff}", cname(n)));
    }
    let tn = tname(&t.name);
    let mut sql = format!("CREATE TABLE {tn}({});", cols.join(","));
    for n in t.def.columns.keys() {
        sql.push_str(&format!(
            "CREATE INDEX \"i:{}:{n}\" ON {tn}({}, id);",
            t.name,
            cname(n)
        ));
    }
    c.execute_batch(&sql)?;
    c.execute(
        "INSERT OR REPLACE INTO tables(name, defhash) VALUES(?1, ?2)",
        params![t.name, defhash],
    )?;
    Ok(())
}

pub fn drop_table(c: &Connection, table: &str) -> Result<()> {
    c.execute_batch(&format!("DROP TABLE IF EXISTS {};", tname(table)))?;
    c.execute(
        "INSERT INTO fts_pending(fid, text) SELECT fid, NULL FROM files WHERE tbl=?1",
        [table],
    )?;
    c.execute("DELETE FROM files WHERE tbl=?1", [table])?;
    c.execute("DELETE FROM tables WHERE name=?1", [table])?;
    Ok(())
}

pub fn defhash(c: &Connection, table: &str) -> Result<Option<String>> {
    Ok(
        c.query_row("SELECT defhash FROM tables WHERE name=?1", [table], |r| {
            r.get(0)
        })
        .optional()?,
    )
}

pub fn indexed_tables(c: &Connection) -> Result<Vec<String>> {
    let mut st = c.prepare("SELECT name FROM tables")?;
    let v = st
        .query_map([], |r| r.get(0))?
        .collect::<rusqlite::Result<Vec<String>>>()?;
    Ok(v)
}

/// A datetime as the index keeps it: UTC with a fixed number of decimals, so that text order is
/// time order (with a varying precision, `10:00:00Z` would sort after `10:00:00.5Z`).
fn datetime_key(s: &str) -> Option<String> {
    super::schema::parse_datetime(s).map(|d| d.to_rfc3339_opts(chrono::SecondsFormat::Nanos, true))
}

fn to_sql(ty: ColumnType, v: &Value) -> Sql {
    match (ty, v) {
        (_, Value::Null) => Sql::Null,
        (ColumnType::Datetime, Value::String(s)) => {
            Sql::Text(datetime_key(s).unwrap_or_else(|| s.clone()))
        }
        (ColumnType::Boolean, Value::Bool(b)) => Sql::Integer(*b as i64),
        (ColumnType::Integer, v) => v.as_i64().map(Sql::Integer).unwrap_or(Sql::Null),
        (ColumnType::Number, v) => v.as_f64().map(Sql::Real).unwrap_or(Sql::Null),
        (ColumnType::List, v) => Sql::Text(v.to_string()),
        (_, Value::String(s)) => Sql::Text(s.clone()),
        (_, v) => Sql::Text(v.to_string()),
    }
}

/// A bound for a filter: like `to_sql`, but a list column compares its items.
fn filter_sql(ty: ColumnType, v: &Value) -> Sql {
    match (ty, v) {
        (ColumnType::List, Value::String(s)) => Sql::Text(s.clone()),
        _ => to_sql(ty, v),
    }
}

fn from_sql(ty: ColumnType, v: Sql) -> Value {
    match (ty, v) {
        (_, Sql::Null) => Value::Null,
        (ColumnType::Boolean, Sql::Integer(i)) => Value::Bool(i != 0),
        (ColumnType::List, Sql::Text(s)) => serde_json::from_str(&s).unwrap_or(Value::Null),
        (ColumnType::Datetime, Sql::Text(s)) => Value::String(
            super::schema::parse_datetime(&s)
                .map(|d| d.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true))
                .unwrap_or(s),
        ),
        (ColumnType::Number, Sql::Real(f)) if f.fract() == 0.0 && f.abs() < 9.0e15 => {
            Value::from(f as i64)
        }
        (_, Sql::Integer(i)) => Value::from(i),
        (_, Sql::Real(f)) => Value::from(f),
        (_, Sql::Text(s)) => Value::String(s),
        (_, Sql::Blob(_)) => Value::Null,
    }
}

/// A row as the index has it.
#[derive(Debug, Clone, PartialEq)]
pub struct IndexedRow {
    pub id: String,
    pub version: i64,
    pub values: Map<String, Value>,
    pub body: String,
}

impl IndexedRow {
    /// The journal's row state: `{version, values, body}`.
    pub fn state(&self) -> crate::engine::journal::RowState {
        crate::engine::journal::RowState::Row {
            version: self.version,
            values: self.values.clone(),
            body: self.body.clone(),
        }
    }
}

/// The file facts the index keeps, to spot hand edits.
pub struct FileFacts {
    pub mtime: i64,
    pub size: i64,
    pub hash: String,
}

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

/// Applies the full-text changes queued by [`put_row`], [`put_invalid`], [`delete_row`] and
/// [`drop_table`], in order; called right before the index commits.
///
/// Why a queue: each job of a batch runs in a savepoint (a refused job rolls back alone), and
/// every savepoint makes FTS5 flush its pending terms to disk, so writing the FTS table inside
/// them would write (and later merge) one small segment per row. The queue is a plain table,
/// rolled back with its job; the FTS table is written once per batch, outside any savepoint.
pub fn flush_fts(c: &Connection) -> Result<()> {
    let queued: Vec<(i64, Option<String>)> = c
        .prepare_cached("SELECT fid, text FROM fts_pending ORDER BY n")?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<rusqlite::Result<_>>()?;
    if queued.is_empty() {
        return Ok(());
    }
    let mut del = c.prepare_cached("DELETE FROM fts WHERE rowid=?1")?;
    let mut put = c.prepare_cached("INSERT INTO fts(rowid, text) VALUES(?1, ?2)")?;
    for (fid, text) in queued {
        del.execute([fid])?;
        if let Some(text) = text {
            put.execute(params![fid, text])?;
        }
    }
    c.execute("DELETE FROM fts_pending", [])?;
    Ok(())
}

fn put_file(
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

fn select_cols(t: &Table) -> String {
    let mut s = String::from("id, version, body");
    for n in t.def.columns.keys() {
        s.push(',');
        s.push_str(&cname(n));
    }
    s
}

fn read_row(t: &Table, r: &rusqlite::Row, with_body: bool) -> rusqlite::Result<IndexedRow> {
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

/// One `where` clause of `select_rows`.
pub struct Cond {
    pub column: String,
    pub op: String,
    pub value: Value,
}

pub struct Query {
    pub conds: Vec<Cond>,
    pub order: Vec<(String, bool)>,
    pub limit: i64,
    pub offset: i64,
    pub with_body: bool,
}

pub const OPS: &[&str] = &["=", "!=", "<", "<=", ">", ">=", "in", "contains"];

/// Runs a select; columns and ops are checked by the caller. Returns rows and the total.
pub fn select(c: &Connection, t: &Table, q: &Query) -> Result<(Vec<IndexedRow>, i64)> {
    let mut wh = vec![];
    let mut args: Vec<Sql> = vec![];
    for cond in &q.conds {
        let (col, ty) = if cond.column == "id" {
            ("id".to_string(), ColumnType::Text)
        } else {
            let cd = t
                .column(&cond.column)
                .ok_or_else(|| Error::invalid("unknown column"))?;
            (cname(&cond.column), cd.ty)
        };
        let mut bind = |v: Sql| {
            args.push(v);
            format!("?{}", args.len())
        };
        let clause = match (cond.op.as_str(), &cond.value) {
            ("=", Value::Null) => format!("{col} IS NULL"),
            ("!=", Value::Null) => format!("{col} IS NOT NULL"),
            ("!=", v) => format!("({col} IS NULL OR {col} != {})", bind(filter_sql(ty, v))),
            ("in", Value::Array(items)) => {
                let ph: Vec<String> = items.iter().map(|v| bind(filter_sql(ty, v))).collect();
                if ph.is_empty() {
                    "0".to_string()
                } else {
                    format!("{col} IN ({})", ph.join(","))
                }
            }
            ("contains", v) if ty == ColumnType::List => {
                format!(
                    "EXISTS (SELECT 1 FROM json_each({col}) WHERE value = {})",
                    bind(filter_sql(ty, v))
                )
            }
            ("contains", v) => {
                let s = v
                    .as_str()
                    .map(str::to_string)
                    .unwrap_or_else(|| v.to_string());
                format!("instr(lower({col}), lower({})) > 0", bind(Sql::Text(s)))
            }
            (op, v) => format!("{col} {op} {}", bind(filter_sql(ty, v))),
        };
        wh.push(clause);
    }
    let tn = tname(&t.name);
    let where_sql = if wh.is_empty() {
        String::new()
    } else {
        format!(" WHERE {}", wh.join(" AND "))
    };
    let mut order: Vec<String> = q
        .order
        .iter()
        .map(|(col, desc)| {
            let col = if col == "id" {
                "id".to_string()
            } else {
                cname(col)
            };
            format!("{col} {}", if *desc { "DESC" } else { "ASC" })
        })
        .collect();
    if !q.order.iter().any(|(c, _)| c == "id") {
        order.push("id ASC".into());
    }
    let sql = format!(
        "SELECT {} FROM {tn}{where_sql} ORDER BY {} LIMIT {} OFFSET {}",
        select_cols(t),
        order.join(", "),
        q.limit,
        q.offset
    );
    let mut st = c.prepare_cached(&sql)?;
    let rows = st
        .query_map(params_from_iter(args.iter()), |r| {
            read_row(t, r, q.with_body)
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    let total = if (rows.len() as i64) < q.limit && (q.offset == 0 || !rows.is_empty()) {
        q.offset + rows.len() as i64
    } else {
        c.prepare_cached(&format!("SELECT count(*) FROM {tn}{where_sql}"))?
            .query_row(params_from_iter(args.iter()), |r| r.get(0))?
    };
    Ok((rows, total))
}

/// Ranked full-text search (BM25): rows with every word of `query`, or with any of them
/// (`any`). Returns (table, id, score, snippet).
pub fn search(
    c: &Connection,
    query: &str,
    tables: &[String],
    limit: i64,
    any: bool,
) -> Result<Vec<(String, String, f64, String)>> {
    // Each word becomes a quoted FTS5 string: no query syntax reaches FTS5 from callers.
    let mut words: Vec<&str> = query
        .split(|ch: char| !ch.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .collect();
    // Any of the words: the words that say something (a question's "what", "the", "I" would
    // rank every note), unless the query has nothing else.
    if any && words.iter().any(|w| !is_stopword(w)) {
        words.retain(|w| !is_stopword(w));
    }
    if any && !words.is_empty() {
        // A word in more than half the notes says nothing of which note (its BM25 weight is
        // nil), and one in more than COMMON_WORD notes little, while ranking by it would score
        // that many: left out. A word's notes are counted up to that bound, no further.
        let cap = (fts_rows(c)? / 2).min(COMMON_WORD);
        let mut count = c.prepare_cached(
            "SELECT count(*) FROM (SELECT 1 FROM fts WHERE fts MATCH ?1 LIMIT ?2)",
        )?;
        let mut keep = vec![];
        for w in words {
            let n: i64 = count.query_row(params![format!("\"{w}\""), cap + 1], |r| r.get(0))?;
            if n <= cap {
                keep.push(w);
            }
        }
        words = keep;
    }
    let terms: Vec<String> = words.iter().map(|w| format!("\"{w}\"")).collect();
    if terms.is_empty() {
        return Ok(vec![]);
    }
    let fts_q = terms.join(if any { " OR " } else { " " });
    let mut sql = String::from(
        "SELECT files.tbl, files.id, -bm25(fts), snippet(fts, 0, '**', '**', '…', 12)
         FROM fts JOIN files ON files.fid = fts.rowid WHERE fts MATCH ?1",
    );
    let mut args: Vec<Sql> = vec![Sql::Text(fts_q)];
    if !tables.is_empty() {
        let ph: Vec<String> = tables
            .iter()
            .map(|t| {
                args.push(Sql::Text(t.clone()));
                format!("?{}", args.len())
            })
            .collect();
        sql.push_str(&format!(" AND files.tbl IN ({})", ph.join(",")));
    }
    sql.push_str(&format!(" ORDER BY bm25(fts) LIMIT {limit}"));
    let mut st = c.prepare_cached(&sql)?;
    let v = st
        .query_map(params_from_iter(args), |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(v)
}

/// A word in more notes than this is left out of a ranking by any word.
pub const COMMON_WORD: i64 = 10_000;

/// How many notes the full-text index holds: the first number of FTS5's averages record (a
/// SQLite varint), or a count where that record cannot be read.
fn fts_rows(c: &Connection) -> Result<i64> {
    let block: Option<Vec<u8>> = c
        .prepare_cached("SELECT block FROM fts_data WHERE id = 1")?
        .query_row([], |r| r.get(0))
        .optional()?;
    if let Some(n) = block.as_deref().and_then(varint) {
        return Ok(n);
    }
    Ok(
        c.prepare_cached("SELECT count(*) FROM files WHERE error IS NULL")?
            .query_row([], |r| r.get(0))?,
    )
}

/// A SQLite varint (big-endian groups of 7 bits, the 9th byte whole).
fn varint(b: &[u8]) -> Option<i64> {
    let mut v: u64 = 0;
    for (i, &x) in b.iter().enumerate().take(9) {
        if i == 8 {
            return Some(((v << 8) | x as u64) as i64);
        }
        v = (v << 7) | (x & 0x7f) as u64;
        if x & 0x80 == 0 {
            return Some(v as i64);
        }
    }
    None
}

/// Common English words that a ranking by any word leaves out.
fn is_stopword(w: &str) -> bool {
    const WORDS: &[&str] = &[
        "a", "about", "after", "all", "also", "am", "an", "and", "any", "are", "as", "at", "be",
        "been", "but", "by", "can", "could", "did", "do", "does", "for", "from", "had", "has",
        "have", "he", "her", "his", "how", "i", "if", "in", "into", "is", "it", "its", "me", "my",
        "no", "not", "of", "on", "or", "our", "she", "so", "some", "than", "that", "the", "their",
        "them", "then", "there", "these", "they", "this", "to", "was", "we", "were", "what",
        "when", "where", "which", "who", "why", "will", "with", "would", "you", "your",
    ];
    let lower = w.to_lowercase();
    WORDS.binary_search(&lower.as_str()).is_ok()
}

#[cfg(test)]
mod tests {
    #[test]
    fn varints_read_as_sqlite_writes_them() {
        assert_eq!(super::varint(&[0x86, 0x8d, 0x20, 0x81]), Some(100_000));
        assert_eq!(super::varint(&[0x05]), Some(5));
        assert_eq!(super::varint(&[0x81, 0x00]), Some(128));
        assert_eq!(super::varint(&[0x81]), None);
    }

    #[test]
    fn stopwords_are_sorted_and_found() {
        assert!(super::is_stopword("The") && super::is_stopword("your"));
        assert!(!super::is_stopword("budget"));
    }
}
