//! The operation catalog: every engine operation declared once (name, description, input schema,
//! access class). HTTP, MCP and the WASM host import all dispatch through [`call`], and
//! [`crate::auth::authorize`] is the one place that decides whether a caller may run it.
//!
//! The access classes are read, row write, schema change, maintain and owner (and the classes of
//! the routes beside the operations, `auth::Access`). `listed` is the one rule of what a caller's
//! listing shows (its `call_tools`, and for an operation, rights that can pass it): the
//! aggregator's listings and `search_tools` both use it. `reads_of` hands the engine what a caller
//! may read (`engine::Reads`: each table's answer from `authorize`), so reads of many tables
//! (listings, searches, the journal, the vault's resources and completions) keep to it.

mod compact;

use crate::auth::{self, Access, Caller};
use crate::engine::{Actor, Cmd, Engine, Reads, args};
use crate::error::{Error, Result, parse};
use schemars::JsonSchema;
use serde_json::Value;
use std::sync::OnceLock;

/// The caller of an operation and the actor its writes are recorded under.
#[derive(Debug, Clone)]
pub struct Ctx {
    /// Who is calling, with which rights.
    pub caller: Caller,
    /// Who the writes are recorded under.
    pub actor: Actor,
    /// Where a long operation reports its progress (an MCP caller that gave a progress token).
    pub progress: Option<Progress>,
    /// The request this call serves, as telemetry sees it (a door's; none: nobody observes).
    pub observed: crate::telemetry::Observed,
}

/// A long operation's progress: `(done, total, message)`.
#[derive(Clone)]
pub struct Progress(pub std::sync::Arc<crate::engine::ProgressFn>);

impl std::fmt::Debug for Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Progress")
    }
}

impl Ctx {
    /// A caller's context, with no progress to report to.
    pub fn new(caller: Caller, actor: Actor) -> Ctx {
        Ctx {
            caller,
            actor,
            progress: None,
            observed: Default::default(),
        }
    }

    /// The owner, working through `harness` (the CLI, the bench).
    pub fn owner(harness: &str) -> Ctx {
        Ctx::new(
            Caller::Owner,
            Actor::new(Some(harness.into()), None, None, None, Some("owner".into())),
        )
    }
}

/// One engine operation, declared once for every door.
pub struct Operation {
    /// Its name (the HTTP path, the MCP tool's name).
    pub name: &'static str,
    /// What it does, for agents.
    pub description: &'static str,
    /// The access class `auth::authorize` checks.
    pub access: Access,
    schema: fn() -> schemars::Schema,
    run: fn(&Engine, &Ctx, Value) -> Result<Value>,
}

impl Operation {
    /// The JSON Schema of the operation's arguments.
    pub fn input_schema(&self) -> Value {
        let mut v = serde_json::to_value((self.schema)()).unwrap_or_default();
        if let Some(o) = v.as_object_mut() {
            o.remove("$schema");
            o.remove("title");
        }
        compact::compact(v)
    }
}

fn schema<T: JsonSchema>() -> schemars::Schema {
    schemars::schema_for!(T)
}

fn write(e: &Engine, c: &Ctx, cmd: Cmd) -> Result<Value> {
    e.write(cmd, c.actor.clone())
}

/// The catalog, in the order agents see it.
pub static CATALOG: &[Operation] = &[
    Operation {
        name: "list_tables",
        description: "List every table (catalog.schema.table) with its description and row count.",
        access: Access::Read,
        schema: schema::<args::Empty>,
        run: |e, c, a| {
            parse::<args::Empty>("list_tables", a)?;
            reads_of(&c.caller, |r| e.list_tables(r))
        },
    },
    Operation {
        name: "describe_table",
        description: "Describe a table: its columns with types and constraints, row count, rows that fail validation (edited by hand), and the app tools that work on it.",
        access: Access::Read,
        schema: schema::<args::TableArg>,
        run: |e, c, a| {
            let mut v = e.describe_table(parse("describe_table", a)?)?;
            // The app tools the caller may call (its `call_tools`).
            if let Some(tools) = v.get_mut("tools").and_then(Value::as_array_mut) {
                tools.retain(|t| {
                    let name = t.get("name").and_then(Value::as_str).unwrap_or("");
                    auth::authorize(&c.caller, Access::CallTool, auth::Target::Tool(name)).is_ok()
                });
            }
            Ok(v)
        },
    },
    Operation {
        name: "get_row",
        description: "Read one row by id: its version, column values and Markdown body.",
        access: Access::Read,
        schema: schema::<args::RowRef>,
        run: |e, _, a| e.get_row(parse("get_row", a)?),
    },
    Operation {
        name: "select_rows",
        description: "Select rows of a table. where: [{column, op (= != < <= > >= in contains), value}], all must hold; order_by: [{column, dir}]; limit/offset to page; columns to project. Answers {rows: [{id, version, values}], total}.",
        access: Access::Read,
        schema: schema::<args::SelectRows>,
        run: |e, _, a| e.select_rows(parse("select_rows", a)?),
    },
    Operation {
        name: "search_notes",
        description: "Search notes by words and by meaning, optionally within some tables. mode: hybrid (default while the semantic index is ready: full text and meaning fused, so a question in your own words finds notes written with other words), text (every word must appear) or semantic (nearest in meaning). Answers {hits: [{table, id, score, snippet, ranks: {text?, semantic?}}], mode, indexedThrough, pending}.",
        access: Access::Read,
        schema: schema::<args::SearchNotes>,
        run: |e, c, a| {
            let a = parse("search_notes", a)?;
            reads_of(&c.caller, |r| e.search_notes(a, r))
        },
    },
    Operation {
        name: "similar_notes",
        description: "The notes nearest in meaning to a row (related notes), optionally within some tables. Answers {hits: [{table, id, score, snippet, version}], indexedThrough, pending}.",
        access: Access::Read,
        schema: schema::<args::SimilarNotes>,
        run: |e, c, a| {
            let a = parse("similar_notes", a)?;
            reads_of(&c.caller, |r| e.similar_notes(a, r))
        },
    },
    Operation {
        name: "search_tools",
        description: "Find the tools that do what you describe, among the engine's operations and every app's tools you may call: {query, limit?, apps?}. Answers {tools: [{kind, name, description, inputSchema, app, score}], indexedAt}, best first; call a tool found by its name. The vault's skills are found too (kind skill, with the uri of their SKILL.md to read).",
        access: Access::Read,
        schema: schema::<args::SearchTools>,
        run: |e, c, a| {
            let a = parse("search_tools", a)?;
            // What the caller's listing shows (never this operation itself: whoever asks
            // has it).
            let may = |app: &str, name: &str| {
                if app == crate::engine::tools::SKILLS {
                    // A skill: the caller reads its table.
                    return e.tools().skill_table(name).is_some_and(|t| {
                        auth::authorize(&c.caller, Access::Read, auth::Target::Table(&t)).is_ok()
                    });
                }
                name != "search_tools" && listed(&c.caller, name)
            };
            e.search_tools(a, &may)
        },
    },
    Operation {
        name: "list_migrations",
        description: "The journal, newest first: every write with its seq, op, table, row, before and after states, and actor. Filter by table, actor, app, session, before (a seq).",
        access: Access::Read,
        schema: schema::<args::ListMigrations>,
        run: |e, c, a| {
            let a = parse("list_migrations", a)?;
            let mut v = reads_of(&c.caller, |r| e.list_migrations(a, r))?;
            // Another principal's MCP sessions are not shown.
            if let Some(ms) = v.get_mut("migrations").and_then(Value::as_array_mut) {
                for m in ms {
                    crate::feed::hide_sessions(m, &c.caller);
                }
            }
            Ok(v)
        },
    },
    Operation {
        name: "get_engine_settings",
        description: "Read the engine settings.",
        access: Access::Read,
        schema: schema::<args::Empty>,
        run: |e, _, a| {
            parse::<args::Empty>("get_engine_settings", a)?;
            e.get_engine_settings()
        },
    },
    Operation {
        name: "insert_row",
        description: "Insert a row: {table, id?, values, body?}. The id is generated from the first text value when absent. Answers {id, version, seq}.",
        access: Access::RowWrite,
        schema: schema::<args::InsertRow>,
        run: |e, c, a| write(e, c, Cmd::Insert(parse("insert_row", a)?)),
    },
    Operation {
        name: "update_row",
        description: "Change some columns (null clears one) and/or the body of a row. With expect_version, refused if the row changed since you read it. Answers {id, version, seq}.",
        access: Access::RowWrite,
        schema: schema::<args::UpdateRow>,
        run: |e, c, a| write(e, c, Cmd::Update(parse("update_row", a)?)),
    },
    Operation {
        name: "delete_row",
        description: "Delete a row (its file). Refused while another row links to it. Undo brings it back.",
        access: Access::RowWrite,
        schema: schema::<args::RowRef>,
        run: |e, c, a| write(e, c, Cmd::Delete(parse("delete_row", a)?)),
    },
    Operation {
        name: "create_table",
        description: "Create a table catalog.schema.table with typed columns: text, integer, number, boolean, date, datetime, enum (values), list (of text), link (table); constraints required, unique, default, min, max, pattern.",
        access: Access::SchemaChange,
        schema: schema::<args::CreateTable>,
        run: |e, c, a| write(e, c, Cmd::CreateTable(parse("create_table", a)?)),
    },
    Operation {
        name: "alter_table",
        description: "Change a table: add, drop or rename columns, change a column's type or constraints, or its description. Refused, with the offending row named, when an existing row would break.",
        access: Access::SchemaChange,
        schema: schema::<args::AlterTable>,
        run: |e, c, a| write(e, c, Cmd::AlterTable(parse("alter_table", a)?)),
    },
    Operation {
        name: "drop_table",
        description: "Drop a table and its rows (undo_migration brings them back).",
        access: Access::SchemaChange,
        schema: schema::<args::TableArg>,
        run: |e, c, a| write(e, c, Cmd::DropTable(parse("drop_table", a)?)),
    },
    Operation {
        name: "set_engine_settings",
        description: "Change engine settings: {settings: {name: value}}; get_engine_settings lists them.",
        access: Access::Maintain,
        schema: schema::<args::SetSettings>,
        run: |e, c, a| {
            let a: args::SetSettings = parse("set_engine_settings", a)?;
            // Each setting is decided on its own: some are the owner's alone.
            for k in a.settings.keys() {
                auth::authorize(&c.caller, Access::Maintain, auth::Target::Setting(k))?;
            }
            e.check_semantic_model(&a.settings)?;
            write(e, c, Cmd::SetSettings(a))
        },
    },
    Operation {
        name: "undo_migration",
        description: "Undo one change (a migration of the journal, by seq: list_migrations shows them) by writing its reverse as a new migration. Refused if what it changed has changed again since.",
        access: Access::Maintain,
        schema: schema::<args::SeqArg>,
        run: |e, c, a| write(e, c, Cmd::Undo(parse("undo_migration", a)?)),
    },
    Operation {
        name: "restore",
        description: "Bring a row, or every row of a table, back to its state just after migration seq.",
        access: Access::Maintain,
        schema: schema::<args::Restore>,
        run: |e, c, a| write(e, c, Cmd::Restore(parse("restore", a)?)),
    },
    Operation {
        name: "vacuum",
        description: "Drop the journal's history before a seq and reclaim its space. Undo, restore and the change feed then start there.",
        access: Access::Maintain,
        schema: schema::<args::Vacuum>,
        run: |e, c, a| write(e, c, Cmd::Vacuum(parse("vacuum", a)?)),
    },
    Operation {
        name: "rebuild_index",
        description: "Rebuild the index from the files (the files are the source of truth), then journal any hand edit found.",
        access: Access::Maintain,
        schema: schema::<args::Empty>,
        run: |e, c, a| {
            parse::<args::Empty>("rebuild_index", a)?;
            let v = write(e, c, Cmd::RebuildIndex)?;
            e.semantic.ask_rebuild();
            Ok(v)
        },
    },
    Operation {
        name: "rebuild_semantic_index",
        description: "Embed every row again into a new semantic index (with progress), then switch to it at once; searches are answered from the current one meanwhile. Answers {rows, chunks, ms, model}.",
        access: Access::Maintain,
        schema: schema::<args::Empty>,
        run: |e, c, a| {
            parse::<args::Empty>("rebuild_semantic_index", a)?;
            e.rebuild_semantic_index(c.progress.as_ref().map(|p| &*p.0))
        },
    },
];

/// Whether a caller's listing shows the tool `name` (an operation or an app's tool): its
/// `call_tools` pass it, and for an operation, its rights can pass the operation's access class
/// (`auth::may_ever`). `auth::authorize` still decides each call.
pub fn listed(caller: &Caller, name: &str) -> bool {
    find(name).is_none_or(|o| auth::may_ever(caller, o.access))
        && auth::authorize(caller, Access::CallTool, auth::Target::Tool(name)).is_ok()
}

/// An operation of the catalog by name.
pub fn find(name: &str) -> Option<&'static Operation> {
    CATALOG.iter().find(|o| o.name == name)
}

/// The catalog as data: name, description, access and input schema of every operation.
pub fn describe_all() -> &'static Vec<Value> {
    static CACHE: OnceLock<Vec<Value>> = OnceLock::new();
    CACHE.get_or_init(|| {
        CATALOG
            .iter()
            .map(|o| {
                serde_json::json!({"name": o.name, "description": o.description, "access": o.access, "inputSchema": o.input_schema()})
            })
            .collect()
    })
}

/// The 404 for an operation that is not in the catalog, listing those that are.
pub fn unknown_op(name: &str) -> Error {
    let names: Vec<&str> = CATALOG.iter().map(|o| o.name).collect();
    Error::new(404, "unknown_operation", format!("no operation {name:?}"))
        .hint(format!("operations: {}", names.join(", ")))
}

/// Runs `f` with what `caller` may read, as [`auth::authorize`] decides it table by table: what
/// the engine's reads of many tables (listings, searches, the journal) keep to.
pub fn reads_of<T>(caller: &Caller, f: impl FnOnce(Reads) -> T) -> T {
    let table = |t: &str| auth::authorize(caller, Access::Read, auth::Target::Table(t));
    f(Reads {
        table: &table,
        all: auth::reads_every_table(caller),
    })
}

/// Runs an operation for a caller: the single entry of every door.
pub fn call(engine: &Engine, ctx: &Ctx, name: &str, args: Value) -> Result<Value> {
    let op = find(name).ok_or_else(|| unknown_op(name))?;
    let table = args.get("table").and_then(Value::as_str);
    if table.is_none() && matches!(op.access, Access::RowWrite | Access::SchemaChange) {
        return Err(Error::invalid(format!("{name} needs a `table` (catalog.schema.table)"))
            .rule("arguments")
            .hint(format!("add \"table\": \"catalog.schema.table\"; the input schema of {name} lists the fields")));
    }
    auth::authorize(
        &ctx.caller,
        op.access,
        table.map_or(auth::Target::None, auth::Target::Table),
    )?;
    // A span of its own under the request's (export on): a write's wait for its commit, a
    // search's full-text and semantic reads.
    let span = ctx.observed.context().and_then(|parent| {
        let mut a = vec![opentelemetry::KeyValue::new(
            "datanotes.operation.name",
            op.name,
        )];
        if let Some(t) = table {
            a.push(opentelemetry::KeyValue::new(
                "datanotes.table",
                t.to_string(),
            ));
        }
        crate::telemetry::trace::start_span(
            Some(parent),
            name.to_string(),
            opentelemetry::trace::SpanKind::Internal,
            a,
        )
    });
    // Active on this thread while the operation runs: the writer's commit of its write is
    // traced under it (`trace::current`).
    let active = span
        .as_ref()
        .map(|s| crate::telemetry::trace::enter(s.context()));
    let r = (op.run)(engine, ctx, args);
    drop(active);
    if let Some(span) = span {
        span.end(r.as_ref().err().map(|e| e.code));
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every read operation is either one that reads rows (a grant without read patterns
    /// reads every table through it, `auth::oauth::ROW_READS`) or one that reads none: a new
    /// read operation must be put in one or the other.
    #[test]
    fn the_operations_that_read_rows_are_known() {
        const NO_ROWS: &[&str] = &["list_tables", "get_engine_settings", "search_tools"];
        for op in CATALOG.iter().filter(|o| o.access == Access::Read) {
            let rows = auth::oauth::ROW_READS.contains(&op.name);
            assert!(
                rows != NO_ROWS.contains(&op.name),
                "{}: in ROW_READS or NO_ROWS, not both",
                op.name
            );
        }
        for name in auth::oauth::ROW_READS {
            assert_eq!(find(name).map(|o| o.access), Some(Access::Read), "{name}");
        }
    }
}
