//! The journal's SQLite file: its schema, its meta values, appending migrations and reading
//! them back (by seq, by filter, by row).

use super::{Migration, Op};
use crate::error::{Error, Result};
use rusqlite::{Connection, OptionalExtension, params};
use serde_json::Value;
use serde_json::value::RawValue;
use std::path::Path;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS migrations(
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  ts TEXT NOT NULL, op TEXT NOT NULL, tbl TEXT, row TEXT,
  before TEXT, after TEXT, actor TEXT NOT NULL, call TEXT,
  app TEXT, session TEXT);
CREATE INDEX IF NOT EXISTS migrations_tbl ON migrations(tbl, row, seq);
CREATE INDEX IF NOT EXISTS migrations_app ON migrations(app, seq);
CREATE INDEX IF NOT EXISTS migrations_session ON migrations(session, seq);
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
";

pub fn open(path: &Path, writer: bool) -> Result<Connection> {
    let c = Connection::open(path)?;
    c.busy_timeout(std::time::Duration::from_secs(10))?;
    c.pragma_update(None, "journal_mode", "WAL")?;
    c.pragma_update(None, "synchronous", "FULL")?;
    if writer {
        c.execute_batch(SCHEMA)?;
    }
    Ok(c)
}

/// A value of the `meta` table (the journal's and the index's have the same shape).
pub fn get_meta(c: &Connection, key: &str) -> Result<Option<String>> {
    Ok(
        c.query_row("SELECT value FROM meta WHERE key=?1", [key], |r| r.get(0))
            .optional()?,
    )
}

pub fn set_meta(c: &Connection, key: &str, value: &str) -> Result<()> {
    c.prepare_cached(
        "INSERT INTO meta(key,value) VALUES(?1,?2) ON CONFLICT(key) DO UPDATE SET value=?2",
    )?
    .execute([key, value])?;
    Ok(())
}

pub fn meta_i64(c: &Connection, key: &str) -> Result<i64> {
    Ok(get_meta(c, key)?.and_then(|v| v.parse().ok()).unwrap_or(0))
}

pub fn last_seq(c: &Connection) -> Result<i64> {
    // sqlite_sequence keeps the high-water mark even after vacuum deleted every row.
    let seq: Option<i64> = c
        .query_row(
            "SELECT seq FROM sqlite_sequence WHERE name='migrations'",
            [],
            |r| r.get(0),
        )
        .optional()?;
    Ok(seq.unwrap_or(0))
}

/// A migration's JSON columns, as the journal stores them (no text for null).
pub(crate) struct Stored {
    pub(crate) before: Option<String>,
    pub(crate) after: Option<String>,
    pub(crate) actor: String,
    pub(crate) call: Option<String>,
}

impl Stored {
    /// The columns of a migration about to be journaled.
    pub(crate) fn of(m: &Migration) -> Result<Stored> {
        let js = |v: &serde_json::Value| (!v.is_null()).then(|| v.to_string());
        Ok(Stored {
            before: js(&m.before),
            after: js(&m.after),
            actor: serde_json::to_string(&m.actor)
                .map_err(|e| Error::internal(format!("the actor cannot be written: {e}")))?,
            call: m.call.as_ref().map(|c| c.get().to_owned()),
        })
    }
}

/// Appends migrations (their `seq` is assigned here) in the caller's transaction.
pub fn append(c: &Connection, m: &mut Migration) -> Result<()> {
    let mut st = c.prepare_cached(
        "INSERT INTO migrations(ts,op,tbl,row,before,after,actor,call,app,session) VALUES(?1,?2,?3,?4,?5,?6,?7,?8,?9,?10)",
    )?;
    let stored = Stored::of(m)?;
    st.execute(params![
        m.ts,
        m.op,
        m.table,
        m.row,
        stored.before,
        stored.after,
        stored.actor,
        stored.call,
        m.actor.app,
        m.actor.session,
    ])?;
    m.seq = c.last_insert_rowid();
    Ok(())
}

/// Ends a transaction that failed (the caller answers with the first error). Where SQLite has
/// already rolled it back there is nothing to do; a rollback that fails is reported: the next
/// `BEGIN` on this connection then fails and says so to its caller.
pub fn rollback(c: &Connection, what: &str) {
    if c.is_autocommit() {
        return;
    }
    if let Err(e) = c.execute_batch("ROLLBACK") {
        tracing::error!("the rollback of {what} failed: {e}");
    }
}

pub const COLUMNS: &str = "seq,ts,op,tbl,row,before,after,actor,call";

pub fn from_row(r: &rusqlite::Row) -> rusqlite::Result<Migration> {
    let parse = |s: Option<String>| {
        s.and_then(|s| serde_json::from_str(&s).ok())
            .unwrap_or(Value::Null)
    };
    let actor: String = r.get(7)?;
    Ok(Migration {
        seq: r.get(0)?,
        ts: r.get(1)?,
        op: r.get(2)?,
        table: r.get(3)?,
        row: r.get(4)?,
        before: parse(r.get(5)?),
        after: parse(r.get(6)?),
        actor: serde_json::from_str(&actor).unwrap_or_default(),
        call: r
            .get::<_, Option<String>>(8)?
            .and_then(|s| RawValue::from_string(s).ok()),
    })
}

pub fn get(c: &Connection, seq: i64) -> Result<Option<Migration>> {
    Ok(c.query_row(
        &format!("SELECT {COLUMNS} FROM migrations WHERE seq=?1"),
        [seq],
        from_row,
    )
    .optional()?)
}

/// The tables the journal has migrations of, dropped ones too (a skip through the index on
/// `tbl`: one look-up per table).
pub fn tables(c: &Connection) -> Result<Vec<String>> {
    let mut st = c.prepare_cached(
        "WITH RECURSIVE t(tbl) AS (SELECT min(tbl) FROM migrations
           UNION ALL SELECT (SELECT min(tbl) FROM migrations WHERE tbl > t.tbl) FROM t
           WHERE t.tbl IS NOT NULL)
         SELECT tbl FROM t WHERE tbl IS NOT NULL",
    )?;
    let v = st
        .query_map([], |r| r.get(0))?
        .collect::<rusqlite::Result<Vec<String>>>()?;
    Ok(v)
}

/// The filters of `list_migrations`.
#[derive(Debug, Default)]
pub struct Filter {
    pub table: Option<String>,
    /// Only the migrations of these tables (none of no table); None: of any table or none.
    pub tables: Option<Vec<String>>,
    pub row: Option<String>,
    pub actor: Option<String>,
    pub app: Option<String>,
    pub session: Option<String>,
    pub before: Option<i64>,
    pub after: Option<i64>,
    pub limit: i64,
    pub newest_first: bool,
}

pub fn list(c: &Connection, f: &Filter) -> Result<Vec<Migration>> {
    let mut sql = format!(
        "SELECT {COLUMNS} FROM migrations WHERE op != '{}'",
        Op::ToolCall.as_str()
    );
    let mut args: Vec<rusqlite::types::Value> = vec![];
    let mut add = |cond: &str, v: rusqlite::types::Value| {
        args.push(v);
        sql.push_str(&format!(" AND {cond}?{}", args.len()));
    };
    if let Some(t) = &f.table {
        add("tbl=", t.clone().into());
    }
    if let Some(r) = &f.row {
        add("row=", r.clone().into());
    }
    if let Some(a) = &f.app {
        add("app=", a.clone().into());
    }
    if let Some(s) = &f.session {
        add("session=", s.clone().into());
    }
    if let Some(b) = f.before {
        add("seq<", b.into());
    }
    if let Some(a) = f.after {
        add("seq>", a.into());
    }
    if let Some(ts) = &f.tables {
        if ts.is_empty() {
            return Ok(vec![]);
        }
        let mut ph = vec![];
        for t in ts {
            args.push(t.clone().into());
            ph.push(format!("?{}", args.len()));
        }
        sql.push_str(&format!(" AND tbl IN ({})", ph.join(",")));
    }
    if let Some(a) = &f.actor {
        let n = args.len() + 1;
        args.push(a.clone().into());
        sql.push_str(&format!(
            " AND ?{n} IN (json_extract(actor,'$.harness'), json_extract(actor,'$.model'), json_extract(actor,'$.app'), json_extract(actor,'$.token'), json_extract(actor,'$.label'), json_extract(actor,'$.caller'))"
        ));
    }
    sql.push_str(if f.newest_first {
        " ORDER BY seq DESC"
    } else {
        " ORDER BY seq"
    });
    sql.push_str(&format!(" LIMIT {}", f.limit.max(0)));
    let mut st = c.prepare(&sql)?;
    let rows = st.query_map(rusqlite::params_from_iter(args), from_row)?;
    rows.collect::<rusqlite::Result<Vec<_>>>()
        .map_err(Error::from)
}

/// What the migrations after `after` touched, oldest first, at most `limit` of them (tool calls
/// left out): (seq, op, table, row).
#[allow(clippy::type_complexity)]
pub fn touched_after(
    c: &Connection,
    after: i64,
    limit: i64,
) -> Result<Vec<(i64, Op, Option<String>, Option<String>)>> {
    let mut st = c.prepare_cached(&format!(
        "SELECT seq, op, tbl, row FROM migrations WHERE seq > ?1 AND op != '{}' ORDER BY seq LIMIT ?2",
        Op::ToolCall.as_str()
    ))?;
    let v = st
        .query_map(params![after, limit], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(v)
}

/// The rows that row migrations after `after` changed (each once), up to `cap`.
pub fn rows_touched_after(c: &Connection, after: i64, cap: i64) -> Result<i64> {
    Ok(c.prepare_cached(
        "SELECT count(*) FROM (SELECT DISTINCT tbl, row FROM migrations
             WHERE seq > ?1 AND row IS NOT NULL LIMIT ?2)",
    )?
    .query_row(params![after, cap], |r| r.get(0))?)
}

/// The oldest seq the journal still has.
pub fn first_seq(c: &Connection) -> Result<Option<i64>> {
    Ok(c.query_row("SELECT min(seq) FROM migrations", [], |r| r.get(0))?)
}

/// The newest migration of a row at or before `seq`.
pub fn row_state_at(c: &Connection, table: &str, row: &str, seq: i64) -> Result<Option<Migration>> {
    Ok(c.query_row(
        &format!("SELECT {COLUMNS} FROM migrations WHERE tbl=?1 AND row=?2 AND seq<=?3 ORDER BY seq DESC LIMIT 1"),
        params![table, row, seq],
        from_row,
    )
    .optional()?)
}

/// The oldest migration of a row after `seq`: its `before` is the row's state at `seq`.
pub fn row_first_after(
    c: &Connection,
    table: &str,
    row: &str,
    seq: i64,
) -> Result<Option<Migration>> {
    Ok(c.query_row(
        &format!("SELECT {COLUMNS} FROM migrations WHERE tbl=?1 AND row=?2 AND seq>?3 ORDER BY seq LIMIT 1"),
        params![table, row, seq],
        from_row,
    )
    .optional()?)
}

/// Whether any migration concerns this table.
pub fn knows_table(c: &Connection, table: &str) -> Result<bool> {
    Ok(c.query_row(
        "SELECT 1 FROM migrations WHERE tbl=?1 LIMIT 1",
        [table],
        |_| Ok(()),
    )
    .optional()?
    .is_some())
}
