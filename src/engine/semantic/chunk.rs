//! What of a row is embedded, and how a long body is cut into chunks.
//!
//! A row's text is its chosen columns (by default every text, enum and list column; the table's
//! `semantic: {columns: [...]}` names others) and its body. A body that fits in [`MAX_WORDS`]
//! words is one chunk with the columns; a longer one is cut at headings and paragraphs into
//! chunks of at most that many words (a longer paragraph at word boundaries), each led by the
//! columns' text and its section's heading, at most [`MAX_CHUNKS`] of them.

use crate::engine::schema::Table;
use serde_json::{Map, Value};

/// The most words in one chunk (about 260 of the model's tokens; it reads 512).
pub const MAX_WORDS: usize = 200;
/// The most chunks of one row (the first 12,800 words or so of a body).
pub const MAX_CHUNKS: usize = 64;

/// The columns of `t` that are embedded, or `None` when the table opted out.
pub fn columns(t: &Table) -> Option<Vec<String>> {
    match &t.def.semantic {
        Some(s) if !s.enabled() => None,
        Some(s) if s.columns().is_some() => s.columns().map(<[String]>::to_vec),
        _ => Some(t.text_columns().map(str::to_string).collect()),
    }
}

/// The columns' text of a row: each chosen value on a line (a list's items with commas).
pub fn head(columns: &[String], values: &Map<String, Value>) -> String {
    let mut out = String::new();
    for c in columns {
        let line = match values.get(c) {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Array(items)) => items
                .iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join(", "),
            Some(Value::Null) | None => continue,
            Some(v) => v.to_string(),
        };
        if !line.trim().is_empty() {
            out.push_str(line.trim());
            out.push('\n');
        }
    }
    out
}

/// One chunk: the text embedded, and where its own part (without the columns' lead) starts.
#[derive(Debug, Clone, PartialEq)]
pub struct Chunk {
    /// The text embedded.
    pub text: String,
    own: usize,
}

impl Chunk {
    /// The chunk without the columns' text that leads it: what a snippet shows.
    pub fn own(&self) -> &str {
        let own = self.text[self.own..].trim();
        if own.is_empty() {
            self.text.trim()
        } else {
            own
        }
    }
}

fn words(s: &str) -> usize {
    s.split_whitespace().count()
}

/// The chunks of a row (none when it has no text at all).
pub fn chunks(head: &str, body: &str) -> Vec<Chunk> {
    let head = head.trim_end();
    let lead = if head.is_empty() {
        String::new()
    } else {
        format!("{head}\n")
    };
    if words(head) + words(body) <= MAX_WORDS {
        let text = format!("{lead}{}", body.trim());
        return if text.trim().is_empty() {
            vec![]
        } else {
            vec![Chunk {
                own: lead.len(),
                text,
            }]
        };
    }
    let budget = MAX_WORDS.saturating_sub(words(head)).max(MAX_WORDS / 2);
    let mut out: Vec<Chunk> = vec![];
    let mut heading = String::new();
    let mut cur = String::new();
    let flush = |cur: &mut String, heading: &str, out: &mut Vec<Chunk>| {
        if cur.trim().is_empty() || out.len() >= MAX_CHUNKS {
            cur.clear();
            return;
        }
        let mut text = lead.clone();
        let mut own = lead.len();
        if !heading.is_empty() && !cur.starts_with(heading) {
            text.push_str(heading);
            text.push('\n');
            own = text.len();
        }
        text.push_str(cur.trim());
        out.push(Chunk { text, own });
        cur.clear();
    };
    for para in body.split("\n\n") {
        let para = para.trim();
        if para.is_empty() {
            continue;
        }
        if para.starts_with('#') {
            flush(&mut cur, &heading, &mut out);
            heading = para.lines().next().unwrap_or("").to_string();
        }
        let n = words(para);
        if words(&cur) + n > budget {
            flush(&mut cur, &heading, &mut out);
        }
        if n > budget {
            // A paragraph longer than a chunk: cut at word boundaries.
            let ws: Vec<&str> = para.split_whitespace().collect();
            for part in ws.chunks(budget) {
                cur.push_str(&part.join(" "));
                flush(&mut cur, &heading, &mut out);
            }
            continue;
        }
        if !cur.is_empty() {
            cur.push_str("\n\n");
        }
        cur.push_str(para);
    }
    flush(&mut cur, &heading, &mut out);
    if out.is_empty() && !head.is_empty() {
        out.push(Chunk {
            text: head.to_string(),
            own: 0,
        });
    }
    out
}

/// A snippet of a chunk: its first words, up to about `chars` characters, on one line.
pub fn snippet(text: &str, chars: usize) -> String {
    let mut out = String::new();
    for w in text.split_whitespace() {
        if out.len() + w.len() + 1 > chars && !out.is_empty() {
            out.push('…');
            break;
        }
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(w);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_row_is_one_chunk_with_its_columns() {
        let c = chunks("Buy oat milk\nhome\n", "From the corner shop.");
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].text, "Buy oat milk\nhome\nFrom the corner shop.");
        assert_eq!(c[0].own(), "From the corner shop.");
        assert!(chunks("", "  ").is_empty());
    }

    #[test]
    fn a_long_body_is_cut_at_headings_and_paragraphs_within_the_bound() {
        let para = |w: &str, n: usize| vec![w; n].join(" ");
        let body = format!(
            "# Budget\n\n{}\n\n{}\n\n# Travel\n\n{}\n\n{}",
            para("money", 120),
            para("costs", 120),
            para("train", 50),
            para("plane", 700)
        );
        let c = chunks("Plans", &body);
        assert!(c.len() >= 5, "{}", c.len());
        for ch in &c {
            assert!(words(&ch.text) <= MAX_WORDS + 3, "{}", words(&ch.text));
            assert!(ch.text.starts_with("Plans\n"));
        }
        assert!(c[1].text.contains("# Budget") && c[1].own().starts_with("costs"));
        assert!(c.last().unwrap().text.contains("# Travel"));
        let huge = para("word", MAX_WORDS * (MAX_CHUNKS + 10));
        assert_eq!(chunks("", &huge).len(), MAX_CHUNKS);
    }

    #[test]
    fn snippets_end_at_a_word() {
        assert_eq!(snippet("one two  three\nfour", 9), "one two…");
        assert_eq!(snippet("short", 9), "short");
    }
}
