//! [`FileServer`]: files and redirects by path over plain HTTP on 127.0.0.1.

use super::http::{head, listen, respond, send, shut};
use std::collections::BTreeMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

/// What a [`FileServer`] answers for a path.
pub enum Route {
    /// 200 with these bytes.
    Bytes(Vec<u8>),
    /// 302 to this URL.
    Redirect(String),
}

/// Files and redirects by path over plain HTTP on 127.0.0.1 (404 for any other path), counting
/// the requests per path. Stopped on drop.
pub struct FileServer {
    port: u16,
    routes: Arc<Mutex<BTreeMap<String, Route>>>,
    hits: Arc<Mutex<BTreeMap<String, u64>>>,
    stop: Arc<AtomicBool>,
}

impl FileServer {
    /// Starts it with no routes.
    pub fn start() -> FileServer {
        let routes: Arc<Mutex<BTreeMap<String, Route>>> = Arc::default();
        let hits: Arc<Mutex<BTreeMap<String, u64>>> = Arc::default();
        let stop: Arc<AtomicBool> = Arc::default();
        let (r, h) = (routes.clone(), hits.clone());
        let st = stop.clone();
        let port = listen(stop.clone(), move |c, method, path| {
            // By path: a query (a sign-in's scope) is not part of it.
            let path = path.split('?').next().unwrap_or(path);
            *h.lock().unwrap().entry(path.to_string()).or_default() += 1;
            let answer = match r.lock().unwrap().get(path) {
                Some(Route::Bytes(b)) => Ok(b.clone()),
                Some(Route::Redirect(u)) => Err(Some(u.clone())),
                None => Err(None),
            };
            match answer {
                Ok(b) => {
                    let head = head(
                        200,
                        &[("content-type", "application/octet-stream")],
                        Some(b.len() as u64),
                    );
                    if send(c, head.as_bytes(), &st) && method == "GET" {
                        send(c, &b, &st);
                    }
                }
                Err(Some(u)) => respond(c, method, 302, &[("location", &u)], b""),
                Err(None) => respond(
                    c,
                    method,
                    404,
                    &[("content-type", "text/plain")],
                    b"not found",
                ),
            }
        });
        FileServer {
            port,
            routes,
            hits,
            stop,
        }
    }

    /// Serves `bytes` at `path` (`/app.wasm`).
    pub fn file(&self, path: &str, bytes: Vec<u8>) {
        self.routes
            .lock()
            .unwrap()
            .insert(path.into(), Route::Bytes(bytes));
    }

    /// Redirects `path` to `url`.
    pub fn redirect(&self, path: &str, url: &str) {
        self.routes
            .lock()
            .unwrap()
            .insert(path.into(), Route::Redirect(url.into()));
    }

    /// `http://127.0.0.1:PORT<path>`.
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// Requests received for `path`.
    pub fn hits(&self, path: &str) -> u64 {
        self.hits.lock().unwrap().get(path).copied().unwrap_or(0)
    }
}

impl Drop for FileServer {
    fn drop(&mut self) {
        shut(&self.stop, self.port);
    }
}
