//! The apps chapter's publishing walkthrough (`docs/apps.md`, "Publish an app" to "Trusted
//! keys"), run as written against a real registry on this machine: the manifest it shows, the
//! push to a registry on loopback (`wkg oci push --insecure`), a key pair and a signature, the
//! key trusted, the plan, the installs, an upgrade to an unsigned version and the rollback. Only
//! the registry's address is put in (for `127.0.0.1:5000`, and for `ghcr.io/someone`, which a
//! test cannot push to), and the chapter's install from a web server is left out.

use super::{bash, bash_with, block_with, sh_blocks};
use crate::kit::Server;
use crate::kit::registry::{Registry, oci_tools};
use crate::wasm::{component, shared_cache};
use serde_json::{Value, json};
use std::path::Path;

#[test]
fn the_apps_chapters_publishing_walkthrough_runs_as_written() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(root.join("docs/apps.md")).unwrap();
    let blocks = sh_blocks(&doc);
    let reg = Registry::start();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let s = Server::start_opts(
        &dir.join("demo"),
        &[],
        &[("DATANOTES_CACHE_DIR", &shared_cache())],
    );
    let local = |b: &str| {
        b.replace("127.0.0.1:5000", &reg.addr()).replace(
            "ghcr.io/someone/planning:0.2.0",
            &format!("{}/apps/planning:0.1.0", reg.addr()),
        )
    };
    // wkg on the PATH, with a home of its own (it reads and writes its configuration there).
    let home = dir.join("home");
    std::fs::create_dir_all(&home).unwrap();
    let wkg_bin = oci_tools().join("bin");
    let wkg_env = [
        ("HOME", home.as_path()),
        ("XDG_CONFIG_HOME", home.as_path()),
        ("XDG_CACHE_HOME", home.as_path()),
    ];

    // The manifest, as shown, beside the component.
    let manifest = doc
        .split("### The manifest")
        .nth(1)
        .and_then(|m| m.split("```json\n").nth(1))
        .and_then(|m| m.split("```").next())
        .expect("the chapter's manifest");
    let asked: Value = serde_json::from_str(manifest).expect("the manifest is JSON");
    std::fs::write(dir.join("datanotes-app.json"), manifest).unwrap();
    std::fs::copy(component("planning"), dir.join("planning.wasm")).unwrap();

    // Push it to the registry on this machine.
    let push = block_with(&blocks, "wkg oci push --insecure 127.0.0.1:5000");
    bash_with(dir, &s, &local(push), Some(&wkg_bin), &wkg_env);

    // Sign it, and trust the key.
    let sign = block_with(&blocks, "datanotes apps keygen alice");
    let out = bash(dir, &s, &local(sign));
    let signed = format!("signed {}/apps/planning:0.1.0 (sha256:", reg.addr());
    assert!(
        out.contains("wrote alice.key") && out.contains(&signed),
        "{out}"
    );
    let trust = block_with(
        &blocks,
        "datanotes apps trust alice --key alice.pub --database demo",
    );
    bash(dir, &s, trust);

    // The plan: signed by alice, the manifest's app and rights, nothing installed.
    let plan = block_with(
        &blocks,
        "datanotes apps install oci://127.0.0.1:5000/apps/planning:0.1.0 --database demo",
    );
    let out = bash(dir, &s, &local(plan));
    let version = asked["version"].as_str().unwrap();
    let shown = doc
        .split("```text\nplan for oci://127.0.0.1:5000/apps/planning:0.1.0:\n")
        .nth(1)
        .and_then(|t| t.split("```").next())
        .expect("the plan the chapter shows");
    // The lines of the plan shown that name no digest or size, and are not cut short (`...`).
    let lines: Vec<&str> = shown
        .lines()
        .filter(|l| !l.contains("...") && !l.contains("sha256:") && !l.contains("bytes"))
        .collect();
    assert!(lines.len() >= 8, "{shown}");
    for line in lines {
        assert!(out.contains(line), "the plan has no line {line:?}:\n{out}");
    }
    // The same plan over HTTP.
    let curl = block_with(
        &blocks,
        "curl -s -H \"Authorization: Bearer $TOKEN\" $DN/datanotes/apps/create/ \\\n     -d '{\"source\"",
    );
    let plan = &super::json(&bash(dir, &s, &local(curl)))["plan"];
    // What it asks is the manifest's rights; the differences are the ones the chapter shows.
    assert_eq!(plan["asked"], asked["rights"], "{plan}");
    let shown = |key: &str| -> Value {
        let line = doc
            .lines()
            .find_map(|l| l.trim().strip_prefix(&format!("\"{key}\": ")))
            .unwrap_or_else(|| panic!("the chapter shows no {key}"));
        serde_json::from_str(line.trim_end_matches(',')).unwrap()
    };
    assert_eq!(plan["asked"], shown("asked"), "{plan}");
    assert_eq!(plan["differences"], shown("differences"), "{plan}");
    let (_, apps) = s.post("/datanotes/apps/", Some(&s.token), &json!({}));
    assert_eq!(apps["apps"], json!([]), "a plan installs nothing");

    // The installs (but the one from a web server): what was granted, and where it came from.
    let install = block_with(
        &blocks,
        "datanotes apps install oci://127.0.0.1:5000/apps/planning:0.1.0 --database demo --write",
    );
    let install: String = install
        .lines()
        .filter(|l| !l.contains("https://example.com"))
        .map(|l| format!("{l}\n"))
        .collect();
    bash(dir, &s, &local(&install));
    let planning = s.app("planning");
    assert_eq!(planning["write"], json!(["personal.tasks.*"]), "{planning}");
    assert_eq!(planning["ddl"], false, "{planning}");
    let origin = &planning["wasm"]["origin"];
    assert_eq!(origin["signature"]["status"], "signed", "{planning}");
    assert_eq!(origin["signature"]["key"], "alice", "{planning}");
    assert_eq!(origin["version"], version, "{planning}");
    let planning2 = s.app("planning2");
    assert_eq!(planning2["write"], asked["rights"]["write"], "{planning2}");
    assert_eq!(planning2["ddl"], asked["rights"]["ddl"], "{planning2}");

    // A new version, unsigned: the upgrade asks first (a change of signer), then upgrades, and
    // the rollback goes back to alice's.
    reg.push(
        "apps/planning:0.3.0",
        &component("planning2"),
        &[("dev.datanotes.app", r#"{"version": "0.3.0"}"#)],
    );
    let upgrade = block_with(&blocks, "datanotes apps upgrade planning --database demo");
    let out = bash(dir, &s, &local(upgrade));
    let said = |start: &str, end: &str| {
        out.lines()
            .any(|l| l.starts_with(start) && l.ends_with(end))
    };
    assert!(
        said("upgraded planning: sha256:", "(unsigned)"),
        "no upgrade said as the chapter shows:\n{out}"
    );
    assert!(
        said("rolled back planning: sha256:", "(signed by alice)"),
        "no rollback said as the chapter shows:\n{out}"
    );
    let planning = s.app("planning");
    assert_eq!(planning["wasm"]["origin"]["version"], version, "{planning}");
}
