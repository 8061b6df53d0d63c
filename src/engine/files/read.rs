//! Reading the folder as hostile input: tables and rows found without following a link,
//! every file read bounded (and only a regular file), what is refused said in a sentence.
//!
//! Every read of a row file or `_table.yaml` goes through one bounded reader (`read_row`,
//! `read_table_def`): `lstat`, then `O_NOFOLLOW | O_NONBLOCK`, `fstat`, at most a cap + 1 bytes.
//! Links, pipes, devices, sockets, folders and oversized files are reported invalid, never read;
//! stats are `lstat`s.

use super::*;

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
pub(super) fn warn_once(path: &Path, msg: &str) {
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
pub(super) fn stale_temp(name: &str) -> bool {
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
pub(super) fn read_bounded(path: &Path, cap: u64, limit: &str) -> Option<Read> {
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
pub(super) fn not_regular(name: &str, t: &fs::FileType) -> String {
    if t.is_symlink() {
        link_refused(name)
    } else {
        format!("{name} is {}, not a regular file", kind_of(t))
    }
}

pub(super) fn link_refused(name: &str) -> String {
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
pub(super) fn kind_of(t: &fs::FileType) -> &'static str {
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
