//! The bounds on `/mcp` sessions: at most so many per token and in all, each closed after a
//! short idle time; beyond a cap the least recently used session (of that token, else of all)
//! is closed first. A request on a session that was closed gets a 404 saying so, which MCP
//! clients answer by starting a new session.
//!
//! The door learns a session at `notifications/initialized`, and checks the caps before rmcp sees a
//! request. A resumed stream's `Last-Event-ID` is moved on by one before rmcp sees it (rmcp replays
//! the named event itself).

use super::Session;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

/// The caps, from the environment.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SessionCaps {
    /// Open sessions in all (`DATANOTES_MCP_SESSIONS`, 1,000).
    pub total: usize,
    /// Open sessions per token (`DATANOTES_MCP_SESSIONS_PER_TOKEN`, 32).
    pub per_token: usize,
    /// A session without traffic is closed after this (`DATANOTES_MCP_SESSION_IDLE_MS`, 120 s).
    pub idle: Duration,
}

impl SessionCaps {
    /// The defaults, overridden by `DATANOTES_MCP_SESSIONS`, `DATANOTES_MCP_SESSIONS_PER_TOKEN`
    /// and `DATANOTES_MCP_SESSION_IDLE_MS`.
    pub(crate) fn from_env() -> SessionCaps {
        let n = |k: &str, d: u64| crate::knobs::num(k, d).max(1);
        SessionCaps {
            total: n("DATANOTES_MCP_SESSIONS", 1_000) as usize,
            per_token: n("DATANOTES_MCP_SESSIONS_PER_TOKEN", 32) as usize,
            idle: Duration::from_millis(n("DATANOTES_MCP_SESSION_IDLE_MS", 120_000)),
        }
    }
}

struct Entry {
    token: String,
    last: Instant,
}

/// Every open session: its token and its last use.
pub(crate) struct Ledger {
    pub caps: SessionCaps,
    open: Mutex<HashMap<String, Entry>>,
}

/// What a request on a session id finds.
pub(crate) enum Seen {
    /// Open: its last use is now.
    Open,
    /// Idle too long: closed now.
    Expired,
    /// Not open (never was, closed, evicted).
    Unknown,
    /// Open, but another principal's: answered as if unknown, and left untouched.
    Foreign,
}

impl Ledger {
    /// No session open yet.
    pub(crate) fn new(caps: SessionCaps) -> Ledger {
        Ledger {
            caps,
            open: Mutex::new(HashMap::new()),
        }
    }

    /// Notes a request on session `id` by `token` (the principal's name, `Caller::token_name`):
    /// a session belongs to the principal that opened it, and another's request neither uses
    /// it nor keeps it alive.
    pub(crate) fn seen(&self, id: &str, token: &str) -> Seen {
        let mut open = self.open.lock().unwrap();
        match open.get_mut(id) {
            None => Seen::Unknown,
            Some(e) if e.token != token => Seen::Foreign,
            Some(e) if e.last.elapsed() > self.caps.idle => {
                open.remove(id);
                Seen::Expired
            }
            Some(e) => {
                e.last = Instant::now();
                Seen::Open
            }
        }
    }

    /// A session ended (DELETE).
    pub(crate) fn forget(&self, id: &str) {
        let mut open = self.open.lock().unwrap();
        open.remove(id);
        crate::telemetry::metrics::metrics()
            .sessions_open
            .set(open.len() as i64);
    }

    /// A new session of `token`: answers the sessions to close (idle ones, then the least
    /// recently used of the token beyond its cap, then of all beyond the total).
    pub(crate) fn admit(&self, id: &str, token: &str) -> Vec<String> {
        let mut open = self.open.lock().unwrap();
        let idle = self.caps.idle;
        let mut gone: Vec<String> = open
            .iter()
            .filter(|(_, e)| e.last.elapsed() > idle)
            .map(|(k, _)| k.clone())
            .collect();
        for k in &gone {
            open.remove(k);
        }
        open.insert(
            id.to_string(),
            Entry {
                token: token.to_string(),
                last: Instant::now(),
            },
        );
        // The new session stays; the others of its token, then any, make room.
        let (per_token, total) = (self.caps.per_token.max(1), self.caps.total.max(1));
        let mine = crate::bounded::evict_oldest(&mut *open, per_token - 1, |k, e| {
            (k != id && e.token == token).then_some(e.last)
        });
        let any =
            crate::bounded::evict_oldest(&mut *open, total - 1, |k, e| (k != id).then_some(e.last));
        gone.extend(mine.into_iter().chain(any).map(|(k, _)| k));
        crate::telemetry::metrics::metrics()
            .sessions_open
            .set(open.len() as i64);
        gone
    }

    /// The answer to a request on a session that is not open.
    pub(crate) fn closed_answer(&self, expired: bool) -> Response {
        let why = if expired {
            format!(
                "this MCP session expired: it was idle for more than {} s",
                self.caps.idle.as_secs()
            )
        } else {
            format!(
                "this MCP session expired or was closed (sessions idle for {} s are closed, and a token keeps at most {} open, the least recently used closed first)",
                self.caps.idle.as_secs(),
                self.caps.per_token
            )
        };
        (
            StatusCode::NOT_FOUND,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            format!("Not Found: Session not found: {why}; start a new session with initialize"),
        )
            .into_response()
    }
}

/// The session id a response opened (`Mcp-Session-Id` on an `initialize` answer).
pub(crate) fn opened(h: &HeaderMap) -> Option<String> {
    h.get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(String::from)
}

/// A resumed stream (`GET` with `Last-Event-ID: <index>[/<stream>]`) must carry only the
/// events after the one named; rmcp's session replays from that event itself (so a client that
/// resumes after its last event gets it again, and a finished stream ends at once, again and
/// again). The header is moved on by one, so that rmcp starts after it.
pub(crate) fn resume_after(h: &mut HeaderMap) {
    let Some(v) = h.get("last-event-id").and_then(|v| v.to_str().ok()) else {
        return;
    };
    let (index, rest) = match v.split_once('/') {
        Some((i, r)) => (i, Some(r)),
        None => (v, None),
    };
    let Some(next) = index.parse::<usize>().ok().and_then(|i| i.checked_add(1)) else {
        return;
    };
    let moved = match rest {
        Some(r) => format!("{next}/{r}"),
        None => next.to_string(),
    };
    if let Ok(moved) = moved.parse() {
        h.insert("last-event-id", moved);
    }
}

pub(crate) fn session_id(h: &HeaderMap) -> Option<&str> {
    h.get("mcp-session-id").and_then(|v| v.to_str().ok())
}

/// Whether an answer is a stream (`text/event-stream`) that was accepted.
pub(crate) fn streams(r: &Response) -> bool {
    r.status().is_success()
        && r.headers()
            .get(header::CONTENT_TYPE)
            .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"))
}

/// The open MCP sessions, by `Mcp-Session-Id`: learnt at `notifications/initialized`; and the
/// `tasks` capability a client declared in its `initialize` until then (rmcp's types do not
/// keep it).
#[derive(Default)]
pub(crate) struct Sessions {
    pub(super) open: RwLock<HashMap<String, Arc<Session>>>,
    pub(super) declared: Mutex<HashMap<String, Value>>,
    /// Notified whenever a session is added.
    pub(super) added: tokio::sync::Notify,
}

impl Sessions {
    pub(super) fn get(&self, id: &str) -> Option<Arc<Session>> {
        let s = self.open.read().unwrap().get(id).cloned()?;
        (!s.peer.is_transport_closed()).then_some(s)
    }

    /// The session `id`, waiting up to `limit` for it to be learnt (a client may ask at once
    /// after `notifications/initialized`, which rmcp's worker handles in its own time).
    pub(super) async fn soon(&self, id: &str, limit: Duration) -> Option<Arc<Session>> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let added = self.added.notified();
            if let Some(s) = self.get(id) {
                return Some(s);
            }
            if tokio::time::timeout_at(deadline, added).await.is_err() {
                return self.get(id);
            }
        }
    }

    pub(super) fn forget(&self, id: &str) {
        self.open.write().unwrap().remove(id);
        self.declared.lock().unwrap().remove(id);
    }

    /// Sends `notifications/tools/list_changed` to every open session.
    pub(super) fn notify_list_changed(&self) {
        let mut all = self.open.write().unwrap();
        all.retain(|_, s| !s.peer.is_transport_closed());
        for s in all.values() {
            let peer = s.peer.clone();
            tokio::spawn(async move {
                let _ = peer.notify_tool_list_changed().await;
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_least_recently_used_goes_first_per_token_then_in_all() {
        let l = Ledger::new(SessionCaps {
            total: 3,
            per_token: 2,
            idle: Duration::from_secs(60),
        });
        assert!(l.admit("a1", "a").is_empty());
        assert!(l.admit("a2", "a").is_empty());
        assert!(matches!(l.seen("a1", "a"), Seen::Open));
        assert!(matches!(l.seen("a1", "b"), Seen::Foreign));
        assert_eq!(l.admit("a3", "a"), ["a2"]);
        assert!(matches!(l.seen("a2", "a"), Seen::Unknown));
        assert!(l.admit("b1", "b").is_empty());
        assert_eq!(l.admit("b2", "b"), ["a1"]);
    }
}
