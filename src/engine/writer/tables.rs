//! Table definitions (create, alter, drop) and the engine settings.

use super::*;
use crate::engine::args;
use crate::engine::files::{self};
use crate::engine::index::{self, FileFacts};
use crate::engine::journal::Actor;
use crate::engine::schema::{Table, TableDef};
use crate::engine::settings::Settings;
use crate::error::{Error, Result};
use crate::names::{self, TableName};
use serde_json::{Map, Value, json};
use std::collections::HashMap;
use std::sync::Arc;

impl Writer {
    pub(super) fn define(&mut self, t: &Table) -> Result<()> {
        let dir = files::table_dir(&self.root, &t.name);
        self.fops.push(FileOp::MakeDir(dir.clone()));
        self.fops.push(FileOp::Write {
            path: dir.join(files::TABLE_FILE),
            bytes: files::render_table_def(&t.def)?,
            row: None,
        });
        Ok(())
    }

    pub(super) fn check_link_targets(&self, t: &Table) -> Result<()> {
        for (cname, c) in &t.def.columns {
            if let Some(target) = &c.table
                && target != &t.name
                && !self.tables.contains_key(target)
            {
                return Err(Error::invalid(format!(
                    "link column {cname} points to {target}, which does not exist"
                ))
                .table(t.name.as_str())
                .column(cname.as_str())
                .rule("table")
                .hint("create the linked table first, or fix the name"));
            }
        }
        Ok(())
    }

    pub(super) fn create_table(&mut self, a: args::CreateTable, actor: &Actor) -> Result<Value> {
        let name = TableName::parse(&a.table)?;
        if self.tables.contains_key(name.as_str()) {
            return Err(Error::conflict(format!("table {name} already exists"))
                .table(name.as_str())
                .hint("use alter_table to change it, or pick another name"));
        }
        let def = TableDef {
            description: a.description.unwrap_or_default(),
            columns: a.columns,
            semantic: a.semantic,
            skills: a.skills.unwrap_or(false),
        };
        let t = Table::compile(name.as_str(), def)?;
        self.check_link_targets(&t)?;
        self.install_table(t, Value::Null, actor, Op::CreateTable)?;
        Ok(json!({"table": name.as_str(), "seq": null}))
    }

    pub(super) fn install_table(
        &mut self,
        t: Table,
        before: Value,
        actor: &Actor,
        op: Op,
    ) -> Result<()> {
        self.define(&t)?;
        index::create_table(&self.idx, &t, &defhash(&t.def)?)?;
        let after = to_json(&t.def)?;
        self.mig(op, Some(&t.name), None, before, after, actor);
        self.tables.insert(t.name.clone(), Arc::new(t));
        self.tables_dirty = true;
        Ok(())
    }

    pub(super) fn drop_table(&mut self, a: args::TableArg, actor: &Actor) -> Result<Value> {
        let t = self.table(&a.table)?;
        for (name, other) in &self.tables {
            if name != &t.name
                && let Some((cname, _)) = other
                    .def
                    .columns
                    .iter()
                    .find(|(_, c)| c.table.as_deref() == Some(t.name.as_str()))
            {
                return Err(Error::conflict(format!(
                    "table {name} links to {} (column {cname})",
                    t.name
                ))
                .table(t.name.as_str())
                .hint(format!("drop column {cname} of {name} first (alter_table)")));
            }
        }
        let rows: Vec<Value> = index::all_rows(&self.idx, &t)?
            .into_iter()
            .map(|r| json!({"id": r.id, "version": r.version, "values": r.values, "body": r.body}))
            .collect();
        let mut before = to_json(&t.def)?;
        before["rows"] = Value::Array(rows);
        index::drop_table(&self.idx, &t.name)?;
        self.fops.push(FileOp::RemoveTableDir(files::table_dir(
            &self.root, &t.name,
        )));
        self.tables.remove(&t.name);
        self.tables_dirty = true;
        self.mig(
            Op::DropTable,
            Some(&t.name),
            None,
            before,
            Value::Null,
            actor,
        );
        Ok(json!({"table": t.name, "seq": null}))
    }

    pub(super) fn alter_table(&mut self, a: args::AlterTable, actor: &Actor) -> Result<Value> {
        let t = self.table(&a.table)?;
        let mut def = t.def.clone();
        let bad = |col: &str, msg: String, hint: &str| {
            Error::invalid(msg)
                .table(t.name.as_str())
                .column(col)
                .rule("alter_table")
                .hint(hint.to_string())
        };
        if let Some(d) = a.description {
            def.description = d;
        }
        if let Some(s) = a.skills {
            def.skills = s;
        }
        // Columns named in the old names (or the new ones) follow the renames and drops.
        def.semantic = a
            .semantic
            .clone()
            .or(def.semantic)
            .map(|s| s.renamed(&a.rename, &a.drop));
        for c in &a.drop {
            if def.columns.shift_remove(c).is_none() {
                return Err(bad(
                    c,
                    format!("no column {c} to drop"),
                    "describe_table lists the columns",
                ));
            }
        }
        for (old, new) in &a.rename {
            names::check_column_name(&t.name, new)?;
            if def.columns.contains_key(new) {
                return Err(bad(
                    new,
                    format!("column {new} already exists"),
                    "pick another new name",
                ));
            }
            let Some(i) = def.columns.get_index_of(old) else {
                return Err(bad(
                    old,
                    format!("no column {old} to rename"),
                    "describe_table lists the columns",
                ));
            };
            let (_, c) = def.columns.shift_remove_index(i).unwrap();
            def.columns.shift_insert(i, new.clone(), c);
        }
        for (c, cd) in &a.change {
            match def.columns.get_mut(c) {
                Some(slot) => *slot = cd.clone(),
                None => {
                    return Err(bad(
                        c,
                        format!("no column {c} to change"),
                        "use `add` for a new column",
                    ));
                }
            }
        }
        for (c, cd) in &a.add {
            if def.columns.contains_key(c) {
                return Err(bad(
                    c,
                    format!("column {c} already exists"),
                    "use `change` to alter it",
                ));
            }
            if cd.required && cd.default.is_none() {
                return Err(Error::constraint(&t.name, c, "required", format!("new column {c} is required but has no default, so existing rows would break"))
                    .hint("give it a default (existing rows receive it) or make it optional"));
            }
            def.columns.insert(c.clone(), cd.clone());
        }
        let nt = Table::compile(&t.name, def)?;
        self.check_link_targets(&nt)?;
        // Every row must fit the new definition; files change only where values do.
        let rows = index::all_rows(&self.idx, &t)?;
        let mut changed = vec![];
        for r in &rows {
            let mut v = r.values.clone();
            for c in &a.drop {
                v.remove(c);
            }
            for (old, new) in &a.rename {
                if let Some(x) = v.remove(old) {
                    v.insert(new.clone(), x);
                }
            }
            for (c, cd) in &a.add {
                if let Some(d) = &cd.default {
                    v.insert(c.clone(), d.clone());
                }
            }
            let v = nt.check_row(&v).map_err(|e| {
                let msg = format!("row {} would break: {}", r.id, e.message);
                e.with_message(msg).hint(
                    "fix or update those rows first, give a default, or loosen the constraint",
                )
            })?;
            if v != r.values || !a.rename.is_empty() {
                changed.push((r, v));
            }
        }
        let before = to_json(&t.def)?;
        index::create_table(&self.idx, &nt, &defhash(&nt.def)?)?;
        let after = to_json(&nt.def)?;
        self.define(&nt)?;
        let nt = Arc::new(nt);
        self.tables.insert(nt.name.clone(), nt.clone());
        self.tables_dirty = true;
        let mut after_meta = after.clone();
        after_meta["rows_changed"] = Value::from(changed.len());
        self.mig(
            Op::AlterTable,
            Some(&nt.name),
            None,
            before,
            after_meta,
            actor,
        );
        // Re-index every row under the new definition (unique checks included).
        let changed_ids: HashMap<&str, Map<String, Value>> = changed
            .into_iter()
            .map(|(r, v)| (r.id.as_str(), v))
            .collect();
        for r in &rows {
            match changed_ids.get(r.id.as_str()) {
                Some(v) => {
                    self.check_refs(&nt, &r.id, v)?;
                    let st = self.put(&nt, &r.id, r.version + 1, v.clone(), r.body.clone())?;
                    self.mig(
                        Op::AlterTable,
                        Some(&nt.name),
                        Some(&r.id),
                        state(r),
                        st,
                        actor,
                    );
                }
                None => {
                    self.check_refs(&nt, &r.id, &r.values)?;
                    let path = files::row_path(&self.root, &nt.name, &r.id);
                    let (mtime, size, hash) = files::read_row(&path, self.max_body())
                        .map(|f| (f.mtime_ns, f.size, f.hash()))
                        .unwrap_or((0, 0, files::hash(b"")));
                    index::put_row(&self.idx, &nt, r, &FileFacts { mtime, size, hash })?;
                }
            }
        }
        Ok(json!({"table": nt.name, "seq": null}))
    }

    // ---- settings ----

    pub(super) fn set_settings(&mut self, a: args::SetSettings, actor: &Actor) -> Result<Value> {
        let new = self.settings.merged(&a.settings)?;
        self.put_settings(new, actor, Op::Settings)
    }

    pub(super) fn put_settings(&mut self, new: Settings, actor: &Actor, op: Op) -> Result<Value> {
        let before = to_json(&self.settings)?;
        let after = to_json(&new)?;
        let bytes = serde_json::to_vec_pretty(&new)
            .map_err(|e| Error::internal(format!("cannot write the settings: {e}")))?;
        self.fops.push(FileOp::Write {
            path: self.root.join(".datanotes/settings.json"),
            bytes,
            row: None,
        });
        self.settings = new;
        self.settings_dirty = true;
        self.mig(op, None, None, before, after, actor);
        Ok(json!({"settings": self.settings, "seq": null}))
    }
}
