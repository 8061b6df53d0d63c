//! A registry's sign-in, once per pull: the `/v2/` challenge whose realm was checked is the one
//! the pull signs in at. A hostile registry that answers its own address the first time and a
//! private one after (a token server on `localhost`) never gets the engine to the second.

use crate::kit::hostile_registry::{FileServer, HostileRegistry, Mode};
use crate::kit::*;
use crate::wasm::{component, shared_cache};
use serde_json::json;

#[test]
fn a_pull_signs_in_at_the_realm_that_was_checked() {
    let token = FileServer::start();
    token.file("/token", br#"{"token": "stolen"}"#.to_vec());
    let private = token.url("/token").replace("127.0.0.1", "localhost");
    let bytes = std::fs::read(component("planning")).unwrap();
    let ann = json!({"name": "planning", "version": "0.1.0",
                     "rights": {"write": ["personal.tasks.items"], "ddl": true}})
    .to_string();
    let reg = HostileRegistry::start_annotated(
        Mode::SignInTwice(bytes, private),
        &[("dev.datanotes.app", ann.as_str())],
    );
    let srv = Server::start_with_env(&[("DATANOTES_CACHE_DIR", &shared_cache())]);
    let source = reg.reference("apps/planning:0.1.0");
    let body = json!({"source": source, "name": "planning"});
    // The plan: one challenge (the registry's own realm), and the whole pull signed in by it.
    let (st, v) = srv.post("/datanotes/apps/create/", Some(&srv.token), &body);
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["plan"]["digest"], reg.digest().unwrap().as_str(), "{v}");
    assert_eq!(reg.challenges(), 1, "one challenge per pull");
    assert_eq!(token.hits("/token"), 0, "signed in at the second realm");
    // The confirm pulls again: its one challenge names the private realm, refused.
    let (st, v) = srv.post(
        "/datanotes/apps/create/",
        Some(&srv.token),
        &v["plan"]["confirm"],
    );
    assert_eq!(st, 400, "{v}");
    assert_error_shape(&v["error"]);
    let msg = v["error"]["message"].as_str().unwrap_or_default();
    assert!(
        msg.contains("sign in at") && msg.contains("localhost"),
        "{v}"
    );
    assert_eq!(reg.challenges(), 2, "one challenge per pull");
    assert_eq!(token.hits("/token"), 0, "signed in at the second realm");
    let (_, apps) = srv.post("/datanotes/apps/", Some(&srv.token), &json!({}));
    assert_eq!(apps["apps"], json!([]), "{apps}");
}
