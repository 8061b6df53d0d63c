//! WASM apps installed by reference, end to end through the real server: components published to
//! a real OCI registry (Debian's `docker-registry`, CNCF distribution 2.8) with the real `wkg`,
//! each carrying in the manifest annotation `dev.datanotes.app` the rights it asks for. A plan
//! first (rights asked next to rights granted, tools; nothing enabled), then a confirm that
//! grants only what the owner gives; pinning by digest, a tag that moves between plan and confirm;
//! upgrades and rollback; the offline cache across a restart with the registry down; and the
//! faults of a hostile registry (a lying size, an endless or huge blob, a hang, a redirect to a
//! loopback address, bytes that are no component, a manifest that is no JSON) and of URL
//! sources (`http://` on loopback, pinned by SHA-256): each a clear 400 that leaves nothing
//! behind.
//!
//! The registry and `wkg` come from `scripts/fetch-oci-tools` (under `target/oci-tools/`), the
//! components from `scripts/build-plugins` (`target/plugins/`).

use crate::kit::hostile_registry::{
    ENDLESS_DECLARED, FileServer, HostileRegistry, Mode, digest_of,
};
use crate::kit::registry::Registry;
use crate::kit::*;
use crate::wasm::{component, shared_cache};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// The registry time bound the server is started with (`DATANOTES_APPS_SOURCE_TIMEOUT_MS`).
const SOURCE_TIMEOUT_MS: u64 = 3000;

/// What the planning example asks for in its manifest (version 0.1.0): more than the tests grant.
fn planning_manifest(version: &str, rights: Value) -> String {
    json!({"name": "planning", "description": "Plans work", "version": version, "rights": rights})
        .to_string()
}

/// The rights the planning example needs to work: its one table, and creating it.
fn planning_rights() -> Value {
    json!({"write": ["personal.tasks.items"], "ddl": true})
}

/// The environment of every server here: the shared compile cache, a short registry bound.
fn env() -> Vec<(&'static str, String)> {
    vec![
        ("DATANOTES_CACHE_DIR", shared_cache()),
        (
            "DATANOTES_APPS_SOURCE_TIMEOUT_MS",
            SOURCE_TIMEOUT_MS.to_string(),
        ),
    ]
}

fn server() -> Server {
    let env = env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    Server::start_with_env(&env)
}

/// A server that lets sources redirect to private and loopback addresses, over `dir`.
fn server_private(dir: &std::path::Path) -> Server {
    let env = env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    Server::start_opts(dir, &["--apps-private-sources"], &env)
}

fn bytes(name: &str) -> Vec<u8> {
    std::fs::read(component(name)).unwrap()
}

fn sha_hex(b: &[u8]) -> String {
    digest_of(b).trim_start_matches("sha256:").to_string()
}

/// `apps/create` (or another apps route) with `body` merged into `base`; answers status, body.
fn post(s: &Server, route: &str, base: Value, extra: &Value) -> (u16, Value) {
    let mut body = base;
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    s.post(&format!("/datanotes/{route}/"), Some(&s.token), &body)
}

/// The plan of a source (no confirm): it must answer 200 with a plan.
fn plan(s: &Server, source: &str, extra: Value) -> Value {
    let (st, v) = post(s, "apps/create", json!({"source": source}), &extra);
    assert_eq!(st, 200, "plan of {source}: {v}");
    assert!(v.get("app").is_none() && v.get("token").is_none(), "{v}");
    assert!(v["plan"].is_object(), "{v}");
    v["plan"].clone()
}

/// Confirms a plan with the body it offers; must answer 200 with the app.
fn confirm(s: &Server, plan: &Value) -> Value {
    let body = plan["confirm"].clone();
    assert_eq!(body["confirm"], true, "the plan's confirm body: {plan}");
    let (st, v) = s.post("/datanotes/apps/create/", Some(&s.token), &body);
    assert_eq!(st, 200, "confirm {body}: {v}");
    assert!(v["token"].as_str().is_some(), "{v}");
    v
}

/// Plan then confirm; answers the confirm's answer.
fn install(s: &Server, source: &str, extra: Value) -> Value {
    let p = plan(s, source, extra);
    confirm(s, &p)
}

/// The names of the installed apps.
fn app_names(s: &Server) -> Vec<String> {
    let (st, v) = s.post("/datanotes/apps/", Some(&s.token), &json!({}));
    assert_eq!(st, 200, "{v}");
    v["apps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["name"].as_str().unwrap().to_string())
        .collect()
}

/// Whether `tool` is in the owner's namespace.
fn has_tool(s: &Server, tool: &str) -> bool {
    let (st, v) = s.post("/datanotes/apps/tools/", Some(&s.token), &json!({}));
    assert_eq!(st, 200, "{v}");
    v["tools"]
        .as_array()
        .unwrap()
        .iter()
        .any(|t| t["name"] == tool)
}

/// The files of `.datanotes/apps/` (stored components), by name.
fn stored(s: &Server) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(s.dir.join(".datanotes/apps"))
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// A call to `apps/create` with `source` (and `extra`) must be a clear 400 that leaves nothing
/// behind: no app, no tool, no stored component, the vault's files and journal as they were.
/// Answers the error object.
fn refused_cleanly(s: &Server, source: &str, extra: Value) -> Value {
    let (apps, files, seq, comps) = (app_names(s), snapshot(&s.dir), s.seq(), stored(s));
    let (st, v) = post(s, "apps/create", json!({"source": source}), &extra);
    assert_eq!(st, 400, "{source} should be refused: {v}");
    let e = v["error"].clone();
    assert_error_shape(&e);
    assert!(
        !e["message"].as_str().unwrap().is_empty(),
        "an error says what: {e}"
    );
    assert_eq!(app_names(s), apps, "{source}: an entry was left behind");
    assert_eq!(stored(s), comps, "{source}: a component was left behind");
    assert!(snapshot(&s.dir) == files, "{source}: the vault changed");
    assert_eq!(s.seq(), seq, "{source}: the journal changed");
    e
}

/// The error's message, lower-cased.
fn message(e: &Value) -> String {
    e["message"].as_str().unwrap_or_default().to_lowercase()
}

/// The planning example answers, its list showing `n` tasks.
fn planning_answers(s: &Server, n: u64) {
    let list = s.tool_ok("planning_list_tasks", json!({}));
    assert_eq!(list["total"], n, "{list}");
}

#[test]
fn plan_then_confirm_from_a_real_registry() {
    let reg = Registry::start();
    let asked = json!({"write": ["personal.tasks.*"], "ddl": true, "maintain": true,
        "allow_hosts": ["api.example.com"], "limits": {"memory_mb": 128, "timeout_ms": 10000}});
    let manifest = planning_manifest("0.1.0", asked.clone());
    let wasm = component("planning");
    let digest = reg.push(
        "apps/planning:0.1.0",
        &wasm,
        &[("dev.datanotes.app", &manifest)],
    );
    let source = reg.reference("apps/planning:0.1.0");
    let s = server();
    let (files, seq) = (snapshot(&s.dir), s.seq());

    // The plan: no name given (the manifest has one), less granted than asked.
    let p = plan(&s, &source, planning_rights());
    assert_eq!(p["source"], source, "{p}");
    assert_eq!(p["digest"], digest, "{p}");
    let b = bytes("planning");
    assert_eq!(p["sha256"], sha_hex(&b), "{p}");
    assert_eq!(p["size"], b.len(), "{p}");
    assert_eq!(p["signature"]["status"], "unsigned", "{p}");
    assert_eq!(p["manifest"]["name"], "planning", "{p}");
    assert_eq!(p["manifest"]["description"], "Plans work", "{p}");
    assert_eq!(p["manifest"]["version"], "0.1.0", "{p}");
    for k in ["write", "ddl", "maintain", "allow_hosts"] {
        assert_eq!(p["asked"][k], asked[k], "asked {k}: {p}");
    }
    assert_eq!(p["asked"]["limits"]["memory_mb"], 128, "{p}");
    assert_eq!(
        p["granted"]["write"],
        json!(["personal.tasks.items"]),
        "{p}"
    );
    assert_eq!(p["granted"]["ddl"], true, "{p}");
    assert_eq!(p["granted"]["maintain"], false, "{p}");
    assert_eq!(p["granted"]["allow_hosts"], json!([]), "{p}");
    let diffs = p["differences"].as_array().expect("differences");
    let change = |right: &str| {
        diffs
            .iter()
            .find(|d| d["right"] == right)
            .map(|d| d["change"].as_str().unwrap_or_default().to_string())
    };
    assert_eq!(change("maintain").as_deref(), Some("not granted"), "{p}");
    assert_eq!(change("allow_hosts").as_deref(), Some("not granted"), "{p}");
    assert_eq!(change("write").as_deref(), Some("less"), "{p}");
    assert_eq!(change("ddl"), None, "ddl is granted as asked: {p}");
    let tools: Vec<&str> = p["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        tools,
        [
            "planning_add_task",
            "planning_list_tasks",
            "planning_complete_task"
        ],
        "{p}"
    );
    assert!(
        p["tools"]
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t["description"].as_str().is_some_and(|d| !d.is_empty())),
        "{p}"
    );
    // Nothing is enabled by a plan.
    assert_eq!(app_names(&s), Vec::<String>::new());
    assert!(!has_tool(&s, "planning_add_task"));
    assert!(snapshot(&s.dir) == files);
    assert_eq!(s.seq(), seq, "a plan is not journaled");

    // Confirm: exactly what was granted.
    let v = confirm(&s, &p);
    let app = &v["app"];
    assert_eq!(app["name"], "planning", "{v}");
    assert_eq!(app["kind"], "wasm", "{v}");
    assert_eq!(app["write"], json!(["personal.tasks.items"]), "{v}");
    assert_eq!(app["ddl"], true, "{v}");
    assert_eq!(app["maintain"], false, "{v}");
    assert_eq!(app["wasm"]["allow_hosts"], json!([]), "{v}");
    assert_eq!(app["wasm"]["sha256"], sha_hex(&b), "{v}");
    let origin = &app["wasm"]["origin"];
    assert_eq!(origin["source"], source, "{v}");
    assert_eq!(origin["digest"], digest, "{v}");
    assert_eq!(origin["signature"]["status"], "unsigned", "{v}");
    assert_eq!(origin["version"], "0.1.0", "{v}");
    assert_eq!(origin["asked"]["write"], asked["write"], "{v}");
    let installed = origin["installed"].as_str().expect("installed");
    assert!(
        installed.len() >= 20 && installed.as_bytes()[10] == b'T',
        "RFC 3339: {installed}"
    );
    assert_eq!(app["wasm"]["previous"], Value::Null, "{v}");
    assert_eq!(s.app("planning")["wasm"]["origin"], *origin);
    // It works, within what was granted.
    s.tool_ok("planning_add_task", json!({"title": "From a registry"}));
    planning_answers(&s, 1);
    assert_eq!(app_names(&s), ["planning"]);
}

#[test]
fn a_digest_pins_and_a_tag_that_moves_is_refused() {
    let reg = Registry::start();
    let manifest = planning_manifest("0.1.0", planning_rights());
    let ann = [("dev.datanotes.app", manifest.as_str())];
    let digest = reg.push("apps/planning:0.1.0", &component("planning"), &ann);
    let s = server();

    // By digest.
    let pinned = reg.pinned("apps/planning", &digest);
    let mut rights = planning_rights();
    rights["name"] = json!("pinned");
    let v = install(&s, &pinned, rights);
    assert_eq!(v["app"]["wasm"]["origin"]["source"], pinned, "{v}");
    assert_eq!(v["app"]["wasm"]["origin"]["digest"], digest, "{v}");
    s.tool_ok("planning_add_task", json!({"title": "pinned"}));

    // A digest the registry does not have.
    let missing = format!("sha256:{}", "0".repeat(64));
    refused_cleanly(
        &s,
        &reg.pinned("apps/planning", &missing),
        json!({"name": "gone"}),
    );

    // A tag that moves between plan and confirm.
    reg.push("apps/moving:latest", &component("planning"), &ann);
    let source = reg.reference("apps/moving:latest");
    let p = plan(&s, &source, json!({"name": "moving"}));
    let moved = reg.push("apps/moving:latest", &component("planning2"), &ann);
    assert_ne!(p["digest"], moved);
    let (apps, files) = (app_names(&s), snapshot(&s.dir));
    let (st, v) = s.post("/datanotes/apps/create/", Some(&s.token), &p["confirm"]);
    assert_moved(st, &v);
    assert_eq!(app_names(&s), apps, "nothing enabled");
    assert!(!has_tool(&s, "planning_focus"));
    assert!(snapshot(&s.dir) == files);
    // A confirm whose digest is not the plan's is refused too.
    let mut body = p["confirm"].clone();
    body["digest"] = json!(missing);
    let (st, v) = s.post("/datanotes/apps/create/", Some(&s.token), &body);
    assert_moved(st, &v);
    assert_eq!(app_names(&s), apps);
}

/// A confirm refused because the tag moved since the plan: a conflict (409; a 400 would do too)
/// that names the digests.
fn assert_moved(st: u16, v: &Value) {
    assert!(
        st == 409 || st == 400,
        "a moved tag must be refused: {st} {v}"
    );
    assert_error_shape(&v["error"]);
    assert!(message(&v["error"]).contains("sha256:"), "{v}");
}

#[test]
fn upgrade_and_rollback() {
    let reg = Registry::start();
    let m1 = planning_manifest("0.1.0", planning_rights());
    let m2 = planning_manifest("0.2.0", planning_rights());
    let d1 = reg.push(
        "apps/planning:0.1.0",
        &component("planning"),
        &[("dev.datanotes.app", &m1)],
    );
    let d2 = reg.push(
        "apps/planning:0.2.0",
        &component("planning2"),
        &[("dev.datanotes.app", &m2)],
    );
    let s = server();
    let mut rights = planning_rights();
    rights["name"] = json!("plan");
    install(&s, &reg.reference("apps/planning:0.1.0"), rights);
    s.tool_ok("planning_add_task", json!({"title": "before"}));
    assert!(!has_tool(&s, "planning_focus"), "0.1 has no focus");

    // Upgrade to 0.2.0: the same rights, no plan.
    let src2 = reg.reference("apps/planning:0.2.0");
    let (st, v) = post(
        &s,
        "apps/upgrade",
        json!({"name": "plan"}),
        &json!({"source": src2}),
    );
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["upgraded"], json!({"from": d1, "to": d2}), "{v}");
    let w = &v["app"]["wasm"];
    assert_eq!(w["origin"]["digest"], d2, "{v}");
    assert_eq!(w["origin"]["version"], "0.2.0", "{v}");
    assert_eq!(w["previous"]["origin"]["digest"], d1, "{v}");
    assert_eq!(w["previous"]["sha256"], sha_hex(&bytes("planning")), "{v}");
    let f = s.tool_ok("planning_focus", json!({"seconds": 0.01}));
    assert_eq!(f["cancelled"], false, "{f}");
    planning_answers(&s, 1);
    // The same digest again: nothing to do.
    let (st, v) = post(&s, "apps/upgrade", json!({"name": "plan"}), &json!({}));
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["upgraded"], Value::Null, "{v}");

    // Rollback, at once.
    let (st, v) = post(&s, "apps/rollback", json!({"name": "plan"}), &json!({}));
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["rolledBack"], json!({"from": d2, "to": d1}), "{v}");
    assert_eq!(v["app"]["wasm"]["origin"]["digest"], d1, "{v}");
    assert!(!has_tool(&s, "planning_focus"));
    s.tool_ok("planning_add_task", json!({"title": "after rollback"}));
    planning_answers(&s, 2);

    // An upgrade asking for more rights answers a plan; nothing changes until confirmed.
    let more = json!({"write": ["personal.tasks.items"], "ddl": true, "maintain": true});
    let m3 = planning_manifest("0.3.0", more);
    let d3 = reg.push(
        "apps/planning:0.3.0",
        &component("planning2"),
        &[("dev.datanotes.app", &m3)],
    );
    let src3 = reg.reference("apps/planning:0.3.0");
    let (st, v) = post(
        &s,
        "apps/upgrade",
        json!({"name": "plan"}),
        &json!({"source": src3}),
    );
    assert_eq!(st, 200, "{v}");
    let p = v["plan"].clone();
    assert_eq!(p["digest"], d3, "{v}");
    assert_eq!(p["asked"]["maintain"], true, "{v}");
    assert!(v.get("upgraded").is_none_or(Value::is_null), "{v}");
    assert_eq!(s.app("plan")["wasm"]["origin"]["digest"], d1);
    assert!(!has_tool(&s, "planning_focus"));
    // Confirmed: upgraded, and the app still holds what the owner granted.
    let body = if p["confirm"].is_object() {
        p["confirm"].clone()
    } else {
        json!({"name": "plan", "source": src3, "digest": d3, "confirm": true})
    };
    let (st, v) = s.post("/datanotes/apps/upgrade/", Some(&s.token), &body);
    assert_eq!(st, 200, "{body}: {v}");
    assert_eq!(v["upgraded"], json!({"from": d1, "to": d3}), "{v}");
    assert_eq!(v["app"]["maintain"], false, "never more than granted: {v}");
    s.tool_ok("planning_focus", json!({"seconds": 0.01}));
    planning_answers(&s, 2);

    // Back, then the same upgrade confirmed with maintain granted: that and nothing more.
    let (st, v) = s.post(
        "/datanotes/apps/rollback/",
        Some(&s.token),
        &json!({"name": "plan"}),
    );
    assert_eq!(st, 200, "{v}");
    let had = s.app("plan");
    let mut body = body.clone();
    body["maintain"] = true.into();
    let (st, v) = s.post("/datanotes/apps/upgrade/", Some(&s.token), &body);
    assert_eq!(st, 200, "{body}: {v}");
    assert_eq!(v["upgraded"], json!({"from": d1, "to": d3}), "{v}");
    assert_eq!(v["app"]["maintain"], true, "granted with the upgrade: {v}");
    for k in ["ddl", "write"] {
        assert_eq!(v["app"][k], had[k], "{k} is as it was: {v}");
    }
}

#[test]
fn an_upgrade_whose_compile_fails_keeps_the_old_version() {
    let reg = Registry::start();
    let m = planning_manifest("0.1.0", planning_rights());
    let ann = [("dev.datanotes.app", m.as_str())];
    let d1 = reg.push("apps/planning:0.1.0", &component("planning"), &ann);
    reg.push("apps/planning:0.2.0", &component("mismatch"), &ann);
    let s = server();
    let mut rights = planning_rights();
    rights["name"] = json!("plan");
    install(&s, &reg.reference("apps/planning:0.1.0"), rights);
    s.tool_ok("planning_add_task", json!({"title": "kept"}));
    let (files, seq) = (snapshot(&s.dir), s.seq());
    let (st, v) = post(
        &s,
        "apps/upgrade",
        json!({"name": "plan", "confirm": true}),
        &json!({"source": reg.reference("apps/planning:0.2.0")}),
    );
    assert_eq!(st, 400, "{v}");
    assert_error_shape(&v["error"]);
    let app = s.app("plan");
    assert_eq!(app["wasm"]["origin"]["digest"], d1, "{app}");
    assert_eq!(app["wasm"]["sha256"], sha_hex(&bytes("planning")), "{app}");
    planning_answers(&s, 1);
    assert!(snapshot(&s.dir) == files);
    assert_eq!(s.seq(), seq);
}

#[test]
fn installed_apps_survive_a_restart_with_the_registry_down() {
    let mut reg = Registry::start();
    let m = planning_manifest("0.1.0", planning_rights());
    reg.push(
        "apps/planning:0.1.0",
        &component("planning"),
        &[("dev.datanotes.app", &m)],
    );
    let s = server();
    install(&s, &reg.reference("apps/planning:0.1.0"), planning_rights());
    s.tool_ok("planning_add_task", json!({"title": "offline"}));
    let origin = s.app("planning")["wasm"]["origin"].clone();
    reg.stop();
    let s = s.restart();
    assert_eq!(app_names(&s), ["planning"]);
    planning_answers(&s, 1);
    assert_eq!(s.app("planning")["wasm"]["origin"], origin);
    // An upgrade while it is down: refused, the app goes on.
    let (st, v) = post(&s, "apps/upgrade", json!({"name": "planning"}), &json!({}));
    assert_eq!(st, 400, "{v}");
    planning_answers(&s, 1);
    // Back up: nothing to do.
    reg.start_again();
    let (st, v) = post(&s, "apps/upgrade", json!({"name": "planning"}), &json!({}));
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["upgraded"], Value::Null, "{v}");
}

// ---- a hostile registry: each fault a clear 400, nothing left behind ----

#[test]
fn a_manifest_that_lies_about_its_size_is_refused() {
    let reg = HostileRegistry::start(Mode::LyingSize(bytes("planning")));
    let s = server();
    refused_cleanly(&s, &reg.reference("apps/liar:1"), json!({"name": "liar"}));
    // The same bytes, told honestly, install.
    let good = HostileRegistry::start(Mode::Honest(bytes("planning")));
    let v = install(&s, &good.reference("apps/good:1"), json!({"name": "good"}));
    assert_eq!(v["app"]["wasm"]["origin"]["digest"], good.digest().unwrap());
}

#[test]
fn an_endless_blob_is_cut_off() {
    let reg = HostileRegistry::start(Mode::EndlessBlob);
    let s = server();
    let t0 = Instant::now();
    refused_cleanly(
        &s,
        &reg.reference("apps/endless:1"),
        json!({"name": "endless"}),
    );
    assert!(t0.elapsed() < Duration::from_secs(30), "{:?}", t0.elapsed());
    // The server hung up: the stream ends, and it read no more than it declared (plus what the
    // sockets' buffers hold).
    eventually("the server stops reading the endless blob", || {
        reg.streaming() == 0
    });
    let sent = reg.blob_bytes_sent();
    assert!(
        sent < ENDLESS_DECLARED + (16 << 20),
        "the server read {sent} bytes of a blob declared {ENDLESS_DECLARED}"
    );
}

#[test]
fn an_endless_manifest_is_refused_without_being_read_whole() {
    let reg = HostileRegistry::start(Mode::EndlessManifest);
    let s = server();
    refused_cleanly(
        &s,
        &reg.reference("apps/endless:1"),
        json!({"name": "endless"}),
    );
    eventually("the server stops reading the endless manifest", || {
        reg.streaming() == 0
    });
    // A manifest is read up to 4 MiB (plus what the sockets' buffers hold).
    let sent = reg.blob_bytes_sent();
    assert!(
        sent < (4 << 20) + (16 << 20),
        "the server read {sent} bytes of a manifest"
    );
}

#[test]
fn a_huge_blob_is_refused_without_being_read() {
    let reg = HostileRegistry::start(Mode::HugeBlob);
    let s = server();
    refused_cleanly(&s, &reg.reference("apps/huge:1"), json!({"name": "huge"}));
    eventually("the server stops reading the huge blob", || {
        reg.streaming() == 0
    });
    let sent = reg.blob_bytes_sent();
    assert!(
        sent < 16 << 20,
        "the server read {sent} bytes of a 10 GiB blob"
    );
}

#[test]
fn a_registry_that_hangs_is_given_up_on_in_bounded_time() {
    let reg = HostileRegistry::start(Mode::Hang);
    let s = server();
    let t0 = Instant::now();
    let e = refused_cleanly(&s, &reg.reference("apps/hang:1"), json!({"name": "hang"}));
    let took = t0.elapsed();
    assert!(reg.requests() >= 1, "the server asked");
    assert!(
        took < Duration::from_millis(SOURCE_TIMEOUT_MS * 4),
        "took {took:?} with a bound of {SOURCE_TIMEOUT_MS} ms: {e}"
    );
    // The server goes on.
    planning_or_nothing(&s);
}

/// The server answers as before (no app: an empty list).
fn planning_or_nothing(s: &Server) {
    assert_eq!(app_names(s), Vec::<String>::new());
    assert_eq!(s.get("/datanotes/health").0, 200);
}

#[test]
fn bytes_that_are_no_component_are_refused() {
    let reg = HostileRegistry::start(Mode::NotAComponent);
    let s = server();
    let e = refused_cleanly(&s, &reg.reference("apps/junk:1"), json!({"name": "junk"}));
    assert!(message(&e).contains("component"), "{e}");
}

#[test]
fn a_manifest_that_is_not_json_is_refused() {
    let reg = HostileRegistry::start(Mode::MalformedManifest);
    let s = server();
    let e = refused_cleanly(&s, &reg.reference("apps/bad:1"), json!({"name": "bad"}));
    assert!(message(&e).contains("manifest"), "{e}");
}

#[test]
fn a_hostile_moving_tag_is_refused_at_confirm() {
    let reg = HostileRegistry::start(Mode::MovingTag(bytes("planning"), bytes("planning2")));
    let s = server();
    let p = plan(
        &s,
        &reg.reference("apps/moving:1"),
        json!({"name": "moving"}),
    );
    reg.move_tag();
    let (st, v) = s.post("/datanotes/apps/create/", Some(&s.token), &p["confirm"]);
    assert_moved(st, &v);
    assert_eq!(app_names(&s), Vec::<String>::new());
    assert!(!has_tool(&s, "planning_add_task"));
}

#[test]
fn a_blob_redirected_to_loopback_is_refused_unless_allowed() {
    let b = bytes("planning");
    let files = FileServer::start();
    files.file("/blob", b.clone());
    let reg = HostileRegistry::start(Mode::RedirectBlob(b, files.url("/blob")));
    let s = server();
    let e = refused_cleanly(
        &s,
        &reg.reference("apps/redirect:1"),
        json!({"name": "redir"}),
    );
    assert_eq!(files.hits("/blob"), 0, "the redirect was followed: {e}");
    // The owner allows private sources: the same install goes through.
    let tmp = tempfile::tempdir().unwrap();
    let s2 = server_private(&tmp.path().join("db"));
    let mut rights = planning_rights();
    rights["name"] = json!("redir");
    let v = install(&s2, &reg.reference("apps/redirect:1"), rights);
    assert_eq!(v["app"]["name"], "redir", "{v}");
    assert!(files.hits("/blob") >= 1);
    s2.tool_ok("planning_add_task", json!({"title": "redirected"}));
    planning_answers(&s2, 1);
}

#[test]
fn a_sign_in_at_another_private_address_is_refused() {
    let token = FileServer::start();
    token.file("/token", br#"{"token": "t"}"#.to_vec());
    let realm = token.url("/token").replace("127.0.0.1", "localhost");
    let reg = HostileRegistry::start(Mode::SignInAt(realm));
    let s = server();
    let e = refused_cleanly(&s, &reg.reference("apps/p:1"), json!({"name": "p"}));
    assert!(message(&e).contains("sign in"), "{e}");
    assert_eq!(token.hits("/token"), 0, "the sign-in was followed: {e}");
}

// ---- URL sources: http:// on loopback, pinned by SHA-256 ----

#[test]
fn a_url_source_is_pinned_by_its_sha256() {
    let b = bytes("planning");
    let web = FileServer::start();
    web.file("/apps/planning.wasm", b.clone());
    let manifest = planning_manifest("0.1.0", planning_rights());
    web.file("/apps/planning.datanotes.json", manifest.into_bytes());
    let url = web.url("/apps/planning.wasm");
    let s = server();

    // No sha256: refused before fetching.
    let e = refused_cleanly(&s, &url, json!({"name": "p"}));
    assert!(message(&e).contains("sha256"), "{e}");
    // A wrong one: refused.
    let wrong = sha_hex(b"something else");
    refused_cleanly(&s, &url, json!({"name": "p", "sha256": wrong}));

    // The right one: a plan with the sidecar's manifest, then the app.
    let mut extra = planning_rights();
    extra["sha256"] = json!(sha_hex(&b));
    let p = plan(&s, &url, extra);
    assert_eq!(p["digest"], format!("sha256:{}", sha_hex(&b)), "{p}");
    assert_eq!(p["sha256"], sha_hex(&b), "{p}");
    assert_eq!(p["manifest"]["name"], "planning", "{p}");
    assert_eq!(p["asked"]["write"], json!(["personal.tasks.items"]), "{p}");
    assert_eq!(
        p["differences"],
        json!([]),
        "everything asked is granted: {p}"
    );
    let v = confirm(&s, &p);
    assert_eq!(v["app"]["name"], "planning", "{v}");
    assert_eq!(v["app"]["wasm"]["origin"]["source"], url, "{v}");
    s.tool_ok("planning_add_task", json!({"title": "from a URL"}));
    planning_answers(&s, 1);

    // Without a sidecar: no manifest, nothing asked.
    let bare = FileServer::start();
    bare.file("/x/app.wasm", b.clone());
    let p = plan(
        &s,
        &bare.url("/x/app.wasm"),
        json!({"name": "bare", "sha256": sha_hex(&b)}),
    );
    assert_eq!(p["manifest"], Value::Null, "{p}");
    assert_eq!(p["asked"]["write"], json!([]), "{p}");
}

#[test]
fn a_url_source_redirected_to_another_loopback_port_is_refused_unless_allowed() {
    let b = bytes("planning");
    let target = FileServer::start();
    target.file("/app.wasm", b.clone());
    let web = FileServer::start();
    web.redirect("/app.wasm", &target.url("/app.wasm"));
    let url = web.url("/app.wasm");
    let sha = sha_hex(&b);
    let s = server();
    refused_cleanly(&s, &url, json!({"name": "moved", "sha256": sha}));
    assert_eq!(target.hits("/app.wasm"), 0, "the redirect was followed");

    let tmp = tempfile::tempdir().unwrap();
    let s2 = server_private(&tmp.path().join("db"));
    let mut rights = planning_rights();
    rights["name"] = json!("moved");
    rights["sha256"] = json!(sha);
    let v = install(&s2, &url, rights);
    assert_eq!(v["app"]["name"], "moved", "{v}");
    assert!(target.hits("/app.wasm") >= 1);
    s2.tool_ok("planning_add_task", json!({"title": "redirected"}));
    planning_answers(&s2, 1);
}

#[test]
fn a_registry_that_asks_for_a_login_takes_it_from_the_owners_file() {
    let reg = Registry::start_with_login("alice", "s3cret");
    let m = planning_manifest("0.1.0", planning_rights());
    let digest = reg.push(
        "apps/planning:0.1.0",
        &component("planning"),
        &[("dev.datanotes.app", &m)],
    );
    let source = reg.reference("apps/planning:0.1.0");
    // Without credentials: refused.
    let s = server();
    refused_cleanly(&s, &source, json!({"name": "p"}));
    drop(s);
    // With the owner's Docker config.json.
    let tmp = tempfile::tempdir().unwrap();
    let auth = tmp.path().join("config.json");
    let b64 = {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode("alice:s3cret")
    };
    std::fs::write(
        &auth,
        json!({"auths": {reg.addr(): {"auth": b64}}}).to_string(),
    )
    .unwrap();
    let mut env = env();
    env.push((
        "DATANOTES_REGISTRY_AUTH",
        auth.to_string_lossy().into_owned(),
    ));
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let s = Server::start_opts(&tmp.path().join("db"), &[], &env);
    let v = install(&s, &source, planning_rights());
    assert_eq!(v["app"]["wasm"]["origin"]["digest"], digest, "{v}");
    // The credentials are not in apps.json.
    let apps_json = std::fs::read_to_string(s.dir.join(".datanotes/apps.json")).unwrap_or_default();
    assert!(!apps_json.contains("s3cret") && !apps_json.contains(&b64));
    s.tool_ok("planning_add_task", json!({"title": "behind a login"}));
    planning_answers(&s, 1);
}
