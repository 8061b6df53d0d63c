//! Undo and restore, from the journal.

use super::*;
use crate::engine::args;
use crate::engine::index::{self, IndexedRow};
use crate::engine::journal::{self, Actor, Op, RowState};
use crate::engine::schema::{Table, TableDef};
use crate::engine::settings::Settings;
use crate::error::{Error, Result};
use crate::names::{self};
use serde_json::{Value, json};
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

impl Writer {
    pub(super) fn vacuumed_before(&self) -> Result<i64> {
        journal::meta_i64(&self.jr, "vacuumed_before")
    }

    pub(super) fn undo(&mut self, seq: i64, actor: &Actor) -> Result<Value> {
        let m = journal::get(&self.jr, seq)?.ok_or_else(|| {
            Error::not_found(format!("no migration {seq}"))
                .hint("list_migrations shows the migrations and their seq")
        })?;
        let conflict = |what: String| {
            Error::conflict(format!("cannot undo migration {seq}: {what}"))
                .rule("undo")
                .hint("undo the later migrations first (list_migrations), or use restore to go back to a point in time")
        };
        let table = m.table.clone().unwrap_or_default();
        match (m.op, &m.row) {
            (op, _) if op.is_event() => Err(Error::invalid(format!(
                "a {op} event changed nothing and cannot be undone"
            ))
            .rule("undo")),
            (Op::Settings, _) => {
                if to_json(&self.settings)? != m.after {
                    return Err(conflict("the settings changed since".into()));
                }
                let prev: Settings = serde_json::from_value(m.before.clone()).unwrap_or_default();
                self.put_settings(prev, actor, Op::Undo)
            }
            (_, Some(id)) => {
                let t = self.table(&table)?;
                let cur = self.get(&t, id)?;
                if !row_state(cur.as_ref()).same_content(&RowState::of(&m.after)) {
                    return Err(conflict(format!("row {id} changed since")));
                }
                let v =
                    self.set_row_state(&t, id, cur, &RowState::of(&m.before), actor, Op::Undo)?;
                Ok(json!({"undone": seq, "row": v.to_value(), "seq": null}))
            }
            // A table that appeared by hand is undone like one created.
            (Op::CreateTable | Op::HandEdit, None) if m.before.is_null() => {
                let t = self.table(&table)?;
                if index::count(&self.idx, &t.name)? > 0 {
                    return Err(conflict(format!("table {table} has rows now"))
                        .hint("delete its rows first, or drop_table it"));
                }
                self.drop_table(
                    args::TableArg {
                        table: table.clone(),
                    },
                    actor,
                )?;
                if let Some(last) = self.migs.last_mut() {
                    last.op = Op::Undo;
                }
                Ok(json!({"undone": seq, "seq": null}))
            }
            (Op::DropTable, None) => {
                if self.tables.contains_key(&table) {
                    return Err(conflict(format!("table {table} exists again")));
                }
                let def: TableDef = serde_json::from_value(
                    json!({"description": m.before["description"], "columns": m.before["columns"]}),
                )
                .map_err(|e| Error::internal(format!("journal entry {seq} is unreadable: {e}")))?;
                let t = Table::compile(&table, def)?;
                self.install_table(t, Value::Null, actor, Op::Undo)?;
                let t = self.table(&table)?;
                for r in m.before["rows"].as_array().cloned().unwrap_or_default() {
                    let id = r["id"].as_str().unwrap_or_default().to_string();
                    self.set_row_state(&t, &id, None, &RowState::of(&r), actor, Op::Undo)?;
                }
                Ok(json!({"undone": seq, "seq": null}))
            }
            (Op::AlterTable | Op::HandEdit, None) => {
                let t = self.table(&table)?;
                let mut cur_def = to_json(&t.def)?;
                let mut want = m.after.clone();
                if let Some(o) = want.as_object_mut() {
                    o.remove("rows_changed");
                }
                if let Some(o) = cur_def.as_object_mut() {
                    o.remove("rows_changed");
                }
                if cur_def != want {
                    return Err(conflict(format!("table {table} was altered since")));
                }
                let n = m.after["rows_changed"].as_i64().unwrap_or(0);
                let row_migs = journal::list(
                    &self.jr,
                    &journal::Filter {
                        table: Some(table.clone()),
                        after: Some(seq),
                        before: Some(seq + n + 1),
                        limit: n,
                        ..Default::default()
                    },
                )?;
                let def: TableDef = serde_json::from_value(m.before.clone()).map_err(|e| {
                    Error::internal(format!("journal entry {seq} is unreadable: {e}"))
                })?;
                let old = Table::compile(&table, def)?;
                // Rows first leave the new shape, then the old definition comes back.
                let rows = index::all_rows(&self.idx, &t)?;
                let back: HashMap<String, RowState> = row_migs
                    .iter()
                    .filter(|r| r.op == Op::AlterTable)
                    .filter_map(|r| Some((r.row.clone()?, RowState::of(&r.before))))
                    .collect();
                let before_def = to_json(&t.def)?;
                index::create_table(&self.idx, &old, &defhash(&old.def)?)?;
                self.define(&old)?;
                let old = Arc::new(old);
                self.tables.insert(table.clone(), old.clone());
                self.tables_dirty = true;
                self.mig(
                    Op::Undo,
                    Some(&table),
                    None,
                    before_def,
                    to_json(&old.def)?,
                    actor,
                );
                for r in rows {
                    match back.get(&r.id) {
                        Some(prev) => {
                            let (values, body) = match prev {
                                RowState::Row { values, body, .. } => {
                                    (values.clone(), body.clone())
                                }
                                _ => Default::default(),
                            };
                            let st = self.set_row(&old, &r.id, &values, body, r.version + 1)?;
                            self.mig(Op::Undo, Some(&table), Some(&r.id), state(&r), st, actor);
                        }
                        None => {
                            self.set_row(&old, &r.id, &r.values, r.body.clone(), r.version)?;
                        }
                    }
                }
                Ok(json!({"undone": seq, "seq": null}))
            }
            (op, _) => {
                Err(Error::invalid(format!("migration {seq} ({op}) cannot be undone")).rule("undo"))
            }
        }
    }

    /// Brings a row to a journal state, journaling it under `op`: a row is written; for no row
    /// or an invalid file, the row (or its file) is removed.
    pub(super) fn set_row_state(
        &mut self,
        t: &Table,
        id: &str,
        cur: Option<IndexedRow>,
        target: &RowState,
        actor: &Actor,
        op: Op,
    ) -> Result<RowState> {
        let before = row_state(cur.as_ref());
        let version = cur
            .as_ref()
            .map(|c| c.version)
            .unwrap_or(0)
            .max(target.version())
            + 1;
        let after = match target {
            RowState::Row { values, body, .. } => {
                self.set_row(t, id, values, body.clone(), version)?
            }
            RowState::Absent | RowState::Invalid(_) => {
                if cur.is_some() || index::known_file(&self.idx, &t.name, id)?.is_some() {
                    self.delete_checked(t, id)?;
                }
                RowState::Absent
            }
        };
        self.mig(op, Some(&t.name), Some(id), before, after.clone(), actor);
        Ok(after)
    }

    pub(super) fn restore(&mut self, a: args::Restore, actor: &Actor) -> Result<Value> {
        let t = self.table(&a.table)?;
        let vac = self.vacuumed_before()?;
        if a.seq < vac {
            return Err(
                Error::invalid(format!("history before migration {vac} was vacuumed"))
                    .table(t.name.as_str())
                    .rule("seq")
                    .hint(format!("restore to a seq of {vac} or later")),
            );
        }
        if a.seq > journal::last_seq(&self.jr)? {
            return Err(
                Error::invalid(format!("there is no migration {} yet", a.seq))
                    .rule("seq")
                    .hint("list_migrations shows the seqs"),
            );
        }
        let ids: Vec<String> = match &a.id {
            Some(id) => {
                names::check_row_id(&t.name, id)?;
                vec![id.clone()]
            }
            None => {
                let mut ids: BTreeSet<String> = index::all_rows(&self.idx, &t)?
                    .into_iter()
                    .map(|r| r.id)
                    .collect();
                // Every row the journal knows, also those whose history before seq was vacuumed.
                let mut st = self.jr.prepare(
                    "SELECT DISTINCT row FROM migrations WHERE tbl=?1 AND row IS NOT NULL",
                )?;
                for r in st.query_map([&t.name], |r| r.get::<_, String>(0))? {
                    ids.insert(r?);
                }
                ids.into_iter().collect()
            }
        };
        let mut restored = vec![];
        for id in ids {
            let target = journal::row_state_at(&self.jr, &t.name, &id, a.seq)?;
            let target = RowState::of(&match target {
                Some(m) => m.after,
                // No migration of the row at or before seq (never, or vacuumed): its state then
                // is the before state of its next migration (null for its insert); with none,
                // it has not changed since.
                None => match journal::row_first_after(&self.jr, &t.name, &id, a.seq)? {
                    Some(m) => m.before,
                    None => continue,
                },
            });
            let cur = self.get(&t, &id)?;
            if row_state(cur.as_ref()).same_content(&target) {
                continue;
            }
            self.set_row_state(&t, &id, cur, &target, actor, Op::Restore)?;
            restored.push(id);
        }
        Ok(json!({"restored": restored, "seq": null}))
    }
}

/// The journal state of a row the index holds, or of none.
fn row_state(cur: Option<&IndexedRow>) -> RowState {
    cur.map(state).unwrap_or(RowState::Absent)
}
