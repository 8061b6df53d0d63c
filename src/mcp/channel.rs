//! The MCP client's side of a tool call, for what an app sends while the call runs: the
//! [`ClientChannel`] of a call served through rmcp's session (its SSE answer), on the client's
//! `Peer`. An app's log messages go to the client at or above the level it set with
//! `logging/setLevel` (none before it sets one); its progress goes with the client's own
//! progress token (none if the client gave none); its `sampling/createMessage` and
//! `elicitation/create` are sent to the client as requests on the call's stream, only if the
//! client declared the capability, and the client's answer (or error) is the app's.
//!
//! Its `roots/list` requests go the same way, only if the client declared `roots`.
#![allow(deprecated)] // MCP logging (SEP-2577 deprecates it; clients still use it)

use super::Session;
use super::answers::Answers;
use super::exact::Exact;
use crate::apps::backend::{AgentChannel, ClientAnswer, ClientChannel, ClientRefusal};
use futures_util::future::BoxFuture;
use rmcp::RoleServer;
use rmcp::model::{
    CustomNotification, CustomRequest, LoggingLevel, ProgressNotificationParam, ProgressToken,
    ServerNotification, ServerRequest,
};
use rmcp::service::{Peer, PeerRequestOptions, ServiceError};
use serde_json::Value;

/// A level's rank (debug 1 … emergency 8), 0 meaning none: what a session keeps.
pub(super) fn rank(level: LoggingLevel) -> u8 {
    level as u8 + 1
}

/// The client of one call.
pub(super) struct Channel {
    pub(super) peer: Peer<RoleServer>,
    /// The client's progress token for this call.
    pub(super) progress: Option<ProgressToken>,
    /// The lowest level the client wants ([`rank`]), 0: no log messages.
    pub(super) level: u8,
    pub(super) sampling: bool,
    pub(super) elicitation: bool,
    /// The client declared `roots`.
    pub(super) roots: bool,
    /// The client declared `tasks` (it may run an app's request as a task, and be asked
    /// `tasks/*` of it).
    pub(super) tasks: bool,
    /// The session's answers as the client wrote them (none: rmcp's reading of them).
    pub(super) answers: Option<std::sync::Arc<Answers>>,
    /// Where the app's progress is kept as it wrote it, for the call's stream.
    pub(super) exact: Option<Exact>,
}

impl ClientChannel for Channel {
    fn wants_progress(&self) -> bool {
        self.progress.is_some()
    }

    fn notify<'a>(&'a self, method: &'a str, params: Value) -> BoxFuture<'a, ()> {
        Box::pin(notify(
            &self.peer,
            self.level,
            self.progress.as_ref().map(|p| (p, self.exact.as_ref())),
            method,
            params,
        ))
    }

    fn request<'a>(&'a self, method: &'a str, params: Value) -> ClientAnswer<'a> {
        let declared = match method {
            "sampling/createMessage" => self.sampling,
            "elicitation/create" => self.elicitation,
            "roots/list" => self.roots,
            "tasks/get" | "tasks/result" | "tasks/list" | "tasks/cancel" => self.tasks,
            _ => false,
        };
        let answers = self.answers.as_deref();
        Box::pin(request(&self.peer, answers, declared, method, params))
    }
}

/// The agent's session, for what an app asks outside a call (its own session's requests and
/// log messages) and for what the app's session declares.
impl ClientChannel for Session {
    fn wants_progress(&self) -> bool {
        false
    }

    fn notify<'a>(&'a self, method: &'a str, params: Value) -> BoxFuture<'a, ()> {
        let level = self.level.load(std::sync::atomic::Ordering::Relaxed);
        Box::pin(notify(&self.peer, level, None, method, params))
    }

    fn request<'a>(&'a self, method: &'a str, params: Value) -> ClientAnswer<'a> {
        let declared = match method {
            "sampling/createMessage" => self.sampling,
            "elicitation/create" => self.elicitation,
            "roots/list" => self.asks.get("roots").is_some(),
            "tasks/get" | "tasks/result" | "tasks/list" | "tasks/cancel" => {
                self.asks.get("tasks").is_some()
            }
            _ => false,
        };
        Box::pin(request(
            &self.peer,
            Some(&self.answers),
            declared,
            method,
            params,
        ))
    }
}

impl AgentChannel for Session {
    fn id(&self) -> &str {
        &self.id
    }

    fn capabilities(&self) -> Value {
        self.asks.clone()
    }

    fn capabilities_key(&self) -> &str {
        &self.asks_key
    }

    fn is_closed(&self) -> bool {
        self.peer.is_transport_closed()
    }

    fn log_level(&self) -> Option<&'static str> {
        const NAMES: [&str; 8] = [
            "debug",
            "info",
            "notice",
            "warning",
            "error",
            "critical",
            "alert",
            "emergency",
        ];
        let rank = self.level.load(std::sync::atomic::Ordering::Relaxed);
        NAMES.get((rank as usize).checked_sub(1)?).copied()
    }
}

/// Passes an app's notification to the client: a log message at or above `level` (0: none),
/// progress with the client's `progress` token (none: not passed), kept as the app wrote it
/// in the call's [`Exact`] if it has one; anything else is dropped. A log message goes as
/// JSON, as the app wrote it.
async fn notify(
    peer: &Peer<RoleServer>,
    level: u8,
    progress: Option<(&ProgressToken, Option<&Exact>)>,
    method: &str,
    mut params: Value,
) {
    match method {
        "notifications/message" if level > 0 => {
            // The level is read to filter; the message goes on as the app wrote it.
            let l = params.get("level").cloned();
            let Some(Ok(l)) = l.map(serde_json::from_value::<LoggingLevel>) else {
                return;
            };
            if rank(l) < level {
                return;
            }
        }
        "notifications/progress" => {
            let (Some((token, exact)), Some(p)) = (progress, params.as_object_mut()) else {
                return;
            };
            p.insert("progressToken".into(), serde_json::json!(token.0));
            // Typed: rmcp sends progress on the stream of the request its token belongs to
            // (its type reads the numbers as floats: `1` would go on as `1.0`, so the stream
            // writes what the app sent instead, kept in `exact`).
            let raw = exact.map(|e| (e, params.clone()));
            if let Ok(typed) = serde_json::from_value::<ProgressNotificationParam>(params) {
                if let Some((exact, raw)) = raw {
                    exact.progress(raw);
                }
                let _ = peer.notify_progress(typed).await;
            }
            return;
        }
        _ => return,
    }
    let n = CustomNotification::new(method, Some(params));
    let _ = peer
        .send_notification(ServerNotification::CustomNotification(n))
        .await;
}

/// Sends an app's request to the client if it `declared` the capability; the client's answer
/// (or its error) is the app's, as the client wrote it if the session kept it (`answers`).
async fn request(
    peer: &Peer<RoleServer>,
    answers: Option<&Answers>,
    declared: bool,
    method: &str,
    params: Value,
) -> Result<Value, ClientRefusal> {
    if !declared {
        return Err(ClientRefusal::undeclared(method));
    }
    // Passed on as the app wrote it (rmcp's typed requests would reshape newer schemas).
    let request = ServerRequest::CustomRequest(CustomRequest::new(method, Some(params)));
    let sent = peer.send_request_with_option(request, PeerRequestOptions::no_options());
    let answer = match sent.await {
        Ok(handle) => {
            let id = handle.id.clone();
            handle.await_response().await.map(|r| (id, r))
        }
        Err(e) => Err(e),
    };
    match answer {
        Ok((id, r)) => match answers.and_then(|a| a.take(&id)) {
            Some(raw) => Ok(raw),
            None => serde_json::to_value(r).map_err(|e| ClientRefusal {
                code: -32603,
                message: format!("the client's answer to {method} could not be read: {e}"),
                data: None,
            }),
        },
        Err(ServiceError::McpError(e)) => Err(ClientRefusal {
            code: e.code.0,
            message: e.message.into_owned(),
            data: e.data,
        }),
        Err(_) => Err(ClientRefusal {
            code: -32603,
            message: format!("the client of this call did not answer {method}: its session closed"),
            data: None,
        }),
    }
}
