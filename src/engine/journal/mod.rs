//! The journal: every write is a migration, durable (SQLite WAL, `synchronous=FULL`) before it is
//! acknowledged. `seq` only grows (AUTOINCREMENT) and survives restarts and vacuum: it is the
//! change feed's cursor.
//!
//! A migration is `{seq, ts, op, table, row, before, after, actor}`. Its vocabulary is typed, and
//! written exactly as it always was: [`Op`], every kind of migration, stored and served as its
//! snake_case name (`tool_call` and `semantic_index` are events: they change nothing, cannot be
//! undone, and reach only the feed's consumers that name them); and [`RowState`], a row migration's
//! before and after: `null`, `{"invalid": why}` or `{"version", "values", "body"}`. A failed
//! `ROLLBACK` is reported, not ignored ([`rollback`]).

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

mod db;
pub use db::*;

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
