//! Plan then confirm from a real registry: what is asked beside what is granted, nothing enabled
//! by a plan; a digest pins, a tag that moves is refused; a registry behind a login.

use super::*;

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
