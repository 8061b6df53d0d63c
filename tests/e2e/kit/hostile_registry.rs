//! [`HostileRegistry`]: a tiny OCI registry written in the test (plain HTTP on 127.0.0.1, a
//! thread per connection, one request per connection), which serves one WASM artifact in the
//! CNCF Wasm layout under any repository and tag, honestly or not (a [`Mode`]): a size that
//! lies, a blob that never ends or is huge, a registry that hangs, a redirect, bytes that are
//! no component, a manifest that is no JSON, a tag that moves. It counts what it served, so a
//! test can check that a client stopped reading early.
//!
//! [`FileServer`]: the same plumbing serving files and redirects by path (the `http://` URL
//! sources of apps, and the target of a redirect).

use sha2::Digest as _;
use std::collections::BTreeMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The media types of the CNCF Wasm OCI artifact layout.
pub const MANIFEST_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";
/// The config's media type.
pub const CONFIG_TYPE: &str = "application/vnd.wasm.config.v0+json";
/// The component layer's media type.
pub const LAYER_TYPE: &str = "application/wasm";

/// The size an [`Mode::EndlessBlob`] manifest declares: 2 MiB (well within any bound).
pub const ENDLESS_DECLARED: u64 = 2 << 20;
/// The size a [`Mode::HugeBlob`] manifest declares: 10 GiB.
pub const HUGE_DECLARED: u64 = 10 << 30;

/// What the registry does.
pub enum Mode {
    /// Serves this component correctly.
    Honest(Vec<u8>),
    /// The manifest declares a 1,000-byte layer (with the right digest); the blob served is the
    /// real, larger bytes.
    LyingSize(Vec<u8>),
    /// The manifest declares [`ENDLESS_DECLARED`] bytes; the blob streams bytes forever
    /// (chunked), until the client hangs up.
    EndlessBlob,
    /// The manifest declares [`HUGE_DECLARED`] bytes; the blob (with that length) streams until
    /// the client hangs up.
    HugeBlob,
    /// Accepts connections and never answers.
    Hang,
    /// Serves this component's manifest; its blob is a 302 to the URL.
    RedirectBlob(Vec<u8>, String),
    /// A layer of 4 KiB of random bytes, with correct sizes and digests.
    NotAComponent,
    /// A manifest that is not JSON (its digest matches its bytes).
    MalformedManifest,
    /// The tag names the first component until [`HostileRegistry::move_tag`], then the second.
    MovingTag(Vec<u8>, Vec<u8>),
    /// A `HEAD` of the manifest answers a digest; its `GET` streams bytes forever (chunked),
    /// counted as [`HostileRegistry::blob_bytes_sent`].
    EndlessManifest,
    /// `/v2/` answers 401 with a challenge whose sign-in `realm` is this URL.
    SignInAt(String),
    /// Serves this component; `/v2/` answers 401 with a challenge whose `realm` is the
    /// registry's own `/token` (which answers a token) the first time, and this URL after.
    SignInTwice(Vec<u8>, String),
}

/// A blob's answer.
enum Blob {
    Bytes(Vec<u8>),
    Endless,
    Huge,
    Redirect(String),
}

/// A manifest, its digest, and the blobs it names.
struct Artifact {
    manifest: Vec<u8>,
    digest: String,
    blobs: Vec<(String, Blob)>,
}

/// `sha256:<hex>` of bytes.
pub fn digest_of(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(sha2::Sha256::digest(bytes)))
}

/// The manifest of a component (declared `size`, `digest`) with a small config.
fn artifact(
    layer_digest: &str,
    size: u64,
    blob: Blob,
    annotations: &[(String, String)],
) -> Artifact {
    let config = serde_json::to_vec(&serde_json::json!({
        "architecture": "wasm", "os": "wasip2", "layerDigests": [layer_digest]
    }))
    .unwrap();
    let config_digest = digest_of(&config);
    let mut manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": MANIFEST_TYPE,
        "config": {"mediaType": CONFIG_TYPE, "digest": config_digest, "size": config.len()},
        "layers": [{"mediaType": LAYER_TYPE, "digest": layer_digest, "size": size}],
    });
    if !annotations.is_empty() {
        let a: serde_json::Map<String, serde_json::Value> = annotations
            .iter()
            .map(|(k, v)| (k.clone(), v.clone().into()))
            .collect();
        manifest["annotations"] = a.into();
    }
    let manifest = serde_json::to_vec(&manifest).unwrap();
    Artifact {
        digest: digest_of(&manifest),
        manifest,
        blobs: vec![
            (config_digest, Blob::Bytes(config)),
            (layer_digest.to_string(), blob),
        ],
    }
}

fn honest(bytes: &[u8], annotations: &[(String, String)]) -> Artifact {
    artifact(
        &digest_of(bytes),
        bytes.len() as u64,
        Blob::Bytes(bytes.to_vec()),
        annotations,
    )
}

/// What the connections share.
struct State {
    /// The artifacts, the current one (the tag's) first.
    artifacts: Mutex<Vec<Artifact>>,
    /// The second artifact of a moving tag, taken by `move_tag`.
    next: Mutex<Option<Artifact>>,
    hang: bool,
    endless_manifest: bool,
    sign_in: Option<String>,
    /// The realm of [`Mode::SignInTwice`]'s later challenges.
    second_realm: Option<String>,
    challenges: AtomicU64,
    port: AtomicU64,
    stop: Arc<AtomicBool>,
    requests: AtomicU64,
    manifest_gets: AtomicU64,
    blob_gets: AtomicU64,
    blob_bytes: AtomicU64,
    streaming: AtomicU64,
}

/// The registry (stopped on drop).
pub struct HostileRegistry {
    port: u16,
    state: Arc<State>,
}

impl HostileRegistry {
    /// Starts it on a free port of 127.0.0.1.
    pub fn start(mode: Mode) -> HostileRegistry {
        HostileRegistry::start_annotated(mode, &[])
    }

    /// Starts it with these manifest annotations (e.g. `dev.datanotes.app`).
    pub fn start_annotated(mode: Mode, annotations: &[(&str, &str)]) -> HostileRegistry {
        let ann: Vec<(String, String)> = annotations
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let mut next = None;
        let mut hang = false;
        let mut endless_manifest = false;
        let mut sign_in = None;
        let mut second_realm = None;
        let artifacts = match mode {
            Mode::Honest(b) => vec![honest(&b, &ann)],
            Mode::LyingSize(b) => vec![artifact(&digest_of(&b), 1000, Blob::Bytes(b), &ann)],
            Mode::EndlessBlob => vec![artifact(
                &digest_of(b"endless"),
                ENDLESS_DECLARED,
                Blob::Endless,
                &ann,
            )],
            Mode::HugeBlob => vec![artifact(
                &digest_of(b"huge"),
                HUGE_DECLARED,
                Blob::Huge,
                &ann,
            )],
            Mode::Hang => {
                hang = true;
                vec![]
            }
            Mode::RedirectBlob(b, url) => {
                vec![artifact(
                    &digest_of(&b),
                    b.len() as u64,
                    Blob::Redirect(url),
                    &ann,
                )]
            }
            Mode::NotAComponent => {
                let junk: Vec<u8> = (0..4096).map(|_| rand::random::<u8>()).collect();
                vec![honest(&junk, &ann)]
            }
            Mode::MalformedManifest => {
                let manifest = b"{\"schemaVersion\": 2, \"layers\": [{\"mediaType\": ".to_vec();
                vec![Artifact {
                    digest: digest_of(&manifest),
                    manifest,
                    blobs: vec![],
                }]
            }
            Mode::MovingTag(a, b) => {
                next = Some(honest(&b, &ann));
                vec![honest(&a, &ann)]
            }
            Mode::SignInAt(realm) => {
                sign_in = Some(realm);
                vec![]
            }
            Mode::SignInTwice(b, realm) => {
                second_realm = Some(realm);
                vec![honest(&b, &ann)]
            }
            Mode::EndlessManifest => {
                endless_manifest = true;
                vec![Artifact {
                    digest: digest_of(b"an endless manifest"),
                    manifest: b"{}".to_vec(),
                    blobs: vec![],
                }]
            }
        };
        let state = Arc::new(State {
            artifacts: Mutex::new(artifacts),
            next: Mutex::new(next),
            hang,
            endless_manifest,
            sign_in,
            second_realm,
            challenges: AtomicU64::new(0),
            port: AtomicU64::new(0),
            stop: Arc::default(),
            requests: AtomicU64::new(0),
            manifest_gets: AtomicU64::new(0),
            blob_gets: AtomicU64::new(0),
            blob_bytes: AtomicU64::new(0),
            streaming: AtomicU64::new(0),
        });
        let st = state.clone();
        let port = listen(state.stop.clone(), move |c, method, path| {
            registry_answer(&st, c, method, path)
        });
        state.port.store(port.into(), SeqCst);
        HostileRegistry { port, state }
    }

    /// `127.0.0.1:PORT`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// `oci://127.0.0.1:PORT/<repo_tag>`.
    pub fn reference(&self, repo_tag: &str) -> String {
        format!("oci://{}/{repo_tag}", self.addr())
    }

    /// The digest the tag names now (`None` in the modes that serve no manifest).
    pub fn digest(&self) -> Option<String> {
        self.state
            .artifacts
            .lock()
            .unwrap()
            .first()
            .map(|a| a.digest.clone())
    }

    /// A moving tag now names its second component.
    pub fn move_tag(&self) {
        let b = self
            .state
            .next
            .lock()
            .unwrap()
            .take()
            .expect("a moving tag, not moved yet");
        self.state.artifacts.lock().unwrap().insert(0, b);
    }

    /// Requests received (every connection that sent a request head).
    pub fn requests(&self) -> u64 {
        self.state.requests.load(SeqCst)
    }

    /// The `/v2/` challenges sent ([`Mode::SignInTwice`]).
    pub fn challenges(&self) -> u64 {
        self.state.challenges.load(SeqCst)
    }

    /// `GET` of a manifest.
    pub fn manifest_gets(&self) -> u64 {
        self.state.manifest_gets.load(SeqCst)
    }

    /// `GET` of a blob.
    pub fn blob_gets(&self) -> u64 {
        self.state.blob_gets.load(SeqCst)
    }

    /// The bytes of blob bodies written to clients so far.
    pub fn blob_bytes_sent(&self) -> u64 {
        self.state.blob_bytes.load(SeqCst)
    }

    /// Blob bodies being written now (an endless or huge one whose client has not hung up).
    pub fn streaming(&self) -> u64 {
        self.state.streaming.load(SeqCst)
    }
}

impl Drop for HostileRegistry {
    fn drop(&mut self) {
        shut(&self.state.stop, self.port);
    }
}

fn registry_answer(st: &State, c: &mut TcpStream, method: &str, path: &str) {
    st.requests.fetch_add(1, SeqCst);
    if st.hang {
        // Hangs until the registry is dropped (a day at most: longer than any test).
        let day = Duration::from_secs(86_400);
        super::poll(day, Duration::from_millis(50), || {
            st.stop.load(SeqCst).then_some(())
        });
        return;
    }
    if let Some(realm) = &st.sign_in {
        return sign_in(c, method, realm, "hostile");
    }
    if let Some(second) = &st.second_realm {
        let json = ("content-type", "application/json");
        if path.starts_with("/token") {
            return respond(c, method, 200, &[json], br#"{"token": "t"}"#);
        }
        if path == "/v2/" || path == "/v2" {
            let realm = match st.challenges.fetch_add(1, SeqCst) {
                0 => format!("http://127.0.0.1:{}/token", st.port.load(SeqCst)),
                _ => second.clone(),
            };
            return sign_in(c, method, &realm, "twice");
        }
    }
    if path == "/v2/" || path == "/v2" {
        return respond(
            c,
            method,
            200,
            &[("content-type", "application/json")],
            b"{}",
        );
    }
    let Some(rest) = path.strip_prefix("/v2/") else {
        return not_found(c, method, "NAME_UNKNOWN");
    };
    if let Some((_repo, reference)) = rest.rsplit_once("/manifests/") {
        if method == "GET" {
            st.manifest_gets.fetch_add(1, SeqCst);
        }
        let arts = st.artifacts.lock().unwrap();
        let found = if reference.starts_with("sha256:") {
            arts.iter().find(|a| a.digest == reference)
        } else {
            arts.first()
        };
        let Some(a) = found else {
            drop(arts);
            return not_found(c, method, "MANIFEST_UNKNOWN");
        };
        let (body, digest) = (a.manifest.clone(), a.digest.clone());
        drop(arts);
        if st.endless_manifest && method == "GET" {
            let chunked = [
                ("content-type", MANIFEST_TYPE),
                ("docker-content-digest", digest.as_str()),
                ("transfer-encoding", "chunked"),
            ];
            return stream_forever(st, c, head(200, &chunked, None), true);
        }
        return respond(
            c,
            method,
            200,
            &[
                ("content-type", MANIFEST_TYPE),
                ("docker-content-digest", &digest),
            ],
            &body,
        );
    }
    if let Some((_repo, digest)) = rest.rsplit_once("/blobs/") {
        if method == "GET" {
            st.blob_gets.fetch_add(1, SeqCst);
        }
        let arts = st.artifacts.lock().unwrap();
        let blob = arts
            .iter()
            .flat_map(|a| a.blobs.iter())
            .find(|(d, _)| d == digest)
            .map(|(_, b)| match b {
                Blob::Bytes(v) => Blob::Bytes(v.clone()),
                Blob::Endless => Blob::Endless,
                Blob::Huge => Blob::Huge,
                Blob::Redirect(u) => Blob::Redirect(u.clone()),
            });
        drop(arts);
        let digest_h = ("docker-content-digest", digest);
        let octets = ("content-type", "application/octet-stream");
        match blob {
            None => not_found(c, method, "BLOB_UNKNOWN"),
            Some(Blob::Redirect(url)) => {
                respond(c, method, 302, &[("location", &url)], b"");
            }
            Some(Blob::Bytes(v)) => {
                let head = head(200, &[octets, digest_h], Some(v.len() as u64));
                if send(c, head.as_bytes(), &st.stop) && method == "GET" && send(c, &v, &st.stop) {
                    st.blob_bytes.fetch_add(v.len() as u64, SeqCst);
                }
            }
            Some(blob @ (Blob::Endless | Blob::Huge)) => {
                let endless = matches!(blob, Blob::Endless);
                let head = if endless {
                    head(
                        200,
                        &[octets, digest_h, ("transfer-encoding", "chunked")],
                        None,
                    )
                } else {
                    head(200, &[octets, digest_h], Some(HUGE_DECLARED))
                };
                if method == "GET" {
                    stream_forever(st, c, head, endless);
                }
            }
        }
        return;
    }
    not_found(c, method, "UNSUPPORTED")
}

/// Sends `head`, then bytes until the client hangs up: chunked, or plain (under a length the
/// head declared), counted in `blob_bytes` while `streaming`.
fn stream_forever(st: &State, c: &mut TcpStream, head: String, chunked: bool) {
    if !send(c, head.as_bytes(), &st.stop) {
        return;
    }
    st.streaming.fetch_add(1, SeqCst);
    let chunk = vec![b'x'; 64 << 10];
    let mut framed = format!("{:x}\r\n", chunk.len()).into_bytes();
    framed.extend_from_slice(&chunk);
    framed.extend_from_slice(b"\r\n");
    let out = if chunked { &framed } else { &chunk };
    while send(c, out, &st.stop) {
        st.blob_bytes.fetch_add(chunk.len() as u64, SeqCst);
    }
    st.streaming.fetch_sub(1, SeqCst);
}

fn not_found(c: &mut TcpStream, method: &str, code: &str) {
    let body = format!("{{\"errors\":[{{\"code\":\"{code}\",\"message\":\"not here\"}}]}}");
    respond(
        c,
        method,
        404,
        &[("content-type", "application/json")],
        body.as_bytes(),
    );
}

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

// ---- the HTTP plumbing ----

/// Accepts connections on a free port of 127.0.0.1, each on its own thread: reads one request
/// head and hands (method, path) to `answer`, then closes. Answers the port.
fn listen(
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
fn shut(flag: &AtomicBool, port: u16) {
    flag.store(true, SeqCst);
    let _ = TcpStream::connect(("127.0.0.1", port));
}

fn head(status: u16, headers: &[(&str, &str)], len: Option<u64>) -> String {
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
fn sign_in(c: &mut TcpStream, method: &str, realm: &str, service: &str) {
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

fn respond(c: &mut TcpStream, method: &str, status: u16, headers: &[(&str, &str)], body: &[u8]) {
    let never = AtomicBool::new(false);
    let h = head(status, headers, Some(body.len() as u64));
    if send(c, h.as_bytes(), &never) && method != "HEAD" {
        send(c, body, &never);
    }
}

/// Writes all of `buf`, waiting while the client does not read (until `stop`); false when the
/// client hung up or the server stops.
fn send(c: &mut TcpStream, mut buf: &[u8], stop: &AtomicBool) -> bool {
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
