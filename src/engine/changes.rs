//! Changes as the feed serves them: one encoder for a change's JSON (from a migration just
//! committed, or from the journal's stored columns), and the ring of recent changes the writer
//! fills after each commit. The engine publishes here; the feed (`crate::feed`) reads.
//!
//! One encoder: serde over the journal's stored JSON columns, kept as they are, so the bytes a
//! consumer reads do not depend on whether a change came from the ring or the journal. The ring
//! ([`Recent`]) is a contiguous run of seqs, bounded in entries (20,000) and bytes (64 MiB).

use super::journal::{Migration, Op, Stored};
use crate::error::{Error, Result};
use rusqlite::Connection;
use serde::Serialize;
use serde_json::value::RawValue;
use std::collections::VecDeque;
use std::sync::{Arc, RwLock};

/// One change, serialized once.
#[derive(Debug)]
pub struct Change {
    /// The journal's seq: the feed's cursor.
    pub seq: i64,
    /// What the change did.
    pub op: Op,
    /// The table it concerns, if any.
    pub table: Option<String>,
    /// The change's JSON, as every consumer reads it.
    pub json: String,
}

/// The wire shape of a change: `{seq, ts, op, table, row, before, after, actor, call?}`. The
/// JSON parts are either the migration's own values (a change just committed) or the journal's
/// stored text, kept as it is (`RawValue`): one shape, one field order, for both.
#[derive(Serialize)]
struct Wire<'a, J: Serialize, A: Serialize, C: Serialize> {
    seq: i64,
    ts: &'a str,
    op: Op,
    table: Option<&'a str>,
    row: Option<&'a str>,
    before: J,
    after: J,
    actor: A,
    #[serde(skip_serializing_if = "Option::is_none")]
    call: Option<C>,
}

impl<J: Serialize, A: Serialize, C: Serialize> Wire<'_, J, A, C> {
    /// The one encoder of a change's JSON.
    fn encode(&self, table: Option<String>) -> Result<Change> {
        let json = serde_json::to_string(self)
            .map_err(|e| Error::internal(format!("change {} cannot be written: {e}", self.seq)))?;
        Ok(Change {
            seq: self.seq,
            op: self.op,
            table,
            json,
        })
    }
}

/// Reads a stored JSON column as it is (checked to be JSON, never re-encoded).
fn raw(seq: i64, s: &str) -> Result<&RawValue> {
    serde_json::from_str(s).map_err(|e| {
        Error::internal(format!(
            "journal entry {seq} holds a column that is not JSON: {e}"
        ))
    })
}

/// A stored JSON column that may be empty (null).
fn raw_or_null(seq: i64, s: &Option<String>) -> Result<&RawValue> {
    s.as_deref().map_or(Ok(RawValue::NULL), |s| raw(seq, s))
}

impl Change {
    /// The change of a migration just committed.
    pub fn from_migration(m: &Migration) -> Result<Change> {
        Wire {
            seq: m.seq,
            ts: &m.ts,
            op: m.op,
            table: m.table.as_deref(),
            row: m.row.as_deref(),
            before: &m.before,
            after: &m.after,
            actor: &m.actor,
            call: m.call.as_deref(),
        }
        .encode(m.table.clone())
    }

    /// The change of a migration read back from the journal's columns.
    fn from_stored(
        seq: i64,
        ts: &str,
        op: Op,
        table: Option<String>,
        row: Option<&str>,
        stored: &Stored,
    ) -> Result<Change> {
        Wire {
            seq,
            ts,
            op,
            table: table.as_deref(),
            row,
            before: raw_or_null(seq, &stored.before)?,
            after: raw_or_null(seq, &stored.after)?,
            actor: raw(seq, &stored.actor)?,
            call: stored.call.as_deref().map(|s| raw(seq, s)).transpose()?,
        }
        .encode(table.clone())
    }
}

/// Reads up to `max` changes after `cursor` from the journal, in one read transaction, with the
/// journal's newest seq.
pub fn from_journal(c: &Connection, cursor: i64, max: i64) -> Result<(Vec<Arc<Change>>, i64)> {
    c.execute_batch("BEGIN")?;
    let r = (|| -> Result<(Vec<Arc<Change>>, i64)> {
        let high = super::journal::last_seq(c)?;
        let mut st = c.prepare_cached(
            "SELECT seq,ts,op,tbl,row,before,after,actor,call FROM migrations WHERE seq > ?1 ORDER BY seq LIMIT ?2",
        )?;
        let mut rows = st.query(rusqlite::params![cursor, max])?;
        let mut out = vec![];
        while let Some(r) = rows.next()? {
            let seq: i64 = r.get(0)?;
            let ts: String = r.get(1)?;
            let row: Option<String> = r.get(4)?;
            let stored = Stored {
                before: r.get(5)?,
                after: r.get(6)?,
                actor: r.get(7)?,
                call: r.get(8)?,
            };
            let c = Change::from_stored(seq, &ts, r.get(2)?, r.get(3)?, row.as_deref(), &stored)?;
            out.push(Arc::new(c));
        }
        Ok((out, high))
    })();
    // A read transaction: its end is checked like any other statement.
    match c.execute_batch("COMMIT") {
        Ok(()) => r,
        Err(e) => {
            super::journal::rollback(c, "a feed read");
            r.and(Err(e.into()))
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
    fn clear(&mut self) {
        self.changes.clear();
        self.bytes = 0;
    }
}

impl Recent {
    /// An empty ring keeping at most `cap` changes and `cap_bytes` bytes of them.
    pub fn new(cap: usize, cap_bytes: usize) -> Recent {
        Recent {
            ring: RwLock::new(Ring::default()),
            cap,
            cap_bytes,
        }
    }
    /// Adds the changes of a commit. A change that cannot be encoded empties the ring (readers
    /// then go to the journal, which answers them or says why): the ring never has a gap.
    pub fn push(&self, migs: &[Migration]) {
        let mut r = self.ring.write().unwrap();
        for m in migs {
            match Change::from_migration(m) {
                Ok(c) => {
                    r.bytes += c.json.len();
                    r.changes.push_back(Arc::new(c));
                }
                Err(e) => {
                    tracing::error!("change {} left out of the ring: {}", m.seq, e.message);
                    r.clear();
                }
            }
        }
        while r.changes.len() > self.cap || r.bytes > self.cap_bytes {
            r.pop_front();
        }
    }
    /// Changes after `cursor` if the ring covers it, with the ring's newest seq.
    pub fn after(&self, cursor: i64, max: usize) -> Option<(Vec<Arc<Change>>, i64)> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::journal::{self, Actor, RowState};
    use serde_json::{Value, json};

    fn mig(seq: i64, bytes: usize) -> Migration {
        Migration {
            seq,
            ts: "2026-01-01T00:00:00.000Z".into(),
            op: Op::Insert,
            table: Some("a.b.c".into()),
            row: Some(format!("r{seq}")),
            before: Value::Null,
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

    /// An op's stored name, its JSON and its parse agree, for every op (journals written
    /// before the type existed hold these names).
    #[test]
    fn every_op_has_one_name() {
        for op in Op::ALL {
            assert_eq!(
                serde_json::to_string(&op).unwrap(),
                format!("\"{}\"", op.as_str())
            );
            assert_eq!(Op::parse(op.as_str()), Some(op));
            assert_eq!(
                serde_json::from_str::<Op>(&format!("\"{op}\"")).unwrap(),
                op
            );
        }
        assert_eq!(Op::parse("INSERT"), None);
    }

    /// The bytes a consumer reads do not depend on whether the ring or the journal served them,
    /// and are the shape the feed has always had.
    #[test]
    fn a_change_read_back_from_the_journal_encodes_byte_identically_to_the_ring() {
        let dir = tempfile::tempdir().unwrap();
        let c = journal::open(&dir.path().join("journal.db"), true).unwrap();
        let actor = Actor::new(
            Some("h \"q\" é".into()),
            Some("m".into()),
            Some("app".into()),
            Some("s".into()),
            None,
        );
        let row = |v: i64, t: &str| RowState::Row {
            version: v,
            values: json!({"title": t, "n": 1.5, "z": null, "a": [1, "x"]})
                .as_object()
                .cloned()
                .unwrap(),
            body: "body \u{2028} \"q\"\n😀".into(),
        };
        let m =
            |op, table: Option<&str>, rowid: Option<&str>, before: Value, after: Value| Migration {
                seq: 0,
                ts: "2026-01-01T00:00:00.000Z".into(),
                op,
                table: table.map(Into::into),
                row: rowid.map(Into::into),
                before,
                after,
                actor: actor.clone(),
                call: None,
            };
        let mut migs = [
            m(
                Op::Insert,
                Some("a.b.c"),
                Some("x"),
                Value::Null,
                row(1, "one").into(),
            ),
            m(
                Op::Update,
                Some("a.b.c"),
                Some("x"),
                row(1, "one").into(),
                row(2, "two").into(),
            ),
            m(
                Op::HandEdit,
                Some("a.b.c"),
                Some("y"),
                Value::Null,
                RowState::Invalid("not \"valid\"".into()).into(),
            ),
            m(
                Op::CreateTable,
                Some("a.b.c"),
                None,
                Value::Null,
                json!({"description": "d", "columns": {"title": {"type": "text"}}}),
            ),
            m(
                Op::Settings,
                None,
                None,
                json!({"max_body_bytes": 1}),
                json!({"max_body_bytes": 2}),
            ),
            Migration {
                call: Some(
                    serde_json::value::to_raw_value(&json!({"tool": "t", "args": "{\"a\":1}", "ok": true, "durationMs": 1.25, "session": null})).unwrap(),
                ),
                ..m(Op::ToolCall, None, None, Value::Null, Value::Null)
            },
        ];
        for x in migs.iter_mut() {
            journal::append(&c, x).unwrap();
        }
        let (read, high) = from_journal(&c, 0, 100).unwrap();
        assert_eq!(high, migs.len() as i64);
        assert_eq!(read.len(), migs.len());
        for (x, r) in migs.iter().zip(&read) {
            let ring = Change::from_migration(x).unwrap();
            assert_eq!(ring.json, r.json, "ring and journal encode alike");
            assert_eq!((ring.seq, ring.op, &ring.table), (r.seq, r.op, &r.table));
            // The shape the feed has always had: the migration as serde writes it.
            assert_eq!(ring.json, serde_json::to_string(x).unwrap());
        }
    }
}
