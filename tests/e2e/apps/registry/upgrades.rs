//! Upgrades and rollback of an app installed from a registry, an upgrade whose compile fails,
//! and installed apps across a restart with the registry down.

use super::*;

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
