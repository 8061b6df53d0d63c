//! The file watcher: while serving, a change made by hand to a row file or a table definition is
//! handed to the writer as a scan (debounced), which journals it as a hand edit.

use super::{Cmd, Engine};
use crate::engine::journal::Actor;
use notify::event::{AccessKind, AccessMode, EventKind};
use notify::{RecursiveMode, Watcher as _};
use std::collections::BTreeSet;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Weak, mpsc};
use std::time::Duration;

pub struct Watcher {
    _inner: notify::RecommendedWatcher,
}

/// What a changed path means: (table, Some(row id)) or (table, None) for its definition.
fn classify(root: &Path, path: &Path) -> Option<(String, Option<String>)> {
    let rel = path.strip_prefix(root).ok()?;
    let parts: Vec<&str> = rel
        .components()
        .map(|c| match c {
            Component::Normal(s) => s.to_str(),
            _ => None,
        })
        .collect::<Option<Vec<_>>>()?;
    match parts.as_slice() {
        [c, s, t, file] if [c, s, t].iter().all(|p| crate::names::is_name(p)) => {
            let table = format!("{c}.{s}.{t}");
            if *file == super::files::TABLE_FILE {
                Some((table, None))
            } else {
                let id = file.strip_suffix(".md")?;
                crate::names::is_row_id(id).then(|| (table, Some(id.to_string())))
            }
        }
        [c, s, t] if [c, s, t].iter().all(|p| crate::names::is_name(p)) => {
            Some((format!("{c}.{s}.{t}"), None))
        }
        _ => None,
    }
}

impl Watcher {
    pub fn start(engine: &Arc<Engine>) -> notify::Result<Watcher> {
        let root = engine.root.clone();
        let (tx, rx) = mpsc::channel::<PathBuf>();
        let mut inner = notify::recommended_watcher(move |ev: notify::Result<notify::Event>| {
            if let Ok(ev) = ev {
                // Opening or reading a file changes nothing, and the engine itself opens every
                // file it scans (and each folder it fsyncs): reacting to that would loop.
                if matches!(
                    ev.kind,
                    EventKind::Access(AccessKind::Open(_) | AccessKind::Close(AccessMode::Read))
                ) {
                    return;
                }
                for p in ev.paths {
                    let _ = tx.send(p);
                }
            }
        })?;
        inner.watch(&root, RecursiveMode::Recursive)?;
        let weak: Weak<Engine> = Arc::downgrade(engine);
        std::thread::Builder::new()
            .name("datanotes-watch".into())
            .spawn(move || {
                // Debounce: wait until the folder has been quiet for 150 ms, then scan what changed.
                while let Ok(first) = rx.recv() {
                    let mut paths = BTreeSet::from([first]);
                    while let Ok(p) = rx.recv_timeout(Duration::from_millis(150)) {
                        paths.insert(p);
                    }
                    let Some(engine) = weak.upgrade() else { break };
                    let mut seen = BTreeSet::new();
                    for p in paths {
                        if let Some(what) = classify(&root, &p)
                            && seen.insert(what.clone())
                        {
                            let (table, id) = what;
                            engine.writer.submit_nowait(
                                Cmd::Scan {
                                    table: Some(table),
                                    id,
                                },
                                Actor::hand_edit(),
                            );
                        }
                    }
                }
            })
            .map_err(|e| notify::Error::generic(&e.to_string()))?;
        Ok(Watcher { _inner: inner })
    }
}
