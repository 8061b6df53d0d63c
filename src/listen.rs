//! The listener: connections bounded in number and in time, so that clients that connect and
//! say nothing (or hold idle connections by the thousand) cannot take the server's file
//! descriptors, and `/datanotes/health` and the owner still get through.
//!
//! - A connection must send a complete first request head within `header` (else it is closed),
//!   and a connection with no request in flight is closed after `idle` (hyper's header read
//!   timeout, which runs from the end of the previous response).
//! - At most `max` connections are served. At the cap, a new connection takes the place of the
//!   connection that has been idle (no request in flight) the longest, which is closed; if every
//!   connection has a request in flight (feed streams, long polls), up to [`RESERVE`] more are
//!   accepted for `/datanotes/health` and the owner only (anything else answers 503), one request
//!   each. Beyond those, a connection is closed at once.
//! - [`raise_nofile`] raises the soft limit of open files to the hard limit at start.
//! - Each request carries the client's address (axum's `ConnectInfo<SocketAddr>`), for the
//!   bounds that count by it (the OAuth endpoints anyone may call).

use axum::Router;
use axum::body::Body;
use axum::http::{Request, Response, StatusCode};
use bytes::Bytes;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use std::collections::{BTreeSet, HashMap};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::sync::Notify;

/// Connections accepted beyond the cap, for `/datanotes/health` and the owner.
pub const RESERVE: usize = 32;

/// How long connections may stay, and how many.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Time to send the first request head (`DATANOTES_HEADER_TIMEOUT_MS`, 10 s).
    pub header: Duration,
    /// Time a connection may stay with no request in flight (`DATANOTES_IDLE_TIMEOUT_MS`, 60 s).
    pub idle: Duration,
    /// Connections served at once (`DATANOTES_MAX_CONNECTIONS`; by default half the open files
    /// limit, at most 4096).
    pub max: usize,
}

impl Limits {
    /// The limits from the environment (`DATANOTES_HEADER_TIMEOUT_MS`, `DATANOTES_IDLE_TIMEOUT_MS`, `DATANOTES_MAX_CONNECTIONS`), or their defaults.
    pub fn from_env() -> Limits {
        let env = |name: &str, default: u64| match crate::knobs::num(name, default) {
            0 => default,
            v => v,
        };
        let files = nofile().map(|(soft, _)| soft).unwrap_or(1024);
        let max = (files / 2).clamp(16, 4096);
        Limits {
            header: Duration::from_millis(env("DATANOTES_HEADER_TIMEOUT_MS", 10_000)),
            idle: Duration::from_millis(env("DATANOTES_IDLE_TIMEOUT_MS", 60_000)),
            max: env("DATANOTES_MAX_CONNECTIONS", max) as usize,
        }
    }
}

/// The soft and hard limits of open files.
fn nofile() -> Option<(u64, u64)> {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct given.
    (unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } == 0)
        .then_some((r.rlim_cur, r.rlim_max))
}

/// Raises the soft limit of open files to the hard limit; answers (before, after).
pub fn raise_nofile() -> Option<(u64, u64)> {
    let (soft, hard) = nofile()?;
    if soft >= hard {
        return Some((soft, soft));
    }
    let r = libc::rlimit {
        rlim_cur: hard,
        rlim_max: hard,
    };
    // SAFETY: setrlimit reads the struct given.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &r) } == 0 {
        Some((soft, hard))
    } else {
        Some((soft, soft))
    }
}

/// The live connections: which are idle (no request in flight), and since when.
#[derive(Default)]
struct Conns {
    state: Mutex<State>,
    /// Woken when the last connection ends.
    gone: Notify,
}

#[derive(Default)]
struct State {
    next: u64,
    /// Normal connections, by id.
    conns: HashMap<u64, Entry>,
    /// (idle since, id) of every normal connection with no request in flight.
    idle: BTreeSet<(u64, u64)>,
    reserve: usize,
}

struct Entry {
    busy: usize,
    since: u64,
    close: Arc<Notify>,
}

enum Admit {
    Normal(u64, Arc<Notify>),
    Reserve,
    Refuse,
}

impl Conns {
    fn admit(&self, max: usize) -> Admit {
        let mut st = self.state.lock().unwrap();
        if st.conns.len() >= max {
            // Take the place of the connection idle the longest; it closes (its entry goes when
            // it has).
            let Some((_, old)) = st.idle.pop_first() else {
                if st.reserve < RESERVE {
                    st.reserve += 1;
                    return Admit::Reserve;
                }
                return Admit::Refuse;
            };
            if let Some(e) = st.conns.get(&old) {
                e.close.notify_one();
            }
        }
        st.next += 1;
        let (id, close) = (st.next, Arc::new(Notify::new()));
        st.conns.insert(
            id,
            Entry {
                busy: 0,
                since: id,
                close: close.clone(),
            },
        );
        st.idle.insert((id, id));
        Admit::Normal(id, close)
    }

    /// A request starts on connection `id`: it is not idle until the guard is dropped (its
    /// response sent, or dropped).
    fn busy(self: &Arc<Self>, id: u64) -> Busy {
        let mut st = self.state.lock().unwrap();
        if let Some(e) = st.conns.get_mut(&id) {
            e.busy += 1;
            let since = e.since;
            st.idle.remove(&(since, id));
        }
        Busy(self.clone(), id)
    }

    fn end(&self, id: Option<u64>) {
        let mut st = self.state.lock().unwrap();
        match id {
            Some(id) => {
                if let Some(e) = st.conns.remove(&id) {
                    st.idle.remove(&(e.since, id));
                }
            }
            None => st.reserve -= 1,
        }
        if st.conns.is_empty() && st.reserve == 0 {
            self.gone.notify_waiters();
        }
    }

    fn is_empty(&self) -> bool {
        let st = self.state.lock().unwrap();
        st.conns.is_empty() && st.reserve == 0
    }
}

struct Busy(Arc<Conns>, u64);

impl Drop for Busy {
    fn drop(&mut self) {
        let mut st = self.0.state.lock().unwrap();
        st.next += 1;
        let next = st.next;
        if let Some(e) = st.conns.get_mut(&self.1) {
            e.busy -= 1;
            if e.busy == 0 {
                e.since = next;
                st.idle.insert((next, self.1));
            }
        }
    }
}

/// A response body that keeps its connection busy until it is sent (or dropped).
struct Tracked {
    body: Body,
    _busy: Option<Busy>,
}

impl http_body::Body for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// Whether a request's headers carry the owner's token (the server decides).
pub type IsOwner = Arc<dyn Fn(&axum::http::HeaderMap) -> bool + Send + Sync>;

/// What a reserve connection may ask: the health check, or anything with the owner token.
fn reserve_allows(is_owner: &IsOwner, req: &Request<Incoming>) -> bool {
    req.uri().path().trim_end_matches('/') == "/datanotes/health" || is_owner(req.headers())
}

fn busy_answer(max: usize) -> Response<Body> {
    let e = crate::error::Error::new(
        503,
        "busy",
        format!("the server holds its maximum of {max} connections, each with a request in flight"),
    )
    .hint("retry in a moment; DATANOTES_MAX_CONNECTIONS sets the maximum");
    let mut r = Response::new(Body::from(e.to_json().to_string()));
    *r.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
    r.headers_mut().insert(
        axum::http::header::CONTENT_TYPE,
        axum::http::HeaderValue::from_static("application/json"),
    );
    r
}

/// Serves `app` on `listener` until `closing` turns true; then connections are closed
/// gracefully (a request in flight finishes) and this answers when the last one has ended.
pub async fn serve(
    listener: tokio::net::TcpListener,
    app: Router,
    is_owner: IsOwner,
    limits: Limits,
    mut closing: tokio::sync::watch::Receiver<bool>,
) {
    let conns = Arc::new(Conns::default());
    let mut warned = None::<tokio::time::Instant>;
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = closing.wait_for(|c| *c) => break,
        };
        let (tcp, peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                // Out of file descriptors (or another passing failure): not a reason to spin.
                if warned.is_none_or(|t| t.elapsed() > Duration::from_secs(10)) {
                    tracing::warn!("accepting a connection failed: {e}");
                    warned = Some(tokio::time::Instant::now());
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        // Small writes go out at once (Nagle's algorithm would hold an SSE event, or the result
        // event after rmcp's priming event, until the client's delayed ACK: up to 40 ms).
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!("TCP_NODELAY: {e}");
        }
        let (id, close) = match conns.admit(limits.max) {
            Admit::Refuse => continue,
            Admit::Normal(id, close) => (Some(id), close),
            Admit::Reserve => (None, Arc::new(Notify::new())),
        };
        tokio::spawn(connection(
            tcp,
            peer,
            app.clone(),
            is_owner.clone(),
            conns.clone(),
            id,
            close,
            limits.clone(),
            closing.clone(),
        ));
    }
    // Stopping: every connection was told (through `closing`); wait for them to end.
    loop {
        let gone = conns.gone.notified();
        if conns.is_empty() {
            return;
        }
        gone.await;
    }
}

/// One connection: `id` is `None` for a reserve connection.
#[allow(clippy::too_many_arguments)]
async fn connection(
    tcp: tokio::net::TcpStream,
    peer: std::net::SocketAddr,
    app: Router,
    is_owner: IsOwner,
    conns: Arc<Conns>,
    id: Option<u64>,
    close: Arc<Notify>,
    limits: Limits,
    mut closing: tokio::sync::watch::Receiver<bool>,
) {
    let started = Arc::new(AtomicBool::new(false));
    let svc = {
        let (conns, started, max) = (conns.clone(), started.clone(), limits.max);
        hyper::service::service_fn(move |mut req: Request<Incoming>| {
            started.store(true, Ordering::Relaxed);
            // The client's address, for the bounds that count by it (axum's `ConnectInfo`).
            req.extensions_mut()
                .insert(axum::extract::ConnectInfo(peer));
            let busy = id.map(|id| conns.busy(id));
            let refused = id.is_none() && !reserve_allows(&is_owner, &req);
            let mut app = app.clone();
            async move {
                let resp = if refused {
                    busy_answer(max)
                } else {
                    use tower_service::Service;
                    match app.call(req).await {
                        Ok(r) => r,
                        Err(never) => match never {},
                    }
                };
                Ok::<_, std::convert::Infallible>(resp.map(|body| Tracked { body, _busy: busy }))
            }
        })
    };
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        // Runs while a connection waits for a request head: an idle connection is closed.
        .header_read_timeout(limits.idle.max(limits.header))
        // A reserve connection serves one request.
        .keep_alive(id.is_some());
    let conn = http
        .serve_connection(TokioIo::new(tcp), svc)
        .with_upgrades();
    let mut conn = std::pin::pin!(conn);
    let first = tokio::time::sleep(limits.header);
    let mut first = std::pin::pin!(first);
    let (mut shutting, mut first_over) = (false, false);
    loop {
        tokio::select! {
            r = conn.as_mut() => {
                if let Err(e) = r {
                    tracing::debug!("connection: {e}");
                }
                break;
            }
            // No first request head within `header`: closed (nothing is in flight). (A guard is
            // evaluated when the select starts, not when its branch fires: check again.)
            _ = first.as_mut(), if !first_over => {
                if !started.load(Ordering::Relaxed) {
                    break;
                }
                first_over = true;
            }
            _ = close.notified(), if !shutting => {
                shutting = true;
                conn.as_mut().graceful_shutdown();
            }
            _ = closing.wait_for(|c| *c), if !shutting => {
                shutting = true;
                conn.as_mut().graceful_shutdown();
            }
        }
    }
    conns.end(id);
}
