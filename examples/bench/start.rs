//! `start`: restarts over an intact index.

use super::*;

/// Start over an intact index: stop cleanly, start again, time until health answers.
pub(crate) fn section_start(b: &mut Bench) -> Vec<Figure> {
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
