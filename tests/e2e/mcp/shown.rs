//! An agent is shown the tools its apps list to a client like it: an app (here a real rmcp
//! server) that lists a tool only to clients that declare `sampling` has that tool shown to an
//! agent that declared it and not to one that did not, whether the agent keeps a session
//! (2025-06-18, the lean path and rmcp's) or declares its capabilities with each request
//! (2026-07-28). The HTTP listing, for no agent, shows every tool.

use crate::kit::*;
use crate::mcp::RawSession;
use rmcp::handler::server::ServerHandler;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer};
use serde_json::{Value, json};
use std::sync::Arc;

#[derive(Clone)]
struct Picky;

fn tool(name: &str) -> Tool {
    serde_json::from_value(json!({"name": name, "description": "a picky tool",
        "inputSchema": {"type": "object"}}))
    .unwrap()
}

impl ServerHandler for Picky {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    /// `picky_always` to everyone; `picky_sampling` only to a client that declared sampling.
    async fn list_tools(
        &self,
        _req: Option<PaginatedRequestParams>,
        rc: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let sampling = rc
            .peer
            .peer_info()
            .is_some_and(|i| i.capabilities.sampling.is_some());
        let mut tools = vec![tool("picky_always")];
        if sampling {
            tools.push(tool("picky_sampling"));
        }
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        req: CallToolRequestParams,
        _rc: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let text = format!("picky {}", req.name);
        Ok(CallToolResult::success(vec![ContentBlock::text(text)]).into())
    }
}

/// Serves the app on its own thread until the process ends; answers its MCP URL.
fn serve() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let service = StreamableHttpService::new(
                || Ok(Picky),
                Arc::new(LocalSessionManager::default()),
                StreamableHttpServerConfig::default(),
            );
            let app = axum::Router::new().nest_service("/mcp", service);
            let l = tokio::net::TcpListener::from_std(listener).unwrap();
            axum::serve(l, app).await.unwrap();
        });
    });
    format!("http://{addr}/mcp")
}

/// The names of the apps' tools (`picky_*`) in a `tools/list` answer.
fn picky(answer: &Value) -> Vec<String> {
    let tools = answer["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("{answer}"));
    tools
        .iter()
        .filter_map(|t| t["name"].as_str())
        .filter(|n| n.starts_with("picky_"))
        .map(String::from)
        .collect()
}

/// A `tools/list` of protocol 2026-07-28 (no session), declaring `capabilities`.
fn list_2026(s: &Server, capabilities: Value) -> Value {
    let r = mcp::post_2026(s, &s.token, "tools/list", json!({}), capabilities, None);
    crate::mcp::answer_of(r)
}

#[test]
fn an_agent_is_shown_the_tools_its_apps_list_to_a_client_like_it() {
    let s = Server::start();
    let url = serve();
    let (st, v) = s.post(
        "/datanotes/apps/create/",
        Some(&s.token),
        &json!({"name": "picky", "mcp_url": url}),
    );
    assert_eq!(st, 200, "{v}");
    // The app is listed on a session that declares every capability: both tools.
    assert_eq!(
        v["app"]["tools"],
        json!(["picky_always", "picky_sampling"]),
        "{v}"
    );

    let both = ["picky_always", "picky_sampling"];
    // An agent that declared sampling; one that did not (each listing twice: the second from
    // what the first learned). The lean path answers JSON-only clients; rmcp the rest.
    for accept_json_only in [true, false] {
        let with = RawSession::open_with(&s, json!({"sampling": {}}), "2025-06-18");
        let without = RawSession::open_with(&s, json!({"roots": {}}), "2025-06-18");
        for _ in 0..2 {
            let ask = |raw: &RawSession| match accept_json_only {
                true => raw.ask(2, "tools/list", json!({})),
                // A cursor: the lean path leaves the request to rmcp (which lists all).
                false => raw.ask(2, "tools/list", json!({"cursor": "rmcp"})),
            };
            assert_eq!(picky(&ask(&with)), both);
            assert_eq!(picky(&ask(&without)), ["picky_always"]);
        }
    }
    // A client of 2026-07-28 declares its capabilities with each request.
    assert_eq!(picky(&list_2026(&s, json!({"sampling": {}}))), both);
    assert_eq!(picky(&list_2026(&s, json!({}))), ["picky_always"]);
    // Over HTTP there is no agent: every tool.
    let (st, v) = s.post("/datanotes/apps/tools/", Some(&s.token), &json!({}));
    assert_eq!(st, 200, "{v}");
    let names: Vec<&str> = v["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["app"] == "picky")
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert_eq!(names, both);
    // A hidden tool is only not shown: a call of it goes to the app, which decides.
    let without = RawSession::open_with(&s, json!({}), "2025-06-18");
    let r = without.ask(
        3,
        "tools/call",
        json!({"name": "picky_sampling", "arguments": {}}),
    );
    assert_eq!(
        r["result"]["content"][0]["text"], "picky picky_sampling",
        "{r}"
    );
}
