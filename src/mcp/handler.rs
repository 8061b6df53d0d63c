//! The MCP protocol handler: rmcp's `ServerHandler` for the engine, every method an agent may
//! send (initialize, tools, resources, prompts, completions, tasks, logging), each through the
//! aggregator and `auth::authorize` like the HTTP door.

use super::*;

impl ServerHandler for Mcp {
    #[allow(deprecated)] // MCP logging (SEP-2577 deprecates it; clients still use it)
    fn get_info(&self) -> ServerConfig {
        let mut imp = Implementation::new("datanotes-mcp", env!("CARGO_PKG_VERSION"));
        imp.title = Some("datanotes".into());
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_logging()
                .enable_tools()
                .enable_tool_list_changed()
                .enable_resources()
                .enable_resources_subscribe()
                .enable_resources_list_changed()
                .enable_prompts()
                .enable_prompts_list_changed()
                .enable_completions()
                .enable_tasks()
                .build(),
        )
        .with_server_info(imp)
        .with_instructions(self.server.agg.instructions(&crate::auth::Caller::Owner))
    }

    /// `initialize`: the instructions are those of the apps whose tools the caller may call.
    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, ErrorData> {
        context.peer.set_peer_info(request.clone());
        let mut r = self.negotiate_initialize(&request)?;
        // The tasks extension is 2026-07-28's; a session has the tasks of 2025-11-25.
        let ext = &mut r.capabilities.extensions;
        ext.iter_mut()
            .for_each(|e| _ = e.remove(rmcp::model::TASKS_EXTENSION_ID));
        ext.take_if(|e| e.is_empty());
        // Without the request's caller (never over /mcp): the engine's instructions only.
        let caller = match self.ctx(&context) {
            Ok(ctx) => ctx.caller,
            Err(_) => crate::auth::Caller::App(Arc::new(crate::auth::AppScope::default())),
        };
        r.instructions = Some(self.server.agg.instructions(&caller));
        Ok(r)
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        let Some(id) = context
            .extensions
            .get::<http::request::Parts>()
            .and_then(|p| p.headers.get("mcp-session-id"))
            .and_then(|v| v.to_str().ok())
            .map(String::from)
        else {
            return;
        };
        let info = context.peer.peer_info();
        let client = info.as_ref().map(|i| i.client_info.name.clone());
        let caps = info.as_ref().map(|i| &i.capabilities);
        let asks = caps
            .and_then(|c| serde_json::to_value(c).ok())
            .map(crate::apps::backend::agent_capabilities)
            .unwrap_or_else(|| json!({}));
        let mut asks = asks;
        if let Some(t) = self.sessions.declared.lock().unwrap().remove(&id) {
            asks["tasks"] = t;
        }
        let session = Session {
            id: id.clone(),
            asks_key: crate::apps::backend::capabilities_key(&asks),
            asks,
            client,
            sampling: caps.is_some_and(|c| c.sampling.is_some()),
            elicitation: caps.is_some_and(|c| c.elicitation.is_some()),
            level: Default::default(),
            peer: context.peer,
            touched: Mutex::new(Instant::now()),
            inflight: Mutex::default(),
            subs: Mutex::default(),
            tasks: Mutex::default(),
            answers: Arc::default(),
            found: Mutex::default(),
        };
        self.sessions
            .open
            .write()
            .unwrap()
            .insert(id, Arc::new(session));
        self.sessions.added.notify_waiters();
    }

    async fn list_tools(
        &self,
        _req: Option<PaginatedRequestParams>,
        rc: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let ctx = self.ctx(&rc)?;
        let agg = &self.server.agg;
        let hidden = match (self.session_of(&rc).await, rc.meta.client_capabilities()) {
            (Some(s), _) => agg.hidden_from(&(s as Arc<dyn AgentChannel>)).await,
            // A client of 2026-07-28 declares its capabilities with each request.
            (None, Some(c)) => agg.hidden_from_declared(json!(c)).await,
            (None, None) => Arc::default(),
        };
        let tools = self.server.agg.tools(&ctx.caller, &hidden);
        let parts = rc.extensions.get::<http::request::Parts>();
        if parts.is_some_and(|p| listing::search_mode(&self.server, p, &ctx.caller)) {
            let session = self.session_of(&rc).await;
            let pinned = listing::pinned(&self.server, &ctx.caller);
            return Ok(ListToolsResult::with_all_items(listing::tools(
                tools,
                session.as_deref(),
                &pinned,
            )));
        }
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        req: CallToolRequestParams,
        rc: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let ctx = self.ctx(&rc)?;
        let args = Value::Object(req.arguments.unwrap_or_default());
        let name = req.name.to_string();
        let session = self.session_of(&rc).await;
        let agent = session.clone().map(|s| s as Arc<dyn AgentChannel>);
        // A client of 2026-07-28 (no session) takes the app's requests as input requests.
        if agent.is_none() && rounds::era(&rc) {
            if let Some(r) = self.call_as_ext_task(&rc, &ctx, &name, &args).await {
                return r;
            }
            let responses = req.input_responses.as_ref();
            let limit = self.server.agg.call_timeout();
            let client = self.channel(&rc, None);
            let state = req.request_state;
            return self
                .rounds
                .serve(
                    &self.server,
                    ctx,
                    name,
                    args,
                    state,
                    responses,
                    limit,
                    client,
                    rc.ct.clone(),
                    exact::Exact::of(&rc),
                )
                .await;
        }
        let parts = rc.extensions.get::<http::request::Parts>();
        let search = parts.is_some_and(|p| listing::search_mode(&self.server, p, &ctx.caller));
        let found = (search && name == "search_tools")
            .then(|| session.clone())
            .flatten();
        let client = self.channel(&rc, session);
        let cancel = rc.ct.clone();
        let served =
            calls::serve_call(&self.server, ctx, name, args, client, cancel, agent).await?;
        if let Some(s) = found {
            listing::found(&s, &served.result).await;
        }
        if let (Some(exact), Some(app)) = (exact::Exact::of(&rc), served.written(rounds::era(&rc)))
        {
            exact.result(app);
        }
        Ok(served.result.into())
    }

    async fn list_resources(
        &self,
        req: Option<PaginatedRequestParams>,
        rc: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        self.list_resources_for(req, &rc).await
    }

    async fn list_resource_templates(
        &self,
        _req: Option<PaginatedRequestParams>,
        rc: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        self.list_templates_for(&rc)
    }

    async fn read_resource(
        &self,
        req: ReadResourceRequestParams,
        rc: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        Ok(self.read_resource_for(req, &rc).await?.into())
    }

    async fn subscribe(
        &self,
        req: SubscribeRequestParams,
        rc: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.subscribe_for(&req.uri, true, &rc).await
    }

    async fn unsubscribe(
        &self,
        req: UnsubscribeRequestParams,
        rc: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.subscribe_for(&req.uri, false, &rc).await
    }

    async fn list_prompts(
        &self,
        _req: Option<PaginatedRequestParams>,
        rc: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        self.list_prompts_for(&rc)
    }

    async fn get_prompt(
        &self,
        req: GetPromptRequestParams,
        rc: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        Ok(self.get_prompt_for(req, &rc).await?.into())
    }

    async fn complete(
        &self,
        req: CompleteRequestParams,
        rc: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        self.complete_for(req, &rc).await
    }

    /// `subscriptions/listen` (2026-07-28): what it accepts, and running it (`listen.rs`).
    fn accepted_subscription_filter(
        &self,
        requested: &rmcp::model::SubscriptionFilter,
    ) -> Option<rmcp::model::SubscriptionFilter> {
        Some(self.listen_filter(requested))
    }

    async fn listen(&self, context: rmcp::service::SubscriptionContext) -> Result<(), ErrorData> {
        self.listen_for(context).await
    }

    /// `notifications/roots/list_changed`: the agent's sessions with apps are told.
    async fn on_roots_list_changed(&self, context: NotificationContext<RoleServer>) {
        let id = context
            .extensions
            .get::<http::request::Parts>()
            .and_then(|p| session_id(&p.headers).map(String::from));
        if let Some(id) = id {
            self.server.agg.roots_changed(&id).await;
        }
    }

    /// `tasks/get` of the tasks extension (2026-07-28, `task_ext.rs`).
    async fn get_task(
        &self,
        req: rmcp::model::GetTaskParams,
        rc: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::GetTaskResult, ErrorData> {
        self.get_ext_task(req, &rc).await
    }

    /// `tasks/update` of the tasks extension: the client's input to a task (`task_inputs.rs`).
    async fn update_task(
        &self,
        req: rmcp::model::UpdateTaskParams,
        rc: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.update_ext_task(req, &rc)
    }

    /// `tasks/cancel` of the tasks extension (2026-07-28, `task_ext.rs`).
    async fn cancel_task(
        &self,
        req: rmcp::model::CancelTaskParams,
        rc: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.cancel_ext_task(req, &rc).await
    }

    /// `logging/setLevel`: the lowest level of the apps' log messages this session receives.
    #[allow(deprecated)] // MCP logging (SEP-2577 deprecates it; clients still use it)
    async fn set_level(
        &self,
        req: rmcp::model::SetLevelRequestParams,
        rc: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        if let Some(s) = self.session_of(&rc).await {
            s.level.store(channel::rank(req.level), Ordering::Relaxed);
            // The agent's sessions with apps are set to it too.
            if let Some(level) = s.log_level() {
                self.server.agg.set_log_level(&s.id, level).await;
            }
        }
        Ok(())
    }
}

impl Mcp {
    /// The session of a request served by rmcp. A client may ask at once after
    /// `notifications/initialized`, which rmcp may not have handed over yet: a session named
    /// and not yet known is waited for (a second at most).
    pub(super) async fn session_of(&self, rc: &RequestContext<RoleServer>) -> Option<Arc<Session>> {
        let id = session_id_of(rc)?;
        self.sessions.soon(id, Duration::from_secs(1)).await
    }

    /// The client's side of a call served by rmcp, on its `session`: none if it may receive
    /// nothing (no progress token, no log level, neither sampling nor elicitation).
    pub(super) fn channel(
        &self,
        rc: &RequestContext<RoleServer>,
        session: Option<Arc<Session>>,
    ) -> Option<Arc<dyn ClientChannel>> {
        let progress = rc.meta.get_progress_token();
        if progress.is_none() && !session.as_ref().is_some_and(|s| s.listens()) {
            return None;
        }
        Some(Arc::new(channel::Channel {
            peer: rc.peer.clone(),
            progress,
            level: session
                .as_ref()
                .map_or(0, |s| s.level.load(Ordering::Relaxed)),
            sampling: session.as_ref().is_some_and(|s| s.sampling),
            elicitation: session.as_ref().is_some_and(|s| s.elicitation),
            roots: session
                .as_ref()
                .is_some_and(|s| s.asks.get("roots").is_some()),
            tasks: session
                .as_ref()
                .is_some_and(|s| s.asks.get("tasks").is_some()),
            answers: session.map(|s| s.answers.clone()),
            exact: exact::Exact::of(rc),
        }))
    }
}

/// The session id of a request served by rmcp (none: a client without a session).
fn session_id_of(rc: &RequestContext<RoleServer>) -> Option<&str> {
    session_id(&rc.extensions.get::<http::request::Parts>()?.headers)
}
