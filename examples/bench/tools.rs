//! `tools`: how well and how fast `search_tools` finds the right tool.
//!
//! Quality, on the set of `tests/data/tool-retrieval/` (real tools of public MCP servers, each
//! an app of its own, and tasks in a user's words, each with its one right tool): recall@1,
//! recall@5 and MRR@10 in the modes hybrid, text and semantic, in-process on the engine's own
//! index with the default model. Speed: a search over 2,000 tools in-process (p95), the index
//! built again after a listing of 500 tools, its memory; and through `/mcp` against a ping, in
//! the same run, on a server whose app lists about 2,000 tools. The context an agent pays:
//! the set's `tools/list` in bytes.

use super::*;
use datanotes::engine::SearchMode;
use datanotes::engine::semantic::model::Model;
use datanotes::engine::tools::{Tool, ToolIndex};

struct Task {
    task: String,
    server: String,
    tool: String,
}

/// Tools by app, in order.
type Apps = Vec<(String, Vec<Tool>)>;

/// The set: its tools by server (in order), its tasks, and its `tools/list` in bytes.
fn data() -> (Apps, Vec<Task>, usize) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/tool-retrieval");
    let read = |f: &str| -> Value {
        let p = dir.join(f);
        let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    };
    let tools = read("tools.json");
    let tools = tools.as_array().expect("tools.json: an array");
    let list_bytes = json!({"tools": tools}).to_string().len();
    let mut by_server: Vec<(String, Vec<Tool>)> = vec![];
    for t in tools {
        let server = t["server"].as_str().expect("server").to_string();
        if by_server.last().is_none_or(|(s, _)| *s != server) {
            by_server.push((server.clone(), vec![]));
        }
        let context = Tool::context(&server, "");
        by_server.last_mut().unwrap().1.push(Tool::new(
            t["name"].as_str().expect("name"),
            t["description"].as_str().unwrap_or(""),
            t["inputSchema"].clone(),
            context,
        ));
    }
    let tasks = read("tasks.json")
        .as_array()
        .expect("tasks.json: an array")
        .iter()
        .map(|t| Task {
            task: t["task"].as_str().expect("task").to_string(),
            server: t["server"].as_str().expect("server").to_string(),
            tool: t["tool"].as_str().expect("tool").to_string(),
        })
        .collect();
    (by_server, tasks, list_bytes)
}

fn model() -> Arc<Model> {
    let dir = kit::model_dir();
    let root = tempfile::tempdir().expect("a folder");
    Arc::new(Model::load(&dir, root.path()).expect("the default model"))
}

/// Recall@1, recall@5 and MRR@10 of `index` on `tasks` in `mode`; the tasks missed at 5.
fn quality(
    index: &ToolIndex,
    model: &Arc<Model>,
    tasks: &[Task],
    mode: SearchMode,
) -> ((f64, f64, f64), Vec<String>) {
    let (mut r1, mut r5, mut mrr) = (0.0, 0.0, 0.0);
    let mut missed = vec![];
    for t in tasks {
        let hits = index.search(&t.task, 10, None, &|_, _| true, Some(model), mode);
        let at = hits
            .iter()
            .position(|h| h.app == t.server && h.tool().name == t.tool);
        if let Some(i) = at {
            r1 += (i == 0) as u8 as f64;
            r5 += (i < 5) as u8 as f64;
            mrr += 1.0 / (i + 1) as f64;
        }
        if at.is_none_or(|i| i >= 5) {
            let got: Vec<String> = hits
                .iter()
                .take(3)
                .map(|h| format!("{}/{}", h.app, h.tool().name))
                .collect();
            missed.push(format!(
                "{:?} wants {}/{}, got {got:?}",
                t.task, t.server, t.tool
            ));
        }
    }
    let n = tasks.len().max(1) as f64;
    ((r1 / n, r5 / n, mrr / n), missed)
}

pub(crate) fn section_tools(b: &mut Bench) -> Vec<Figure> {
    const S: &str = "tools";
    let mut out = vec![];
    let (servers, tasks, list_bytes) = data();
    let n_tools: usize = servers.iter().map(|(_, t)| t.len()).sum();
    progress(format!(
        "{n_tools} tools of {} servers, {} tasks",
        servers.len(),
        tasks.len()
    ));
    let model = model();

    // Quality: each server an app.
    let index = ToolIndex::default();
    index.set_apps(servers.clone());
    for (mode, name) in [
        (SearchMode::Hybrid, "hybrid"),
        (SearchMode::Text, "text"),
        (SearchMode::Semantic, "semantic"),
    ] {
        let ((r1, r5, mrr), missed) = quality(&index, &model, &tasks, mode);
        progress(format!(
            "{name:<8}: recall@1 {r1:.3}, recall@5 {r5:.3}, MRR@10 {mrr:.3}"
        ));
        if mode == SearchMode::Hybrid && std::env::var_os("BENCH_TOOLS_MISSES").is_some() {
            for m in &missed {
                progress(format!("  missed: {m}"));
            }
        }
        let r5_fig = Figure::new(S, format!("tools_{name}_recall_at_5"), r5, "ratio");
        out.push(Figure::new(
            S,
            format!("tools_{name}_recall_at_1"),
            r1,
            "ratio",
        ));
        out.push(if mode == SearchMode::Hybrid {
            r5_fig.target(Target::AtLeast(0.90))
        } else {
            r5_fig
        });
        out.push(Figure::new(
            S,
            format!("tools_{name}_mrr_at_10"),
            mrr,
            "ratio",
        ));
    }
    out.push(Figure::new(
        S,
        "tools_list_all_bytes",
        list_bytes as f64,
        "bytes",
    ));

    // Speed in-process: the set's tools again and again (as other apps) up to 2,000.
    let big = ToolIndex::default();
    let mut apps = vec![];
    let mut n = 0;
    'fill: for copy in 0.. {
        for (server, tools) in &servers {
            let take = tools.len().min(2000 - n);
            apps.push((format!("{server}-{copy}"), tools[..take].to_vec()));
            n += take;
            if n >= 2000 {
                break 'fill;
            }
        }
    }
    big.set_apps(apps.clone());
    let t0 = Instant::now();
    big.search("x", 1, None, &|_, _| true, Some(&model), SearchMode::Hybrid);
    let built = t0.elapsed();
    let (count, bytes) = big.size();
    progress(format!(
        "{count} tools indexed (with their vectors) in {:.0} ms, {:.1} MiB",
        built.as_secs_f64() * 1e3,
        bytes as f64 / (1 << 20) as f64
    ));
    out.push(
        Figure::new(
            S,
            "tools_index_2000_mib",
            bytes as f64 / (1 << 20) as f64,
            "MiB",
        )
        .target(Target::AtMost(10.0)),
    );
    let rounds = if b.opts.quick { 200 } else { 1000 };
    let mut samples = vec![];
    for t in tasks.iter().cycle().take(rounds) {
        let t0 = Instant::now();
        let hits = big.search(
            &t.task,
            10,
            None,
            &|_, _| true,
            Some(&model),
            SearchMode::Hybrid,
        );
        samples.push(t0.elapsed());
        assert!(!hits.is_empty(), "{:?} found nothing", t.task);
    }
    let p95 = percentile(&samples, 95.0);
    progress(format!(
        "search_tools over {count} tools in-process: p50 {:.2} ms, p95 {p95:.2} ms",
        Latency::of(&samples).p50
    ));
    out.push(Figure::new(S, "tools_search_2000_p95_ms", p95, "ms").target(Target::AtMost(10.0)));

    // A listing of 500 tools: the index follows it at the next search.
    let mut with_new = apps;
    let five: Vec<Tool> = servers
        .iter()
        .flat_map(|(_, t)| t.iter().cloned())
        .take(500)
        .collect();
    with_new.push(("newcomer".into(), five));
    big.set_apps(with_new);
    let t0 = Instant::now();
    let hits = big.search(
        &tasks[0].task,
        50,
        Some(&["newcomer".to_string()]),
        &|_, _| true,
        Some(&model),
        SearchMode::Hybrid,
    );
    let update = t0.elapsed().as_secs_f64() * 1e3;
    assert!(!hits.is_empty(), "the newcomer's tools are found");
    progress(format!("a listing of 500 tools indexed in {update:.0} ms"));
    out.push(Figure::new(S, "tools_update_500_ms", update, "ms").target(Target::AtMost(1000.0)));

    out.extend(over_mcp(b, &tasks));
    out
}

/// Nearest-rank percentile `p` of `samples`, in ms.
fn percentile(samples: &[Duration], p: f64) -> f64 {
    let mut ms: Vec<f64> = samples.iter().map(|d| d.as_secs_f64() * 1e3).collect();
    ms.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * ms.len() as f64).ceil() as usize;
    ms.get(rank.clamp(1, ms.len().max(1)) - 1)
        .copied()
        .unwrap_or(f64::NAN)
}

/// `search_tools` through `/mcp` against a ping, interleaved, on the bench's server with an
/// app listing about 2,000 tools.
fn over_mcp(b: &mut Bench, tasks: &[Task]) -> Vec<Figure> {
    const S: &str = "tools";
    let remote_bin = kit::example("remote_app");
    if !remote_bin.is_file() {
        skip(format!("tools: no {}", remote_bin.display()));
        return vec![];
    }
    let s = b.server();
    let (url, token) = (s.url.clone(), s.token.clone());
    let v = s.call(
        "apps/create",
        json!({"name": "many", "self_url_private": true}),
    );
    let app_token = v["token"].as_str().expect("app token").to_string();
    let _app = kit::App::spawn(
        &url,
        "many",
        &app_token,
        &["--bare", "--huge-listing", "1979", "--pad-bytes", "120"],
        true,
    );
    let client = AsyncClient::new(s);
    let rt = &client.rt;
    let http = &client.http;
    let sid = rt.block_on(agg::mcp_raw_session(http, &url, &token));
    let deadline = Instant::now() + Duration::from_secs(60);
    let found = loop {
        let v = Server::call_with(
            &s.http,
            &url,
            &token,
            "search_tools",
            &json!({"query": "huge", "apps": ["many"], "limit": 1}),
        );
        if v.is_ok_and(|v| v["tools"].as_array().is_some_and(|t| !t.is_empty())) {
            break true;
        }
        if Instant::now() > deadline {
            break false;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    if !found {
        skip("tools: the app's 1,979 tools were never found by search_tools");
        return vec![];
    }
    let rounds = if b.opts.quick { 100 } else { 500 };
    let (mut search, mut ping) = (vec![], vec![]);
    for (i, t) in tasks.iter().cycle().take(10 + rounds).enumerate() {
        let args = json!({"name": "search_tools", "arguments": {"query": t.task, "limit": 10}});
        let t0 = Instant::now();
        rt.block_on(agg::mcp_raw_request(
            http,
            &url,
            &token,
            &sid,
            "tools/call",
            args,
        ));
        let d1 = t0.elapsed();
        let t0 = Instant::now();
        rt.block_on(agg::mcp_raw_call(http, &url, &token, &sid, "ping"));
        let d2 = t0.elapsed();
        if i >= 10 {
            search.push(d1);
            ping.push(d2);
        }
    }
    let (s50, p50) = (Latency::of(&search).p50, Latency::of(&ping).p50);
    progress(format!(
        "through /mcp: search_tools p50 {s50:.2} ms, ping p50 {p50:.2} ms (+{:.2} ms)",
        s50 - p50
    ));
    vec![
        Figure::new(S, "tools_search_mcp_p50_ms", s50, "ms"),
        Figure::new(S, "tools_search_mcp_above_ping_ms", s50 - p50, "ms")
            .target(Target::AtMost(5.0)),
    ]
}
