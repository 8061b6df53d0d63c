//! Table definitions and value validation: the rules every write is checked against.

mod check;

use check::bound_kind;
pub use check::{describe, parse_date, parse_datetime};

use crate::error::{Error, Result};
use crate::names;
use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
/// A column's type, as written in `_table.yaml`.
pub enum ColumnType {
    /// A string.
    Text,
    /// A whole number.
    Integer,
    /// A number.
    Number,
    /// true or false.
    Boolean,
    /// A date, `YYYY-MM-DD`.
    Date,
    /// A date and time, RFC 3339.
    Datetime,
    /// One of the column's `values`.
    Enum,
    /// A list of strings.
    List,
    /// A row id of the table named by the column's `table`.
    Link,
}

impl ColumnType {
    /// Its name in `_table.yaml`.
    pub fn as_str(self) -> &'static str {
        match self {
            ColumnType::Text => "text",
            ColumnType::Integer => "integer",
            ColumnType::Number => "number",
            ColumnType::Boolean => "boolean",
            ColumnType::Date => "date",
            ColumnType::Datetime => "datetime",
            ColumnType::Enum => "enum",
            ColumnType::List => "list",
            ColumnType::Link => "link",
        }
    }
}

/// One column: its type and constraints, as written in the table's `_table.yaml`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ColumnDef {
    #[serde(rename = "type")]
    /// The type.
    pub ty: ColumnType,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// What the column holds, for people and agents.
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    /// A row must have a value.
    pub required: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    /// No two rows may have the same value.
    pub unique: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// The value of a row written without one.
    pub default: Option<Value>,
    /// Lower bound: the value (integer, number), the length (text), the item count (list), or the earliest date/datetime.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min: Option<Value>,
    /// Upper bound, with the same meaning as `min`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<Value>,
    /// A regular expression every text value (or list item) must match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pattern: Option<String>,
    /// The allowed values of an enum column.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub values: Option<Vec<String>>,
    /// The table a link column points into (`catalog.schema.table`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub table: Option<String>,
}

/// A table's definition: the content of `<table>/_table.yaml`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TableDef {
    #[serde(default)]
    /// What the table holds, for people and agents.
    pub description: String,
    /// The columns, in order.
    pub columns: IndexMap<String, ColumnDef>,
    /// Whether (and from which columns) the table's rows are in the semantic index; absent: yes,
    /// from its text, enum and list columns and the body.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub semantic: Option<SemanticDef>,
    /// Whether each row is an agent skill (`engine/skills.rs`): its `name`, `description` and
    /// body served as `skill://<name>/SKILL.md`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub skills: bool,
}

/// A table's place in the semantic index (`semantic:` in `_table.yaml`): `false` keeps it out,
/// `true` is the default, `{columns: [...]}` names the columns embedded with the body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum SemanticDef {
    /// `true` (the default: text, enum and list columns and the body) or `false` (left out).
    Enabled(bool),
    /// The columns embedded with the body.
    Columns(SemanticColumns),
}

/// `semantic: {columns: [...]}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SemanticColumns {
    /// The columns whose values are embedded with the body, in this order.
    pub columns: Vec<String>,
}

impl SemanticDef {
    /// Whether the table is in the semantic index.
    pub fn enabled(&self) -> bool {
        !matches!(self, SemanticDef::Enabled(false))
    }
    /// The columns it names, if it names some.
    pub fn columns(&self) -> Option<&[String]> {
        match self {
            SemanticDef::Columns(c) => Some(&c.columns),
            SemanticDef::Enabled(_) => None,
        }
    }
    /// The same choice once columns are renamed (old to new) or dropped.
    pub fn renamed(&self, rename: &IndexMap<String, String>, drop: &[String]) -> SemanticDef {
        match self {
            SemanticDef::Columns(c) => SemanticDef::Columns(SemanticColumns {
                columns: c
                    .columns
                    .iter()
                    .filter(|c| !drop.contains(c))
                    .map(|c| rename.get(c).cloned().unwrap_or_else(|| c.clone()))
                    .collect(),
            }),
            other => other.clone(),
        }
    }
}

/// A compiled definition: the def plus its checked regexes.
#[derive(Debug, Clone)]
pub struct Table {
    /// The table's full name.
    pub name: String,
    /// Its definition.
    pub def: TableDef,
    patterns: IndexMap<String, regex::Regex>,
}

fn col_err(table: &str, column: &str, rule: &str, msg: String, hint: String) -> Error {
    Error::invalid(msg)
        .table(table)
        .column(column)
        .rule(rule)
        .hint(hint)
}

impl Table {
    /// Checks a definition (names, types, constraints, defaults) and compiles it.
    pub fn compile(name: &str, def: TableDef) -> Result<Table> {
        let mut patterns = IndexMap::new();
        if def.columns.len() > 200 {
            return Err(Error::invalid("a table has at most 200 columns").table(name));
        }
        if let Some(cols) = def.semantic.as_ref().and_then(SemanticDef::columns) {
            for c in cols {
                if !def.columns.contains_key(c) {
                    return Err(Error::invalid(format!(
                        "semantic.columns names {c}, which is not a column of {name}"
                    ))
                    .table(name)
                    .column(c.as_str())
                    .rule("semantic")
                    .hint(
                        "name columns of the table, or use semantic: true for its text columns",
                    ));
                }
            }
        }
        for (cname, c) in &def.columns {
            names::check_column_name(name, cname)?;
            let bad = |rule: &str, msg: String, hint: &str| {
                col_err(name, cname, rule, msg, hint.to_string())
            };
            match c.ty {
                ColumnType::Enum => match &c.values {
                    Some(v) if !v.is_empty() => {}
                    _ => {
                        return Err(bad(
                            "values",
                            format!("enum column {cname} has no values"),
                            "give the allowed values, e.g. \"values\": [\"todo\", \"done\"]",
                        ));
                    }
                },
                _ if c.values.is_some() => {
                    return Err(bad(
                        "values",
                        format!("column {cname}: `values` is only for enum columns"),
                        "use \"type\": \"enum\" or drop `values`",
                    ));
                }
                _ => {}
            }
            match c.ty {
                ColumnType::Link => match &c.table {
                    Some(t) => {
                        names::TableName::parse(t).map_err(|_| {
                            bad(
                                "table",
                                format!(
                                    "link column {cname} points to an invalid table name {t:?}"
                                ),
                                "name the linked table as catalog.schema.table",
                            )
                        })?;
                    }
                    None => {
                        return Err(bad(
                            "table",
                            format!("link column {cname} does not say which table it links to"),
                            "add \"table\": \"catalog.schema.table\"",
                        ));
                    }
                },
                _ if c.table.is_some() => {
                    return Err(bad(
                        "table",
                        format!("column {cname}: `table` is only for link columns"),
                        "use \"type\": \"link\" or drop `table`",
                    ));
                }
                _ => {}
            }
            if let Some(p) = &c.pattern {
                if !matches!(c.ty, ColumnType::Text | ColumnType::List | ColumnType::Link) {
                    return Err(bad(
                        "pattern",
                        format!("column {cname}: `pattern` applies to text, list and link columns"),
                        "drop `pattern` or change the type",
                    ));
                }
                let re = regex::Regex::new(p).map_err(|e| {
                    bad(
                        "pattern",
                        format!("column {cname}: invalid pattern: {e}"),
                        "fix the regular expression",
                    )
                })?;
                patterns.insert(cname.clone(), re);
            }
            if c.unique && c.ty == ColumnType::List {
                return Err(bad(
                    "unique",
                    format!("column {cname}: a list column cannot be unique"),
                    "drop `unique`",
                ));
            }
            if c.ty == ColumnType::Boolean && (c.min.is_some() || c.max.is_some()) {
                return Err(bad(
                    "min",
                    format!("column {cname}: a boolean has no bounds"),
                    "drop `min`/`max`",
                ));
            }
            for (k, b) in [("min", &c.min), ("max", &c.max)] {
                if let Some(b) = b {
                    let ok = match c.ty {
                        ColumnType::Number => b.is_number(),
                        ColumnType::Date => b.as_str().is_some_and(|s| parse_date(s).is_some()),
                        ColumnType::Datetime => {
                            b.as_str().is_some_and(|s| parse_datetime(s).is_some())
                        }
                        _ => b.is_i64() || b.is_u64(),
                    };
                    if !ok {
                        return Err(bad(
                            k,
                            format!("column {cname}: `{k}` must be {}", bound_kind(c.ty)),
                            "fix the bound",
                        ));
                    }
                }
            }
        }
        if def.skills {
            crate::engine::skills::check_table(name, &def)?;
        }
        let table = Table {
            name: name.to_string(),
            def,
            patterns,
        };
        // Defaults must themselves be valid values.
        for (cname, c) in &table.def.columns {
            if let Some(d) = &c.default {
                table.check_value(cname, c, d).map_err(|e| {
                    Error::invalid(format!(
                        "column {cname}: the default is not a valid value: {}",
                        e.message
                    ))
                    .table(name)
                    .column(cname.as_str())
                    .rule("default")
                    .hint("give a default that satisfies the column's own type and constraints")
                })?;
            }
        }
        Ok(table)
    }

    /// A column's definition by name.
    pub fn column(&self, name: &str) -> Option<&ColumnDef> {
        self.def.columns.get(name)
    }

    /// The columns that go into full-text search.
    pub fn text_columns(&self) -> impl Iterator<Item = &str> {
        self.def
            .columns
            .iter()
            .filter(|(_, c)| matches!(c.ty, ColumnType::Text | ColumnType::Enum | ColumnType::List))
            .map(|(n, _)| n.as_str())
    }
}
