//! A remote app's resources, resource templates, prompts and completions: listed with its tools
//! (on the listing session, under the same caps), read on a session of their own whose answers
//! are bounded ([`MAX_ANSWER_BYTES`]), and what the app says outside any call
//! (`list_changed`, `notifications/resources/updated`) passed up to the aggregator ([`Relay`]).
//! Everything is JSON as the app wrote it (its numbers, the fields rmcp's types do not model):
//! posted raw once the session's route is known, else through rmcp's session (an app of a
//! later protocol version). The aggregator names it in the namespace.
//! (What the app says outside calls goes through [`super::relay::Relay`].)

use super::raw::RawError;
use super::{Open, RemoteApp, Session, secs};
use crate::apps::backend::{AppRequest, BackendError, CallContext, ClientChannel, Listing};
use crate::apps::plain::{self, Peer};
use rmcp::model::{ClientRequest, ServerResult};
use serde_json::{Value, json};

pub(crate) use super::raw::MAX_ANSWER_BYTES;

/// The three listings beside the tools: method, the key of the items, capability.
const LISTINGS: [(&str, &str); 3] = [
    ("resources/list", "resources"),
    ("resources/templates/list", "resourceTemplates"),
    ("prompts/list", "prompts"),
];

impl RemoteApp {
    /// Lists the app's resources, templates and prompts into `l`, if it declared them, page by
    /// page under the listing's caps (items, bytes, pages, counted with its tools). A listing
    /// that fails or runs over is cut where it stopped, and said in the log: the app's tools
    /// are served anyway.
    pub(super) async fn list_content(&self, open: &Open, l: &mut Listing) {
        let caps = open.service.peer_info().map(|i| i.capabilities.clone());
        let Some(caps) = caps else { return };
        let mut items = l.tools.len();
        let mut bytes = serde_json::to_vec(&l.tools).map_or(0, |v| v.len());
        for (method, key) in LISTINGS {
            let offered = match key {
                "prompts" => caps.prompts.is_some(),
                _ => caps.resources.is_some(),
            };
            if !offered {
                continue;
            }
            let (mut cursor, mut pages) = (None::<Value>, 0usize);
            let mut out = vec![];
            let stop = loop {
                pages += 1;
                if let Some(why) = self.caps.listing_over(items, bytes, pages) {
                    break Some(why);
                }
                let params = match cursor.take() {
                    Some(c) => json!({"cursor": c}),
                    None => json!({}),
                };
                let max = self.caps.max_bytes;
                let page = match self.ask(open, method, params, None, max).await {
                    Ok(v) => v,
                    Err((e, _)) => break Some(e.0),
                };
                for item in page
                    .get(key)
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    bytes += serde_json::to_vec(item).map_or(0, |v| v.len());
                    items += 1;
                    out.push(item.clone());
                }
                match page.get("nextCursor").filter(|c| !c.is_null()) {
                    Some(c) => cursor = Some(c.clone()),
                    None => break None,
                }
            };
            if let Some(why) = stop {
                tracing::warn!(url = %self.url, "{method} of the app stopped: {why}");
            }
            match key {
                "resources" => l.resources = out,
                "resourceTemplates" => l.templates = out,
                _ => l.prompts = out,
            }
        }
    }

    /// A request beside the tools, within the call timeout: on the agent's own session (what
    /// the app keeps per session is that agent's: its subscriptions, its session's resources),
    /// else on the shared session of callers without one (where their calls go too).
    pub(super) async fn content_request(
        &self,
        req: AppRequest,
        params: Value,
        ctx: &CallContext,
    ) -> Result<Value, BackendError> {
        let open = self.for_call(ctx).await?;
        let limit = self.timeouts.call;
        let channel = ctx.channel();
        let method = req.method();
        let subscribing = match req {
            AppRequest::Subscribe => Some(true),
            AppRequest::Unsubscribe => Some(false),
            _ => None,
        };
        let uri = params.get("uri").and_then(Value::as_str).map(String::from);
        let asked = self.ask(&open, method, params, channel, MAX_ANSWER_BYTES);
        match tokio::time::timeout(limit, asked).await {
            Err(_) => Err(BackendError(format!(
                "timed out: {method} took more than {}",
                secs(limit)
            ))),
            Ok(Err((e, gone))) => {
                if gone {
                    self.forget_for(ctx).await;
                }
                Err(e)
            }
            Ok(Ok(v)) => {
                // Noted, to be made again if the app forgets it (`subscriptions.rs`).
                if let (Some(on), Some(uri)) = (subscribing, uri)
                    && crate::apps::backend::rpc_error_in(&v).is_none()
                {
                    let session = open.client.route().and_then(|r| r.session);
                    self.subs.note(ctx, session, &uri, on);
                }
                Ok(v)
            }
        }
    }

    /// Sends one request on `open` and answers its result as the app wrote it, at most `max`
    /// bytes of it: posted raw once the session's route is known (what the app asks meanwhile
    /// goes to `channel`), else through rmcp's session. A JSON-RPC error of the app is
    /// answered as `{"_meta": {RPC_ERROR_META: error}}`, whole. The error says whether the
    /// session is gone (the next request opens another).
    pub(super) async fn ask(
        &self,
        open: &Open,
        method: &str,
        params: Value,
        channel: Option<&dyn ClientChannel>,
        max: usize,
    ) -> Result<Value, (BackendError, bool)> {
        let version = open
            .service
            .peer_info()
            .map(|i| i.protocol_version.to_string())
            .unwrap_or_default();
        let Some(route) = open.client.route_soon(&version, super::ROUTE_WAIT).await else {
            let s = &open.service;
            return send(s, method, params)
                .await
                .map_err(|e| (e, s.is_closed()));
        };
        let posted = self
            .post_request(&open.client, route, method, params, channel, max)
            .await;
        posted.map_err(|e| match e {
            RawError::TooBig => (
                BackendError(format!(
                    "{method} failed: the app's answer is over {max} bytes"
                )),
                false,
            ),
            RawError::Expired => (e.into_backend(method), true),
            e => (e.into_backend(method), false),
        })
    }
}

/// Sends one request through rmcp's session and answers its result as JSON. A JSON-RPC error of the app
/// is answered as `{"_meta": {RPC_ERROR_META: error}}`, whole; anything else (the app cannot be reached, an answer over the bound) says
/// what went wrong in plain words.
async fn send(s: &Session, method: &str, params: Value) -> Result<Value, BackendError> {
    let req = serde_json::from_value::<ClientRequest>(json!({"method": method, "params": params}))
        .map_err(|e| BackendError(format!("the request {method} cannot be sent: {e}")))?;
    match s.send_request(req).await {
        Ok(ServerResult::CustomResult(r)) => Ok(r.0),
        Ok(r) => serde_json::to_value(r).map_err(|e| BackendError(e.to_string())),
        // The app's own error, whole: the aggregator passes it on as it is.
        Err(rmcp::ServiceError::McpError(e)) => {
            Ok(json!({"_meta": {crate::apps::backend::RPC_ERROR_META: e}}))
        }
        Err(e) => Err(BackendError(format!(
            "{method} failed: {}",
            plain::service_error("the app", Peer::App, &e)
        ))),
    }
}
