//! `feed`: page reads over the whole journal, SSE fan-out lag under a write load.

use super::*;

/// The change feed: page reads over the whole journal, then SSE fan-out lag under a write load.
pub(crate) fn section_feed(b: &mut Bench) -> Vec<Figure> {
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
        Figure::new(S, "sse_events_missing", missing as f64, "events").correct(Target::AtMost(0.0)),
    ];
    out.extend(l.figures(S, "sse_lag", None));
    if let Some(f) = out.iter_mut().find(|f| f.name == "sse_lag_p99_ms") {
        f.target = Some(Target::AtMost(100.0));
    }
    out
}
