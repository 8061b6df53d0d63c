//! The `/mcp` address over HTTP: the gate (hosts, tokens, session ownership), the lean path
//! for `ping`, `tools/list` and `tools/call`, rmcp's streamable HTTP service for the rest, and
//! the session ledger's caps; [`router`] mounts it.

use super::*;

/// The `/mcp` address: the lean path, then rmcp's service.
pub(super) struct Door {
    pub(super) mcp: Mcp,
    pub(super) manager: Arc<outgoing::Outgoing>,
    pub(super) service: StreamableHttpService<Mcp, outgoing::Outgoing>,
    /// The open sessions' tokens and last uses (their caps and idle expiry).
    pub(super) ledger: sessions::Ledger,
}

/// rmcp closes a session after this long without traffic it sees: the lean path tells it
/// about its calls at most this often.
pub(super) const TOUCH_EVERY: Duration = Duration::from_secs(30);

/// Coalesces bursts of namespace changes: after a `list_changed`, the next waits for this long
/// without a change...
const LIST_CHANGED_QUIET: Duration = Duration::from_millis(200);
/// ... or for this long while the changes go on.
const LIST_CHANGED_MOST: Duration = Duration::from_secs(1);

impl Door {
    async fn handle(self: Arc<Self>, req: Request) -> Response {
        if let Some(r) = self.gate(&req) {
            return r;
        }
        if req.method() == Method::POST && session_id(req.headers()).is_none() {
            return self.open_session(req).await;
        }
        self.serve(req).await
    }

    /// A request on a session the ledger does not hold open is answered 404 here, saying why;
    /// so is one on another principal's session (a POST, its GET stream or a resume, DELETE),
    /// which leaves that session as it was.
    fn gate(&self, req: &Request) -> Option<Response> {
        let id = session_id(req.headers())?;
        let token = req
            .extensions()
            .get::<Ctx>()
            .map(|c| c.caller.token_name())
            .unwrap_or_default();
        match self.ledger.seen(id, &token) {
            sessions::Seen::Open => None,
            sessions::Seen::Foreign => Some(self.ledger.closed_answer(false)),
            seen => {
                let expired = matches!(seen, sessions::Seen::Expired);
                self.close(vec![id.to_string()]);
                Some(self.ledger.closed_answer(expired))
            }
        }
    }

    /// A request without a session (`initialize`): a session it opens is admitted to the
    /// ledger, which may close others (idle, or least recently used beyond a cap).
    async fn open_session(&self, req: Request) -> Response {
        let token = req
            .extensions()
            .get::<Ctx>()
            .map(|c| c.caller.token_name())
            .unwrap_or_default();
        let r = self.serve(req).await;
        if let Some(id) = sessions::opened(r.headers()) {
            let gone = self.ledger.admit(&id, &token);
            self.close(gone);
        }
        r
    }

    /// Closes sessions: rmcp's worker and the lean path's entry.
    fn close(&self, ids: Vec<String>) {
        for id in ids {
            self.mcp.sessions.forget(&id);
            let manager = self.manager.clone();
            tokio::spawn(async move {
                let _ = manager.close_session(&id.into()).await;
            });
        }
    }

    async fn serve(&self, req: Request) -> Response {
        if req.method() == Method::POST {
            let (mut parts, body) = req.into_parts();
            let bytes = match axum::body::to_bytes(body, crate::server::MAX_BODY).await {
                Ok(b) => b,
                Err(_) => {
                    return (
                        StatusCode::PAYLOAD_TOO_LARGE,
                        "the request body is too large",
                    )
                        .into_response();
                }
            };
            let observed = observe::start(&parts, &bytes);
            if let Some(ctx) = parts.extensions.get_mut::<Ctx>() {
                ctx.observed = observed.clone();
            }
            let r = self.serve_post(parts, bytes).await;
            return observe::watch(r, observed);
        }
        if req.method() == Method::DELETE {
            let id = session_id(req.headers()).map(String::from);
            let mut r = self.service.handle(req).await.into_response();
            if r.status() == StatusCode::ACCEPTED {
                // A session ended: clients expect 200 or 204.
                *r.status_mut() = StatusCode::NO_CONTENT;
                *r.body_mut() = Body::empty();
            }
            if let Some(id) = id {
                self.mcp.sessions.forget(&id);
                self.ledger.forget(&id);
            }
            return r;
        }
        let mut req = req;
        sessions::resume_after(req.headers_mut());
        self.service.handle(req).await.into_response()
    }

    /// A POSTed message: the lean path, else rmcp's service.
    async fn serve_post(&self, mut parts: http::request::Parts, bytes: Bytes) -> Response {
        if let Some(r) = self.lean(&parts, &bytes).await {
            return r;
        }
        // A new session's client's `tasks`, kept for `notifications/initialized`.
        let opens = session_id(&parts.headers).is_none() && tasks::is_initialize(&bytes);
        let tasks = opens.then(|| tasks::declared(&bytes)).flatten();
        if let Some(s) = session_id(&parts.headers).and_then(|id| self.mcp.sessions.get(id)) {
            s.answers.keep(&bytes);
        }
        let listens = self.mcp.subscribe_first(&mut parts, &bytes).await;
        let kept = listens.as_ref().map(|_| parts.clone());
        let exact = exact::wanted(&bytes).map(|id| (id, exact::Exact::default()));
        if let Some((_, e)) = &exact {
            parts.extensions.insert(e.clone());
        }
        let req = Request::from_parts(parts, Body::from(bytes));
        let mut r = self.service.handle(req).await.into_response();
        if let Some((id, e)) = exact {
            r = exact::written(r, id, e);
        }
        if let (Some(s), Some(p)) = (listens, kept)
            && !sessions::streams(&r)
        {
            self.mcp.unsubscribe(&p, s);
        }
        if opens && r.status().is_success() {
            r = tasks::announce(r);
        }
        if let (Some(t), Some(id)) = (tasks, sessions::opened(r.headers())) {
            self.mcp.sessions.declared.lock().unwrap().insert(id, t);
        }
        r
    }
}

/// The `/mcp` service, mounted on the engine's router, answering the `Host` and `Origin`
/// that `hosts` accepts.
pub fn router(server: Shared, hosts: hosts::Hosts) -> axum::Router {
    let sessions = Arc::new(Sessions::default());
    let mcp = Mcp {
        server: server.clone(),
        sessions: sessions.clone(),
        rounds: Default::default(),
        sessionless: Default::default(),
    };
    // Host and Origin are checked by `hosts`, first, for the lean path and rmcp's alike.
    let config = StreamableHttpServerConfig::default().disable_allowed_hosts();
    let caps = sessions::SessionCaps::from_env();
    // At shutdown, end every session: an open SSE stream must not hold the server up.
    let ct = config.cancellation_token.clone();
    let mut closing = server.closing.subscribe();
    tokio::spawn(async move {
        let _ = closing.wait_for(|v| *v).await;
        ct.cancel();
    });
    let mut manager = LocalSessionManager::default();
    manager.session_config.keep_alive = Some(caps.idle);
    let manager = Arc::new(outgoing::Outgoing(manager));
    let factory = mcp.clone();
    let service = StreamableHttpService::new(move || Ok(factory.clone()), manager.clone(), config);
    // list_changed: the first change of a burst at once, the rest once the burst has been
    // quiet for 200 ms (at most one a second while it lasts).
    let mut changes = server.agg.subscribe();
    let mut closing = server.closing.subscribe();
    let notified = sessions.clone();
    tokio::spawn(async move {
        loop {
            tokio::select! {
                r = changes.changed() => if r.is_err() { return },
                _ = closing.wait_for(|v| *v) => return,
            }
            loop {
                changes.borrow_and_update();
                notified.notify_list_changed();
                let at = Instant::now();
                let mut pending = false;
                loop {
                    tokio::time::sleep(LIST_CHANGED_QUIET).await;
                    if !changes.has_changed().unwrap_or(false) {
                        break;
                    }
                    changes.borrow_and_update();
                    pending = true;
                    if at.elapsed() >= LIST_CHANGED_MOST {
                        break;
                    }
                }
                if !pending {
                    break;
                }
            }
        }
    });
    content::follow(server.clone(), sessions.clone());
    let door = Arc::new(Door {
        mcp,
        manager,
        service,
        ledger: sessions::Ledger::new(caps),
    });
    // Outermost first: `Host` and `Origin` (DNS rebinding protection), then the token.
    let hosts = Arc::new(hosts);
    axum::Router::new()
        .route(
            PATH,
            axum::routing::any(move |req: Request| door.clone().handle(req)),
        )
        .layer(axum::middleware::from_fn_with_state(
            server,
            guards::require_token,
        ))
        .layer(axum::middleware::from_fn(
            move |req: Request, next: Next| {
                let hosts = hosts.clone();
                async move {
                    match hosts.refuse(req.headers()) {
                        Some(r) => r,
                        None => next.run(req).await,
                    }
                }
            },
        ))
}
