//! The files: the source of truth. A table is a folder `catalog/schema/table/` holding its
//! definition `_table.yaml` and one `<id>.md` per row (YAML front matter = columns, Markdown = body).
//!
//! Why a file is not read, or is not a valid row, is a [`FileProblem`]: a plain sentence, what
//! `describe_table` shows and what the journal records as `{"invalid": why}`.

mod read;
mod write;

pub use read::*;
pub use write::*;

use super::schema::{Table, TableDef};
use crate::error::{Error, Result};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

/// The file holding a table's definition, in the table's folder.
pub const TABLE_FILE: &str = "_table.yaml";

/// Why a file is not read, or not a valid row or table definition: a plain sentence, which
/// `describe_table` shows and a hand edit's `{"invalid": why}` journals.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileProblem(String);

impl FileProblem {
    /// The sentence.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for FileProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<String> for FileProblem {
    fn from(s: String) -> FileProblem {
        FileProblem(s)
    }
}

impl From<&str> for FileProblem {
    fn from(s: &str) -> FileProblem {
        FileProblem(s.to_string())
    }
}

impl From<FileProblem> for String {
    fn from(p: FileProblem) -> String {
        p.0
    }
}

/// A row as it lives in a file.
#[derive(Debug, Clone, PartialEq)]
pub struct RowFile {
    /// The front matter: one value per column.
    pub values: Map<String, Value>,
    /// The Markdown after the front matter (the `body` column).
    pub body: String,
}

/// The folder of table `a.b.c`: `root/a/b/c` (the name must have been checked).
pub fn table_dir(root: &Path, table: &str) -> PathBuf {
    let mut p = root.to_path_buf();
    for part in table.split('.') {
        p.push(part);
    }
    p
}

/// The file of row `id` in `table`: `<table folder>/<id>.md`.
pub fn row_path(root: &Path, table: &str, id: &str) -> PathBuf {
    table_dir(root, table).join(format!("{id}.md"))
}

/// The SHA-256 of a file's bytes, hex (how the index tells a hand edit).
pub fn hash(bytes: &[u8]) -> String {
    hex::encode(&Sha256::digest(bytes)[..16])
}

/// YAML text of a value; a failure is an error (an empty text would be written as the file).
fn yaml(v: &impl serde::Serialize) -> Result<String> {
    serde_norway::to_string(v).map_err(|e| Error::internal(format!("cannot write YAML: {e}")))
}

/// Renders a row: front matter in the table's column order, then the body. Infallible: the front
/// matter is a map of checked JSON values (string keys, finite numbers), which YAML always writes.
pub fn render_row(table: &Table, values: &Map<String, Value>, body: &str) -> Vec<u8> {
    let mut fm = serde_json::Map::new();
    for cname in table.def.columns.keys() {
        if let Some(v) = values.get(cname).filter(|v| !v.is_null()) {
            fm.insert(cname.clone(), v.clone());
        }
    }
    let mut out = String::from("---\n");
    if !fm.is_empty() {
        out.push_str(&serde_norway::to_string(&fm).expect("a JSON map is always YAML"));
    }
    out.push_str("---\n");
    out.push_str(body);
    out.into_bytes()
}

/// Parses a row file. A file without front matter is all body.
pub fn parse_row(text: &str) -> std::result::Result<RowFile, FileProblem> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let rest = match text
        .strip_prefix("---\n")
        .or_else(|| text.strip_prefix("---\r\n"))
    {
        Some(r) => r,
        None => {
            return Ok(RowFile {
                values: Map::new(),
                body: text.to_string(),
            });
        }
    };
    // The front matter ends at the first line that is exactly `---`.
    let mut pos = 0;
    let end = loop {
        if rest[pos..].starts_with("---") {
            let after = &rest[pos + 3..];
            if after.is_empty() || after.starts_with('\n') || after.starts_with("\r\n") {
                break Some(pos);
            }
        }
        match rest[pos..].find('\n') {
            Some(n) => pos += n + 1,
            None => break None,
        }
    };
    let Some(end) = end else {
        return Err("the front matter opened by `---` is never closed by a `---` line".into());
    };
    let yaml = &rest[..end];
    let mut body = &rest[end + 3..];
    body = body
        .strip_prefix("\r\n")
        .or_else(|| body.strip_prefix('\n'))
        .unwrap_or(body);
    let values = if yaml.trim().is_empty() {
        Map::new()
    } else {
        match serde_norway::from_str::<Value>(yaml) {
            Ok(Value::Object(m)) => m,
            Ok(Value::Null) => Map::new(),
            Ok(_) => return Err("the front matter is not a mapping of column: value".into()),
            Err(e) => return Err(format!("the front matter is not valid YAML: {e}").into()),
        }
    };
    Ok(RowFile {
        values,
        body: body.to_string(),
    })
}

/// Renders a table definition (`_table.yaml`).
pub fn render_table_def(def: &TableDef) -> Result<Vec<u8>> {
    let mut s = String::from(
        "# datanotes table definition: columns, types and constraints.\n# Each row of this table is a <id>.md file beside this one.\n",
    );
    s.push_str(&yaml(def)?);
    Ok(s.into_bytes())
}

/// Parses a `_table.yaml`; a problem says which line and why.
pub fn parse_table_def(text: &str) -> std::result::Result<TableDef, FileProblem> {
    serde_norway::from_str(text).map_err(|e| e.to_string().into())
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn round_trip() {
        let text = "---\ntitle: Buy milk\ntags:\n- a\n---\nHello\n---\nworld\n";
        let r = parse_row(text).unwrap();
        assert_eq!(r.values["title"], "Buy milk");
        assert_eq!(r.body, "Hello\n---\nworld\n");
        assert_eq!(parse_row("just text").unwrap().body, "just text");
        assert!(parse_row("---\ntitle: x\n").is_err());
        assert_eq!(parse_row("---\n---\n").unwrap().values.len(), 0);
    }

    #[test]
    fn the_reader_never_follows_blocks_or_overreads() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        fs::write(d.join("ok.md"), "---\ntitle: x\n---\n").unwrap();
        let r = read_row(&d.join("ok.md"), 10).unwrap();
        assert_eq!(r.bytes.unwrap(), b"---\ntitle: x\n---\n");
        assert!(read_row(&d.join("none.md"), 10).is_none());
        let why =
            |p: &str, max: i64| String::from(read_row(&d.join(p), max).unwrap().bytes.unwrap_err());
        std::os::unix::fs::symlink(d.join("ok.md"), d.join("link.md")).unwrap();
        assert!(why("link.md", 10).contains("symbolic link"));
        std::os::unix::fs::symlink("/dev/zero", d.join("zero.md")).unwrap();
        assert!(why("zero.md", 10).contains("symbolic link"));
        let fifo = std::ffi::CString::new(d.join("fifo.md").to_str().unwrap()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
        assert_eq!(
            why("fifo.md", 10),
            "fifo.md is a named pipe (FIFO), not a regular file"
        );
        fs::create_dir(d.join("dir.md")).unwrap();
        assert_eq!(why("dir.md", 10), "dir.md is a folder, not a regular file");
        fs::write(
            d.join("big.md"),
            vec![b'x'; (FRONT_MATTER_ALLOWANCE + 11) as usize],
        )
        .unwrap();
        assert!(why("big.md", 10).starts_with(&format!(
            "the file has {} bytes, more than the limit {}",
            FRONT_MATTER_ALLOWANCE + 11,
            FRONT_MATTER_ALLOWANCE + 10
        )));
        assert!(read_row(&d.join("big.md"), 11).unwrap().bytes.is_ok());
        fs::write(d.join("Bad Name.md"), "x").unwrap();
        assert!(why("Bad Name.md", 10).contains("not a valid row id"));
        // The same reason, the same hash: an unchanged refused file is not a change.
        let h = |p: &str| read_row(&d.join(p), 10).unwrap().hash();
        assert_eq!(h("fifo.md"), h("fifo.md"));
        assert_ne!(h("fifo.md"), h("dir.md"));
    }

    #[test]
    fn folders_are_never_made_or_written_through_a_link() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("db");
        let out = tmp.path().join("out");
        fs::create_dir_all(&root).unwrap();
        fs::create_dir_all(&out).unwrap();
        create_dirs(&root, &root.join("a/b/c")).unwrap();
        assert!(check_dirs(&root, &root.join("a/b/c")).unwrap());
        assert!(!check_dirs(&root, &root.join("a/b/d")).unwrap());
        std::os::unix::fs::symlink(&out, root.join("a/l")).unwrap();
        let e = create_dirs(&root, &root.join("a/l/t")).unwrap_err();
        assert!(e.message.starts_with("a/l is a symbolic link"), "{e}");
        assert!(check_dirs(&root, &root.join("a/l/t")).is_err());
        assert!(fs::read_dir(&out).unwrap().next().is_none());
        assert!(remove_table_dir(&root, &root.join("a/l/t")).is_err());
        fs::write(root.join("f"), "").unwrap();
        assert!(create_dirs(&root, &root.join("f/x")).is_err());
    }
}
