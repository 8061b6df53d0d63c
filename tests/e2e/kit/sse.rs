//! Server-Sent Events read with blocking reqwest: the feed's `changes/stream`.

use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::time::{Duration, Instant};

/// One Server-Sent Event.
#[derive(Debug, Clone)]
pub struct SseEvent {
    /// Its `id:` field (the change's seq), if any.
    pub id: Option<String>,
    /// Its `data:` lines, joined by newlines.
    pub data: String,
}

impl SseEvent {
    /// Its data as JSON (panics if it is not).
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.data)
            .unwrap_or_else(|e| panic!("event data {:?}: {e}", self.data))
    }
    /// Its id as a number (panics if there is none).
    pub fn seq(&self) -> i64 {
        self.id
            .as_deref()
            .expect("event id")
            .parse()
            .expect("numeric event id")
    }
}

/// Reads an SSE response on a thread (blocking reqwest, line by line) and hands over its events.
pub struct SseStream {
    rx: std::sync::mpsc::Receiver<SseEvent>,
}

impl SseStream {
    pub(super) fn new(resp: reqwest::blocking::Response) -> SseStream {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut id = None;
            let mut data: Vec<String> = vec![];
            for line in BufReader::new(resp).lines() {
                let Ok(line) = line else { return };
                if line.is_empty() {
                    if !data.is_empty() {
                        let ev = SseEvent {
                            id: id.take(),
                            data: data.join("\n"),
                        };
                        data.clear();
                        if tx.send(ev).is_err() {
                            return;
                        }
                    }
                    id = None;
                } else if line.starts_with(':') {
                    // A comment (keep-alive).
                } else {
                    let (field, value) = line.split_once(':').unwrap_or((line.as_str(), ""));
                    let value = value.strip_prefix(' ').unwrap_or(value);
                    match field {
                        "id" => id = Some(value.to_string()),
                        "data" => data.push(value.to_string()),
                        _ => {}
                    }
                }
            }
        });
        SseStream { rx }
    }

    /// The next event, or None if none comes within `timeout`.
    pub fn next(&self, timeout: Duration) -> Option<SseEvent> {
        self.rx.recv_timeout(timeout).ok()
    }

    /// Every event until the server ends the stream; panics if it does not end within `timeout`.
    pub fn until_end(&self, timeout: Duration) -> Vec<SseEvent> {
        let deadline = Instant::now() + timeout;
        let mut out = vec![];
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(left) {
                Ok(ev) => out.push(ev),
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return out,
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                    panic!("the stream did not end within {timeout:?} (got {out:?})")
                }
            }
        }
    }

    /// The next `n` events; panics if they do not all come within 10 s.
    pub fn take(&self, n: usize) -> Vec<SseEvent> {
        let deadline = Instant::now() + Duration::from_secs(10);
        (0..n)
            .map(|i| {
                let left = deadline.saturating_duration_since(Instant::now());
                self.rx
                    .recv_timeout(left)
                    .unwrap_or_else(|_| panic!("timed out waiting for event {} of {n}", i + 1))
            })
            .collect()
    }
}
