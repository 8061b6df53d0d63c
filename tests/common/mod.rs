//! The test harness: starts the real `datanotes` binary on 127.0.0.1 over a temporary folder and
//! talks to it over HTTP, like any client would.
#![allow(dead_code)]

use serde_json::Value;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Server {
    pub child: Option<Child>,
    pub dir: PathBuf,
    _tmp: Option<tempfile::TempDir>,
    pub url: String,
    pub token: String,
    pub http: reqwest::blocking::Client,
    /// Extra command-line arguments and environment variables, kept for restarts.
    extra: Vec<String>,
    pub env: Vec<(String, String)>,
}

pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_datanotes")
}

impl Server {
    /// A server over a new, empty database.
    pub fn start() -> Server {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("db");
        let mut s = Server::start_in(&dir);
        s._tmp = Some(tmp);
        s
    }

    /// A server over the database in `dir` (created if needed).
    pub fn start_in(dir: &Path) -> Server {
        Server::start_with(dir, &[])
    }

    pub fn start_with(dir: &Path, extra: &[&str]) -> Server {
        Server::start_opts(dir, extra, &[])
    }

    /// A server over a new, empty database, with environment variables (kept for restarts), e.g.
    /// the app timeouts `DATANOTES_APP_*_TIMEOUT_MS`.
    pub fn start_with_env(env: &[(&str, &str)]) -> Server {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("db");
        let mut s = Server::start_opts(&dir, &[], env);
        s._tmp = Some(tmp);
        s
    }

    /// A server over `dir` with extra arguments (`--listen ADDR` replaces `127.0.0.1:0`) and
    /// environment variables (both kept for restarts).
    pub fn start_opts(dir: &Path, extra: &[&str], env: &[(&str, &str)]) -> Server {
        let listen: &[&str] = if extra.contains(&"--listen") {
            &[]
        } else {
            &["--listen", "127.0.0.1:0"]
        };
        let mut child = Command::new(bin())
            .args(["serve", "--database"])
            .arg(dir)
            .args(listen)
            .args(extra)
            .env("DATANOTES_LOG", "warn")
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start datanotes");
        let stdout = child.stdout.take().unwrap();
        let mut lines = BufReader::new(stdout).lines();
        let url = loop {
            let line = lines
                .next()
                .expect("server exited before listening")
                .expect("read stdout");
            if let Some(rest) = line.strip_prefix("datanotes serving ") {
                break rest.rsplit(" on ").next().unwrap().trim().to_string();
            }
        };
        // Keep draining stdout so the server never blocks on it.
        std::thread::spawn(move || for _ in lines {});
        let token = std::fs::read_to_string(dir.join(".datanotes/owner-token"))
            .unwrap()
            .trim()
            .to_string();
        Server {
            child: Some(child),
            dir: dir.canonicalize().unwrap(),
            _tmp: None,
            url,
            token,
            http: reqwest::blocking::Client::builder()
                .timeout(Duration::from_secs(60))
                .build()
                .unwrap(),
            extra: extra.iter().map(|s| s.to_string()).collect(),
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    /// Starts a new server over the same folder with the same arguments and environment.
    fn start_again(&mut self) -> Server {
        let tmp = self._tmp.take();
        let extra: Vec<&str> = self.extra.iter().map(String::as_str).collect();
        let env: Vec<(&str, &str)> = self
            .env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let mut s = Server::start_opts(&self.dir, &extra, &env);
        s._tmp = tmp;
        s
    }

    /// POST to a path with an optional token and extra headers; answers (status, JSON body).
    pub fn post_raw(
        &self,
        path: &str,
        token: Option<&str>,
        headers: &[(&str, &str)],
        body: Vec<u8>,
    ) -> (u16, Value) {
        let mut req = self.http.post(format!("{}{}", self.url, path)).body(body);
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let resp = match req.send() {
            Ok(r) => r,
            Err(e) => panic!("request {path}: {e:?}; server: {}", self.state()),
        };
        let status = resp.status().as_u16();
        let text = resp.text().unwrap_or_default();
        let v = serde_json::from_str(&text).unwrap_or(Value::String(text));
        (status, v)
    }

    pub fn post(&self, path: &str, token: Option<&str>, body: &Value) -> (u16, Value) {
        self.post_raw(path, token, &[], serde_json::to_vec(body).unwrap())
    }

    /// Runs an operation (or route, e.g. `apps/get`) as the holder of `token` (None: no token),
    /// with extra headers; answers (status, JSON body).
    pub fn call_as(
        &self,
        token: Option<&str>,
        op: &str,
        args: &Value,
        headers: &[(&str, &str)],
    ) -> (u16, Value) {
        // A recorded tool call is committed after its answer (with the writer's next batch):
        // wait until the journal holds it, as the tests read it next.
        let before = (op == "tool-calls/record").then(|| self.seq());
        let r = self.post_raw(
            &format!("/datanotes/{op}/"),
            token,
            headers,
            serde_json::to_vec(args).unwrap(),
        );
        if let Some(before) = before.filter(|_| r.0 == 200) {
            let deadline = Instant::now() + Duration::from_secs(10);
            while self.seq() <= before {
                assert!(
                    Instant::now() < deadline,
                    "a recorded tool call never committed"
                );
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        r
    }

    /// Runs a route (e.g. `apps/create`, `changes`) with the owner token; it must succeed.
    pub fn ok_route(&self, route: &str, args: Value) -> Value {
        let (s, v) = self.call_as(Some(&self.token), route, &args, &[]);
        assert_eq!(s, 200, "{route} {args} answered {s}: {v}");
        v
    }

    /// The journal's last seq, as the health route reports it.
    pub fn seq(&self) -> i64 {
        let (s, v) = self.get("/datanotes/health");
        assert_eq!(s, 200, "health: {v}");
        v["seq"].as_i64().expect("health seq")
    }

    /// Opens `GET /datanotes/changes/stream?<query>` with a token and extra headers; answers the
    /// status and, when 200, a reader of its events (any other status: the JSON body as error).
    pub fn sse(
        &self,
        query: &str,
        token: Option<&str>,
        headers: &[(&str, &str)],
    ) -> Result<SseStream, (u16, Value)> {
        let client = reqwest::blocking::Client::builder()
            .timeout(None)
            .build()
            .unwrap();
        let mut req = client.get(format!("{}/datanotes/changes/stream?{query}", self.url));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let resp = req.send().expect("sse request");
        let status = resp.status().as_u16();
        if status != 200 {
            let text = resp.text().unwrap_or_default();
            return Err((
                status,
                serde_json::from_str(&text).unwrap_or(Value::String(text)),
            ));
        }
        Ok(SseStream::new(resp))
    }

    /// Runs an operation with the owner token.
    pub fn call(&self, op: &str, args: Value) -> (u16, Value) {
        self.post(
            &format!("/datanotes/{op}/"),
            Some(&self.token.clone()),
            &args,
        )
    }

    /// Runs an operation that must succeed; answers its JSON.
    pub fn ok(&self, op: &str, args: Value) -> Value {
        let (s, v) = self.call(op, args.clone());
        assert_eq!(s, 200, "{op} {args} answered {s}: {v}");
        v
    }

    /// Runs an operation that must be refused with this status; answers the error object.
    pub fn refused(&self, op: &str, args: Value, status: u16) -> Value {
        let (s, v) = self.call(op, args.clone());
        assert_eq!(s, status, "{op} {args} answered {s}: {v}");
        assert!(
            v["error"]["code"].is_string() && v["error"]["message"].is_string(),
            "error shape: {v}"
        );
        v["error"].clone()
    }

    pub fn get(&self, path: &str) -> (u16, Value) {
        let resp = self
            .http
            .get(format!("{}{}", self.url, path))
            .send()
            .expect("request");
        let status = resp.status().as_u16();
        (status, resp.json().unwrap_or(Value::Null))
    }

    /// The server process's state, for failure messages ("running", "exited", ...).
    pub fn state(&self) -> String {
        match &self.child {
            None => "stopped by the test".into(),
            Some(c) => match std::fs::read_to_string(format!("/proc/{}/stat", c.id())) {
                Ok(st) => match st
                    .rsplit(')')
                    .next()
                    .and_then(|r| r.split_whitespace().next())
                {
                    Some("Z") => "exited (zombie: it died or was killed)".into(),
                    Some(x) => format!("process state {x}"),
                    None => st,
                },
                Err(e) => format!("no process: {e}"),
            },
        }
    }

    /// SIGKILL, no goodbye.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERM and wait for a clean exit.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            unsafe { libc_kill(c.id() as i32, 15) };
            let deadline = Instant::now() + Duration::from_secs(20);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = c.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Stops and starts again over the same folder (the temp folder stays alive).
    pub fn restart(mut self) -> Server {
        self.stop();
        self.start_again()
    }

    /// Starts again after a kill over the same folder.
    pub fn restart_killed(mut self) -> Server {
        self.kill();
        self.start_again()
    }
}

unsafe extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
}

/// Sends a signal to a process (9: SIGKILL, 15: SIGTERM).
pub fn signal(pid: u32, sig: i32) {
    unsafe { libc_kill(pid as i32, sig) };
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// One Server-Sent Event.
#[derive(Debug, Clone)]
pub struct SseEvent {
    pub id: Option<String>,
    pub data: String,
}

impl SseEvent {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.data)
            .unwrap_or_else(|e| panic!("event data {:?}: {e}", self.data))
    }
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
    fn new(resp: reqwest::blocking::Response) -> SseStream {
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

/// Every file of the database except the engine's own `.datanotes/`, with its bytes.
pub fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    fn walk(root: &Path, d: &Path, out: &mut BTreeMap<PathBuf, Vec<u8>>) {
        for e in std::fs::read_dir(d).unwrap().flatten() {
            let p = e.path();
            if p.file_name().is_some_and(|n| n == ".datanotes") {
                continue;
            }
            if p.is_dir() {
                walk(root, &p, out);
            } else {
                out.insert(
                    p.strip_prefix(root).unwrap().to_path_buf(),
                    std::fs::read(&p).unwrap(),
                );
            }
        }
    }
    walk(dir, dir, &mut out);
    out
}

/// Waits until `f` holds (for things the server does in the background, like the file watcher).
pub fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if f() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("timed out waiting for: {what}");
}

// ---- helpers shared by the engine tests ----

impl Server {
    /// Runs an operation with the owner token and extra headers (e.g. the actor header).
    pub fn call_with(&self, op: &str, headers: &[(&str, &str)], args: Value) -> (u16, Value) {
        self.post_raw(
            &format!("/datanotes/{op}/"),
            Some(&self.token.clone()),
            headers,
            serde_json::to_vec(&args).unwrap(),
        )
    }

    /// The journal, newest first, filtered by `args`.
    pub fn migrations(&self, args: Value) -> Vec<Value> {
        self.ok("list_migrations", args)["migrations"]
            .as_array()
            .expect("migrations")
            .clone()
    }

    /// The ids answered by a select, in order.
    pub fn ids(&self, args: Value) -> Vec<String> {
        self.ok("select_rows", args)["rows"]
            .as_array()
            .expect("rows")
            .iter()
            .map(|r| r["id"].as_str().unwrap().to_string())
            .collect()
    }

    /// Answers whether a row is served (get_row 200) or not (404); anything else fails.
    pub fn has_row(&self, table: &str, id: &str) -> bool {
        let (st, v) = self.call("get_row", serde_json::json!({"table": table, "id": id}));
        assert!(st == 200 || st == 404, "get_row {table} {id}: {st} {v}");
        st == 200
    }

    /// The path of a row file.
    pub fn row_path(&self, table: &str, id: &str) -> PathBuf {
        let mut p = self.dir.clone();
        for part in table.split('.') {
            p.push(part);
        }
        p.join(format!("{id}.md"))
    }

    /// Asserts a call is refused with `status` and the JSON error shape, and that neither the
    /// files nor the journal changed. Answers the error object.
    pub fn refused_nochange(&self, op: &str, args: Value, status: u16) -> Value {
        let files = snapshot(&self.dir);
        let seq = self.seq();
        let e = self.refused(op, args.clone(), status);
        assert_error_shape(&e);
        assert!(
            snapshot(&self.dir) == files,
            "{op} {args} was refused but changed the files"
        );
        assert_eq!(self.seq(), seq, "{op} {args} was refused but journaled");
        e
    }

    /// Like `refused_nochange`, and the error names `column` (when given) and `rule`.
    pub fn refused_unchanged(
        &self,
        op: &str,
        args: Value,
        status: u16,
        column: Option<&str>,
        rule: &str,
    ) -> Value {
        let e = self.refused_nochange(op, args.clone(), status);
        if let Some(c) = column {
            assert_eq!(e["column"], c, "{op} {args}: wrong column in {e}");
        }
        assert_eq!(e["rule"], rule, "{op} {args}: wrong rule in {e}");
        e
    }
}

/// An error object has a code, a message and, when present, string table/column/rule/hint.
pub fn assert_error_shape(e: &Value) {
    assert!(e["code"].is_string(), "error without code: {e}");
    assert!(e["message"].is_string(), "error without message: {e}");
    for k in ["table", "column", "rule", "hint"] {
        assert!(
            e.get(k).is_none_or(Value::is_string),
            "error field {k} is not a string: {e}"
        );
    }
    let allowed = ["code", "message", "table", "column", "rule", "hint"];
    for k in e.as_object().expect("error object").keys() {
        assert!(
            allowed.contains(&k.as_str()),
            "unexpected error field {k}: {e}"
        );
    }
}

/// The table most tests use, with one column of every type, and the table it links to.
pub const TASKS: &str = "work.crm.tasks";
pub const PEOPLE: &str = "work.crm.people";

pub fn create_tasks(s: &Server) {
    s.ok(
        "create_table",
        serde_json::json!({
            "table": PEOPLE,
            "description": "People",
            "columns": {
                "name": {"type": "text", "required": true},
                "email": {"type": "text", "unique": true, "pattern": "^[^@ ]+@[^@ ]+$"}
            }
        }),
    );
    s.ok(
        "create_table",
        serde_json::json!({
            "table": TASKS,
            "description": "Things to do",
            "columns": {
                "title": {"type": "text", "required": true, "max": 80},
                "status": {"type": "enum", "values": ["todo", "doing", "done"], "default": "todo"},
                "estimate": {"type": "integer", "min": 0, "max": 100},
                "score": {"type": "number", "min": -1.5, "max": 99.5},
                "done": {"type": "boolean"},
                "due": {"type": "date", "min": "2000-01-01", "max": "2099-12-31"},
                "at": {"type": "datetime"},
                "tags": {"type": "list", "max": 3, "pattern": "^[a-z]+$"},
                "owner": {"type": "link", "table": PEOPLE},
                "code": {"type": "text", "unique": true, "pattern": "^[A-Z]{2}-[0-9]+$"}
            }
        }),
    );
    for (id, name) in [("ada", "Ada Lovelace"), ("alan", "Alan Turing")] {
        s.ok(
            "insert_row",
            serde_json::json!({"table": PEOPLE, "id": id, "values": {"name": name}}),
        );
    }
}

/// Writes a file the way a person would (not atomically, no fsync).
pub fn write_by_hand(path: &Path, text: &str) {
    if let Some(d) = path.parent() {
        std::fs::create_dir_all(d).unwrap();
    }
    std::fs::write(path, text).unwrap();
}

/// Deletes the index files (`.datanotes/index.db*`) of a stopped server's folder; answers how many.
pub fn remove_index(dir: &Path) -> usize {
    let mut n = 0;
    for e in std::fs::read_dir(dir.join(".datanotes")).unwrap().flatten() {
        if e.file_name().to_string_lossy().starts_with("index.db") {
            std::fs::remove_file(e.path()).unwrap();
            n += 1;
        }
    }
    n
}
