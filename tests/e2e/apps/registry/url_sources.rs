//! URL sources: `http://` on loopback, pinned by SHA-256; a redirect to another loopback port
//! refused unless the owner allows private sources.

use super::*;

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
