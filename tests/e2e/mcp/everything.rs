//! The official MCP "everything" server (npm `@modelcontextprotocol/server-everything`, of
//! protocol 2025-11-25) as a remote app, for what the fidelity table (`scripts/fidelity`) cannot
//! measure with an SDK client: the tasks extension of 2026-07-28 (SEP-2663), which neither
//! official SDK's client speaks yet, spoken here as its requests are written. Its
//! `simulate-research-query` runs as a task that needs the user's input when the topic is
//! ambiguous: the client gets the app's question as the task's `inputRequests` in `tasks/get`,
//! answers it with `tasks/update`, and the task ends with a report on the interpretation chosen.
//!
//! Node and the server are installed under `target/tools` by `scripts/fetch-mcp-node`, run
//! once per test run (it does nothing when they are there).

use crate::kit::*;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

/// Node's path and the everything server's entry point, installed once per test run.
fn node_and_server() -> (PathBuf, PathBuf) {
    static PATHS: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    PATHS
        .get_or_init(|| {
            let mut p = installed("fetch-mcp-node", &[]);
            let server = p.pop().expect("the server's path");
            (p.pop().expect("Node's path"), server)
        })
        .clone()
}

/// The everything server on 127.0.0.1 (streamable HTTP); killed on drop.
struct Everything {
    child: Child,
    url: String,
    _dir: tempfile::TempDir,
}

impl Everything {
    fn start() -> Everything {
        let (node, entry) = node_and_server();
        let dir = tempfile::tempdir().unwrap();
        let portfile = dir.path().join("port");
        let preload = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/listen-loopback.cjs");
        let child = Command::new(node)
            .arg("--require")
            .arg(preload)
            .arg(entry)
            .arg("streamableHttp")
            .env("PORTFILE", &portfile)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("the everything server");
        let port =
            eventually_ok(
                "the everything server writes its port",
                || match std::fs::read_to_string(&portfile) {
                    Ok(p) if !p.trim().is_empty() => Ok(p.trim().to_string()),
                    Ok(_) => Err("an empty port file".into()),
                    Err(e) => Err(format!("no port file: {e}")),
                },
            );
        Everything {
            child,
            url: format!("http://127.0.0.1:{port}/mcp"),
            _dir: dir,
        }
    }
}

impl Drop for Everything {
    fn drop(&mut self) {
        process::kill(&mut self.child);
    }
}

#[test]
fn a_2026_client_answers_what_the_everything_servers_task_asks() {
    let s = Server::start();
    let app = Everything::start();
    create_app(&s, json!({"name": "everything", "mcp_url": app.url}));
    let caps =
        json!({"extensions": {"io.modelcontextprotocol/tasks": {}}, "elicitation": {"form": {}}});
    let ask = |method: &str, params: Value| {
        let r = mcp::post_2026(&s, &s.token, method, params, caps.clone(), None);
        crate::mcp::answer_of(r)
    };
    eventually("the everything server's tools are listed", || {
        ask("tools/list", json!({}))
            .to_string()
            .contains("simulate-research-query")
    });
    let r = ask(
        "tools/call",
        json!({"name": "simulate-research-query",
               "arguments": {"topic": "python", "ambiguous": true}}),
    );
    assert_eq!(r["result"]["resultType"], "task", "{r}");
    let id = r["result"]["taskId"]
        .as_str()
        .expect("a task id")
        .to_string();
    // Polled until it ends (every 300 ms: the app's task state, which has no event to wait on),
    // answering what it asks.
    let (mut asked, mut statuses) = (vec![], vec![]);
    let done = poll(Duration::from_secs(30), Duration::from_millis(300), || {
        let g = ask("tasks/get", json!({"taskId": id}));
        let t = g["result"].clone();
        let status = t["status"]
            .as_str()
            .unwrap_or_else(|| panic!("{g}"))
            .to_string();
        if statuses.last() != Some(&status) {
            statuses.push(status.clone());
        }
        match status.as_str() {
            "input_required" => {
                let requests = t["inputRequests"].as_object().expect("inputRequests");
                for (key, request) in requests {
                    assert_eq!(request["method"], "elicitation/create", "{g}");
                    let props = &request["params"]["requestedSchema"]["properties"];
                    assert!(
                        props["interpretation"]["oneOf"]
                            .to_string()
                            .contains("\"snake\""),
                        "{g}"
                    );
                    asked.push(key.clone());
                    let answer =
                        json!({"action": "accept", "content": {"interpretation": "snake"}});
                    let u = ask(
                        "tasks/update",
                        json!({"taskId": id, "inputResponses": {key.clone(): answer}}),
                    );
                    assert!(u.get("error").is_none(), "{u}");
                }
                None
            }
            "working" => None,
            _ => Some(t),
        }
    })
    .unwrap_or_else(|| panic!("the task did not end: {statuses:?}"));
    assert_eq!(asked.len(), 1, "asked once: {asked:?}");
    assert_eq!(done["status"], "completed", "{done}");
    let report = done["result"]["content"][0]["text"].as_str().unwrap_or("");
    assert!(
        report.contains("python (snake)"),
        "the report on the interpretation chosen: {done}"
    );
    assert_eq!(
        (statuses.first(), statuses.last()),
        (Some(&"working".to_string()), Some(&"completed".to_string())),
        "the task's statuses as polled: {statuses:?}"
    );
    assert!(
        statuses.iter().any(|s| s == "input_required"),
        "{statuses:?}"
    );
}
