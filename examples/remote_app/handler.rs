//! rmcp's `ServerHandler` for the app: `initialize`, `tools/list` (with the slow, endless, huge
//! and failing knobs), `tools/call`, and the trivial resources and prompts.

use crate::tools::{App, trivial};
use crate::{Args, TABLE};
use rmcp::handler::server::tool::ToolCallContext;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, GetPromptRequestParams,
    GetPromptResponse, GetPromptResult, Implementation, InitializeRequestParams, InitializeResult,
    ListPromptsResult, ListResourcesResult, ListToolsResult, PaginatedRequestParams,
    PromptsCapability, ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult,
    ResourcesCapability, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Value, json};
use std::sync::atomic::Ordering;
use std::time::Duration;

/// The URI of the trivial resource `i` (`--resources`; the engine serves it as
/// `test://<app>/r<i>`).
fn resource_uri(i: usize) -> String {
    format!("test://r{i}")
}

/// The name of the trivial prompt `i` (`--prompts`).
fn prompt_name(a: &Args, i: usize) -> String {
    let prefix = a.prefix.clone().unwrap_or_else(|| a.name.replace('-', "_"));
    format!("{prefix}_p{i}")
}

/// A JSON answer as rmcp's typed result.
fn typed<T: serde::de::DeserializeOwned>(v: Value) -> Result<T, ErrorData> {
    serde_json::from_value(v).map_err(|e| ErrorData::internal_error(e.to_string(), None))
}

async fn pause(ms: u64) {
    if ms > 0 {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
}

impl ServerHandler for App {
    fn get_info(&self) -> ServerConfig {
        let mut caps = ServerCapabilities::builder().enable_tools().build();
        if self.s.args.resources > 0 {
            caps.resources = Some(ResourcesCapability::default());
        }
        if self.s.args.prompts > 0 {
            caps.prompts = Some(PromptsCapability::default());
        }
        ServerConfig::new(caps)
            .with_server_info(Implementation::new(
                self.s.args.name.clone(),
                env!("CARGO_PKG_VERSION"),
            ))
            .with_instructions({
                let mut i = format!(
                    "App {}: plan tasks in {TABLE} with its add, list and complete tools.",
                    self.s.args.name
                );
                let want = self.s.args.instructions_bytes;
                if i.len() < want {
                    i.push_str(&"i".repeat(want - i.len()));
                }
                i
            })
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, ErrorData> {
        pause(self.s.args.slow_open_ms).await;
        self.s.initializes.fetch_add(1, Ordering::SeqCst);
        context.peer.set_peer_info(request.clone());
        self.negotiate_initialize(&request)
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        pause(self.s.args.slow_list_ms).await;
        self.s.lists.fetch_add(1, Ordering::SeqCst);
        let a = &self.s.args;
        if a.fail_list {
            return Err(ErrorData::internal_error(
                "this app refuses to list its tools (--fail-list)",
                None,
            ));
        }
        if a.endless_listing {
            let page: u64 = request
                .and_then(|r| r.cursor)
                .and_then(|c| c.parse().ok())
                .unwrap_or(0);
            let tools = (0..a.page_tools)
                .map(|i| trivial(&format!("endless_{page}_{i}"), &a.name, a.pad_bytes))
                .collect();
            let mut r = ListToolsResult::with_all_items(tools);
            r.next_cursor = Some((page + 1).to_string());
            return Ok(r);
        }
        let mut tools = self.router.list_all();
        tools.extend(
            (0..a.huge_listing).map(|i| trivial(&format!("huge_{i}"), &a.name, a.pad_bytes)),
        );
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        pause(self.s.args.slow_call_ms).await;
        if request.name == "datanotes_test_stats" {
            let stats = json!({
                "initializes": self.s.initializes.load(Ordering::SeqCst),
                "lists": self.s.lists.load(Ordering::SeqCst),
            });
            return Ok(CallToolResult::structured(stats).into());
        }
        self.router
            .call(ToolCallContext::new(self, request, context))
            .await
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.router.get(name).cloned()
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let a = &self.s.args;
        let resources: Vec<Value> = (1..=a.resources)
            .map(|i| {
                json!({"uri": resource_uri(i), "name": format!("r{i}"),
                       "description": format!("A trivial resource of app {}.", a.name),
                       "mimeType": "text/plain"})
            })
            .collect();
        typed(json!({"resources": resources}))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let a = &self.s.args;
        let Some(i) = (1..=a.resources).find(|&i| resource_uri(i) == request.uri) else {
            return Err(ErrorData::resource_not_found(
                format!("no resource {}", request.uri),
                None,
            ));
        };
        let text = format!("resource r{i} of app {}", a.name);
        let r: ReadResourceResult = typed(json!({"contents": [
            {"uri": request.uri, "mimeType": "text/plain", "text": text}
        ]}))?;
        Ok(r.into())
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        let a = &self.s.args;
        let prompts: Vec<Value> = (1..=a.prompts)
            .map(|i| {
                json!({"name": prompt_name(a, i),
                       "description": format!("A trivial prompt of app {}.", a.name)})
            })
            .collect();
        typed(json!({"prompts": prompts}))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        let a = &self.s.args;
        let Some(i) = (1..=a.prompts).find(|&i| prompt_name(a, i) == request.name) else {
            return Err(ErrorData::invalid_params(
                format!("no prompt {}", request.name),
                None,
            ));
        };
        let text = format!("prompt p{i} of app {}", a.name);
        let r: GetPromptResult = typed(json!({
            "description": format!("A trivial prompt of app {}.", a.name),
            "messages": [{"role": "user", "content": {"type": "text", "text": text}}]
        }))?;
        Ok(r.into())
    }
}
