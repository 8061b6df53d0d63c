//! Benchmarks of the real `datanotes` server, over HTTP, on a temporary database.
//!
//! ```sh
//! cargo build --release
//! cargo run --release --example bench                 # 100,000 rows
//! cargo run --release --example bench -- --quick      # 10,000 rows, fewer calls
//! cargo run --release --example bench -- --json       # one JSON object of named figures on stdout
//! cargo run --release --example bench -- --rows 30000 --insert-secs 10   # other sizes
//! cargo run --release --example bench -- --only feed,wasm    # the load section, then these
//! cargo run --release --example bench -- --quick --only wasm_cancel   # a cancelled WASM call
//! cargo run --release --example bench -- --only registry   # install from an OCI registry, upgrade
//! ```
//!
//! The server binary is `target/release/datanotes` (`target/debug/` for a debug build of the
//! bench), found next to this example's own executable (`DATANOTES_BIN` overrides it). When run
//! through cargo, the bench first asks cargo to bring that binary up to date, so it never
//! measures a stale build (`--no-build` skips that). Built without
//! `--release`, it runs the debug server and gives verdicts only on the figures about correctness
//! (failed calls, lost events: `scripts/test` does that, without a second, optimised build of
//! everything). In any build, a section that cannot run (a missing component or tool) or a
//! figure about correctness that misses its target fails the run (exit 1).
//!
//! Each section is one file here with one function `fn(&mut Bench) -> Vec<Figure>` listed in
//! [`SECTIONS`]; they share a server (`Bench::server`, `Bench::restart`, in `server.rs`) and the
//! percentile helper ([`Latency::of`], in `figures.rs`). The server is started, and remote apps and
//! MCP sessions are opened, by the end-to-end tests' kit (`tests/e2e/kit/`, included by path).
//! Progress goes to stderr; the report (table or JSON) to stdout.

#[path = "../../tests/e2e/kit/mod.rs"]
mod kit;

mod agg;
mod feed;
mod figures;
mod insert;
mod load;
mod oauth;
mod opts;
mod quality;
mod registry;
mod resources;
mod select;
mod semantic;
mod server;
mod side_by_side;
mod start;
mod telemetry;
mod tools;
mod typed;
mod versus;
mod wasm;
mod wasm_cancel;

// What every file of the bench uses: each starts with `use super::*;`.
use figures::*;
use opts::Opts;
use server::*;

use datanotes::engine::files;
use datanotes::engine::schema::Table;
use rmcp::model::CallToolRequestParams;
use serde_json::{Map, Value, json};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

const TABLE: &str = "bench.perf.items";
const STATUSES: [&str; 4] = ["todo", "doing", "done", "blocked"];
const OWNERS: [&str; 20] = [
    "ada", "alan", "barbara", "claude", "donald", "edsger", "frances", "grace", "john", "ken",
    "leslie", "linus", "margaret", "niklaus", "radia", "robin", "shafi", "sophie", "tony",
    "yukihiro",
];
const WORDS: [&str; 24] = [
    "index", "journal", "markdown", "sqlite", "ranking", "query", "table", "schema", "write",
    "durable", "commit", "fsync", "note", "folder", "change", "feed", "token", "engine", "batch",
    "filter", "column", "search", "value", "row",
];

/// A section: sets up what it needs on the shared bench, measures, answers named figures.
type Section = fn(&mut Bench) -> Vec<Figure>;

/// The sections, in order.
const SECTIONS: &[(&str, Section)] = &[
    ("load", load::section_load),
    ("start", start::section_start),
    ("select", select::section_select),
    ("insert", insert::section_insert),
    ("feed", feed::section_feed),
    ("agg", agg::section_aggregator),
    ("resources", resources::section_resources),
    ("oauth", oauth::section_oauth),
    ("wasm", wasm::section_wasm),
    ("wasm_cancel", wasm_cancel::section_wasm_cancel),
    ("registry", registry::section_registry),
    ("typed", typed::section_typed),
    ("semantic", semantic::section_semantic),
    ("quality", quality::section_quality),
    ("tools", tools::section_tools),
    ("telemetry", telemetry::section_telemetry),
    ("versus", versus::section_versus),
];

/// The server binary: `DATANOTES_BIN`, else `datanotes` beside this example's folder.
fn server_bin() -> PathBuf {
    match std::env::var_os("DATANOTES_BIN") {
        Some(p) => PathBuf::from(p),
        None => kit::bin(),
    }
}

/// Under cargo, makes sure the server binary is built from the current sources.
fn build_server(opts: &Opts) {
    let Some(cargo) = std::env::var_os("CARGO").filter(|_| opts.build) else {
        return;
    };
    if std::env::var_os("DATANOTES_BIN").is_some() {
        return;
    }
    // With the profile this bench was built with: its server sits next to it.
    progress(format!(
        "cargo build{RELEASE_FLAG} --bin datanotes --example remote_app"
    ));
    let ok = Command::new(cargo)
        .args(["build", "--quiet", "--bin", "datanotes"])
        .args(RELEASE.then_some("--release"))
        .args(["--example", "remote_app"])
        .arg("--manifest-path")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml"))
        .stdout(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !ok {
        eprintln!("building the server failed; run `cargo build{RELEASE_FLAG}` and retry");
        std::process::exit(1);
    }
}

/// Built with optimisations: only then are the figures the product's, and checked against their
/// targets. A debug build (`scripts/test` runs one, to check that every section runs without a
/// second, optimised build of everything) reports its figures without a verdict.
const RELEASE: bool = !cfg!(debug_assertions);
/// What builds the server this bench runs.
const RELEASE_FLAG: &str = if RELEASE { " --release" } else { "" };

fn fmt_value(v: f64) -> String {
    if v.is_nan() {
        "-".into()
    } else if (v.fract() == 0.0 && v.abs() < 1e12) || v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

fn main() {
    let opts = Opts::parse();
    build_server(&opts);
    let bin = server_bin();
    if !bin.is_file() {
        eprintln!(
            "no server binary at {}: run `cargo build{RELEASE_FLAG}` first (or set DATANOTES_BIN)",
            bin.display()
        );
        std::process::exit(1);
    }
    let tmp = tempfile::Builder::new()
        .prefix("datanotes-bench-")
        .tempdir()
        .expect("temp folder");
    let dir = tmp.path().join("db");
    progress(format!(
        "server {} over {} ({} rows{})",
        bin.display(),
        dir.display(),
        opts.rows,
        if opts.quick { ", quick" } else { "" }
    ));
    if !RELEASE {
        progress(DEBUG_NOTE);
    }
    let mut b = Bench {
        opts,
        bin,
        dir,
        _tmp: tmp,
        server: None,
    };
    let t0 = Instant::now();
    let mut figures = vec![];
    for (name, section) in SECTIONS {
        if *name != "load" && !b.opts.only.is_empty() && !b.opts.only.iter().any(|o| o == name) {
            continue;
        }
        progress(format!("== {name}"));
        let started = Instant::now();
        figures.extend(section(&mut b));
        progress(format!(
            "== {name} took {:.1} s",
            started.elapsed().as_secs_f64()
        ));
    }
    b.stop();
    let total = t0.elapsed().as_secs_f64();
    if b.opts.json {
        let mut o = Map::new();
        o.insert("quick".into(), json!(b.opts.quick));
        o.insert("release_build".into(), json!(RELEASE));
        for f in &figures {
            o.insert(f.name.clone(), json!(f.value));
        }
        o.insert("bench_total_s".into(), json!(total));
        let missed: Vec<&str> = figures
            .iter()
            .filter(|f| verdict(f) == Some(false))
            .map(|f| f.name.as_str())
            .collect();
        o.insert("missed_targets".into(), json!(missed));
        println!("{}", Value::Object(o));
        fail_on_wrong(&figures);
        return;
    }
    println!(
        "{:<8} {:<28} {:>12} {:<7} {:>12}",
        "section", "figure", "value", "unit", "target"
    );
    for f in &figures {
        let target = match f.target {
            None => String::new(),
            Some(Target::AtMost(x)) => format!("<= {}", fmt_value(x)),
            Some(Target::AtLeast(x)) => format!(">= {}", fmt_value(x)),
        };
        let mark = match verdict(f) {
            Some(true) => "ok",
            Some(false) => "MISSED",
            None => "",
        };
        println!(
            "{:<8} {:<28} {:>12} {:<7} {:>12} {mark}",
            f.section,
            f.name,
            fmt_value(f.value),
            f.unit,
            target
        );
    }
    println!("(bench ran {total:.1} s)");
    if !RELEASE {
        println!("{DEBUG_NOTE}");
    }
    fail_on_wrong(&figures);
}

const DEBUG_NOTE: &str = "a debug build: the figures are not the product's and only those about \
    correctness are checked against their targets (cargo run --release --example bench checks \
    them all)";

/// Whether a figure met its target; of a debug build's figures, said only of those about
/// correctness.
fn verdict(f: &Figure) -> Option<bool> {
    if RELEASE || f.correctness {
        f.met()
    } else {
        None
    }
}

/// Fails the run (exit 1) when a section was skipped or a figure about correctness missed its
/// target, in any build; speed targets missed are reported, not failed.
fn fail_on_wrong(figures: &[Figure]) {
    let skipped = skipped();
    let wrong: Vec<String> = figures
        .iter()
        .filter(|f| f.correctness && f.met() == Some(false))
        .map(|f| format!("{} = {}", f.name, fmt_value(f.value)))
        .collect();
    if skipped.is_empty() && wrong.is_empty() {
        return;
    }
    for s in &skipped {
        eprintln!("bench: skipped, and every section must run: {s}");
    }
    for w in &wrong {
        eprintln!("bench: wrong: {w}");
    }
    std::process::exit(1);
}
