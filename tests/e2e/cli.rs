//! The command line as a user meets it: `apps ...`, `ui` and `mcp` find the server from the
//! database folder (`.datanotes/server.json`, written by `serve`, removed at stop), and every
//! failure is one plain line naming the folder, file or address at fault and how to fix it,
//! never a backtrace, whatever `RUST_BACKTRACE` says.

use crate::kit::*;
use serde_json::{Value, json};
use std::path::Path;
use std::process::Command;

/// Runs `datanotes ARGS` with `RUST_BACKTRACE=1` and no URL or token from the environment:
/// (exit code, stdout, stderr).
fn cli(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(bin())
        .args(args)
        .env("RUST_BACKTRACE", "1")
        .env_remove("DATANOTES_URL")
        .env_remove("DATANOTES_TOKEN")
        .output()
        .expect("run datanotes");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A user error: exit 1, one `datanotes: ...` line (a server's hint may follow), no backtrace.
fn refused(args: &[&str]) -> String {
    let (code, _, err) = cli(args);
    assert_eq!(code, 1, "{args:?}: {err}");
    assert!(err.starts_with("datanotes: "), "{err}");
    assert!(!err.to_lowercase().contains("backtrace"), "{err}");
    assert!(!err.contains("os error"), "no Rust error text: {err}");
    err
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn client_commands_find_the_server_from_the_folder() {
    let mut srv = Server::start();
    let db = srv.dir.clone();
    let record: Value =
        serde_json::from_str(&std::fs::read_to_string(db.join(".datanotes/server.json")).unwrap())
            .unwrap();
    assert_eq!(record["address"], srv.url.as_str());
    assert_eq!(record["pid"], srv.child.as_ref().unwrap().id());
    // No --url: the address comes from the folder.
    let (code, out, err) = cli(&["apps", "status", "--database", s(&db)]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("no apps"), "{out}");
    let (code, out, err) = cli(&["apps", "list", "--json", "--database", s(&db)]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        serde_json::from_str::<Value>(&out).unwrap(),
        json!({"apps": []})
    );
    // The console link, with the owner token.
    let (code, out, _) = cli(&["ui", "--database", s(&db)]);
    assert_eq!(code, 0);
    assert_eq!(
        out.trim(),
        format!("{}/datanotes/ui/#token={}", srv.url, srv.token)
    );
    // Stopped: the record is gone, and the commands say no server serves the folder.
    srv.stop();
    assert!(!db.join(".datanotes/server.json").exists());
    let err = refused(&["apps", "status", "--database", s(&db)]);
    assert!(
        err.contains(&format!("no server is serving {}", db.display())),
        "{err}"
    );
    assert!(
        err.contains(&format!("datanotes serve --database {}", db.display())),
        "{err}"
    );
}

#[test]
fn each_error_names_what_is_at_fault_and_how_to_fix_it() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    // No folder, no address.
    let err = refused(&["apps", "status"]);
    assert!(
        err.contains("--database DIR") && err.contains("--url"),
        "{err}"
    );
    // A folder that does not exist, or is not a database.
    let missing = root.join("nope");
    let err = refused(&["apps", "status", "--database", s(&missing)]);
    assert!(
        err.contains(&format!("{}: no such folder", missing.display())),
        "{err}"
    );
    let err = refused(&["ui", "--database", s(root)]);
    assert!(
        err.contains("is not a datanotes database") && err.contains("datanotes init"),
        "{err}"
    );
    // A database no server serves.
    let db = root.join("db");
    let (code, _, err) = cli(&["init", "--database", s(&db)]);
    assert_eq!(code, 0, "{err}");
    let err = refused(&["apps", "get", "x", "--database", s(&db)]);
    assert!(
        err.contains(".datanotes/server.json does not exist"),
        "{err}"
    );
    // A record left by a killed server: the address tried, the file, how to start it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    std::fs::write(
        db.join(".datanotes/server.json"),
        format!(r#"{{"address": "http://127.0.0.1:{port}", "pid": 999999}}"#),
    )
    .unwrap();
    let err = refused(&["apps", "status", "--database", s(&db)]);
    assert!(
        err.contains(&format!("nothing answers at http://127.0.0.1:{port}")),
        "{err}"
    );
    assert!(err.contains("pid 999999) is no longer running"), "{err}");
    assert!(
        err.contains(&format!("datanotes serve --database {}", db.display())),
        "{err}"
    );
    // A URL nobody answers at.
    let err = refused(&[
        "apps",
        "status",
        "--url",
        &format!("http://127.0.0.1:{port}"),
        "--token",
        "t",
    ]);
    assert!(
        err.contains(&format!(
            "nothing answers at http://127.0.0.1:{port} (given by --url"
        )),
        "{err}"
    );
    // A missing owner token names its file.
    std::fs::remove_file(db.join(".datanotes/owner-token")).unwrap();
    let err = refused(&["ui", "--url", "http://127.0.0.1:1", "--database", s(&db)]);
    assert!(
        err.contains(&format!("{}", db.join(".datanotes/owner-token").display())),
        "{err}"
    );
    // The server's refusal: its message, the address, its hint.
    let srv = Server::start();
    let err = refused(&["apps", "get", "ghost", "--database", s(&srv.dir)]);
    assert!(
        err.contains("no app ghost") && err.contains(&srv.url) && err.contains("hint: "),
        "{err}"
    );
    // The hint names the command that helps (and the route, for HTTP clients).
    assert!(
        err.contains("datanotes apps status lists the apps"),
        "{err}"
    );
}

#[test]
fn apps_status_shows_up_down_and_skipped_apps() {
    let srv = Server::start();
    let planning = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/plugins/planning.wasm");
    assert!(
        planning.exists(),
        "{} is missing: run bash scripts/build-plugins",
        planning.display()
    );
    for name in ["planning", "copycat"] {
        let v = srv.ok_route(
            "apps/create",
            json!({"name": name, "wasm_path": planning, "write": ["personal.tasks.*"], "ddl": true}),
        );
        assert_eq!(v["app"]["kind"], "wasm", "{v}");
    }
    // A remote app nobody serves: create says it was not reached, and why.
    let (code, _, err) = cli(&[
        "apps",
        "create",
        "--database",
        s(&srv.dir),
        "--name",
        "weather",
        "--mcp-url",
        "http://127.0.0.1:9/mcp",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.starts_with("weather: not reached at http://127.0.0.1:9/mcp: "),
        "{err}"
    );
    let (code, out, err) = cli(&["apps", "status", "--database", s(&srv.dir)]);
    assert_eq!(code, 0, "{err}");
    let line = |name: &str| -> Vec<String> {
        let l = out
            .lines()
            .find(|l| l.starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("{out}"));
        l.split_whitespace().map(String::from).collect()
    };
    assert_eq!(
        line("planning")[..5],
        ["planning", "wasm", "reachable", "3", "0"],
        "{out}"
    );
    // What a WASM app holds now: its live instances and their memory (`runtime` in apps/get).
    let held = |name: &str| {
        let rt = srv.ok_route("apps/get", json!({"name": name}))["app"]["runtime"].clone();
        let mib = rt["memoryBytes"].as_u64().unwrap() as f64 / 1048576.0;
        format!("{} ({mib:.1} MiB)", rt["instances"])
    };
    assert!(
        line("planning").join(" ").contains(&held("planning")),
        "{out}"
    );
    assert_eq!(
        line("copycat")[..5],
        ["copycat", "wasm", "reachable", "0", "3"],
        "{out}"
    );
    assert_eq!(
        line("weather")[..6],
        ["weather", "remote", "NOT", "REACHABLE", "0", "0"],
        "{out}"
    );
    let weather = out.lines().find(|l| l.starts_with("weather ")).unwrap();
    assert!(
        weather.contains("http://127.0.0.1:9/mcp") && weather.contains(" s ago)"),
        "{out}"
    );
    assert!(
        out.contains("skipped planning_add_task: the name is held by planning"),
        "{out}"
    );
    // After a call, its instance is warm (the default idle_ms is 60 s) and listed.
    srv.ok_route(
        "apps/call",
        json!({"tool": "planning_list_tasks", "arguments": {}}),
    );
    let (code, out, err) = cli(&["apps", "status", "--database", s(&srv.dir)]);
    assert_eq!(code, 0, "{err}");
    let planning = out.lines().find(|l| l.starts_with("planning ")).unwrap();
    assert!(planning.contains("  1 ("), "{out}");
    assert!(planning.contains(&held("planning")), "{out}");
    let weather = out.lines().find(|l| l.starts_with("weather ")).unwrap();
    assert!(weather.contains(" 0  -  "), "{out}");
    // One app, and a refresh that says what changed.
    let (code, out, _) = cli(&["apps", "get", "planning", "--database", s(&srv.dir)]);
    assert_eq!(code, 0);
    assert_eq!(
        serde_json::from_str::<Value>(&out).unwrap()["tools"]
            .as_array()
            .unwrap()
            .len(),
        3
    );
    let (code, out, err) = cli(&["apps", "refresh", "planning", "--database", s(&srv.dir)]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("added: none; removed: none"), "{out}");
}

#[test]
fn completions_and_help() {
    let (code, out, _) = cli(&["completions", "bash"]);
    assert_eq!(code, 0);
    assert!(out.contains("datanotes") && out.contains("status"), "{out}");
    for shell in ["zsh", "fish"] {
        assert_eq!(cli(&["completions", shell]).0, 0, "{shell}");
    }
    // Every flag is described.
    for cmd in [
        &["serve", "--help"][..],
        &["apps", "status", "--help"],
        &["ui", "--help"],
        &["mcp", "--help"],
    ] {
        let (code, out, _) = cli(cmd);
        assert_eq!(code, 0);
        for l in out.lines().filter(|l| l.trim_start().starts_with("--")) {
            assert!(
                l.trim().contains("  "),
                "{cmd:?}: a flag without a description: {l}"
            );
        }
    }
}

#[test]
fn apps_install_says_a_world_mismatch_before_compiling_or_sending() {
    let plugins = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/plugins");
    // The components of the world pass the check (Rust, Python, JavaScript guests).
    for ok in ["planning", "journal", "bookmarks", "fetcher"] {
        let bytes = std::fs::read(plugins.join(format!("{ok}.wasm"))).unwrap();
        assert_eq!(
            datanotes::apps::wasm::check_before_compile(&bytes),
            None,
            "{ok}"
        );
    }
    // A component for another world is refused by the command itself: nothing listens at the
    // address given, so the refusal cannot have come from a server or a compile.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mismatch = plugins.join("mismatch.wasm");
    let err = refused(&[
        "apps",
        "install",
        s(&mismatch),
        "--name",
        "mismatch",
        "--url",
        &format!("http://127.0.0.1:{port}"),
        "--token",
        "t",
    ]);
    assert!(
        err.contains(&format!("{} cannot be installed", mismatch.display())),
        "{err}"
    );
    assert!(
        err.contains("call-tool takes (name, arguments), the world's takes (name, arguments, ctx)"),
        "{err}"
    );
    assert!(err.contains("wit/datanotes-app.wit"), "{err}");
    // A file that is not there is named.
    let err = refused(&[
        "apps",
        "install",
        "nope.wasm",
        "--name",
        "x",
        "--url",
        "http://127.0.0.1:1",
        "--token",
        "t",
    ]);
    assert!(err.contains("nope.wasm: no such file"), "{err}");
}

#[test]
fn grants_list_and_revoke() {
    let srv = Server::start();
    // No agent was allowed yet: no grants, said in words (and as JSON).
    let (code, out, err) = cli(&["grants", "list", "--database", s(&srv.dir)]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("no grants"), "{out}");
    let (code, out, err) = cli(&["grants", "list", "--json", "--database", s(&srv.dir)]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        serde_json::from_str::<Value>(&out).unwrap()["grants"],
        json!([])
    );
    // An unknown id: the server's refusal, naming it, with the address.
    let err = refused(&["grants", "revoke", "nope", "--database", s(&srv.dir)]);
    assert!(
        err.contains("nope") && err.contains("grant") && err.contains(&srv.url),
        "{err}"
    );
    // Every flag is described.
    for cmd in [
        &["grants", "list", "--help"],
        &["grants", "revoke", "--help"],
    ] {
        let (code, out, _) = cli(cmd);
        assert_eq!(code, 0);
        for l in out.lines().filter(|l| l.trim_start().starts_with("--")) {
            assert!(
                l.trim().contains("  "),
                "{cmd:?}: a flag without a description: {l}"
            );
        }
    }
}
