//! One process per folder: an exclusive lock on `.datanotes/lock`, taken before recovery and
//! held while the engine lives. The lock file says who holds it: `{"pid": N}`, and once the
//! server has bound its address, `{"pid": N, "address": "127.0.0.1:5234"}`; a second process
//! reads it to say whom to stop. The `.datanotes/` folder is made private (0700) and its files
//! (0600) here too.

use std::fs::{File, OpenOptions, TryLockError};
use std::os::unix::fs::{FileExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// The folder is in use by another process.
#[derive(Debug)]
pub struct InUse {
    pub pid: Option<u32>,
    pub address: Option<String>,
}

impl std::fmt::Display for InUse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let pid = self
            .pid
            .map_or_else(|| "pid unknown".to_string(), |p| format!("pid {p}"));
        match &self.address {
            Some(a) => write!(
                f,
                "another datanotes server ({pid}, http://{a}) is serving this folder; stop it first, or use another --database"
            ),
            None => write!(
                f,
                "another datanotes process ({pid}) is using this folder; stop it first, or use another --database"
            ),
        }
    }
}

impl std::error::Error for InUse {}

/// The held lock; released when dropped (or when the process ends, however it ends).
pub struct FolderLock {
    file: File,
    pid: u32,
}

impl FolderLock {
    /// Takes the lock of the folder whose metadata is in `meta_dir`, at once or not at all.
    pub fn acquire(meta_dir: &Path) -> anyhow::Result<FolderLock> {
        let path = meta_dir.join("lock");
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&path)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let bytes = std::fs::read(&path).unwrap_or_default();
                let v = serde_json::Deserializer::from_slice(&bytes)
                    .into_iter::<serde_json::Value>()
                    .next()
                    .and_then(|r| r.ok())
                    .unwrap_or_default();
                return Err(InUse {
                    pid: v["pid"].as_u64().and_then(|p| u32::try_from(p).ok()),
                    address: v["address"].as_str().map(str::to_string),
                }
                .into());
            }
            Err(TryLockError::Error(e)) => {
                anyhow::bail!("cannot lock {}: {e}", path.display())
            }
        }
        let lock = FolderLock {
            file,
            pid: std::process::id(),
        };
        lock.write(&serde_json::json!({"pid": lock.pid}))?;
        Ok(lock)
    }

    /// Records the address the server listens on, for a second process's message.
    pub fn record_address(&self, address: &str) -> std::io::Result<()> {
        self.write(&serde_json::json!({"pid": self.pid, "address": address}))
    }

    /// Rewrites the content in place (the lock stays on this open file): the new text first,
    /// then the length, so a reader never finds the file empty.
    fn write(&self, v: &serde_json::Value) -> std::io::Result<()> {
        let text = v.to_string();
        self.file.write_all_at(text.as_bytes(), 0)?;
        self.file.set_len(text.len() as u64)?;
        Ok(())
    }
}

/// Makes `.datanotes/` readable by its owner only, all the way down: every folder 0700, every
/// file 0600 (the databases and their -wal/-shm, settings, apps, webhooks, tokens, the apps'
/// components, listings and compiled code), whatever modes they had. Links are neither followed
/// nor changed.
pub fn make_private(meta_dir: &Path) -> std::io::Result<()> {
    set_mode(meta_dir, 0o700)?;
    for entry in std::fs::read_dir(meta_dir)? {
        let entry = entry?;
        let t = entry.file_type()?;
        if t.is_file() {
            set_mode(&entry.path(), 0o600)?;
        } else if t.is_dir() {
            make_private(&entry.path())?;
        }
    }
    Ok(())
}

/// Sets a file's mode unless it has it already (a file gone meanwhile is no error).
pub fn set_mode(path: &Path, mode: u32) -> std::io::Result<()> {
    match std::fs::metadata(path) {
        Ok(m) if m.permissions().mode() & 0o7777 == mode => Ok(()),
        Ok(_) => match std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            r => r,
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}
