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
//!
//! - `plan_and_confirm`: plan then confirm from a real registry, digests, moving tags, a login;
//! - `upgrades`: upgrade and rollback, a failed upgrade, a restart with the registry down;
//! - `hostile`: the faults of a hostile registry;
//! - `url_sources`: `http://` sources on loopback, pinned by SHA-256.

mod hostile;
mod plan_and_confirm;
mod upgrades;
mod url_sources;

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
