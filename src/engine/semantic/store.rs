//! The vectors on disk: `.datanotes/semantic.db` (SQLite, WAL), derived from the files like
//! `index.db` and rebuilt when missing, corrupt or of another model.
//!
//! `rows` holds each indexed row's version, the hash of its file and its chunks' vectors (int8
//! and a scale each) in one record; `meta` the model's fingerprint and the journal seq the
//! vectors cover (`through`), written in the transaction that writes the vectors; `tables` the
//! columns each table was embedded from. A rebuild writes `rows_next` and swaps it in with the
//! new `meta` in one transaction, so a crash leaves the old index whole.

use super::matrix::Matrix;
use crate::error::Result;
use rusqlite::{Connection, OptionalExtension, params};
use std::path::Path;

/// Bump when the layout changes: a store of another layout is rebuilt.
const LAYOUT: &str = "1";

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS tables(name TEXT PRIMARY KEY, config TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS rows(tbl TEXT NOT NULL, id TEXT NOT NULL, version INTEGER NOT NULL,
  hash TEXT NOT NULL, scales BLOB NOT NULL, codes BLOB NOT NULL, PRIMARY KEY(tbl, id)) WITHOUT ROWID;
";

/// A row's vectors as stored.
pub struct Stored {
    pub table: String,
    pub id: String,
    pub version: i64,
    pub hash: String,
    pub scales: Vec<f32>,
    pub codes: Vec<i8>,
}

/// Opens (creating) the store; a file that is not a store of this layout is made anew.
pub fn open(path: &Path) -> Result<Connection> {
    let fresh = |path: &Path| -> Result<Connection> {
        for suffix in ["", "-wal", "-shm"] {
            let p = format!("{}{suffix}", path.display());
            let _ = std::fs::remove_file(p);
        }
        let c = Connection::open(path)?;
        setup(&c)?;
        Ok(c)
    };
    match Connection::open(path).and_then(|c| {
        c.query_row("PRAGMA quick_check", [], |r| r.get::<_, String>(0))
            .map(|ok| (c, ok))
    }) {
        Ok((c, ok)) if ok == "ok" => {
            setup(&c)?;
            if meta(&c, "layout")?.as_deref() == Some(LAYOUT) {
                // A rebuild a crash interrupted is started again from nothing.
                c.execute_batch("DROP TABLE IF EXISTS rows_next")?;
                Ok(c)
            } else {
                drop(c);
                let c = fresh(path)?;
                set_meta(&c, "layout", LAYOUT)?;
                Ok(c)
            }
        }
        _ => {
            tracing::warn!(path = %path.display(), "the semantic index's store is unreadable: made anew");
            let c = fresh(path)?;
            set_meta(&c, "layout", LAYOUT)?;
            Ok(c)
        }
    }
}

fn setup(c: &Connection) -> Result<()> {
    c.busy_timeout(std::time::Duration::from_secs(10))?;
    c.pragma_update(None, "journal_mode", "WAL")?;
    c.pragma_update(None, "synchronous", "NORMAL")?;
    c.execute_batch(SCHEMA)?;
    Ok(())
}

pub fn meta(c: &Connection, key: &str) -> Result<Option<String>> {
    Ok(
        c.query_row("SELECT value FROM meta WHERE key=?1", [key], |r| r.get(0))
            .optional()?,
    )
}

pub fn set_meta(c: &Connection, key: &str, value: &str) -> Result<()> {
    c.execute(
        "INSERT OR REPLACE INTO meta(key, value) VALUES(?1, ?2)",
        params![key, value],
    )?;
    Ok(())
}

/// The columns each table was embedded from (its config's text).
pub fn table_configs(c: &Connection) -> Result<std::collections::HashMap<String, String>> {
    let mut st = c.prepare("SELECT name, config FROM tables")?;
    let v = st
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<rusqlite::Result<_>>()?;
    Ok(v)
}

pub fn set_table_config(c: &Connection, table: &str, config: Option<&str>) -> Result<()> {
    match config {
        Some(cfg) => c.execute(
            "INSERT OR REPLACE INTO tables(name, config) VALUES(?1, ?2)",
            params![table, cfg],
        )?,
        None => c.execute("DELETE FROM tables WHERE name=?1", [table])?,
    };
    Ok(())
}

fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|x| f32::from_le_bytes([x[0], x[1], x[2], x[3]]))
        .collect()
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn i8_bytes(v: &[i8]) -> &[u8] {
    // SAFETY: i8 and u8 have the same size and alignment.
    unsafe { std::slice::from_raw_parts(v.as_ptr().cast(), v.len()) }
}

/// Writes a row's vectors into `rows` (or `rows_next` during a rebuild).
pub fn put(c: &Connection, into: &str, s: &Stored) -> Result<()> {
    c.prepare_cached(&format!(
        "INSERT OR REPLACE INTO {into}(tbl, id, version, hash, scales, codes) VALUES(?1,?2,?3,?4,?5,?6)"
    ))?
    .execute(params![
        s.table,
        s.id,
        s.version,
        s.hash,
        f32_bytes(&s.scales),
        i8_bytes(&s.codes)
    ])?;
    Ok(())
}

pub fn remove(c: &Connection, table: &str, id: &str) -> Result<()> {
    c.prepare_cached("DELETE FROM rows WHERE tbl=?1 AND id=?2")?
        .execute([table, id])?;
    Ok(())
}

pub fn remove_table(c: &Connection, table: &str) -> Result<()> {
    c.execute("DELETE FROM rows WHERE tbl=?1", [table])?;
    set_table_config(c, table, None)
}

/// A stable 64-bit form of a file hash (its first 16 hex digits).
pub fn short_hash(hash: &str) -> u64 {
    hash.get(..16)
        .and_then(|h| u64::from_str_radix(h, 16).ok())
        .unwrap_or_else(|| {
            // Not hex: FNV-1a of the text.
            hash.bytes().fold(0xcbf29ce484222325u64, |h, b| {
                (h ^ b as u64).wrapping_mul(0x100000001b3)
            })
        })
}

/// Loads every stored row into a matrix of `dim` dimensions (rows of another size are left
/// out, to be embedded again).
pub fn load(c: &Connection, dim: usize) -> Result<Matrix> {
    let mut m = Matrix::new(dim);
    let mut st = c.prepare("SELECT tbl, id, version, hash, scales, codes FROM rows")?;
    let mut rows = st.query([])?;
    while let Some(r) = rows.next()? {
        let table: String = r.get(0)?;
        let id: String = r.get(1)?;
        let scales = f32s(&r.get::<_, Vec<u8>>(4)?);
        let codes: Vec<i8> = r
            .get::<_, Vec<u8>>(5)?
            .into_iter()
            .map(|b| b as i8)
            .collect();
        if codes.len() != scales.len() * dim {
            continue;
        }
        m.put(
            &table,
            &id,
            r.get(2)?,
            short_hash(&r.get::<_, String>(3)?),
            &codes,
            &scales,
        );
    }
    m.shrink();
    Ok(m)
}

/// Starts a rebuild: an empty `rows_next`.
pub fn begin_rebuild(c: &Connection) -> Result<()> {
    c.execute_batch(
        "DROP TABLE IF EXISTS rows_next;
         CREATE TABLE rows_next(tbl TEXT NOT NULL, id TEXT NOT NULL, version INTEGER NOT NULL,
           hash TEXT NOT NULL, scales BLOB NOT NULL, codes BLOB NOT NULL, PRIMARY KEY(tbl, id)) WITHOUT ROWID;",
    )?;
    Ok(())
}

/// Swaps `rows_next` in, with the model and tables it was built for (in the caller's
/// transaction, which wrote `rows_next`).
pub fn finish_rebuild(
    c: &Connection,
    model: &str,
    through: i64,
    configs: &[(String, String)],
) -> Result<()> {
    c.execute_batch("DROP TABLE rows; ALTER TABLE rows_next RENAME TO rows; DELETE FROM tables;")?;
    for (t, cfg) in configs {
        set_table_config(c, t, Some(cfg))?;
    }
    set_meta(c, "model", model)?;
    set_meta(c, "through", &through.to_string())?;
    Ok(())
}
