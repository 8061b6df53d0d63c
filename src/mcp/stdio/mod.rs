//! `datanotes mcp`: the MCP door over stdio, for desktop clients (Claude Desktop, Claude Code,
//! Cursor, VS Code). It relays a running server's `/mcp`. Each JSON-RPC message the desktop
//! client writes on stdin is posted to `/mcp` as written, on the session its `initialize`
//! opened there. Each message the server sends is written on stdout as the server wrote it:
//! the answers, and what comes during a request or on the session's own stream (an app's log
//! messages, progress, sampling, elicitation and roots requests, `list_changed`,
//! `resources/updated`). So a desktop client gets what an HTTP client of `/mcp` gets: the same
//! namespace, token rules and tool-call events (the server builds the actor from the client's
//! own `clientInfo`; `--actor` overrides it), tasks, cancellation, and numbers as spelled.
//!
//! The relay's own work:
//! - the token (and `--actor`) on every request, and the session's id and protocol version;
//! - the session's stream (`GET`), kept open and resumed from its last event;
//! - a request's stream resumed if it ends before its answer;
//! - a session the server no longer knows (it restarted) opened again with the client's own
//!   `initialize`, and the request posted again;
//! - a read whose answer was lost (the server restarted while it answered) posted again as
//!   the server comes back (a write is not: it may have been done);
//! - a request the server could not be asked answered with an error in plain words.
//!
//! It also sends a 2026-07-28 message's own headers (`headers.rs`), closes such a request's stream
//! when the client cancels it, and when stdin closes still answers what it was asked, for up to a
//! minute, before it exits.

mod forward;
use forward::is_sse;

use super::headers::{self, era_headers};
use crate::apps::plain::{self, Peer as Who};
use futures_util::StreamExt;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// The longest message passed on, either way.
const MAX_MESSAGE: usize = crate::server::MAX_BODY;
/// The most times a request's stream is resumed before its answer.
const MAX_RESUMES: usize = 100;
/// The wait before a stream is resumed, unless the server says another (SSE `retry`, at most
/// [`MAX_WAIT`]).
const WAIT: Duration = Duration::from_millis(500);
const MAX_WAIT: Duration = Duration::from_secs(5);

/// How long a read whose answer was lost is posted again while the server comes back.
const READ_AGAIN: Duration = Duration::from_secs(20);

/// Why one post of a request did not give its answer.
enum Failed {
    /// The server does not know the session (it restarted).
    Gone(Session),
    /// The server could not be reached, or went away before its answer.
    Lost(Words),
    /// The server refused it.
    Refused(Words),
}

/// Whether a request only reads: posted again when its answer is lost.
fn is_read(method: &str) -> bool {
    matches!(
        method,
        "ping"
            | "server/discover"
            | "tools/list"
            | "resources/list"
            | "resources/templates/list"
            | "resources/read"
            | "prompts/list"
            | "prompts/get"
            | "completion/complete"
            | "tasks/get"
            | "tasks/list"
    )
}

/// A session the client's `initialize` opened at the server.
#[derive(Clone, PartialEq)]
struct Session {
    id: String,
    /// The protocol version the server answered (sent with every request after it).
    version: Option<String>,
}

/// Why a message could not be passed on, in plain words.
type Words = String;

struct Relay {
    /// The server's `/mcp`.
    url: String,
    token: String,
    actor: Option<String>,
    http: reqwest::Client,
    /// What is written on stdout, one message a line.
    out: mpsc::Sender<String>,
    /// The client's `initialize`, to open a session again with.
    hello: Mutex<Option<Value>>,
    session: Mutex<Option<Session>>,
    /// Held while a session is opened again.
    reopening: tokio::sync::Mutex<()>,
    next: AtomicU64,
    /// The requests of protocol 2026-07-28 or later in flight, by id. Such a request has no
    /// session to name it on: the client's `notifications/cancelled` for it closes its stream,
    /// which is how that version cancels.
    inflight: Mutex<HashMap<String, CancellationToken>>,
    /// The tools' input schemas, from the listings passed on: which arguments of a 2026-07-28
    /// call go as headers too.
    schemas: headers::Schemas,
}

/// Serves MCP on stdin/stdout until the client goes away (a clean exit says nothing).
pub async fn run(url: String, token: String, actor: Option<String>) -> anyhow::Result<()> {
    let (out, mut lines) = mpsc::channel::<String>(256);
    let relay = Arc::new(Relay {
        url,
        token,
        actor,
        http: reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .build()?,
        out,
        hello: Mutex::new(None),
        session: Mutex::new(None),
        reopening: tokio::sync::Mutex::new(()),
        next: AtomicU64::new(0),
        inflight: Mutex::new(HashMap::new()),
        schemas: headers::Schemas::default(),
    });
    let writer = tokio::spawn(async move {
        let mut stdout = tokio::io::stdout();
        while let Some(line) = lines.recv().await {
            let written = async {
                stdout.write_all(line.as_bytes()).await?;
                stdout.write_all(b"\n").await?;
                stdout.flush().await
            };
            if written.await.is_err() {
                break;
            }
        }
    });
    let mut stdin = tokio::io::BufReader::new(tokio::io::stdin());
    let mut stream = None;
    let mut requests = tokio::task::JoinSet::new();
    let mut buf = Vec::new();
    loop {
        buf.clear();
        while requests.try_join_next().is_some() {}
        let limit = MAX_MESSAGE as u64 + 1;
        if (&mut stdin).take(limit).read_until(b'\n', &mut buf).await? == 0 {
            break;
        }
        // Over the bound: the rest of the line is read and dropped.
        if buf.len() > MAX_MESSAGE && !buf.ends_with(b"\n") {
            skip_line(&mut stdin).await?;
            let why = format!("a message over {} MiB is not passed on", MAX_MESSAGE >> 20);
            relay.say(refusal(&Value::Null, -32600, why)).await;
            continue;
        }
        let text = buf.trim_ascii();
        if text.is_empty() {
            continue;
        }
        let msg: Value = match serde_json::from_slice(text) {
            Ok(m) => m,
            Err(e) => {
                let why = format!("the message is not JSON: {e}");
                relay.say(refusal(&Value::Null, -32700, why)).await;
                continue;
            }
        };
        let body = text.to_vec();
        let method = msg.get("method").and_then(Value::as_str);
        match (method, msg.get("id")) {
            (Some("initialize"), Some(_)) => relay.initialize(msg, body).await,
            // A request is answered in its own time; the client may send more meanwhile.
            (Some(_), Some(id)) => {
                let cancel = CancellationToken::new();
                if !era_headers(&msg).is_empty() {
                    let mut inflight = relay.inflight.lock().unwrap();
                    inflight.insert(id.to_string(), cancel.clone());
                }
                requests.spawn(relay.clone().request(msg, body, cancel));
            }
            // Notifications and the client's answers go in the order written.
            _ => {
                if method == Some("notifications/cancelled")
                    && let Some(id) = msg.pointer("/params/requestId")
                    && let Some(c) = relay.inflight.lock().unwrap().remove(&id.to_string())
                {
                    c.cancel();
                }
                relay.pass(&msg, &body).await;
                if method == Some("notifications/initialized") && stream.is_none() {
                    stream = Some(tokio::spawn(relay.clone().follow()));
                }
            }
        }
    }
    // The client is done writing: what it asked is still answered (`echo ... | datanotes
    // mcp`), for a while, before the session is closed.
    let answered = async { while requests.join_next().await.is_some() {} };
    if tokio::time::timeout(ANSWERS_AT_EOF, answered)
        .await
        .is_err()
    {
        requests.shutdown().await;
    }
    if let Some(s) = stream {
        s.abort();
        let _ = s.await;
    }
    relay.close().await;
    // Every answer written out before the exit.
    drop(relay);
    let _ = tokio::time::timeout(Duration::from_secs(5), writer).await;
    Ok(())
}

/// How long the answers still owed are waited for once stdin is closed.
const ANSWERS_AT_EOF: Duration = Duration::from_secs(60);

/// Reads what is left of a line too long to pass on.
async fn skip_line(r: &mut (impl tokio::io::AsyncBufRead + Unpin)) -> std::io::Result<()> {
    let mut rest = Vec::new();
    loop {
        rest.clear();
        let n = (&mut *r).take(1 << 20).read_until(b'\n', &mut rest).await?;
        if n == 0 || rest.ends_with(b"\n") {
            return Ok(());
        }
    }
}

/// A JSON-RPC error answering `id`.
fn refusal(id: &Value, code: i64, message: String) -> String {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}}).to_string()
}

/// Whether the message `data` answers the request `id`.
fn answers(data: &str, id: &Value) -> bool {
    #[derive(serde::Deserialize)]
    struct Answer {
        id: Option<Value>,
        method: Option<serde::de::IgnoredAny>,
    }
    serde_json::from_str::<Answer>(data)
        .is_ok_and(|a| a.method.is_none() && a.id.as_ref() == Some(id))
}

/// A message of the server as one line: as written, unless it spans lines.
fn one_line(data: String) -> String {
    if !data.contains('\n') {
        return data;
    }
    match serde_json::from_str::<Value>(&data) {
        Ok(v) => v.to_string(),
        Err(_) => data.replace('\n', " "),
    }
}

impl Relay {
    async fn say(&self, line: String) {
        let _ = self.out.send(line).await;
    }

    fn session(&self) -> Option<Session> {
        self.session.lock().unwrap().clone()
    }

    /// A request to the server's `/mcp`, with the token, the actor, and the session's headers.
    fn to_server(
        &self,
        method: reqwest::Method,
        session: Option<&Session>,
    ) -> reqwest::RequestBuilder {
        let mut r = self
            .http
            .request(method, &self.url)
            .bearer_auth(&self.token)
            .header("accept", "application/json, text/event-stream");
        if let Some(a) = &self.actor {
            r = r.header("x-datanotes-actor", a);
        }
        if let Some(s) = session {
            r = r.header("mcp-session-id", &s.id);
            if let Some(v) = &s.version {
                r = r.header("mcp-protocol-version", v);
            }
        }
        r
    }

    /// Posts `body`, the message `msg`, with the headers its protocol version asks for: on
    /// `session`, unless the message is of protocol 2026-07-28 or later (which has none).
    async fn post(
        &self,
        msg: &Value,
        body: &[u8],
        session: Option<&Session>,
    ) -> Result<reqwest::Response, Words> {
        let era = era_headers(msg);
        let mut r = self.to_server(reqwest::Method::POST, session.filter(|_| era.is_empty()));
        if !era.is_empty() {
            for (name, value) in self.schemas.param_headers(msg) {
                r = r.header(name, value);
            }
        }
        for (name, value) in era {
            r = r.header(name, value);
        }
        r.header("content-type", "application/json")
            .body(body.to_vec())
            .send()
            .await
            .map_err(|e| plain::error_words(&self.url, Who::Engine, &e))
    }

    /// The client's `initialize`: a session opened with it, the server's answer written back.
    async fn initialize(&self, msg: Value, body: Vec<u8>) {
        let id = msg.get("id").cloned().unwrap_or(Value::Null);
        let opened = self.open(&msg, &body, &id).await;
        *self.hello.lock().unwrap() = Some(msg);
        match opened {
            Ok((session, answer)) => {
                *self.session.lock().unwrap() = Some(session);
                self.say(answer).await;
            }
            Err(why) => self.say(refusal(&id, -32603, why)).await,
        }
    }

    /// Opens a session with an `initialize` (`body`, of the request `id`): the session and the
    /// server's answer.
    async fn open(&self, msg: &Value, body: &[u8], id: &Value) -> Result<(Session, String), Words> {
        let r = self.post(msg, body, None).await?;
        if !r.status().is_success() {
            return Err(self.refused(r, id).await);
        }
        let sid = r
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .map(String::from);
        let answer = self.answer_of(r, id).await?;
        let version = serde_json::from_str::<Value>(&answer).ok().and_then(|a| {
            let v = a.pointer("/result/protocolVersion")?;
            v.as_str().map(String::from)
        });
        let session = Session {
            id: sid.ok_or_else(|| format!("{} opened no session", self.url))?,
            version,
        };
        Ok((session, answer))
    }

    /// Why the server refused a request, in plain words: its own JSON-RPC error's message if it
    /// gave one (not for a refused token: what to check is said), else what its HTTP status
    /// says.
    async fn refused(&self, r: reqwest::Response, id: &Value) -> Words {
        let status = r.status().as_u16();
        let body = r.text().await.unwrap_or_default();
        let own = serde_json::from_str::<Value>(&body).ok().and_then(|v| {
            v.get("jsonrpc")?;
            let m = v.pointer("/error/message")?.as_str()?;
            let ours = v.get("id").is_none_or(|i| i == id || i.is_null());
            (ours && status != 401).then(|| m.to_string())
        });
        own.unwrap_or_else(|| plain::http_status(&self.url, Who::Engine, status))
    }

    /// The message answering `id` in a response (one JSON answer, or an SSE stream whose other
    /// messages are passed on).
    async fn answer_of(&self, r: reqwest::Response, id: &Value) -> Result<String, Words> {
        if !is_sse(&r) {
            let text = r
                .text()
                .await
                .map_err(|e| plain::error_words(&self.url, Who::Engine, &e))?;
            return Ok(one_line(text.trim().to_string()));
        }
        let mut answer = None;
        self.relay_stream(r, Some(id), &mut answer, None).await?;
        answer.ok_or_else(|| format!("{} closed the stream before answering", self.url))
    }

    /// Opens the session again with the client's `initialize` (the server restarted), unless
    /// another request already did.
    async fn reopen(&self, stale: &Session) -> Result<(), Words> {
        let _one = self.reopening.lock().await;
        if self.session().as_ref() != Some(stale) {
            return Ok(());
        }
        let Some(mut hello) = self.hello.lock().unwrap().clone() else {
            return Err(format!("{} no longer knows the session", self.url));
        };
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let id = json!(format!("datanotes-mcp-{n}"));
        hello["id"] = id.clone();
        let body = serde_json::to_vec(&hello).unwrap_or_default();
        let (session, _) = self.open(&hello, &body, &id).await?;
        let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        let body = serde_json::to_vec(&initialized).unwrap_or_default();
        let _ = self.post(&initialized, &body, Some(&session)).await;
        *self.session.lock().unwrap() = Some(session);
        Ok(())
    }

    /// Ends the session at the server (the client went away).
    async fn close(&self) {
        if let Some(s) = self.session() {
            let end = self.to_server(reqwest::Method::DELETE, Some(&s)).send();
            let _ = tokio::time::timeout(Duration::from_secs(2), end).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_is_known_by_its_id() {
        let id = json!(7);
        assert!(answers(r#"{"jsonrpc":"2.0","id":7,"result":{}}"#, &id));
        assert!(answers(
            r#"{"jsonrpc":"2.0","id":7,"error":{"code":1,"message":"x"}}"#,
            &id
        ));
        assert!(!answers(r#"{"jsonrpc":"2.0","id":7,"method":"ping"}"#, &id));
        assert!(!answers(r#"{"jsonrpc":"2.0","id":"7","result":{}}"#, &id));
        assert!(!answers(
            r#"{"jsonrpc":"2.0","method":"notifications/progress"}"#,
            &id
        ));
    }

    #[test]
    fn a_message_goes_out_as_written_on_one_line() {
        let as_written = r#"{"a":1,"b":1.0}"#.to_string();
        assert_eq!(one_line(as_written.clone()), as_written);
        assert_eq!(one_line("{\"a\":\n1}".into()), r#"{"a":1}"#);
    }
}
