//! `registry`: WASM apps installed by reference from a real OCI registry (issue 33), and an
//! upgrade and a rollback under a steady call load.
//!
//! A real registry (Debian's `docker-registry`, CNCF distribution 2.8) and the real client that
//! publishes to it (`wkg oci push`), both under `target/oci-tools/` (`scripts/fetch-oci-tools`),
//! started by the end-to-end tests' kit. The full run measures the JavaScript example
//! (`bookmarks`, 12 MB: a 10 MB+ component) and then the Rust one (`planning`); `--quick` (which
//! `scripts/test` runs in a debug build) only the Rust one, to stay short.

use super::*;
use crate::kit::registry::Registry;
use std::sync::Mutex;
use std::sync::atomic::AtomicU64;

const S: &str = "registry";
/// Callers calling the app's tool in a loop during an upgrade and a rollback.
const CALLERS: usize = 4;
/// Numbers the calls of the section (the links `bookmarks_add` saves are new each time).
static SEQ: AtomicU64 = AtomicU64::new(1);

/// An example app published in two versions (world 0.1, then 0.2).
struct Pair {
    lang: &'static str,
    app: &'static str,
    old: &'static str,
    new: &'static str,
    write: &'static str,
    /// A first call, which makes the app's table.
    seed: fn() -> (&'static str, Value),
    /// What the callers call (a tool both versions have): tool and arguments of caller `c`'s
    /// call numbered `i` (unique in the section).
    load: fn(usize, u64) -> (&'static str, Value),
    /// The probe called in a tight loop to tell which version serves (call numbered `i`).
    probe: fn(u64) -> (&'static str, Value),
    /// Which version answered a probe: `Some(true)` the new one, `Some(false)` the old one,
    /// `None` neither can be told (an error).
    version: fn(&Value) -> Option<bool>,
    /// How the probe tells them apart, for the report.
    how: &'static str,
}

const PLANNING: Pair = Pair {
    lang: "rust",
    app: "planning",
    old: "planning",
    new: "planning2",
    write: "personal.tasks.*",
    seed: || ("planning_add_task", json!({"title": "Measure the upgrade"})),
    load: |_, _| ("planning_list_tasks", json!({})),
    probe: |_| ("planning_focus", json!({"seconds": 0})),
    // Only 0.2 has `planning_focus`; the old version's namespace refuses it ("no tool").
    version: |v| match v["ok"].as_bool() {
        Some(true) => Some(true),
        Some(false) if v["value"]["error"]["message"] == r#"no tool "planning_focus""# => {
            Some(false)
        }
        _ => None,
    },
    how: "planning_focus {seconds: 0}: answered by 0.2, unknown to 0.1",
};

const BOOKMARKS: Pair = Pair {
    lang: "js",
    app: "bookmarks",
    old: "bookmarks",
    new: "bookmarks2",
    write: "personal.notes.bookmarks",
    seed: || {
        let url = "https://example.com/bench";
        ("bookmarks_add", json!({"url": url, "tags": ["bench"]}))
    },
    // The one tool both versions have (a new link each time: a write).
    load: |c, i| {
        let url = format!("https://example.com/load/{c}/{i}");
        ("bookmarks_add", json!({"url": url, "tags": ["bench"]}))
    },
    probe: |i| {
        let url = format!("https://example.com/probe/{i}");
        ("bookmarks_add", json!({"url": url}))
    },
    // 0.1 answers `{id, version, added, tags}`, 0.2 `{id, version}`.
    version: |v| {
        if v["ok"] != true {
            return None;
        }
        let r = result_of(v);
        r.get("id")?;
        Some(r.get("added").is_none())
    },
    how: "bookmarks_add: 0.1 answers `added`, 0.2 does not",
};

/// Install by reference (plan, then confirm) of a component pushed with `wkg`, then an upgrade
/// and a rollback while `CALLERS` callers call one of the app's tools through `/apps/call/`.
pub(crate) fn section_registry(b: &mut Bench) -> Vec<Figure> {
    let pairs: &[Pair] = if b.opts.quick {
        &[PLANNING]
    } else {
        &[BOOKMARKS, PLANNING]
    };
    let files: Vec<&str> = pairs.iter().flat_map(|p| [p.old, p.new]).collect();
    let Some(plugins) = wasm::built_plugins(&files) else {
        return vec![];
    };
    let tools = crate::kit::registry::oci_tools();
    if !tools.join("docker-registry").is_file() || !tools.join("bin/wkg").is_file() {
        skip("registry: no registry or wkg under target/oci-tools (run scripts/fetch-oci-tools)");
        return vec![];
    }
    progress(format!(
        "{}: {} (components {})",
        if b.opts.quick { "quick" } else { "full run" },
        pairs
            .iter()
            .map(|p| format!("{} ({})", p.app, p.lang))
            .collect::<Vec<_>>()
            .join(", "),
        files.join(", ")
    ));
    let reg = Registry::start();
    // A database of its own, with its own compile cache: the first install compiles cold.
    let tmp = tempfile::tempdir().expect("a database folder");
    let s = Server::start(&b.bin, &tmp.path().join("db"));
    let hold = Duration::from_secs(if b.opts.quick { 1 } else { 3 });
    let mut out = vec![];
    for p in pairs {
        out.extend(measure(&s, &reg, &plugins, p, hold));
    }
    s.stop();
    out
}

fn measure(s: &Server, reg: &Registry, plugins: &Path, p: &Pair, hold: Duration) -> Vec<Figure> {
    let lang = p.lang;
    let mut out = vec![];
    let manifest = |version: &str| {
        json!({"name": p.app, "description": "bench", "version": version,
               "rights": {"write": [p.write], "ddl": true}})
        .to_string()
    };
    // Published with the real client.
    let old_file = plugins.join(format!("{}.wasm", p.old));
    let new_file = plugins.join(format!("{}.wasm", p.new));
    let size_mb = std::fs::metadata(&old_file).map(|m| m.len()).unwrap_or(0) as f64 / 1e6;
    let t0 = Instant::now();
    let repo = format!("bench/{}", p.app);
    let m1 = manifest("0.1.0");
    let d1 = reg.push(
        &format!("{repo}:0.1.0"),
        &old_file,
        &[("dev.datanotes.app", &m1)],
    );
    let push = t0.elapsed().as_secs_f64();
    let m2 = manifest("0.2.0");
    let d2 = reg.push(
        &format!("{repo}:0.2.0"),
        &new_file,
        &[("dev.datanotes.app", &m2)],
    );
    progress(format!(
        "{} ({lang}, {size_mb:.1} MB) pushed with wkg in {push:.2} s",
        p.old
    ));
    out.push(Figure::new(S, format!("push_{lang}_s"), push, "s"));

    // Install by reference: the plan (pull, verify, compile cold, list), then the confirm.
    let source = reg.reference(&format!("{repo}:0.1.0"));
    let t0 = Instant::now();
    let v = s.call(
        "apps/create",
        json!({"source": source, "write": [p.write], "ddl": true}),
    );
    let plan_ms = t0.elapsed().as_secs_f64() * 1e3;
    let plan = &v["plan"];
    assert_eq!(plan["digest"], d1, "the plan of {source}: {v}");
    let confirm = plan["confirm"].clone();
    assert_eq!(confirm["confirm"], true, "the plan's confirm body: {v}");
    let t0 = Instant::now();
    let v = s.call("apps/create", confirm);
    let confirm_ms = t0.elapsed().as_secs_f64() * 1e3;
    assert_eq!(v["app"]["wasm"]["origin"]["digest"], d1, "installed: {v}");
    progress(format!(
        "install {source} ({lang}, {size_mb:.1} MB): plan {plan_ms:.1} ms (pull, verify, cold compile, list), confirm {confirm_ms:.1} ms"
    ));
    out.push(Figure::new(
        S,
        format!("install_plan_{lang}_ms"),
        plan_ms,
        "ms",
    ));
    out.push(Figure::new(
        S,
        format!("install_confirm_{lang}_ms"),
        confirm_ms,
        "ms",
    ));
    for (tool, args) in [(p.seed)(), (p.load)(0, 0)] {
        let v = call_tool(s, tool, &args);
        assert_eq!(v["ok"], true, "{tool} after the install: {v}");
    }

    // The upgrade to 0.2.0 under load (the same rights: no plan; one is confirmed if it comes).
    let src2 = reg.reference(&format!("{repo}:0.2.0"));
    let up = under_load(s, p, hold, true, |mark| {
        mark();
        let v = s.call("apps/upgrade", json!({"name": p.app, "source": src2}));
        if v["plan"].is_object() {
            mark();
            return s.call("apps/upgrade", v["plan"]["confirm"].clone());
        }
        v
    });
    assert_eq!(
        up.answer["upgraded"],
        json!({"from": d1, "to": d2}),
        "{}",
        up.answer
    );
    out.extend(up.report(p, "upgrade", "new"));

    // The rollback under the same load.
    let back = under_load(s, p, hold, false, |mark| {
        mark();
        s.call("apps/rollback", json!({"name": p.app}))
    });
    assert_eq!(
        back.answer["rolledBack"],
        json!({"from": d2, "to": d1}),
        "{}",
        back.answer
    );
    out.extend(back.report(p, "rollback", "old"));
    s.call("apps/delete", json!({"name": p.app}));
    out
}

/// What one upgrade (or rollback) under load gave.
struct Phase {
    /// Calls the callers made, and how many failed (an error, or not `ok`).
    calls: u64,
    failed: u64,
    /// Calls answered while the request ran.
    during: u64,
    /// From sending the (confirming) request until its answer.
    request: Duration,
    /// From sending it until the first probe answered by the version it goes to.
    first: Duration,
    /// The first failures, for the report.
    errors: Vec<String>,
    answer: Value,
}

impl Phase {
    fn report(&self, p: &Pair, what: &str, to: &str) -> Vec<Figure> {
        let lang = p.lang;
        let (req, first) = (
            self.request.as_secs_f64() * 1e3,
            self.first.as_secs_f64() * 1e3,
        );
        progress(format!(
            "{what} of {} ({lang}) under {CALLERS} callers: {} calls, {} failed, {} answered while the request ran; request {req:.1} ms; first call served by the {to} version {first:.1} ms after sending it (probe: {})",
            p.app, self.calls, self.failed, self.during, p.how
        ));
        for e in &self.errors {
            progress(format!("  failed: {e}"));
        }
        vec![
            Figure::new(
                S,
                format!("{what}_calls_{lang}"),
                self.calls as f64,
                "calls",
            ),
            Figure::new(
                S,
                format!("{what}_calls_during_{lang}"),
                self.during as f64,
                "calls",
            ),
            Figure::new(
                S,
                format!("{what}_failed_{lang}"),
                self.failed as f64,
                "calls",
            )
            .correct(Target::AtMost(0.0)),
            Figure::new(S, format!("{what}_request_{lang}_ms"), req, "ms"),
            Figure::new(S, format!("{what}_first_{to}_{lang}_ms"), first, "ms"),
        ]
    }
}

/// Runs `CALLERS` callers of the pair's load tool and one probe, `hold` before and after
/// `action` (which calls `mark` right before sending each request; the last mark counts).
/// `to_new`: which version the probe waits for.
fn under_load(
    s: &Server,
    p: &Pair,
    hold: Duration,
    to_new: bool,
    action: impl FnOnce(&dyn Fn()) -> Value,
) -> Phase {
    let stop = AtomicBool::new(false);
    let (calls, failed) = (AtomicU64::new(0), AtomicU64::new(0));
    let errors = Mutex::new(vec![]);
    let sent: Mutex<Option<Instant>> = Mutex::new(None);
    let seen: Mutex<Option<Instant>> = Mutex::new(None);
    std::thread::scope(|sc| {
        // Stops the threads when this closure ends, a panic too (the scope joins them).
        let _stop = StopOnDrop(&stop);
        for c in 0..CALLERS {
            let (stop, calls, failed, errors) = (&stop, &calls, &failed, &errors);
            sc.spawn(move || {
                let http = client();
                while !stop.load(Ordering::Relaxed) {
                    let (tool, args) = (p.load)(c, SEQ.fetch_add(1, Ordering::Relaxed));
                    let body = json!({"tool": tool, "arguments": args});
                    let r = Server::call_with(&http, &s.url, &s.token, "apps/call", &body);
                    calls.fetch_add(1, Ordering::Relaxed);
                    let bad = match r {
                        Ok(v) if v["ok"] == true => None,
                        Ok(v) => Some(format!("{tool}: {v}")),
                        Err(e) => Some(e),
                    };
                    if let Some(e) = bad {
                        failed.fetch_add(1, Ordering::Relaxed);
                        let mut errs = errors.lock().unwrap();
                        if errs.len() < 5 {
                            errs.push(e);
                        }
                    }
                }
            });
        }
        // The probe, in a tight loop: the first of its calls sent after the request and
        // answered by the version it waits for marks the switch.
        let (stop_ref, sent_ref, seen_ref) = (&stop, &sent, &seen);
        let probe = sc.spawn(move || {
            let http = client();
            while !stop_ref.load(Ordering::Relaxed) {
                let (tool, args) = (p.probe)(SEQ.fetch_add(1, Ordering::Relaxed));
                let mark = *sent_ref.lock().unwrap();
                let body = json!({"tool": tool, "arguments": args});
                let r = Server::call_with(&http, &s.url, &s.token, "apps/call", &body);
                let at = Instant::now();
                if let (Some(_), Ok(v)) = (mark, r)
                    && (p.version)(&v) == Some(to_new)
                {
                    *seen_ref.lock().unwrap() = Some(at);
                    return;
                }
            }
        });
        std::thread::sleep(hold);
        let before = calls.load(Ordering::Relaxed);
        let mark = || *sent.lock().unwrap() = Some(Instant::now());
        let answer = action(&mark);
        let answered = Instant::now();
        let during = calls.load(Ordering::Relaxed) - before;
        let t0 = sent.lock().unwrap().expect("the request was sent");
        let deadline = Instant::now() + Duration::from_secs(120);
        while seen.lock().unwrap().is_none() && !probe.is_finished() {
            assert!(
                Instant::now() < deadline,
                "no probe call served by the {} version 120 s after the request: {answer}",
                if to_new { "new" } else { "old" }
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        std::thread::sleep(hold);
        stop.store(true, Ordering::Relaxed);
        let first = seen.lock().unwrap().expect("the probe saw the version") - t0;
        Phase {
            calls: calls.load(Ordering::Relaxed),
            failed: failed.load(Ordering::Relaxed),
            during,
            request: answered - t0,
            first,
            errors: std::mem::take(&mut *errors.lock().unwrap()),
            answer,
        }
    })
}

/// Sets its flag when dropped.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// `/apps/call/` once: its answer `{ok, value, servedBy}`.
fn call_tool(s: &Server, tool: &str, args: &Value) -> Value {
    s.call("apps/call", json!({"tool": tool, "arguments": args}))
}

/// The text of a call's result.
fn text_of(v: &Value) -> String {
    v["value"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// A call's structured result (or its text read as JSON).
fn result_of(v: &Value) -> Value {
    match v["value"].get("structuredContent") {
        Some(r) if r.is_object() => r.clone(),
        _ => serde_json::from_str(&text_of(v)).unwrap_or(Value::Null),
    }
}
