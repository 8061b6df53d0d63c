//! The vault as resources (MCP's `resources/*`), the engine's side: each table's definition and
//! each row's file, as the owner sees them on disk, under one URI scheme:
//!
//! - `datanotes://tables/{table}`: the table's `_table.yaml` (`application/yaml`);
//! - `datanotes://tables/{table}/rows/{id}`: the row's `<id>.md` (`text/markdown`).
//!
//! Listing is paged (definitions and rows in name order, [`PAGE`] entries a page, the cursor
//! says where the next page starts), so a vault of any size never makes one big answer. Files
//! are read with the bounded, no-follow reader every read goes through. The caller's rights are
//! checked by the door's caller through `auth::authorize`; this file only reads.
//!
//! Completion of table names and row ids is here too.

use super::{Engine, Reads, files, index};
use crate::error::{Error, Result};
use crate::names::{self, TableName};
use serde_json::{Value, json};

/// The scheme of the engine's resources; an app's resources never use it.
pub const SCHEME: &str = "datanotes";
/// The most entries of one page of the vault's resources.
pub const PAGE: usize = 100;
/// The most values of one completion.
pub const MAX_COMPLETIONS: usize = 100;

/// The URI template of a row.
pub const ROW_TEMPLATE: &str = "datanotes://tables/{table}/rows/{id}";
/// The URI template of a table's definition.
pub const TABLE_TEMPLATE: &str = "datanotes://tables/{table}";

/// A resource of the vault, by URI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VaultUri {
    /// A table's definition.
    Table(String),
    /// A row's file.
    Row(String, String),
}

impl VaultUri {
    /// Reads a `datanotes://` URI; None: not one of the engine's. An engine URI that names no
    /// valid table or row id is an error saying which part is wrong.
    pub fn parse(uri: &str) -> Option<Result<VaultUri>> {
        let rest = uri.strip_prefix("datanotes://")?;
        let bad = |why: &str| {
            Error::invalid(format!("{why}: {}", super::journal::cut(uri, 200)))
                .column("uri")
                .hint(format!(
                    "the vault's resources are {TABLE_TEMPLATE} and {ROW_TEMPLATE}"
                ))
        };
        let Some(rest) = rest.strip_prefix("tables/") else {
            return Some(Err(bad("not a resource of the vault")));
        };
        let (table, row) = match rest.split_once('/') {
            None => (rest, None),
            Some((t, r)) => match r.strip_prefix("rows/") {
                Some(id) => (t, Some(id)),
                None => return Some(Err(bad("not a resource of the vault"))),
            },
        };
        if let Err(e) = TableName::parse(table) {
            return Some(Err(e.column("uri")));
        }
        Some(Ok(match row {
            None => VaultUri::Table(table.to_string()),
            Some(id) => {
                if let Err(e) = names::check_row_id(table, id) {
                    return Some(Err(e.column("uri")));
                }
                VaultUri::Row(table.to_string(), id.to_string())
            }
        }))
    }

    /// The table it belongs to.
    pub fn table(&self) -> &str {
        match self {
            VaultUri::Table(t) | VaultUri::Row(t, _) => t,
        }
    }

    /// The URI, as listed.
    pub fn to_uri(&self) -> String {
        match self {
            VaultUri::Table(t) => format!("datanotes://tables/{t}"),
            VaultUri::Row(t, id) => format!("datanotes://tables/{t}/rows/{id}"),
        }
    }
}

/// Where a page of the vault's listing starts: at a table's definition, or after a row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VaultCursor {
    /// The first page.
    Start,
    /// At this table's definition.
    Table(String),
    /// After this row of this table.
    After(String, String),
}

impl VaultCursor {
    /// Reads a cursor this file wrote; None: not one of the vault's.
    pub fn parse(s: &str) -> Option<VaultCursor> {
        if let Some(t) = s.strip_prefix("def:") {
            return Some(VaultCursor::Table(t.to_string()));
        }
        let (t, id) = s.strip_prefix("row:")?.split_once(':')?;
        Some(VaultCursor::After(t.to_string(), id.to_string()))
    }

    /// The cursor as the answer carries it.
    pub fn text(&self) -> String {
        match self {
            VaultCursor::Start => String::new(),
            VaultCursor::Table(t) => format!("def:{t}"),
            VaultCursor::After(t, id) => format!("row:{t}:{id}"),
        }
    }
}

/// The vault's resource templates (`resources/templates/list`).
pub fn templates() -> Vec<Value> {
    vec![
        json!({"uriTemplate": ROW_TEMPLATE, "name": "row",
               "title": "A row of a table",
               "description": "A row's Markdown file as the owner sees it: YAML front matter (its values) and its body.",
               "mimeType": "text/markdown"}),
        json!({"uriTemplate": TABLE_TEMPLATE, "name": "table",
               "title": "A table's definition",
               "description": "A table's _table.yaml: its description and typed columns.",
               "mimeType": "application/yaml"}),
    ]
}

impl Engine {
    /// One page of the vault's resources from `from`: up to `limit` entries (at most
    /// [`PAGE`]) of the tables the caller may read, and where the next page starts (None: the
    /// vault is listed).
    pub fn resource_page(
        &self,
        from: &VaultCursor,
        limit: usize,
        reads: Reads,
    ) -> Result<(Vec<Value>, Option<VaultCursor>)> {
        let limit = limit.clamp(1, PAGE);
        let mut names = self.table_names();
        names.retain(|t| reads.may(t));
        let (mut at, mut after) = match from {
            VaultCursor::Start => (0, None),
            VaultCursor::Table(t) => (names.partition_point(|n| n < t), None),
            VaultCursor::After(t, id) => match names.binary_search(t) {
                Ok(i) => (i, Some(id.clone())),
                Err(i) => (i, None),
            },
        };
        let mut out = vec![];
        while at < names.len() {
            let Ok(t) = self.table(&names[at]) else {
                at += 1;
                continue;
            };
            if after.is_none() {
                if out.len() == limit {
                    return Ok((out, Some(VaultCursor::Table(t.name.clone()))));
                }
                out.push(json!({
                    "uri": VaultUri::Table(t.name.clone()).to_uri(),
                    "name": t.name,
                    "description": t.def.description,
                    "mimeType": "application/yaml",
                }));
            }
            let from = after.take().unwrap_or_default();
            let room = (limit - out.len()) as i64;
            let ids = self.with_index(|c| index::ids_after(c, &t.name, &from, room + 1))?;
            for (k, id) in ids.iter().enumerate() {
                if k as i64 == room {
                    let last = ids[k - 1].clone();
                    return Ok((out, Some(VaultCursor::After(t.name.clone(), last))));
                }
                out.push(json!({
                    "uri": VaultUri::Row(t.name.clone(), id.clone()).to_uri(),
                    "name": id,
                    "mimeType": "text/markdown",
                }));
            }
            at += 1;
        }
        Ok((out, None))
    }

    /// The contents of a resource of the vault (`resources/read`): the file as it is on disk.
    pub fn read_resource(&self, uri: &VaultUri) -> Result<Value> {
        let t = self.table(uri.table())?;
        let (path, mime) = match uri {
            VaultUri::Table(_) => (
                files::table_dir(&self.root, &t.name).join(files::TABLE_FILE),
                "application/yaml",
            ),
            VaultUri::Row(_, id) => (files::row_path(&self.root, &t.name, id), "text/markdown"),
        };
        let cap = self.settings().max_body_bytes;
        let read = match uri {
            VaultUri::Table(_) => files::read_table_def(&path),
            VaultUri::Row(..) => files::read_row(&path, cap),
        };
        let Some(read) = read else {
            return Err(match uri {
                VaultUri::Row(table, id) => Error::not_found(format!("no row {id} in {table}"))
                    .table(table.as_str())
                    .hint("resources/list, or select_rows, lists the rows"),
                VaultUri::Table(table) => {
                    Error::not_found(format!("table {table} has no definition file"))
                        .table(table.as_str())
                }
            });
        };
        let bytes = read.bytes.map_err(|why| {
            Error::invalid(format!("the file cannot be read: {}", why.as_str()))
                .table(t.name.as_str())
        })?;
        let text = String::from_utf8(bytes)
            .map_err(|_| Error::invalid("the file is not UTF-8 text").table(t.name.as_str()))?;
        Ok(json!({"contents": [{"uri": uri.to_uri(), "mimeType": mime, "text": text}]}))
    }

    /// The names of the tables the caller may read that start with `prefix` (completion of
    /// `{table}`), and whether there are more than [`MAX_COMPLETIONS`].
    pub fn complete_tables(&self, prefix: &str, reads: Reads) -> (Vec<String>, bool) {
        let names: Vec<String> = self
            .table_names()
            .into_iter()
            .filter(|n| n.starts_with(prefix) && reads.may(n))
            .collect();
        let more = names.len() > MAX_COMPLETIONS;
        (names.into_iter().take(MAX_COMPLETIONS).collect(), more)
    }

    /// The row ids of `table` that start with `prefix` (completion of `{id}`), and whether
    /// there are more than [`MAX_COMPLETIONS`]. An unknown table completes nothing.
    pub fn complete_ids(&self, table: &str, prefix: &str) -> Result<(Vec<String>, bool)> {
        let Ok(t) = self.table(table) else {
            return Ok((vec![], false));
        };
        let n = MAX_COMPLETIONS as i64 + 1;
        let mut ids = self.with_index(|c| index::ids_with_prefix(c, &t.name, prefix, n))?;
        let more = ids.len() > MAX_COMPLETIONS;
        ids.truncate(MAX_COMPLETIONS);
        Ok((ids, more))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_and_cursors_read_back() {
        for u in [
            VaultUri::Table("a.b.c".into()),
            VaultUri::Row("a.b.c".into(), "x-1".into()),
        ] {
            assert_eq!(VaultUri::parse(&u.to_uri()).unwrap().unwrap(), u);
        }
        assert!(VaultUri::parse("file:///a").is_none());
        for bad in [
            "datanotes://x",
            "datanotes://tables/a.b",
            "datanotes://tables/a.b.c/rows/../x",
            "datanotes://tables/a.b.c/rows/X",
            "datanotes://tables/a.b.c/cols/x",
        ] {
            assert!(VaultUri::parse(bad).unwrap().is_err(), "{bad}");
        }
        for c in [
            VaultCursor::Table("a.b.c".into()),
            VaultCursor::After("a.b.c".into(), "x".into()),
        ] {
            assert_eq!(VaultCursor::parse(&c.text()), Some(c));
        }
    }
}
