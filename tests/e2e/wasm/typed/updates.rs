//! Typed tools across a restart and an update, and an update that swaps the component at once
//! under concurrent calls.

use super::*;

#[test]
fn typed_tools_survive_a_restart_and_an_update_swaps_them() {
    let s = server();
    s.install("shapes", "shapes", json!({}));
    // A second app of the same component: its tools carry its own name, after a restart too
    // (the listing kept with the compiled code is not another app's).
    s.install("twin", "shapes", json!({}));
    let s = s.restart();
    for app in ["shapes", "twin"] {
        eventually(&format!("{app} is listed after the restart"), || {
            s.app(app)["tools"]
                .as_array()
                .is_some_and(|t| t.len() == 10)
        });
        assert_eq!(sorted(&s.app(app)["tools"]), shapes_tools(app));
    }
    for tool in ["shapes_norm2", "twin_norm2"] {
        assert_eq!(
            s.tool_ok(tool, json!({"p": {"x": 1, "y": 1}})),
            json!({"result": 2})
        );
    }
    assert!(
        s.app("shapes")["skippedTools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|x| x["name"] == "shapes_peek"),
        "the skipped functions are kept too"
    );
    // Updated to a component of our world: its tools replace the typed ones.
    let (st, v) = s.post(
        "/datanotes/apps/update/",
        Some(&s.token),
        &json!({"name": "shapes", "wasm_path": component("hostile")}),
    );
    assert_eq!(st, 200, "{v}");
    let tools = sorted(&s.app("shapes")["tools"]);
    assert!(tools.iter().all(|t| t.starts_with("hostile_")), "{tools:?}");
    let e = s.tool("shapes_norm2", json!({"p": {"x": 1, "y": 1}}));
    assert_eq!(e["ok"], false, "{e}");
}

/// What a call answered during a swap: the old component's answer, the new one's, or a plain
/// "no tool" (a tool the component serving the call does not have).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Answer {
    Old,
    New,
    NoTool,
}

/// Updates app `swap` to `to` while 8 threads call its old tool (`old`, answering `old_ok`) and
/// the new component's (`new`, answering `new_ok`) in a loop through `/apps/call/`. Every call
/// answers the old behaviour, the new one, or "no tool"; a call made after the update answered
/// sees only the new component, one answered before it began only the old; `tools/list`
/// shows the new tools as soon as the update has answered.
fn swap_under_calls(s: &Server, to: &str, old: (&str, Value, Value), new: (&str, Value, Value)) {
    use std::sync::atomic::{AtomicBool, Ordering};
    let stop = AtomicBool::new(false);
    // The calls answered so far (by every worker).
    let done = std::sync::atomic::AtomicUsize::new(0);
    let classify = |tool: &str, v: &Value| -> Answer {
        let (ok_value, answer) = if tool == old.0 {
            (&old.2, Answer::Old)
        } else {
            (&new.2, Answer::New)
        };
        if v["ok"] == true && v["value"]["structuredContent"] == *ok_value {
            return answer;
        }
        let text = v["value"].to_string();
        assert!(
            v["ok"] == false && text.contains("no tool"),
            "{tool} during the swap to {to}: neither its answer nor \"no tool\": {v}"
        );
        Answer::NoTool
    };
    let (calls, began, ended) = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..8)
            .map(|i| {
                let (stop, old, new, done) = (&stop, &old, &new, &done);
                scope.spawn(move || {
                    let mut seen = vec![];
                    let mut j = i;
                    while !stop.load(Ordering::Relaxed) {
                        let (tool, args) = if j % 2 == 0 {
                            (old.0, &old.1)
                        } else {
                            (new.0, &new.1)
                        };
                        j += 1;
                        let t0 = Instant::now();
                        let v = s.tool(tool, args.clone());
                        seen.push((t0, Instant::now(), tool, classify(tool, &v)));
                        done.fetch_add(1, Ordering::SeqCst);
                    }
                    seen
                })
            })
            .collect();
        // Calls answered before the update: 16 (old and new tools alike).
        let answered = |what: &str, n: usize| {
            eventually_ok(what, || {
                let d = done.load(Ordering::SeqCst);
                if d >= n {
                    Ok(())
                } else {
                    Err(format!("{d} calls answered"))
                }
            })
        };
        answered("16 calls answered before the update", 16);
        let began = Instant::now();
        let (st, v) = s.post(
            "/datanotes/apps/update/",
            Some(&s.token),
            &json!({"name": "swap", "wasm_path": component(to)}),
        );
        let ended = Instant::now();
        let done_at_end = done.load(Ordering::SeqCst);
        assert_eq!(st, 200, "{v}");
        // The listing changed with the update's answer.
        let tools: Vec<String> = Agent::owner(s)
            .tools()
            .into_iter()
            .map(|t| t.name.to_string())
            .filter(|n| n.starts_with("swap_"))
            .collect();
        assert!(
            tools.iter().any(|t| t == new.0) && !tools.iter().any(|t| t == old.0),
            "tools/list right after the update to {to}: {tools:?}"
        );
        // 16 more answered after it: of those, the 8 workers had at most 8 in flight at its
        // answer, so 8 at least were called after it.
        answered("16 calls answered after the update", done_at_end + 16);
        stop.store(true, Ordering::Relaxed);
        let calls: Vec<_> = workers
            .into_iter()
            .flat_map(|w| w.join().expect("a call during the swap failed"))
            .collect();
        (calls, began, ended)
    });
    let count = |a: Answer| calls.iter().filter(|c| c.3 == a).count();
    assert!(
        count(Answer::Old) > 0 && count(Answer::New) > 0,
        "calls of both components answered: {} old, {} new, {} of {} none",
        count(Answer::Old),
        count(Answer::New),
        count(Answer::NoTool),
        calls.len()
    );
    for (t0, t1, tool, a) in &calls {
        let want = if *tool == old.0 {
            Answer::Old
        } else {
            Answer::New
        };
        if *t0 > ended {
            let expect = if want == Answer::New {
                Answer::New
            } else {
                Answer::NoTool
            };
            assert_eq!(
                *a, expect,
                "{tool} called after the update to {to} answered"
            );
        }
        if *t1 < began {
            let expect = if want == Answer::Old {
                Answer::Old
            } else {
                Answer::NoTool
            };
            assert_eq!(
                *a, expect,
                "{tool} answered before the update to {to} began"
            );
        }
    }
}

#[test]
fn an_update_swaps_the_component_at_once_under_concurrent_calls() {
    let s = server();
    s.install("swap", "shapes", json!({}));
    let hello = (
        "swap_hello",
        json!({"name": "w"}),
        json!({"result": "Hello, w!"}),
    );
    let convert = (
        "swap_convert",
        json!({"value": 1, "from": "km", "to": "m"}),
        json!({"result": 1000.0}),
    );
    // A typed Rust component to a typed Python one, and back.
    swap_under_calls(&s, "units", hello.clone(), convert.clone());
    swap_under_calls(&s, "shapes", convert, hello);
    assert_eq!(sorted(&s.app("swap")["tools"]), shapes_tools("swap"));
}
