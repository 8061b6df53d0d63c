//! The test kit: one harness for every end-to-end test and for the bench
//! (`examples/bench/`, which includes this folder by path).
//!
//! The tests talk to the real `datanotes` binary over 127.0.0.1, like any client would:
//!
//! - [`Launch`] is the one way to start `datanotes serve` (binary, folder, arguments,
//!   environment; it waits for the address the server prints and reads the owner token;
//!   `logs_to` keeps its stderr, under its default log filter, in a file);
//!   [`process`] also holds signals (through `libc`), stop and kill, and `/proc` figures.
//! - [`Server`] is a started server over a temporary folder with blocking HTTP helpers: `ok`,
//!   `refused`, `call_as`, `sse`, restarts that keep the folder, arguments and environment.
//! - [`Agent`] is the one MCP client (rmcp, made blocking; it counts the `list_changed`
//!   notifications it receives); [`mcp::connect_on`] opens the same
//!   session on a runtime of the caller's (the bench's timed calls).
//! - [`App`] runs the `remote_app` example as a remote MCP app; [`create_app`] makes an app entry;
//!   [`fake_app`] serves a small MCP server written in a test (one that misbehaves, or notes what
//!   it received).
//! - [`registry::Registry`] runs a real OCI registry (Debian's `docker-registry`) and pushes
//!   components to it with the real `wkg`; [`hostile_registry::HostileRegistry`] is a tiny one
//!   that lies, hangs or never ends (and [`hostile_registry::FileServer`] serves URL sources).
//! - Below: [`snapshot`] of the files, [`eventually`], the error shape, the `work.crm.*` tables
//!   most engine tests use, hand edits.
//!
//! A test module starts with `use crate::kit::*;`. Not every item (or re-export) is used by both
//! the tests and the bench, hence `dead_code` and `unused_imports` are allowed here.
#![allow(dead_code, unused_imports)]

pub mod fake_app;
pub mod hostile_registry;
pub mod mcp;
pub mod oauth;
pub mod process;
pub mod registry;
mod server;
mod sse;

pub use mcp::{Agent, is_error, runtime, structured, text, transport_config};
pub use process::{App, Launch, bin, example, signal};
pub use server::{Server, create_app};
pub use sse::{SseEvent, SseStream};

use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Every file of the database except the engine's own `.datanotes/`, with its bytes.
pub fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    fn walk(root: &Path, d: &Path, out: &mut BTreeMap<PathBuf, Vec<u8>>) {
        for e in std::fs::read_dir(d).unwrap().flatten() {
            let p = e.path();
            if p.file_name().is_some_and(|n| n == ".datanotes") {
                continue;
            }
            if p.is_dir() {
                walk(root, &p, out);
            } else {
                out.insert(
                    p.strip_prefix(root).unwrap().to_path_buf(),
                    std::fs::read(&p).unwrap(),
                );
            }
        }
    }
    walk(dir, dir, &mut out);
    out
}

/// How long a test waits for something the server does in the background before it fails:
/// 20 s, times `DATANOTES_TEST_TIME_FACTOR` (a slower machine may raise it). A hang guard, never
/// a speed target: what should be fast is measured in `examples/bench`.
pub fn patience() -> Duration {
    static FACTOR: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    let f = *FACTOR.get_or_init(|| {
        std::env::var("DATANOTES_TEST_TIME_FACTOR")
            .ok()
            .and_then(|v| v.parse::<f64>().ok())
            .filter(|f| f.is_finite() && *f >= 1.0)
            .unwrap_or(1.0)
    });
    Duration::from_secs_f64(20.0 * f)
}

/// Calls `f` every `every` until it answers `Some`, for at most `limit`; answers what it
/// answered, or None once `limit` has passed. The kit's one poll interval: every wait on
/// something a test can only look at (a process, a file, an answer) goes through here.
pub fn poll<T>(limit: Duration, every: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() >= deadline {
            return None;
        }
        // Polling: the state looked at has no event to wait on.
        std::thread::sleep(every);
    }
}

/// Waits until `f` answers `Ok` (for things the server does in the background), up to
/// [`patience`], and answers its value; `Err` says what `f` saw instead, and the failure message
/// quotes the last one.
pub fn eventually_ok<T>(what: &str, mut f: impl FnMut() -> Result<T, String>) -> T {
    let mut last = String::new();
    poll(patience(), Duration::from_millis(50), || match f() {
        Ok(v) => Some(v),
        Err(seen) => {
            last = seen;
            None
        }
    })
    .unwrap_or_else(|| {
        panic!(
            "timed out after {:?} waiting for: {what}; last saw: {last}",
            patience()
        )
    })
}

/// Waits until `f` answers the same for `quiet` (up to [`patience`]) and answers it: for what
/// is defined by a quiet time, like the coalesced `list_changed` notifications (the first at
/// once, the rest once a burst has been quiet for 200 ms).
pub fn settled<T: PartialEq + std::fmt::Debug>(
    what: &str,
    quiet: Duration,
    mut f: impl FnMut() -> T,
) -> T {
    let mut last = (f(), Instant::now());
    let mut stable = false;
    poll(patience(), Duration::from_millis(20), || {
        let v = f();
        if v != last.0 {
            last = (v, Instant::now());
        }
        stable = last.1.elapsed() >= quiet;
        stable.then_some(())
    });
    assert!(
        stable,
        "{what} never stayed the same for {quiet:?}: {:?}",
        last.0
    );
    last.0
}

/// Waits until `f` holds (for things the server does in the background, like the file watcher),
/// up to [`patience`]. ([`eventually_ok`] also says what it saw last.)
pub fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    eventually_ok(what, || if f() { Ok(()) } else { Err("not yet".into()) })
}

/// An error object has a code, a message and, when present, string table/column/rule/hint.
pub fn assert_error_shape(e: &Value) {
    assert!(e["code"].is_string(), "error without code: {e}");
    assert!(e["message"].is_string(), "error without message: {e}");
    for k in ["table", "column", "rule", "hint"] {
        assert!(
            e.get(k).is_none_or(Value::is_string),
            "error field {k} is not a string: {e}"
        );
    }
    let allowed = ["code", "message", "table", "column", "rule", "hint"];
    for k in e.as_object().expect("error object").keys() {
        assert!(
            allowed.contains(&k.as_str()),
            "unexpected error field {k}: {e}"
        );
    }
}

/// The table most tests use, with one column of every type.
pub const TASKS: &str = "work.crm.tasks";
/// The table `TASKS` links to (`owner`).
pub const PEOPLE: &str = "work.crm.people";

/// Creates `PEOPLE` (with the rows `ada` and `alan`) and `TASKS`.
pub fn create_tasks(s: &Server) {
    s.ok(
        "create_table",
        serde_json::json!({
            "table": PEOPLE,
            "description": "People",
            "columns": {
                "name": {"type": "text", "required": true},
                "email": {"type": "text", "unique": true, "pattern": "^[^@ ]+@[^@ ]+$"}
            }
        }),
    );
    s.ok(
        "create_table",
        serde_json::json!({
            "table": TASKS,
            "description": "Things to do",
            "columns": {
                "title": {"type": "text", "required": true, "max": 80},
                "status": {"type": "enum", "values": ["todo", "doing", "done"], "default": "todo"},
                "estimate": {"type": "integer", "min": 0, "max": 100},
                "score": {"type": "number", "min": -1.5, "max": 99.5},
                "done": {"type": "boolean"},
                "due": {"type": "date", "min": "2000-01-01", "max": "2099-12-31"},
                "at": {"type": "datetime"},
                "tags": {"type": "list", "max": 3, "pattern": "^[a-z]+$"},
                "owner": {"type": "link", "table": PEOPLE},
                "code": {"type": "text", "unique": true, "pattern": "^[A-Z]{2}-[0-9]+$"}
            }
        }),
    );
    for (id, name) in [("ada", "Ada Lovelace"), ("alan", "Alan Turing")] {
        s.ok(
            "insert_row",
            serde_json::json!({"table": PEOPLE, "id": id, "values": {"name": name}}),
        );
    }
}

/// Writes a file the way an editor that saves by rename does (no fsync): the whole text goes to a
/// hidden file beside it, which then takes the file's name. Written in place instead, the file is
/// empty between the truncate and the write, and a loaded machine can pause the test there for
/// longer than the watcher's 150 ms of quiet: the engine then rightly journals the empty file as a
/// hand edit of its own (CI saw it). In-place edits have their own tests, which write with
/// `std::fs::write` and assert only what they are about.
pub fn write_by_hand(path: &Path, text: &str) {
    if let Some(d) = path.parent() {
        std::fs::create_dir_all(d).unwrap();
    }
    let name = path.file_name().unwrap().to_string_lossy();
    let tmp = path.with_file_name(format!(".{name}.saving"));
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// Deletes the index files (`.datanotes/index.db*`) of a stopped server's folder; answers how many.
pub fn remove_index(dir: &Path) -> usize {
    let mut n = 0;
    for e in std::fs::read_dir(dir.join(".datanotes")).unwrap().flatten() {
        if e.file_name().to_string_lossy().starts_with("index.db") {
            std::fs::remove_file(e.path()).unwrap();
            n += 1;
        }
    }
    n
}

/// What one of the project's installers (`scripts/<script>`, run with `--print` and `args`)
/// prints: the paths of what it installed under `target/`, one a line. It installs them the
/// first time; later runs find them there.
pub fn installed(script: &str, args: &[&str]) -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = std::process::Command::new("bash")
        .arg(root.join("scripts").join(script))
        .arg("--print")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("bash scripts/{script}: {e}"));
    assert!(
        out.status.success(),
        "scripts/{script} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(PathBuf::from)
        .collect()
}

/// The default embedding model's folder (`scripts/fetch-model` installs it under `target/models/`
/// the first time; later calls find it there).
pub fn model_dir() -> PathBuf {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| installed("fetch-model", &[]).remove(0))
        .clone()
}

impl Server {
    /// A server over a new database with the default semantic model (and `env`).
    pub fn start_semantic(env: &[(&str, &str)]) -> Server {
        let model = model_dir();
        let mut all = vec![("DATANOTES_MODEL", model.to_str().unwrap())];
        all.extend_from_slice(env);
        Server::start_with_env(&all)
    }

    /// `/datanotes/health` as the owner sees it.
    pub fn health(&self) -> Value {
        self.http
            .get(format!("{}/datanotes/health", self.url))
            .bearer_auth(&self.token)
            .send()
            .expect("health")
            .json()
            .expect("health JSON")
    }

    /// The semantic index's status in `/datanotes/health` (as the owner sees it).
    pub fn semantic(&self) -> Value {
        self.health()["semantic"].clone()
    }

    /// Waits until `n` long polls (`changes/` with `wait_ms`) wait for a first change
    /// (`feed.waiting` in the owner's health).
    pub fn polls_waiting(&self, n: u64) {
        eventually_ok(&format!("{n} long polls waiting"), || {
            let h = self.health();
            if h["feed"]["waiting"] == n {
                Ok(())
            } else {
                Err(h.to_string())
            }
        })
    }

    /// Waits until the semantic index is ready and covers every commit so far; answers its status.
    pub fn indexed(&self) -> Value {
        let mut last = (0, Value::Null);
        poll(Duration::from_secs(120), Duration::from_millis(20), || {
            last = (self.seq(), self.semantic());
            let (seq, st) = &last;
            (st["state"] == "ready" && st["indexedThrough"].as_i64() >= Some(*seq))
                .then(|| st.clone())
        })
        .unwrap_or_else(|| {
            panic!(
                "the semantic index did not catch up with seq {}: {}",
                last.0, last.1
            )
        })
    }
}
