//! A hostile registry: each fault (a lying size, an endless or huge blob or manifest, a hang,
//! no component, no JSON, a moving tag, a redirect or sign-in elsewhere) a clear 400 that leaves
//! nothing behind.

use super::*;

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
