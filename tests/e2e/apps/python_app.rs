//! A remote app written with the official MCP Python SDK 2.x's own server (`MCPServer`,
//! `tests/e2e/apps/python_app.py`), a real third-party server of the newest protocol: it speaks
//! 2026-07-28 to a client that asks for it, and 2025-11-25 to one that initializes (the engine
//! does, for a session per agent). Through `/mcp`, a client of either era gets all of it:
//! - a client of 2025-11-25 (rmcp): the tools, the app's
//!   elicitation and its request for the client's roots answered by the client, resources and
//!   a template (URIs named for the app), a prompt and completions;
//! - a client of 2026-07-28 (no session, raw): the same tools, the app's elicitation turned
//!   into an input request (multi round-trip) and back, a resource and a prompt.
//!
//! The SDK is installed under `target/tools/mcp-python-2.3.0` by `scripts/fetch-mcp-python`, run
//! once per test run (it does nothing when it is there).

#![allow(deprecated)] // roots (SEP-2577 deprecates them; the app asks for them)

use crate::kit::*;
use rmcp::model::{
    ClientCapabilities, ClientConfig, ElicitRequestParams, ElicitResult, ListRootsResult,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleClient, ServiceExt};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;

/// The Python of `target/tools/mcp-python-2.3.0` (the SDK 2.3.0), installed once per test run.
fn python() -> PathBuf {
    static PY: OnceLock<PathBuf> = OnceLock::new();
    PY.get_or_init(|| installed("fetch-mcp-python", &["2"]).remove(0))
        .clone()
}

/// The Python app, running; killed on drop.
struct PyApp {
    child: Child,
    url: String,
}

impl PyApp {
    fn start() -> PyApp {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/e2e/apps/python_app.py");
        let mut child = Command::new(python())
            .arg(script)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("the Python app");
        let port = process::wait_line(&mut child, "listening on ", "the Python app");
        let url = format!("http://127.0.0.1:{}/mcp", port.trim());
        PyApp { child, url }
    }
}

impl Drop for PyApp {
    fn drop(&mut self) {
        process::kill(&mut self.child);
    }
}

/// A person at a client of 2025-11-25: gives their name when asked, and one root.
#[derive(Clone, Default)]
struct Person;

impl rmcp::ClientHandler for Person {
    async fn create_elicitation(
        &self,
        _params: ElicitRequestParams,
        _c: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        Ok(
            serde_json::from_value(json!({"action": "accept", "content": {"name": "Ada"}}))
                .unwrap(),
        )
    }

    async fn list_roots(
        &self,
        _c: RequestContext<RoleClient>,
    ) -> Result<ListRootsResult, ErrorData> {
        Ok(serde_json::from_value(
            json!({"roots": [{"uri": "file:///home/ada/notes", "name": "notes"}]}),
        )
        .unwrap())
    }

    fn get_info(&self) -> ClientConfig {
        let caps: ClientCapabilities =
            serde_json::from_value(json!({"elicitation": {}, "roots": {}})).unwrap();
        ClientConfig::new(caps, rmcp::model::Implementation::new("person", "1.0.0"))
    }
}

/// The server with the Python app registered as `pyapp`, its tools listed.
fn serve() -> (Server, PyApp) {
    let s = Server::start();
    let app = PyApp::start();
    create_app(&s, json!({"name": "pyapp", "mcp_url": app.url}));
    eventually("pyapp's tools are listed", || {
        let a = s.ok_route("apps/get", json!({"name": "pyapp"}));
        a["app"]["tools"].as_array().is_some_and(|t| t.len() == 3)
    });
    (s, app)
}

#[test]
fn a_python_sdk_2_server_serves_a_2025_client_through_the_engine() {
    let (s, _app) = serve();
    let rt = mcp::runtime();
    let cfg = mcp::transport_config(&format!("{}/mcp", s.url), Some(&s.token), None);
    // The transport spawns its worker: made inside the runtime.
    let c = rt
        .block_on(async {
            let t = rmcp::transport::StreamableHttpClientTransport::from_config(cfg);
            Person.serve(t).await
        })
        .expect("connect");
    let call = |tool: &str, args: Value| {
        mcp::ask(
            &rt,
            &c,
            "tools/call",
            json!({"name": tool, "arguments": args}),
        )
    };
    let r = call("add", json!({"a": 2, "b": 3}));
    assert_eq!(
        r["content"][0]["text"], "{\n  \"sum\": 5,\n  \"priority\": 1\n}",
        "{r}"
    );
    // The app's elicitation, answered by the person; their roots, asked by the app.
    let r = call("greet", json!({}));
    assert_eq!(r["content"][0]["text"], "Hello, Ada!", "{r}");
    let r = call("where", json!({}));
    assert_eq!(r["content"][0]["text"], "file:///home/ada/notes", "{r}");

    let read = |uri: &str| mcp::ask(&rt, &c, "resources/read", json!({"uri": uri}));
    let r = read("file://pyapp//a.txt");
    assert_eq!(r["contents"][0]["text"], "alpha", "{r}");
    assert_eq!(r["contents"][0]["uri"], "file://pyapp//a.txt", "{r}");
    let t = mcp::ask(&rt, &c, "resources/templates/list", json!({}));
    assert!(
        t.to_string().contains("\"notes://pyapp/{name}\""),
        "the app's template, named for it: {t}"
    );
    let r = read("notes://pyapp/todo");
    assert_eq!(r["contents"][0]["text"], "# todo", "{r}");

    let p = mcp::ask(
        &rt,
        &c,
        "prompts/get",
        json!({"name": "topic", "arguments": {"subject": "owls"}}),
    );
    assert_eq!(
        p["messages"][0]["content"]["text"], "Tell me about owls.",
        "{p}"
    );
    let done = mcp::ask(
        &rt,
        &c,
        "completion/complete",
        json!({"ref": {"type": "ref/prompt", "name": "topic"},
               "argument": {"name": "subject", "value": "ap"}}),
    );
    assert_eq!(
        done["completion"]["values"],
        json!(["apple", "apricot"]),
        "{done}"
    );
}

#[test]
fn a_python_sdk_2_server_serves_a_2026_client_through_the_engine() {
    let (s, _app) = serve();
    let caps = json!({"elicitation": {"form": {}}});
    let ask = |method: &str, params: Value| {
        let r = mcp::post_2026(&s, &s.token, method, params, caps.clone(), None);
        crate::mcp::answer_of(r)
    };
    let r = ask(
        "tools/call",
        json!({"name": "add", "arguments": {"a": 2, "b": 3}}),
    );
    assert_eq!(
        r["result"]["content"][0]["text"], "{\n  \"sum\": 5,\n  \"priority\": 1\n}",
        "{r}"
    );
    // The app asks for a name during the call: an input request, answered on the next round.
    let r = ask("tools/call", json!({"name": "greet", "arguments": {}}));
    let result = &r["result"];
    assert_eq!(result["resultType"], "input_required", "{r}");
    let requests = result["inputRequests"].as_object().expect("inputRequests");
    let (key, request) = requests.iter().next().expect("one request");
    assert_eq!(request["method"], "elicitation/create", "{r}");
    assert_eq!(request["params"]["message"], "What is your name?", "{r}");
    let again = json!({"name": "greet", "arguments": {},
        "inputResponses": {key.clone(): {"action": "accept", "content": {"name": "Grace"}}},
        "requestState": result["requestState"]});
    let r = ask("tools/call", again);
    assert_eq!(r["result"]["content"][0]["text"], "Hello, Grace!", "{r}");

    let r = ask("resources/read", json!({"uri": "file://pyapp//a.txt"}));
    assert_eq!(r["result"]["contents"][0]["text"], "alpha", "{r}");
    let p = ask(
        "prompts/get",
        json!({"name": "topic", "arguments": {"subject": "owls"}}),
    );
    assert_eq!(
        p["result"]["messages"][0]["content"]["text"], "Tell me about owls.",
        "{p}"
    );
}
