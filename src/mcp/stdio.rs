//! `datanotes mcp`: the MCP door over stdio, for desktop clients (Claude Desktop, Claude Code,
//! Cursor, VS Code). It is a thin proxy to a running server's `/mcp`: the same namespace, the same
//! token rules, the same tool-call events, and the server's `notifications/tools/list_changed`
//! passed on. The proxy introduces itself to the server with the desktop client's own
//! `clientInfo`, so the server builds the actor as for any `/mcp` client (one function,
//! `mcp::client_actor`: the client's name as the harness, never its version as the model);
//! `--actor` overrides it.
//!
//! What an app sends during a call is passed on too: the server's log messages (after the
//! desktop client's `logging/setLevel`, forwarded), progress (with the desktop client's token),
//! and `sampling/createMessage` and `elicitation/create` requests (the proxy declares to the
//! server the capabilities the desktop client declared, and asks the desktop client). So are
//! resources, templates, prompts, completions and subscriptions (`stdio_content.rs`).
#![allow(deprecated)] // MCP logging (SEP-2577 deprecates it; clients still use it)

#[path = "stdio_content.rs"]
mod content;

use content::params;

use crate::apps::plain::{self, Peer as Who};
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResponse, ClientCapabilities, ClientRequest,
    ClientResult, CreateMessageRequest, CreateMessageRequestParams, CreateMessageResult,
    ElicitRequest, ElicitRequestParams, ElicitResult, InitializeRequestParams, InitializeResult,
    ListToolsResult, LoggingMessageNotificationParam, PaginatedRequestParams,
    ProgressNotificationParam, ProgressToken, ServerRequest, ServerResult, SetLevelRequestParams,
};
use rmcp::service::PeerRequestOptions;
use rmcp::service::{NotificationContext, Peer, RequestContext, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, ErrorData, RoleClient, RoleServer, ServerHandler, ServiceExt};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The desktop client, once it has initialized: where the server's notifications go.
type Downstream = Arc<Mutex<Option<Peer<RoleServer>>>>;

/// The calls in flight: the proxy's progress token with the server → the desktop client's.
type Tokens = Arc<Mutex<HashMap<ProgressToken, ProgressToken>>>;

/// The proxy's side of its session with the server: introduces itself with the desktop client's
/// `clientInfo` (and its sampling and elicitation capabilities) and passes on `list_changed`,
/// log messages, progress and the requests of a call.
#[derive(Clone)]
struct Forward {
    down: Downstream,
    client: Option<rmcp::model::Implementation>,
    caps: Option<ClientCapabilities>,
    tokens: Tokens,
}

impl Forward {
    fn down(&self) -> Result<Peer<RoleServer>, ErrorData> {
        self.down
            .lock()
            .unwrap()
            .clone()
            .ok_or_else(|| ErrorData::internal_error("the desktop client is gone", None))
    }

    /// Asks the desktop client.
    async fn ask(&self, request: ServerRequest) -> Result<ClientResult, ErrorData> {
        self.down()?
            .send_request(request)
            .await
            .map_err(|e| match e {
                rmcp::ServiceError::McpError(e) => e,
                _ => ErrorData::internal_error("the desktop client did not answer", None),
            })
    }
}

/// The `_meta` the app gave its request (rmcp reads it apart from the params), given back to
/// the request passed on, as the request's own (rmcp's added progress token is dropped on the
/// way out, [`super::outgoing::AsSent`]).
fn own_meta(
    params: &mut impl rmcp::model::RequestParamsMeta,
    meta: rmcp::model::RequestMetaObject,
) {
    if !meta.0.is_empty() {
        params.set_meta(meta);
    }
}

impl ClientHandler for Forward {
    fn get_info(&self) -> rmcp::model::ClientConfig {
        let mut info = rmcp::model::ClientConfig::default();
        if let Some(c) = self.client.clone() {
            info.client_info = c;
        }
        if let Some(c) = &self.caps {
            info.capabilities.sampling = c.sampling.clone();
            info.capabilities.elicitation = c.elicitation.clone();
        }
        info
    }

    async fn create_message(
        &self,
        mut params: CreateMessageRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, ErrorData> {
        own_meta(&mut params, context.meta);
        match self
            .ask(ServerRequest::CreateMessageRequest(
                CreateMessageRequest::new(params),
            ))
            .await?
        {
            ClientResult::CreateMessageResult(r) => Ok(*r),
            _ => Err(ErrorData::internal_error(
                "the desktop client answered something other than a message",
                None,
            )),
        }
    }

    async fn create_elicitation(
        &self,
        mut params: ElicitRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        own_meta(&mut params, context.meta);
        match self
            .ask(ServerRequest::ElicitRequest(ElicitRequest::new(params)))
            .await?
        {
            ClientResult::ElicitResult(r) => Ok(r),
            _ => Err(ErrorData::internal_error(
                "the desktop client answered something other than an elicitation result",
                None,
            )),
        }
    }

    async fn on_logging_message(
        &self,
        params: LoggingMessageNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        if let Ok(p) = self.down() {
            let _ = p.notify_logging_message(params).await;
        }
    }

    async fn on_progress(
        &self,
        mut params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let token = self
            .tokens
            .lock()
            .unwrap()
            .get(&params.progress_token)
            .cloned();
        if let (Some(t), Ok(p)) = (token, self.down()) {
            params.progress_token = t;
            let _ = p.notify_progress(params).await;
        }
    }

    async fn on_resource_updated(
        &self,
        params: rmcp::model::ResourceUpdatedNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        if let Ok(p) = self.down() {
            let _ = p.notify_resource_updated(params).await;
        }
    }

    async fn on_resource_list_changed(&self, _context: NotificationContext<RoleClient>) {
        if let Ok(p) = self.down() {
            let _ = p.notify_resource_list_changed().await;
        }
    }

    async fn on_prompt_list_changed(&self, _context: NotificationContext<RoleClient>) {
        if let Ok(p) = self.down() {
            let _ = p.notify_prompt_list_changed().await;
        }
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        let peer = self.down.lock().unwrap().clone();
        if let Some(p) = peer {
            let _ = p.notify_tool_list_changed().await;
        }
    }
}

type Upstream = Arc<RunningService<RoleClient, Forward>>;

/// The stdio server: forwards each request to the running server's `/mcp`.
pub struct Proxy {
    url: String,
    token: String,
    actor: Option<String>,
    down: Downstream,
    /// The desktop client's `clientInfo`, once it has initialized: kept for every reconnection.
    client: Mutex<Option<rmcp::model::Implementation>>,
    /// The desktop client's capabilities (sampling and elicitation are declared to the server).
    caps: Mutex<Option<ClientCapabilities>>,
    tokens: Tokens,
    upstream: tokio::sync::Mutex<Option<Upstream>>,
}

impl Proxy {
    async fn upstream(&self) -> Result<Upstream, ErrorData> {
        let mut up = self.upstream.lock().await;
        if let Some(u) = up.as_ref()
            && !u.is_closed()
        {
            return Ok(u.clone());
        }
        let mut cfg = StreamableHttpClientTransportConfig::with_uri(self.url.as_str())
            .auth_header(self.token.clone());
        if let Some(v) = self.actor.as_deref().and_then(|a| a.parse().ok()) {
            cfg = cfg.custom_headers(HashMap::from([(
                http::HeaderName::from_static("x-datanotes-actor"),
                v,
            )]));
        }
        let forward = Forward {
            down: self.down.clone(),
            client: self.client.lock().unwrap().clone(),
            caps: self.caps.lock().unwrap().clone(),
            tokens: self.tokens.clone(),
        };
        let client = forward
            .serve(StreamableHttpClientTransport::from_config(cfg))
            .await
            .map_err(|e| {
                ErrorData::internal_error(plain::init_error(&self.url, Who::Engine, &e), None)
            })?;
        let client = Arc::new(client);
        *up = Some(client.clone());
        Ok(client)
    }

    fn upstream_err(&self, e: rmcp::ServiceError) -> ErrorData {
        match e {
            rmcp::ServiceError::McpError(e) => e,
            e => ErrorData::internal_error(plain::service_error(&self.url, Who::Engine, &e), None),
        }
    }
}

impl ServerHandler for Proxy {
    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, ErrorData> {
        context.peer.set_peer_info(request.clone());
        *self.down.lock().unwrap() = Some(context.peer.clone());
        // The server builds the actor from this clientInfo, as for any /mcp client.
        *self.client.lock().unwrap() = Some(request.client_info.clone());
        *self.caps.lock().unwrap() = Some(request.capabilities.clone());
        let up = self.upstream().await?;
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
                .enable_logging()
                .enable_tools()
                .enable_tool_list_changed()
                .enable_resources()
                .enable_resources_subscribe()
                .enable_resources_list_changed()
                .enable_prompts()
                .enable_prompts_list_changed()
                .enable_completions()
                .build(),
        )
    }

    async fn list_tools(
        &self,
        _req: Option<PaginatedRequestParams>,
        _rc: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let up = self.upstream().await?;
        let tools = up
            .list_all_tools()
            .await
            .map_err(|e| self.upstream_err(e))?;
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        req: CallToolRequestParams,
        rc: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let up = self.upstream().await?;
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(req));
        let handle = up
            .send_cancellable_request(request, PeerRequestOptions::no_options())
            .await
            .map_err(|e| self.upstream_err(e))?;
        // The server's progress for this call goes to the desktop client with its own token.
        let theirs = handle.progress_token.clone();
        if let Some(mine) = rc.meta.get_progress_token() {
            self.tokens.lock().unwrap().insert(theirs.clone(), mine);
        }
        let r = handle.await_response().await;
        self.tokens.lock().unwrap().remove(&theirs);
        match r.map_err(|e| self.upstream_err(e))? {
            ServerResult::CallToolResult(r) => Ok(r.into()),
            _ => Err(ErrorData::internal_error(
                "the server answered something other than a tool result",
                None,
            )),
        }
    }

    async fn list_resources(
        &self,
        req: Option<PaginatedRequestParams>,
        _rc: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ListResourcesResult, ErrorData> {
        self.pass("resources/list", params(req)).await
    }

    async fn list_resource_templates(
        &self,
        req: Option<PaginatedRequestParams>,
        _rc: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ListResourceTemplatesResult, ErrorData> {
        self.pass("resources/templates/list", params(req)).await
    }

    async fn read_resource(
        &self,
        req: rmcp::model::ReadResourceRequestParams,
        _rc: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ReadResourceResponse, ErrorData> {
        let r: rmcp::model::ReadResourceResult =
            self.pass("resources/read", params(Some(req))).await?;
        Ok(r.into())
    }

    async fn subscribe(
        &self,
        req: rmcp::model::SubscribeRequestParams,
        _rc: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let _: serde_json::Value = self.pass("resources/subscribe", params(Some(req))).await?;
        Ok(())
    }

    async fn unsubscribe(
        &self,
        req: rmcp::model::UnsubscribeRequestParams,
        _rc: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let _: serde_json::Value = self
            .pass("resources/unsubscribe", params(Some(req)))
            .await?;
        Ok(())
    }

    async fn list_prompts(
        &self,
        req: Option<PaginatedRequestParams>,
        _rc: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ListPromptsResult, ErrorData> {
        self.pass("prompts/list", params(req)).await
    }

    async fn get_prompt(
        &self,
        req: rmcp::model::GetPromptRequestParams,
        _rc: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::GetPromptResponse, ErrorData> {
        let r: rmcp::model::GetPromptResult = self.pass("prompts/get", params(Some(req))).await?;
        Ok(r.into())
    }

    async fn complete(
        &self,
        req: rmcp::model::CompleteRequestParams,
        _rc: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::CompleteResult, ErrorData> {
        self.pass("completion/complete", params(Some(req))).await
    }

    async fn set_level(
        &self,
        req: SetLevelRequestParams,
        _rc: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let up = self.upstream().await?;
        up.set_level(req).await.map_err(|e| self.upstream_err(e))
    }
}

/// Serves MCP on stdin/stdout until the client goes away (a clean exit says nothing).
pub async fn run(url: String, token: String, actor: Option<String>) -> anyhow::Result<()> {
    let proxy = Proxy {
        url,
        token,
        actor,
        down: Arc::new(Mutex::new(None)),
        client: Mutex::new(None),
        caps: Mutex::new(None),
        tokens: Default::default(),
        upstream: tokio::sync::Mutex::new(None),
    };
    let (stdin, stdout) = rmcp::transport::stdio();
    let io = rmcp::transport::async_rw::AsyncRwTransport::new_server(stdin, stdout);
    let service = proxy.serve(super::outgoing::AsSent(io)).await?;
    let _ = service.waiting().await;
    Ok(())
}
