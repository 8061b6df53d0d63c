//! The lean path beside rmcp's session worker: `ping`, `tools/list`, `tools/call`, the reads
//! and listings of resources and prompts, and tasks (`tasks.rs`), on an open session from a
//! client that accepts JSON,
//! answered here as one `application/json` answer, written once from the result (the answer
//! rmcp would give the same peer: it serves protocol versions before 2026-07-28 only). Its
//! calls in flight are cancelled by `notifications/cancelled` here; it tells rmcp's session
//! about its traffic now and then.
//!
//! A request on a session rmcp has not handed over yet (a client that calls at once after
//! `notifications/initialized`) waits for it, a second at most. The lean path tells rmcp's session
//! about its traffic every 30 s, so that an active session is not closed as idle. A listing copies
//! each tool's JSON as the aggregator wrote it once for the namespace (`Aggregator::tool_list`).

use super::*;

impl Door {
    /// Answers `ping`, `tools/list`, `tools/call`, and the reads and listings of resources and
    /// prompts, on an open session as one JSON answer; None: rmcp serves the request.
    pub(super) async fn lean(
        &self,
        parts: &http::request::Parts,
        body: &Bytes,
    ) -> Option<Response> {
        let h = &parts.headers;
        if !accepts_json(h) || !known_version(h) {
            return None;
        }
        let id = session_id(h)?;
        let mut msg: Value = serde_json::from_slice(body).ok()?;
        let method = msg.get("method").and_then(Value::as_str);
        if method == Some("notifications/cancelled") {
            let session = self.mcp.sessions.get(id)?;
            return self.cancel_lean(&session, &msg);
        }
        // A request (not a notification, not an answer) on a session opened a moment ago (the
        // ledger holds it open) waits for it: rmcp hands it over at `notifications/initialized`,
        // in its own time, and a client asks at once.
        if method.is_none() || msg.get("id").is_none() {
            return None;
        }
        let session = self.mcp.sessions.soon(id, Duration::from_secs(1)).await?;
        let rpc_id = msg
            .get("id")
            .filter(|i| i.is_string() || i.is_number())?
            .clone();
        let rpc_id = &rpc_id;
        if msg.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
            return None;
        }
        let server = &self.mcp.server;
        if tasks::is_task(&msg) {
            let ctx = self.mcp.server_ctx(parts, session.client.as_deref()).ok()?;
            let flight = InFlight::new(&session, rpc_id);
            let r = tasks::serve(server, &ctx, &session, &msg, flight.cancel.clone()).await;
            drop(flight);
            let answer = match r {
                Ok(r) => json!({"jsonrpc": "2.0", "id": rpc_id, "result": r}),
                Err(e) => json!({"jsonrpc": "2.0", "id": rpc_id, "error": e}),
            };
            self.touch(id, &session).await;
            let body = serde_json::to_vec(&answer).ok()?;
            return Some(([(header::CONTENT_TYPE, "application/json")], body).into_response());
        }
        let body = match msg.get("method").and_then(Value::as_str)? {
            "ping" => to_answer(rpc_id, &json!({}))?,
            "tools/list" => {
                if msg.pointer("/params/cursor").is_some_and(|c| !c.is_null()) {
                    return None;
                }
                let ctx = self.mcp.server_ctx(parts, session.client.as_deref()).ok()?;
                let agent = session.clone() as Arc<dyn AgentChannel>;
                let hidden = server.agg.hidden_from(&agent).await;
                if listing::search_mode(server, parts, &ctx.caller) {
                    let visible = server.agg.tools(&ctx.caller, &hidden);
                    let pinned = listing::pinned(server, &ctx.caller);
                    let tools = listing::tools(visible, Some(&session), &pinned);
                    to_answer(rpc_id, &json!({"tools": tools}))?
                } else {
                    to_answer(rpc_id, &server.agg.tool_list(&ctx.caller, &hidden))?
                }
            }
            "resources/read" | "resources/list" | "resources/templates/list" | "prompts/list" => {
                let ctx = self.mcp.server_ctx(parts, session.client.as_deref()).ok()?;
                let agent = Some(session.clone() as Arc<dyn AgentChannel>);
                match content::lean(server, &ctx, agent.as_ref(), &msg).await? {
                    Ok(r) => to_answer(rpc_id, &r)?,
                    Err(e) => {
                        serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": rpc_id, "error": e}))
                            .ok()?
                    }
                }
            }
            "tools/call" => {
                let tool = msg.pointer("/params/name")?.as_str()?.to_string();
                // A call that asks for progress, or whose app may stream to a client that
                // listens, is rmcp's.
                if msg.pointer("/params/_meta/progressToken").is_some()
                    || (session.listens() && server.agg.streams(&tool))
                {
                    return None;
                }
                let args = match msg.pointer_mut("/params/arguments").map(Value::take) {
                    None | Some(Value::Null) => Value::Object(Default::default()),
                    Some(a @ Value::Object(_)) => a,
                    Some(_) => return None,
                };
                let ctx = self.mcp.server_ctx(parts, session.client.as_deref()).ok()?;
                let flight = InFlight::new(&session, rpc_id);
                let cancel = flight.cancel.clone();
                let agent = Some(session.clone() as Arc<dyn AgentChannel>);
                let search =
                    listing::search_mode(server, parts, &ctx.caller) && tool == "search_tools";
                let result = calls::serve_call(server, ctx, tool, args, None, cancel, agent).await;
                drop(flight);
                if let (true, Ok(served)) = (search, &result) {
                    listing::found(&session, &served.result).await;
                }
                let served = match result {
                    Ok(r) => r,
                    Err(e) => {
                        let answer = json!({"jsonrpc": "2.0", "id": rpc_id, "error": e});
                        let body = serde_json::to_vec(&answer).ok()?;
                        self.touch(id, &session).await;
                        let json = [(header::CONTENT_TYPE, "application/json")];
                        return Some((json, body).into_response());
                    }
                };
                // This path serves versions before 2026-07-28 only (`known_version`): an
                // app's result as it wrote it, else in the shape rmcp gives those peers (no
                // `resultType`).
                match served.written(false) {
                    Some(app) => to_answer(rpc_id, &app)?,
                    None => {
                        let mut result = ServerResult::CallToolResult(served.result);
                        result.strip_result_type_for_legacy_peer();
                        result.strip_non_object_output_for_legacy_peer();
                        to_answer(rpc_id, &result)?
                    }
                }
            }
            _ => return None,
        };
        self.touch(id, &session).await;
        Some(([(header::CONTENT_TYPE, "application/json")], body).into_response())
    }

    /// `notifications/cancelled` for a call the lean path serves: the call is cancelled and
    /// the notification accepted (202). Any other (one of rmcp's requests, an id never sent,
    /// a call already answered) goes to rmcp, which ignores what it does not know.
    fn cancel_lean(&self, session: &Session, msg: &Value) -> Option<Response> {
        let id = msg.pointer("/params/requestId")?.to_string();
        let token = session.inflight.lock().unwrap().remove(&id)?;
        token.cancel();
        Some(StatusCode::ACCEPTED.into_response())
    }

    /// Tells rmcp's session about the lean path's traffic now and then, so that an active
    /// session is not closed as idle.
    async fn touch(&self, id: &str, session: &Session) {
        {
            let mut t = session.touched.lock().unwrap();
            if t.elapsed() < TOUCH_EVERY.min(self.ledger.caps.idle / 3) {
                return;
            }
            *t = Instant::now();
        }
        let Ok(msg) = serde_json::from_value::<ClientJsonRpcMessage>(
            json!({"jsonrpc": "2.0", "method": "notifications/datanotes/active"}),
        ) else {
            return;
        };
        let _ = self
            .manager
            .accept_message(&id.to_string().into(), msg)
            .await;
    }
}

/// A request of the lean path in flight: what a `notifications/cancelled` for its JSON-RPC id
/// cancels, registered until it is dropped.
struct InFlight<'a> {
    session: &'a Session,
    key: String,
    cancel: CancellationToken,
}

impl<'a> InFlight<'a> {
    fn new(session: &'a Session, rpc_id: &Value) -> InFlight<'a> {
        let (key, cancel) = (rpc_id.to_string(), CancellationToken::new());
        session
            .inflight
            .lock()
            .unwrap()
            .insert(key.clone(), cancel.clone());
        InFlight {
            session,
            key,
            cancel,
        }
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.session.inflight.lock().unwrap().remove(&self.key);
    }
}

/// A JSON-RPC answer of the lean path.
#[derive(serde::Serialize)]
struct Answer<'a, T> {
    jsonrpc: &'static str,
    id: &'a Value,
    result: &'a T,
}

/// The bytes of a JSON-RPC answer, written once, straight from its result.
fn to_answer<T: serde::Serialize>(id: &Value, result: &T) -> Option<Vec<u8>> {
    serde_json::to_vec(&Answer {
        jsonrpc: "2.0",
        id,
        result,
    })
    .ok()
}

fn accepts_json(h: &HeaderMap) -> bool {
    h.get_all(header::ACCEPT).iter().any(|v| {
        v.to_str().is_ok_and(|s| {
            s.split(',')
                .any(|m| m.trim().starts_with("application/json"))
        })
    })
}

/// No `MCP-Protocol-Version`, or one this path knows (any other is rmcp's to refuse).
fn known_version(h: &HeaderMap) -> bool {
    match h.get("mcp-protocol-version") {
        None => true,
        Some(v) => matches!(
            v.to_str().unwrap_or(""),
            "2024-11-05" | "2025-03-26" | "2025-06-18" | "2025-11-25"
        ),
    }
}
