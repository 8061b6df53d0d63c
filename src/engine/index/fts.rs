//! Full-text search (FTS5, BM25) over text columns and bodies: the queued changes flushed, the
//! query's words weighed (a word in most rows, or a stop word, counts for less).

use super::*;

/// Applies the full-text changes queued by [`put_row`], [`put_invalid`], [`delete_row`] and
/// [`drop_table`], in order; called right before the index commits.
///
/// Why a queue: each job of a batch runs in a savepoint (a refused job rolls back alone), and
/// every savepoint makes FTS5 flush its pending terms to disk, so writing the FTS table inside
/// them would write (and later merge) one small segment per row. The queue is a plain table,
/// rolled back with its job; the FTS table is written once per batch, outside any savepoint.
pub fn flush_fts(c: &Connection) -> Result<()> {
    let queued: Vec<(i64, Option<String>)> = c
        .prepare_cached("SELECT fid, text FROM fts_pending ORDER BY n")?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<rusqlite::Result<_>>()?;
    if queued.is_empty() {
        return Ok(());
    }
    let mut del = c.prepare_cached("DELETE FROM fts WHERE rowid=?1")?;
    let mut put = c.prepare_cached("INSERT INTO fts(rowid, text) VALUES(?1, ?2)")?;
    for (fid, text) in queued {
        del.execute([fid])?;
        if let Some(text) = text {
            put.execute(params![fid, text])?;
        }
    }
    c.execute("DELETE FROM fts_pending", [])?;
    Ok(())
}

/// Ranked full-text search (BM25): rows with every word of `query`, or with any of them
/// (`any`). Returns (table, id, score, snippet).
pub fn search(
    c: &Connection,
    query: &str,
    tables: &[String],
    limit: i64,
    any: bool,
) -> Result<Vec<(String, String, f64, String)>> {
    // Each word becomes a quoted FTS5 string: no query syntax reaches FTS5 from callers.
    let mut words: Vec<&str> = query
        .split(|ch: char| !ch.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .collect();
    // Any of the words: the words that say something (a question's "what", "the", "I" would
    // rank every note), unless the query has nothing else.
    if any && words.iter().any(|w| !is_stopword(w)) {
        words.retain(|w| !is_stopword(w));
    }
    if any && !words.is_empty() {
        // A word in more than half the notes says nothing of which note (its BM25 weight is
        // nil), and one in more than COMMON_WORD notes little, while ranking by it would score
        // that many: left out. A word's notes are counted up to that bound, no further.
        let cap = (fts_rows(c)? / 2).min(COMMON_WORD);
        let mut count = c.prepare_cached(
            "SELECT count(*) FROM (SELECT 1 FROM fts WHERE fts MATCH ?1 LIMIT ?2)",
        )?;
        let mut keep = vec![];
        for w in words {
            let n: i64 = count.query_row(params![format!("\"{w}\""), cap + 1], |r| r.get(0))?;
            if n <= cap {
                keep.push(w);
            }
        }
        words = keep;
    }
    let terms: Vec<String> = words.iter().map(|w| format!("\"{w}\"")).collect();
    if terms.is_empty() {
        return Ok(vec![]);
    }
    let fts_q = terms.join(if any { " OR " } else { " " });
    let mut sql = String::from(
        "SELECT files.tbl, files.id, -bm25(fts), snippet(fts, 0, '**', '**', '…', 12)
         FROM fts JOIN files ON files.fid = fts.rowid WHERE fts MATCH ?1",
    );
    let mut args: Vec<Sql> = vec![Sql::Text(fts_q)];
    if !tables.is_empty() {
        let ph: Vec<String> = tables
            .iter()
            .map(|t| {
                args.push(Sql::Text(t.clone()));
                format!("?{}", args.len())
            })
            .collect();
        sql.push_str(&format!(" AND files.tbl IN ({})", ph.join(",")));
    }
    sql.push_str(&format!(" ORDER BY bm25(fts) LIMIT {limit}"));
    let mut st = c.prepare_cached(&sql)?;
    let v = st
        .query_map(params_from_iter(args), |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(v)
}

/// A word in more notes than this is left out of a ranking by any word.
pub const COMMON_WORD: i64 = 10_000;

/// How many notes the full-text index holds: the first number of FTS5's averages record (a
/// SQLite varint), or a count where that record cannot be read.
pub(super) fn fts_rows(c: &Connection) -> Result<i64> {
    let block: Option<Vec<u8>> = c
        .prepare_cached("SELECT block FROM fts_data WHERE id = 1")?
        .query_row([], |r| r.get(0))
        .optional()?;
    if let Some(n) = block.as_deref().and_then(varint) {
        return Ok(n);
    }
    Ok(
        c.prepare_cached("SELECT count(*) FROM files WHERE error IS NULL")?
            .query_row([], |r| r.get(0))?,
    )
}

/// A SQLite varint (big-endian groups of 7 bits, the 9th byte whole).
pub(super) fn varint(b: &[u8]) -> Option<i64> {
    let mut v: u64 = 0;
    for (i, &x) in b.iter().enumerate().take(9) {
        if i == 8 {
            return Some(((v << 8) | x as u64) as i64);
        }
        v = (v << 7) | (x & 0x7f) as u64;
        if x & 0x80 == 0 {
            return Some(v as i64);
        }
    }
    None
}

/// Common English words that a ranking by any word leaves out.
pub(super) fn is_stopword(w: &str) -> bool {
    const WORDS: &[&str] = &[
        "a", "about", "after", "all", "also", "am", "an", "and", "any", "are", "as", "at", "be",
        "been", "but", "by", "can", "could", "did", "do", "does", "for", "from", "had", "has",
        "have", "he", "her", "his", "how", "i", "if", "in", "into", "is", "it", "its", "me", "my",
        "no", "not", "of", "on", "or", "our", "she", "so", "some", "than", "that", "the", "their",
        "them", "then", "there", "these", "they", "this", "to", "was", "we", "were", "what",
        "when", "where", "which", "who", "why", "will", "with", "would", "you", "your",
    ];
    let lower = w.to_lowercase();
    WORDS.binary_search(&lower.as_str()).is_ok()
}
