//! The apps chapter's tutorial (`docs/apps.md`), followed as a reader would: its nine apps built
//! from the chapter's own code blocks (`scripts/build-plugins` writes them out with
//! `scripts/lib/tutorial-apps.py` and builds `target/plugins/{hello,greet}*.wasm`), its commands run by
//! bash as written, in a folder `notes` served at `$DN`, with only the path of each built file put
//! in, and every answer the chapter shows found among the real ones, in order.

use super::{bash, bash_with, block_with, json, sh_blocks};
use crate::kit::Server;
use crate::wasm::{component, shared_cache};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// The answers a block shows in its comments (`# {...}`, `# data: {...}`, `# ... {...}`; a line
/// `#  ...` goes on the one before), as JSON.
fn shown(block: &str) -> Vec<Value> {
    let mut texts: Vec<String> = vec![];
    for line in block.lines() {
        if let Some(more) = line.strip_prefix("#  ") {
            texts.last_mut().expect("a continued answer").push_str(more);
        } else if let Some(c) = line.strip_prefix("# ") {
            let c = c.trim_start_matches("... ").trim_start_matches("data: ");
            if c.starts_with('{') {
                texts.push(c.to_string());
            }
        }
    }
    texts
        .iter()
        .map(|t| serde_json::from_str(t).unwrap_or_else(|e| panic!("{e}: {t}")))
        .collect()
}

/// The JSON objects a run printed: at the start of a line, or of an SSE `data:` line (curl ends
/// no answer with a new line, so what comes next may follow on the same line).
fn printed(out: &str) -> Vec<Value> {
    out.lines()
        .map(|l| l.trim_start_matches("data: "))
        .filter(|l| l.starts_with('{'))
        .filter_map(|l| {
            serde_json::Deserializer::from_str(l)
                .into_iter()
                .next()?
                .ok()
        })
        .collect()
}

/// Every answer `block` shows is among what it printed, in order.
fn shows_what_it_prints(block: &str, out: &str) {
    let shown = shown(block);
    assert!(!shown.is_empty(), "no answer shown in {block}");
    let printed = printed(out);
    let mut at = 0;
    for want in &shown {
        match printed[at..].iter().position(|p| p == want) {
            Some(i) => at += i + 1,
            None => panic!(
                "docs/apps.md shows\n{want}\nbut the run printed (from there on)\n{}\n\nall it printed:\n{out}",
                printed[at..]
                    .iter()
                    .map(Value::to_string)
                    .collect::<Vec<_>>()
                    .join("\n")
            ),
        }
    }
}

/// The chapter, and a server on a folder `notes` in a new temporary folder (its compile cache
/// shared with the other WASM tests').
fn chapter_and_server() -> (String, tempfile::TempDir, Server) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(root.join("docs/apps.md")).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let s = Server::start_opts(
        &tmp.path().join("notes"),
        &[],
        &[("DATANOTES_CACHE_DIR", &shared_cache())],
    );
    (doc, tmp, s)
}

#[test]
fn the_apps_chapters_tutorial_runs_as_written() {
    let (doc, tmp, s) = chapter_and_server();
    let blocks = sh_blocks(&doc);
    let path_of = |name: &str| component(name).to_string_lossy().into_owned();

    // Start: the table (the server is the test's; the token is read from the folder as written).
    let start = block_with(&blocks, "datanotes serve --database ./notes");
    let start: String = start
        .lines()
        .filter(|l| !l.starts_with("datanotes serve"))
        .map(|l| format!("{}\n", l.replace("http://127.0.0.1:5234", &s.url)))
        .collect();
    let out = bash(tmp.path(), &s, &start);
    shows_what_it_prints(&start, &out);

    // Install it: the Rust app by its path, the Python app by its bytes, the JavaScript app
    // without `write` (as the refusal shown below it is).
    let by_path = block_with(&blocks, "\\\"wasm_path\\\": \\\"$PWD/target/");
    let install = |name: &str, write: bool| {
        let mut script = by_path
            .replace(
                "$PWD/target/wasm32-wasip2/release/hello.wasm",
                &path_of(name),
            )
            .replace(
                "\\\"name\\\": \\\"hello\\\"",
                &format!("\\\"name\\\": \\\"{name}\\\""),
            );
        if !write {
            script = script.replace("\\\"write\\\": [\\\"personal.hello.notes\\\"],", "");
        }
        let v = json(&bash(tmp.path(), &s, &script));
        assert_eq!(v["app"]["name"], name, "{v}");
        assert_eq!(v["app"]["reachable"], true, "{v}");
        let tool = match name.starts_with("hello2") {
            true => format!("{name}_count"),
            false => format!("{name}_note"),
        };
        assert!(
            v["app"]["tools"].as_array().unwrap().contains(&tool.into()),
            "{v}"
        );
    };
    install("hello", true);
    let by_bytes = block_with(&blocks, "wasm_base64");
    let v = json(&bash(
        tmp.path(),
        &s,
        &by_bytes.replace(
            "open('hello.wasm'",
            &format!("open('{}'", path_of("hellopy")),
        ),
    ));
    assert_eq!(
        v["app"]["tools"],
        serde_json::json!(["hellopy_tables", "hellopy_note"]),
        "{v}"
    );
    install("hellojs", false);

    // Call it: over HTTP, as shown; the refusal of the app without `write`, as shown.
    let call = block_with(&blocks, "$DN/datanotes/apps/call/");
    shows_what_it_prints(call, &bash(tmp.path(), &s, call));
    let refusal = doc
        .split("installed without `write`:\n\n```json\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("the refusal the chapter shows");
    let refused = bash(tmp.path(), &s, &call.replace("hello_note", "hellojs_note"));
    assert_eq!(json(&refused), json(refusal), "{refused}");
    // The other apps' read tools answer.
    for t in ["hello_tables", "hellopy_tables", "hellojs_tables"] {
        let out = bash(tmp.path(), &s, &call.replace("hello_note", t));
        assert_eq!(json(&out)["ok"], true, "{t}: {out}");
    }
    // Over MCP on stdio, through `datanotes mcp`.
    let stdio = block_with(&blocks, "| datanotes mcp --url $DN");
    shows_what_it_prints(stdio, &bash(tmp.path(), &s, stdio));

    // The 0.2 apps: installed as above, then the MCP session the chapter shows; hello2py and
    // hello2js answer the same (the note is written once).
    for name in ["hello2", "hello2py", "hello2js"] {
        install(name, true);
    }
    let try_v2 = block_with(&blocks, "hello2_count");
    shows_what_it_prints(try_v2, &bash(tmp.path(), &s, try_v2));
    let session = try_v2
        .split_once("mcp() {")
        .map(|(_, rest)| format!("mcp() {{{rest}"))
        .unwrap();
    for name in ["hello2py", "hello2js"] {
        let same = session
            .replace("hello2_", &format!("{name}_"))
            .replace("notes://hello2/", &format!("notes://{name}/"));
        shows_what_it_prints(&same, &bash(tmp.path(), &s, &same));
    }
}

/// "Any component": the typed `greet` of the chapter, in Rust, Python and JavaScript, built from
/// its code blocks and installed with its command; each answers `greet_hello` as the chapter
/// says, with and without an age, and is described by its signature. After the chapter's
/// `wit-docs` step (run as written, from a clone beside the component's folder), the tool is
/// described by its WIT doc comment and the app by its package's.
#[test]
fn the_typed_greet_examples_answer_as_the_chapter_says() {
    use crate::kit::mcp::{Agent, structured, text};
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let (doc, tmp, s) = chapter_and_server();
    let blocks = sh_blocks(&doc);
    let built = "'$PWD'/target/wasm32-wasip2/release/greet.wasm";
    let install_block: String = block_with(&blocks, built)
        .lines()
        .filter(|l| !l.starts_with("cargo build"))
        .map(|l| format!("{l}\n"))
        .collect();
    let install = |name: &str, wasm: &Path| {
        let script = install_block
            .replace(built, &wasm.to_string_lossy())
            .replace("\"name\": \"greet\"", &format!("\"name\": \"{name}\""));
        let v = json(&bash(tmp.path(), &s, &script));
        assert_eq!(
            v["app"]["tools"],
            serde_json::json!([format!("{name}_hello")]),
            "{v}"
        );
    };
    for name in ["greet", "greetpy", "greetjs"] {
        install(name, &component(name));
    }
    let said = doc
        .split("an agent calls it with `")
        .nth(1)
        .and_then(|r| r.split_once("` and gets\n`structuredContent: "))
        .map(|(args, rest)| (args, rest.split('`').next().unwrap()))
        .expect("the call the chapter shows");
    let (args, answer): (Value, Value) = (json(said.0), json(said.1));
    assert_eq!(answer, serde_json::json!({"result": "Hello, Ada (36)!"}));
    let agent = Agent::owner(&s);
    let tools = agent.tools();
    for name in ["greet", "greetpy", "greetjs"] {
        let tool = format!("{name}_hello");
        let r = agent.call(&tool, args.clone());
        assert_eq!(structured(&r), answer, "{tool}");
        assert_eq!(
            json(&text(&r)),
            answer["result"],
            "{tool}: the same JSON as text"
        );
        let r = agent.call(&tool, serde_json::json!({"who": {"name": "Ada"}}));
        assert_eq!(structured(&r)["result"], "Hello, Ada!", "{tool}");
        let t = tools.iter().find(|t| t.name == tool).expect("listed");
        assert_eq!(
            t.description.as_deref(),
            Some("hello(who: record { name: string, age: option<u8> }) -> string"),
            "{tool}: without its docs, its signature"
        );
    }

    // Descriptions: the chapter's command, from the component's folder (its WIT as the chapter
    // writes it) with a clone beside it. Its build goes to the per-user cache of the project's
    // tools (as scripts/lib/tools.sh's), so that a clean clone compiles only the tool itself.
    let run = block_with(&blocks, "plugins/wit-docs/Cargo.toml -- wit greet.wasm");
    let wit = doc
        .split("```wit\n")
        .skip(1)
        .filter_map(|b| b.split("```").next())
        .find(|b| b.contains("package example:greet@"))
        .expect("the chapter's greet.wit");
    let folder = tmp.path().join("greet");
    std::fs::create_dir_all(folder.join("wit")).unwrap();
    std::fs::write(folder.join("wit/greet.wit"), wit).unwrap();
    std::fs::copy(component("greet"), folder.join("greet.wasm")).unwrap();
    let script = run.replace("../datanotes/", &format!("{}/", root.display()));
    let env = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    let tools = env("DATANOTES_TOOL_CACHE")
        .or_else(|| env("XDG_CACHE_HOME").map(|c| c.join("datanotes")))
        .or_else(|| env("HOME").map(|h| h.join(".cache/datanotes")))
        .expect("HOME is set");
    bash_with(
        &folder,
        &s,
        &script,
        None,
        &[("CARGO_TARGET_DIR", &tools.join("wit-docs-target"))],
    );
    install("described", &folder.join("greet.wasm"));
    let described = Agent::owner(&s);
    let t = described
        .tools()
        .into_iter()
        .find(|t| t.name == "described_hello")
        .expect("listed");
    assert_eq!(
        t.description.as_deref(),
        Some("Greets a person, by age if known.")
    );
    assert!(
        described.instructions().contains("greet: says hello."),
        "{}",
        described.instructions()
    );
}
