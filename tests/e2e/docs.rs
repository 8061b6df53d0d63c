//! The docs tell the truth about the tree: every file or folder `ARCHITECTURE.md` names exists.

use std::path::Path;

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
