//! The change feed: the journal read as one ordered log, by cursor (`/changes/`), as a stream
//! (SSE) and by webhooks. The cursor is the journal's `seq`.
//!
//! Recent changes are kept serialized in a bounded ring filled by the writer after each commit;
//! a reader whose cursor is older than the ring is served from the journal. Readers never hold
//! anything the writer waits for, so a slow consumer cannot slow writers or other consumers.

pub mod webhooks;

use crate::auth;
use crate::engine::{Engine, Migration, journal};
use crate::error::{Error, Result};
use serde::Deserialize;
use std::collections::VecDeque;
use std::sync::{Arc, RwLock};

/// Every op a change can have.
pub const OPS: &[&str] = &[
    "insert",
    "update",
    "delete",
    "create_table",
    "alter_table",
    "drop_table",
    "undo",
    "restore",
    "settings",
    "hand_edit",
    "tool_call",
];

/// One change, serialized once.
#[derive(Debug)]
pub struct Change {
    pub seq: i64,
    pub op: String,
    pub table: Option<String>,
    pub json: String,
}

impl Change {
    pub fn from_migration(m: &Migration) -> Change {
        Change {
            seq: m.seq,
            op: m.op.clone(),
            table: m.table.clone(),
            json: serde_json::to_string(m).unwrap_or_default(),
        }
    }
}

/// The ring of recent changes, bounded in entries and in bytes (of serialized changes): the
/// oldest go first. It always holds a contiguous run of seqs, so a cursor inside it is served
/// from it, and one behind it (or any cursor while it is empty) from the journal.
pub struct Recent {
    ring: RwLock<Ring>,
    cap: usize,
    cap_bytes: usize,
}

#[derive(Default)]
struct Ring {
    changes: VecDeque<Arc<Change>>,
    bytes: usize,
}

impl Ring {
    fn pop_front(&mut self) {
        if let Some(c) = self.changes.pop_front() {
            self.bytes -= c.json.len();
        }
    }
}

impl Recent {
    pub fn new(cap: usize, cap_bytes: usize) -> Recent {
        Recent {
            ring: RwLock::new(Ring::default()),
            cap,
            cap_bytes,
        }
    }
    pub fn push(&self, migs: &[Migration]) {
        let mut r = self.ring.write().unwrap();
        for m in migs {
            let c = Change::from_migration(m);
            r.bytes += c.json.len();
            r.changes.push_back(Arc::new(c));
        }
        while r.changes.len() > self.cap || r.bytes > self.cap_bytes {
            r.pop_front();
        }
    }
    /// Changes after `cursor` if the ring covers it, with the ring's newest seq.
    fn after(&self, cursor: i64, max: usize) -> Option<(Vec<Arc<Change>>, i64)> {
        let r = self.ring.read().unwrap();
        let first = r.changes.front()?.seq;
        let last = r.changes.back()?.seq;
        if cursor + 1 < first {
            return None;
        }
        let start = r.changes.partition_point(|c| c.seq <= cursor);
        Some((r.changes.range(start..).take(max).cloned().collect(), last))
    }
    /// Drops changes below a seq (after vacuum).
    pub fn forget_before(&self, seq: i64) {
        let mut r = self.ring.write().unwrap();
        while r.changes.front().is_some_and(|c| c.seq < seq) {
            r.pop_front();
        }
    }
}

/// Which changes a consumer wants.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    pub ops: Option<Vec<String>>,
    pub tables: Option<Vec<String>>,
}

impl Filter {
    pub fn new(ops: Option<Vec<String>>, tables: Option<Vec<String>>) -> Result<Filter> {
        for op in ops.iter().flatten() {
            if !OPS.contains(&op.as_str()) {
                return Err(Error::invalid(format!("unknown op {op:?} in the filter"))
                    .column("ops")
                    .rule("enum")
                    .hint(format!("ops are: {}", OPS.join(", "))));
            }
        }
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

    /// Tool-call events reach only consumers that name `tool_call` in `ops`.
    pub fn matches(&self, op: &str, table: Option<&str>) -> bool {
        let op_ok = match &self.ops {
            Some(ops) => ops.iter().any(|o| o == op),
            None => op != "tool_call",
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
    pub fn to_json(&self) -> String {
        let mut s = String::with_capacity(
            64 + self.changes.iter().map(|c| c.json.len() + 1).sum::<usize>(),
        );
        s.push_str("{\"changes\":[");
        for (i, c) in self.changes.iter().enumerate() {
            if i > 0 {
                s.push(',');
            }
            s.push_str(&c.json);
        }
        s.push_str("],\"next\":");
        s.push_str(&self.next.to_string());
        s.push('}');
        s
    }
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
            None => read_journal(engine, cursor, 1000)?,
        };
        if chunk.is_empty() {
            cursor = cursor.max(high);
            break;
        }
        for c in chunk {
            cursor = c.seq;
            if filter.matches(&c.op, c.table.as_deref()) {
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

fn quote(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_default()
}

fn read_journal(engine: &Engine, cursor: i64, max: i64) -> Result<(Vec<Arc<Change>>, i64)> {
    engine.with_journal(|c| {
        c.execute_batch("BEGIN")?;
        let r = (|| -> Result<(Vec<Arc<Change>>, i64)> {
            let high = journal::last_seq(c)?;
            let mut st = c.prepare_cached(
                "SELECT seq,ts,op,tbl,row,before,after,actor,call FROM migrations WHERE seq > ?1 ORDER BY seq LIMIT ?2",
            )?;
            let rows = st.query_map(rusqlite::params![cursor, max], |r| {
                let seq: i64 = r.get(0)?;
                let ts: String = r.get(1)?;
                let op: String = r.get(2)?;
                let tbl: Option<String> = r.get(3)?;
                let row: Option<String> = r.get(4)?;
                let before: Option<String> = r.get(5)?;
                let after: Option<String> = r.get(6)?;
                let actor: String = r.get(7)?;
                let call: Option<String> = r.get(8)?;
                let opt = |s: &Option<String>| s.as_deref().map(quote).unwrap_or_else(|| "null".into());
                let mut json = format!(
                    "{{\"seq\":{seq},\"ts\":{},\"op\":{},\"table\":{},\"row\":{},\"before\":{},\"after\":{},\"actor\":{actor}",
                    quote(&ts),
                    quote(&op),
                    opt(&tbl),
                    opt(&row),
                    before.as_deref().unwrap_or("null"),
                    after.as_deref().unwrap_or("null"),
                );
                if let Some(call) = call {
                    json.push_str(",\"call\":");
                    json.push_str(&call);
                }
                json.push('}');
                Ok(Arc::new(Change { seq, op, table: tbl, json }))
            })?;
            let v = rows.collect::<rusqlite::Result<Vec<_>>>()?;
            Ok((v, high))
        })();
        let _ = c.execute_batch("COMMIT");
        r
    })
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
        if tokio::time::timeout_at(deadline, rx.changed())
            .await
            .is_err()
        {
            return Ok(Page {
                changes: vec![],
                next: since,
            });
        }
    }
}

/// What an MCP server reports after serving a `tools/call`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ToolCallRecord {
    tool: String,
    args: serde_json::Value,
    ok: bool,
    value: serde_json::Value,
    #[serde(rename = "servedBy")]
    served_by: String,
    #[serde(rename = "durationMs")]
    duration_ms: f64,
    summary: String,
    #[serde(default)]
    session: Option<String>,
    #[serde(rename = "resultChars")]
    result_chars: u64,
    #[serde(rename = "resultTokens")]
    result_tokens: u64,
}

/// The most characters of each text field of a `tool_call` event.
pub const TOOL_CALL_TOOL_CHARS: usize = 200;
pub const TOOL_CALL_SERVED_BY_CHARS: usize = 200;
pub const TOOL_CALL_SESSION_CHARS: usize = 200;
pub const TOOL_CALL_SUMMARY_CHARS: usize = 300;
pub const TOOL_CALL_ARGS_CHARS: usize = 300;
pub const TOOL_CALL_VALUE_CHARS: usize = 1000;

/// The first `n` characters of `s` (cut on a character boundary).
pub fn cut(s: &str, n: usize) -> String {
    match s.char_indices().nth(n) {
        Some((i, _)) => s[..i].to_string(),
        None => s.to_string(),
    }
}

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

/// Checks a tool-call report and shapes the `call` of its `tool_call` change, with every text
/// field cut: `tool`, `servedBy` and `session` at 200 characters, `summary` at 300, `args` (as
/// JSON text) at 300, `value` at 1,000. Every door that records a tool call (the MCP door and
/// `tool-calls/record`) goes through here.
pub fn tool_call_event(v: serde_json::Value) -> Result<serde_json::Value> {
    let r: ToolCallRecord = crate::error::parse("tool-calls/record", v)?;
    let value = match &r.value {
        serde_json::Value::String(s) => cut(s, TOOL_CALL_VALUE_CHARS),
        other => cut_json(other, TOOL_CALL_VALUE_CHARS),
    };
    Ok(serde_json::json!({
        "tool": cut(&r.tool, TOOL_CALL_TOOL_CHARS),
        "args": cut_json(&r.args, TOOL_CALL_ARGS_CHARS),
        "ok": r.ok,
        "value": value,
        "servedBy": cut(&r.served_by, TOOL_CALL_SERVED_BY_CHARS),
        "durationMs": r.duration_ms,
        "summary": cut(&r.summary, TOOL_CALL_SUMMARY_CHARS),
        "session": r.session.as_deref().map(|s| cut(s, TOOL_CALL_SESSION_CHARS)),
        "resultChars": r.result_chars,
        "resultTokens": r.result_tokens,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Actor;
    use serde_json::json;

    fn mig(seq: i64, bytes: usize) -> Migration {
        Migration {
            seq,
            ts: "2026-01-01T00:00:00.000Z".into(),
            op: "insert".into(),
            table: Some("a.b.c".into()),
            row: Some(format!("r{seq}")),
            before: serde_json::Value::Null,
            after: json!({"body": "x".repeat(bytes)}),
            actor: Actor::hand_edit(),
            call: None,
        }
    }

    fn held(r: &Recent) -> (Vec<i64>, usize) {
        let ring = r.ring.read().unwrap();
        let sum: usize = ring.changes.iter().map(|c| c.json.len()).sum();
        assert_eq!(ring.bytes, sum, "the byte count follows the changes");
        (ring.changes.iter().map(|c| c.seq).collect(), ring.bytes)
    }

    #[test]
    fn the_ring_is_bounded_in_bytes_and_a_reader_behind_it_goes_to_the_journal() {
        const CAP: usize = 350_000;
        let r = Recent::new(20_000, CAP);
        // Ten changes of about 100 kB, in batches of different sizes.
        r.push(&[mig(1, 100_000)]);
        r.push(&(2..=5).map(|s| mig(s, 100_000)).collect::<Vec<_>>());
        r.push(&(6..=10).map(|s| mig(s, 100_000)).collect::<Vec<_>>());
        let (seqs, bytes) = held(&r);
        assert_eq!(seqs, vec![8, 9, 10], "the oldest went first");
        assert!(bytes <= CAP, "{bytes} bytes held, cap {CAP}");

        // A cursor inside the ring (or just before its first change) is served from it, in
        // order and without a gap; one further behind is not (the journal serves it).
        let from = |cursor: i64| {
            r.after(cursor, 1000)
                .map(|(cs, last)| (cs.iter().map(|c| c.seq).collect::<Vec<_>>(), last))
        };
        assert_eq!(from(7), Some((vec![8, 9, 10], 10)));
        assert_eq!(from(8), Some((vec![9, 10], 10)));
        assert_eq!(from(10), Some((vec![], 10)));
        assert_eq!(
            from(6),
            None,
            "seq 7 was evicted: the journal must serve it"
        );
        assert_eq!(from(0), None);

        // A change larger than the whole bound is not kept at all, nor anything before it.
        r.push(&[mig(11, CAP)]);
        assert_eq!(held(&r), (vec![], 0));
        assert_eq!(from(10), None, "an empty ring serves nothing");
        // And the ring fills again from there, contiguous.
        r.push(&[mig(12, 10)]);
        assert_eq!(held(&r).0, vec![12]);
        assert_eq!(from(10), None, "seq 11 is only in the journal");
        assert_eq!(from(11), Some((vec![12], 12)));

        // Vacuum's forgetting keeps the count right.
        r.push(&[mig(13, 10), mig(14, 10)]);
        r.forget_before(14);
        assert_eq!(held(&r).0, vec![14]);

        // The entry bound still holds.
        let r = Recent::new(3, CAP);
        r.push(&(1..=5).map(|s| mig(s, 10)).collect::<Vec<_>>());
        assert_eq!(held(&r).0, vec![3, 4, 5]);
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
