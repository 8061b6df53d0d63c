//! The demo database: a few tables and rows to try the engine with.

use crate::engine::Engine;
use crate::ops::Ctx;
use serde_json::{Value, json};

fn run(engine: &Engine, ctx: &Ctx, op: &str, a: Value) -> anyhow::Result<()> {
    crate::ops::call(engine, ctx, op, a).map_err(|e| anyhow::anyhow!("{op}: {e}"))?;
    Ok(())
}

/// Seeds an empty database. Does nothing when it already has tables.
pub fn seed(engine: &Engine) -> anyhow::Result<()> {
    if !engine.table_names().is_empty() {
        return Ok(());
    }
    let ctx = Ctx::owner("demo seed");
    let tables = [
        json!({
            "table": "personal.people.list",
            "description": "People I work with",
            "columns": {
                "name": {"type": "text", "required": true},
                "email": {"type": "text", "unique": true, "pattern": "^[^@\\s]+@[^@\\s]+$"},
                "role": {"type": "enum", "values": ["friend", "colleague", "family"]}
            }
        }),
        json!({
            "table": "personal.tasks.items",
            "description": "Things to do",
            "columns": {
                "title": {"type": "text", "required": true},
                "status": {"type": "enum", "values": ["todo", "doing", "done"], "default": "todo"},
                "estimate": {"type": "integer", "min": 0, "max": 100},
                "due": {"type": "date"},
                "tags": {"type": "list"},
                "owner": {"type": "link", "table": "personal.people.list"}
            }
        }),
        json!({
            "table": "personal.notes.daily",
            "description": "A journal, one note a day",
            "columns": {
                "date": {"type": "date", "required": true, "unique": true},
                "mood": {"type": "integer", "min": 1, "max": 5}
            }
        }),
    ];
    for t in tables {
        run(engine, &ctx, "create_table", t)?;
    }
    for (id, name, email, role) in [
        ("ada", "Ada Lovelace", "ada@example.org", "colleague"),
        ("alan", "Alan Turing", "alan@example.org", "friend"),
    ] {
        run(
            engine,
            &ctx,
            "insert_row",
            json!({"table": "personal.people.list", "id": id, "values": {"name": name, "email": email, "role": role}}),
        )?;
    }
    for (title, status, est, due, tags, owner, body) in [
        (
            "Write the engine",
            "doing",
            8,
            "2026-12-01",
            vec!["datanotes"],
            "ada",
            "Files first, index second.",
        ),
        (
            "Review the journal design",
            "todo",
            2,
            "2026-12-03",
            vec!["datanotes", "review"],
            "alan",
            "Check undo of alter_table.",
        ),
        (
            "Buy oat milk",
            "todo",
            1,
            "2026-11-30",
            vec!["home"],
            "ada",
            "",
        ),
        (
            "Plan the holidays",
            "done",
            3,
            "2026-11-20",
            vec!["home", "family"],
            "alan",
            "Trains booked.",
        ),
    ] {
        run(
            engine,
            &ctx,
            "insert_row",
            json!({
                "table": "personal.tasks.items",
                "values": {"title": title, "status": status, "estimate": est, "due": due, "tags": tags, "owner": owner},
                "body": body
            }),
        )?;
    }
    for (date, mood, body) in [
        (
            "2026-11-28",
            4,
            "# Friday\n\nShipped the first version of the journal.",
        ),
        (
            "2026-11-29",
            3,
            "# Saturday\n\nLong walk, then read about SQLite FTS5 ranking.",
        ),
    ] {
        run(
            engine,
            &ctx,
            "insert_row",
            json!({"table": "personal.notes.daily", "id": date, "values": {"date": date, "mood": mood}, "body": body}),
        )?;
    }
    Ok(())
}
