//! Upgrades and their signer: an upgrade that loses or changes the key its installed version
//! was signed with goes through the owner's plan, as a wider right does.

use super::*;

/// An upgrade that loses its signer, or changes it, is the owner's call as a wider right is: a
/// plan saying what changes, and nothing changes until it is confirmed. Alice's next version
/// (the same rights) upgrades at once.
#[test]
fn an_upgrade_that_loses_or_changes_its_signer_needs_a_plan() {
    let tmp = tempfile::tempdir().unwrap();
    let reg = Registry::start();
    let rights = json!({"write": ["personal.tasks.items"], "ddl": true});
    let push = |tag: &str, c: &str, version: &str| {
        let ann = manifest("planning", version, rights.clone());
        let ann = [("dev.datanotes.app", ann.as_str())];
        reg.push(&format!("apps/planning:{tag}"), &component(c), &ann)
    };
    let d1 = push("1", "planning", "0.1.0");
    let d2 = push("2", "planning2", "0.2.0");
    let d3 = push("3", "planning2", "0.3.0");
    let d4 = push("4", "planning", "0.4.0");
    let at = |tag: &str| reg.reference(&format!("apps/planning:{tag}"));
    let (alice_key, alice_pub) = keygen(tmp.path(), "alice");
    let (bob_key, bob_pub) = keygen(tmp.path(), "bob");
    for (tag, key) in [("1", &alice_key), ("3", &bob_key), ("4", &alice_key)] {
        cli_ok(&["apps", "sign", &at(tag), "--key", s(key)]);
    }
    let srv = server();
    let db = s(&srv.dir).to_string();
    for (name, key) in [("alice", &alice_pub), ("bob", &bob_pub)] {
        cli_db(&db, &["apps", "trust", name, "--key", s(key)]);
    }
    let mut body = rights.clone();
    body["source"] = at("1").into();
    body["name"] = "planning".into();
    let (st, v) = route(&srv, "apps/create", body);
    assert_eq!(st, 200, "{v}");
    let app = confirm(&srv, &v["plan"]);
    let signature = &app["wasm"]["origin"]["signature"];
    assert_eq!(signature["key"], "alice", "{app}");
    let fp = signature["fingerprint"]
        .as_str()
        .expect("the signer's key")
        .to_string();
    let record = srv.dir.join(".datanotes/apps.json");
    let state = || (srv.app("planning"), std::fs::read(&record).unwrap());
    let before = state();
    let upgrade = |tag: &str| {
        let body = json!({"name": "planning", "source": at(tag)});
        let (st, v) = route(&srv, "apps/upgrade", body);
        assert_eq!(st, 200, "{v}");
        v
    };

    // Unsigned, the same rights: a plan that says the signer is lost; nothing changes.
    let v = upgrade("2");
    let p = v["plan"].clone();
    assert!(
        p.is_object() && v.get("upgraded").is_none(),
        "a plan is needed: {v}"
    );
    assert_eq!(p["digest"], d2.as_str(), "{p}");
    assert_eq!(p["signature"]["status"], "unsigned", "{p}");
    let lost =
        format!("the installed version was signed by alice (key {fp}); this one is unsigned");
    assert_eq!(p["signer_change"], lost.as_str(), "{p}");
    assert!(state() == before, "nothing changes before the confirm");
    // The command line shows it and stops there without --yes.
    let out = cli_db(&db, &["apps", "upgrade", "planning", &at("2")]);
    assert!(out.contains(&format!("signer     {lost}")), "{out}");
    assert!(
        out.contains("changes its signer: to upgrade, run again with --yes"),
        "{out}"
    );
    assert!(state() == before, "nothing changes before the confirm");
    // Confirmed: upgraded.
    let (st, v) = route(&srv, "apps/upgrade", p["confirm"].clone());
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["upgraded"], json!({"from": d1, "to": d2}), "{v}");
    let origin = &srv.app("planning")["wasm"]["origin"];
    assert_eq!(origin["signature"]["status"], "unsigned", "{origin}");

    // Back to alice's version; bob's (trusted too) is another signer: a plan again.
    let (st, v) = route(&srv, "apps/rollback", json!({"name": "planning"}));
    assert_eq!(st, 200, "{v}");
    let v = upgrade("3");
    let change = v["plan"]["signer_change"].as_str().unwrap_or_default();
    let bob = "this one is signed by another key: bob (key ";
    assert!(change.contains(bob), "{v}");
    assert_eq!(v["plan"]["digest"], d3.as_str(), "{v}");
    assert_eq!(srv.app("planning")["wasm"]["origin"]["digest"], d1.as_str());
    // Signed by alice again: no plan.
    let v = upgrade("4");
    assert_eq!(v["upgraded"], json!({"from": d1, "to": d4}), "{v}");
}
