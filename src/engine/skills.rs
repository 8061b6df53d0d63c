//! The vault's notes as agent skills: a table declared `skills: true` holds one skill per row
//! (its `name` and `description` columns, its Markdown body), served in the skills-as-resources
//! convention of MCP's Skills working group (the `io.modelcontextprotocol/skills` extension,
//! SEP-2640):
//!
//! - `skill://<name>/SKILL.md` (`text/markdown`): the row's file itself. Its front matter is
//!   the row's values, so `name` and `description` are there, and any other column passes
//!   through as the Agent Skills format allows (`license`, `compatibility`, ...);
//! - `skill://index` (and `skill://index.json`, its name in SEP-2640's draft): every skill the
//!   caller may read, `{"skills": [{"name", "type": "skill-md", "description", "url"}]}`.
//!
//! A skill's name follows the Agent Skills rule (1 to 64 of `a-z`, `0-9` and `-`, no `-` at
//! either end or twice in a row), checked on every write like any constraint; the `name` column
//! is unique, so a name finds one row. Editing a note edits its skill: the file is the truth.
//!
//! The aggregator lists the skills first, MCP subscriptions follow a skills table's changes, and
//! the tool index (`tools/`) finds them as an `@skills` segment, read again after writes.
//!
//! This module and `schema/` know each other by design: a skills table is a table whose rules
//! are constraints among the others (`schema/` calls [`check_table`] and [`check_row`] where it
//! checks every definition and row), and those rules read the schema's types.

use super::index::{self, Cond, Query};
use super::schema::{ColumnType, Table, TableDef};
use super::{Engine, Reads};
use crate::error::{Error, Result};
use serde_json::{Map, Value, json};

/// The scheme of skills.
pub const SCHEME: &str = "skill";
/// The index of the vault's skills.
pub const INDEX: &str = "skill://index";
/// The index under the name SEP-2640's draft gave it.
pub const INDEX_JSON: &str = "skill://index.json";
/// The most skills listed (of all skills tables together).
pub const MAX_SKILLS: usize = 1000;

/// A skill resource of the vault, by URI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SkillUri {
    /// `skill://index` or `skill://index.json`.
    Index,
    /// `skill://<name>/SKILL.md`.
    Skill(String),
}

impl SkillUri {
    /// Reads a URI the vault may serve: the index, or `skill://<name>/SKILL.md` with a valid
    /// name. None: not one (an app's `skill://<app>/...`, any other scheme).
    pub fn parse(uri: &str) -> Option<SkillUri> {
        if uri == INDEX || uri == INDEX_JSON {
            return Some(SkillUri::Index);
        }
        let name = uri.strip_prefix("skill://")?.strip_suffix("/SKILL.md")?;
        valid_name(name).then(|| SkillUri::Skill(name.to_string()))
    }

    /// The URI of the skill `name`.
    pub fn of(name: &str) -> String {
        format!("skill://{name}/SKILL.md")
    }
}

/// One skill of the vault: where it is, what it says it is.
#[derive(Debug, Clone)]
pub struct Skill {
    /// The skills table it is a row of.
    pub table: String,
    /// Its row's id.
    pub id: String,
    /// Its name (the row's `name`).
    pub name: String,
    /// What it is for (the row's `description`).
    pub description: String,
}

impl Skill {
    /// Its `resources/list` entry.
    pub fn resource(&self) -> Value {
        json!({"uri": SkillUri::of(&self.name), "name": self.name,
               "description": self.description, "mimeType": "text/markdown"})
    }
}

/// Whether `name` is an Agent Skills name: 1 to 64 of `a-z`, `0-9`, `-`, without a `-` at
/// either end or two in a row.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-')
        && !name.contains("--")
}

/// A skills table's definition: `name` a required, unique text column and `description` a
/// required text column.
pub fn check_table(table: &str, def: &TableDef) -> Result<()> {
    for (col, unique) in [("name", true), ("description", false)] {
        let fine = def
            .columns
            .get(col)
            .is_some_and(|c| c.ty == ColumnType::Text && c.required && (c.unique || !unique));
        if !fine {
            let want = if unique {
                "{\"type\": \"text\", \"required\": true, \"unique\": true}"
            } else {
                "{\"type\": \"text\", \"required\": true}"
            };
            return Err(Error::invalid(format!(
                "a skills table needs a column {col} of type text, required{}",
                if unique { " and unique" } else { "" }
            ))
            .table(table)
            .column(col)
            .rule("skills")
            .hint(format!(
                "define \"{col}\": {want}, or leave skills out; each row is a skill: its name, its description, its body"
            )));
        }
    }
    Ok(())
}

/// A skills table's row: its `name` must be an Agent Skills name.
pub fn check_row(table: &str, values: &Map<String, Value>) -> Result<()> {
    match values.get("name").and_then(Value::as_str) {
        Some(n) if !valid_name(n) => Err(Error::constraint(
            table,
            "name",
            "skill_name",
            format!(
                "{:?} is not a skill name",
                n.chars().take(80).collect::<String>()
            ),
        )
        .hint("use 1 to 64 lowercase letters, digits and single hyphens, e.g. \"weekly-review\"")),
        _ => Ok(()),
    }
}

impl Engine {
    /// The skills tables the caller may read.
    fn skill_tables(&self, reads: &Reads) -> Vec<std::sync::Arc<Table>> {
        self.table_names()
            .into_iter()
            .filter_map(|n| self.table(&n).ok())
            .filter(|t| t.def.skills && (reads.table)(&t.name).is_ok())
            .collect()
    }

    /// Whether the vault has a skills table the caller may read.
    pub fn has_skills(&self, reads: &Reads) -> bool {
        !self.skill_tables(reads).is_empty()
    }

    /// The skills the caller may read, by name (at most [`MAX_SKILLS`]); `only`: the one
    /// named so.
    pub fn skills(&self, reads: &Reads, only: Option<&str>) -> Result<Vec<Skill>> {
        let mut out = vec![];
        for t in self.skill_tables(reads) {
            let q = Query {
                conds: only
                    .map(|n| Cond {
                        column: "name".into(),
                        op: "=".into(),
                        value: json!(n),
                    })
                    .into_iter()
                    .collect(),
                order: vec![("name".into(), false)],
                limit: MAX_SKILLS as i64,
                offset: 0,
                with_body: false,
            };
            let (rows, _) = self.with_index(|c| index::select(c, &t, &q))?;
            for r in rows {
                let text = |k: &str| r.values.get(k).and_then(Value::as_str).map(String::from);
                let (Some(name), Some(description)) = (text("name"), text("description")) else {
                    continue;
                };
                // A row made invalid by a hand edit is not served as a skill.
                if !valid_name(&name) {
                    continue;
                }
                out.push(Skill {
                    table: t.name.clone(),
                    id: r.id,
                    name,
                    description,
                });
            }
        }
        out.sort_by(|a, b| a.name.cmp(&b.name).then_with(|| a.table.cmp(&b.table)));
        out.truncate(MAX_SKILLS);
        Ok(out)
    }

    /// Reads a skill resource: the index, or a skill's `SKILL.md` (its row's file).
    pub fn read_skill(&self, uri: &SkillUri, reads: &Reads) -> Result<Value> {
        match uri {
            SkillUri::Index => {
                let skills: Vec<Value> = self
                    .skills(reads, None)?
                    .iter()
                    .map(|s| {
                        json!({"name": s.name, "type": "skill-md",
                               "description": s.description, "url": SkillUri::of(&s.name)})
                    })
                    .collect();
                let text = serde_json::to_string_pretty(&json!({ "skills": skills }))
                    .map_err(|e| Error::internal(e.to_string()))?;
                Ok(
                    json!({"contents": [{"uri": INDEX, "mimeType": "application/json", "text": text}]}),
                )
            }
            SkillUri::Skill(name) => {
                let skill = self.skills(reads, Some(name))?.into_iter().next();
                let Some(s) = skill else {
                    return Err(Error::not_found(format!("no skill {name}"))
                        .column("uri")
                        .hint(format!("{INDEX} lists the skills")));
                };
                let row = super::resources::VaultUri::Row(s.table, s.id);
                let mut v = self.read_resource(&row)?;
                v["contents"][0]["uri"] = json!(SkillUri::of(name));
                Ok(v)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_uris_follow_the_agent_skills_rules() {
        for ok in ["weekly-review", "a", "pdf2text", &"x".repeat(64)] {
            assert!(valid_name(ok), "{ok}");
        }
        for bad in [
            "",
            "-a",
            "a-",
            "a--b",
            "A",
            "a_b",
            "a b",
            &"x".repeat(65),
            "é",
        ] {
            assert!(!valid_name(bad), "{bad}");
        }
        assert_eq!(SkillUri::parse("skill://index"), Some(SkillUri::Index));
        assert_eq!(SkillUri::parse("skill://index.json"), Some(SkillUri::Index));
        assert_eq!(
            SkillUri::parse("skill://weekly-review/SKILL.md"),
            Some(SkillUri::Skill("weekly-review".into()))
        );
        // An app's skills are namespaced under it: not the vault's.
        assert_eq!(SkillUri::parse("skill://planning/weekly/SKILL.md"), None);
        assert_eq!(SkillUri::parse("skill://Bad/SKILL.md"), None);
        assert_eq!(SkillUri::parse("datanotes://tables/a.b.c"), None);
    }
}
