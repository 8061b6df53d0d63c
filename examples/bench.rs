//! Benchmarks of the real `datanotes` server, over HTTP, on a temporary database.
//!
//! ```sh
//! cargo build --release
//! cargo run --release --example bench                 # 100,000 rows
//! cargo run --release --example bench -- --quick      # 10,000 rows, fewer calls
//! cargo run --release --example bench -- --json       # one JSON object of named figures on stdout
//! cargo run --release --example bench -- --rows 30000 --insert-secs 10   # other sizes
//! cargo run --release --example bench -- --only feed,wasm    # the load section, then these
//! ```
//!
//! The server binary is `target/release/datanotes`, found next to this example's own executable
//! (`DATANOTES_BIN` overrides it). When run through cargo, the bench first asks cargo to bring that
//! binary up to date, so it never measures a stale build (`--no-build` skips that).
//!
//! Each section is one function `fn(&mut Bench) -> Vec<Figure>` listed in [`SECTIONS`]; they
//! share a server (`Bench::server`, `Bench::restart`) and the percentile helper
//! ([`Latency::of`]). Progress goes to stderr; the report (table or JSON) to stdout.

use datanotes::engine::files;
use datanotes::engine::schema::Table;
use rmcp::model::CallToolRequestParams;
use rmcp::service::RunningService;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Map, Value, json};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

const TABLE: &str = "bench.perf.items";
const STATUSES: [&str; 4] = ["todo", "doing", "done", "blocked"];
const OWNERS: [&str; 20] = [
    "ada", "alan", "barbara", "claude", "donald", "edsger", "frances", "grace", "john", "ken",
    "leslie", "linus", "margaret", "niklaus", "radia", "robin", "shafi", "sophie", "tony",
    "yukihiro",
];
const WORDS: [&str; 24] = [
    "index", "journal", "markdown", "sqlite", "ranking", "query", "table", "schema", "write",
    "durable", "commit", "fsync", "note", "folder", "change", "feed", "token", "engine", "batch",
    "filter", "column", "search", "value", "row",
];

/// A section: sets up what it needs on the shared bench, measures, answers named figures.
type Section = fn(&mut Bench) -> Vec<Figure>;

/// The sections, in order.
const SECTIONS: &[(&str, Section)] = &[
    ("load", section_load),
    ("start", section_start),
    ("select", section_select),
    ("insert", section_insert),
    ("feed", section_feed),
    ("agg", section_aggregator),
    ("wasm", section_wasm),
];

// ---- options ----

struct Opts {
    quick: bool,
    json: bool,
    build: bool,
    /// Sections to run (besides `load`, which the others stand on); empty: all.
    only: Vec<String>,
    /// Rows of the big table.
    rows: usize,
    /// Intact-index restarts measured.
    restarts: usize,
    select_warmup: usize,
    select_calls: usize,
    insert_clients: usize,
    insert_time: Duration,
    /// SSE consumers on `/changes/stream` during the write load, and how long the load runs.
    sse_consumers: usize,
    sse_time: Duration,
    /// Clients writing during the SSE fan-out (many, for a high write rate: group commit).
    sse_writers: usize,
    /// Remote apps (20 tools each) behind the aggregator, of which `apps_down` do not answer.
    apps: usize,
    apps_down: usize,
    /// Measured calls of the aggregator and WASM sections.
    app_calls: usize,
    /// Copies of hostile.wasm installed to measure per-app start.
    wasm_copies: usize,
}

impl Opts {
    fn parse() -> Opts {
        let args: Vec<String> = std::env::args().skip(1).collect();
        let has = |f: &str| args.iter().any(|a| a == f);
        let usage =
            "use --quick, --json, --no-build, --rows N, --insert-secs N, --only SECTION[,SECTION]";
        let mut only = vec![];
        let mut values = std::collections::HashMap::new();
        let mut it = args.iter();
        while let Some(a) = it.next() {
            match a.as_str() {
                "--quick" | "--json" | "--no-build" | "--" => {}
                "--only" => {
                    let names: Vec<String> = it
                        .next()
                        .map(|v| v.split(',').map(|n| n.trim().to_string()).collect())
                        .unwrap_or_default();
                    for n in &names {
                        if !SECTIONS.iter().any(|(s, _)| s == n) {
                            let all: Vec<&str> = SECTIONS.iter().map(|(s, _)| *s).collect();
                            eprintln!(
                                "--only: no section {n:?}; the sections are {}",
                                all.join(", ")
                            );
                            std::process::exit(2);
                        }
                    }
                    only.extend(names);
                }
                "--rows" | "--insert-secs" => {
                    let v = it.next().and_then(|v| v.parse::<u64>().ok());
                    let Some(v) = v else {
                        eprintln!("{a} takes a number; {usage}");
                        std::process::exit(2);
                    };
                    values.insert(a.as_str(), v);
                }
                _ => {
                    eprintln!("unknown argument {a:?}; {usage}");
                    std::process::exit(2);
                }
            }
        }
        let quick = has("--quick");
        Opts {
            quick,
            json: has("--json"),
            build: !has("--no-build"),
            only,
            rows: values
                .get("--rows")
                .map(|&v| v as usize)
                .unwrap_or(if quick { 10_000 } else { 100_000 }),
            restarts: if quick { 2 } else { 3 },
            select_warmup: if quick { 10 } else { 30 },
            select_calls: if quick { 100 } else { 200 },
            insert_clients: 4,
            insert_time: Duration::from_secs(
                values
                    .get("--insert-secs")
                    .copied()
                    .unwrap_or(if quick { 2 } else { 6 }),
            ),
            sse_consumers: if quick { 10 } else { 100 },
            sse_time: Duration::from_secs(if quick { 2 } else { 5 }),
            sse_writers: if quick { 8 } else { 64 },
            apps: if quick { 5 } else { 50 },
            apps_down: if quick { 1 } else { 5 },
            app_calls: if quick { 50 } else { 300 },
            wasm_copies: if quick { 3 } else { 20 },
        }
    }
}

// ---- figures ----

#[derive(Clone, Copy)]
enum Target {
    AtMost(f64),
    AtLeast(f64),
}

struct Figure {
    section: &'static str,
    name: String,
    value: f64,
    unit: &'static str,
    target: Option<Target>,
}

impl Figure {
    fn new(section: &'static str, name: impl Into<String>, value: f64, unit: &'static str) -> Self {
        Figure {
            section,
            name: name.into(),
            value,
            unit,
            target: None,
        }
    }
    fn target(mut self, t: Target) -> Self {
        self.target = Some(t);
        self
    }
    fn met(&self) -> Option<bool> {
        self.target.map(|t| match t {
            Target::AtMost(x) => self.value <= x,
            Target::AtLeast(x) => self.value >= x,
        })
    }
}

/// Latency percentiles of a set of samples.
struct Latency {
    p50: f64,
    p99: f64,
    mean: f64,
    max: f64,
    n: usize,
}

impl Latency {
    /// Nearest-rank percentiles, in milliseconds.
    fn of(samples: &[Duration]) -> Latency {
        let mut ms: Vec<f64> = samples.iter().map(|d| d.as_secs_f64() * 1e3).collect();
        ms.sort_by(f64::total_cmp);
        let pct = |p: f64| -> f64 {
            if ms.is_empty() {
                return f64::NAN;
            }
            let rank = ((p / 100.0) * ms.len() as f64).ceil() as usize;
            ms[rank.clamp(1, ms.len()) - 1]
        };
        Latency {
            p50: pct(50.0),
            p99: pct(99.0),
            mean: ms.iter().sum::<f64>() / ms.len().max(1) as f64,
            max: ms.last().copied().unwrap_or(f64::NAN),
            n: ms.len(),
        }
    }
    /// `<prefix>_p50_ms`, `_p99_ms`, `_mean_ms`, `_max_ms`; the target applies to p50 and p99.
    fn figures(&self, section: &'static str, prefix: &str, target: Option<Target>) -> Vec<Figure> {
        let mut out = vec![];
        for (name, v, t) in [
            ("p50", self.p50, target),
            ("p99", self.p99, target),
            ("mean", self.mean, None),
            ("max", self.max, None),
        ] {
            let mut f = Figure::new(section, format!("{prefix}_{name}_ms"), v, "ms");
            f.target = t;
            out.push(f);
        }
        out
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return f64::NAN;
    }
    v[(v.len() - 1) / 2]
}

// ---- the server ----

/// A running server over the bench's database.
struct Server {
    child: Child,
    url: String,
    token: String,
    http: reqwest::blocking::Client,
    /// From spawn until `/datanotes/health` answered.
    started_in: Duration,
}

fn client() -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(300))
        .pool_max_idle_per_host(4)
        .build()
        .expect("http client")
}

unsafe extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
    fn sysconf(name: i32) -> i64;
}

/// `_SC_CLK_TCK` on Linux.
const SC_CLK_TCK: i32 = 2;

impl Server {
    /// Spawns the server and waits until it answers `/datanotes/health`.
    fn start(bin: &Path, dir: &Path) -> Server {
        let t0 = Instant::now();
        let mut child = Command::new(bin)
            .args(["serve", "--database"])
            .arg(dir)
            .args(["--listen", "127.0.0.1:0"])
            .env(
                "DATANOTES_LOG",
                std::env::var("DATANOTES_LOG").unwrap_or_else(|_| "error".into()),
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.display()));
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let url = loop {
            let line = lines
                .next()
                .expect("the server exited before listening")
                .expect("read the server's stdout");
            if let Some(rest) = line.strip_prefix("datanotes serving ") {
                break rest.rsplit(" on ").next().unwrap().trim().to_string();
            }
        };
        std::thread::spawn(move || for _ in lines {});
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
        let token = std::fs::read_to_string(dir.join(".datanotes/owner-token"))
            .expect("owner token")
            .trim()
            .to_string();
        Server {
            child,
            url,
            token,
            http,
            started_in,
        }
    }

    /// Runs an operation; Err on anything but HTTP 200.
    fn call_with(
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

    fn call(&self, op: &str, args: Value) -> Value {
        Server::call_with(&self.http, &self.url, &self.token, op, &args)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// Peak resident memory of the server so far (VmHWM), in MiB.
    fn peak_rss_mib(&self) -> f64 {
        proc_status_mib(&self.child.id().to_string(), "VmHWM")
    }

    /// CPU time (user + system) the server has used so far, in seconds: steadier than wall time
    /// on a busy machine.
    fn cpu_s(&self) -> f64 {
        let stat =
            std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).unwrap_or_default();
        // Fields after the command name (which may hold spaces) start at the last ')'.
        let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
        let f: Vec<&str> = rest.split_whitespace().collect();
        let ticks = |i: usize| {
            f.get(i)
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(f64::NAN)
        };
        // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
        let hz = unsafe { sysconf(SC_CLK_TCK) } as f64;
        (ticks(11) + ticks(12)) / hz
    }

    /// SIGTERM, and wait for the clean exit (the writer checkpoints).
    fn stop(mut self) {
        unsafe { libc_kill(self.child.id() as i32, 15) };
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

// ---- the bench ----

struct Bench {
    opts: Opts,
    bin: PathBuf,
    dir: PathBuf,
    _tmp: tempfile::TempDir,
    server: Option<Server>,
}

impl Bench {
    /// The running server (started if needed).
    fn server(&mut self) -> &Server {
        if self.server.is_none() {
            self.server = Some(Server::start(&self.bin, &self.dir));
        }
        self.server.as_ref().unwrap()
    }
    fn stop(&mut self) {
        if let Some(s) = self.server.take() {
            s.stop();
        }
    }
    /// Stops (cleanly) and starts again; answers the new server.
    fn restart(&mut self) -> &Server {
        self.stop();
        self.server()
    }
}

fn progress(msg: impl AsRef<str>) {
    eprintln!("[bench] {}", msg.as_ref());
}

/// A small deterministic generator (xorshift64*), so every run builds the same data.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn pick<'a>(&mut self, from: &[&'a str]) -> &'a str {
        from[(self.next() % from.len() as u64) as usize]
    }
}

/// Row values like the ones a tasks table holds.
fn row_values(rng: &mut Rng, i: usize) -> (Map<String, Value>, String) {
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

// ---- sections ----

/// Creates the table through the server, then writes the row files straight into its folder
/// while the server is stopped (the format `render_row` writes), and measures the first start,
/// which finds them all as hand edits.
fn section_load(b: &mut Bench) -> Vec<Figure> {
    const S: &str = "load";
    let s = b.server();
    s.call(
        "create_table",
        json!({"table": TABLE, "description": "bench rows", "columns": {
            "title": {"type": "text", "required": true},
            "status": {"type": "enum", "values": STATUSES, "default": "todo"},
            "owner": {"type": "text"},
            "estimate": {"type": "integer", "min": 0, "max": 100},
            "due": {"type": "date"},
            "tags": {"type": "list"},
        }}),
    );
    b.stop();
    let dir = files::table_dir(&b.dir, TABLE);
    let def = std::fs::read_to_string(dir.join(files::TABLE_FILE)).expect("table definition");
    let table = Table::compile(
        TABLE,
        files::parse_table_def(&def).expect("definition parses"),
    )
    .expect("definition compiles");
    progress(format!("writing {} row files", b.opts.rows));
    let t0 = Instant::now();
    let mut rng = Rng(0x5eed_1234_abcd_0001);
    let mut bytes_total = 0usize;
    for i in 0..b.opts.rows {
        let (values, body) = row_values(&mut rng, i);
        let values = table.check_row(&values).expect("generated row is valid");
        let bytes = files::render_row(&table, &values, &body);
        bytes_total += bytes.len();
        std::fs::write(dir.join(format!("r{i:07}.md")), bytes).expect("write row file");
    }
    let write_s = t0.elapsed().as_secs_f64();
    progress(format!("first start over {} new files", b.opts.rows));
    let s = b.server();
    let first = s.started_in.as_secs_f64();
    let cpu = s.cpu_s();
    let rss = s.peak_rss_mib();
    let d = s.call("describe_table", json!({"table": TABLE}));
    let rows = d["rows"].as_i64().unwrap_or(-1);
    assert_eq!(rows as usize, b.opts.rows, "every file is indexed: {d}");
    assert_eq!(d["invalid"], json!([]), "no invalid rows");
    progress(format!(
        "first start {first:.2} s (server CPU {cpu:.2} s), peak RSS {rss:.0} MiB, {rows} rows"
    ));
    vec![
        Figure::new(S, "rows", b.opts.rows as f64, "rows"),
        Figure::new(S, "row_files_mib", bytes_total as f64 / 1048576.0, "MiB"),
        Figure::new(S, "write_files_s", write_s, "s"),
        Figure::new(S, "first_start_s", first, "s"),
        Figure::new(S, "first_start_cpu_s", cpu, "s"),
        Figure::new(S, "first_start_peak_rss_mib", rss, "MiB"),
    ]
}

/// Start over an intact index: stop cleanly, start again, time until health answers.
fn section_start(b: &mut Bench) -> Vec<Figure> {
    const S: &str = "start";
    let mut times = vec![];
    let mut rss = vec![];
    let mut cpu = vec![];
    for i in 0..b.opts.restarts {
        let s = b.restart();
        times.push(s.started_in.as_secs_f64());
        cpu.push(s.cpu_s());
        rss.push(s.peak_rss_mib());
        progress(format!(
            "start {} with an intact index: {:.3} s",
            i + 1,
            s.started_in.as_secs_f64()
        ));
    }
    let max = times.iter().copied().fold(f64::NAN, f64::max);
    vec![
        Figure::new(S, "start_intact_s", median(times), "s").target(Target::AtMost(3.0)),
        Figure::new(S, "start_intact_max_s", max, "s"),
        Figure::new(S, "start_intact_cpu_s", median(cpu), "s"),
        Figure::new(S, "start_intact_peak_rss_mib", median(rss), "MiB"),
    ]
}

/// `select_rows` with one `=` filter over the big table, one client, after a warm-up.
fn section_select(b: &mut Bench) -> Vec<Figure> {
    const S: &str = "select";
    let (warmup, calls) = (b.opts.select_warmup, b.opts.select_calls);
    let s = b.server();
    let run = |column: &str, values: &[&str]| -> Latency {
        let mut samples = vec![];
        for i in 0..warmup + calls {
            let v = values[i % values.len()];
            let args =
                json!({"table": TABLE, "where": [{"column": column, "op": "=", "value": v}]});
            let t0 = Instant::now();
            let r = s.call("select_rows", args);
            let dt = t0.elapsed();
            assert!(
                r["total"].as_i64().unwrap_or(0) > 0,
                "select found rows: {r}"
            );
            if i >= warmup {
                samples.push(dt);
            }
        }
        samples_note(column, &samples);
        Latency::of(&samples)
    };
    let by_enum = run("status", &STATUSES);
    let by_text = run("owner", &OWNERS);
    let mut out = by_enum.figures(S, "select_enum_eq", Some(Target::AtMost(20.0)));
    out.extend(by_text.figures(S, "select_text_eq", Some(Target::AtMost(20.0))));
    out.push(Figure::new(S, "select_calls", by_enum.n as f64, "calls"));
    out
}

fn samples_note(what: &str, samples: &[Duration]) {
    let l = Latency::of(samples);
    progress(format!(
        "select_rows {what} = …: p50 {:.2} ms, p99 {:.2} ms over {} calls",
        l.p50, l.p99, l.n
    ));
}

/// Durable `insert_row` from concurrent clients (each waits for its answer), into the big table.
fn section_insert(b: &mut Bench) -> Vec<Figure> {
    const S: &str = "insert";
    let (clients, run_for) = (b.opts.insert_clients, b.opts.insert_time);
    let s = b.server();
    let (url, token) = (s.url.clone(), s.token.clone());
    let seq0 = s.call("list_migrations", json!({"limit": 1}))["migrations"][0]["seq"]
        .as_i64()
        .unwrap_or(0);
    let cpu0 = s.cpu_s();
    let go = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let handles: Vec<_> = (0..clients)
        .map(|c| {
            let (url, token, go, stop) = (url.clone(), token.clone(), go.clone(), stop.clone());
            std::thread::spawn(move || {
                let http = client();
                let mut rng = Rng(0xc0ffee ^ (c as u64 + 1) << 20);
                let mut samples = vec![];
                let mut i = 0usize;
                // Warm the connection up before the clock starts.
                let insert = |i: usize, rng: &mut Rng| {
                    let (values, body) = row_values(rng, i);
                    let args = json!({"table": TABLE, "id": format!("c{c}-{i:07}"), "values": values, "body": body});
                    Server::call_with(&http, &url, &token, "insert_row", &args)
                        .unwrap_or_else(|e| panic!("{e}"));
                };
                insert(i, &mut rng);
                i += 1;
                while !go.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_micros(200));
                }
                while !stop.load(Ordering::Relaxed) {
                    let t0 = Instant::now();
                    insert(i, &mut rng);
                    samples.push(t0.elapsed());
                    i += 1;
                }
                samples
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let t0 = Instant::now();
    go.store(true, Ordering::Relaxed);
    std::thread::sleep(run_for);
    stop.store(true, Ordering::Relaxed);
    let samples: Vec<Duration> = handles
        .into_iter()
        .flat_map(|h| h.join().expect("insert client"))
        .collect();
    let elapsed = t0.elapsed().as_secs_f64();
    let s = b.server();
    let cpu_ms_per_row = (s.cpu_s() - cpu0) * 1e3 / samples.len().max(1) as f64;
    let seq1 = s.call("list_migrations", json!({"limit": 1}))["migrations"][0]["seq"]
        .as_i64()
        .unwrap_or(0);
    assert!(
        seq1 - seq0 >= samples.len() as i64,
        "every insert is journaled"
    );
    let rate = samples.len() as f64 / elapsed;
    let l = Latency::of(&samples);
    progress(format!(
        "insert_row x{clients} clients: {} rows in {elapsed:.2} s = {rate:.0} rows/s (p50 {:.2} ms, p99 {:.2} ms, server CPU {cpu_ms_per_row:.2} ms/row)",
        samples.len(),
        l.p50,
        l.p99
    ));
    let mut out = vec![
        Figure::new(S, "insert_rows_per_s", rate, "rows/s").target(Target::AtLeast(1000.0)),
        Figure::new(S, "insert_clients", clients as f64, "clients"),
        Figure::new(S, "insert_rows", samples.len() as f64, "rows"),
        Figure::new(S, "insert_server_cpu_per_row_ms", cpu_ms_per_row, "ms"),
    ];
    out.extend(l.figures(S, "insert", None));
    out
}

/// Latest journal seq.
fn last_seq(s: &Server) -> i64 {
    s.call("list_migrations", json!({"limit": 1}))["migrations"][0]["seq"]
        .as_i64()
        .unwrap_or(0)
}

/// The change feed: page reads over the whole journal, then SSE fan-out lag under a write load.
fn section_feed(b: &mut Bench) -> Vec<Figure> {
    const S: &str = "feed";
    let (consumers, run_for, writers) = (b.opts.sse_consumers, b.opts.sse_time, b.opts.sse_writers);
    let s = b.server();
    // Page reads: the whole journal (the loaded rows and the inserts), pages of 1000.
    let t0 = Instant::now();
    let (mut since, mut n) = (0i64, 0usize);
    loop {
        let page = s.call("changes", json!({"since": since, "limit": 1000}));
        let got = page["changes"].as_array().map(Vec::len).unwrap_or(0);
        if got == 0 {
            break;
        }
        n += got;
        since = page["next"].as_i64().expect("next cursor");
    }
    let read_s = t0.elapsed().as_secs_f64();
    let rate = n as f64 / read_s;
    progress(format!(
        "changes/ pages of 1000: {n} changes in {read_s:.3} s = {rate:.0} changes/s"
    ));

    // SSE fan-out: consumers connect from the current seq, writers insert, each consumer
    // notes when each seq arrives; lag = arrival - the write's acknowledgement.
    let seq0 = last_seq(s);
    let (url, token) = (s.url.clone(), s.token.clone());
    let end_seq = Arc::new(std::sync::atomic::AtomicI64::new(i64::MAX));
    let connected = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let readers: Vec<_> = (0..consumers)
        .map(|_| {
            let (url, token, end_seq, connected) = (
                url.clone(),
                token.clone(),
                end_seq.clone(),
                connected.clone(),
            );
            std::thread::spawn(move || {
                let http = reqwest::blocking::Client::builder()
                    .timeout(run_for + Duration::from_secs(20))
                    .build()
                    .expect("http client");
                let mut seen: Vec<(i64, Instant)> = vec![];
                let resp = http
                    .get(format!("{url}/datanotes/changes/stream?since={seq0}"))
                    .bearer_auth(&token)
                    .send();
                connected.fetch_add(1, Ordering::SeqCst);
                let Ok(resp) = resp else { return seen };
                for line in BufReader::new(resp).lines() {
                    let Ok(line) = line else { break };
                    if let Some(id) = line.strip_prefix("id:") {
                        let seq: i64 = id.trim().parse().unwrap_or(0);
                        seen.push((seq, Instant::now()));
                        if seq >= end_seq.load(Ordering::SeqCst) {
                            break;
                        }
                    }
                }
                seen
            })
        })
        .collect();
    let wait = Instant::now() + Duration::from_secs(20);
    while connected.load(Ordering::SeqCst) < consumers && Instant::now() < wait {
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_millis(100));
    let stop = Arc::new(AtomicBool::new(false));
    let t0 = Instant::now();
    let handles: Vec<_> = (0..writers)
        .map(|c| {
            let (url, token, stop) = (url.clone(), token.clone(), stop.clone());
            std::thread::spawn(move || {
                let http = client();
                let mut rng = Rng(0xfeed ^ (c as u64 + 1) << 24);
                let mut acks: Vec<(i64, Instant)> = vec![];
                let mut i = 0usize;
                while !stop.load(Ordering::Relaxed) {
                    let (values, body) = row_values(&mut rng, i);
                    let args = json!({"table": TABLE, "id": format!("f{c}-{i:07}"), "values": values, "body": body});
                    let v = Server::call_with(&http, &url, &token, "insert_row", &args)
                        .unwrap_or_else(|e| panic!("{e}"));
                    acks.push((v["seq"].as_i64().expect("insert_row answers its seq"), Instant::now()));
                    i += 1;
                }
                acks
            })
        })
        .collect();
    std::thread::sleep(run_for);
    stop.store(true, Ordering::Relaxed);
    let acks: std::collections::HashMap<i64, Instant> = handles
        .into_iter()
        .flat_map(|h| h.join().expect("feed writer"))
        .collect();
    let write_s = t0.elapsed().as_secs_f64();
    let last = acks.keys().copied().max().unwrap_or(seq0);
    // A consumer stops at the first event at or past `end_seq`; it may have read every event
    // already, so one more write (the next seq: nothing else writes now) comes after the mark.
    end_seq.store(last + 1, Ordering::SeqCst);
    let (values, body) = row_values(&mut Rng(7), 0);
    s.call(
        "insert_row",
        json!({"table": TABLE, "id": "feed-end", "values": values, "body": body}),
    );
    let mut lags = vec![];
    let mut missing = 0usize;
    for r in readers {
        let seen: std::collections::HashMap<i64, Instant> =
            r.join().expect("SSE consumer").into_iter().collect();
        for (seq, ack) in &acks {
            match seen.get(seq) {
                Some(at) => lags.push(at.saturating_duration_since(*ack)),
                None => missing += 1,
            }
        }
    }
    let write_rate = acks.len() as f64 / write_s;
    let l = Latency::of(&lags);
    progress(format!(
        "SSE x{consumers} consumers, {write_rate:.0} writes/s: lag p50 {:.2} ms, p99 {:.2} ms over {} events, {missing} missing",
        l.p50, l.p99, l.n
    ));
    let mut out = vec![
        Figure::new(S, "changes_per_s", rate, "chg/s").target(Target::AtLeast(100_000.0)),
        Figure::new(S, "changes_read", n as f64, "changes"),
        Figure::new(S, "sse_consumers", consumers as f64, "conns"),
        Figure::new(S, "sse_writes_per_s", write_rate, "rows/s"),
        Figure::new(S, "sse_events_missing", missing as f64, "events"),
    ];
    out.extend(l.figures(S, "sse_lag", None));
    if let Some(f) = out.iter_mut().find(|f| f.name == "sse_lag_p99_ms") {
        f.target = Some(Target::AtMost(100.0));
    }
    out
}

/// The bench's clients run on one thread: `block_on` drives their tasks itself, so a measured
/// call pays no wake-up of another thread on the client's side.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// An MCP client session (rmcp, streamable HTTP).
fn mcp_connect(
    rt: &tokio::runtime::Runtime,
    url: &str,
    token: Option<&str>,
) -> RunningService<RoleClient, ()> {
    let mut cfg = StreamableHttpClientTransportConfig::with_uri(url.to_string());
    if let Some(t) = token {
        cfg = cfg.auth_header(t.to_string());
    }
    rt.block_on(async { ().serve(StreamableHttpClientTransport::from_config(cfg)).await })
        .unwrap_or_else(|e| panic!("MCP connect to {url}: {e}"))
}

/// Opens an MCP session by hand (initialize, initialized): its `Mcp-Session-Id`.
async fn mcp_raw_session(http: &reqwest::Client, url: &str, token: &str) -> String {
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "bench", "version": "0"}}});
    let r = http
        .post(format!("{url}/mcp"))
        .bearer_auth(token)
        .header("Accept", "application/json, text/event-stream")
        .json(&init)
        .send()
        .await
        .expect("initialize");
    let sid = r
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .expect("an Mcp-Session-Id")
        .to_string();
    let _ = r.bytes().await;
    http.post(format!("{url}/mcp"))
        .bearer_auth(token)
        .header("Accept", "application/json, text/event-stream")
        .header("Mcp-Session-Id", &sid)
        .json(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .send()
        .await
        .expect("initialized");
    sid
}

/// One JSON-RPC request on a raw session; answers the size of the answer (read, not parsed).
async fn mcp_raw_call(
    http: &reqwest::Client,
    url: &str,
    token: &str,
    sid: &str,
    method: &str,
) -> usize {
    mcp_raw_request(http, url, token, sid, method, json!({})).await
}

/// One JSON-RPC request with its params on a raw session; answers the size of the answer.
async fn mcp_raw_request(
    http: &reqwest::Client,
    url: &str,
    token: &str,
    sid: &str,
    method: &str,
    params: Value,
) -> usize {
    let r = http
        .post(format!("{url}/mcp"))
        .bearer_auth(token)
        .header("Accept", "application/json, text/event-stream")
        .header("Mcp-Session-Id", sid)
        .json(&json!({"jsonrpc": "2.0", "id": 2, "method": method, "params": params}))
        .send()
        .await
        .expect(method);
    assert!(r.status().is_success(), "{method}: {}", r.status());
    // The answer is one SSE event (or plain JSON); the stream may stay open a moment after it,
    // as an rmcp client does not wait for that, neither does this.
    let sse = r
        .headers()
        .get("content-type")
        .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
    let mut r = r;
    let mut body: Vec<u8> = vec![];
    while let Some(chunk) = r.chunk().await.expect(method) {
        body.extend_from_slice(&chunk);
        let has_result = body.windows(8).any(|w| w == b"\"result\"");

        if sse && has_result && body.ends_with(b"\n\n") {
            break;
        }
    }
    assert!(
        body.windows(8).any(|w| w == b"\"result\""),
        "{method} answered no result: {}",
        String::from_utf8_lossy(&body[..body.len().min(300)])
    );
    body.len()
}

fn examples_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    exe.parent().expect("examples folder").to_path_buf()
}

/// A running `remote_app` example; killed on drop.
struct RemoteApp(Child);
impl Drop for RemoteApp {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The aggregator: `tools/list` through the engine's `/mcp` with many remote apps (some down),
/// and `/apps/call/` to a remote app against a direct MCP call to it, interleaved.
fn section_aggregator(b: &mut Bench) -> Vec<Figure> {
    const S: &str = "agg";
    const TOOLS: usize = 20;
    let remote_bin = examples_dir().join(format!("remote_app{}", std::env::consts::EXE_SUFFIX));
    if !remote_bin.is_file() {
        progress(format!(
            "skipped: no {} (cargo build --release --example remote_app)",
            remote_bin.display()
        ));
        return vec![];
    }
    let (apps, down, calls) = (b.opts.apps, b.opts.apps_down, b.opts.app_calls);
    let s = b.server();
    let (url, token) = (s.url.clone(), s.token.clone());
    let mut running = vec![];
    let mut names = vec![];
    let mut first_url = String::new();
    for i in 0..apps - down {
        let name = format!("ra{i:02}");
        let v = s.call("apps/create", json!({"name": &name}));
        let app_token = v["token"].as_str().expect("app token").to_string();
        let mut cmd = Command::new(&remote_bin);
        cmd.args([
            "--engine", &url, "--token", &app_token, "--name", &name, "--bare",
        ]);
        for t in 1..=TOOLS {
            cmd.args(["--tool", &format!("{name}_t{t}")]);
        }
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start remote_app");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mcp_url = loop {
            let line = lines
                .next()
                .expect("remote_app exited before listening")
                .expect("read remote_app");
            if let Some(u) = line.strip_prefix("listening on ") {
                break u.trim().to_string();
            }
        };
        std::thread::spawn(move || for _ in lines {});
        if i == 0 {
            first_url = mcp_url;
        }
        running.push(RemoteApp(child));
        names.push(name);
    }
    for i in 0..down {
        let name = format!("down{i:02}");
        // Nothing listens on port 9 (discard) on this machine: connection refused.
        s.call(
            "apps/create",
            json!({"name": &name, "mcp_url": "http://127.0.0.1:9/mcp"}),
        );
        names.push(name);
    }
    let client = AsyncClient::new(s);
    let rt = &client.rt;
    let agent = mcp_connect(rt, &format!("{url}/mcp"), Some(&token));
    let want = (apps - down) * TOOLS;
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut listed = 0;
    loop {
        let tools = rt.block_on(agent.list_all_tools()).expect("tools/list");
        listed = listed.max(tools.iter().filter(|t| t.name.starts_with("ra")).count());
        if listed >= want || Instant::now() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    progress(format!(
        "{} remote apps up, {down} down: {listed} of {want} remote tools listed",
        apps - down
    ));
    // The same request as raw HTTP, its answer read but not parsed: what the engine and the
    // transport take, without the client's decoding of every tool. Interleaved with the first.
    let http = &client.http;
    let raw_session = rt.block_on(mcp_raw_session(http, &url, &token));
    let (mut samples, mut raw, mut bytes) = (vec![], vec![], 0);
    let mut total_tools = 0;
    for i in 0..10 + calls {
        let t0 = Instant::now();
        let tools = rt.block_on(agent.list_all_tools()).expect("tools/list");
        let d1 = t0.elapsed();
        let t0 = Instant::now();
        bytes = rt.block_on(mcp_raw_call(http, &url, &token, &raw_session, "tools/list"));
        let d2 = t0.elapsed();
        if i >= 10 {
            samples.push(d1);
            raw.push(d2);
        }
        total_tools = tools.len();
    }
    let (list, list_raw) = (Latency::of(&samples), Latency::of(&raw));
    progress(format!(
        "tools/list ({total_tools} tools): p50 {:.2} ms, p99 {:.2} ms with an rmcp client; {:.2} / {:.2} ms as raw HTTP ({} KB, not parsed)",
        list.p50,
        list.p99,
        list_raw.p50,
        list_raw.p99,
        bytes / 1024
    ));
    // /apps/call/ vs direct, interleaved.
    let direct = mcp_connect(rt, &first_url, None);
    let tool = format!("{}_t1", names[0]);
    let (mut via, mut dir) = (vec![], vec![]);
    // Both calls are made from the same one-thread runtime (reqwest for `/apps/call/`, rmcp's
    // client for the direct call), so that the ratio measures the engine, not two client stacks;
    // beside them, the floor: one HTTP round trip to the engine that does nothing.
    let mut hop = vec![];
    for i in 0..10 + calls {
        let (d1, v) = client.app_call(&tool, &json!({}));
        assert_eq!(v["ok"], true, "{tool} through /apps/call/: {v}");
        let h = client.health();
        if i >= 10 {
            hop.push(h);
        }
        let p = CallToolRequestParams::new(tool.clone());
        let t0 = Instant::now();
        let r = rt.block_on(direct.call_tool(p)).expect("direct tools/call");
        let d2 = t0.elapsed();
        assert!(r.is_error != Some(true), "direct call failed");
        if i >= 10 {
            via.push(d1);
            dir.push(d2);
        }
    }
    let (lv, ld, lh) = (Latency::of(&via), Latency::of(&dir), Latency::of(&hop));
    let ratio = lv.p50 / ld.p50;
    progress(format!(
        "/apps/call/ p50 {:.2} ms vs direct {:.2} ms = {ratio:.2}x; an HTTP round trip to the engine (GET /health) p50 {:.2} ms",
        lv.p50, ld.p50, lh.p50
    ));
    let _ = rt.block_on(direct.cancel());
    let _ = rt.block_on(agent.cancel());
    for n in &names {
        s.call("apps/delete", json!({"name": n}));
    }
    drop(running);
    // MCP against its own floor and against HTTP, on one raw keep-alive session, interleaved:
    // `ping`; `tools/call` of `list_tables` against `POST /datanotes/list_tables/`; `tools/call`
    // of a trivial WASM tool (when target/plugins/planning.wasm is there).
    let wasm = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/plugins/planning.wasm");
    let wasm_tool = wasm.is_file().then(|| {
        s.call(
            "apps/create",
            json!({"name": "planning", "write": ["personal.tasks.*"], "wasm_path": wasm}),
        );
        "planning_complete_task"
    });
    let (mut ping, mut lt_mcp, mut lt_http, mut w_mcp) = (vec![], vec![], vec![], vec![]);
    let timed = |f: &dyn Fn() -> usize| {
        let t0 = Instant::now();
        f();
        t0.elapsed()
    };
    for i in 0..20 + calls * 4 {
        let d1 = timed(&|| rt.block_on(mcp_raw_call(http, &url, &token, &raw_session, "ping")));
        let d2 = timed(&|| {
            rt.block_on(mcp_raw_request(
                http,
                &url,
                &token,
                &raw_session,
                "tools/call",
                json!({"name": "list_tables", "arguments": {}}),
            ))
        });
        let d3 = timed(&|| {
            rt.block_on(async {
                let r = http
                    .post(format!("{url}/datanotes/list_tables/"))
                    .bearer_auth(&token)
                    .json(&json!({}))
                    .send()
                    .await
                    .expect("list_tables");
                r.bytes().await.expect("list_tables").len()
            })
        });
        let d4 = wasm_tool.map(|t| {
            timed(&|| {
                rt.block_on(mcp_raw_request(
                    http,
                    &url,
                    &token,
                    &raw_session,
                    "tools/call",
                    json!({"name": t, "arguments": {}}),
                ))
            })
        });
        if i >= 20 {
            ping.push(d1);
            lt_mcp.push(d2);
            lt_http.push(d3);
            w_mcp.extend(d4);
        }
    }
    let (lp, lm, lhh) = (
        Latency::of(&ping),
        Latency::of(&lt_mcp),
        Latency::of(&lt_http),
    );
    progress(format!(
        "MCP ping p50 {:.3} ms; list_tables: MCP tools/call p50 {:.3} ms vs HTTP {:.3} ms = {:.2}x",
        lp.p50,
        lm.p50,
        lhh.p50,
        lm.p50 / lhh.p50
    ));
    let mut mcp_figs = vec![];
    mcp_figs.extend(lp.figures(S, "mcp_ping", None).into_iter().take(2));
    mcp_figs.extend(lm.figures(S, "mcp_list_tables", None).into_iter().take(2));
    mcp_figs.extend(lhh.figures(S, "http_list_tables", None).into_iter().take(2));
    mcp_figs.push(
        Figure::new(S, "mcp_over_http_list_tables", lm.p50 / lhh.p50, "x")
            .target(Target::AtMost(1.3)),
    );
    if wasm_tool.is_some() {
        let lw = Latency::of(&w_mcp);
        progress(format!(
            "trivial WASM tool over MCP: p50 {:.3} ms, p99 {:.3} ms = {:.2}x the ping",
            lw.p50,
            lw.p99,
            lw.p50 / lp.p50
        ));
        mcp_figs.extend(lw.figures(S, "mcp_wasm_call", None).into_iter().take(2));
        mcp_figs.push(
            Figure::new(S, "mcp_wasm_call_over_ping", lw.p50 / lp.p50, "x")
                .target(Target::AtMost(1.3)),
        );
        mcp_figs.push(
            Figure::new(S, "mcp_wasm_call_p99_over_p50", lw.p99 / lw.p50, "x")
                .target(Target::AtMost(2.0)),
        );
        s.call("apps/delete", json!({"name": "planning"}));
    }
    let mut out = vec![
        Figure::new(S, "agg_apps", apps as f64, "apps"),
        Figure::new(S, "agg_apps_down", down as f64, "apps"),
        Figure::new(S, "agg_tools_listed", total_tools as f64, "tools"),
    ];
    let mut lf = list.figures(S, "tools_list", None);
    lf[0].target = Some(Target::AtMost(2.0));
    out.extend(lf);
    out.extend(
        list_raw
            .figures(S, "tools_list_raw", None)
            .into_iter()
            .take(2),
    );
    out.push(Figure::new(
        S,
        "tools_list_kib",
        bytes as f64 / 1024.0,
        "KiB",
    ));
    out.extend(lv.figures(S, "apps_call_remote", None));
    out.extend(ld.figures(S, "direct_call_remote", None));
    out.extend(
        lh.figures(S, "engine_http_roundtrip", None)
            .into_iter()
            .take(2),
    );
    out.push(Figure::new(S, "apps_call_over_direct", ratio, "x").target(Target::AtMost(1.3)));
    out.extend(mcp_figs);
    out
}

/// The example apps measured, one per language: name, component, write scope, a trivial call
/// (arguments the guest refuses at once: no engine call) and a read (one or two engine calls).
const WASM_APPS: &[(&str, &str, &str, &str, &str, &str, &str)] = &[
    // (lang, app, component, write, trivial tool, read tool, read arguments); `WASM_SEED` adds a
    // row first, which makes the app's table.
    (
        "rust",
        "planning",
        "planning",
        "personal.tasks.*",
        "planning_complete_task",
        "planning_list_tasks",
        "{}",
    ),
    (
        "python",
        "journal",
        "journal",
        "personal.notes.daily",
        "journal_search",
        "journal_read",
        r#"{"date": "2026-11-30"}"#,
    ),
    (
        "js",
        "bookmarks",
        "bookmarks",
        "personal.notes.bookmarks",
        "bookmarks_by_tag",
        "bookmarks_tags",
        "{}",
    ),
];

/// One write per example app, before the reads.
const WASM_SEED: &[(&str, &str)] = &[
    ("planning_add_task", r#"{"title": "Measure the WASM apps"}"#),
    (
        "journal_append",
        r#"{"text": "Benchmarked the apps", "date": "2026-11-30"}"#,
    ),
    (
        "bookmarks_add",
        r#"{"url": "https://example.com/bench", "title": "Bench", "tags": ["bench"]}"#,
    ),
];

/// An async HTTP client on the bench's one-thread runtime (see [`runtime`]).
struct AsyncClient {
    rt: tokio::runtime::Runtime,
    http: reqwest::Client,
    url: String,
    token: String,
}

impl AsyncClient {
    fn new(s: &Server) -> AsyncClient {
        AsyncClient {
            rt: runtime(),
            http: reqwest::Client::new(),
            url: s.url.clone(),
            token: s.token.clone(),
        }
    }

    /// `GET /datanotes/health`: an HTTP round trip to the engine that does nothing.
    fn health(&self) -> Duration {
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
    fn app_call(&self, tool: &str, args: &Value) -> (Duration, Value) {
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
fn wait_reachable(s: &Server, apps: usize) {
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
fn rss_mib(s: &Server) -> f64 {
    rss_of(&s.child.id().to_string())
}

/// Resident memory of a process (`self` for this one), in MiB.
fn rss_of(pid: &str) -> f64 {
    proc_status_mib(pid, "VmRSS")
}

/// A memory line of `/proc/<pid>/status` (`VmRSS`, `VmHWM`), in MiB.
fn proc_status_mib(pid: &str, key: &str) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map(|kb| kb / 1024.0)
        .unwrap_or(f64::NAN)
}

/// WASM apps: install (compile), trivial and read calls through `/apps/call/` for the Rust,
/// Python and JS example apps (interleaved), a call on a fresh instance after a trap, start from
/// the compile cache and memory per idle app, then the same calls inside the engine (the
/// aggregator in this process, no HTTP).
fn section_wasm(b: &mut Bench) -> Vec<Figure> {
    const S: &str = "wasm";
    let plugins = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/plugins");
    let missing: Vec<String> = WASM_APPS
        .iter()
        .map(|a| a.2)
        .chain(["hostile"])
        .filter(|c| !plugins.join(format!("{c}.wasm")).is_file())
        .map(String::from)
        .collect();
    if !missing.is_empty() {
        progress(format!(
            "skipped: no {} in {} (run scripts/build-plugins)",
            missing.join(", "),
            plugins.display()
        ));
        return vec![];
    }
    let (calls, copies) = (b.opts.app_calls * 4, b.opts.wasm_copies);
    let mut out = vec![];
    let s = b.server();
    for (lang, app, file, write, ..) in WASM_APPS {
        let t0 = Instant::now();
        s.call(
            "apps/create",
            json!({"name": app, "write": [write], "ddl": true,
                   "wasm_path": plugins.join(format!("{file}.wasm"))}),
        );
        let dt = t0.elapsed().as_secs_f64();
        progress(format!(
            "install {app} ({lang}): {dt:.2} s (validate, compile, list)"
        ));
        out.push(Figure::new(S, format!("install_{lang}_s"), dt, "s"));
    }
    s.call(
        "apps/create",
        json!({"name": "hostile", "wasm_path": plugins.join("hostile.wasm")}),
    );
    let base_apps = WASM_APPS.len() + 1;
    wait_reachable(s, base_apps);

    let args_of = |t: &str| serde_json::from_str::<Value>(t).expect("arguments");
    let client = AsyncClient::new(s);
    for (tool, args) in WASM_SEED {
        let (_, v) = client.app_call(tool, &args_of(args));
        assert_eq!(v["ok"], true, "{tool}: {v}");
    }
    // Warm calls, interleaved across the languages.
    let mut trivial = vec![vec![]; WASM_APPS.len()];
    let mut read = vec![vec![]; WASM_APPS.len()];
    for i in 0..20 + calls {
        for (k, (_, _, _, _, tool, rtool, rargs)) in WASM_APPS.iter().enumerate() {
            let (dt, v) = client.app_call(tool, &json!({}));
            assert!(v["servedBy"] != "engine", "{tool}: {v}");
            assert_eq!(v["ok"], false, "{tool} refuses empty arguments: {v}");
            let (dr, v) = client.app_call(rtool, &args_of(rargs));
            assert_eq!(v["ok"], true, "{rtool}: {v}");
            if i >= 20 {
                trivial[k].push(dt);
                read[k].push(dr);
            }
        }
    }
    for (k, (lang, ..)) in WASM_APPS.iter().enumerate() {
        let (t, r) = (Latency::of(&trivial[k]), Latency::of(&read[k]));
        progress(format!(
            "{lang}: trivial call via /apps/call/ p50 {:.3} ms, p99 {:.3} ms; read p50 {:.3} ms, p99 {:.3} ms",
            t.p50, t.p99, r.p50, r.p99
        ));
        let mut tf = t.figures(S, &format!("call_{lang}"), None);
        if *lang == "rust" {
            tf[0].target = Some(Target::AtMost(0.150));
        }
        out.extend(tf.into_iter().take(2));
        out.extend(
            r.figures(S, &format!("read_{lang}"), None)
                .into_iter()
                .take(2),
        );
    }

    // A fresh instance after a trap (the Rust test component: the example apps never trap).
    let mut fresh = vec![];
    for i in 0..5 + calls / 4 {
        let (_, v) = client.app_call("hostile_trap", &json!({}));
        assert_eq!(v["ok"], false, "hostile_trap: {v}");
        let (dt, v) = client.app_call("hostile_ok", &json!({}));
        assert_eq!(v["ok"], true, "hostile_ok: {v}");
        if i >= 5 {
            fresh.push(dt);
        }
    }
    let fresh = Latency::of(&fresh);
    progress(format!(
        "rust, after a trap (fresh instance): p50 {:.3} ms, p99 {:.3} ms",
        fresh.p50, fresh.p99
    ));
    out.extend(
        fresh
            .figures(S, "after_trap_rust", None)
            .into_iter()
            .take(2),
    );

    // Start from the cache: `copies` more apps (copies of the Rust example: their tools collide
    // and are skipped, but each is an app the server loads, instantiates and lists), then the
    // time from the server's spawn until every app is reachable. The cost per app is measured
    // inside the engine (`wasm_in_engine`), where it is not lost in the noise of a restart.
    let s = b.server();
    for i in 0..copies {
        s.call(
            "apps/create",
            json!({"name": format!("copy{i:02}"), "write": ["personal.tasks.*"],
                   "wasm_path": plugins.join("planning.wasm")}),
        );
    }
    let s = b.restart();
    let t0 = Instant::now();
    wait_reachable(s, base_apps + copies);
    let ready = s.started_in + t0.elapsed();
    std::thread::sleep(Duration::from_millis(200));
    let idle_rss = rss_mib(s);
    progress(format!(
        "restart with {} apps: all reachable after {:.1} ms, server RSS {idle_rss:.1} MiB",
        base_apps + copies,
        ready.as_secs_f64() * 1e3,
    ));
    out.extend([
        Figure::new(S, "start_apps", (base_apps + copies) as f64, "apps"),
        Figure::new(S, "start_ready_ms", ready.as_secs_f64() * 1e3, "ms"),
        Figure::new(S, "start_rss_mib", idle_rss, "MiB"),
    ]);

    // Inside the engine: this process opens the database and calls through the aggregator.
    b.stop();
    out.extend(wasm_in_engine(&b.dir, calls));
    let s = b.server();
    for i in 0..copies {
        s.call("apps/delete", json!({"name": format!("copy{i:02}")}));
    }
    out
}

/// The WASM calls again, inside the engine: the aggregator's `call` in this process, no HTTP.
fn wasm_in_engine(dir: &Path, calls: usize) -> Vec<Figure> {
    use datanotes::apps::{Registry, aggregator::Aggregator, wasm::WasmRuntime};
    const S: &str = "wasm";
    let rt = runtime();
    let engine = datanotes::engine::Engine::open(dir).expect("open the bench database");
    let registry = Registry::open(&engine.meta_dir).expect("open the apps registry");
    // The WASM host keeps a handle on the runtime it is made in (engine calls run there).
    let _in_rt = rt.enter();
    let wasm = WasmRuntime::new(engine.clone()).expect("wasm runtime");
    let agg = Aggregator::new(engine.clone(), registry.clone(), wasm);
    let ctx = || datanotes::ops::Ctx::owner("bench");
    // On a worker thread of the runtime, as a request handler runs (from `block_on`'s thread,
    // every call would also pay a wake-up of the worker that runs it).
    let task = {
        let (agg, registry) = (agg.clone(), registry.clone());
        rt.spawn(async move {
        let mut out = vec![];
        // Start from the cache: each app's first refresh loads its compiled component, makes an
        // instance and lists its tools, as the server does for every app when it starts.
        // The memory an idle app holds (its loaded component and a warm instance) is what this
        // process's RSS grows by.
        let mut starts = vec![];
        for rec in registry.list() {
            let rss = rss_of("self");
            let t0 = Instant::now();
            agg.refresh(&rec.name).await.expect("refresh");
            starts.push(t0.elapsed());
            let grew = rss_of("self") - rss;
            if let Some((lang, ..)) = WASM_APPS.iter().find(|a| a.1 == rec.name) {
                progress(format!("{lang}: an idle app holds {grew:.1} MiB"));
                out.push(Figure::new(S, format!("idle_app_{lang}_mib"), grew, "MiB"));
            }
        }
        let st = Latency::of(&starts);
        progress(format!(
            "start from the cache, inside the engine, {} apps: p50 {:.2} ms, max {:.2} ms per app",
            starts.len(),
            st.p50,
            st.max
        ));
        out.push(Figure::new(S, "start_per_app_p50_ms", st.p50, "ms").target(Target::AtMost(5.0)));
        out.push(Figure::new(S, "start_per_app_max_ms", st.max, "ms"));
        let mut trivial = vec![vec![]; WASM_APPS.len()];
        for i in 0..50 + calls * 4 {
            for (k, (_, _, _, _, tool, ..)) in WASM_APPS.iter().enumerate() {
                let t0 = Instant::now();
                let r = agg.call(tool, json!({}), ctx()).await;
                let dt = t0.elapsed();
                assert!(!r.ok && r.served_by != "engine", "{tool}: {}", r.value);
                if i >= 50 {
                    trivial[k].push(dt);
                }
            }
        }
        for (k, (lang, ..)) in WASM_APPS.iter().enumerate() {
            let t = Latency::of(&trivial[k]);
            progress(format!(
                "{lang}: trivial call inside the engine p50 {:.1} µs, p99 {:.1} µs",
                t.p50 * 1e3,
                t.p99 * 1e3
            ));
            let mut tf = t.figures(S, &format!("engine_call_{lang}"), None);
            if *lang == "rust" {
                tf[0].target = Some(Target::AtMost(0.020));
            }
            out.extend(tf.into_iter().take(2));
        }
        let mut fresh = vec![];
        for i in 0..5 + calls {
            let r = agg.call("hostile_trap", json!({}), ctx()).await;
            assert!(!r.ok, "hostile_trap: {}", r.value);
            let t0 = Instant::now();
            let r = agg.call("hostile_ok", json!({}), ctx()).await;
            let dt = t0.elapsed();
            assert!(r.ok, "hostile_ok: {}", r.value);
            if i >= 5 {
                fresh.push(dt);
            }
        }
        let f = Latency::of(&fresh);
        progress(format!(
            "rust, after a trap, inside the engine: p50 {:.1} µs, p99 {:.1} µs",
            f.p50 * 1e3,
            f.p99 * 1e3
        ));
        out.extend(
            f.figures(S, "engine_after_trap_rust", None)
                .into_iter()
                .take(2),
        );
        out
        })
    };
    let out = rt.block_on(task).expect("the in-engine calls");
    drop(agg);
    engine.shutdown();
    out
}

// ---- main ----

/// The server binary: `DATANOTES_BIN`, else `datanotes` beside this example's folder.
fn server_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("DATANOTES_BIN") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().expect("current exe");
    // target/release/examples/bench -> target/release/datanotes
    let dir = exe.parent().and_then(Path::parent).expect("target folder");
    dir.join(format!("datanotes{}", std::env::consts::EXE_SUFFIX))
}

/// Under cargo, makes sure the server binary is built from the current sources.
fn build_server(opts: &Opts) {
    let Some(cargo) = std::env::var_os("CARGO").filter(|_| opts.build) else {
        return;
    };
    if std::env::var_os("DATANOTES_BIN").is_some() {
        return;
    }
    progress("cargo build --release --bin datanotes --example remote_app");
    let ok = Command::new(cargo)
        .args(["build", "--release", "--quiet", "--bin", "datanotes"])
        .args(["--example", "remote_app"])
        .arg("--manifest-path")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml"))
        .stdout(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !ok {
        eprintln!("building the server failed; run `cargo build --release` and retry");
        std::process::exit(1);
    }
}

fn fmt_value(v: f64) -> String {
    if v.is_nan() {
        "-".into()
    } else if (v.fract() == 0.0 && v.abs() < 1e12) || v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

fn main() {
    let opts = Opts::parse();
    build_server(&opts);
    let bin = server_bin();
    if !bin.is_file() {
        eprintln!(
            "no server binary at {}: run `cargo build --release` first (or set DATANOTES_BIN)",
            bin.display()
        );
        std::process::exit(1);
    }
    let tmp = tempfile::Builder::new()
        .prefix("datanotes-bench-")
        .tempdir()
        .expect("temp folder");
    let dir = tmp.path().join("db");
    progress(format!(
        "server {} over {} ({} rows{})",
        bin.display(),
        dir.display(),
        opts.rows,
        if opts.quick { ", quick" } else { "" }
    ));
    let mut b = Bench {
        opts,
        bin,
        dir,
        _tmp: tmp,
        server: None,
    };
    let t0 = Instant::now();
    let mut figures = vec![];
    for (name, section) in SECTIONS {
        if *name != "load" && !b.opts.only.is_empty() && !b.opts.only.iter().any(|o| o == name) {
            continue;
        }
        progress(format!("== {name}"));
        figures.extend(section(&mut b));
    }
    b.stop();
    let total = t0.elapsed().as_secs_f64();
    if b.opts.json {
        let mut o = Map::new();
        o.insert("quick".into(), json!(b.opts.quick));
        for f in &figures {
            o.insert(f.name.clone(), json!(f.value));
        }
        o.insert("bench_total_s".into(), json!(total));
        let missed: Vec<&str> = figures
            .iter()
            .filter(|f| f.met() == Some(false))
            .map(|f| f.name.as_str())
            .collect();
        o.insert("missed_targets".into(), json!(missed));
        println!("{}", Value::Object(o));
        return;
    }
    println!(
        "{:<8} {:<28} {:>12} {:<7} {:>12}",
        "section", "figure", "value", "unit", "target"
    );
    for f in &figures {
        let target = match f.target {
            None => String::new(),
            Some(Target::AtMost(x)) => format!("<= {}", fmt_value(x)),
            Some(Target::AtLeast(x)) => format!(">= {}", fmt_value(x)),
        };
        let mark = match f.met() {
            Some(true) => "ok",
            Some(false) => "MISSED",
            None => "",
        };
        println!(
            "{:<8} {:<28} {:>12} {:<7} {:>12} {mark}",
            f.section,
            f.name,
            fmt_value(f.value),
            f.unit,
            target
        );
    }
    println!("(bench ran {total:.1} s)");
}
