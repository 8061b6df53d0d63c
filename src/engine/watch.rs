//! The file watcher: while serving, a change made by hand to a row file or a table definition is
//! handed to the writer as a scan (debounced), which journals it as a hand edit.
//!
//! Debounced: 150 ms of quiet, or at least once a second under a steady stream of writes.

use super::{Cmd, Engine};
use crate::engine::journal::Actor;
use notify::event::{AccessKind, AccessMode, EventKind};
use notify::{RecursiveMode, Watcher as _};
use std::collections::{BTreeSet, HashSet};
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex, Weak, mpsc};
use std::time::Duration;

pub struct Watcher {
    _inner: Arc<Mutex<notify::RecommendedWatcher>>,
}

/// The catalog folders of the root (`.datanotes/` is not a name, so it is never one of them).
fn catalogs(root: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(root)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter(|e| e.file_name().to_str().is_some_and(crate::names::is_name))
        .map(|e| e.path())
        .collect()
}

/// The components of `path` below `root`, if it is below it and all are plain UTF-8 names.
fn rel_parts<'a>(root: &Path, path: &'a Path) -> Option<Vec<&'a str>> {
    path.strip_prefix(root)
        .ok()?
        .components()
        .map(|c| match c {
            Component::Normal(s) => s.to_str(),
            _ => None,
        })
        .collect()
}

/// What a changed path means: (table, Some(row id)) or (table, None) for its definition.
/// A catalog or schema folder (made or removed by hand, possibly with tables inside that the
/// watcher had no time to see) means: scan everything.
fn classify(root: &Path, path: &Path) -> Option<(Option<String>, Option<String>)> {
    let parts = rel_parts(root, path)?;
    match parts.as_slice() {
        [c, s, t, file] if [c, s, t].iter().all(|p| crate::names::is_name(p)) => {
            let table = format!("{c}.{s}.{t}");
            if *file == super::files::TABLE_FILE {
                Some((Some(table), None))
            } else {
                let id = file.strip_suffix(".md")?;
                // A name that is not a row id is reported by the table's scan.
                let id = crate::names::is_row_id(id).then(|| id.to_string());
                Some((Some(table), id))
            }
        }
        [c, s, t] if [c, s, t].iter().all(|p| crate::names::is_name(p)) => {
            Some((Some(format!("{c}.{s}.{t}")), None))
        }
        [c] | [c, _] if parts.iter().all(|p| crate::names::is_name(p)) && !c.is_empty() => {
            Some((None, None))
        }
        _ => None,
    }
}

/// A catalog or schema folder (`c` or `c/s` under the root) that exists: the prefix (`c.` or
/// `c.s.`) of the tables it holds.
fn folder_prefix(root: &Path, path: &Path) -> Option<String> {
    let parts = rel_parts(root, path)?;
    let ok = (1..=2).contains(&parts.len())
        && parts.iter().all(|p| crate::names::is_name(p))
        && super::files::is_real_dir(path);
    ok.then(|| format!("{}.", parts.join(".")))
}

impl Watcher {
    pub fn start(engine: &Arc<Engine>) -> notify::Result<Watcher> {
        let root = engine.root.clone();
        let (tx, rx) = mpsc::channel::<PathBuf>();
        let handler = move |ev: notify::Result<notify::Event>| {
            if let Ok(ev) = ev {
                // Opening or reading a file changes nothing, and the engine itself opens every
                // file it scans (and each folder it fsyncs): reacting to that would loop.
                if matches!(
                    ev.kind,
                    EventKind::Access(AccessKind::Open(_) | AccessKind::Close(AccessMode::Read))
                ) {
                    return;
                }
                // Hidden names are never rows or tables: skip them here, the engine's own temp
                // files (`.<id>.md.<pid>.tmp`) among them, which are most of the events.
                for p in ev.paths {
                    let hidden = p
                        .file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with('.'));
                    if !hidden {
                        let _ = tx.send(p);
                    }
                }
            }
        };
        // Links are never followed, by the watcher either.
        let mut inner = notify::RecommendedWatcher::new(
            handler,
            notify::Config::default().with_follow_symlinks(false),
        )?;
        // The root alone, then each catalog folder with everything below it: the engine's own
        // `.datanotes/` (journal and index WAL writes) stays unwatched.
        inner.watch(&root, RecursiveMode::NonRecursive)?;
        let mut watched: HashSet<PathBuf> = catalogs(&root).into_iter().collect();
        for c in &watched {
            inner.watch(c, RecursiveMode::Recursive)?;
        }
        let inner = Arc::new(Mutex::new(inner));
        let watcher = inner.clone();
        let weak: Weak<Engine> = Arc::downgrade(engine);
        std::thread::Builder::new()
            .name("datanotes-watch".into())
            .spawn(move || {
                // Debounce: wait until the folder has been quiet for 150 ms, then scan what changed;
                // under a steady stream of writes (never quiet), scan at least once a second.
                while let Ok(first) = rx.recv() {
                    let mut paths = HashSet::from([first]);
                    let since = std::time::Instant::now();
                    while let Ok(p) = rx.recv_timeout(Duration::from_millis(150)) {
                        paths.insert(p);
                        if since.elapsed() >= Duration::from_secs(1) {
                            break;
                        }
                    }
                    let Some(engine) = weak.upgrade() else { break };
                    let mut seen = BTreeSet::new();
                    // A catalog or schema folder that appeared: the tables in it may have been
                    // made before a watch covered them, so scan them (a new catalog gets its watch).
                    for p in &paths {
                        let Some(prefix) = folder_prefix(&root, p) else {
                            continue;
                        };
                        if p.parent() == Some(root.as_path()) && watched.insert(p.clone()) {
                            let mut w = watcher.lock().unwrap();
                            if let Err(e) = w.watch(p, RecursiveMode::Recursive) {
                                tracing::warn!("cannot watch {}: {e}", p.display());
                            }
                        }
                        for (table, _) in super::files::find_tables(&root) {
                            if table.starts_with(&prefix)
                                && seen.insert((Some(table.clone()), None))
                            {
                                engine.writer.submit_nowait(
                                    Cmd::Scan {
                                        table: Some(table),
                                        id: None,
                                    },
                                    Actor::hand_edit(),
                                );
                            }
                        }
                    }
                    watched.retain(|p| super::files::is_real_dir(p));
                    for p in paths {
                        if let Some(what) = classify(&root, &p)
                            && seen.insert(what.clone())
                        {
                            let (table, id) = what;
                            engine
                                .writer
                                .submit_nowait(Cmd::Scan { table, id }, Actor::hand_edit());
                        }
                    }
                }
            })
            .map_err(|e| notify::Error::generic(&e.to_string()))?;
        Ok(Watcher { _inner: inner })
    }
}
