//! Writing the folder: a file atomically (temp file, fsync, rename), a folder fsynced, and
//! folders made or removed only through real folders of the database (never through a link).
//!
//! Every folder a write goes through is checked (`check_dirs`, once per folder per batch, before
//! the journal commit) to be a real folder; a write through a link is refused. Temp files a crash
//! left behind are removed by the next scan.

use super::*;

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
pub(super) fn real_dir(root: &Path, path: &Path) -> Result<bool> {
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
pub(super) fn relative_parts<'a>(root: &Path, dir: &'a Path) -> Result<Vec<&'a std::ffi::OsStr>> {
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
