//! Row writes: insert, update, delete, and the checks they share.

use super::*;
use crate::engine::args;
use crate::engine::files::{self};
use crate::engine::index::{self, FileFacts, IndexedRow};
use crate::engine::journal::Actor;
use crate::engine::no_row;
use crate::engine::schema::{ColumnType, Table};
use crate::error::{Error, Result};
use crate::names::{self};
use serde_json::{Map, Value, json};

impl Writer {
    pub(super) fn get(&self, t: &Table, id: &str) -> Result<Option<IndexedRow>> {
        index::get_row(&self.idx, t, id)
    }

    pub(super) fn check_body(&self, t: &Table, body: &str) -> Result<()> {
        if body.len() as i64 > self.settings.max_body_bytes {
            return Err(Error::constraint(&t.name, "body", "max", format!("the body has {} bytes, more than the limit {}", body.len(), self.settings.max_body_bytes))
                .hint("shorten the body, split the note, or raise max_body_bytes with set_engine_settings"));
        }
        Ok(())
    }

    /// Uniqueness and links, checked against the index (which includes this batch).
    pub(super) fn check_refs(
        &self,
        t: &Table,
        id: &str,
        values: &Map<String, Value>,
    ) -> Result<()> {
        for (cname, c) in &t.def.columns {
            let Some(v) = values.get(cname) else { continue };
            if c.unique
                && let Some(other) = index::unique_holder(&self.idx, t, cname, v, id)?
            {
                return Err(Error::constraint(
                    &t.name,
                    cname,
                    "unique",
                    format!("{v} is already the {cname} of row {other}"),
                )
                .hint(format!(
                    "{cname} must be unique in {}: pick another value or update row {other}",
                    t.name
                )));
            }
            if c.ty == ColumnType::Link {
                let target = c.table.as_deref().unwrap_or_default();
                let tid = v.as_str().unwrap_or_default();
                let exists = if target == t.name && tid == id {
                    true
                } else {
                    self.tables.contains_key(target) && index::row_exists(&self.idx, target, tid)?
                };
                if !exists {
                    return Err(Error::constraint(&t.name, cname, "link", format!("{cname} links to {tid:?}, which is not a row of {target}"))
                        .hint(format!("give the id of an existing row of {target} (select_rows finds them), or insert that row first")));
                }
            }
        }
        Ok(())
    }

    /// Writes a validated row: file op, index. Returns its journal state.
    pub(super) fn put(
        &mut self,
        t: &Table,
        id: &str,
        version: i64,
        values: Map<String, Value>,
        body: String,
    ) -> Result<RowState> {
        let bytes = files::render_row(t, &values, &body);
        let facts = FileFacts {
            mtime: 0,
            size: bytes.len() as i64,
            hash: files::hash(&bytes),
        };
        let row = IndexedRow {
            id: id.into(),
            version,
            values,
            body,
        };
        let path = files::row_path(&self.root, &t.name, id);
        check_row_target(&path, &t.name, id)?;
        index::put_row(&self.idx, t, &row, &facts)?;
        self.fops.push(FileOp::Write {
            path,
            bytes,
            row: Some((t.name.clone(), id.into())),
        });
        Ok(state(&row))
    }

    pub(super) fn remove(&mut self, t: &Table, id: &str) -> Result<()> {
        let path = files::row_path(&self.root, &t.name, id);
        check_row_target(&path, &t.name, id)?;
        index::delete_row(&self.idx, &t.name, id)?;
        self.fops.push(FileOp::Remove { path });
        Ok(())
    }

    /// Validates then writes a complete row state (used by insert, update, undo, restore).
    pub(super) fn set_row(
        &mut self,
        t: &Table,
        id: &str,
        values: &Map<String, Value>,
        body: String,
        version: i64,
    ) -> Result<RowState> {
        let values = t.check_row(values)?;
        self.check_body(t, &body)?;
        self.check_refs(t, id, &values)?;
        self.put(t, id, version, values, body)
    }

    pub(super) fn insert(&mut self, a: args::InsertRow, actor: &Actor) -> Result<Value> {
        let t = self.table(&a.table)?;
        let id = match a.id {
            Some(id) => {
                names::check_row_id(&t.name, &id)?;
                if index::row_exists(&self.idx, &t.name, &id)?
                    || index::known_file(&self.idx, &t.name, &id)?.is_some()
                {
                    return Err(
                        Error::conflict(format!("row {id} already exists in {}", t.name))
                            .table(t.name.as_str())
                            .column("id")
                            .rule("unique")
                            .hint("use update_row to change it, or give another id"),
                    );
                }
                id
            }
            None => self.new_id(&t, &a.values)?,
        };
        let mut values = a.values;
        t.apply_defaults(&mut values);
        let after = self.set_row(&t, &id, &values, a.body.unwrap_or_default(), 1)?;
        self.mig(
            Op::Insert,
            Some(&t.name),
            Some(&id),
            Value::Null,
            after,
            actor,
        );
        Ok(json!({"id": id, "version": 1, "seq": null}))
    }

    pub(super) fn new_id(&self, t: &Table, values: &Map<String, Value>) -> Result<String> {
        let text = t
            .def
            .columns
            .iter()
            .filter(|(_, c)| c.ty == ColumnType::Text)
            .find_map(|(n, _)| values.get(n).and_then(Value::as_str))
            .unwrap_or("");
        let mut slug = String::new();
        for ch in text.chars().flat_map(char::to_lowercase) {
            if ch.is_ascii_alphanumeric() {
                slug.push(ch);
            } else if !slug.is_empty() && !slug.ends_with('-') {
                slug.push('-');
            }
            if slug.len() >= 40 {
                break;
            }
        }
        let slug = slug.trim_end_matches('-').to_string();
        // A file no scan has seen yet (written by hand a moment ago) takes its id too.
        let taken = |id: &str| -> Result<bool> {
            Ok(index::row_exists(&self.idx, &t.name, id)?
                || index::known_file(&self.idx, &t.name, id)?.is_some()
                || files::row_path(&self.root, &t.name, id)
                    .symlink_metadata()
                    .is_ok())
        };
        if !slug.is_empty() {
            if !taken(&slug)? {
                return Ok(slug);
            }
            for n in 2..20 {
                let id = format!("{slug}-{n}");
                if !taken(&id)? {
                    return Ok(id);
                }
            }
        }
        loop {
            let r: String = (0..10)
                .map(|_| b"abcdefghijklmnopqrstuvwxyz0123456789"[rand::random_range(0..36)] as char)
                .collect();
            let id = if slug.is_empty() {
                r
            } else {
                format!("{slug}-{r}")
            };
            if !taken(&id)? {
                return Ok(id);
            }
        }
    }

    pub(super) fn update(&mut self, a: args::UpdateRow, actor: &Actor) -> Result<Value> {
        let t = self.table(&a.table)?;
        names::check_row_id(&t.name, &a.id)?;
        let cur = self.get(&t, &a.id)?.ok_or_else(|| no_row(&t.name, &a.id))?;
        if let Some(v) = a.expect_version
            && v != cur.version
            && self.hand_edited_in_batch(&t.name, &a.id)
        {
            return Err(Error::conflict(format!("row {} was edited by hand (its file changed) and is now at version {}, not {v}", a.id, cur.version))
                .table(t.name.as_str())
                .rule("expect_version")
                .hint("the hand edit is journaled: get_row to see it, reapply your change on top, and send the new version"));
        }
        if let Some(v) = a.expect_version
            && v != cur.version
        {
            return Err(Error::conflict(format!("row {} is at version {}, not {v}", a.id, cur.version))
                .table(t.name.as_str())
                .rule("expect_version")
                .hint("someone changed it since you read it: get_row again, reapply your change, and send the new version"));
        }
        let mut values = cur.values.clone();
        for (k, v) in a.values {
            if v.is_null() {
                values.remove(&k);
            } else {
                values.insert(k, v);
            }
        }
        let body = a.body.unwrap_or_else(|| cur.body.clone());
        let version = cur.version + 1;
        let after = self.set_row(&t, &a.id, &values, body, version)?;
        self.mig(
            Op::Update,
            Some(&t.name),
            Some(&a.id),
            state(&cur),
            after,
            actor,
        );
        Ok(json!({"id": a.id, "version": version, "seq": null}))
    }

    /// A row of another table that links to this one (deleting it would break the link).
    pub(super) fn linked_from(
        &self,
        table: &str,
        id: &str,
    ) -> Result<Option<(String, String, String)>> {
        for (name, other) in &self.tables {
            for (cname, c) in &other.def.columns {
                if c.ty == ColumnType::Link
                    && c.table.as_deref() == Some(table)
                    && let Some(from) = index::linking_row(&self.idx, name, cname, id)?
                    && !(name == table && from == id)
                {
                    return Ok(Some((name.clone(), cname.clone(), from)));
                }
            }
        }
        Ok(None)
    }

    pub(super) fn delete_checked(&mut self, t: &Table, id: &str) -> Result<()> {
        if let Some((tbl, col, from)) = self.linked_from(&t.name, id)? {
            return Err(Error::constraint(
                &t.name,
                "id",
                "link",
                format!("row {id} is linked from {tbl} row {from} (column {col})"),
            )
            .hint(format!("update or delete {tbl} row {from} first")));
        }
        self.remove(t, id)
    }

    pub(super) fn delete(&mut self, a: args::RowRef, actor: &Actor) -> Result<Value> {
        let t = self.table(&a.table)?;
        names::check_row_id(&t.name, &a.id)?;
        let Some(cur) = self.get(&t, &a.id)? else {
            if index::known_file(&self.idx, &t.name, &a.id)?.is_some() {
                // An invalid (hand-edited) file: deleting it is how the owner may get rid of it.
                self.remove(&t, &a.id)?;
                self.mig(
                    Op::Delete,
                    Some(&t.name),
                    Some(&a.id),
                    Value::Null,
                    Value::Null,
                    actor,
                );
                return Ok(json!({"seq": null}));
            }
            return Err(no_row(&t.name, &a.id));
        };
        self.delete_checked(&t, &a.id)?;
        self.mig(
            Op::Delete,
            Some(&t.name),
            Some(&a.id),
            state(&cur),
            Value::Null,
            actor,
        );
        Ok(json!({"seq": null}))
    }
}

/// A row file is written only over a regular file or nothing: a folder, link or special file
/// named like the row (put there by hand) refuses the write, which would fail or write
/// elsewhere.
fn check_row_target(path: &std::path::Path, table: &str, id: &str) -> Result<()> {
    let Some(what) = files::not_a_file(path) else {
        return Ok(());
    };
    Err(Error::conflict(format!(
        "{id}.md in the folder of {table} is {what}, not a row file, so row {id} cannot be written or removed"
    ))
    .table(table)
    .column("id")
    .rule("file")
    .hint(format!(
        "remove or rename {id}.md in the table's folder, or use another id"
    )))
}
