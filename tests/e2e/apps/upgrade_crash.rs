//! `kill -9` during an upgrade of a WASM app installed by reference (issue 33): the Rust example
//! `planning` (0.1.0) installed from a real OCI registry (Debian's `docker-registry`, pushed
//! with the real `wkg`), then the confirming `apps/upgrade` to `planning2` (0.2.0) sent from a
//! thread and the server killed a few milliseconds later, at several delays, with the compile
//! cache warm (the upgrade takes a few milliseconds) and cold (it compiles). After a restart on
//! the same folder exactly one version is active and it works:
//!
//! - `.datanotes/apps.json` parses and holds the app once;
//! - its `wasm.sha256` is the old or the new component's, its stored file is there, and
//!   `wasm.previous` and `wasm.origin` agree with it (the new one keeps the old as previous; the
//!   old one has none); `apps/get` says the same;
//! - an acknowledged upgrade (answered before the kill) is the new version;
//! - its tools are the version's (`planning_focus` only in 0.2), a call answers and sees the
//!   task added before, and the next step works (a rollback from the new version, an upgrade
//!   from the old one).

use crate::kit::hostile_registry::digest_of;
use crate::kit::registry::Registry;
use crate::kit::*;
use crate::wasm::{component, shared_cache};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

const NAME: &str = "plan";

/// The two versions as published: registry sources, manifest digests, component SHA-256s.
struct Published {
    src1: String,
    src2: String,
    d1: String,
    d2: String,
    sha1: String,
    sha2: String,
}

fn sha_hex(name: &str) -> String {
    let b = std::fs::read(component(name)).unwrap();
    digest_of(&b).trim_start_matches("sha256:").to_string()
}

fn publish(reg: &Registry) -> Published {
    let rights = json!({"write": ["personal.tasks.items"], "ddl": true});
    let m = |v: &str| json!({"name": "planning", "version": v, "rights": rights}).to_string();
    let (m1, m2) = (m("0.1.0"), m("0.2.0"));
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
    Published {
        src1: reg.reference("apps/planning:0.1.0"),
        src2: reg.reference("apps/planning:0.2.0"),
        d1,
        d2,
        sha1: sha_hex("planning"),
        sha2: sha_hex("planning2"),
    }
}

/// A server over a new folder; `warm`: with the shared compile cache (else the folder's own).
fn server(warm: bool) -> Server {
    let cache = shared_cache();
    let env: Vec<(&str, &str)> = if warm {
        vec![("DATANOTES_CACHE_DIR", cache.as_str())]
    } else {
        vec![]
    };
    Server::start_with_env(&env)
}

/// Plan, then confirm, of `source` as the app `plan`.
fn install(s: &Server, source: &str) {
    let body = json!({"source": source, "name": NAME, "write": ["personal.tasks.items"],
                      "ddl": true});
    let (st, v) = s.post("/datanotes/apps/create/", Some(&s.token), &body);
    assert_eq!(st, 200, "plan of {source}: {v}");
    let confirm = v["plan"]["confirm"].clone();
    assert_eq!(confirm["confirm"], true, "the plan's confirm body: {v}");
    let (st, v) = s.post("/datanotes/apps/create/", Some(&s.token), &confirm);
    assert_eq!(st, 200, "confirm {confirm}: {v}");
}

/// The owner's tool names.
fn tools(s: &Server) -> Vec<String> {
    let (st, v) = s.post("/datanotes/apps/tools/", Some(&s.token), &json!({}));
    assert_eq!(st, 200, "{v}");
    v["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str().map(str::to_string))
        .collect()
}

/// Where the kill landed.
#[derive(Debug, PartialEq)]
enum Landed {
    /// The upgrade had not stored the new component yet.
    BeforeStore,
    /// The new component was stored, the upgrade not answered.
    MidUpgrade,
    /// The upgrade had answered.
    AfterAnswer,
}

/// One round: install 0.1.0, add a task, send the upgrade from a thread, kill after `delay`,
/// restart, check. Answers where the kill landed and whether the new version is active.
fn round(p: &Published, warm: bool, delay: Duration) -> (Landed, bool) {
    let s = server(warm);
    install(&s, &p.src1);
    s.tool_ok("planning_add_task", json!({"title": "before the upgrade"}));
    let stored_new = s.dir.join(format!(".datanotes/apps/{}.wasm", p.sha2));
    assert!(!stored_new.exists(), "0.2 stored before its upgrade");

    let (url, token) = (s.url.clone(), s.token.clone());
    let body = json!({"name": NAME, "source": p.src2, "confirm": true});
    let upgrade = std::thread::spawn(move || {
        let http = reqwest::blocking::Client::builder()
            .timeout(Duration::from_secs(60))
            .build()
            .unwrap();
        let r = http
            .post(format!("{url}/datanotes/apps/upgrade/"))
            .bearer_auth(token)
            .json(&body)
            .send()
            .ok()?;
        let status = r.status().as_u16();
        let v: Value = r.json().ok()?;
        Some((status, v))
    });
    // The kill lands `delay` into the upgrade: a time by design (the rounds sweep the delays).
    std::thread::sleep(delay);
    let stored_at_kill = stored_new.exists();
    let mut s = s;
    s.kill();
    let answer = upgrade.join().unwrap();
    let acked = match &answer {
        Some((200, v)) if v["upgraded"]["to"] == p.d2 => true,
        Some((st, v)) => panic!("the upgrade answered {st} before the kill: {v}"),
        None => false,
    };
    let landed = match (acked, stored_at_kill) {
        (true, _) => Landed::AfterAnswer,
        (false, true) => Landed::MidUpgrade,
        (false, false) => Landed::BeforeStore,
    };
    let what = format!(
        "{} cache, killed {delay:?} after sending the upgrade ({landed:?})",
        if warm { "warm" } else { "cold" }
    );
    let s = s.restart_killed();
    let new = check(&s, p, &what);
    assert!(new || !acked, "{what}: an acknowledged upgrade was lost");
    (landed, new)
}

/// After the restart: exactly one version active, consistent, and working. Answers whether it is
/// the new one.
fn check(s: &Server, p: &Published, what: &str) -> bool {
    let text = std::fs::read(s.dir.join(".datanotes/apps.json")).unwrap();
    let file: Value = serde_json::from_slice(&text)
        .unwrap_or_else(|e| panic!("{what}: apps.json does not parse: {e}"));
    let entries: Vec<&Value> = file
        .as_array()
        .unwrap_or_else(|| panic!("{what}: apps.json is no list: {file}"))
        .iter()
        .filter(|a| a["name"] == NAME)
        .collect();
    assert_eq!(entries.len(), 1, "{what}: the app in apps.json: {file}");
    let w = &entries[0]["wasm"];
    let sha = w["sha256"].as_str().unwrap_or_default();
    let new = if sha == p.sha2 {
        true
    } else {
        assert_eq!(sha, p.sha1, "{what}: neither version is active: {w}");
        false
    };
    let (digest, previous) = if new {
        (&p.d2, json!(p.sha1))
    } else {
        (&p.d1, Value::Null)
    };
    assert_eq!(w["origin"]["digest"], *digest, "{what}: origin: {w}");
    assert_eq!(
        w["previous"].get("sha256").cloned().unwrap_or(Value::Null),
        previous,
        "{what}: previous: {w}"
    );
    if new {
        assert_eq!(w["previous"]["origin"]["digest"], p.d1, "{what}: {w}");
    }
    for sha in [Some(sha), w["previous"]["sha256"].as_str()]
        .into_iter()
        .flatten()
    {
        let f = s.dir.join(format!(".datanotes/apps/{sha}.wasm"));
        assert!(f.is_file(), "{what}: {} is not stored", f.display());
    }
    // A component stored by the upgrade the kill cut short stays in the folder (unused).
    let stored_new = s.dir.join(format!(".datanotes/apps/{}.wasm", p.sha2));
    if !new && stored_new.exists() {
        eprintln!("{what}: 0.2's component is stored, unused");
    }
    // The server says the same.
    let app = s.app(NAME);
    assert_eq!(app["wasm"]["sha256"], sha, "{what}: apps/get: {app}");
    assert_eq!(app["wasm"]["origin"]["digest"], *digest, "{what}: {app}");

    // Its tools are the version's, and it answers.
    eventually(&format!("{what}: {NAME}'s tools listed"), || {
        tools(s).iter().any(|t| t == "planning_list_tasks")
    });
    let t = tools(s);
    assert!(t.iter().any(|t| t == "planning_add_task"), "{what}: {t:?}");
    assert_eq!(
        t.iter().any(|t| t == "planning_focus"),
        new,
        "{what}: planning_focus only in 0.2: {t:?}"
    );
    let list = s.tool_ok("planning_list_tasks", json!({}));
    assert_eq!(list["total"], 1, "{what}: the task added before: {list}");
    if new {
        s.tool_ok("planning_focus", json!({"seconds": 0}));
    }

    // The next step works: back from the new version, up from the old one.
    let (route, body) = if new {
        ("rollback", json!({"name": NAME}))
    } else {
        ("upgrade", json!({"name": NAME, "source": p.src2}))
    };
    let (st, v) = s.post(&format!("/datanotes/apps/{route}/"), Some(&s.token), &body);
    assert_eq!(st, 200, "{what}: apps/{route} after the restart: {v}");
    let expected = if new { &p.sha1 } else { &p.sha2 };
    assert_eq!(v["app"]["wasm"]["sha256"], *expected, "{what}: {v}");
    let list = s.tool_ok("planning_list_tasks", json!({}));
    assert_eq!(list["total"], 1, "{what}: after apps/{route}: {list}");
    new
}

#[test]
fn kill_9_during_an_upgrade_leaves_one_working_version() {
    let reg = Registry::start();
    let p = publish(&reg);
    let mut seen = vec![];
    let t0 = Instant::now();
    for (warm, delays) in [
        (true, &[0u64, 2, 5, 10, 20, 35, 50, 70, 100, 150, 200][..]),
        (false, &[0, 20, 50, 100, 200, 400][..]),
    ] {
        for &ms in delays {
            let (landed, new) = round(&p, warm, Duration::from_millis(ms));
            eprintln!(
                "{} cache, kill after {ms} ms: {landed:?}, after the restart {} is active",
                if warm { "warm" } else { "cold" },
                if new { "0.2.0" } else { "0.1.0" }
            );
            seen.push((landed, new));
        }
    }
    eprintln!("{} rounds in {:.1?}", seen.len(), t0.elapsed());
    assert!(
        seen.iter().any(|(l, _)| *l != Landed::AfterAnswer),
        "no kill landed before the upgrade answered: {seen:?}"
    );
}
