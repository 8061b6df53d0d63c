//! The HTTP plumbing of the registry and the file server: a listener with a thread per
//! connection, one request head each, and the answers written to it.

use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::time::Duration;

/// Accepts connections on a free port of 127.0.0.1, each on its own thread: reads one request
/// head and hands (method, path) to `answer`, then closes. Answers the port.
pub(super) fn listen(
    stop: Arc<AtomicBool>,
    answer: impl Fn(&mut TcpStream, &str, &str) + Send + Sync + 'static,
) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let answer = Arc::new(answer);
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            if stop.load(SeqCst) {
                return;
            }
            let Ok(mut c) = conn else { continue };
            let answer = answer.clone();
            std::thread::spawn(move || {
                let _ = c.set_read_timeout(Some(Duration::from_secs(10)));
                let _ = c.set_write_timeout(Some(Duration::from_millis(100)));
                let mut head = vec![];
                let mut buf = [0u8; 4096];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match c.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                    if head.len() > 64 << 10 {
                        return;
                    }
                }
                let head = String::from_utf8_lossy(&head).into_owned();
                let mut words = head.split_whitespace();
                let method = words.next().unwrap_or("").to_string();
                let path = words.next().unwrap_or("/").to_string();
                answer(&mut c, &method, &path);
            });
        }
    });
    port
}

/// Sets the flag and wakes the accept loop.
pub(super) fn shut(flag: &AtomicBool, port: u16) {
    flag.store(true, SeqCst);
    let _ = TcpStream::connect(("127.0.0.1", port));
}

pub(super) fn head(status: u16, headers: &[(&str, &str)], len: Option<u64>) -> String {
    let reason = match status {
        200 => "OK",
        302 => "Found",
        404 => "Not Found",
        _ => "Other",
    };
    let mut h = format!("HTTP/1.1 {status} {reason}\r\nconnection: close\r\n");
    for (k, v) in headers {
        h.push_str(&format!("{k}: {v}\r\n"));
    }
    if let Some(n) = len {
        h.push_str(&format!("content-length: {n}\r\n"));
    }
    h.push_str("\r\n");
    h
}

/// A registry's `401` asking to sign in at `realm` for `service` (a Bearer challenge).
pub(super) fn sign_in(c: &mut TcpStream, method: &str, realm: &str, service: &str) {
    let challenge = format!("Bearer realm=\"{realm}\",service=\"{service}\"");
    let body = br#"{"errors":[{"code":"UNAUTHORIZED","message":"sign in"}]}"#;
    let json = ("content-type", "application/json");
    respond(
        c,
        method,
        401,
        &[json, ("www-authenticate", &challenge)],
        body,
    );
}

pub(super) fn respond(
    c: &mut TcpStream,
    method: &str,
    status: u16,
    headers: &[(&str, &str)],
    body: &[u8],
) {
    let never = AtomicBool::new(false);
    let h = head(status, headers, Some(body.len() as u64));
    if send(c, h.as_bytes(), &never) && method != "HEAD" {
        send(c, body, &never);
    }
}

/// Writes all of `buf`, waiting while the client does not read (until `stop`); false when the
/// client hung up or the server stops.
pub(super) fn send(c: &mut TcpStream, mut buf: &[u8], stop: &AtomicBool) -> bool {
    while !buf.is_empty() {
        if stop.load(SeqCst) {
            return false;
        }
        match c.write(buf) {
            Ok(0) => return false,
            Ok(n) => buf = &buf[n..],
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                ) => {}
            Err(_) => return false,
        }
    }
    true
}
