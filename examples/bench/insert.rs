//! `insert`: durable writes from concurrent clients.

use super::*;

/// Durable `insert_row` from concurrent clients (each waits for its answer), into the big table.
pub(crate) fn section_insert(b: &mut Bench) -> Vec<Figure> {
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
