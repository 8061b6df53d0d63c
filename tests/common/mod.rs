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

    /// A server over a new, empty database, with extra environment variables (e.g. the app
    /// timeouts `DATANOTES_APP_*_TIMEOUT_MS`).
    pub fn start_env(env: &[(&str, &str)]) -> Server {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("db");
        let mut s = Server::start_opts(&dir, &[], env);
        s._tmp = Some(tmp);
        s
    }

    /// A server over `dir` with extra arguments (`--listen ADDR` replaces `127.0.0.1:0`) and
    /// environment variables.
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
        }
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
        let resp = req.send().expect("request");
        let status = resp.status().as_u16();
        let text = resp.text().unwrap_or_default();
        let v = serde_json::from_str(&text).unwrap_or(Value::String(text));
        (status, v)
    }

    pub fn post(&self, path: &str, token: Option<&str>, body: &Value) -> (u16, Value) {
        self.post_raw(path, token, &[], serde_json::to_vec(body).unwrap())
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
        let tmp = self._tmp.take();
        let mut s = Server::start_in(&self.dir);
        s._tmp = tmp;
        s
    }

    /// Starts again after a kill over the same folder.
    pub fn restart_killed(mut self) -> Server {
        self.kill();
        let tmp = self._tmp.take();
        let mut s = Server::start_in(&self.dir);
        s._tmp = tmp;
        s
    }
}

unsafe extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
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
