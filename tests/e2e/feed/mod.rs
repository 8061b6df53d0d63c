//! The change feed: `changes/` (cursor, filters, long-poll), the SSE stream, tool-call events,
//! webhooks (signed, in order, retried, resumed) and vacuumed cursors.

mod changes;
mod load;
mod sse;
mod webhooks;

use crate::kit::*;
use hmac::{Hmac, Mac};
use serde_json::{Value, json};
use sha2::Sha256;
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const BACKOFF: &[(&str, &str)] = &[
    ("DATANOTES_WEBHOOK_BACKOFF_MS", "50"),
    ("DATANOTES_WEBHOOK_BACKOFF_MAX_MS", "200"),
];

fn items(table: &str) -> Value {
    json!({"table": table, "columns": {"title": {"type": "text", "required": true}}})
}

/// Inserts a row as the owner; answers its seq.
fn insert(s: &Server, table: &str, id: &str) -> i64 {
    s.ok(
        "insert_row",
        json!({"table": table, "id": id, "values": {"title": id}}),
    )["seq"]
        .as_i64()
        .unwrap()
}

fn changes(s: &Server, args: Value) -> Value {
    s.ok_route("changes", args)
}

fn seqs(changes: &Value) -> Vec<i64> {
    changes
        .as_array()
        .unwrap_or_else(|| panic!("not a list: {changes}"))
        .iter()
        .map(|c| c["seq"].as_i64().unwrap())
        .collect()
}

/// Every matching change after `since`, following `next` page by page.
fn all_changes(s: &Server, since: i64, mut filter: Value, limit: i64) -> (Vec<Value>, i64) {
    let mut out = vec![];
    let mut cursor = since;
    loop {
        filter["since"] = json!(cursor);
        filter["limit"] = json!(limit);
        let page = changes(s, filter.clone());
        let list = page["changes"].as_array().unwrap().clone();
        let next = page["next"].as_i64().unwrap();
        assert!(next >= cursor, "next went back: {cursor} -> {next}");
        if let Some(last) = list.last() {
            let last = last["seq"].as_i64().unwrap();
            if list.len() as i64 == limit {
                assert_eq!(last, next, "a full page's next is its last seq");
            } else {
                assert!(next >= last, "next {next} before the last change {last}");
            }
        }
        cursor = next;
        if list.is_empty() {
            return (out, cursor);
        }
        out.extend(list);
    }
}

fn tool_call(tool: &str) -> Value {
    json!({"tool": tool, "args": {"q": "oat milk"}, "ok": true, "value": "2 hits", "servedBy": "tasks-app",
           "durationMs": 12.5, "summary": "searched", "session": "sess-1", "resultChars": 6, "resultTokens": 2})
}

// ---- a webhook receiver (webhooks.rs, load.rs) ----

// ---- webhooks ----

/// One request the receiver got.
#[derive(Debug, Clone)]
struct Hit {
    path: String,
    headers: HashMap<String, String>,
    body: Vec<u8>,
    status: u16,
}

impl Hit {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap()
    }
    fn seqs(&self) -> Vec<i64> {
        seqs(&self.json()["changes"])
    }
}

/// A local webhook receiver: plain HTTP/1.1 on 127.0.0.1, answering 500 while `failing` (or
/// for the next `fail_next` requests), 200 otherwise.
struct Receiver {
    url: String,
    hits: Arc<Mutex<Vec<Hit>>>,
    failing: Arc<AtomicBool>,
    fail_next: Arc<AtomicUsize>,
}

impl Receiver {
    fn start() -> Receiver {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", l.local_addr().unwrap());
        let r = Receiver {
            url,
            hits: Arc::default(),
            failing: Arc::default(),
            fail_next: Arc::default(),
        };
        let (hits, failing, fail_next) = (r.hits.clone(), r.failing.clone(), r.fail_next.clone());
        std::thread::spawn(move || {
            for conn in l.incoming() {
                let Ok(conn) = conn else { continue };
                let (hits, failing, fail_next) = (hits.clone(), failing.clone(), fail_next.clone());
                std::thread::spawn(move || serve_one(conn, &hits, &failing, &fail_next));
            }
        });
        r
    }
    fn hits(&self) -> Vec<Hit> {
        self.hits.lock().unwrap().clone()
    }
    fn hits_at(&self, path: &str) -> Vec<Hit> {
        self.hits().into_iter().filter(|h| h.path == path).collect()
    }
    fn delivered(&self, path: &str) -> Vec<i64> {
        self.hits_at(path)
            .iter()
            .filter(|h| h.status == 200)
            .flat_map(Hit::seqs)
            .collect()
    }
}

fn serve_one(
    mut c: TcpStream,
    hits: &Mutex<Vec<Hit>>,
    failing: &AtomicBool,
    fail_next: &AtomicUsize,
) {
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut buf = vec![];
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        match c.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let mut lines = head.split("\r\n");
    let request_line = lines.next().unwrap_or_default();
    let path = request_line
        .split(' ')
        .nth(1)
        .unwrap_or_default()
        .to_string();
    let headers: HashMap<String, String> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let len: usize = headers
        .get("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut body = buf[head_end..].to_vec();
    while body.len() < len {
        match c.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => body.extend_from_slice(&chunk[..n]),
        }
    }
    let fail = failing.load(Ordering::SeqCst)
        || fail_next
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
    let status = if fail { 500 } else { 200 };
    hits.lock().unwrap().push(Hit {
        path,
        headers,
        body,
        status,
    });
    let reason = if fail { "Internal Server Error" } else { "OK" };
    let _ = c.write_all(
        format!("HTTP/1.1 {status} {reason}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            .as_bytes(),
    );
}

fn verify_signature(h: &Hit, secret: &str) -> bool {
    let ts = &h.headers["x-datanotes-timestamp"];
    let sig = h.headers["x-datanotes-signature"]
        .strip_prefix("sha256=")
        .expect("sha256= prefix");
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(ts.as_bytes());
    mac.update(b".");
    mac.update(&h.body);
    mac.verify_slice(&hex::decode(sig).unwrap()).is_ok()
}

/// Checks every request a webhook made: signed, well formed, and in order against `want` (all
/// the changes it should deliver): each request carries the next undelivered changes, a
/// success moves on, a failure is retried from the same place. Answers how many were acked.
fn check_deliveries(hits: &[Hit], id: &str, secret: &str, want: &[i64]) -> usize {
    let now = chrono_now();
    let mut acked = 0;
    for (i, h) in hits.iter().enumerate() {
        assert!(verify_signature(h, secret), "request {i}: bad signature");
        assert!(
            !verify_signature(h, "whsec_wrong"),
            "signature ignores the secret"
        );
        assert_eq!(h.headers["x-datanotes-webhook"], id);
        assert!(
            h.headers["content-type"].starts_with("application/json"),
            "{:?}",
            h.headers
        );
        let ts: i64 = h.headers["x-datanotes-timestamp"].parse().unwrap();
        assert!((now - ts).abs() < 600, "timestamp {ts} vs now {now}");
        let body = h.json();
        assert_eq!(body["webhook"], id);
        let got = h.seqs();
        assert!(!got.is_empty(), "request {i}: an empty batch");
        assert_eq!(
            h.headers["x-datanotes-delivery"],
            format!("{id}-{}-{}", got[0], got.last().unwrap())
        );
        let end = (acked + got.len()).min(want.len());
        assert_eq!(
            got,
            want[acked..end],
            "request {i} ({}) carries the next undelivered changes (already acked {acked})",
            h.status
        );
        if h.status == 200 {
            acked += got.len();
        }
    }
    acked
}

fn chrono_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

fn hook_state(s: &Server, id: &str) -> Value {
    let list = s.ok_route("webhooks", json!({}));
    list["webhooks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["id"] == id)
        .unwrap_or_else(|| panic!("webhook {id} listed: {list}"))
        .clone()
}
