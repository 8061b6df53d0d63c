//! The command lines of the manual's chapters, run as written against a running server: the
//! apps chapter's `datanotes apps ...` block (`docs/apps-host.md`) and the telemetry chapter's
//! `datanotes metrics-tokens ...` block (`docs/telemetry.md`), with only the folder and the path
//! of a built component put in. Each command must succeed, and what it did is read back from
//! the server. The command-line chapter's synopsis (`docs/cli.md`) is checked against the
//! binary's own help.

use super::{bash, block_with, sh_blocks};
use crate::kit::Server;
use crate::wasm::{component, shared_cache};
use serde_json::{Value, json};
use std::path::Path;

fn chapter(name: &str) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(root.join("docs").join(name)).unwrap()
}

fn apps(s: &Server) -> Vec<Value> {
    let (st, v) = s.post("/datanotes/apps/", Some(&s.token), &json!({}));
    assert_eq!(st, 200, "{v}");
    v["apps"].as_array().unwrap().clone()
}

#[test]
fn the_apps_chapters_command_lines_run_as_written() {
    let doc = chapter("apps-host.md");
    let block = block_with(
        &sh_blocks(&doc),
        "datanotes apps create --database demo --name planner",
    );
    let tmp = tempfile::tempdir().unwrap();
    let s = Server::start_opts(
        &tmp.path().join("demo"),
        &[],
        &[("DATANOTES_CACHE_DIR", &shared_cache())],
    );
    let planning = component("planning");
    let script = block.replace("target/plugins/planning.wasm", planning.to_str().unwrap());
    let out = bash(tmp.path(), &s, &script);
    // `apps status` named each app made above it.
    for name in ["planner", "crm", "planning"] {
        assert!(out.contains(name), "apps status did not show {name}: {out}");
    }
    // What the block did, as the server has it: the planner deleted at the end, the remote app
    // pinned to its address, the WASM app installed with its write scope.
    let apps = apps(&s);
    let app = |name: &str| apps.iter().find(|a| a["name"] == name).cloned();
    assert!(app("planner").is_none(), "{apps:?}");
    let crm = app("crm").expect("crm is made");
    assert_eq!(crm["mcp_url"], "http://127.0.0.1:5235/mcp", "{crm}");
    assert_eq!(crm["self_url"], false, "{crm}");
    let planning = app("planning").expect("planning is installed");
    assert_eq!(planning["kind"], "wasm", "{planning}");
    assert_eq!(planning["write"], json!(["personal.tasks.*"]), "{planning}");
}

#[test]
fn the_telemetry_chapters_metrics_token_commands_run_as_written() {
    let doc = chapter("telemetry.md");
    let block = block_with(&sh_blocks(&doc), "datanotes metrics-tokens create");
    let tmp = tempfile::tempdir().unwrap();
    let s = Server::start_in(&tmp.path().join("notes"));
    let lines: Vec<String> = block
        .lines()
        .map(|l| l.replace("~/notes", "notes"))
        .collect();
    let [create, list, revoke] = &lines[..] else {
        panic!("the block is no longer create, list, revoke: {block}");
    };
    let metrics = |token: &str| {
        s.http
            .get(format!("{}/datanotes/metrics", s.url))
            .bearer_auth(token)
            .send()
            .unwrap()
            .status()
            .as_u16()
    };
    // It prints the token once: it reads the metrics.
    let out = bash(tmp.path(), &s, create);
    let token = out
        .split_whitespace()
        .find(|w| w.starts_with("dn_metrics_"))
        .unwrap_or_else(|| panic!("no dn_metrics_ token printed: {out}"));
    assert_eq!(metrics(token), 200);
    let out = bash(tmp.path(), &s, list);
    assert!(out.contains("prometheus"), "{out}");
    // Revoked: it stops working at once.
    bash(tmp.path(), &s, revoke);
    assert_eq!(metrics(token), 401);
}

/// The command-line chapter's synopsis (`docs/cli.md`) says what the binary takes: every
/// command it shows has help of its own (`datanotes COMMAND --help` succeeds), and every flag it
/// shows is in that help. A `a|b` word is each of its alternatives; `|` between two commands
/// starts the next one.
#[test]
fn the_command_line_chapters_synopsis_is_what_the_binary_takes() {
    let doc = chapter("cli.md");
    let synopsis = *sh_blocks(&doc)
        .first()
        .expect("docs/cli.md starts with its synopsis");
    let mut checked = 0;
    for line in synopsis.lines() {
        let line = line.split('#').next().unwrap().trim();
        let line = line
            .strip_prefix("datanotes ")
            .unwrap_or_else(|| panic!("{line}"));
        for command in line.split(" | ") {
            let words: Vec<&str> = command.split_whitespace().collect();
            // The command's words: up to the first flag, placeholder (DIR, NAME) or `...`.
            let path: Vec<&str> = words
                .iter()
                .take_while(|w| {
                    w.chars()
                        .all(|c| c.is_ascii_lowercase() || c == '-' || c == '|')
                })
                .take_while(|w| !w.starts_with('-'))
                .copied()
                .collect();
            let flags: Vec<&str> = words
                .iter()
                .map(|w| w.trim_matches(|c| c == '[' || c == ']'))
                .filter(|w| w.starts_with("--"))
                .collect();
            // Each alternative of an `a|b` word is a command of its own.
            let mut paths: Vec<Vec<&str>> = vec![vec![]];
            for w in &path {
                paths = paths
                    .iter()
                    .flat_map(|p| w.split('|').map(move |alt| [p.clone(), vec![alt]].concat()))
                    .collect();
            }
            for p in paths {
                let out = std::process::Command::new(crate::kit::process::bin())
                    .args(&p)
                    .arg("--help")
                    .output()
                    .unwrap();
                let help = String::from_utf8_lossy(&out.stdout);
                assert!(
                    out.status.success(),
                    "`datanotes {} --help` failed: {help}{}",
                    p.join(" "),
                    String::from_utf8_lossy(&out.stderr)
                );
                for f in &flags {
                    assert!(
                        help.contains(f),
                        "the synopsis shows `datanotes {} {f}`, which its help does not name:\n{help}",
                        p.join(" ")
                    );
                }
                checked += 1;
            }
        }
    }
    assert!(
        checked >= 15,
        "only {checked} commands found: is the pattern right?"
    );
}
