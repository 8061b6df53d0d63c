//! The arguments of every engine operation: one struct each, deserialized strictly (unknown fields
//! are refused) and described by JSON Schema for the operation catalog.

use super::schema::{ColumnDef, SemanticDef};
use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value};

#[derive(Debug, Deserialize, JsonSchema, Default)]
#[serde(deny_unknown_fields)]
pub struct Empty {}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TableArg {
    /// The table, `catalog.schema.table`.
    pub table: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RowRef {
    /// The table, `catalog.schema.table`.
    pub table: String,
    /// The row id (its file name without `.md`).
    pub id: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Cond {
    pub column: String,
    /// One of =, !=, <, <=, >, >=, in, contains.
    pub op: String,
    #[serde(default)]
    pub value: Value,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Order {
    pub column: String,
    /// asc (default) or desc.
    #[serde(default)]
    pub dir: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SelectRows {
    pub table: String,
    /// Conditions, all of which must hold.
    #[serde(default, rename = "where")]
    pub where_: Vec<Cond>,
    #[serde(default)]
    pub order_by: Vec<Order>,
    /// At most this many rows (default 100).
    #[serde(default)]
    pub limit: Option<i64>,
    #[serde(default)]
    pub offset: Option<i64>,
    /// Only these columns in `values` (and `body` if named).
    #[serde(default)]
    pub columns: Option<Vec<String>>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchNotes {
    /// What to look for: words (mode text: all must appear) or a question in your own words.
    pub query: String,
    /// Only in these tables.
    #[serde(default)]
    pub tables: Option<Vec<String>>,
    /// At most this many hits, 1 to 1000 (default 20).
    #[serde(default)]
    pub limit: Option<i64>,
    /// hybrid (default when the semantic index is ready: full text and meaning fused), text
    /// (every word must appear) or semantic (nearest in meaning).
    #[serde(default)]
    pub mode: Option<SearchMode>,
}

/// How `search_notes` ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SearchMode {
    /// Full text and meaning, fused (reciprocal rank fusion).
    Hybrid,
    /// Full text only: every word must appear.
    Text,
    /// Meaning only: the notes nearest to the query.
    Semantic,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchTools {
    /// What the tool should do, in your own words ("open an issue on a repository").
    pub query: String,
    /// At most this many tools, 1 to 50 (default 10).
    #[serde(default)]
    pub limit: Option<i64>,
    /// Only the tools of these apps (`engine` for the engine's operations, `@skills` for the vault's skills).
    #[serde(default)]
    pub apps: Option<Vec<String>>,
    /// hybrid (default when the server has a model: words and meaning fused), text (words
    /// only) or semantic (meaning only).
    #[serde(default)]
    pub mode: Option<SearchMode>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SimilarNotes {
    /// The table of the row.
    pub table: String,
    /// The row whose related notes to find.
    pub id: String,
    /// Only in these tables.
    #[serde(default)]
    pub tables: Option<Vec<String>>,
    /// At most this many hits, 1 to 1000 (default 10).
    #[serde(default)]
    pub limit: Option<i64>,
}

#[derive(Debug, Deserialize, JsonSchema, Default)]
#[serde(deny_unknown_fields)]
pub struct ListMigrations {
    #[serde(default)]
    pub table: Option<String>,
    /// Matches the actor's harness, model, app, token name, label or caller (the token that
    /// called the app's tool).
    #[serde(default)]
    pub actor: Option<String>,
    #[serde(default)]
    pub app: Option<String>,
    #[serde(default)]
    pub session: Option<String>,
    /// Only migrations with a seq below this one.
    #[serde(default)]
    pub before: Option<i64>,
    /// Newest first; at most this many (default 100).
    #[serde(default)]
    pub limit: Option<i64>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct InsertRow {
    pub table: String,
    /// The row id; generated from the first text value when absent.
    #[serde(default)]
    pub id: Option<String>,
    /// Column values.
    #[serde(default)]
    pub values: Map<String, Value>,
    /// The Markdown body.
    #[serde(default)]
    pub body: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateRow {
    pub table: String,
    pub id: String,
    /// The columns to change (null clears one); others keep their values.
    #[serde(default)]
    pub values: Map<String, Value>,
    #[serde(default)]
    pub body: Option<String>,
    /// Refuse the update unless the row is still at this version.
    #[serde(default)]
    pub expect_version: Option<i64>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateTable {
    pub table: String,
    #[serde(default)]
    pub description: Option<String>,
    /// Column name to its definition.
    pub columns: IndexMap<String, ColumnDef>,
    /// In the semantic index (see its definition).
    #[serde(default)]
    pub semantic: Option<SemanticDef>,
    /// Each row an agent skill, served as skill://<name>/SKILL.md: needs text columns name (required, unique) and description (required).
    #[serde(default)]
    pub skills: Option<bool>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AlterTable {
    pub table: String,
    #[serde(default)]
    pub description: Option<String>,
    /// New columns. A required one needs a default, which existing rows receive.
    #[serde(default)]
    pub add: IndexMap<String, ColumnDef>,
    /// Columns to remove (their values leave every row; undo brings them back).
    #[serde(default)]
    pub drop: Vec<String>,
    /// Old name to new name.
    #[serde(default)]
    pub rename: IndexMap<String, String>,
    /// Columns whose definition (type, constraints) changes; refused if an existing row would break it.
    #[serde(default)]
    pub change: IndexMap<String, ColumnDef>,
    /// The table's place in the semantic index.
    #[serde(default)]
    pub semantic: Option<SemanticDef>,
    /// Each row an agent skill (see create_table), or no longer.
    #[serde(default)]
    pub skills: Option<bool>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SetSettings {
    pub settings: Map<String, Value>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SeqArg {
    /// The migration's seq.
    pub seq: i64,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Restore {
    pub table: String,
    /// One row; the whole table when absent.
    #[serde(default)]
    pub id: Option<String>,
    /// Bring it back to its state just after this migration.
    pub seq: i64,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Vacuum {
    /// Drop the history of every migration below this seq.
    pub before_seq: i64,
}
