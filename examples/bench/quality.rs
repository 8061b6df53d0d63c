//! `quality`: how well `search_notes` finds what a question is about, on a labelled set.
//!
//! The set (`scripts/fetch-retrieval-data`): 1,096 man pages, and 1,046 questions each with the
//! pages that answer it, split into a "tune" and a "test" half. The pages go into a table of
//! their own, in a database of this section's own, served with the default model; each question
//! is asked in the modes text, semantic and hybrid (top 10), scored by nDCG@10 and recall@10.
//! The fusion's parameters (`DATANOTES_RRF_K`, `DATANOTES_RRF_TEXT_WEIGHT_PCT`) are tried on the
//! tune half only, restarting the server over the same index for each; the best are then
//! measured on the test half, beside the engine's defaults (what it serves).

use super::*;
use datanotes::engine::semantic::{RRF_K, RRF_TEXT_WEIGHT_PCT};
use std::collections::HashSet;

const DOCS: &str = "bench.docs.pages";

struct Query {
    query: String,
    relevant: HashSet<String>,
    tune: bool,
}

/// The labelled set's folder (built the first time).
fn data_dir() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new("bash")
        .arg(root.join("scripts/fetch-retrieval-data"))
        .arg("--print")
        .stderr(Stdio::inherit())
        .output()
        .expect("bash scripts/fetch-retrieval-data");
    assert!(out.status.success(), "scripts/fetch-retrieval-data failed");
    PathBuf::from(String::from_utf8(out.stdout).expect("a path").trim())
}

/// The JSON objects of a `.jsonl` file.
fn jsonl(path: &Path) -> Vec<Value> {
    let f = std::fs::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    BufReader::new(f)
        .lines()
        .map(|l| l.expect("a line"))
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(&l).expect("a JSON line"))
        .collect()
}

/// A server over `dir` with the default model and the fusion's parameters (None: the defaults).
fn serve(b: &Bench, dir: &Path, model: &str, rrf: Option<(u64, u64)>) -> Server {
    let (k, w) = rrf.map(|(k, w)| (k.to_string(), w.to_string())).unzip();
    let mut env = vec![("DATANOTES_MODEL", model)];
    if let (Some(k), Some(w)) = (&k, &w) {
        env.extend([
            ("DATANOTES_RRF_K", k.as_str()),
            ("DATANOTES_RRF_TEXT_WEIGHT_PCT", w.as_str()),
        ]);
    }
    let s = Server::start_env(&b.bin, dir, &env);
    semantic::caught_up(&s);
    s
}

/// The ids of the top 10 pages for each question, in `mode`, from 4 clients.
fn ask(s: &Server, queries: &[&Query], mode: &str) -> Vec<Vec<String>> {
    let per = queries.len().div_ceil(4).max(1);
    std::thread::scope(|sc| {
        let parts: Vec<_> = queries
            .chunks(per)
            .map(|part| {
                sc.spawn(move || {
                    part.iter()
                        .map(|q| {
                            let args = json!({"query": q.query, "tables": [DOCS], "limit": 10, "mode": mode});
                            let v = Server::call_with(&s.http, &s.url, &s.token, "search_notes", &args)
                                .unwrap_or_else(|e| panic!("{:?}: {e}", q.query));
                            assert_eq!(v["mode"], mode, "{v}");
                            let mut seen = HashSet::new();
                            v["hits"]
                                .as_array()
                                .into_iter()
                                .flatten()
                                .filter(|h| h["table"] == DOCS)
                                .filter_map(|h| h["id"].as_str().map(String::from))
                                .filter(|id| seen.insert(id.clone()))
                                .take(10)
                                .collect()
                        })
                        .collect::<Vec<Vec<String>>>()
                })
            })
            .collect();
        parts
            .into_iter()
            .flat_map(|h| h.join().expect("a client"))
            .collect()
    })
}

/// Mean nDCG@10 (binary relevance) and mean recall@10 of the answers.
fn score(queries: &[&Query], answers: &[Vec<String>]) -> (f64, f64) {
    let gain = |i: usize| 1.0 / ((i + 2) as f64).log2();
    let (mut ndcg, mut recall) = (0.0, 0.0);
    for (q, ids) in queries.iter().zip(answers) {
        let found: Vec<usize> = (0..ids.len())
            .filter(|&i| q.relevant.contains(&ids[i]))
            .collect();
        let dcg: f64 = found.iter().map(|&i| gain(i)).sum();
        let ideal: f64 = (0..q.relevant.len().min(10)).map(gain).sum();
        ndcg += dcg / ideal;
        recall += found.len() as f64 / q.relevant.len() as f64;
    }
    let n = queries.len().max(1) as f64;
    (ndcg / n, recall / n)
}

pub(crate) fn section_quality(b: &mut Bench) -> Vec<Figure> {
    const S: &str = "quality";
    let data = data_dir();
    let model = kit::model_dir();
    let model = model.to_str().expect("model path").to_string();
    let docs = jsonl(&data.join("corpus.jsonl"));
    let queries: Vec<Query> = jsonl(&data.join("queries.jsonl"))
        .into_iter()
        .map(|q| Query {
            query: q["query"].as_str().expect("query").to_string(),
            relevant: q["relevant"]
                .as_array()
                .expect("relevant")
                .iter()
                .map(|r| r.as_str().expect("a doc id").to_string())
                .collect(),
            tune: q["half"] == "tune",
        })
        .filter(|q| !q.relevant.is_empty())
        .collect();
    let tune: Vec<&Query> = queries.iter().filter(|q| q.tune).collect();
    let test: Vec<&Query> = queries.iter().filter(|q| !q.tune).collect();
    progress(format!(
        "{} pages, {} questions ({} tune, {} test) from {}",
        docs.len(),
        queries.len(),
        tune.len(),
        test.len(),
        data.display()
    ));

    // The pages, in a database of their own, with the engine's default fusion.
    let dir = b.dir.with_file_name("db-quality");
    let s = serve(b, &dir, &model, None);
    s.call(
        "create_table",
        json!({"table": DOCS, "description": "man pages", "columns": {"title": {"type": "text"}}}),
    );
    let t0 = Instant::now();
    std::thread::scope(|sc| {
        for c in 0..4 {
            let (s, docs) = (&s, &docs);
            sc.spawn(move || {
                for d in docs.iter().skip(c).step_by(4) {
                    s.call(
                        "insert_row",
                        json!({"table": DOCS, "id": d["id"], "values": {"title": d["title"]}, "body": d["text"]}),
                    );
                }
            });
        }
    });
    semantic::caught_up(&s);
    progress(format!(
        "{} pages written and indexed in {:.1} s",
        docs.len(),
        t0.elapsed().as_secs_f64()
    ));

    // Every mode on both halves, with the defaults.
    let mut at = std::collections::HashMap::new();
    for mode in ["text", "semantic", "hybrid"] {
        for (half, qs) in [("tune", &tune), ("test", &test)] {
            let answers = ask(&s, qs, mode);
            let (n, r) = score(qs, &answers);
            let none = answers.iter().filter(|a| a.is_empty()).count();
            progress(format!(
                "{mode:<8} {half}: nDCG@10 {n:.3}, recall@10 {r:.3} ({none} of {} found nothing)",
                qs.len()
            ));
            at.insert((mode, half), (n, r));
        }
    }
    s.stop();

    // The fusion's parameters, tried on the tune half.
    let defaults = (RRF_K, RRF_TEXT_WEIGHT_PCT);
    let grid: Vec<(u64, u64)> = if b.opts.quick {
        vec![(60, 100), (20, 150)]
    } else {
        [1, 5, 20, 60]
            .into_iter()
            .flat_map(|k| [50, 100, 200, 300].map(|w| (k, w)))
            .filter(|&p| p != defaults)
            .collect()
    };
    let mut best = (defaults, at[&("hybrid", "tune")].0);
    for p in grid {
        let s = serve(b, &dir, &model, Some(p));
        let (n, _) = score(&tune, &ask(&s, &tune, "hybrid"));
        s.stop();
        progress(format!(
            "hybrid tune, K {} text weight {}%: nDCG@10 {n:.3}",
            p.0, p.1
        ));
        if n > best.1 {
            best = (p, n);
        }
    }
    let ((k, w), _) = best;
    let tuned = if (k, w) == defaults {
        at[&("hybrid", "test")]
    } else {
        let s = serve(b, &dir, &model, Some((k, w)));
        let t = score(&test, &ask(&s, &test, "hybrid"));
        s.stop();
        t
    };
    progress(format!(
        "best on tune: K {k}, text weight {w}% ({}); hybrid test nDCG@10 {:.3} tuned vs {:.3} defaults",
        if (k, w) == defaults {
            "the engine's defaults"
        } else {
            "not the engine's defaults"
        },
        tuned.0,
        at[&("hybrid", "test")].0
    ));

    let f = |name: &str, v: f64, unit: &'static str| Figure::new(S, name, v, unit);
    let (text, sem, hyb) = (
        at[&("text", "test")],
        at[&("semantic", "test")],
        at[&("hybrid", "test")],
    );
    vec![
        f("quality_docs", docs.len() as f64, "docs"),
        f("quality_queries_test", test.len() as f64, "queries"),
        f("ndcg10_text_test", text.0, "nDCG@10"),
        f("ndcg10_semantic_test", sem.0, "nDCG@10"),
        f("ndcg10_hybrid_test", hyb.0, "nDCG@10"),
        f("ndcg10_hybrid_tuned_test", tuned.0, "nDCG@10"),
        f("recall10_text_test", text.1, "recall"),
        f("recall10_semantic_test", sem.1, "recall"),
        f("recall10_hybrid_test", hyb.1, "recall"),
        f("ndcg10_hybrid_tune", at[&("hybrid", "tune")].0, "nDCG@10"),
        f("rrf_k_best", k as f64, "K"),
        f("rrf_text_weight_pct_best", w as f64, "%"),
        f("ndcg10_hybrid_over_text_test", hyb.0 / text.0, "x").target(Target::AtLeast(1.0)),
    ]
}
