//! The files: the source of truth. A table is a folder `catalog/schema/table/` holding its
//! definition `_table.yaml` and one `<id>.md` per row (YAML front matter = columns, Markdown = body).

use super::schema::{Table, TableDef};
use crate::error::{Error, Result};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

pub const TABLE_FILE: &str = "_table.yaml";

/// A row as it lives in a file.
#[derive(Debug, Clone, PartialEq)]
pub struct RowFile {
    pub values: Map<String, Value>,
    pub body: String,
}

pub fn table_dir(root: &Path, table: &str) -> PathBuf {
    let mut p = root.to_path_buf();
    for part in table.split('.') {
        p.push(part);
    }
    p
}

pub fn row_path(root: &Path, table: &str, id: &str) -> PathBuf {
    table_dir(root, table).join(format!("{id}.md"))
}

pub fn hash(bytes: &[u8]) -> String {
    hex::encode(&Sha256::digest(bytes)[..16])
}

/// Renders a row: front matter in the table's column order, then the body.
pub fn render_row(table: &Table, values: &Map<String, Value>, body: &str) -> Vec<u8> {
    let mut fm = serde_json::Map::new();
    for cname in table.def.columns.keys() {
        if let Some(v) = values.get(cname).filter(|v| !v.is_null()) {
            fm.insert(cname.clone(), v.clone());
        }
    }
    let mut out = String::from("---\n");
    if !fm.is_empty() {
        out.push_str(&serde_norway::to_string(&fm).unwrap_or_default());
    }
    out.push_str("---\n");
    out.push_str(body);
    out.into_bytes()
}

/// Parses a row file. A file without front matter is all body.
pub fn parse_row(text: &str) -> std::result::Result<RowFile, String> {
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
            Err(e) => return Err(format!("the front matter is not valid YAML: {e}")),
        }
    };
    Ok(RowFile {
        values,
        body: body.to_string(),
    })
}

pub fn render_table_def(def: &TableDef) -> Vec<u8> {
    let mut s = String::from(
        "# datanotes table definition: columns, types and constraints.\n# Each row of this table is a <id>.md file beside this one.\n",
    );
    s.push_str(&serde_norway::to_string(def).unwrap_or_default());
    s.into_bytes()
}

pub fn parse_table_def(text: &str) -> std::result::Result<TableDef, String> {
    serde_norway::from_str(text).map_err(|e| e.to_string())
}

/// Writes a file atomically: temp file, fsync, rename. The caller fsyncs the folder.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = stage(path, bytes)?;
    fs::rename(&tmp, path)?;
    Ok(())
}

/// The first half of `write_atomic`: writes and fsyncs the temp file beside `path` (hidden, and
/// not a row file), and answers its path; renaming it onto `path` is the second half.
pub fn stage(path: &Path, bytes: &[u8]) -> Result<PathBuf> {
    let dir = path
        .parent()
        .ok_or_else(|| Error::internal("file has no folder"))?;
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("x");
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let mut f = fs::File::create(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    Ok(tmp)
}

pub fn fsync_dir(dir: &Path) -> Result<()> {
    fs::File::open(dir)?.sync_all()?;
    Ok(())
}

pub fn remove_file(path: &Path) -> Result<()> {
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Creates a folder and its parents, fsyncing each new one's parent.
pub fn create_dirs(root: &Path, dir: &Path) -> Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    if let Some(parent) = dir.parent()
        && parent != root
    {
        create_dirs(root, parent)?;
    }
    match fs::create_dir(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e.into()),
    }
    fsync_dir(dir.parent().unwrap_or(root))
}

/// Removes a table folder and any parents it leaves empty (up to the root).
pub fn remove_table_dir(root: &Path, dir: &Path) -> Result<()> {
    if dir.exists() {
        fs::remove_dir_all(dir)?;
    }
    let mut p = dir.parent();
    while let Some(d) = p {
        if d == root || fs::remove_dir(d).is_err() {
            break;
        }
        p = d.parent();
    }
    fsync_dir(dir.parent().unwrap_or(root)).or_else(|_| fsync_dir(root))
}

/// Every table folder under the root: `catalog/schema/table/_table.yaml`.
pub fn find_tables(root: &Path) -> Vec<(String, PathBuf)> {
    let mut out = vec![];
    let dirs = |p: &Path| -> Vec<(String, PathBuf)> {
        let mut v: Vec<(String, PathBuf)> = fs::read_dir(p)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .filter_map(|e| Some((e.file_name().to_str()?.to_string(), e.path())))
            .filter(|(n, _)| crate::names::is_name(n))
            .collect();
        v.sort();
        v
    };
    for (c, cp) in dirs(root) {
        for (s, sp) in dirs(&cp) {
            for (t, tp) in dirs(&sp) {
                if tp.join(TABLE_FILE).is_file() {
                    out.push((format!("{c}.{s}.{t}"), tp));
                }
            }
        }
    }
    out
}

/// A row file seen on disk.
pub struct SeenFile {
    pub id: String,
    pub mtime_ns: i64,
    pub size: i64,
}

/// Whether a file name is a temporary file of [`stage`] left by another process (one that
/// crashed between writing it and renaming it into place): `.<name>.<pid>.tmp`.
fn stale_temp(name: &str) -> bool {
    let Some(rest) = name.strip_prefix('.').and_then(|n| n.strip_suffix(".tmp")) else {
        return false;
    };
    let Some((file, pid)) = rest.rsplit_once('.') else {
        return false;
    };
    !file.is_empty() && pid.parse::<u32>().is_ok_and(|p| p != std::process::id())
}

/// Lists the row files of a table folder with their size and mtime. Temporary files a crashed
/// server left behind are removed on the way (the journal redoes what they were for).
pub fn list_rows(dir: &Path) -> Vec<SeenFile> {
    let mut out = vec![];
    for e in fs::read_dir(dir).into_iter().flatten().flatten() {
        let name = e.file_name();
        let Some(name) = name.to_str() else { continue };
        if stale_temp(name) {
            match fs::remove_file(e.path()) {
                Ok(()) => {
                    tracing::info!(path = %e.path().display(), "removed a temporary file left by a crash")
                }
                Err(err) => {
                    tracing::warn!(path = %e.path().display(), "cannot remove a stale temporary file: {err}")
                }
            }
            continue;
        }
        let Some(id) = name.strip_suffix(".md") else {
            continue;
        };
        if !crate::names::is_row_id(id) {
            continue;
        }
        let Ok(meta) = e.metadata() else { continue };
        if !meta.is_file() {
            continue;
        }
        out.push(SeenFile {
            id: id.to_string(),
            mtime_ns: mtime_ns(&meta),
            size: meta.len() as i64,
        });
    }
    out
}

pub fn mtime_ns(meta: &fs::Metadata) -> i64 {
    meta.modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

pub fn stat(path: &Path) -> Option<(i64, i64)> {
    let m = fs::metadata(path).ok()?;
    Some((mtime_ns(&m), m.len() as i64))
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
}
