//! The change feed: the journal read as one ordered log, by cursor (`/changes/`), as a stream
//! (SSE) and by webhooks. The cursor is the journal's `seq`.
//!
//! Recent changes are kept serialized in a bounded ring filled by the writer after each commit;
//! a reader whose cursor is older than the ring is served from the journal. Readers never hold
//! anything the writer waits for, so a slow consumer cannot slow writers or other consumers.
//!
//! The consumers' [`Filter`] names ops as `Op`. [`ToolCallRecord`] is the tool-call report (ten
//! keys, one struct): built by the MCP door, parsed by the `tool-calls/record` route, cut and
//! recorded in one place (`ToolCallRecord::record`). A session id is shown only to its principal
//! and the owner ([`hide_sessions`]).

pub mod webhooks;

use crate::auth;
use crate::engine::changes;
pub use crate::engine::changes::Change;
use crate::engine::{Actor, Cmd, Engine, EventCall, Op, journal};
use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// The first `n` characters of `s` (cut on a character boundary).
pub use crate::engine::journal::cut;

/// Which changes a consumer wants.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    /// The ops wanted (none: every op but `tool_call`).
    pub ops: Option<Vec<Op>>,
    /// The table patterns wanted (none: every table, and changes of no table).
    pub tables: Option<Vec<String>>,
}

impl Filter {
    /// A consumer's filter, checked: an unknown op or a bad table pattern is refused.
    pub fn new(ops: Option<Vec<String>>, tables: Option<Vec<String>>) -> Result<Filter> {
        let ops = match ops {
            None => None,
            Some(names) => Some(
                names
                    .iter()
                    .map(|op| {
                        Op::parse(op).ok_or_else(|| {
                            let all: Vec<&str> = Op::ALL.iter().map(|o| o.as_str()).collect();
                            Error::invalid(format!("unknown op {op:?} in the filter"))
                                .column("ops")
                                .rule("enum")
                                .hint(format!("ops are: {}", all.join(", ")))
                        })
                    })
                    .collect::<Result<Vec<Op>>>()?,
            ),
        };
        for p in tables.iter().flatten() {
            if !auth::valid_pattern(p) {
                return Err(Error::invalid(format!("invalid table pattern {p:?}"))
                    .column("tables")
                    .rule("pattern")
                    .hint("use catalog.schema.table, catalog.schema.*, catalog.* or *"));
            }
        }
        Ok(Filter { ops, tables })
    }

    /// A filter saved earlier (checked when it was made): an op no longer known matches nothing.
    pub(crate) fn saved(ops: Option<&[String]>, tables: Option<Vec<String>>) -> Filter {
        Filter {
            ops: ops.map(|ops| ops.iter().filter_map(|o| Op::parse(o)).collect()),
            tables,
        }
    }

    /// Events (`tool_call`, `semantic_index`) reach only consumers that name them in `ops`.
    pub fn matches(&self, op: Op, table: Option<&str>) -> bool {
        let op_ok = match &self.ops {
            Some(ops) => ops.contains(&op),
            None => !op.is_event(),
        };
        let table_ok = match &self.tables {
            None => true,
            Some(ps) => table.is_some_and(|t| ps.iter().any(|p| auth::pattern_matches(p, t))),
        };
        op_ok && table_ok
    }
}

/// The arguments of `POST /datanotes/changes/`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChangesArgs {
    #[serde(default)]
    pub since: i64,
    #[serde(default)]
    pub limit: Option<i64>,
    #[serde(default)]
    pub ops: Option<Vec<String>>,
    #[serde(default)]
    pub tables: Option<Vec<String>>,
    #[serde(default)]
    pub wait_ms: u64,
}

pub const MAX_LIMIT: i64 = 1000;
pub const MAX_WAIT_MS: u64 = 60_000;

/// A page of the feed.
pub struct Page {
    pub changes: Vec<Arc<Change>>,
    pub next: i64,
}

impl Page {
    /// The page as `reader` may read it (see [`shown`]).
    pub fn to_json(&self, reader: &auth::Caller) -> String {
        let mut s = String::with_capacity(
            64 + self.changes.iter().map(|c| c.json.len() + 1).sum::<usize>(),
        );
        s.push_str("{\"changes\":[");
        for (i, c) in self.changes.iter().enumerate() {
            if i > 0 {
                s.push(',');
            }
            s.push_str(&shown(c, reader));
        }
        s.push_str("],\"next\":");
        s.push_str(&self.next.to_string());
        s.push('}');
        s
    }
}

/// A change as `reader` may read it: the MCP session of its actor (and of a tool call it
/// records) only to the owner and to the principal that made it ([`auth::sees_session`]).
/// Other changes are served as encoded, once, for every reader.
pub fn shown<'a>(c: &'a Change, reader: &auth::Caller) -> std::borrow::Cow<'a, str> {
    use std::borrow::Cow;
    if matches!(reader, auth::Caller::Owner) || !c.json.contains("\"session\":") {
        return Cow::Borrowed(&c.json);
    }
    let Ok(mut v) = serde_json::from_str::<serde_json::Value>(&c.json) else {
        return Cow::Borrowed(&c.json);
    };
    if !hide_sessions(&mut v, reader) {
        return Cow::Borrowed(&c.json);
    }
    Cow::Owned(v.to_string())
}

/// Removes from a migration or change (`{actor, call?}`) the sessions `reader` may not see;
/// whether it removed any. Used by the feed and by `list_migrations`.
pub fn hide_sessions(m: &mut serde_json::Value, reader: &auth::Caller) -> bool {
    let token = m["actor"]["token"].as_str().map(String::from);
    if auth::sees_session(reader, token.as_deref()) {
        return false;
    }
    let mut hid = false;
    for part in ["actor", "call"] {
        if let Some(o) = m.get_mut(part).and_then(serde_json::Value::as_object_mut) {
            hid |= o.remove("session").is_some();
        }
    }
    hid
}

/// Where the feed starts now (after vacuum), as an error for a cursor older than that.
pub fn check_cursor(engine: &Engine, since: i64) -> Result<()> {
    let start = engine.with_journal(|c| journal::meta_i64(c, "vacuumed_before"))?;
    if start > 0 && since + 1 < start {
        return Err(Error::new(410, "cursor_expired", format!("cursor {since} is older than the feed, which now starts at seq {start}"))
            .column("since")
            .rule("vacuum")
            .hint(format!("history before {start} was vacuumed: resync your state (select_rows), then read with since = {}", start - 1)));
    }
    Ok(())
}

/// Reads up to `limit` matching changes after `since` (blocking).
pub fn read(engine: &Engine, since: i64, limit: usize, filter: &Filter) -> Result<Page> {
    check_cursor(engine, since)?;
    let mut out = vec![];
    let mut cursor = since;
    loop {
        let (chunk, high) = match engine.recent.after(cursor, 1000) {
            Some(x) => x,
            None => engine.with_journal(|c| changes::from_journal(c, cursor, 1000))?,
        };
        if chunk.is_empty() {
            cursor = cursor.max(high);
            break;
        }
        for c in chunk {
            cursor = c.seq;
            if filter.matches(c.op, c.table.as_deref()) {
                out.push(c);
                if out.len() >= limit {
                    return Ok(Page {
                        changes: out,
                        next: cursor,
                    });
                }
            }
        }
    }
    Ok(Page {
        changes: out,
        next: cursor,
    })
}

/// Long polls (`wait_ms`) of this process waiting now for a first matching change; the owner's
/// `/datanotes/health` shows them (`feed.waiting`).
static WAITING: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// How many long polls wait now for a first matching change.
pub fn waiting() -> usize {
    WAITING.load(std::sync::atomic::Ordering::Relaxed)
}

/// One long poll counted in [`WAITING`] while it lives.
struct Waiting;

impl Waiting {
    fn new() -> Waiting {
        WAITING.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Waiting
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        WAITING.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Reads a page, waiting up to `wait_ms` for a first matching change.
pub async fn read_wait(
    engine: Arc<Engine>,
    since: i64,
    limit: usize,
    filter: Filter,
    wait_ms: u64,
) -> Result<Page> {
    let deadline =
        tokio::time::Instant::now() + std::time::Duration::from_millis(wait_ms.min(MAX_WAIT_MS));
    let mut rx = engine.seq.subscribe();
    let mut since = since;
    loop {
        rx.borrow_and_update();
        let (e, f) = (engine.clone(), filter.clone());
        let page = tokio::task::spawn_blocking(move || read(&e, since, limit, &f))
            .await
            .map_err(|_| Error::internal("feed read panicked"))??;
        if !page.changes.is_empty() || tokio::time::Instant::now() >= deadline {
            return Ok(page);
        }
        since = page.next;
        let waiting = Waiting::new();
        let woken = tokio::time::timeout_at(deadline, rx.changed()).await;
        drop(waiting);
        if woken.is_err() {
            return Ok(Page {
                changes: vec![],
                next: since,
            });
        }
    }
}

/// The report of one tool call served: what a door records in the change feed, as a `tool_call`
/// event. The MCP door builds it; `POST /datanotes/tool-calls/record` takes it as JSON (the same
/// keys); [`ToolCallRecord::record`] cuts it and hands it to the writer, for both.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ToolCallRecord {
    /// The tool's name.
    pub tool: String,
    /// Its arguments (in the event: their JSON text, cut).
    pub args: serde_json::Value,
    /// Whether the call succeeded.
    pub ok: bool,
    /// What it answered (in the event: text, cut).
    pub value: serde_json::Value,
    /// Which app (or the engine) served it.
    pub served_by: String,
    /// How long it took, in milliseconds.
    pub duration_ms: f64,
    /// One line on what happened.
    pub summary: String,
    /// The caller's session, if any.
    #[serde(default)]
    pub session: Option<String>,
    /// The characters of the result.
    pub result_chars: u64,
    /// An estimate of the result's tokens.
    pub result_tokens: u64,
    /// The caller cancelled the call before its answer (absent when it did not).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cancelled: bool,
    /// The trace the call belongs to (32 lowercase hex digits), when one is known: the console
    /// links the call to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
}

/// The most characters of each text field of a `tool_call` event.
pub const TOOL_CALL_TOOL_CHARS: usize = 200;
pub const TOOL_CALL_SERVED_BY_CHARS: usize = 200;
pub const TOOL_CALL_SESSION_CHARS: usize = 200;
pub const TOOL_CALL_SUMMARY_CHARS: usize = 300;
pub const TOOL_CALL_ARGS_CHARS: usize = 300;
pub const TOOL_CALL_VALUE_CHARS: usize = 1000;

/// The first `n` characters of a JSON value's text, without writing out more than that.
fn cut_json(v: &serde_json::Value, n: usize) -> String {
    /// Takes bytes up to a bound, then refuses more (which ends the serialization).
    struct Bounded(Vec<u8>, usize);
    impl std::io::Write for Bounded {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            let room = self.1 - self.0.len();
            if room == 0 {
                return Err(std::io::Error::other("enough"));
            }
            let k = room.min(b.len());
            self.0.extend_from_slice(&b[..k]);
            Ok(k)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    // n characters are at most 4n bytes: the first 4n bytes hold them all, and a character
    // split at the bound comes after them.
    let mut w = Bounded(Vec::new(), n.saturating_mul(4));
    let _ = serde_json::to_writer(&mut w, v);
    cut(&String::from_utf8_lossy(&w.0), n)
}

impl ToolCallRecord {
    /// Checks a report sent as JSON (`tool-calls/record`).
    pub fn parse(v: serde_json::Value) -> Result<ToolCallRecord> {
        let r: ToolCallRecord = crate::error::parse("tool-calls/record", v)?;
        if let Some(t) = &r.trace_id
            && !(t.len() == 32
                && t.bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
                && t.bytes().any(|b| b != b'0'))
        {
            return Err(Error::invalid(
                "traceId must be a W3C trace ID: 32 lowercase hexadecimal digits, not all zero",
            )
            .column("traceId")
            .rule("trace_id")
            .hint("send the trace-id part of the call's traceparent, or leave traceId out"));
        }
        Ok(r)
    }

    /// The `call` of its `tool_call` change, with every text field cut: `tool`, `servedBy` and
    /// `session` at 200 characters, `summary` at 300, `args` (as JSON text) at 300, `value` at
    /// 1,000.
    pub fn event(self) -> Result<Box<serde_json::value::RawValue>> {
        let value = match &self.value {
            serde_json::Value::String(s) => cut(s, TOOL_CALL_VALUE_CHARS),
            other => cut_json(other, TOOL_CALL_VALUE_CHARS),
        };
        let cut_record = ToolCallRecord {
            tool: cut(&self.tool, TOOL_CALL_TOOL_CHARS),
            args: cut_json(&self.args, TOOL_CALL_ARGS_CHARS).into(),
            ok: self.ok,
            value: value.into(),
            served_by: cut(&self.served_by, TOOL_CALL_SERVED_BY_CHARS),
            duration_ms: self.duration_ms,
            summary: cut(&self.summary, TOOL_CALL_SUMMARY_CHARS),
            session: self
                .session
                .as_deref()
                .map(|s| cut(s, TOOL_CALL_SESSION_CHARS)),
            result_chars: self.result_chars,
            result_tokens: self.result_tokens,
            cancelled: self.cancelled,
            trace_id: self.trace_id,
        };
        serde_json::value::to_raw_value(&cut_record)
            .map_err(|e| Error::internal(format!("the tool call cannot be recorded: {e}")))
    }

    /// Records the call in the change feed: a `tool_call` event handed to the writer without
    /// waiting (committed with its next batch, in order). Every door that records a tool call
    /// (the MCP door and `tool-calls/record`) goes through here.
    /// The event's text is cut and encoded by the writer thread, not on the caller's path.
    pub fn record(self, engine: &Engine, actor: Actor) -> Result<()> {
        engine.write_nowait(
            Cmd::Event {
                op: Op::ToolCall,
                call: EventCall::later(move || self.event()),
            },
            actor,
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The event's JSON is the shape the feed has always had: ten keys in this order, text
    /// fields cut, `session` null when there is none.
    #[test]
    fn a_tool_call_event_keeps_its_shape() {
        let r = ToolCallRecord::parse(json!({
            "tool": "t".repeat(300),
            "args": {"q": "é".repeat(400)},
            "ok": false,
            "value": {"error": {"message": "x"}},
            "servedBy": "engine",
            "durationMs": 1.5,
            "summary": "s",
            "resultChars": 10,
            "resultTokens": 3,
        }))
        .unwrap();
        let args = cut_json(&r.args, TOOL_CALL_ARGS_CHARS);
        let want = json!({
            "tool": "t".repeat(200),
            "args": args,
            "ok": false,
            "value": "{\"error\":{\"message\":\"x\"}}",
            "servedBy": "engine",
            "durationMs": 1.5,
            "summary": "s",
            "session": null,
            "resultChars": 10,
            "resultTokens": 3,
        });
        assert_eq!(r.event().unwrap().get(), want.to_string());
        assert!(ToolCallRecord::parse(json!({"tool": "t", "extra": 1})).is_err());
    }

    #[test]
    fn cutting_keeps_whole_characters() {
        assert_eq!(cut("héllo", 2), "hé");
        assert_eq!(cut("hé", 5), "hé");
        let v = json!({"t": "é".repeat(1000)});
        let c = cut_json(&v, 300);
        assert_eq!(c.chars().count(), 300);
        assert!(v.to_string().starts_with(&c));
        assert_eq!(cut_json(&json!([1, 2]), 300), "[1,2]");
        let v = json!("😀".repeat(50));
        assert_eq!(
            cut_json(&v, 10),
            v.to_string().chars().take(10).collect::<String>()
        );
    }
}
