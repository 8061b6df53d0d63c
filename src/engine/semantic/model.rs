//! The embedding model: a model2vec static model read from a folder (`config.json`,
//! `tokenizer.json`, `model.safetensors`), run in-process by `model2vec-rs`.
//!
//! The folder is hostile input like the rest: no file is read through a symbolic link (and no
//! folder inside the database folder either), each file is bounded in size before it is read,
//! and every problem is one sentence naming the file and what is wrong with it.
//!
//! The model's shape is checked against its tokenizer; its fingerprint is a digest of its files.

use model2vec_rs::model::StaticModel;
use sha2::{Digest, Sha256};
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

/// The files of a model folder, each with the most bytes read of it.
const FILES: [(&str, u64); 3] = [
    ("config.json", 1 << 20),
    ("tokenizer.json", 64 << 20),
    ("model.safetensors", 2 << 30),
];

/// A loaded model.
pub struct Model {
    inner: StaticModel,
    /// Dimensions of its vectors.
    pub dim: usize,
    /// What identifies it: a digest of its three files. Vectors are tagged with it; vectors of
    /// another fingerprint are never compared with this model's.
    pub fingerprint: String,
    /// The folder it was read from.
    pub dir: PathBuf,
    /// Bytes its embedding table holds in memory.
    pub bytes: usize,
}

impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "model {} ({})", self.dir.display(), self.fingerprint)
    }
}

/// Reads one file of the model folder: not through a link, a regular file, at most `max` bytes.
fn read_bounded(dir: &Path, name: &str, max: u64) -> Result<Vec<u8>, String> {
    use std::os::unix::fs::OpenOptionsExt;
    let path = dir.join(name);
    let shown = path.display();
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(&path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => format!(
                "{shown} is a symbolic link, which the engine does not follow: put the file itself there"
            ),
            _ if e.kind() == std::io::ErrorKind::NotFound => format!(
                "{shown} is missing: a model folder holds config.json, tokenizer.json and model.safetensors"
            ),
            _ => format!("{shown} cannot be opened: {e}"),
        })?;
    let meta = f
        .metadata()
        .map_err(|e| format!("{shown} cannot be read: {e}"))?;
    if !meta.is_file() {
        return Err(format!("{shown} is not a regular file"));
    }
    if meta.len() > max {
        return Err(format!(
            "{shown} is {} bytes, over the {max} bytes a model's {name} may have",
            meta.len()
        ));
    }
    let mut out = Vec::with_capacity(meta.len() as usize);
    File::take(f, max + 1)
        .read_to_end(&mut out)
        .map_err(|e| format!("{shown} cannot be read: {e}"))?;
    if out.len() as u64 > max {
        return Err(format!("{shown} grew past {max} bytes while it was read"));
    }
    Ok(out)
}

/// Refuses a model folder inside the database folder reached through a symbolic link.
fn check_no_links(root: &Path, dir: &Path) -> Result<(), String> {
    let Ok(rest) = dir.strip_prefix(root) else {
        return Ok(());
    };
    let mut at = root.to_path_buf();
    for part in rest.components() {
        at.push(part);
        let m = std::fs::symlink_metadata(&at)
            .map_err(|e| format!("model folder {}: {e}", at.display()))?;
        if m.file_type().is_symlink() {
            return Err(format!(
                "{} is a symbolic link inside the database folder, which the engine does not follow: give the model's real folder",
                at.display()
            ));
        }
    }
    Ok(())
}

/// How many entries the tokenizer's vocabulary has (a WordPiece/BPE map or a Unigram list).
fn vocab_size(tokenizer: &serde_json::Value) -> Option<usize> {
    let v = tokenizer.get("model")?.get("vocab")?;
    v.as_object()
        .map(|o| o.len())
        .or_else(|| v.as_array().map(Vec::len))
}

impl Model {
    /// Loads the model in `dir` (made absolute against `root`, the database folder, when
    /// relative). `root` also bounds where links are refused.
    pub fn load(dir: &Path, root: &Path) -> Result<Model, String> {
        let dir = if dir.is_absolute() {
            dir.to_path_buf()
        } else {
            root.join(dir)
        };
        let shown = dir.display();
        match std::fs::metadata(&dir) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => return Err(format!("model folder {shown} is not a folder")),
            Err(_) => {
                return Err(format!(
                    "model folder {shown} does not exist (bash scripts/fetch-model installs the default one under target/models/)"
                ));
            }
        }
        check_no_links(root, &dir)?;
        let mut bytes = vec![];
        let mut digest = Sha256::new();
        for (name, max) in FILES {
            let b = read_bounded(&dir, name, max)?;
            digest.update(Sha256::digest(&b));
            bytes.push(b);
        }
        let [config, tokenizer, weights]: [Vec<u8>; 3] = bytes.try_into().expect("three files");
        let fingerprint = hex::encode(&digest.finalize()[..12]);
        let cfg: serde_json::Value = serde_json::from_slice(&config)
            .map_err(|e| format!("{shown}/config.json is not JSON: {e}"))?;
        if !cfg.is_object() {
            return Err(format!("{shown}/config.json is not a JSON object"));
        }
        let tok: serde_json::Value = serde_json::from_slice(&tokenizer)
            .map_err(|e| format!("{shown}/tokenizer.json is not JSON: {e}"))?;
        let vocab = vocab_size(&tok).ok_or_else(|| {
            format!("{shown}/tokenizer.json has no model.vocab: it is not a tokenizer's file")
        })?;
        drop(tok);
        let (rows, dim) =
            embedding_shape(&weights).map_err(|why| format!("{shown}/model.safetensors {why}"))?;
        if rows < vocab {
            return Err(format!(
                "{shown}/model.safetensors has {rows} embeddings for the {vocab} tokens of tokenizer.json: the two files are of different models"
            ));
        }
        let inner = StaticModel::from_bytes(&tokenizer, &weights, &config, None)
            .map_err(|e| format!("the model in {shown} cannot be loaded: {e:#}"))?;
        drop(weights);
        // A quarter of the memory, with vectors close to the f32 model's.
        let inner = inner.quantize_int8();
        let model = Model {
            dim: inner.dim(),
            inner,
            fingerprint,
            dir: dir.clone(),
            bytes: rows * dim + rows * 4,
        };
        let probe = model
            .embed(&["a probe of the model".to_string()])
            .ok_or_else(|| format!("the model in {shown} fails on a plain sentence"))?;
        if probe.len() != model.dim || probe.iter().any(|x| !x.is_finite()) {
            return Err(format!(
                "the model in {shown} answers vectors of the wrong shape"
            ));
        }
        Ok(model)
    }

    /// The vectors of `texts`, one after the other (`dim` floats each, unit length), or `None`
    /// if the model failed on them.
    pub fn embed(&self, texts: &[String]) -> Option<Vec<f32>> {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.inner.encode_flat_with_args(texts, Some(512))
        }))
        .ok()
    }
}

/// The shape (rows, dimensions) of the embedding table in a safetensors file, or why there is
/// none.
fn embedding_shape(bytes: &[u8]) -> Result<(usize, usize), String> {
    let st = safetensors::SafeTensors::deserialize(bytes)
        .map_err(|e| format!("is not a safetensors file (or is truncated): {e}"))?;
    let t = ["embeddings", "0", "embedding.weight"]
        .iter()
        .find_map(|n| st.tensor(n).ok())
        .ok_or("has no embeddings tensor (named embeddings)")?;
    match *t.shape() {
        [rows, dim] if rows > 0 && dim > 0 => Ok((rows, dim)),
        _ => Err(format!(
            "has an embeddings tensor of shape {:?}, where a table of rows × dimensions is expected",
            t.shape()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vocab_of_both_layouts() {
        let wp = serde_json::json!({"model": {"vocab": {"a": 0, "b": 1}}});
        let uni = serde_json::json!({"model": {"vocab": [["a", 0.0], ["b", 1.0], ["c", 2.0]]}});
        assert_eq!(vocab_size(&wp), Some(2));
        assert_eq!(vocab_size(&uni), Some(3));
        assert_eq!(vocab_size(&serde_json::json!({})), None);
    }

    #[test]
    fn not_safetensors() {
        assert!(
            embedding_shape(b"junk")
                .unwrap_err()
                .contains("not a safetensors")
        );
    }
}
