//! Signed apps and the command line of installs by reference, end to end with real parts: keys
//! made by `datanotes apps keygen`, components published to a real registry (Debian's
//! `docker-registry`) with the real `wkg` and signed by `datanotes apps sign` (cosign's
//! `sha256-<hex>.sig` tag scheme), then installed through the server with `require_signature`
//! on and off; and `datanotes apps install oci://... --grant-asked --yes`, `apps upgrade` and
//! `apps rollback` with the three example apps (Rust, Python, JavaScript).

use crate::kit::hostile_registry::{FileServer, digest_of};
use crate::kit::registry::Registry;
use crate::kit::*;
use crate::wasm::{component, shared_cache};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Command;

mod upgrade;

/// Runs `datanotes ARGS` (with extra environment) and no URL, token, password or registry
/// credentials from the environment: (exit code, stdout, stderr).
fn cli_env(args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let mut cmd = Command::new(bin());
    cmd.args(args)
        .env_remove("DATANOTES_URL")
        .env_remove("DATANOTES_TOKEN")
        .env_remove("COSIGN_PASSWORD")
        .env_remove("DATANOTES_REGISTRY_AUTH");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run datanotes");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A command that must succeed: its stdout.
fn cli_ok(args: &[&str]) -> String {
    let (code, out, err) = cli_env(args, &[]);
    assert_eq!(code, 0, "datanotes {args:?}:\n{out}\n{err}");
    out
}

/// A command against the server of the database folder `db` that must succeed: its stdout.
fn cli_db(db: &str, args: &[&str]) -> String {
    let mut all = args.to_vec();
    all.extend(["--database", db]);
    cli_ok(&all)
}

/// A command that must fail as a user error: its stderr (one `datanotes: ...` line and a hint).
fn cli_refused(args: &[&str], env: &[(&str, &str)]) -> String {
    let (code, out, err) = cli_env(args, env);
    assert_eq!(code, 1, "datanotes {args:?} should fail:\n{out}\n{err}");
    assert!(err.starts_with("datanotes: "), "{err}");
    assert!(
        !err.contains("os error") && !err.contains("Error {"),
        "{err}"
    );
    err
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn server() -> Server {
    Server::start_with_env(&[("DATANOTES_CACHE_DIR", &shared_cache())])
}

/// The manifest annotation of an example app: its name, version and the rights it asks for.
fn manifest(name: &str, version: &str, rights: Value) -> String {
    json!({"name": name, "description": format!("The {name} example"), "version": version,
           "rights": rights})
    .to_string()
}

/// `keygen PREFIX` in `dir`: (private key file, public key file).
fn keygen(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    let prefix = dir.join(name);
    let out = cli_ok(&["apps", "keygen", s(&prefix)]);
    let (key, public) = (
        dir.join(format!("{name}.key")),
        dir.join(format!("{name}.pub")),
    );
    assert!(out.contains(s(&key)) && out.contains(s(&public)), "{out}");
    (key, public)
}

/// An apps route as the owner: (status, answer).
fn route(srv: &Server, route: &str, body: Value) -> (u16, Value) {
    srv.post(&format!("/datanotes/{route}/"), Some(&srv.token), &body)
}

/// The plan of a source; must answer 200 with a plan.
fn plan(srv: &Server, source: &str, name: &str) -> Value {
    let (st, v) = route(srv, "apps/create", json!({"source": source, "name": name}));
    assert_eq!(st, 200, "plan of {source}: {v}");
    assert!(v["plan"].is_object() && v.get("app").is_none(), "{v}");
    v["plan"].clone()
}

/// Confirms a plan; answers the app's entry.
fn confirm(srv: &Server, plan: &Value) -> Value {
    let (st, v) = route(srv, "apps/create", plan["confirm"].clone());
    assert_eq!(st, 200, "confirm {plan}: {v}");
    v["app"].clone()
}

/// An install that `require_signature` refuses: the error, and no app left behind.
fn refused_install(srv: &Server, source: &str, name: &str) -> Value {
    let (st, v) = route(srv, "apps/create", json!({"source": source, "name": name}));
    assert_eq!(st, 400, "{source} should be refused: {v}");
    assert_error_shape(&v["error"]);
    let (_, apps) = route(srv, "apps", json!({}));
    assert!(
        !apps["apps"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["name"] == name),
        "{apps}"
    );
    v["error"].clone()
}

#[test]
fn keygen_sign_and_require_a_trusted_signature() {
    let tmp = tempfile::tempdir().unwrap();
    let keys = tmp.path();
    let reg = Registry::start();
    let planning = component("planning");
    let ann = manifest(
        "planning",
        "0.1.0",
        json!({"write": ["personal.tasks.items"], "ddl": true}),
    );
    let ann = [("dev.datanotes.app", ann.as_str())];
    let signed = reg.push("apps/signed:0.1.0", &planning, &ann);
    reg.push("apps/unsigned:0.1.0", &planning, &ann);
    let other = reg.push("apps/other:0.1.0", &planning, &ann);

    // Keys: PREFIX.key (0600, a PKCS#8 PEM) and PREFIX.pub; never over an existing file.
    let (alice_key, alice_pub) = keygen(keys, "alice");
    let (bob_key, bob_pub) = keygen(keys, "bob");
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(&alice_key).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    let private = std::fs::read_to_string(&alice_key).unwrap();
    assert!(
        private.starts_with("-----BEGIN PRIVATE KEY-----"),
        "{private}"
    );
    let public = std::fs::read_to_string(&alice_pub).unwrap();
    assert!(public.starts_with("-----BEGIN PUBLIC KEY-----"), "{public}");
    let err = cli_refused(&["apps", "keygen", s(&keys.join("alice"))], &[]);
    assert!(err.contains("alice.key already exists"), "{err}");
    assert_eq!(std::fs::read_to_string(&alice_key).unwrap(), private);
    // With COSIGN_PASSWORD: encrypted as cosign does; signing needs the password back.
    let pw = [("COSIGN_PASSWORD", "correct horse")];
    let (code, _, err) = cli_env(&["apps", "keygen", s(&keys.join("carol"))], &pw);
    assert_eq!(code, 0, "{err}");
    let carol_key = keys.join("carol.key");
    let text = std::fs::read_to_string(&carol_key).unwrap();
    assert!(
        text.starts_with("-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----"),
        "{text}"
    );

    // Signing: the digest the reference resolves to, the tag pushed (no server needed).
    let signed_ref = reg.reference("apps/signed:0.1.0");
    let out = cli_ok(&["apps", "sign", &signed_ref, "--key", s(&alice_key)]);
    let tag = format!("{}.sig", signed.replace(':', "-"));
    assert!(out.contains(&signed) && out.contains(&tag), "{out}");
    let other_ref = reg.reference("apps/other:0.1.0");
    cli_ok(&[
        "apps",
        "sign",
        other_ref.trim_start_matches("oci://"),
        "--key",
        s(&bob_key),
    ]);
    let err = cli_refused(&["apps", "sign", &signed_ref, "--key", s(&carol_key)], &[]);
    assert!(err.contains("COSIGN_PASSWORD"), "{err}");
    let wrong = [("COSIGN_PASSWORD", "wrong")];
    let err = cli_refused(
        &["apps", "sign", &signed_ref, "--key", s(&carol_key)],
        &wrong,
    );
    assert!(err.contains("cannot be decrypted"), "{err}");
    let err = cli_refused(&["apps", "sign", &signed_ref, "--key", s(&alice_pub)], &[]);
    assert!(err.contains("not a private key"), "{err}");
    let err = cli_refused(
        &["apps", "sign", "apps/signed:0.1.0", "--key", s(&alice_key)],
        &[],
    );
    assert!(err.contains("registry") && err.contains("hint: "), "{err}");
    // A second signature is appended, as cosign does: the `.sig` manifest holds both. The key
    // under cosign's own label ("ENCRYPTED COSIGN PRIVATE KEY", the same encryption) is read too.
    let cosign_key = keys.join("cosign.key");
    std::fs::write(&cosign_key, text.replace("SIGSTORE", "COSIGN")).unwrap();
    let (code, _, err) = cli_env(&["apps", "sign", &signed_ref, "--key", s(&cosign_key)], &pw);
    assert_eq!(code, 0, "{err}");
    let m: Value = reqwest::blocking::Client::new()
        .get(format!(
            "http://{}/v2/apps/signed/manifests/{tag}",
            reg.addr()
        ))
        .header("Accept", "application/vnd.oci.image.manifest.v1+json")
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(
        m["mediaType"], "application/vnd.oci.image.manifest.v1+json",
        "{m}"
    );
    assert_eq!(
        m["config"]["mediaType"],
        "application/vnd.oci.image.config.v1+json"
    );
    let layers = m["layers"].as_array().unwrap();
    assert_eq!(layers.len(), 2, "{m}");
    for l in layers {
        assert_eq!(
            l["mediaType"],
            "application/vnd.dev.cosign.simplesigning.v1+json"
        );
        assert!(
            l["annotations"]["dev.cosignproject.cosign/signature"].is_string(),
            "{m}"
        );
    }

    // The owner trusts alice's key and requires a signature.
    let srv = server();
    let db = s(&srv.dir).to_string();
    let out = cli_ok(&[
        "apps",
        "trust",
        "alice",
        "--key",
        s(&alice_pub),
        "--database",
        &db,
    ]);
    assert!(
        out.contains("trusted alice") && out.contains("require_signature"),
        "{out}"
    );
    let out = cli_ok(&[
        "apps",
        "trust",
        "alice",
        "--key",
        s(&alice_pub),
        "--database",
        &db,
    ]);
    assert!(out.contains("already trusted"), "{out}");
    let err = cli_refused(
        &[
            "apps",
            "trust",
            "alice",
            "--key",
            s(&bob_pub),
            "--database",
            &db,
        ],
        &[],
    );
    assert!(err.contains("already trusted as alice"), "{err}");
    let err = cli_refused(
        &[
            "apps",
            "trust",
            "mallory",
            "--key",
            s(&alice_key),
            "--database",
            &db,
        ],
        &[],
    );
    assert!(err.contains("is a private key"), "{err}");
    let settings = srv.ok("get_engine_settings", json!({}))["settings"].clone();
    assert_eq!(settings["trusted_keys"][0]["name"], "alice", "{settings}");
    assert_eq!(settings["trusted_keys"][0]["public_key"], public.as_str());
    srv.ok(
        "set_engine_settings",
        json!({"settings": {"require_signature": true}}),
    );

    // Signed by alice: planned and installed, the entry says by whom.
    let p = plan(&srv, &signed_ref, "planning");
    assert_eq!(p["digest"], signed.as_str(), "{p}");
    assert_eq!(p["signature"]["status"], "signed", "{p}");
    assert_eq!(p["signature"]["key"], "alice", "{p}");
    let app = confirm(&srv, &p);
    let origin = &app["wasm"]["origin"];
    assert_eq!(origin["digest"], signed.as_str(), "{app}");
    assert_eq!(origin["signature"]["status"], "signed", "{app}");
    assert_eq!(origin["signature"]["key"], "alice", "{app}");
    // Unsigned: refused, naming the key expected (and its fingerprint) and what was found.
    let unsigned_ref = reg.reference("apps/unsigned:0.1.0");
    let e = refused_install(&srv, &unsigned_ref, "unsigned");
    let msg = e["message"].as_str().unwrap();
    assert!(msg.contains("alice (") && msg.contains("unsigned"), "{e}");
    assert_eq!(e["column"], "source", "{e}");
    assert!(
        e["hint"].as_str().unwrap().contains("datanotes apps sign"),
        "{e}"
    );
    // Signed by bob, whom the owner does not trust: refused, naming alice and an unknown key.
    let e = refused_install(&srv, &other_ref, "other");
    let msg = e["message"].as_str().unwrap();
    assert!(
        msg.contains("alice (") && msg.contains("signed by an unknown key"),
        "{e}"
    );
    assert!(msg.contains(&other), "{e}");

    // Not required: an unsigned app installs and says so; bob's signature is shown untrusted.
    srv.ok(
        "set_engine_settings",
        json!({"settings": {"require_signature": false}}),
    );
    let p = plan(&srv, &unsigned_ref, "unsigned");
    assert_eq!(p["signature"]["status"], "unsigned", "{p}");
    let app = confirm(&srv, &p);
    assert_eq!(
        app["wasm"]["origin"]["signature"]["status"], "unsigned",
        "{app}"
    );
    let p = plan(&srv, &other_ref, "other");
    assert_eq!(p["signature"]["status"], "untrusted", "{p}");
    assert!(p["signature"]["key"].is_null(), "{p}");
}

#[test]
fn signing_a_private_registry_takes_its_credentials() {
    let reg = Registry::start_with_login("author", "s3cret");
    let tmp = tempfile::tempdir().unwrap();
    let digest = reg.push("apps/private:1", &component("planning"), &[]);
    let (key, _) = keygen(tmp.path(), "author");
    let r = reg.reference("apps/private:1");
    let err = cli_refused(&["apps", "sign", &r, "--key", s(&key)], &[]);
    assert!(
        err.contains("cannot resolve") && err.contains("apps/private"),
        "{err}"
    );
    let auth = tmp.path().join("config.json");
    let basic = base64_of("author:s3cret");
    let config = json!({"auths": {reg.addr(): {"auth": basic}}});
    std::fs::write(&auth, config.to_string()).unwrap();
    let out = cli_ok(&[
        "apps",
        "sign",
        &r,
        "--key",
        s(&key),
        "--registry-auth",
        s(&auth),
    ]);
    assert!(out.contains(&digest), "{out}");
}

fn base64_of(text: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(text)
}

/// One example app through the command line: published as `apps/NAME:1` (version 1 of the
/// component) and `apps/NAME:2`, installed with `--grant-asked --yes`, upgraded, rolled back.
fn example_through_the_cli(srv: &Server, reg: &Registry, name: &str, rights: Value) {
    let db = s(&srv.dir).to_string();
    let v1 = component(name);
    let v2 = component(&format!("{name}2"));
    let ann1 = manifest(name, "0.1.0", rights.clone());
    let d1 = reg.push(
        &format!("apps/{name}:1"),
        &v1,
        &[("dev.datanotes.app", &ann1)],
    );
    let r1 = reg.reference(&format!("apps/{name}:1"));
    // The plan alone: printed for a person, nothing installed.
    let out = cli_db(&db, &["apps", "install", &r1]);
    for part in [
        &format!("plan for {r1}"),
        &d1,
        "signature  unsigned",
        &format!("app        {name} 0.1.0: The {name} example"),
        "RIGHT",
        "<- not granted",
        "to install, run again with --yes",
    ] {
        assert!(out.contains(part), "{part:?} not in:\n{out}");
    }
    let (_, apps) = route(srv, "apps", json!({}));
    assert!(
        !apps["apps"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["name"] == name)
    );
    // Granting what it asks, confirmed: the entry and the token, once.
    let out = cli_db(&db, &["apps", "install", &r1, "--grant-asked", "--yes"]);
    assert!(out.contains("token (shown once): dn_app_"), "{out}");
    assert!(
        !out.contains("<- not granted"),
        "everything asked is granted:\n{out}"
    );
    let app = srv.app(name);
    assert_eq!(app["write"], rights["write"], "{app}");
    assert_eq!(app["wasm"]["origin"]["source"], r1.as_str(), "{app}");
    assert_eq!(app["wasm"]["origin"]["digest"], d1.as_str(), "{app}");
    assert_eq!(
        app["wasm"]["origin"]["signature"]["status"], "unsigned",
        "{app}"
    );
    // The new version, by a new reference; then again: nothing to do.
    let ann2 = manifest(name, "0.2.0", rights.clone());
    let d2 = reg.push(
        &format!("apps/{name}:2"),
        &v2,
        &[("dev.datanotes.app", &ann2)],
    );
    let r2 = reg.reference(&format!("apps/{name}:2"));
    let out = cli_db(&db, &["apps", "upgrade", name, &r2, "--yes"]);
    assert!(
        out.contains(&format!("upgraded {name}: {d1} -> {d2}")),
        "{out}"
    );
    assert_eq!(srv.app(name)["wasm"]["origin"]["digest"], d2.as_str());
    let out = cli_db(&db, &["apps", "upgrade", name]);
    assert!(out.contains("up to date"), "{out}");
    // Back to the first version at once; the JSON answer says from and to.
    let out = cli_db(&db, &["apps", "rollback", name, "--json"]);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["rolledBack"], json!({"from": d2, "to": d1}), "{v}");
    assert_eq!(srv.app(name)["wasm"]["origin"]["digest"], d1.as_str());
}

#[test]
fn the_cli_installs_upgrades_and_rolls_back_the_example_apps() {
    let reg = Registry::start();
    let srv = server();
    let rights = |table: &str| json!({"write": [table], "ddl": true});
    example_through_the_cli(&srv, &reg, "planning", rights("personal.tasks.items"));
    let t = srv.tool_ok("planning_add_task", json!({"title": "From a registry"}));
    assert_eq!(
        t["id"], "from-a-registry",
        "the rolled-back version serves: {t}"
    );
    example_through_the_cli(&srv, &reg, "journal", rights("personal.notes.daily"));
    example_through_the_cli(&srv, &reg, "bookmarks", rights("personal.notes.bookmarks"));
    let db = s(&srv.dir).to_string();
    let out = cli_ok(&["apps", "status", "--database", &db]);
    for name in ["planning", "journal", "bookmarks"] {
        assert!(out.contains(name), "{out}");
    }

    // A version that asks for more: its plan, and nothing changes without --yes.
    let more = json!({"write": ["personal.tasks.items", "personal.tasks.archive"], "ddl": true});
    let ann = manifest("planning", "0.3.0", more);
    let d3 = reg.push(
        "apps/planning:3",
        &component("planning2"),
        &[("dev.datanotes.app", &ann)],
    );
    let r3 = reg.reference("apps/planning:3");
    let before = srv.app("planning")["wasm"]["origin"]["digest"].clone();
    let out = cli_ok(&["apps", "upgrade", "planning", &r3, "--database", &db]);
    assert!(
        out.contains("personal.tasks.archive") && out.contains("--yes"),
        "{out}"
    );
    assert_eq!(srv.app("planning")["wasm"]["origin"]["digest"], before);
    let out = cli_ok(&[
        "apps",
        "upgrade",
        "planning",
        &r3,
        "--yes",
        "--database",
        &db,
    ]);
    assert!(out.contains(&format!("-> {d3}")), "{out}");
    let up = srv.app("planning");
    assert_eq!(up["wasm"]["origin"]["digest"], d3.as_str());
    assert!(
        !up["write"].to_string().contains("archive"),
        "granted unasked-for: {up}"
    );
    // Back, and again with --grant-asked: what it asks comes with it.
    cli_ok(&["apps", "rollback", "planning", "--database", &db]);
    let args = ["apps", "upgrade", "planning", &r3, "--yes", "--grant-asked"];
    let out = cli_ok(&[&args[..], &["--database", &db]].concat());
    assert!(out.contains(&format!("-> {d3}")), "{out}");
    let up = srv.app("planning");
    assert_eq!(
        up["write"],
        json!(["personal.tasks.items", "personal.tasks.archive"])
    );
    assert_eq!(up["ddl"], true, "{up}");
    // Every new flag is described (on its line, or on the next one when clap wraps).
    for cmd in ["install", "upgrade", "rollback", "keygen", "sign", "trust"] {
        let out = cli_ok(&["apps", cmd, "--help"]);
        let lines: Vec<&str> = out.lines().map(str::trim).collect();
        for (i, l) in lines.iter().enumerate().filter(|(_, l)| l.starts_with('-')) {
            let next = lines.get(i + 1).copied().unwrap_or("");
            let described = l.contains("  ") || !(next.is_empty() || next.starts_with('-'));
            assert!(described, "{cmd}: a flag without a description: {l}");
        }
    }
}

#[test]
fn the_cli_installs_from_a_url_pinned_by_sha256() {
    let b = std::fs::read(component("planning")).unwrap();
    let sha = digest_of(&b).trim_start_matches("sha256:").to_string();
    let web = FileServer::start();
    web.file("/apps/planning.wasm", b);
    let rights = json!({"write": ["personal.tasks.items"], "ddl": true});
    let side = manifest("planning", "0.1.0", rights.clone());
    web.file("/apps/planning.datanotes.json", side.into_bytes());
    let srv = server();
    let db = s(&srv.dir).to_string();
    let url = web.url("/apps/planning.wasm");
    // Another SHA-256: refused, nothing installed.
    let wrong = "0".repeat(64);
    let (code, _, err) = cli_env(
        &[
            "apps",
            "install",
            &url,
            "--sha256",
            &wrong,
            "--yes",
            "--database",
            &db,
        ],
        &[],
    );
    assert_eq!(code, 1, "{err}");
    assert!(err.contains(&wrong) && err.contains(&sha), "{err}");
    let out = cli_db(
        &db,
        &[
            "apps",
            "install",
            &url,
            "--sha256",
            &sha,
            "--grant-asked",
            "--yes",
        ],
    );
    assert!(out.contains(&format!("digest     sha256:{sha}")), "{out}");
    assert!(out.contains("token (shown once): dn_app_"), "{out}");
    let app = srv.app("planning");
    assert_eq!(app["write"], rights["write"], "{app}");
    assert_eq!(app["wasm"]["origin"]["source"], url.as_str(), "{app}");
}
