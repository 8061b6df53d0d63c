//! The index: SQLite (WAL) with one typed table per datanotes table, an index per column, and an
//! FTS5 table over text columns and bodies. Derived from the files: a missing or corrupt index is
//! rebuilt from them, so it is written with `synchronous=NORMAL`.
//!
//! Full-text changes are queued (`fts_pending`, rolled back with a refused job) and applied once
//! per batch, outside the jobs' savepoints: FTS5 flushes a segment at every savepoint.

mod fts;
mod rows;
mod select;

pub use fts::*;
pub use rows::*;
pub use select::*;

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
