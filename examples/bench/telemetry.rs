//! `telemetry`: what tracing costs a call. Three servers side by side, one run, interleaved
//! calls of the trivial WASM tool over `/mcp`: traces off; on, exporting to a local receiver
//! (a loopback HTTP server that takes each export and answers 200); on, with the receiver gone
//! (nothing listens). Three rounds, each with fresh servers; each ratio is the rounds' median. Then a burst at about 1,000 calls a second with tracing on: the server's
//! CPU and peak memory.

use super::agg::mcp_raw_request;
use super::side_by_side::{SideBySide, Spec};
use super::*;

/// Rounds of the side-by-side calls, each with fresh servers.
const ROUNDS: usize = 3;

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
    let specs: [Spec; 3] = [
        (&b.bin, "off", &[]),
        (&b.bin, "on", &[(endpoint, on_url.as_str())]),
        (&b.bin, "gone", &[(endpoint, gone_url.as_str())]),
    ];
    let n = b.opts.side_calls;
    // A server's own process moves its p50 by up to about 2.5 % (an A/A run of three untraced
    // servers): each ratio is the median of ROUNDS rounds, each with three fresh servers.
    let mut samples = [vec![], vec![], vec![]];
    let (mut on_ratios, mut gone_ratios) = (vec![], vec![]);
    let (mut cpu_s, mut calls) = ([0.0; 3], 0.0);
    let mut last = None;
    for round in 0..ROUNDS {
        let Some(side) = SideBySide::start(S, &specs) else {
            return vec![];
        };
        let cpu0: Vec<f64> = side.servers.iter().map(|s| s.cpu_s()).collect();
        let mut round_samples = [vec![], vec![], vec![]];
        for i in 0..50 + n {
            // Each server in turn, the order rotating: none always follows another.
            for j in 0..3 {
                let k = (i + j) % 3;
                let d = side.noop(k);
                if i >= 50 {
                    round_samples[k].push(d);
                }
            }
        }
        for (k, s) in side.servers.iter().enumerate() {
            cpu_s[k] += s.cpu_s() - cpu0[k];
        }
        calls += (50 + n) as f64;
        let [off, on, gone] = round_samples.each_ref().map(|s| Latency::of(s).p50);
        progress(format!(
            "round {}: p50 traces off {off:.3} ms, on {on:.3} ms ({:.3}x), receiver gone \
             {gone:.3} ms ({:.3}x)",
            round + 1,
            on / off,
            gone / off
        ));
        on_ratios.push(on / off);
        gone_ratios.push(gone / off);
        for (all, r) in samples.iter_mut().zip(round_samples) {
            all.extend(r);
        }
        match round + 1 == ROUNDS {
            true => last = Some(side),
            false => side.stop(),
        }
    }
    let side = last.expect("the last round's servers");
    let (servers, sids, http, rt) = (&side.servers, &side.sids, &side.http, &side.rt);
    let on = &servers[1];
    let cpu_us = cpu_s.map(|c| c * 1e6 / calls);
    progress(format!(
        "server CPU per call: traces off {:.0} µs, on {:.0} µs, receiver gone {:.0} µs",
        cpu_us[0], cpu_us[1], cpu_us[2]
    ));
    let (on_ratio, gone_ratio) = (median(on_ratios), median(gone_ratios));
    let [l_off, l_on, l_gone] = samples.map(|s| Latency::of(&s));
    progress(format!(
        "WASM noop over /mcp p50 (all rounds): traces off {:.3} ms, on {:.3} ms, receiver gone \
         {:.3} ms; the rounds' median ratios: on {on_ratio:.3}x, receiver gone {gone_ratio:.3}x",
        l_off.p50, l_on.p50, l_gone.p50
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
    out.push(Figure::new(S, "traces_on_over_off_p50", on_ratio, "x").target(Target::AtMost(1.05)));
    out.push(
        Figure::new(S, "receiver_gone_over_off_p50", gone_ratio, "x").target(Target::AtMost(1.05)),
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
