//! `telemetry`: what tracing costs a call. Three servers side by side, one run, interleaved
//! calls of the trivial WASM tool over `/mcp`: traces off; on, exporting to a local receiver
//! (a loopback HTTP server that takes each export and answers 200); on, with the receiver gone
//! (nothing listens). Then a burst at about 1,000 calls a second with tracing on: the server's
//! CPU and peak memory.

use super::agg::mcp_raw_request;
use super::side_by_side::SideBySide;
use super::*;

/// A receiver on loopback that answers every request 200 once its body is read.
fn receiver() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}", l.local_addr().unwrap());
    std::thread::spawn(move || {
        for c in l.incoming().flatten() {
            std::thread::spawn(move || {
                use std::io::{Read, Write};
                let mut r = BufReader::new(c);
                loop {
                    let mut len = 0usize;
                    let mut line = String::new();
                    loop {
                        line.clear();
                        if r.read_line(&mut line).unwrap_or(0) == 0 {
                            return;
                        }
                        let l = line.to_ascii_lowercase();
                        if let Some(v) = l.strip_prefix("content-length:") {
                            len = v.trim().parse().unwrap_or(0);
                        }
                        if line == "\r\n" {
                            break;
                        }
                    }
                    let mut body = vec![0u8; len];
                    if r.read_exact(&mut body).is_err() {
                        return;
                    }
                    let ok = b"HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n";
                    if r.get_mut().write_all(ok).is_err() {
                        return;
                    }
                }
            });
        }
    });
    url
}

pub(crate) fn section_telemetry(b: &mut Bench) -> Vec<Figure> {
    const S: &str = "telemetry";
    let on_url = receiver();
    let gone_url = format!("http://127.0.0.1:{}", {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    });
    let endpoint = "OTEL_EXPORTER_OTLP_ENDPOINT";
    let Some(side) = SideBySide::start(
        S,
        &[
            (&b.bin, "off", &[]),
            (&b.bin, "on", &[(endpoint, on_url.as_str())]),
            (&b.bin, "gone", &[(endpoint, gone_url.as_str())]),
        ],
    ) else {
        return vec![];
    };
    let (servers, sids, http, rt) = (&side.servers, &side.sids, &side.http, &side.rt);
    let on = &servers[1];
    let call = |k: usize| side.noop(k);
    let n = b.opts.side_calls;
    let cpu0: Vec<f64> = servers.iter().map(|s| s.cpu_s()).collect();
    let mut samples = [vec![], vec![], vec![]];
    for i in 0..50 + n {
        // Each server in turn, the order rotating: none always follows another.
        for j in 0..3 {
            let k = (i + j) % 3;
            let d = call(k);
            if i >= 50 {
                samples[k].push(d);
            }
        }
    }
    let calls = (50 + n) as f64;
    let cpu_us: Vec<f64> = (0..3)
        .map(|k| (servers[k].cpu_s() - cpu0[k]) * 1e6 / calls)
        .collect();
    progress(format!(
        "server CPU per call: traces off {:.0} µs, on {:.0} µs, receiver gone {:.0} µs",
        cpu_us[0], cpu_us[1], cpu_us[2]
    ));
    let [l_off, l_on, l_gone] = samples.map(|s| Latency::of(&s));
    progress(format!(
        "WASM noop over /mcp p50: traces off {:.3} ms, on {:.3} ms ({:.3}x), receiver gone {:.3} ms ({:.3}x)",
        l_off.p50,
        l_on.p50,
        l_on.p50 / l_off.p50,
        l_gone.p50,
        l_gone.p50 / l_off.p50
    ));
    // A burst at about 1,000 calls a second with traces on (two clients at 500 a second each).
    let secs = if b.opts.quick { 3.0 } else { 60.0 };
    let (cpu0, t0) = (on.cpu_s(), Instant::now());
    let done = rt.block_on(async {
        let mut tasks = vec![];
        for _ in 0..2 {
            let (http, url, token, sid) = (
                http.clone(),
                on.url.clone(),
                on.token.clone(),
                sids[1].clone(),
            );
            tasks.push(tokio::spawn(async move {
                let mut tick = tokio::time::interval(Duration::from_micros(2000));
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                let mut n = 0u64;
                let end = Instant::now() + Duration::from_secs_f64(secs);
                while Instant::now() < end {
                    tick.tick().await;
                    mcp_raw_request(
                        &http,
                        &url,
                        &token,
                        &sid,
                        "tools/call",
                        SideBySide::noop_params(),
                    )
                    .await;
                    n += 1;
                }
                n
            }));
        }
        let mut n = 0;
        for t in tasks {
            n += t.await.unwrap_or(0);
        }
        n
    });
    let wall = t0.elapsed().as_secs_f64();
    let cpu = on.cpu_s() - cpu0;
    let rate = done as f64 / wall;
    let rss = on.peak_rss_mib();
    progress(format!(
        "traces on, {done} calls in {wall:.1} s ({rate:.0}/s): server CPU {:.0}% of a core, peak RSS {rss:.1} MiB",
        100.0 * cpu / wall
    ));
    side.stop();
    let mut out = vec![];
    out.extend(
        l_off
            .figures(S, "wasm_noop_traces_off", None)
            .into_iter()
            .take(2),
    );
    out.extend(
        l_on.figures(S, "wasm_noop_traces_on", None)
            .into_iter()
            .take(2),
    );
    out.extend(
        l_gone
            .figures(S, "wasm_noop_receiver_gone", None)
            .into_iter()
            .take(2),
    );
    out.push(
        Figure::new(S, "traces_on_over_off_p50", l_on.p50 / l_off.p50, "x")
            .target(Target::AtMost(1.05)),
    );
    out.push(
        Figure::new(S, "receiver_gone_over_off_p50", l_gone.p50 / l_off.p50, "x")
            .target(Target::AtMost(1.05)),
    );
    out.push(Figure::new(S, "traced_burst_calls_per_s", rate, "calls/s"));
    out.push(Figure::new(
        S,
        "traced_burst_cpu_cores",
        cpu / wall,
        "cores",
    ));
    out.push(Figure::new(S, "traced_burst_peak_rss", rss, "MiB"));
    out
}
