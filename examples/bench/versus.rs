//! `versus`: this build against another, in one run. `BENCH_BASELINE_BIN=PATH` names the other
//! server binary (an earlier commit's, built with the same profile); without it, this build runs
//! against itself, an A/A run whose ratios show the noise of the machine. Two servers side by
//! side, each with the planning WASM app; on one raw MCP session each, a `ping` and a
//! `tools/call` of the trivial WASM tool, the servers taking turns so that neither always
//! follows the other. The ratios are this build's p50 over the baseline's.

use super::side_by_side::SideBySide;
use super::*;

pub(crate) fn section_versus(b: &mut Bench) -> Vec<Figure> {
    const S: &str = "versus";
    let baseline = std::env::var_os("BENCH_BASELINE_BIN").map(std::path::PathBuf::from);
    if let Some(p) = &baseline
        && !p.is_file()
    {
        skip(format!(
            "versus: BENCH_BASELINE_BIN={} is no file",
            p.display()
        ));
        return vec![];
    }
    let base_bin = baseline.clone().unwrap_or_else(|| b.bin.clone());
    progress(format!(
        "baseline: {}{}",
        base_bin.display(),
        if baseline.is_none() {
            " (this build: an A/A run; set BENCH_BASELINE_BIN for another)"
        } else {
            ""
        }
    ));
    let Some(side) = SideBySide::start(S, &[(&base_bin, "baseline", &[]), (&b.bin, "this", &[])])
    else {
        return vec![];
    };
    let n = b.opts.side_calls;
    let (mut pings, mut calls) = ([vec![], vec![]], [vec![], vec![]]);
    for i in 0..50 + n {
        for j in 0..2 {
            let k = (i + j) % 2;
            let (p, c) = (side.ping(k), side.noop(k));
            if i >= 50 {
                pings[k].push(p);
                calls[k].push(c);
            }
        }
    }
    side.stop();
    let [p_base, p_this] = pings.map(|s| Latency::of(&s));
    let [c_base, c_this] = calls.map(|s| Latency::of(&s));
    let (rp, rc) = (p_this.p50 / p_base.p50, c_this.p50 / c_base.p50);
    progress(format!(
        "MCP ping p50: baseline {:.3} ms, this build {:.3} ms ({rp:.3}x); WASM noop p50: baseline {:.3} ms, this build {:.3} ms ({rc:.3}x)",
        p_base.p50, p_this.p50, c_base.p50, c_this.p50
    ));
    // The targets hold against another build; an A/A run's ratios are the noise.
    let judged = |f: Figure, at_most: f64| match baseline {
        Some(_) => f.target(Target::AtMost(at_most)),
        None => f,
    };
    let mut out = vec![];
    out.extend(p_base.figures(S, "ping_baseline", None).into_iter().take(1));
    out.extend(p_this.figures(S, "ping_this", None).into_iter().take(1));
    out.extend(
        c_base
            .figures(S, "wasm_noop_baseline", None)
            .into_iter()
            .take(1),
    );
    out.extend(
        c_this
            .figures(S, "wasm_noop_this", None)
            .into_iter()
            .take(1),
    );
    out.push(judged(
        Figure::new(S, "ping_over_baseline_p50", rp, "x"),
        1.03,
    ));
    out.push(judged(
        Figure::new(S, "wasm_noop_over_baseline_p50", rc, "x"),
        1.05,
    ));
    out
}
