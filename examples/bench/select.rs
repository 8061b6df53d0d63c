//! `select`: filtered, sorted and full-text reads of the big table.

use super::*;

/// `select_rows` with one `=` filter over the big table, one client, after a warm-up.
pub(crate) fn section_select(b: &mut Bench) -> Vec<Figure> {
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

pub(crate) fn samples_note(what: &str, samples: &[Duration]) {
    let l = Latency::of(samples);
    progress(format!(
        "select_rows {what} = …: p50 {:.2} ms, p99 {:.2} ms over {} calls",
        l.p50, l.p99, l.n
    ));
}
