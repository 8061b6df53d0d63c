//! `datanotes mcp`: the MCP door over stdio, for desktop clients (Claude Desktop, Claude Code,
//! Cursor, VS Code). It is a thin proxy to a running server's `/mcp`: the same namespace, the same
//! token rules, the same tool-call events. The client's name and version become the actor.

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, InitializeRequestParams, InitializeResult,
    ListToolsResult, PaginatedRequestParams,
};
use rmcp::service::{RequestContext, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ErrorData, RoleClient, RoleServer, ServerHandler, ServiceExt};
use std::collections::HashMap;
use std::sync::Arc;

type Upstream = Arc<RunningService<RoleClient, ()>>;

pub struct Proxy {
    url: String,
    token: String,
    actor: Option<String>,
    upstream: tokio::sync::Mutex<Option<Upstream>>,
}

impl Proxy {
    async fn upstream(&self, actor: Option<String>) -> Result<Upstream, ErrorData> {
        let mut up = self.upstream.lock().await;
        if let Some(u) = up.as_ref()
            && !u.is_closed()
        {
            return Ok(u.clone());
        }
        let mut cfg = StreamableHttpClientTransportConfig::with_uri(self.url.as_str())
            .auth_header(self.token.clone());
        if let Some(v) = self.actor.clone().or(actor).and_then(|a| a.parse().ok()) {
            cfg = cfg.custom_headers(HashMap::from([(
                http::HeaderName::from_static("x-datanotes-actor"),
                v,
            )]));
        }
        let client =
            ().serve(StreamableHttpClientTransport::from_config(cfg))
                .await
                .map_err(|e| {
                    ErrorData::internal_error(
                        format!("cannot reach the datanotes server at {}: {e}", self.url),
                        None,
                    )
                })?;
        let client = Arc::new(client);
        *up = Some(client.clone());
        Ok(client)
    }
}

fn upstream_err(e: rmcp::ServiceError) -> ErrorData {
    match e {
        rmcp::ServiceError::McpError(e) => e,
        e => ErrorData::internal_error(format!("the datanotes server did not answer: {e}"), None),
    }
}

impl ServerHandler for Proxy {
    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, ErrorData> {
        context.peer.set_peer_info(request.clone());
        let c = &request.client_info;
        let up = self
            .upstream(Some(format!("{} / {}", c.name, c.version)))
            .await?;
        let mut info = self.negotiate_initialize(&request)?;
        if let Some(u) = up.peer_info() {
            info.instructions = u.instructions.clone();
            if let Some(si) = u.server_info.clone() {
                info.server_info = si;
            }
        }
        Ok(info)
    }

    fn get_info(&self) -> rmcp::model::ServerConfig {
        rmcp::model::ServerConfig::new(
            rmcp::model::ServerCapabilities::builder()
                .enable_tools()
                .build(),
        )
    }

    async fn list_tools(
        &self,
        _req: Option<PaginatedRequestParams>,
        _rc: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let up = self.upstream(None).await?;
        let tools = up.list_all_tools().await.map_err(upstream_err)?;
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        req: CallToolRequestParams,
        _rc: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let up = self.upstream(None).await?;
        let r = up.call_tool(req).await.map_err(upstream_err)?;
        Ok(r.into())
    }
}

/// Serves MCP on stdin/stdout until the client goes away.
pub async fn run(url: String, token: String, actor: Option<String>) -> anyhow::Result<()> {
    let proxy = Proxy {
        url,
        token,
        actor,
        upstream: tokio::sync::Mutex::new(None),
    };
    let service = proxy.serve(rmcp::transport::stdio()).await?;
    service.waiting().await?;
    Ok(())
}
