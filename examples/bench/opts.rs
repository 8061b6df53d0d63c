//! The command line: sizes and switches (`--quick`, `--json`, `--only`, ...).

use super::*;

pub(crate) struct Opts {
    pub(crate) quick: bool,
    pub(crate) json: bool,
    pub(crate) build: bool,
    /// Sections to run (besides `load`, which the others stand on); empty: all.
    pub(crate) only: Vec<String>,
    /// Rows of the big table.
    pub(crate) rows: usize,
    /// Intact-index restarts measured.
    pub(crate) restarts: usize,
    pub(crate) select_warmup: usize,
    pub(crate) select_calls: usize,
    pub(crate) insert_clients: usize,
    pub(crate) insert_time: Duration,
    /// SSE consumers on `/changes/stream` during the write load, and how long the load runs.
    pub(crate) sse_consumers: usize,
    pub(crate) sse_time: Duration,
    /// Clients writing during the SSE fan-out (many, for a high write rate: group commit).
    pub(crate) sse_writers: usize,
    /// Remote apps (20 tools each) behind the aggregator, of which `apps_down` do not answer.
    pub(crate) apps: usize,
    pub(crate) apps_down: usize,
    /// Measured calls of the aggregator and WASM sections.
    pub(crate) app_calls: usize,
    /// Copies of hostile.wasm installed to measure per-app start.
    pub(crate) wasm_copies: usize,
    /// Calls timed on each server of a side-by-side section (`telemetry`, `versus`): enough
    /// that their p50s hold still, but in a quick debug run, whose latencies are not judged,
    /// only enough to show the sections work.
    pub(crate) side_calls: usize,
}

impl Opts {
    pub(crate) fn parse() -> Opts {
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
            side_calls: match (quick, crate::RELEASE) {
                (true, false) => 500,
                (true, true) => 4000,
                (false, _) => 6000,
            },
        }
    }
}
