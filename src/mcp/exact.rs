//! rmcp's answers, written as they were meant.
//!
//! rmcp (3.11) writes what a handler returns through its own types. Their numbers are floats:
//! an app's `priority: 1` goes out as `1.0`, and a sampling request's `temperature: 0.7` as
//! `0.699999988` (an f32). They also drop fields they do not model. The door gives each request
//! it hands to rmcp an [`Exact`], in the request's extensions. A handler puts there the result
//! as it must be written, and the progress notifications of its call as the app sent them.
//! [`written`] puts them in place of rmcp's as the response streams by: an SSE stream, event by
//! event, or one JSON answer. [`edit`], the editor beneath it, also writes the door's `tasks`
//! capability into rmcp's `initialize` answer (`tasks::announce`).

use axum::body::{Body, Bytes};
use axum::response::Response;
use futures_util::StreamExt;
use rmcp::RoleServer;
use rmcp::service::RequestContext;
use serde_json::Value;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

/// The most progress notifications of one call kept for their exact spelling: beyond it, the
/// oldest go out as rmcp wrote them.
const MAX_PROGRESS: usize = 256;

/// What one request's handler wants written in place of rmcp's writing of it.
#[derive(Clone, Default)]
pub(crate) struct Exact(Arc<Mutex<Written>>);

#[derive(Default)]
struct Written {
    result: Option<Value>,
    progress: VecDeque<Value>,
}

impl Exact {
    /// The `Exact` of the request rmcp serves with `rc` (none: the door gave it none).
    pub(super) fn of(rc: &RequestContext<RoleServer>) -> Option<Exact> {
        let parts = rc.extensions.get::<http::request::Parts>()?;
        parts.extensions.get::<Exact>().cloned()
    }

    /// The request's result, as it must be written: its fields take the place of rmcp's; a
    /// field rmcp adds for the client's protocol version (a 2026-07-28 listing's
    /// `cacheScope`) stays.
    pub(super) fn result(&self, result: Value) {
        self.0.lock().unwrap().result = Some(result);
    }

    /// A progress notification's `params` as the app sent them (with the client's token).
    pub(super) fn progress(&self, params: Value) {
        let mut w = self.0.lock().unwrap();
        if w.progress.len() >= MAX_PROGRESS {
            w.progress.pop_front();
        }
        w.progress.push_back(params);
    }

    /// Writes into `msg`, one message of the response to the request `id`, what was put here
    /// for it; whether it changed.
    fn apply(&self, id: &Value, msg: &mut Value) -> bool {
        let mut w = self.0.lock().unwrap();
        if msg.get("id") == Some(id)
            && let Some(result) = msg.get_mut("result")
        {
            let Some(put) = w.result.take() else {
                return false;
            };
            match (result.as_object_mut(), put) {
                (Some(rmcp), Value::Object(put)) => rmcp.extend(put),
                (_, put) => *result = put,
            }
            return true;
        }
        if msg.get("method").and_then(Value::as_str) != Some("notifications/progress") {
            return false;
        }
        let Some(params) = msg.get_mut("params") else {
            return false;
        };
        // The app's notification this one was made of: the first kept with the same token,
        // numbers and message (those before it, rmcp did not send).
        let Some(at) = w.progress.iter().position(|raw| same_progress(raw, params)) else {
            return false;
        };
        let raw = w.progress.drain(..=at).next_back();
        raw.map(|raw| *params = raw).is_some()
    }

    /// Whether anything is left to write.
    fn pending(&self) -> bool {
        let w = self.0.lock().unwrap();
        w.result.is_some() || !w.progress.is_empty()
    }
}

/// Whether rmcp's progress `typed` was written from the app's `raw`: the same token, the same
/// numbers (as floats), the same message.
fn same_progress(raw: &Value, typed: &Value) -> bool {
    let num = |v: &Value, k: &str| v.get(k).and_then(Value::as_f64);
    raw.get("progressToken") == typed.get("progressToken")
        && num(raw, "progress") == num(typed, "progress")
        && num(raw, "total") == num(typed, "total")
        && raw.get("message") == typed.get("message")
}

/// The requests whose answers a handler may put here: a tool's result, and the reads and
/// listings of resources, prompts and completions (an app's, or the vault's).
const WANTED: [&str; 8] = [
    "tools/call",
    "tasks/get",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "prompts/list",
    "prompts/get",
    "completion/complete",
];

/// A result as it is written for a client (`newer`: of protocol 2026-07-28 or later), as rmcp
/// would: with its `resultType` (`complete` unless it says otherwise), or without a `complete`
/// one for an earlier client.
pub(super) fn for_era(mut v: Value, newer: bool) -> Value {
    if let Some(o) = v.as_object_mut() {
        if newer {
            o.entry("resultType").or_insert_with(|| "complete".into());
        } else if o.get("resultType").and_then(Value::as_str) == Some("complete") {
            o.remove("resultType");
        }
    }
    v
}

/// The id of the request in `body` if rmcp's writing of its answer may be put right here (one
/// of [`WANTED`]).
pub(super) fn wanted(body: &[u8]) -> Option<Value> {
    #[derive(serde::Deserialize)]
    struct Request<'a> {
        #[serde(borrow)]
        method: Option<&'a str>,
        id: Option<Value>,
    }
    let r = serde_json::from_slice::<Request>(body).ok()?;
    r.method
        .is_some_and(|m| WANTED.contains(&m))
        .then_some(r.id)
        .flatten()
}

/// rmcp's response to the request `id`, with what its handler put into `exact` in place of
/// rmcp's writing of it. Events that cannot be concerned are passed on unread.
pub(super) fn written(r: Response, id: Value, exact: Exact) -> Response {
    edit(r, move |data| {
        if !exact.pending() {
            return None;
        }
        let mut msg: Value = serde_json::from_slice(data).ok()?;
        exact.apply(&id, &mut msg).then_some(msg)
    })
}

/// `r` with each of its messages passed through `edit`: given the message's JSON text, it
/// answers the message to write instead (none: it goes on as it is). An SSE stream is edited
/// event by event as it streams by; a JSON answer, whole.
pub(super) fn edit<F>(r: Response, edit: F) -> Response
where
    F: FnMut(&[u8]) -> Option<Value> + Send + 'static,
{
    let sse = super::sessions::streams(&r);
    let json = r.status().is_success()
        && r.headers()
            .get(http::header::CONTENT_TYPE)
            .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    if !sse && !json {
        return r;
    }
    let (mut parts, body) = r.into_parts();
    parts.headers.remove(http::header::CONTENT_LENGTH);
    let body = if sse {
        Body::from_stream(events(body, edit))
    } else {
        let mut edit = edit;
        let bytes = futures_util::stream::once(async move {
            let bytes = axum::body::to_bytes(body, usize::MAX).await?;
            Ok::<_, axum::Error>(match edit(&bytes) {
                Some(msg) => Bytes::from(serde_json::to_vec(&msg).unwrap_or_default()),
                None => bytes,
            })
        });
        Body::from_stream(bytes)
    };
    Response::from_parts(parts, body)
}

/// The SSE stream of `body`, each event's `data` passed through `edit`. An event is passed on
/// as soon as it is whole (rmcp writes one event a chunk).
fn events<F>(
    body: Body,
    mut edit: F,
) -> impl futures_util::Stream<Item = Result<Bytes, axum::Error>> + Send
where
    F: FnMut(&[u8]) -> Option<Value> + Send + 'static,
{
    let mut held: Vec<u8> = vec![];
    body.into_data_stream().map(move |chunk| {
        let chunk = chunk?;
        if held.is_empty() && chunk.ends_with(b"\n\n") && count_ends(&chunk) == 1 {
            return Ok(edit_event(&chunk, &mut edit).unwrap_or(chunk));
        }
        held.extend_from_slice(&chunk);
        let mut out = Vec::with_capacity(held.len());
        while let Some(end) = held.windows(2).position(|w| w == b"\n\n") {
            let event: Vec<u8> = held.drain(..end + 2).collect();
            match edit_event(&event, &mut edit) {
                Some(b) => out.extend_from_slice(&b),
                None => out.extend_from_slice(&event),
            }
        }
        Ok(Bytes::from(out))
    })
}

/// How many events end in `chunk`.
fn count_ends(chunk: &[u8]) -> usize {
    chunk.windows(2).filter(|w| w == b"\n\n").count()
}

/// One whole SSE event with its `data` line edited; none: unchanged.
fn edit_event<F>(event: &[u8], edit: &mut F) -> Option<Bytes>
where
    F: FnMut(&[u8]) -> Option<Value>,
{
    const DATA: &[u8] = b"data: ";
    let start = if event.starts_with(DATA) {
        0
    } else {
        event
            .windows(DATA.len() + 1)
            .position(|w| w[0] == b'\n' && &w[1..] == DATA)?
            + 1
    };
    let from = start + DATA.len();
    let len = event[from..].iter().position(|&b| b == b'\n')?;
    let msg = edit(&event[from..from + len])?;
    let mut out = Vec::with_capacity(event.len() + 16);
    out.extend_from_slice(&event[..from]);
    serde_json::to_writer(&mut out, &msg).ok()?;
    out.extend_from_slice(&event[from + len..]);
    Some(Bytes::from(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sse(chunks: Vec<&'static str>, exact: Exact, id: Value) -> String {
        let body = Body::from_stream(futures_util::stream::iter(
            chunks
                .into_iter()
                .map(|c| Ok::<_, std::io::Error>(Bytes::from_static(c.as_bytes()))),
        ));
        let r = Response::builder()
            .header("content-type", "text/event-stream")
            .body(body)
            .unwrap();
        let r = written(r, id, exact);
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let bytes = rt.block_on(axum::body::to_bytes(r.into_body(), usize::MAX));
        String::from_utf8(bytes.unwrap().to_vec()).unwrap()
    }

    /// The result and the progress go out as put, in rmcp's events, whatever the chunks; a
    /// notification rmcp did not make from one kept, and another request's answer, are left.
    #[test]
    fn the_result_and_progress_go_out_as_written() {
        let exact = Exact::default();
        exact.progress(json!({"progressToken": 7, "progress": 0, "total": 2}));
        exact.progress(json!({"progressToken": 7, "progress": 1, "total": 2}));
        exact.result(
            json!({"content": [{"type": "text", "text": "x", "annotations": {"priority": 1}}]}),
        );
        let out = sse(
            vec![
                "data:\nid: 0\nretry: 3000\n\n",
                "data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":7,\"progress\":1.0,\"total\":2.0}}\nid: 1\n\n",
                "data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{\"level\":1.0}}\n",
                "id: 2\n\ndata: {\"jsonrpc\":\"2.0\",\"id\":9,\"result\":{\"a\":1.0}}\nid: 3\n\n",
                "data: {\"jsonrpc\":\"2.0\",\"id\":4,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"x\",\"annotations\":{\"priority\":1.0}}]}}\nid: 4\n\n",
            ],
            exact.clone(),
            json!(4),
        );
        assert_eq!(
            out,
            "data:\nid: 0\nretry: 3000\n\n\
             data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":7,\"progress\":1,\"total\":2}}\nid: 1\n\n\
             data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{\"level\":1.0}}\nid: 2\n\n\
             data: {\"jsonrpc\":\"2.0\",\"id\":9,\"result\":{\"a\":1.0}}\nid: 3\n\n\
             data: {\"jsonrpc\":\"2.0\",\"id\":4,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"x\",\"annotations\":{\"priority\":1}}]}}\nid: 4\n\n"
        );
        assert!(!exact.pending(), "all written");
    }

    /// What was put takes the place of rmcp's fields; a field rmcp adds for the client's
    /// version stays.
    #[test]
    fn what_rmcp_adds_for_the_version_stays() {
        let exact = Exact::default();
        exact.result(json!({"resources": [{"uri": "a://b", "annotations": {"priority": 1}}]}));
        let mut msg = json!({"jsonrpc": "2.0", "id": 3, "result": {
            "resources": [{"uri": "a://b", "annotations": {"priority": 1.0}}],
            "cacheScope": "session", "resultType": "complete"}});
        assert!(exact.apply(&json!(3), &mut msg));
        assert_eq!(
            msg.to_string(),
            r#"{"jsonrpc":"2.0","id":3,"result":{"resources":[{"uri":"a://b","annotations":{"priority":1}}],"cacheScope":"session","resultType":"complete"}}"#
        );
    }

    /// Nothing put: the stream passes as rmcp wrote it.
    #[test]
    fn nothing_put_nothing_changed() {
        let rmcp = "data: {\"jsonrpc\":\"2.0\",\"id\":4,\"result\":{\"a\":1.0}}\nid: 4\n\n";
        assert_eq!(sse(vec![rmcp], Exact::default(), json!(4)), rmcp);
    }
}
