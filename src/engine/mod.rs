//! The engine: a folder of Markdown notes served as typed tables.
//!
//! Layout of responsibilities:
//! - `files`: the source of truth (row files, table definitions), atomic writes;
//! - `journal`: every write as a durable migration (the change feed reads it);
//! - `index`: SQLite index derived from the files (selects, search), rebuilt when missing;
//! - `writer`: the single writer thread: validation, group commit, hand-edit scans;
//! - this module: opening (recovery), and the read operations.
//!
//! Write order inside a batch: journal commit (fsync), while the files' temp files are written and
//! fsynced → renames, fsync folder → index commit → acknowledgement. At start, migrations newer than the files' checkpoint are
//! redone (idempotently), rows newer than the index's checkpoint are re-indexed, and any other
//! difference between files and index is a hand edit.

pub(crate) mod args;
pub(crate) mod changes;
pub mod files;
pub(crate) mod index;
pub(crate) mod journal;
pub(crate) mod lock;
mod recovery;
pub mod resources;
pub mod schema;
mod search;
pub mod semantic;
pub(crate) mod settings;
pub mod skills;
pub mod tools;
mod watch;
mod writer;

use crate::error::{Error, Result};
use crate::names::{self, TableName};
pub use args::SearchMode;
pub use journal::{Actor, Migration, Op, RowState};
use rusqlite::Connection;
use schema::Table;
pub use search::ProgressFn;
use serde_json::{Value, json};
use settings::Settings;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
pub use writer::{Cmd, EventCall};

/// The served tables by full name.
pub type Tables = BTreeMap<String, Arc<Table>>;

/// What a caller may read, as `auth::authorize` decided it (through `ops`; the engine decides
/// nothing): a table's answer, and whether every table is readable.
#[derive(Clone, Copy)]
pub struct Reads<'a> {
    /// A table's answer: readable, or the refusal to answer.
    pub table: &'a dyn Fn(&str) -> Result<()>,
    /// Every table, also those created later (the owner, an app, a grant that reads `*`):
    /// the journal's migrations of no table are read only then.
    pub all: bool,
}

fn any_table(_: &str) -> Result<()> {
    Ok(())
}

impl Reads<'_> {
    /// Every table (the owner's reads).
    pub const EVERY: Reads<'static> = Reads {
        table: &any_table,
        all: true,
    };

    /// Whether the table is readable.
    pub fn may(&self, table: &str) -> bool {
        self.all || (self.table)(table).is_ok()
    }

    /// Of the served tables, the readable ones' names (sorted); None: all of them.
    pub(crate) fn among(&self, names: Vec<String>) -> Option<Vec<String>> {
        if self.all {
            return None;
        }
        Some(names.into_iter().filter(|t| self.may(t)).collect())
    }
}

/// A small pool of read connections.
struct Pool {
    path: PathBuf,
    open: fn(&Path) -> Result<Connection>,
    conns: Mutex<Vec<Connection>>,
}

impl Pool {
    fn new(path: PathBuf, open: fn(&Path) -> Result<Connection>) -> Pool {
        Pool {
            path,
            open,
            conns: Mutex::new(vec![]),
        }
    }
    fn with<T>(&self, f: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
        let conn = self.conns.lock().unwrap().pop();
        let conn = match conn {
            Some(c) => c,
            None => (self.open)(&self.path)?,
        };
        let out = f(&conn);
        let mut conns = self.conns.lock().unwrap();
        if conns.len() < 16 {
            conns.push(conn);
        }
        out
    }
}

/// The engine: a folder of Markdown notes served as tables, with its journal, index and writer.
pub struct Engine {
    /// The database folder.
    pub root: PathBuf,
    /// `.datanotes/` in it: journal, index, tokens, apps, lock.
    pub meta_dir: PathBuf,
    tables: RwLock<Tables>,
    settings: RwLock<Settings>,
    index: Pool,
    journal: Pool,
    writer: writer::Handle,
    /// The newest seq, published after each commit (the change feed waits on it).
    pub seq: tokio::sync::watch::Sender<i64>,
    /// Recent changes, serialized, for the change feed.
    pub recent: changes::Recent,
    /// The app tools that declare each table (set by the aggregator), for describe_table.
    table_tools: RwLock<std::collections::HashMap<String, Vec<Value>>>,
    /// Every tool an agent can reach, searchable (the aggregator keeps it current).
    tools: tools::ToolIndex,
    _watcher: Mutex<Option<watch::Watcher>>,
    /// The folder's lock (one process per folder), held until `shutdown` or drop.
    lock: Mutex<Option<lock::FolderLock>>,
    /// The semantic index (its worker follows the commits).
    pub semantic: Arc<semantic::Semantic>,
}

/// The most changes the feed's ring of recent changes keeps.
const RECENT_CHANGES: usize = 20_000;
/// The most bytes (of serialized changes) the feed's ring keeps.
const RECENT_BYTES: usize = 64 << 20;

fn open_journal_reader(p: &Path) -> Result<Connection> {
    journal::open(p, false)
}

impl Engine {
    /// Opens (creating if needed) the database at `root`, recovers, and starts the writer.
    pub fn open(root: &Path) -> anyhow::Result<Arc<Engine>> {
        std::fs::create_dir_all(root)?;
        let root = root.canonicalize()?;
        let meta_dir = root.join(".datanotes");
        std::fs::create_dir_all(&meta_dir)?;
        lock::set_mode(&meta_dir, 0o700)?;
        // Before anything reads or repairs the folder: a second process stops here.
        let folder_lock = lock::FolderLock::acquire(&meta_dir)?;
        lock::make_private(&meta_dir)?;
        let jpath = meta_dir.join("journal.db");
        let jconn = journal::open(&jpath, true)?;
        let mut tables = load_tables(&root);
        let behind = recovery::redo(&root, &jconn, &mut tables)?;
        // After the redo: an interrupted set_engine_settings is finished by it.
        let settings = Settings::load(&meta_dir);
        let ipath = meta_dir.join("index.db");
        let iconn = recovery::open_index_checked(&ipath)?;
        // A table that neither the index nor the journal knows was made by hand while the engine
        // was stopped: the first scan finds it like one made while serving, and journals it and
        // its rows (indexing it here would take them silently).
        tables.retain(|name, _| {
            index::defhash(&iconn, name).is_ok_and(|h| h.is_some())
                || journal::knows_table(&jconn, name).unwrap_or(true)
        });
        recovery::reconcile_index(&root, &iconn, &jconn, &tables, settings.max_body_bytes)?;
        let last = journal::last_seq(&jconn)?;
        // Recovery may have made index.db (and both databases their -wal/-shm) anew.
        lock::make_private(&meta_dir)?;
        let (seq, _) = tokio::sync::watch::channel(last);
        let watch_files = settings.watch_files;
        let engine = Arc::new_cyclic(|weak| Engine {
            writer: writer::spawn(writer::Writer::new(
                root.clone(),
                iconn,
                jconn,
                tables.clone(),
                weak.clone(),
                behind,
            )),
            root: root.clone(),
            meta_dir: meta_dir.clone(),
            tables: RwLock::new(tables),
            settings: RwLock::new(settings),
            index: Pool::new(ipath, index::open),
            journal: Pool::new(jpath, open_journal_reader),
            seq,
            recent: changes::Recent::new(RECENT_CHANGES, RECENT_BYTES),
            table_tools: RwLock::new(Default::default()),
            tools: Default::default(),
            _watcher: Mutex::new(None),
            lock: Mutex::new(Some(folder_lock)),
            semantic: Default::default(),
        });
        // Hand edits made while the engine was stopped. A scan that cannot run (files behind
        // the journal) is reported and the engine serves what it has.
        if let Err(e) = engine.write(
            Cmd::Scan {
                table: None,
                id: None,
            },
            Actor::hand_edit(),
        ) {
            tracing::error!("the folder scan at start did not run: {}", e.message);
        }
        // It waits for `semantic.set_default_model` (serve gives --model).
        semantic::spawn(&engine);
        if watch_files {
            match watch::Watcher::start(&engine) {
                Ok(w) => *engine._watcher.lock().unwrap() = Some(w),
                Err(e) => tracing::warn!("file watcher not started: {e}"),
            }
        }
        Ok(engine)
    }

    /// Records the address the server listens on in the folder's lock file, for the message a
    /// second server gets.
    pub fn record_address(&self, address: &str) -> std::io::Result<()> {
        match &*self.lock.lock().unwrap() {
            Some(l) => l.record_address(address),
            None => Ok(()),
        }
    }

    /// Runs a write through the single writer and waits until it is durable.
    pub fn write(&self, cmd: Cmd, actor: Actor) -> Result<Value> {
        self.writer.submit(cmd, actor)
    }

    /// Hands a write to the single writer without waiting for it (tool-call events): it is
    /// group-committed by the writer (the events of a few milliseconds in one commit), in the
    /// order of these calls, and at the latest at [`Engine::shutdown`]. A crash loses at most the
    /// events of the interval being gathered or committed.
    pub fn write_nowait(&self, cmd: Cmd, actor: Actor) {
        self.writer.submit_nowait(cmd, actor)
    }

    /// Which app tools declare which tables (the aggregator keeps this current).
    pub fn set_table_tools(&self, m: std::collections::HashMap<String, Vec<Value>>) {
        *self.table_tools.write().unwrap() = m;
    }

    /// The engine settings in force.
    pub fn settings(&self) -> Settings {
        self.settings.read().unwrap().clone()
    }

    /// A served table by full name, or the error naming the tables there are.
    pub fn table(&self, name: &str) -> Result<Arc<Table>> {
        TableName::parse(name)?;
        self.tables
            .read()
            .unwrap()
            .get(name)
            .cloned()
            .ok_or_else(|| no_table(name))
    }

    /// The full names of the served tables, sorted.
    pub fn table_names(&self) -> Vec<String> {
        self.tables.read().unwrap().keys().cloned().collect()
    }

    /// The seq of the last committed migration.
    pub fn last_seq(&self) -> i64 {
        *self.seq.borrow()
    }

    pub(crate) fn with_index<T>(&self, f: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
        self.index.with(f)
    }
    /// Runs `f` on the journal's connection (a reader's; writes go through the writer).
    pub fn with_journal<T>(&self, f: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
        self.journal.with(f)
    }

    // ---- read operations ----

    /// Operation `list_tables`: the tables the caller may read.
    pub fn list_tables(&self, reads: Reads) -> Result<Value> {
        let tables: Vec<Arc<Table>> = (self.tables.read().unwrap().values())
            .filter(|t| reads.may(&t.name))
            .cloned()
            .collect();
        self.with_index(|c| {
            let mut out = vec![];
            for t in tables {
                out.push(json!({"table": t.name, "description": t.def.description, "rows": index::count(c, &t.name)?}));
            }
            Ok(json!({ "tables": out }))
        })
    }

    /// Operation `describe_table`.
    pub fn describe_table(&self, a: args::TableArg) -> Result<Value> {
        let t = self.table(&a.table)?;
        self.with_index(|c| {
            let invalid: Vec<Value> = index::invalid_rows(c, &t.name)?
                .into_iter()
                .map(|(id, error)| json!({"id": id, "error": error}))
                .collect();
            Ok(json!({
                "table": t.name,
                "description": t.def.description,
                "columns": t.def.columns,
                "rows": index::count(c, &t.name)?,
                "invalid": invalid,
                "tools": self.table_tools.read().unwrap().get(&t.name).cloned().unwrap_or_default(),
                "skills": t.def.skills,
                "semantic": {
                    "enabled": semantic::chunk::columns(&t).is_some(),
                    "columns": semantic::chunk::columns(&t),
                    "status": self.semantic.state().text(),
                },
            }))
        })
    }

    /// Operation `get_row`.
    pub fn get_row(&self, a: args::RowRef) -> Result<Value> {
        let t = self.table(&a.table)?;
        names::check_row_id(&a.table, &a.id)?;
        let row = self
            .with_index(|c| index::get_row(c, &t, &a.id))?
            .ok_or_else(|| no_row(&a.table, &a.id))?;
        Ok(json!({"id": row.id, "version": row.version, "values": row.values, "body": row.body}))
    }

    /// Operation `select_rows`.
    pub fn select_rows(&self, a: args::SelectRows) -> Result<Value> {
        let t = self.table(&a.table)?;
        let s = self.settings();
        let known = |col: &str| col == "id" || t.column(col).is_some();
        let unknown = |col: &str, what: &str| {
            Error::invalid(format!("table {} has no column {col}", t.name))
                .table(t.name.as_str())
                .column(col)
                .rule(what)
                .hint(format!(
                    "columns: id, {}",
                    t.def.columns.keys().cloned().collect::<Vec<_>>().join(", ")
                ))
        };
        let mut conds = vec![];
        for w in a.where_ {
            if !known(&w.column) {
                return Err(unknown(&w.column, "where"));
            }
            if !index::OPS.contains(&w.op.as_str()) {
                return Err(Error::invalid(format!("unknown operator {:?}", w.op))
                    .column(w.column.as_str())
                    .rule("where")
                    .hint(format!("use one of {}", index::OPS.join(" "))));
            }
            if w.op == "in" && !w.value.is_array() {
                return Err(Error::invalid("`in` takes a list of values")
                    .column(w.column.as_str())
                    .rule("where")
                    .hint("e.g. {\"column\": \"status\", \"op\": \"in\", \"value\": [\"todo\", \"doing\"]}"));
            }
            if w.value.is_object() || (w.value.is_array() && w.op != "in") {
                return Err(
                    Error::invalid(format!("operator {} takes a single value", w.op))
                        .column(w.column.as_str())
                        .rule("where")
                        .hint("compare with a text, number, boolean or null"),
                );
            }
            conds.push(index::Cond {
                column: w.column,
                op: w.op,
                value: w.value,
            });
        }
        let mut order = vec![];
        for o in a.order_by {
            if !known(&o.column) {
                return Err(unknown(&o.column, "order_by"));
            }
            let desc = match o.dir.as_deref() {
                None | Some("asc") => false,
                Some("desc") => true,
                Some(d) => {
                    return Err(Error::invalid(format!("unknown sort direction {d:?}"))
                        .column(o.column.as_str())
                        .rule("order_by")
                        .hint("use \"asc\" or \"desc\""));
                }
            };
            order.push((o.column, desc));
        }
        let limit = a.limit.unwrap_or(s.default_limit);
        if !(0..=s.max_limit).contains(&limit) {
            return Err(Error::invalid(format!("limit {limit} is out of range"))
                .rule("limit")
                .hint(format!(
                    "use a limit from 0 to {} and page with offset",
                    s.max_limit
                )));
        }
        let offset = a.offset.unwrap_or(0);
        if offset < 0 {
            return Err(Error::invalid("offset must not be negative")
                .rule("offset")
                .hint("use 0 or more"));
        }
        if let Some(cols) = &a.columns {
            for c in cols {
                if c != "body" && !known(c) {
                    return Err(unknown(c, "columns"));
                }
            }
        }
        let with_body = a
            .columns
            .as_ref()
            .is_some_and(|c| c.iter().any(|c| c == "body"));
        let q = index::Query {
            conds,
            order,
            limit,
            offset,
            with_body,
        };
        let (rows, total) = self.with_index(|c| index::select(c, &t, &q))?;
        let rows: Vec<Value> = rows
            .into_iter()
            .map(|r| {
                let mut values = r.values;
                if let Some(cols) = &a.columns {
                    values.retain(|k, _| cols.contains(k));
                }
                let mut row = json!({"id": r.id, "version": r.version, "values": values});
                if with_body {
                    row["body"] = Value::String(r.body);
                }
                row
            })
            .collect();
        Ok(json!({"rows": rows, "total": total}))
    }

    /// Operation `list_migrations`.
    /// Operation `list_migrations`: of the tables the caller may read (the migrations of no
    /// table, only for a caller that reads every table).
    pub fn list_migrations(&self, a: args::ListMigrations, reads: Reads) -> Result<Value> {
        let max = self.settings().max_limit;
        if let Some(t) = &a.table {
            (reads.table)(t)?;
        }
        let tables = match reads.all {
            true => None,
            false => reads.among(self.with_journal(journal::tables)?),
        };
        let f = journal::Filter {
            tables,
            table: a.table,
            actor: a.actor,
            app: a.app,
            session: a.session,
            before: a.before,
            limit: a.limit.unwrap_or(100).clamp(0, max),
            newest_first: true,
            ..Default::default()
        };
        let ms = self.with_journal(|c| journal::list(c, &f))?;
        Ok(json!({ "migrations": ms }))
    }

    /// Operation `get_engine_settings`.
    pub fn get_engine_settings(&self) -> Result<Value> {
        Ok(json!({ "settings": self.settings() }))
    }

    pub(crate) fn publish(
        &self,
        tables: Option<Tables>,
        settings: Option<Settings>,
        last_seq: i64,
        migs: &[Migration],
    ) {
        self.recent.push(migs);
        if let Some(t) = tables {
            *self.tables.write().unwrap() = t;
        }
        if let Some(s) = settings {
            *self.settings.write().unwrap() = s;
            // The writer rewrote settings.json (a new file, made with the default mode).
            if let Err(e) = lock::set_mode(&self.meta_dir.join("settings.json"), 0o600) {
                tracing::warn!("settings.json mode: {e}");
            }
        }
        self.seq.send_if_modified(|v| {
            let changed = *v != last_seq;
            *v = last_seq;
            changed
        });
        self.semantic.committed(last_seq);
    }

    /// Stops the writer after the writes in flight (files and journal are consistent at every
    /// step anyway; this only saves the next start a redo), then releases the folder's lock.
    pub fn shutdown(&self) {
        self.semantic.stop();
        self._watcher.lock().unwrap().take();
        self.writer.stop();
        self.lock.lock().unwrap().take();
    }
}

/// The 404 for a table that is not there.
pub fn no_table(name: &str) -> Error {
    Error::not_found(format!("no table {name}"))
        .table(name)
        .hint("list_tables shows the tables; create_table makes a new one")
}

/// The 404 for a row that is not there.
pub fn no_row(table: &str, id: &str) -> Error {
    Error::not_found(format!("no row {id} in {table}"))
        .table(table)
        .column("id")
        .hint("select_rows or search_notes find rows and their ids")
}

/// Loads every table definition found in the folder. A definition that does not parse is
/// logged and left out (the files stay untouched).
fn load_tables(root: &Path) -> Tables {
    let mut out = Tables::new();
    for (name, dir) in files::find_tables(root) {
        let text = match files::read_table_text(&dir.join(files::TABLE_FILE)) {
            Ok(t) => t,
            Err(e) => {
                tracing::error!(table = %name, "cannot read its definition: {e}");
                continue;
            }
        };
        match files::parse_table_def(&text)
            .map_err(Error::invalid)
            .and_then(|d| Table::compile(&name, d))
        {
            Ok(t) => {
                out.insert(name, Arc::new(t));
            }
            Err(e) => {
                tracing::error!(table = %name, "its definition is invalid and the table is not served: {e}")
            }
        }
    }
    out
}
