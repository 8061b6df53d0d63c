//! The files: the source of truth. A table is a folder `catalog/schema/table/` holding its
//! definition `_table.yaml` and one `<id>.md` per row (YAML front matter = columns, Markdown = body).

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
    // The engine's own files (settings) are private like the rest of `.datanotes/`.
    let private = dir.file_name().is_some_and(|n| n == ".datanotes");
    let mut f = {
        use std::os::unix::fs::OpenOptionsExt;
        fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(if private { 0o600 } else { 0o666 })
            .open(&tmp)?
    };
    f.write_all(bytes)?;
    f.sync_all()?;
    Ok(tmp)
}

/// fsyncs a folder, so that the renames in it are durable.
pub fn fsync_dir(dir: &Path) -> Result<()> {
    fs::File::open(dir)?.sync_all()?;
    Ok(())
}

/// Removes a file; one already gone is not an error.
pub fn remove_file(path: &Path) -> Result<()> {
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Creates a folder and its parents, fsyncing each new one's parent. Every folder on the way
/// from the root must be a real folder, not a link (see [`check_dirs`]).
pub fn create_dirs(root: &Path, dir: &Path) -> Result<()> {
    let mut cur = root.to_path_buf();
    for part in relative_parts(root, dir)? {
        cur.push(part);
        match real_dir(root, &cur)? {
            true => continue,
            false => match fs::create_dir(&cur) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    real_dir(root, &cur)?;
                    continue;
                }
                Err(e) => return Err(e.into()),
            },
        }
        fsync_dir(cur.parent().unwrap_or(root))?;
    }
    Ok(())
}

/// Checks, with `lstat` (never following a link), that every folder from the root down to `dir`
/// that exists is a real folder: a write through a symbolic link would land outside the
/// database. Answers whether `dir` exists.
pub fn check_dirs(root: &Path, dir: &Path) -> Result<bool> {
    let mut cur = root.to_path_buf();
    for part in relative_parts(root, dir)? {
        cur.push(part);
        if !real_dir(root, &cur)? {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Whether `path` is a real folder (false: nothing there); an error for a link or a file.
fn real_dir(root: &Path, path: &Path) -> Result<bool> {
    let rel = path.strip_prefix(root).unwrap_or(path).display();
    match fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => Ok(true),
        Ok(m) if m.file_type().is_symlink() => Err(Error::conflict(format!(
            "{rel} is a symbolic link inside the database folder; datanotes never writes through links: replace it with a real folder"
        ))
        .hint(format!(
            "move what the link points to into {rel} (or remove the link), then retry"
        ))),
        Ok(m) => Err(Error::conflict(format!(
            "{rel} is {} inside the database folder where a folder belongs",
            kind_of(&m.file_type())
        ))
        .hint(format!("move {rel} away, then retry"))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// The names of the folders from the root down to `dir` (which must be inside the root).
fn relative_parts<'a>(root: &Path, dir: &'a Path) -> Result<Vec<&'a std::ffi::OsStr>> {
    let rel = dir
        .strip_prefix(root)
        .map_err(|_| Error::internal("a folder outside the database"))?;
    rel.components()
        .map(|c| match c {
            std::path::Component::Normal(n) => Ok(n),
            _ => Err(Error::internal("a folder outside the database")),
        })
        .collect()
}

/// Whether a path is a real folder (`lstat`: a link to a folder is not one).
pub fn is_real_dir(path: &Path) -> bool {
    fs::symlink_metadata(path).is_ok_and(|m| m.is_dir())
}

/// Removes a table folder and any parents it leaves empty (up to the root).
pub fn remove_table_dir(root: &Path, dir: &Path) -> Result<()> {
    if let Some(parent) = dir.parent() {
        check_dirs(root, parent)?;
    }
    match fs::symlink_metadata(dir) {
        Ok(m) if m.is_dir() => fs::remove_dir_all(dir)?,
        // A link (never followed) or a file where the folder was: only the name goes.
        Ok(_) => fs::remove_file(dir)?,
        Err(_) => {}
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

/// Every table folder under the root: `catalog/schema/table/_table.yaml`. Links are never
/// followed: a linked folder or definition is not a table (it is logged, once).
pub fn find_tables(root: &Path) -> Vec<(String, PathBuf)> {
    let mut out = vec![];
    let dirs = |p: &Path| -> Vec<(String, PathBuf)> {
        let mut v: Vec<(String, PathBuf)> = fs::read_dir(p)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().to_str()?.to_string();
                let kind = e.file_type().ok()?;
                if !crate::names::is_name(&name) {
                    return None;
                }
                if kind.is_symlink() {
                    warn_once(&e.path(), "a symbolic link to a folder is not a table folder: datanotes never follows links (replace it with a real folder)");
                }
                kind.is_dir().then(|| (name, e.path()))
            })
            .collect();
        v.sort();
        v
    };
    for (c, cp) in dirs(root) {
        for (s, sp) in dirs(&cp) {
            for (t, tp) in dirs(&sp) {
                let def = tp.join(TABLE_FILE);
                match fs::symlink_metadata(&def) {
                    Ok(m) if m.is_file() => out.push((format!("{c}.{s}.{t}"), tp)),
                    Ok(m) => warn_once(
                        &def,
                        &format!(
                            "the definition is {}, not a regular file, so the folder is not a table (datanotes never follows links)",
                            kind_of(&m.file_type())
                        ),
                    ),
                    Err(_) => {}
                }
            }
        }
    }
    out
}

/// Logs a warning about a path once per process (scans run often).
fn warn_once(path: &Path, msg: &str) {
    static SEEN: std::sync::Mutex<Option<std::collections::HashSet<PathBuf>>> =
        std::sync::Mutex::new(None);
    let mut seen = SEEN.lock().unwrap_or_else(|e| e.into_inner());
    if seen.get_or_insert_default().insert(path.to_path_buf()) {
        tracing::warn!(path = %path.display(), "{msg}");
    }
}

/// A row file seen on disk.
pub struct SeenFile {
    /// The row id (the file name without `.md`).
    pub id: String,
    /// Its modification time, ns since the epoch.
    pub mtime_ns: i64,
    /// Its size, bytes.
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

/// Lists the row files of a table folder with their size and mtime (`lstat`: a link is listed
/// as itself, never followed). Every visible `*.md` entry is listed, whatever it is (a link, a
/// pipe, a folder, a name that is not a row id): reading it ([`read_row`]) reports it. Temporary
/// files a crashed server left behind are removed on the way (the journal redoes what they were
/// for).
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
        // Hidden names are never rows (editors' lock and swap files among them).
        if name.starts_with('.') {
            continue;
        }
        let Some(id) = name.strip_suffix(".md") else {
            continue;
        };
        let Ok(meta) = e.metadata() else { continue };
        out.push(SeenFile {
            id: id.to_string(),
            mtime_ns: mtime_ns(&meta),
            size: meta.len() as i64,
        });
    }
    out
}

/// A file's modification time, ns since the epoch (0 if the system has none).
pub fn mtime_ns(meta: &fs::Metadata) -> i64 {
    meta.modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

/// The (mtime, size) of a file itself (`lstat`: a link is never followed).
pub fn stat(path: &Path) -> Option<(i64, i64)> {
    let m = fs::symlink_metadata(path).ok()?;
    Some((mtime_ns(&m), m.len() as i64))
}

/// The front matter a row file may hold on top of `max_body_bytes` of body.
pub const FRONT_MATTER_ALLOWANCE: u64 = 1 << 20;

/// The largest `_table.yaml` read.
pub const TABLE_FILE_CAP: u64 = 1 << 20;

/// A file as the bounded reader saw it: its stat facts, and its bytes or why it was not read.
#[derive(Debug)]
pub struct Read {
    /// Its modification time, ns since the epoch.
    pub mtime_ns: i64,
    /// Its size, bytes.
    pub size: i64,
    /// The content, or why the file is not read (a plain sentence for `describe_table`).
    pub bytes: std::result::Result<Vec<u8>, FileProblem>,
}

impl Read {
    /// The content's hash; for a file not read, a hash of why (stable while nothing changes).
    pub fn hash(&self) -> String {
        match &self.bytes {
            Ok(b) => hash(b),
            Err(why) => hash(format!("not read: {why}").as_bytes()),
        }
    }
}

/// Reads a row file `<id>.md`, never following a link and never blocking: a file that is not a
/// regular file (a link, a pipe, a device, a socket, a folder), is larger than `max_body_bytes`
/// plus [`FRONT_MATTER_ALLOWANCE`], or whose name is not a row id is not read, and the answer
/// says why. None: there is no such file.
pub fn read_row(path: &Path, max_body_bytes: i64) -> Option<Read> {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let id = name.strip_suffix(".md").unwrap_or(name);
    if !crate::names::is_row_id(id) {
        let m = fs::symlink_metadata(path).ok()?;
        return Some(Read {
            mtime_ns: mtime_ns(&m),
            size: m.len() as i64,
            bytes: Err(format!(
                "the file name is not a valid row id: {name:?} (a row id matches [a-z0-9][a-z0-9_-]*, at most 128 characters): rename the file"
            ).into()),
        });
    }
    let cap = (max_body_bytes.max(0) as u64).saturating_add(FRONT_MATTER_ALLOWANCE);
    read_bounded(
        path,
        cap,
        &format!("{cap} (max_body_bytes + 1 MiB of front matter)"),
    )
}

/// Reads a table definition `_table.yaml` the same way as [`read_row`], up to
/// [`TABLE_FILE_CAP`]. None: there is no such file.
pub fn read_table_def(path: &Path) -> Option<Read> {
    read_bounded(path, TABLE_FILE_CAP, &TABLE_FILE_CAP.to_string())
}

/// The text of a table definition, or why it cannot be had.
pub fn read_table_text(path: &Path) -> std::result::Result<String, FileProblem> {
    let read = read_table_def(path).ok_or_else(|| format!("there is no {TABLE_FILE}"))?;
    String::from_utf8(read.bytes?).map_err(|_| format!("{TABLE_FILE} is not UTF-8 text").into())
}

/// The bounded, no-follow reader every read of a row file or a definition goes through.
fn read_bounded(path: &Path, cap: u64, limit: &str) -> Option<Read> {
    use std::io::Read as _;
    use std::os::unix::fs::OpenOptionsExt;
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("the file");
    let refused = |m: &fs::Metadata, why: String| Read {
        mtime_ns: mtime_ns(m),
        size: m.len() as i64,
        bytes: Err(why.into()),
    };
    let too_big = |size: u64| format!("the file has {size} bytes, more than the limit {limit}");
    // lstat first: what is not a regular file is never opened (opening a device may act).
    let m = match fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => {
            return Some(Read {
                mtime_ns: 0,
                size: 0,
                bytes: Err(format!("{name} cannot be examined: {e}").into()),
            });
        }
    };
    if !m.is_file() {
        return Some(refused(&m, not_regular(name, &m.file_type())));
    }
    if m.len() > cap {
        return Some(refused(&m, too_big(m.len())));
    }
    // O_NOFOLLOW and O_NONBLOCK: a file swapped for a link or a pipe since the lstat is refused
    // rather than followed or waited on.
    let opened = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path);
    let mut f = match opened {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Some(refused(&m, link_refused(name)));
        }
        // Unreadable (permissions, say): reported, and looked at again by every scan (mtime 0
        // never matches), so fixing the permissions is enough.
        Err(e) => {
            return Some(Read {
                mtime_ns: 0,
                size: m.len() as i64,
                bytes: Err(format!("{name} cannot be read: {e}").into()),
            });
        }
    };
    let m = match f.metadata() {
        Ok(m) => m,
        Err(e) => {
            return Some(Read {
                mtime_ns: 0,
                size: m.len() as i64,
                bytes: Err(format!("{name} cannot be read: {e}").into()),
            });
        }
    };
    if !m.is_file() {
        return Some(refused(&m, not_regular(name, &m.file_type())));
    }
    if m.len() > cap {
        return Some(refused(&m, too_big(m.len())));
    }
    let mut bytes = Vec::with_capacity(m.len() as usize);
    if let Err(e) = (&mut f).take(cap + 1).read_to_end(&mut bytes) {
        return Some(Read {
            mtime_ns: 0,
            size: m.len() as i64,
            bytes: Err(format!("{name} cannot be read: {e}").into()),
        });
    }
    if bytes.len() as u64 > cap {
        // It grew while being read.
        return Some(refused(&m, too_big(bytes.len() as u64)));
    }
    Some(Read {
        mtime_ns: mtime_ns(&m),
        size: m.len() as i64,
        bytes: Ok(bytes),
    })
}

/// Why a file that is not a regular file is not read.
fn not_regular(name: &str, t: &fs::FileType) -> String {
    if t.is_symlink() {
        link_refused(name)
    } else {
        format!("{name} is {}, not a regular file", kind_of(t))
    }
}

fn link_refused(name: &str) -> String {
    format!(
        "{name} is a symbolic link; datanotes never follows links: replace it with a regular file"
    )
}

/// What stands at `path` when it is not a regular file (nothing there: None), in words; the
/// link itself is looked at, never followed.
pub fn not_a_file(path: &Path) -> Option<&'static str> {
    let t = path.symlink_metadata().ok()?.file_type();
    (!t.is_file()).then(|| kind_of(&t))
}

/// What a file system entry is, in words.
fn kind_of(t: &fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if t.is_symlink() {
        "a symbolic link"
    } else if t.is_dir() {
        "a folder"
    } else if t.is_fifo() {
        "a named pipe (FIFO)"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_char_device() || t.is_block_device() {
        "a device"
    } else if t.is_file() {
        "a regular file"
    } else {
        "a special file"
    }
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
