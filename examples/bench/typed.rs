//! `typed`: typed components (issue 14) against our world, on a database of their own: the
//! same trivial call of a typed Rust tool and of a Rust tool of our world (through
//! `/apps/call/`, then inside the engine), and what listing a typed component's tools costs
//! (derived from its WIT types at install, read from the compile cache at start), as the
//! server reports it in each app's `runtime.listingUs`.

use super::*;

const S: &str = "typed";

/// The trivial calls compared, interleaved call by call: (label, tool, arguments). None makes
/// an engine call.
const TRIVIAL: [(&str, &str, &str); 3] = [
    // Our world (`plugins/test-apps/hostile`, Rust): the guest parses the arguments' JSON text
    // and answers `{"ok": true, "calls": n}` as JSON text.
    ("world", "hostile_ok", "{}"),
    // Typed (`plugins/shapes`, Rust), `describe: func() -> string`: no argument to check, a
    // string converted back.
    ("typed", "shapes_geometry_describe", "{}"),
    // Typed, `hello: func(name: string) -> string`: one argument checked against its type and
    // converted, a string back.
    ("typed_arg", "shapes_hello", r#"{"name": "bench"}"#),
];

/// The components installed: (app, file). The app's name is the tools' prefix.
const APPS: [(&str, &str); 3] = [
    ("hostile", "hostile"),
    ("shapes", "shapes"),
    ("units", "units"),
];

/// The typed section: listing costs at install and at start, trivial calls via HTTP and inside
/// the engine.
pub(crate) fn section_typed(b: &mut Bench) -> Vec<Figure> {
    let components: Vec<&str> = APPS.iter().map(|a| a.1).collect();
    let Some(plugins) = super::wasm::built_plugins(&components) else {
        return vec![];
    };
    let calls = b.opts.app_calls * 4;
    let mut out = vec![];
    let tmp = tempfile::tempdir().expect("a database folder");
    let s = Server::start(&b.bin, tmp.path());
    // `runtime.listingUs` of an app: {"derived": µs | null, "cached": µs | null}.
    let listing = |s: &Server, app: &str| -> Value {
        s.call("apps/get", json!({"name": app}))["app"]["runtime"]["listingUs"].clone()
    };
    for (app, file) in APPS {
        let t0 = Instant::now();
        s.call(
            "apps/create",
            json!({"name": app, "wasm_path": plugins.join(format!("{file}.wasm"))}),
        );
        let dt = t0.elapsed().as_secs_f64();
        let l = listing(&s, app);
        progress(format!(
            "install {app}: {dt:.2} s; listing derived from its types {} µs",
            l["derived"]
        ));
        if app != "hostile" {
            let us = l["derived"]
                .as_f64()
                .expect("a typed component's listing is derived");
            out.push(
                Figure::new(S, format!("listing_derived_{app}_us"), us, "µs")
                    .target(Target::AtMost(1000.0)),
            );
        }
    }
    wait_reachable(&s, APPS.len());

    // Warm trivial calls through /apps/call/, interleaved.
    let args: Vec<Value> = TRIVIAL
        .iter()
        .map(|t| serde_json::from_str(t.2).expect("arguments"))
        .collect();
    let client = AsyncClient::new(&s);
    let mut http = vec![vec![]; TRIVIAL.len()];
    for i in 0..20 + calls {
        for (k, (_, tool, _)) in TRIVIAL.iter().enumerate() {
            let (dt, v) = client.app_call(tool, &args[k]);
            assert_eq!(v["ok"], true, "{tool}: {v}");
            if i >= 20 {
                http[k].push(dt);
            }
        }
    }
    drop(client);
    out.extend(compare(&http, "call", "via /apps/call/", None));

    // Start: the listings read from the compile cache, then the first call of a typed app,
    // which derives its tools again when it loads the component.
    s.stop();
    let s = Server::start(&b.bin, tmp.path());
    wait_reachable(&s, APPS.len());
    for (app, _) in APPS {
        let us = listing(&s, app)["cached"]
            .as_f64()
            .expect("the listing was read from the cache");
        progress(format!(
            "start: {app}'s listing read from the cache in {us} µs"
        ));
        let f = Figure::new(S, format!("listing_cached_{app}_us"), us, "µs");
        out.push(if app == "hostile" {
            f
        } else {
            f.target(Target::AtMost(1000.0))
        });
    }
    for (app, tool, args) in [
        ("shapes", "shapes_hello", json!({"name": "x"})),
        ("units", "units_parse_number", json!({"text": "1"})),
    ] {
        let v = s.call("apps/call", json!({"tool": tool, "arguments": args}));
        assert_eq!(v["ok"], true, "{tool}: {v}");
        let us = listing(&s, app)["derived"]
            .as_f64()
            .expect("derived at load");
        progress(format!(
            "first call of {app}: its tools derived again as it loaded, in {us} µs"
        ));
        out.push(Figure::new(
            S,
            format!("listing_derived_load_{app}_us"),
            us,
            "µs",
        ));
    }
    s.stop();

    // Inside the engine: the same calls through the aggregator, no HTTP.
    out.extend(in_engine(tmp.path(), b.opts.app_calls * 40));
    out
}

/// Each call's p50 and p99, and the typed calls' p50 over our world's, in µs (`target` on those).
fn compare(samples: &[Vec<Duration>], prefix: &str, how: &str, target: Option<f64>) -> Vec<Figure> {
    let mut out = vec![];
    let lat: Vec<Latency> = samples.iter().map(|s| Latency::of(s)).collect();
    for (k, (label, tool, _)) in TRIVIAL.iter().enumerate() {
        let l = &lat[k];
        progress(format!(
            "{label} ({tool}) {how}: p50 {:.1} µs, p99 {:.1} µs ({} calls)",
            l.p50 * 1e3,
            l.p99 * 1e3,
            l.n
        ));
        out.push(Figure::new(
            S,
            format!("{prefix}_{label}_p50_us"),
            l.p50 * 1e3,
            "µs",
        ));
        out.push(Figure::new(
            S,
            format!("{prefix}_{label}_p99_us"),
            l.p99 * 1e3,
            "µs",
        ));
    }
    for (k, (label, ..)) in TRIVIAL.iter().enumerate().skip(1) {
        let more = (lat[k].p50 - lat[0].p50) * 1e3;
        progress(format!("{label} over world {how}: {more:+.1} µs at p50"));
        let mut f = Figure::new(S, format!("{prefix}_{label}_over_world_us"), more, "µs");
        f.target = target.map(Target::AtMost);
        out.push(f);
    }
    out
}

/// The trivial calls inside the engine: this process opens the database and calls through the
/// aggregator (as `wasm`'s `wasm_in_engine` does), interleaved call by call, `calls` of each.
fn in_engine(dir: &Path, calls: usize) -> Vec<Figure> {
    use datanotes::apps::{Registry, aggregator::Aggregator, wasm::WasmRuntime};
    let rt = runtime();
    let engine = datanotes::engine::Engine::open(dir).expect("open the bench database");
    let registry = Registry::open(&engine.meta_dir).expect("open the apps registry");
    let _in_rt = rt.enter();
    let wasm = WasmRuntime::new(engine.clone()).expect("wasm runtime");
    let agg = Aggregator::new(engine.clone(), registry.clone(), wasm);
    let args: Vec<Value> = TRIVIAL
        .iter()
        .map(|t| serde_json::from_str(t.2).expect("arguments"))
        .collect();
    // On a worker thread of the runtime, as a request handler runs.
    let task = {
        let agg = agg.clone();
        rt.spawn(async move {
            for rec in registry.list() {
                agg.refresh(&rec.name).await.expect("refresh");
            }
            let ctx = || datanotes::ops::Ctx::owner("bench");
            let mut samples = vec![vec![]; TRIVIAL.len()];
            for i in 0..200 + calls {
                for (k, (_, tool, _)) in TRIVIAL.iter().enumerate() {
                    let t0 = Instant::now();
                    let r = agg.call(tool, args[k].clone(), ctx()).await;
                    let dt = t0.elapsed();
                    assert!(r.ok, "{tool}: {}", r.value);
                    if i >= 200 {
                        samples[k].push(dt);
                    }
                }
            }
            samples
        })
    };
    let samples = rt.block_on(task).expect("the in-engine calls");
    drop(agg);
    engine.shutdown();
    compare(&samples, "engine", "inside the engine", Some(5.0))
}
