//! Where a client command (`apps ...`, `mcp`, `ui`) finds its server, so that no port is ever
//! assumed: `serve` records its address in `DIR/.datanotes/server.json` ([`Recorded`], removed
//! when it stops); a client reads it from `--database DIR`, or takes `--url` (`DATANOTES_URL`).
//! Every failure names the folder, file or address at fault and how to fix it.
//!
//! The record holds the server's address and pid.

use anyhow::{Result, anyhow, bail};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The file `serve` writes in `.datanotes/`.
pub const SERVER_FILE: &str = "server.json";

/// What `.datanotes/server.json` holds.
#[derive(Debug, Serialize, Deserialize)]
pub struct ServerRecord {
    /// The server's base URL, `http://127.0.0.1:5234`.
    pub address: String,
    /// The server's process id.
    pub pid: u32,
}

/// The record of a running server: written at start, removed on drop (at stop) if it is still
/// this process's.
pub struct Recorded {
    path: PathBuf,
}

impl Recorded {
    /// Writes `meta_dir/server.json` (0600, atomically) for the server at `address`.
    pub fn write(meta_dir: &Path, address: &str) -> std::io::Result<Recorded> {
        let path = meta_dir.join(SERVER_FILE);
        let rec = ServerRecord {
            address: address.to_string(),
            pid: std::process::id(),
        };
        crate::auth::write_private(&path, serde_json::to_string(&rec)?.as_bytes())?;
        Ok(Recorded { path })
    }
}

impl Drop for Recorded {
    fn drop(&mut self) {
        let ours = std::fs::read_to_string(&self.path)
            .ok()
            .and_then(|t| serde_json::from_str::<ServerRecord>(&t).ok())
            .is_some_and(|r| r.pid == std::process::id());
        if ours {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// A server to talk to: its base URL and where that came from.
#[derive(Debug, Clone)]
pub struct Endpoint {
    /// The base URL, without a trailing slash.
    pub url: String,
    /// The record it was read from (`None`: given with `--url` / `DATANOTES_URL`).
    pub record: Option<(PathBuf, u32)>,
}

/// Checks that `db` is a database folder; the error names it and says what to give instead.
pub fn check_database(db: &Path) -> Result<()> {
    if !db.is_dir() {
        bail!(
            "{}: no such folder; give --database the folder `datanotes serve --database DIR` serves \
             (or create one with `datanotes init --database {}`)",
            db.display(),
            db.display()
        );
    }
    if !db.join(".datanotes").is_dir() {
        bail!(
            "{} is not a datanotes database (it has no .datanotes/ folder); give --database the \
             folder `datanotes serve --database DIR` serves (or create one with `datanotes init \
             --database {}`)",
            db.display(),
            db.display()
        );
    }
    Ok(())
}

/// The owner token of a database folder; the error names the file.
pub fn owner_token(db: &Path) -> Result<String> {
    check_database(db)?;
    let path = db.join(".datanotes/owner-token");
    crate::auth::read_owner_token(db).map_err(|e| {
        anyhow!(
            "cannot read the owner token {}: {}; start the server once with `datanotes serve \
             --database {}` (it creates the token), or give --token",
            path.display(),
            plain_io(&e),
            db.display()
        )
    })
}

/// An I/O error without its Rust decoration (`No such file or directory (os error 2)` -> `no
/// such file`).
fn plain_io(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound => "no such file".into(),
        std::io::ErrorKind::PermissionDenied => "permission denied".into(),
        _ => e.to_string(),
    }
}

/// The server to talk to: `url` if given, else the one recorded in `database`.
pub fn find(url: Option<&str>, database: Option<&Path>) -> Result<Endpoint> {
    if let Some(u) = url.filter(|u| !u.trim().is_empty()) {
        let u = u.trim().trim_end_matches('/');
        if !(u.starts_with("http://") || u.starts_with("https://")) {
            bail!("--url {u:?} is not an http:// address; give e.g. --url http://127.0.0.1:5234");
        }
        return Ok(Endpoint {
            url: u.to_string(),
            record: None,
        });
    }
    let Some(db) = database else {
        bail!(
            "which server? give --database DIR (the folder a running `datanotes serve --database \
             DIR` serves; its address is in DIR/.datanotes/server.json) or --url URL (or \
             DATANOTES_URL)"
        );
    };
    check_database(db)?;
    let path = db.join(".datanotes").join(SERVER_FILE);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => bail!(
            "no server is serving {}: {} does not exist (a running server writes it); start one \
             with `datanotes serve --database {}`",
            db.display(),
            path.display(),
            db.display()
        ),
        Err(e) => bail!("cannot read {}: {}", path.display(), plain_io(&e)),
    };
    let rec: ServerRecord = serde_json::from_str(&text).map_err(|e| {
        anyhow!(
            "{} is not a server record ({e}); remove it and start the server with `datanotes \
             serve --database {}`",
            path.display(),
            db.display()
        )
    })?;
    Ok(Endpoint {
        url: rec.address.trim_end_matches('/').to_string(),
        record: Some((path, rec.pid)),
    })
}

impl Endpoint {
    /// The error when nothing answers at this address: which address, where it came from, and
    /// how to start the server.
    pub fn unreachable(&self) -> anyhow::Error {
        match &self.record {
            Some((path, pid)) => {
                let db = path
                    .parent()
                    .and_then(Path::parent)
                    .map(|d| d.display().to_string())
                    .unwrap_or_default();
                // SAFETY: kill(pid, 0) only asks whether the process exists.
                let alive = unsafe { libc::kill(*pid as libc::pid_t, 0) } == 0;
                let why = if alive {
                    format!("the server (pid {pid}) does not answer")
                } else {
                    format!(
                        "the server that recorded it (pid {pid}) is no longer running: it stopped \
                         without removing {}",
                        path.display()
                    )
                };
                anyhow!(
                    "nothing answers at {} (read from {}): {why}; start the server with \
                     `datanotes serve --database {db}`",
                    self.url,
                    path.display()
                )
            }
            None => anyhow!(
                "nothing answers at {} (given by --url or DATANOTES_URL): is the server running? \
                 start it with `datanotes serve --database DIR`, or give --database DIR to find \
                 its address",
                self.url
            ),
        }
    }

    /// A failed request, in plain words: unreachable, too slow, or what else went wrong.
    pub fn request_failed(&self, e: &reqwest::Error) -> anyhow::Error {
        if e.is_connect() {
            self.unreachable()
        } else if e.is_timeout() {
            anyhow!("the server at {} did not answer in time", self.url)
        } else {
            let mut cause: &dyn std::error::Error = e;
            while let Some(c) = cause.source() {
                cause = c;
            }
            anyhow!("the request to {} failed: {cause}", self.url)
        }
    }
}
