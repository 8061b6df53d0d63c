//! Names and ids: the only strings that ever become paths.
//!
//! Every table name, column name and row id is checked here before it touches the file system,
//! so nothing a caller sends can reach outside the database folder.

use crate::error::{Error, Result};

/// `[a-z][a-z0-9_]*`, at most 64 characters.
pub fn is_name(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 64
        && b[0].is_ascii_lowercase()
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'_')
}

/// `[a-z0-9][a-z0-9_-]*`, at most 128 characters.
pub fn is_row_id(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 128
        && (b[0].is_ascii_lowercase() || b[0].is_ascii_digit())
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'_' || *c == b'-')
}

/// A validated `catalog.schema.table` name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TableName {
    pub full: String,
}

impl TableName {
    pub fn parse(s: &str) -> Result<TableName> {
        let parts: Vec<&str> = s.split('.').collect();
        if parts.len() != 3 || !parts.iter().all(|p| is_name(p)) {
            return Err(Error::invalid(format!("invalid table name {s:?}"))
                .table(s)
                .rule("table_name")
                .hint("a table is named catalog.schema.table, each part matching [a-z][a-z0-9_]* (e.g. personal.tasks.items)"));
        }
        Ok(TableName {
            full: s.to_string(),
        })
    }
    /// The full name, `catalog.schema.table`.
    pub fn as_str(&self) -> &str {
        &self.full
    }
}

impl std::fmt::Display for TableName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.full)
    }
}

pub fn check_row_id(table: &str, id: &str) -> Result<()> {
    if is_row_id(id) {
        Ok(())
    } else {
        Err(Error::invalid(format!("invalid row id {id:?}"))
            .table(table)
            .column("id")
            .rule("row_id")
            .hint("a row id matches [a-z0-9][a-z0-9_-]* (at most 128 characters); omit it to have one generated"))
    }
}

pub fn check_column_name(table: &str, name: &str) -> Result<()> {
    if !is_name(name) {
        return Err(Error::invalid(format!("invalid column name {name:?}"))
            .table(table)
            .column(name)
            .rule("column_name")
            .hint("a column name matches [a-z][a-z0-9_]*"));
    }
    if name == "id" || name == "body" {
        return Err(Error::invalid(format!("column name {name:?} is reserved"))
            .table(table)
            .column(name)
            .rule("column_name")
            .hint("`id` is the row's file name and `body` its Markdown body; pick another name"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn names() {
        assert!(is_name("tasks_2"));
        assert!(!is_name("Tasks"));
        assert!(!is_name("2tasks"));
        assert!(!is_name(".."));
        assert!(!is_name(""));
        assert!(is_row_id("2026-01-01_note"));
        assert!(!is_row_id("../x"));
        assert!(!is_row_id("-x"));
        assert!(TableName::parse("a.b.c").is_ok());
        assert!(TableName::parse("a.b").is_err());
        assert!(TableName::parse("a.b.c.d").is_err());
        assert!(TableName::parse("a/../b.c.d").is_err());
    }
}
