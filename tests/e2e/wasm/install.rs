//! Installing from the command line, the compile cache across restarts, and a server that starts
//! before its components are compiled.

use super::*;

/// The compile cache's files with their modification times and sizes.
fn cache_files(dir: &Path) -> Vec<(String, std::time::SystemTime, u64)> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| {
            let m = e.metadata().unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                m.modified().unwrap(),
                m.len(),
            )
        })
        .collect();
    v.sort();
    v
}

/// `datanotes apps install`, the owner's command line, against the running server.
fn cli_install(s: &Server, args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_datanotes"))
        .args(["apps", "install"])
        .args(args)
        .args(["--url", &s.url, "--database"])
        .arg(&s.dir)
        .env_remove("DATANOTES_TOKEN")
        .output()
        .expect("run datanotes apps install")
}

#[test]
fn the_command_line_installs_and_updates_a_component() {
    let s = server();
    let planning = component("planning");
    let out = cli_install(
        &s,
        &[
            planning.to_str().unwrap(),
            "--name",
            "planning",
            "--write",
            "personal.tasks.*",
            "--ddl",
            "true",
            "--memory-mb",
            "64",
            "--allow-host",
            "api.example.com",
            "--allow-host",
            "127.0.0.1:8080",
        ],
    );
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stderr.contains("installing planning"), "{stderr}");
    assert!(
        stdout.contains("dn_app_"),
        "the token is printed once: {stdout}"
    );
    let app = s.app("planning");
    assert_eq!(app["kind"], "wasm", "{app}");
    assert_eq!(app["write"], json!(["personal.tasks.*"]), "{app}");
    assert_eq!(app["wasm"]["limits"]["memory_mb"], 64, "{app}");
    assert_eq!(
        app["wasm"]["allow_hosts"],
        json!(["api.example.com", "127.0.0.1:8080"]),
        "{app}"
    );
    // It works: a tool of the component, through the engine.
    let v = s.tool_ok(
        "planning_add_task",
        json!({"title": "Installed from the CLI"}),
    );
    assert!(v["id"].is_string(), "{v}");
    // Again with the same name: an update, which may take the network back.
    let out = cli_install(
        &s,
        &[
            planning.to_str().unwrap(),
            "--name",
            "planning",
            "--allow-host",
            "",
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("updating planning"), "{stderr}");
    assert_eq!(s.app("planning")["wasm"]["allow_hosts"], json!([]));
    // A bad host: the error says which and why, and nothing changed.
    let out = cli_install(
        &s,
        &[
            planning.to_str().unwrap(),
            "--name",
            "planning",
            "--allow-host",
            "http://x/y",
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("allow_hosts"), "{stderr}");
    assert_eq!(s.app("planning")["wasm"]["allow_hosts"], json!([]));
}

#[test]
fn a_restart_reuses_the_compile_cache() {
    let cache = tempfile::tempdir().unwrap();
    let cache_dir = cache.path().to_string_lossy().into_owned();
    let s = Server::start_with_env(&[("DATANOTES_CACHE_DIR", &cache_dir)]);
    s.install(
        "planning",
        "planning",
        json!({"write": ["personal.tasks.items"], "ddl": true}),
    );
    s.install("hostile", "hostile", json!({}));
    s.tool_ok("planning_add_task", json!({"title": "Before the restart"}));
    let before = cache_files(cache.path());
    // Next to each compiled artifact, the tools its component listed (`.json`).
    assert_eq!(
        before.iter().filter(|f| f.0.ends_with(".cwasm")).count(),
        2,
        "one compiled artifact per component: {before:?}"
    );
    assert!(
        before
            .iter()
            .all(|(n, _, len)| (n.ends_with(".cwasm") || n.ends_with(".json")) && *len > 0)
    );
    // The installed components are kept by content.
    let apps_dir = s.dir.join(".datanotes/apps");
    assert_eq!(std::fs::read_dir(&apps_dir).unwrap().count(), 2);

    let s = s.restart();
    let started = Instant::now();
    eventually("the apps are listed after the restart", || {
        let a = s.app("planning");
        let h = s.app("hostile");
        a["tools"].as_array().is_some_and(|t| t.len() == 3)
            && h["tools"].as_array().is_some_and(|t| !t.is_empty())
    });
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "listed {:?} after start",
        started.elapsed()
    );
    let list = s.tool_ok("planning_list_tasks", json!({}));
    assert_eq!(list["rows"][0]["values"]["title"], "Before the restart");
    s.tool_ok("hostile_ok", json!({}));
    assert_eq!(
        cache_files(cache.path()),
        before,
        "the compile cache was rewritten: the components were compiled again"
    );

    // A deleted app's component goes; its cache entry stays for a reinstall.
    let (st, v) = s.post(
        "/datanotes/apps/delete/",
        Some(&s.token),
        &json!({"name": "hostile"}),
    );
    assert_eq!(st, 200, "{v}");
    assert_eq!(std::fs::read_dir(&apps_dir).unwrap().count(), 1);
    s.install("hostile", "hostile", json!({}));
    assert_eq!(cache_files(cache.path()), before);
}

#[test]
fn the_server_starts_before_its_components_are_compiled() {
    // Installed with the shared cache, restarted with an empty one: the Python component must
    // be compiled again (seconds), and the server must not wait for it to start serving.
    let s = server();
    s.install(
        "journal",
        "journal",
        json!({"write": ["personal.notes.daily"], "ddl": true}),
    );
    s.tool_ok(
        "journal_append",
        json!({"text": "before the restart", "date": "2026-11-01"}),
    );
    let mut s = s;
    s.stop();
    let empty = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let s2 = Server::start_opts(
        &s.dir,
        &[],
        &[("DATANOTES_CACHE_DIR", &empty.path().to_string_lossy())],
    );
    let serving = started.elapsed();
    assert_eq!(s2.get("/datanotes/health").0, 200);
    // Its last known tools are listed at once; it answers while the component compiles, then
    // the app's tools answer.
    assert!(
        s2.app("journal")["tools"]
            .as_array()
            .is_some_and(|t| !t.is_empty()),
        "the last known tools are not listed at start: {}",
        s2.app("journal")
    );
    // The first call waits for the compile, which takes minutes for a debug build on a loaded
    // machine: a client without the kit's 60 s timeout.
    let patient = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(600))
        .build()
        .unwrap();
    let read = || -> Value {
        patient
            .post(format!("{}/datanotes/apps/call/", s2.url))
            .bearer_auth(&s2.token)
            .json(&json!({"tool": "journal_read", "arguments": {"date": "2026-11-01"}}))
            .send()
            .and_then(|r| r.json())
            .unwrap_or_else(|e| panic!("journal_read after the restart: {e}"))
    };
    let mut last = Value::Null;
    let answered = poll(Duration::from_secs(600), Duration::from_millis(50), || {
        last = read();
        (last["ok"] == true).then_some(())
    });
    assert!(
        answered.is_some(),
        "journal never answered after the restart: {last}"
    );
    let compiled = started.elapsed();
    let day = s2.tool_ok("journal_read", json!({"date": "2026-11-01"}));
    assert_eq!(day["entries"].as_array().unwrap().len(), 1, "{day}");
    let artifacts = std::fs::read_dir(empty.path())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".cwasm"))
        .count();
    assert_eq!(artifacts, 1);
    assert!(
        serving < compiled / 2,
        "serving after {serving:?}, the component compiled after {compiled:?}"
    );
    drop(s2);
    drop(s);
}
