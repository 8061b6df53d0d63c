//! Following the journal: the rows and tables its migrations name after `through` (every table
//! when a vacuum removed what followed it), embedded and written to the store with the new
//! `through` in one transaction, then put in the live matrix.

use super::*;

/// Puts a row's stored vectors into a matrix.
pub(super) fn put(m: &mut Matrix, s: &Stored) {
    m.put(
        &s.table,
        &s.id,
        s.version,
        short_hash(&s.hash),
        &s.codes,
        &s.scales,
    );
}

/// Embeds the chunks of `items` in one call and quantises them.
pub(super) fn embed(model: &Model, items: Vec<Item>) -> Result<Vec<Stored>, String> {
    let texts: Vec<String> = items
        .iter()
        .flat_map(|i| i.chunks.iter().map(|c| c.text.clone()))
        .collect();
    let flat = if texts.is_empty() {
        vec![]
    } else {
        model
            .embed(&texts)
            .ok_or("the model failed on a row's text")?
    };
    let mut vectors = flat.chunks_exact(model.dim);
    let mut out = Vec::with_capacity(items.len());
    for i in items {
        let mut codes = Vec::with_capacity(i.chunks.len() * model.dim);
        let mut scales = Vec::with_capacity(i.chunks.len());
        for _ in &i.chunks {
            let v = vectors
                .next()
                .ok_or("the model answered fewer vectors than texts")?;
            let (q, s) = quantize(v);
            codes.extend(q);
            scales.push(s);
        }
        out.push(Stored {
            table: i.table,
            id: i.id,
            version: i.version,
            hash: i.hash,
            scales,
            codes,
        });
    }
    Ok(out)
}

impl Worker {
    /// Follows the journal from `through` to its end.
    pub(super) fn catch_up(&mut self, engine: &Engine) -> Result<(), String> {
        if self.sem.live.read().unwrap().is_none() {
            return Ok(());
        }
        loop {
            let through = self.sem.through();
            let last = engine.last_seq();
            if through >= last {
                self.sem.set_through(through, last);
                return Ok(());
            }
            let (touched, first) = engine
                .with_journal(|c| {
                    Ok((
                        journal::touched_after(c, through, ROUND)?,
                        journal::first_seq(c)?,
                    ))
                })
                .map_err(|e| e.message.clone())?;
            let mut dirty = BTreeSet::new();
            let upto = if first.is_none_or(|f| f > through + 1)
                && touched.first().is_none_or(|t| t.0 > through + 1)
            {
                // The journal no longer has what followed `through` (vacuum): every table.
                engine.table_names().into_iter().for_each(|t| {
                    dirty.insert(Dirty::Table(t));
                });
                self.configs.keys().for_each(|t| {
                    dirty.insert(Dirty::Table(t.clone()));
                });
                last
            } else if touched.len() as i64 >= ROUND {
                touched.last().map_or(last, |t| t.0)
            } else {
                last
            };
            for (_, op, table, row) in touched {
                match (op, table, row) {
                    (Op::ToolCall | Op::SemanticIndex | Op::Settings | Op::App, _, _) => {}
                    (_, Some(t), Some(r)) => {
                        dirty.insert(Dirty::Row(t, r));
                    }
                    (_, Some(t), None) => {
                        dirty.insert(Dirty::Table(t));
                    }
                    _ => {}
                }
            }
            self.apply(engine, dirty.into_iter().collect(), Some(upto))?;
        }
    }

    /// Brings the given rows and tables up to date, then records `through` (if given).
    pub(super) fn apply(
        &mut self,
        engine: &Engine,
        dirty: Vec<Dirty>,
        through: Option<i64>,
    ) -> Result<(), String> {
        let model = match self.sem.live.read().unwrap().as_ref() {
            Some(l) => l.model.clone(),
            None => return Ok(()),
        };
        // Tables first: they become rows (or a table's removal).
        let mut rows: Vec<(String, String)> = vec![];
        let mut table_changes: Vec<(String, Option<String>)> = vec![];
        for d in dirty {
            match d {
                Dirty::Row(t, r) => rows.push((t, r)),
                Dirty::Table(t) => {
                    let cfg = engine
                        .table(&t)
                        .ok()
                        .and_then(|t| config_of(&t))
                        .map(|c| c.1);
                    let forced = cfg.is_some() && self.configs.get(&t) != cfg.as_ref();
                    let held = {
                        let live = self.sem.live.read().unwrap();
                        live.as_ref()
                            .map(|l| l.matrix.rows_of(&t))
                            .unwrap_or_default()
                    };
                    let files = if cfg.is_some() {
                        engine
                            .with_index(|c| index::known_files(c, &t))
                            .map_err(|e| e.message.clone())?
                    } else {
                        HashMap::new()
                    };
                    for (id, f) in &files {
                        let same = held
                            .get(id.as_str())
                            .is_some_and(|h| h.1 == short_hash(&f.hash) && f.error.is_none());
                        if forced || !same {
                            rows.push((t.clone(), id.clone()));
                        }
                    }
                    for id in held.keys() {
                        if !files.contains_key(&**id) {
                            rows.push((t.clone(), id.to_string()));
                        }
                    }
                    if self.configs.get(&t) != cfg.as_ref() {
                        table_changes.push((t, cfg));
                    }
                }
            }
        }
        rows.sort();
        rows.dedup();
        let tables_now: HashMap<String, Option<String>> = table_changes.iter().cloned().collect();
        let config_for = |w: &Worker, t: &str| -> Option<String> {
            tables_now
                .get(t)
                .cloned()
                .unwrap_or_else(|| w.configs.get(t).cloned())
        };
        for batch in rows.chunks(BATCH) {
            // Read each row at its current version, with its file's hash, in one snapshot.
            let mut items = vec![];
            let mut gone = vec![];
            engine
                .with_index(|c| {
                    let tx = c.unchecked_transaction()?;
                    for (t, id) in batch {
                        let table = engine.table(t).ok();
                        let cols = table.as_deref().and_then(chunk::columns);
                        let (Some(table), Some(cols)) = (table, cols) else {
                            gone.push((t.clone(), id.clone()));
                            continue;
                        };
                        let file = index::known_file(&tx, t, id)?;
                        let row = match &file {
                            Some(f) if f.error.is_none() => index::get_row(&tx, &table, id)?,
                            _ => None,
                        };
                        match (file, row) {
                            (Some(f), Some(r)) => items.push(Item {
                                table: t.clone(),
                                id: id.clone(),
                                version: r.version,
                                hash: f.hash,
                                chunks: chunk::chunks(&chunk::head(&cols, &r.values), &r.body),
                            }),
                            _ => gone.push((t.clone(), id.clone())),
                        }
                    }
                    tx.finish()?;
                    Ok(())
                })
                .map_err(|e| e.message.clone())?;
            // Unchanged rows (same file, same columns) keep their vectors.
            {
                let live = self.sem.live.read().unwrap();
                if let Some(l) = live.as_ref() {
                    items.retain(|i| {
                        let same_cfg =
                            self.configs.get(&i.table) == config_for(self, &i.table).as_ref();
                        !(same_cfg
                            && l.matrix.get(&i.table, &i.id).is_some_and(|e| {
                                e.hash == short_hash(&i.hash) && e.version == i.version
                            }))
                    });
                }
            }
            let stored = embed(&model, items)?;
            let conn = self.store(engine)?;
            let tx = conn.transaction().map_err(|e| e.to_string())?;
            for s in &stored {
                store::put(&tx, "rows", s).map_err(|e| e.message.clone())?;
            }
            for (t, id) in &gone {
                store::remove(&tx, t, id).map_err(|e| e.message.clone())?;
            }
            tx.commit().map_err(|e| e.to_string())?;
            let mut live = self.sem.live.write().unwrap();
            let Some(l) = live.as_mut() else {
                return Ok(());
            };
            if !Arc::ptr_eq(&l.model, &model) {
                return Ok(());
            }
            for s in &stored {
                put(&mut l.matrix, s);
            }
            for (t, id) in &gone {
                l.matrix.remove(t, id);
            }
        }
        let conn = self.store(engine)?;
        let tx = conn.transaction().map_err(|e| e.to_string())?;
        for (t, cfg) in &table_changes {
            match cfg {
                Some(cfg) => store::set_table_config(&tx, t, Some(cfg)),
                None => store::remove_table(&tx, t),
            }
            .map_err(|e| e.message.clone())?;
        }
        if let Some(seq) = through {
            store::set_meta(&tx, "through", &seq.to_string()).map_err(|e| e.message.clone())?;
        }
        tx.commit().map_err(|e| e.to_string())?;
        for (t, cfg) in table_changes {
            match cfg {
                Some(cfg) => {
                    self.configs.insert(t, cfg);
                }
                None => {
                    self.configs.remove(&t);
                }
            }
        }
        if let Some(seq) = through {
            self.sem.set_through(seq, engine.last_seq());
        }
        Ok(())
    }
}
