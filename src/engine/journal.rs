//! The journal: every write is a migration, durable (SQLite WAL, `synchronous=FULL`) before it is
//! acknowledged. `seq` only grows (AUTOINCREMENT) and survives restarts and vacuum: it is the
//! change feed's cursor.

use crate::error::{Error, Result};
use rusqlite::{Connection, OptionalExtension, params};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use std::path::Path;

/// Who made a change. `token` is a token's name, never a secret.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Actor {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// The program the agent or person works through (e.g. `claude-code`).
    pub harness: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// The model behind an agent, if it says.
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// The app whose tool made the change.
    pub app: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// The MCP session, if any.
    pub session: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// The token's name (`owner`, `app:<name>`), never the token.
    pub token: Option<String>,
    /// `harness / model via app`, for people reading the log.
    #[serde(default)]
    pub label: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// The token that called the app's tool which made the change (`owner`, `app:<name>`):
    /// set by the engine for a WASM app's tool; as a remote app says it
    /// (`X-Datanotes-Caller`) for a remote app's writes.
    pub caller: Option<String>,
}

/// The most characters of an actor's harness, model or session (they come from headers and
/// clients' names).
pub const ACTOR_FIELD_CHARS: usize = 200;

impl Actor {
    /// An actor, its harness, model and session cut at [`ACTOR_FIELD_CHARS`] characters.
    pub fn new(
        harness: Option<String>,
        model: Option<String>,
        app: Option<String>,
        session: Option<String>,
        token: Option<String>,
    ) -> Actor {
        let clip = |s: Option<String>| s.map(|s| cut(&s, ACTOR_FIELD_CHARS));
        let mut a = Actor {
            harness: clip(harness),
            model: clip(model),
            app,
            session: clip(session),
            token,
            label: String::new(),
            caller: None,
        };
        a.label = a.compute_label();
        a
    }
    /// The same actor, with the token that called the app's tool (cut at
    /// [`ACTOR_FIELD_CHARS`] characters).
    pub fn with_caller(mut self, caller: Option<String>) -> Actor {
        self.caller = caller.map(|c| cut(&c, ACTOR_FIELD_CHARS));
        self
    }
    /// The actor of a change found in the files (edited by hand).
    pub fn hand_edit() -> Actor {
        Actor::new(Some("hand edit".into()), None, None, None, None)
    }
    fn compute_label(&self) -> String {
        let who = match (&self.harness, &self.model) {
            (Some(h), Some(m)) => format!("{h} / {m}"),
            (Some(h), None) => h.clone(),
            (None, Some(m)) => m.clone(),
            (None, None) => String::new(),
        };
        match (&self.app, who.is_empty()) {
            (Some(app), false) => format!("{who} via {app}"),
            (Some(app), true) => app.clone(),
            (None, false) => who,
            (None, true) => self.token.clone().unwrap_or_else(|| "owner".into()),
        }
    }
}

/// The first `n` characters of `s` (cut on a character boundary).
pub fn cut(s: &str, n: usize) -> String {
    match s.char_indices().nth(n) {
        Some((i, _)) => s[..i].to_string(),
        None => s.to_string(),
    }
}

/// What a migration did: the journal's `op` column and a change's `op` in the feed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Op {
    /// A row inserted.
    Insert,
    /// A row updated.
    Update,
    /// A row deleted.
    Delete,
    /// A table created.
    CreateTable,
    /// A table's definition altered (and each row it rewrote).
    AlterTable,
    /// A table dropped, with its rows.
    DropTable,
    /// A migration taken back.
    Undo,
    /// A row brought back to an earlier state.
    Restore,
    /// The engine settings changed.
    Settings,
    /// A change found in the files (made by hand).
    HandEdit,
    /// A tool call served (an event: it changes nothing).
    ToolCall,
    /// The semantic index rebuilt (an event: it changes nothing).
    SemanticIndex,
    /// A WASM app installed, upgraded or rolled back by reference, with its digests (an event:
    /// the apps registry is not a table).
    App,
}

impl Op {
    /// Every op, in the order the feed's error hint lists them.
    pub const ALL: [Op; 13] = [
        Op::Insert,
        Op::Update,
        Op::Delete,
        Op::CreateTable,
        Op::AlterTable,
        Op::DropTable,
        Op::Undo,
        Op::Restore,
        Op::Settings,
        Op::HandEdit,
        Op::ToolCall,
        Op::SemanticIndex,
        Op::App,
    ];

    /// The op's name, as stored in the journal and written in the feed.
    pub fn as_str(self) -> &'static str {
        match self {
            Op::Insert => "insert",
            Op::Update => "update",
            Op::Delete => "delete",
            Op::CreateTable => "create_table",
            Op::AlterTable => "alter_table",
            Op::DropTable => "drop_table",
            Op::Undo => "undo",
            Op::Restore => "restore",
            Op::Settings => "settings",
            Op::HandEdit => "hand_edit",
            Op::ToolCall => "tool_call",
            Op::SemanticIndex => "semantic_index",
            Op::App => "app",
        }
    }

    /// An event (a tool call, a rebuilt index): it changes nothing, cannot be undone, and
    /// reaches only the feed's consumers that name it.
    pub fn is_event(self) -> bool {
        matches!(self, Op::ToolCall | Op::SemanticIndex | Op::App)
    }

    /// The op of a name (exact, lowercase), if there is one.
    pub fn parse(name: &str) -> Option<Op> {
        Op::ALL.into_iter().find(|o| o.as_str() == name)
    }
}

impl std::fmt::Display for Op {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl rusqlite::ToSql for Op {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        Ok(self.as_str().into())
    }
}

impl rusqlite::types::FromSql for Op {
    fn column_result(v: rusqlite::types::ValueRef<'_>) -> rusqlite::types::FromSqlResult<Op> {
        let s = v.as_str()?;
        Op::parse(s).ok_or_else(|| {
            rusqlite::types::FromSqlError::Other(format!("unknown op {s:?} in the journal").into())
        })
    }
}

/// A row's state in a row migration's `before`/`after`: absent (`null`), a file that is not a
/// valid row (`{"invalid": why}`), or a row (`{"version", "values", "body"}`, in that order).
#[derive(Debug, Clone, PartialEq)]
pub enum RowState {
    /// No row (before an insert, after a delete).
    Absent,
    /// A hand-edited file that is not a valid row, and why.
    Invalid(String),
    /// A valid row.
    Row {
        /// The row's version.
        version: i64,
        /// Its column values.
        values: Map<String, Value>,
        /// Its Markdown body.
        body: String,
    },
}

impl RowState {
    /// Reads a journaled state. Anything with an `invalid` key is invalid; a row state's missing
    /// parts read as empty (as the journal has always been read).
    pub fn of(v: &Value) -> RowState {
        if v.is_null() {
            return RowState::Absent;
        }
        if let Some(why) = v.get("invalid") {
            return RowState::Invalid(why.as_str().unwrap_or_default().to_string());
        }
        RowState::Row {
            version: v["version"].as_i64().unwrap_or(0),
            values: v["values"].as_object().cloned().unwrap_or_default(),
            body: v["body"].as_str().unwrap_or_default().to_string(),
        }
    }
    /// The journal's JSON of the state.
    pub fn to_value(&self) -> Value {
        match self {
            RowState::Absent => Value::Null,
            RowState::Invalid(why) => serde_json::json!({ "invalid": why }),
            RowState::Row {
                version,
                values,
                body,
            } => serde_json::json!({"version": version, "values": values, "body": body}),
        }
    }
    /// The row's version (0 for no row or an invalid file).
    pub fn version(&self) -> i64 {
        match self {
            RowState::Row { version, .. } => *version,
            _ => 0,
        }
    }
    /// Whether there is a valid row.
    pub fn is_row(&self) -> bool {
        matches!(self, RowState::Row { .. })
    }
    /// Two states are the same if both are no valid row, or both rows with the same values
    /// and body (versions differ by design).
    pub fn same_content(&self, other: &RowState) -> bool {
        match (self, other) {
            (
                RowState::Row {
                    values: a, body: b, ..
                },
                RowState::Row {
                    values: c, body: d, ..
                },
            ) => a == c && b == d,
            (a, b) => !a.is_row() && !b.is_row(),
        }
    }
}

impl From<RowState> for Value {
    fn from(s: RowState) -> Value {
        s.to_value()
    }
}

/// One journal entry: what changed, when and by whom. `before`/`after` are a row state (see
/// [`RowState`]) for a row migration, a table definition for a table migration, the settings
/// for a settings migration; null where there is nothing.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Migration {
    /// Its place in the journal: only grows, across restarts and vacuum.
    pub seq: i64,
    /// When it was committed (RFC 3339, UTC).
    pub ts: String,
    /// What kind of change it is.
    pub op: Op,
    /// The table it changed, if any.
    pub table: Option<String>,
    /// The row it changed, if any.
    pub row: Option<String>,
    /// The state before (see above).
    pub before: Value,
    /// The state after (see above).
    pub after: Value,
    /// Who made it.
    pub actor: Actor,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// A tool call's report, for `tool_call` events: its JSON text, encoded once (by the
    /// writer, when it takes the event) and copied as it is into the journal and the feed.
    pub call: Option<Box<RawValue>>,
}

pub fn now() -> String {
    time_of_ms(chrono::Utc::now().timestamp_millis())
}

/// A time given in Unix milliseconds, written as [`now`] writes it.
pub fn time_of_ms(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .unwrap_or_default()
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

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

/// Appends migrations (their `seq` is assigned here) in the caller's transaction.
pub fn append(c: &Connection, m: &mut Migration) -> Result<()> {
    let mut st = c.prepare_cached(
        "INSERT INTO migrations(ts,op,tbl,row,before,after,actor,call,app,session) VALUES(?1,?2,?3,?4,?5,?6,?7,?8,?9,?10)",
    )?;
    let stored = super::changes::Stored::of(m)?;
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
