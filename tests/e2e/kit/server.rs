//! [`Server`]: the real server over a temporary folder, and the blocking HTTP calls the tests make
//! to it.

use super::process::{self, App, Launch};
use super::snapshot;
use super::sse::SseStream;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

/// A running `datanotes serve` over a folder, with its owner token and an HTTP client. Killed on
/// drop; [`Server::restart`] and [`Server::restart_killed`] start it again over the same folder,
/// with the same arguments and environment.
pub struct Server {
    /// The server process (`None` once the test stopped it).
    pub child: Option<Child>,
    /// The database folder (canonical).
    pub dir: PathBuf,
    tmp: Option<tempfile::TempDir>,
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    /// The owner token.
    pub token: String,
    /// A blocking client with a 60 s timeout.
    pub http: reqwest::blocking::Client,
    /// How it was started (arguments, environment), kept for restarts.
    launch: Launch,
}

impl Server {
    /// A server over a new, empty database.
    pub fn start() -> Server {
        Server::start_with_env(&[])
    }

    /// A server over the database in `dir` (created if needed).
    pub fn start_in(dir: &Path) -> Server {
        Server::start_with(dir, &[])
    }

    /// A server over `dir` with extra arguments (kept for restarts).
    pub fn start_with(dir: &Path, extra: &[&str]) -> Server {
        Server::start_opts(dir, extra, &[])
    }

    /// A server over a new, empty database, with environment variables (kept for restarts), e.g.
    /// the app timeouts `DATANOTES_APP_*_TIMEOUT_MS`.
    pub fn start_with_env(env: &[(&str, &str)]) -> Server {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("db");
        let mut s = Server::start_opts(&dir, &[], env);
        s.tmp = Some(tmp);
        s
    }

    /// A server over `dir` with extra arguments (`--listen ADDR` replaces `127.0.0.1:0`) and
    /// environment variables (both kept for restarts).
    pub fn start_opts(dir: &Path, extra: &[&str], env: &[(&str, &str)]) -> Server {
        Server::launch(Launch::new(dir).args(extra).envs(env), dir)
    }

    /// A server over a new, empty database, its stderr in `log` (its default log filter), with
    /// environment variables.
    pub fn start_logging(log: &Path, env: &[(&str, &str)]) -> Server {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("db");
        let mut s = Server::launch(Launch::new(&dir).envs(env).logs_to(log), &dir);
        s.tmp = Some(tmp);
        s
    }

    /// A server started as `launch` says, over `dir`.
    pub fn launch(launch: Launch, dir: &Path) -> Server {
        let started = launch.spawn();
        Server {
            child: Some(started.child),
            dir: dir.canonicalize().unwrap(),
            tmp: None,
            url: started.url,
            token: started.token,
            http: reqwest::blocking::Client::builder()
                .timeout(Duration::from_secs(60))
                .build()
                .unwrap(),
            launch,
        }
    }

    /// Starts a new server over the same folder with the same arguments and environment.
    fn start_again(&mut self) -> Server {
        let tmp = self.tmp.take();
        let mut s = Server::launch(self.launch.clone(), &self.dir.clone());
        s.tmp = tmp;
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

    /// POST a JSON body to a path with an optional token; answers (status, JSON body).
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
            let committed = super::poll(Duration::from_secs(10), Duration::from_millis(1), || {
                (self.seq() > before).then_some(())
            });
            assert!(
                committed.is_some(),
                "a recorded tool call never committed (the journal is at seq {}, was {before})",
                self.seq()
            );
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

    /// GET a path without a token; answers (status, JSON body or null).
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
            Some(c) => process::state(c.id()),
        }
    }

    /// SIGKILL, no goodbye.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            process::kill(&mut c);
        }
    }

    /// SIGTERM and wait for a clean exit.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            process::stop(&mut c, Duration::from_secs(20));
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

impl Server {
    /// A memory line of the server's `/proc/<pid>/status` (`VmRSS`, `VmHWM`), in whole MiB.
    pub fn mib(&self, key: &str) -> u64 {
        let pid = self.child.as_ref().expect("a running server").id();
        process::status_mib(&pid.to_string(), key) as u64
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
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
        super::assert_error_shape(&e);
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

// ---- apps ----

/// Creates an app entry as the owner (`apps/create`, which must succeed); answers its token.
pub fn create_app(s: &Server, body: Value) -> String {
    let v = s.ok_route("apps/create", body);
    v["token"].as_str().unwrap().to_string()
}

impl App {
    /// Starts the `remote_app` example as the app `name` of this server, with its token. The
    /// app registers its own address, on 127.0.0.1: the owner allows it first
    /// (`self_url_private`).
    pub fn start(s: &Server, name: &str, token: &str, extra: &[&str]) -> App {
        s.ok_route(
            "apps/update",
            serde_json::json!({"name": name, "self_url_private": true}),
        );
        App::spawn(&s.url, name, token, extra, false)
    }
}
