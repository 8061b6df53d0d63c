//! The bench's server (started by the kit's [`Launch`], timed, with its CPU and memory figures),
//! the shared [`Bench`], its clients and data generator.

use super::*;
use crate::kit::Launch;
use crate::kit::process;

/// A running server over the bench's database.
pub(crate) struct Server {
    pub(crate) child: Child,
    pub(crate) url: String,
    pub(crate) token: String,
    pub(crate) http: reqwest::blocking::Client,
    /// From spawn until `/datanotes/health` answered.
    pub(crate) started_in: Duration,
}

/// A blocking client for the bench's calls (long timeout, a few idle connections kept).
pub(crate) fn client() -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(300))
        .pool_max_idle_per_host(4)
        .build()
        .expect("http client")
}

impl Server {
    /// Spawns the server and waits until it answers `/datanotes/health`.
    pub(crate) fn start(bin: &Path, dir: &Path) -> Server {
        Server::start_env(bin, dir, &[])
    }

    /// [`Server::start`] with environment variables (e.g. `DATANOTES_MODEL`).
    pub(crate) fn start_env(bin: &Path, dir: &Path, env: &[(&str, &str)]) -> Server {
        let t0 = Instant::now();
        let log = std::env::var("DATANOTES_LOG").unwrap_or_else(|_| "error".into());
        let started = Launch::new(dir)
            .bin(bin)
            .env("DATANOTES_LOG", &log)
            .envs(env)
            .spawn();
        let (child, url, token) = (started.child, started.url, started.token);
        let http = client();
        loop {
            if let Ok(r) = http.get(format!("{url}/datanotes/health")).send()
                && r.status().is_success()
            {
                break;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        let started_in = t0.elapsed();
        Server {
            child,
            url,
            token,
            http,
            started_in,
        }
    }

    /// Runs an operation; Err on anything but HTTP 200.
    pub(crate) fn call_with(
        http: &reqwest::blocking::Client,
        url: &str,
        token: &str,
        op: &str,
        args: &Value,
    ) -> Result<Value, String> {
        let resp = http
            .post(format!("{url}/datanotes/{op}/"))
            .bearer_auth(token)
            .header("X-Datanotes-Actor", "bench / none")
            .json(args)
            .send()
            .map_err(|e| format!("{op}: {e}"))?;
        let status = resp.status().as_u16();
        let text = resp.text().map_err(|e| format!("{op}: {e}"))?;
        if status != 200 {
            return Err(format!("{op} answered {status}: {text}"));
        }
        serde_json::from_str(&text).map_err(|e| format!("{op}: {e}"))
    }

    /// Runs an operation that must succeed; answers its JSON.
    pub(crate) fn call(&self, op: &str, args: Value) -> Value {
        Server::call_with(&self.http, &self.url, &self.token, op, &args)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// Peak resident memory of the server so far (VmHWM), in MiB.
    pub(crate) fn peak_rss_mib(&self) -> f64 {
        process::status_mib(&self.child.id().to_string(), "VmHWM")
    }

    /// CPU time (user + system) the server has used so far, in seconds: steadier than wall time
    /// on a busy machine.
    pub(crate) fn cpu_s(&self) -> f64 {
        process::cpu_s(self.child.id())
    }

    /// SIGTERM, and wait for the clean exit (the writer checkpoints).
    pub(crate) fn stop(mut self) {
        process::stop(&mut self.child, Duration::from_secs(60));
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            process::kill(&mut self.child);
        }
    }
}

pub(crate) struct Bench {
    pub(crate) opts: Opts,
    pub(crate) bin: PathBuf,
    pub(crate) dir: PathBuf,
    pub(crate) _tmp: tempfile::TempDir,
    pub(crate) server: Option<Server>,
}

impl Bench {
    /// The running server (started if needed).
    pub(crate) fn server(&mut self) -> &Server {
        if self.server.is_none() {
            self.server = Some(Server::start(&self.bin, &self.dir));
        }
        self.server.as_ref().unwrap()
    }
    pub(crate) fn stop(&mut self) {
        if let Some(s) = self.server.take() {
            s.stop();
        }
    }
    /// Stops (cleanly) and starts again; answers the new server.
    pub(crate) fn restart(&mut self) -> &Server {
        self.stop();
        self.server()
    }
}

pub(crate) fn progress(msg: impl AsRef<str>) {
    eprintln!("[bench] {}", msg.as_ref());
}

/// A small deterministic generator (xorshift64*), so every run builds the same data.
pub(crate) struct Rng(pub(crate) u64);
impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    pub(crate) fn pick<'a>(&mut self, from: &[&'a str]) -> &'a str {
        from[(self.next() % from.len() as u64) as usize]
    }
}

/// Row values like the ones a tasks table holds.
pub(crate) fn row_values(rng: &mut Rng, i: usize) -> (Map<String, Value>, String) {
    let words: Vec<&str> = (0..4).map(|_| rng.pick(&WORDS)).collect();
    let title = format!("Item {i}: {}", words.join(" "));
    let status = rng.pick(&STATUSES);
    let owner = rng.pick(&OWNERS);
    let estimate = (rng.next() % 40) as i64;
    let due = format!("2026-{:02}-{:02}", 1 + rng.next() % 12, 1 + rng.next() % 28);
    let tags: Vec<&str> = (0..(rng.next() % 3)).map(|_| rng.pick(&WORDS)).collect();
    let body_words: Vec<&str> = (0..30).map(|_| rng.pick(&WORDS)).collect();
    let body = format!("Notes on item {i}.\n\n{}.\n", body_words.join(" "));
    let mut v = Map::new();
    v.insert("title".into(), json!(title));
    v.insert("status".into(), json!(status));
    v.insert("owner".into(), json!(owner));
    v.insert("estimate".into(), json!(estimate));
    v.insert("due".into(), json!(due));
    v.insert("tags".into(), json!(tags));
    (v, body)
}

/// The bench's clients run on one thread: `block_on` drives their tasks itself, so a measured
/// call pays no wake-up of another thread on the client's side.
pub(crate) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// An async HTTP client on the bench's one-thread runtime (see [`runtime`]).
pub(crate) struct AsyncClient {
    pub(crate) rt: tokio::runtime::Runtime,
    pub(crate) http: reqwest::Client,
    pub(crate) url: String,
    pub(crate) token: String,
}

impl AsyncClient {
    pub(crate) fn new(s: &Server) -> AsyncClient {
        AsyncClient {
            rt: runtime(),
            http: reqwest::Client::new(),
            url: s.url.clone(),
            token: s.token.clone(),
        }
    }

    /// `GET /datanotes/health`: an HTTP round trip to the engine that does nothing.
    pub(crate) fn health(&self) -> Duration {
        self.rt.block_on(async {
            let t0 = Instant::now();
            let r = self
                .http
                .get(format!("{}/datanotes/health", self.url))
                .send()
                .await
                .expect("health");
            let _ = r.bytes().await;
            t0.elapsed()
        })
    }

    /// Calls a tool through `/apps/call/`: the time and the answer.
    pub(crate) fn app_call(&self, tool: &str, args: &Value) -> (Duration, Value) {
        self.rt.block_on(async {
            let t0 = Instant::now();
            let r = self
                .http
                .post(format!("{}/datanotes/apps/call/", self.url))
                .bearer_auth(&self.token)
                .json(&json!({"tool": tool, "arguments": args}))
                .send()
                .await
                .expect("apps/call");
            let v: Value = r.json().await.expect("apps/call answer");
            (t0.elapsed(), v)
        })
    }
}

/// Until every app of the server is reachable (its tools listed from a live instance).
pub(crate) fn wait_reachable(s: &Server, apps: usize) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let v = s.call("apps", json!({}));
        let list = v["apps"].as_array().cloned().unwrap_or_default();
        let up = list.iter().filter(|a| a["reachable"] == true).count();
        if up >= apps {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "only {up} of {apps} apps reachable: {v}"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Resident memory of the server now (VmRSS), in MiB.
pub(crate) fn rss_mib(s: &Server) -> f64 {
    rss_of(&s.child.id().to_string())
}

/// Resident memory of a process (`self` for this one), in MiB.
pub(crate) fn rss_of(pid: &str) -> f64 {
    process::status_mib(pid, "VmRSS")
}

/// Latest journal seq.
pub(crate) fn last_seq(s: &Server) -> i64 {
    s.call("list_migrations", json!({"limit": 1}))["migrations"][0]["seq"]
        .as_i64()
        .unwrap_or(0)
}
