//! `semantic`: the semantic index's costs, each "index on ÷ off" ratio measured in this run.
//!
//! The big table's files (the `load` section's) are copied as a checkout into two new folders;
//! one is served without a model (off), the other with the default model (on). Measured: the
//! model's embedding rate on one core (in this process), the first start over the copies, the
//! memory of the index, `rebuild_semantic_index`, hybrid searches, durable inserts on and off
//! (alternated), the catch-up lag of writes paced at 1,000/s, and a burst of writes.

use super::*;
use datanotes::engine::semantic::model::Model;

/// A copy of the big table's files (its definition and rows) in a new database folder.
fn checkout(b: &Bench, name: &str) -> PathBuf {
    let dir = b.dir.with_file_name(name);
    let src = files::table_dir(&b.dir, TABLE);
    let dst = files::table_dir(&dir, TABLE);
    std::fs::create_dir_all(&dst).expect("checkout folder");
    for e in std::fs::read_dir(&src).expect("table folder").flatten() {
        let n = e.file_name();
        let n = n.to_string_lossy();
        if n == files::TABLE_FILE || n.ends_with(".md") {
            std::fs::copy(e.path(), dst.join(&*n)).expect("copy a row file");
        }
    }
    dir
}

/// The owner's view of the semantic index.
pub(crate) fn status(s: &Server) -> Value {
    let v: Value = s
        .http
        .get(format!("{}/datanotes/health", s.url))
        .bearer_auth(&s.token)
        .send()
        .and_then(|r| r.json())
        .expect("health");
    v
}

/// Waits until the index is ready and covers every commit; answers the time it took.
pub(crate) fn caught_up(s: &Server) -> Duration {
    let t0 = Instant::now();
    loop {
        let v = status(s);
        let sem = &v["semantic"];
        if sem["state"] == "ready" && sem["indexedThrough"].as_i64() >= v["seq"].as_i64() {
            return t0.elapsed();
        }
        assert!(
            t0.elapsed() < Duration::from_secs(900),
            "the semantic index did not catch up: {v}"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Durable inserts from `clients` clients for `run_for`: rows per second.
fn insert_rate(s: &Server, clients: usize, run_for: Duration, tag: &str) -> f64 {
    let stop = Arc::new(AtomicBool::new(false));
    let t0 = Instant::now();
    let handles: Vec<_> = (0..clients)
        .map(|c| {
            let (url, token, stop) = (s.url.clone(), s.token.clone(), stop.clone());
            let tag = tag.to_string();
            std::thread::spawn(move || {
                let http = client();
                let mut rng = Rng(0xfeed ^ ((c as u64 + 1) << 24));
                let mut n = 0usize;
                while !stop.load(Ordering::Relaxed) {
                    let (values, body) = row_values(&mut rng, n);
                    let args = json!({"table": TABLE, "id": format!("{tag}-{c}-{n:07}"), "values": values, "body": body});
                    Server::call_with(&http, &url, &token, "insert_row", &args)
                        .unwrap_or_else(|e| panic!("{e}"));
                    n += 1;
                }
                n
            })
        })
        .collect();
    std::thread::sleep(run_for);
    stop.store(true, Ordering::Relaxed);
    let n: usize = handles.into_iter().map(|h| h.join().expect("client")).sum();
    n as f64 / t0.elapsed().as_secs_f64()
}

/// Writes paced at `rate` per second for `run_for`; answers each write's lag: from its
/// acknowledgement to the first moment the index said it covers its seq.
fn paced_lags(s: &Server, rate: usize, run_for: Duration) -> Vec<Duration> {
    let clients = 8;
    let start = Instant::now() + Duration::from_millis(200);
    let stop = Arc::new(AtomicBool::new(false));
    // The index's progress, polled every millisecond: (when, indexedThrough).
    let poller = {
        let (url, token, stop) = (s.url.clone(), s.token.clone(), stop.clone());
        std::thread::spawn(move || {
            let http = client();
            let mut seen = vec![];
            while !stop.load(Ordering::Relaxed) {
                let v: Value = http
                    .get(format!("{url}/datanotes/health"))
                    .bearer_auth(&token)
                    .send()
                    .and_then(|r| r.json())
                    .expect("health");
                seen.push((
                    Instant::now(),
                    v["semantic"]["indexedThrough"].as_i64().unwrap_or(0),
                ));
                std::thread::sleep(Duration::from_millis(1));
            }
            seen
        })
    };
    let writers: Vec<_> = (0..clients)
        .map(|c| {
            let (url, token) = (s.url.clone(), s.token.clone());
            std::thread::spawn(move || {
                let http = client();
                let mut rng = Rng(0xabc ^ ((c as u64 + 1) << 28));
                let every = Duration::from_secs_f64(clients as f64 / rate as f64);
                let mut acks = vec![];
                let mut n = 0usize;
                loop {
                    let due = start + every * n as u32 + every.mul_f64(c as f64 / clients as f64);
                    if due > start + run_for {
                        break;
                    }
                    if let Some(wait) = due.checked_duration_since(Instant::now()) {
                        std::thread::sleep(wait);
                    }
                    let (values, body) = row_values(&mut rng, n);
                    let args = json!({"table": TABLE, "id": format!("lag-{c}-{n:07}"), "values": values, "body": body});
                    let r = Server::call_with(&http, &url, &token, "insert_row", &args)
                        .unwrap_or_else(|e| panic!("{e}"));
                    acks.push((r["seq"].as_i64().unwrap(), Instant::now()));
                    n += 1;
                }
                acks
            })
        })
        .collect();
    let acks: Vec<(i64, Instant)> = writers
        .into_iter()
        .flat_map(|h| h.join().expect("writer"))
        .collect();
    caught_up(s);
    std::thread::sleep(Duration::from_millis(5));
    stop.store(true, Ordering::Relaxed);
    let seen = poller.join().expect("poller");
    acks.iter()
        .map(|(seq, at)| {
            let covered = seen
                .iter()
                .find(|(when, through)| through >= seq && when >= at)
                .map_or(Instant::now(), |p| p.0);
            covered.saturating_duration_since(*at)
        })
        .collect()
}

pub(crate) fn section_semantic(b: &mut Bench) -> Vec<Figure> {
    const S: &str = "semantic";
    let model_dir = kit::model_dir();
    let model_env = model_dir.to_str().expect("model path").to_string();
    let quick = b.opts.quick;
    let mut out = vec![];

    // The model alone: texts of about 300 characters, embedded on this thread.
    let model = Model::load(&model_dir, Path::new("/")).expect("the default model loads");
    let mut rng = Rng(0x7e57);
    let texts: Vec<String> = (0..if quick { 5_000 } else { 40_000 })
        .map(|i| {
            let (v, body) = row_values(&mut rng, i);
            let mut t = format!("{}\n{body}", v["title"].as_str().unwrap());
            t.truncate(300);
            t
        })
        .collect();
    let t0 = Instant::now();
    for batch in texts.chunks(512) {
        model.embed(batch).expect("embedded");
    }
    let rate = texts.len() as f64 / t0.elapsed().as_secs_f64();
    progress(format!(
        "embedding: {rate:.0} rows/s of ~300 characters, one thread"
    ));
    out.push(
        Figure::new(S, "semantic_embed_rows_per_s", rate, "rows/s")
            .target(Target::AtLeast(20_000.0)),
    );
    drop(model);

    // Two checkouts of the big table: first starts off and on.
    b.stop();
    let off_dir = checkout(b, "db-off");
    let on_dir = checkout(b, "db-on");
    let off = Server::start(&b.bin, &off_dir);
    let off_start = off.started_in.as_secs_f64();
    let on = Server::start_env(&b.bin, &on_dir, &[("DATANOTES_MODEL", &model_env)]);
    let on_start = on.started_in.as_secs_f64();
    let on_ready = on_start + caught_up(&on).as_secs_f64();
    let st = status(&on)["semantic"].clone();
    let rows = st["rows"].as_u64().unwrap_or(0);
    // The earlier sections may have added rows to the table: as many as the off server has.
    let want = off.call("describe_table", json!({"table": TABLE}))["rows"].as_u64();
    assert_eq!(Some(rows), want, "every row is in the index: {st}");
    let mib = st["memoryBytes"].as_f64().unwrap_or(f64::NAN) / 1048576.0;
    progress(format!(
        "first start over {rows} rows: off {off_start:.2} s, on {on_start:.2} s (index ready at {on_ready:.2} s); index {mib:.1} MiB"
    ));
    out.extend([
        Figure::new(S, "semantic_first_start_off_s", off_start, "s"),
        Figure::new(S, "semantic_first_start_on_s", on_start, "s"),
        Figure::new(S, "semantic_first_ready_on_s", on_ready, "s"),
        Figure::new(
            S,
            "semantic_first_start_on_over_off",
            on_start / off_start,
            "x",
        ),
        Figure::new(
            S,
            "semantic_first_ready_on_over_off",
            on_ready / off_start,
            "x",
        )
        .target(Target::AtMost(1.5)),
        Figure::new(S, "semantic_memory_mib", mib, "MiB").target(Target::AtMost(40.0)),
        Figure::new(
            S,
            "semantic_rss_on_minus_off_mib",
            rss_mib(&on) - rss_mib(&off),
            "MiB",
        ),
    ]);

    // A rebuild over every row.
    let t0 = Instant::now();
    let r = on.call("rebuild_semantic_index", json!({}));
    let rebuild = t0.elapsed().as_secs_f64();
    progress(format!("rebuild_semantic_index: {rebuild:.2} s ({r})"));
    out.push(Figure::new(S, "semantic_rebuild_s", rebuild, "s").target(Target::AtMost(10.0)));

    // Hybrid searches, top 10.
    let mut rng = Rng(0x5ea);
    let calls = if quick { 50 } else { 300 };
    let mut samples = vec![];
    for i in 0..calls + 10 {
        let q = format!(
            "how do I {} the {} {}",
            rng.pick(&WORDS),
            rng.pick(&WORDS),
            rng.pick(&WORDS)
        );
        let t0 = Instant::now();
        let v = on.call("search_notes", json!({"query": q, "limit": 10}));
        if i >= 10 {
            samples.push(t0.elapsed());
        }
        assert_eq!(v["mode"], "hybrid", "{v}");
    }
    let l = Latency::of(&samples);
    progress(format!(
        "search_notes hybrid top 10: p50 {:.2} ms, p99 {:.2} ms",
        l.p50, l.p99
    ));
    out.push(Figure::new(S, "semantic_hybrid_p50_ms", l.p50, "ms").target(Target::AtMost(10.0)));
    out.push(Figure::new(S, "semantic_hybrid_p99_ms", l.p99, "ms").target(Target::AtMost(30.0)));

    // Durable inserts, off and on, alternated.
    let (clients, run_for) = (b.opts.insert_clients, b.opts.insert_time / 2);
    let mut rates = (vec![], vec![]);
    for round in 0..if quick { 1 } else { 3 } {
        rates
            .0
            .push(insert_rate(&off, clients, run_for, &format!("off{round}")));
        rates
            .1
            .push(insert_rate(&on, clients, run_for, &format!("on{round}")));
    }
    caught_up(&on);
    let (r_off, r_on) = (median(rates.0.clone()), median(rates.1.clone()));
    progress(format!(
        "durable inserts: off {:?}, on {:?} rows/s",
        rates.0, rates.1
    ));
    out.extend([
        Figure::new(S, "semantic_insert_off_rows_per_s", r_off, "rows/s"),
        Figure::new(S, "semantic_insert_on_rows_per_s", r_on, "rows/s"),
        Figure::new(S, "semantic_insert_on_over_off", r_on / r_off, "x")
            .target(Target::AtLeast(0.95)),
    ]);
    drop(off);

    // The catch-up lag of writes paced at 1,000 per second.
    let lags = paced_lags(&on, 1000, Duration::from_secs(if quick { 2 } else { 5 }));
    let l = Latency::of(&lags);
    progress(format!(
        "catch-up lag at 1,000 writes/s ({} writes): p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        l.n, l.p50, l.p99, l.max
    ));
    out.push(Figure::new(S, "semantic_lag_p50_ms", l.p50, "ms"));
    out.push(Figure::new(S, "semantic_lag_p99_ms", l.p99, "ms").target(Target::AtMost(250.0)));

    // A burst: as fast as 16 clients go, then the catch-up; the lag the index reports is read
    // every 5 ms meanwhile.
    let burst = if quick { 2_000 } else { 10_000 };
    let t0 = Instant::now();
    let watching = AtomicBool::new(true);
    let (writes, after, max_lag) = std::thread::scope(|sc| {
        let watcher = sc.spawn(|| {
            let mut max = 0f64;
            while watching.load(Ordering::Relaxed) {
                max = max.max(status(&on)["semantic"]["lagMs"].as_f64().unwrap_or(0.0));
                std::thread::sleep(Duration::from_millis(5));
            }
            max
        });
        let writers: Vec<_> = (0..16)
            .map(|c| {
                let on = &on;
                sc.spawn(move || {
                    let mut rng = Rng(0xb0 ^ ((c as u64 + 1) << 30));
                    for i in (c..burst).step_by(16) {
                        let (values, body) = row_values(&mut rng, i);
                        on.call(
                            "insert_row",
                            json!({"table": TABLE, "id": format!("burst-{i:07}"), "values": values, "body": body}),
                        );
                    }
                })
            })
            .collect();
        writers.into_iter().for_each(|w| w.join().expect("writer"));
        let writes = t0.elapsed().as_secs_f64();
        let after = caught_up(&on).as_secs_f64();
        watching.store(false, Ordering::Relaxed);
        (writes, after, watcher.join().expect("watcher"))
    });
    progress(format!(
        "a burst of {burst} writes in {writes:.2} s: caught up {:.0} ms after the last; the longest lag the index reported {max_lag:.0} ms",
        after * 1e3
    ));
    out.extend([
        Figure::new(S, "semantic_burst_writes", burst as f64, "writes"),
        Figure::new(S, "semantic_burst_catch_up_ms", after * 1e3, "ms"),
        Figure::new(S, "semantic_burst_max_lag_ms", max_lag, "ms"),
    ]);
    on.stop();
    out
}
