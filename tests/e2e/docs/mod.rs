//! The docs tell the truth about the tree: every file or folder `ARCHITECTURE.md` names exists,
//! and every internal link and anchor of the manual (docs/, an mdBook) and the README resolves.
//! The examples a reader copies run as written: the HTTP API chapter's (here), the apps
//! chapter's tutorial (`apps_tutorial.rs`) and publishing walkthrough (`publishing.rs`), the
//! command lines of the apps and telemetry chapters (`command_lines.rs`), and the README's ways
//! to connect an agent (`readme.rs`).

use crate::kit::Server;
use crate::kit::process::bin;
use serde_json::Value;
use std::path::Path;

mod apps_tutorial;
mod command_lines;
mod publishing;
mod readme;

/// Every file and folder of the project (not `target/`, `.git/` or installed packages), as paths
/// relative to its root; folders end with `/`.
fn tree(root: &Path) -> Vec<String> {
    let mut out = vec![];
    let mut todo = vec![root.to_path_buf()];
    while let Some(dir) = todo.pop() {
        for e in std::fs::read_dir(&dir).unwrap().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if matches!(name.as_str(), "target" | ".git" | "node_modules") {
                continue;
            }
            let rel = e.path().strip_prefix(root).unwrap().display().to_string();
            if e.file_type().unwrap().is_dir() {
                out.push(format!("{rel}/"));
                todo.push(e.path());
            } else {
                out.push(rel);
            }
        }
    }
    out
}

/// A path in backquotes (`src/mcp/door.rs`, `journal/db.rs`, `apps/`) exists: at the root, or
/// as the end of a path in the tree (a room's docs name its files from the room).
#[test]
fn every_path_architecture_md_names_exists() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap();
    let tree = tree(root);
    let mut missing = vec![];
    let mut named = 0;
    for (i, part) in doc.split('`').enumerate() {
        let is_path = i % 2 == 1
            && part.contains('/')
            && !part.starts_with('/')
            && part
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "_./-".contains(c))
            && ([".rs", ".md", ".js", ".py", ".toml"]
                .iter()
                .any(|ext| part.ends_with(ext))
                // A folder of two parts or more (`auth/oauth/`): one part may be a route
                // (`changes/`) or a folder the server makes (`.datanotes/`).
                || (part.ends_with('/') && part.trim_end_matches('/').contains('/')));
        // Routes (`apps/call/`), a table's folder (`a/b/c/`) and what a build makes
        // (`target/...`) are not files of the tree.
        if !is_path || part.starts_with("target/") || part == "a/b/c/" || part == "apps/call/" {
            continue;
        }
        named += 1;
        if !tree
            .iter()
            .any(|p| p == part || p.ends_with(&format!("/{part}")))
        {
            missing.push(part.to_string());
        }
    }
    assert!(
        named > 50,
        "only {named} paths found: is the pattern right?"
    );
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md names paths that do not exist: {missing:?}"
    );
}

/// The lines of a Markdown text outside its code fences.
fn prose(text: &str) -> Vec<&str> {
    let mut fenced = false;
    let mut out = vec![];
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            out.push(line);
        }
    }
    out
}

/// A line without its code spans (`...`).
fn without_code(line: &str) -> String {
    line.split('`').step_by(2).collect::<Vec<_>>().join(" ")
}

/// The anchor mdBook (and GitHub) gives a heading: its text without markup, lowercased, letters,
/// digits, `-` and `_` kept, spaces made `-`, the rest dropped.
fn anchor_of(heading: &str) -> String {
    // A link in a heading counts by its text.
    let mut text = String::new();
    let mut rest = heading;
    while let Some(i) = rest.find("](") {
        text.push_str(&rest[..i]);
        rest = rest[i..].find(')').map_or("", |j| &rest[i + j + 1..]);
    }
    text.push_str(rest);
    text.chars()
        .filter_map(|c| {
            if c.is_alphanumeric() || c == '-' || c == '_' {
                Some(c.to_ascii_lowercase())
            } else if c.is_whitespace() {
                Some('-')
            } else {
                None
            }
        })
        .collect::<String>()
        .trim_matches('-')
        .to_string()
}

/// Every anchor of a Markdown text's headings (a repeated one as `x-1`, `x-2`...).
fn anchors(text: &str) -> Vec<String> {
    let mut out: Vec<String> = vec![];
    for line in prose(text) {
        let Some(h) = line.strip_prefix('#') else {
            continue;
        };
        let h = h.trim_start_matches('#');
        if !h.starts_with(' ') {
            continue;
        }
        let a = anchor_of(h.trim());
        let n = out
            .iter()
            .filter(|x| {
                **x == a
                    || x.strip_prefix(&format!("{a}-"))
                        .is_some_and(|d| d.parse::<u32>().is_ok())
            })
            .count();
        out.push(if n == 0 { a } else { format!("{a}-{n}") });
    }
    out
}

/// The targets of a Markdown text's inline links (`[text](target)`), outside code.
fn links(text: &str) -> Vec<String> {
    let mut out = vec![];
    for line in prose(text) {
        let line = without_code(line);
        let mut rest = line.as_str();
        while let Some(i) = rest.find("](") {
            let after = &rest[i + 2..];
            let Some(end) = after.find(')') else { break };
            out.push(after[..end].trim().to_string());
            rest = &after[end..];
        }
    }
    out
}

/// The manual (docs/, an mdBook) and the README link only to files and headings that exist, and
/// every page of docs/ is in the book's table of contents.
#[test]
fn every_internal_link_and_anchor_of_the_manual_resolves() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let docs = root.join("docs");
    let mut pages: Vec<std::path::PathBuf> = std::fs::read_dir(&docs)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    pages.sort();
    let summary = std::fs::read_to_string(docs.join("SUMMARY.md")).unwrap();
    let listed = links(&summary);
    for p in &pages {
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        assert!(
            name == "SUMMARY.md" || listed.contains(&name),
            "docs/{name} is not in docs/SUMMARY.md: add it to the book's table of contents"
        );
    }
    pages.push(root.join("README.md"));
    let (mut checked, mut broken) = (0, vec![]);
    for page in &pages {
        let text = std::fs::read_to_string(page).unwrap();
        let here = page.parent().unwrap();
        for target in links(&text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            checked += 1;
            let (path, anchor) = target.split_once('#').unwrap_or((&target, ""));
            let file = if path.is_empty() {
                page.clone()
            } else {
                here.join(path)
            };
            let shown = format!("{}: {target}", page.strip_prefix(root).unwrap().display());
            if !file.exists() {
                broken.push(format!("{shown} (no such file)"));
                continue;
            }
            if !anchor.is_empty() {
                let target_text = std::fs::read_to_string(&file).unwrap_or_default();
                if !anchors(&target_text).iter().any(|a| a == anchor) {
                    broken.push(format!("{shown} (no heading with that anchor)"));
                }
            }
        }
    }
    println!(
        "the manual: {} pages, {checked} internal links",
        pages.len()
    );
    assert!(
        checked > 40,
        "only {checked} links found: is the pattern right?"
    );
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn anchors_are_made_as_mdbook_makes_them() {
    assert_eq!(anchor_of("Who may use what"), "who-may-use-what");
    assert_eq!(
        anchor_of("Fidelity of `/mcp`: the everything server"),
        "fidelity-of-mcp-the-everything-server"
    );
    assert_eq!(anchor_of("Network (`allow_hosts`)"), "network-allow_hosts");
    assert_eq!(anchor_of("See [the guide](x.md) now"), "see-the-guide-now");
    assert_eq!(anchors("# A\n```\n# not\n```\n## A\n"), ["a", "a-1"]);
    assert_eq!(links("[a](b.md) `[c](d)` [e](f.md#g)"), ["b.md", "f.md#g"]);
}

/// The HTTP API chapter's example, run as a reader would paste it: its block against a demo
/// database (`serve --demo`, with the default model), the token file and address replaced by
/// the test server's. Every `api` line answers one JSON object, and none is an error: a field
/// the engine does not take, a table or column the demo lacks, a wrong shape, would be one.
#[test]
fn the_http_api_chapters_example_runs_as_written_against_a_demo_database() {
    use crate::kit::model_dir;
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(root.join("docs/http-api.md")).unwrap();
    let block = *sh_blocks(&doc)
        .first()
        .expect("docs/http-api.md has a sh block");
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("db");
    let model = model_dir();
    let s = Server::start_with(&dir, &["--demo", "--model", model.to_str().unwrap()]);
    // similar_notes answers once the demo's rows are embedded.
    s.indexed();
    let token_file = dir.join(".datanotes/owner-token");
    assert!(
        block.contains("demo/.datanotes/owner-token") && block.contains("http://127.0.0.1:5234"),
        "the example no longer reads the demo's token and address: {block}"
    );
    let script = block
        .replace("demo/.datanotes/owner-token", token_file.to_str().unwrap())
        .replace("http://127.0.0.1:5234", &s.url);
    let out = std::process::Command::new("bash")
        .arg("-c")
        .arg(&script)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The calls whose answer is printed (a captured one, `s=$(api ...)`, is read by the next).
    let calls: Vec<&str> = block.lines().filter(|l| l.starts_with("api ")).collect();
    assert!(calls.len() >= 10, "{block}");
    let answers: Vec<&str> = stdout.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(answers.len(), calls.len(), "{stdout}");
    for (call, answer) in calls.iter().zip(&answers) {
        let v: serde_json::Value = serde_json::from_str(answer)
            .unwrap_or_else(|e| panic!("{call} answered no JSON ({e}): {answer}"));
        assert!(v.get("error").is_none(), "{call} failed: {answer}");
    }
}

/// Runs `script` with bash in `dir`, `$DN` and `$TOKEN` set and `datanotes` on the `PATH`;
/// answers what it printed, failing on a failed command.
pub(crate) fn bash(dir: &Path, s: &Server, script: &str) -> String {
    bash_with(dir, s, script, None, &[])
}

/// [`bash`], with another folder on the `PATH` (after `datanotes`'s) and more variables.
pub(crate) fn bash_with(
    dir: &Path,
    s: &Server,
    script: &str,
    more_path: Option<&Path>,
    env: &[(&str, &Path)],
) -> String {
    let bin_dir = bin().parent().unwrap().to_path_buf();
    let mut path = format!("{}:", bin_dir.display());
    if let Some(p) = more_path {
        path.push_str(&format!("{}:", p.display()));
    }
    path.push_str(&std::env::var("PATH").unwrap_or_default());
    let out = std::process::Command::new("bash")
        .args(["-eo", "pipefail", "-c", script])
        .current_dir(dir)
        .env("PATH", path)
        .env("DN", &s.url)
        .env("TOKEN", &s.token)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{script}\nfailed: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

pub(crate) fn json(out: &str) -> Value {
    serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"))
}

/// A chapter's `sh` blocks, in order.
pub(crate) fn sh_blocks(doc: &str) -> Vec<&str> {
    doc.split("```sh\n")
        .skip(1)
        .map(|b| b.split("```").next().unwrap())
        .collect()
}

/// The first block holding `needle`.
pub(crate) fn block_with<'a>(blocks: &[&'a str], needle: &str) -> &'a str {
    blocks
        .iter()
        .find(|b| b.contains(needle))
        .unwrap_or_else(|| panic!("no sh block with {needle:?}"))
}
