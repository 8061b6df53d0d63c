//! `notifications/tools/list_changed`: an open session learns of every change of its namespace
//! (beyond the install and the burst of `mcp.rs`): a name released by a deleted app, an app that
//! comes back with other tools; and a change that leaves the tools as they were says nothing.

use crate::kit::*;
use serde_json::{Value, json};
use std::time::Duration;

fn entry(s: &Server, name: &str) -> Value {
    s.ok_route("apps/get", json!({"name": name}))["app"].clone()
}

/// Waits until the app lists (in the namespace) every one of `tools`.
fn wait_tools(s: &Server, app: &str, tools: &[&str]) -> Value {
    let mut e = Value::Null;
    eventually(&format!("app {app} lists {tools:?}"), || {
        e = entry(s, app);
        let have = e["tools"].as_array().cloned().unwrap_or_default();
        tools.iter().all(|t| have.iter().any(|h| h == t))
    });
    e
}

/// The count once the notifications of earlier changes have arrived (after 500 ms of quiet;
/// the server's own quiet time is 200 ms).
fn settled(agent: &Agent) -> usize {
    crate::kit::settled("list_changed", Duration::from_millis(500), || {
        agent.list_changed()
    })
}

#[test]
fn list_changed_when_a_name_is_released_or_an_app_comes_back_with_other_tools() {
    let s = Server::start_with_env(&[
        ("DATANOTES_APP_PROBE_MS", "100"),
        ("DATANOTES_APP_PROBE_MAX_MS", "200"),
    ]);
    let agent = Agent::owner(&s);
    assert!(agent.advertises_list_changed());
    let t1 = create_app(&s, json!({"name": "one"}));
    let _one = App::start(&s, "one", &t1, &["--bare", "--tool", "shared_tool"]);
    wait_tools(&s, "one", &["shared_tool"]);
    let t2 = create_app(&s, json!({"name": "two"}));
    let mut two = App::start(
        &s,
        "two",
        &t2,
        &["--bare", "--tool", "shared_tool", "--tool", "two_tool"],
    );
    let e = wait_tools(&s, "two", &["two_tool"]);
    assert_eq!(e["skippedTools"][0]["name"], "shared_tool", "{e}");
    assert_eq!(e["skippedTools"][0]["takenBy"], "one", "{e}");

    // A change that leaves the tools as they were says nothing.
    let n = settled(&agent);
    s.ok_route(
        "apps/update",
        json!({"name": "two", "description": "still the same tools"}),
    );
    assert_eq!(
        settled(&agent),
        n,
        "no list_changed without a change of tools"
    );

    // A skipped name released: the app that holds it is deleted, the other one gets it.
    s.ok_route("apps/delete", json!({"name": "one"}));
    eventually("list_changed after a name was released", || {
        agent.list_changed() > n
    });
    let e = entry(&s, "two");
    assert!(
        e["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t == "shared_tool"),
        "{e}"
    );
    assert_eq!(e["skippedTools"], json!([]), "{e}");

    // Down, then back at the same address with another tool: found by the probe, and said.
    two.kill();
    assert!(is_error(&agent.call("two_tool", json!({}))));
    eventually("down", || entry(&s, "two")["reachable"] == false);
    let n = settled(&agent);
    two.restart_adding(&["--tool", "back_tool"]);
    eventually(
        "list_changed when the app came back with another tool",
        || agent.list_changed() > n,
    );
    assert!(agent.names().contains(&"back_tool".to_string()));
    assert!(!is_error(&agent.call("back_tool", json!({}))));
}
