//! One server per folder; the engine's folder is private.

use super::*;

// ---- one server per folder; the engine's folder is private ----

/// Runs `datanotes ARGS` to its end (at most 20 s: a second server that did start would serve
/// for ever); answers (success, stderr, how long it took).
fn run_to_end(args: &[&std::ffi::OsStr]) -> (bool, String, Duration) {
    use std::io::Read;
    let t0 = std::time::Instant::now();
    let mut child = std::process::Command::new(bin())
        .args(args)
        .env("DATANOTES_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let exited = poll(Duration::from_secs(20), Duration::from_millis(20), || {
        child.try_wait().unwrap()
    });
    let Some(status) = exited else {
        let _ = child.kill();
        let _ = child.wait();
        panic!("datanotes {args:?} still runs after 20 s");
    };
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    (status.success(), err, t0.elapsed())
}

/// The engine's own files (`.datanotes/`) with their bytes, but for the SQLite shared-memory
/// files (which readers write).
fn meta_snapshot(dir: &std::path::Path) -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir.join(".datanotes"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_type().unwrap().is_file())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !n.ends_with("-shm"))
        .map(|n| {
            let bytes = std::fs::read(dir.join(".datanotes").join(&n)).unwrap();
            (n, bytes)
        })
        .collect();
    out.sort();
    out
}

#[test]
fn a_second_server_on_the_same_folder_is_refused_and_touches_nothing() {
    let s = Server::start();
    create_tasks(&s);
    s.ok(
        "insert_row",
        json!({"table": TASKS, "id": "t1", "values": {"title": "one"}}),
    );
    let pid = s.child.as_ref().unwrap().id();
    // A write the first server has staged (its temp file, named with its pid): a second
    // server's start-up scan would take it for a crash's leftover and remove it.
    let staged = s
        .row_path(TASKS, "t1")
        .with_file_name(format!(".t2.md.{pid}.tmp"));
    write_by_hand(&staged, "---\ntitle: two\n---\n");
    // A hand edit after it: once it is served, the watcher has seen the staged file too, and
    // the writer has nothing left to do.
    write_by_hand(&s.row_path(TASKS, "by-hand"), "---\ntitle: by hand\n---\n");
    eventually("the hand-made row by-hand", || s.has_row(TASKS, "by-hand"));
    let files = snapshot(&s.dir);
    let meta = meta_snapshot(&s.dir);
    let seq = s.seq();
    let lock = std::fs::read_to_string(s.dir.join(".datanotes/lock")).unwrap();
    let lock: Value = serde_json::from_str(&lock).unwrap();
    assert_eq!(
        lock,
        json!({"pid": pid, "address": s.url.trim_start_matches("http://")})
    );

    let db = s.dir.as_os_str();
    let (ok, err, took) = run_to_end(&[
        "serve".as_ref(),
        "--database".as_ref(),
        db,
        "--listen".as_ref(),
        "127.0.0.1:0".as_ref(),
    ]);
    assert!(!ok, "a second server was refused: {err}");
    assert!(took < Duration::from_secs(5), "refused at once: {took:?}");
    let want = format!(
        "another datanotes server (pid {pid}, {}) is serving this folder; stop it first, or use another --database",
        s.url
    );
    assert!(err.contains(&want), "stderr names the first: {err:?}");
    for noise in ["Error {", "panicked", "backtrace", "::", "InUse"] {
        assert!(
            !err.contains(noise),
            "a plain message, no {noise:?}: {err:?}"
        );
    }
    // `init` on a served folder is refused the same way.
    let (ok, err, _) = run_to_end(&["init".as_ref(), "--database".as_ref(), db]);
    assert!(!ok, "init on a served folder: {err}");
    assert!(err.contains(&want), "{err:?}");

    // Nothing of the first was touched, and it keeps serving.
    assert!(staged.exists(), "the staged write survived");
    assert!(snapshot(&s.dir) == files, "the files are unchanged");
    assert!(meta_snapshot(&s.dir) == meta, ".datanotes/ is unchanged");
    assert_eq!(s.seq(), seq);
    s.ok(
        "insert_row",
        json!({"table": TASKS, "id": "t3", "values": {"title": "three"}}),
    );
    assert_eq!(s.seq(), seq + 1);

    // Once it stops, a new server starts over the folder and says so in the lock file.
    let s = s.restart();
    let new_pid = s.child.as_ref().unwrap().id();
    assert_ne!(new_pid, pid);
    let lock: Value =
        serde_json::from_slice(&std::fs::read(s.dir.join(".datanotes/lock")).unwrap()).unwrap();
    assert_eq!(lock["pid"], new_pid);
    assert_eq!(get(&s, "t3").unwrap()["values"]["title"], "three");
}

/// The modes of `.datanotes/` and of every file and folder in it, all the way down (paths
/// relative to it; folders end with `/`).
fn meta_modes(dir: &std::path::Path) -> (u32, Vec<(String, u32)>) {
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
    let meta = dir.join(".datanotes");
    let mut out = vec![];
    let mut todo = vec![meta.clone()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let t = e.file_type().unwrap();
            let rel = e.path().strip_prefix(&meta).unwrap().display().to_string();
            if t.is_dir() {
                out.push((format!("{rel}/"), mode(&e.path())));
                todo.push(e.path());
            } else if t.is_file() {
                out.push((rel, mode(&e.path())));
            }
        }
    }
    out.sort();
    (mode(&meta), out)
}

fn assert_private(dir: &std::path::Path, when: &str) {
    let (dmode, files) = meta_modes(dir);
    assert_eq!(dmode, 0o700, "{when}: .datanotes/ is {dmode:o}");
    let names: Vec<&str> = files.iter().map(|(n, _)| n.as_str()).collect();
    for want in [
        "journal.db",
        "journal.db-wal",
        "journal.db-shm",
        "index.db",
        "index.db-wal",
        "index.db-shm",
        "settings.json",
        "apps.json",
        "webhooks.json",
        "owner-token",
        "lock",
    ] {
        assert!(names.contains(&want), "{when}: {want} is there: {names:?}");
    }
    for want in ["apps/", "cache/"] {
        assert!(names.contains(&want), "{when}: {want} is there: {names:?}");
    }
    for (n, m) in &files {
        let want = if n.ends_with('/') { 0o700 } else { 0o600 };
        assert_eq!(*m, want, "{when}: .datanotes/{n} is {m:o}");
    }
}

#[test]
fn the_engines_folder_and_files_are_private() {
    use std::os::unix::fs::PermissionsExt;
    let s = Server::start();
    create_tasks(&s);
    s.ok(
        "set_engine_settings",
        json!({"settings": {"default_limit": 50}}),
    );
    s.ok_route("apps/create", json!({"name": "viewer"}));
    s.ok_route(
        "webhooks/create",
        json!({"url": "http://127.0.0.1:9/hook", "ops": ["delete"]}),
    );
    assert_private(&s.dir, "after the first start");

    // Killed (so the databases' -wal and -shm stay), then opened up by someone: the next
    // start makes it all private again.
    let mut s = s;
    s.kill();
    let meta = s.dir.join(".datanotes");
    let set = |p: &std::path::Path, m: u32| {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap()
    };
    for (n, _) in meta_modes(&s.dir).1 {
        set(&meta.join(&n), if n.ends_with('/') { 0o755 } else { 0o644 });
    }
    set(&meta, 0o755);
    assert_eq!(meta_modes(&s.dir).0, 0o755);
    let s = s.restart_killed();
    assert_private(&s.dir, "after a start over 0644 files");

    // The writer rewrites settings.json as a new file: still 0600.
    s.ok(
        "set_engine_settings",
        json!({"settings": {"default_limit": 60}}),
    );
    assert_private(&s.dir, "after a settings change");
}
