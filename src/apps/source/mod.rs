//! WASM apps by reference: where a component comes from when it is not a file on the server's
//! machine. An `oci://` reference to a registry (the CNCF Wasm artifact layout that `wkg` and
//! `oras` push) or an `https://` URL pinned by its SHA-256; its signature (cosign-compatible,
//! checked against the keys the owner trusts); the manifest in which the app asks for rights.
//! The plan the owner reads before granting them, and upgrades and rollbacks, are the app
//! lifecycle's (`apps/install/by_reference.rs`); what an entry keeps of its source is
//! [`Origin`].
//!
//! - `oci.rs`: the registry client, the owner's credentials, the bounded pull;
//! - `sign_in.rs`: the registry's one sign-in per pull, its address checked;
//! - `url.rs`: a URL's bounded fetch, redirects followed by hand to public addresses only;
//! - `signature.rs`: cosign signatures (the `.sig` tag scheme), verified and made;
//! - `manifest.rs`: what an app asks for, and how it differs from what is granted.
//!
//! Everything fetched is hostile input: sizes are bounded before and while bytes stream, every
//! step is bounded in time ([`SourceOptions::timeout`]), a digest is checked before its bytes
//! are used, and a tag is resolved once: the pull, the signature and the install all use the
//! digest it resolved to.
//!
//! [`fetch`] resolves the tag once, holds to a plan's digest, checks the signature (required when
//! the owner says so) before the component is pulled, and is bounded in time as a whole.
//! [`Previous`] is the version kept for a rollback. [`sweep`] removes at start the components
//! fetched for plans never confirmed, a day old. Bytes are checked against their digest again when
//! read back from the cache.

pub mod manifest;
pub mod oci;
pub mod sign_in;
pub mod signature;
pub mod url;

use crate::error::{Error, Result};
use manifest::{AppManifest, AppRights};
use serde::{Deserialize, Serialize};
use signature::{SignatureCheck, Status, TrustedKey};
use std::path::PathBuf;
use std::time::Duration;

/// The owner's options for sources (`serve --registry-auth`, `--apps-private-sources`).
#[derive(Debug, Clone)]
pub struct SourceOptions {
    /// A Docker `config.json` with registry credentials (never stored, never shown to apps).
    pub registry_auth: Option<PathBuf>,
    /// Whether a source may redirect to a private, loopback or link-local address.
    pub private: bool,
    /// How long fetching a source may take, all steps together.
    pub timeout: Duration,
}

impl Default for SourceOptions {
    fn default() -> Self {
        SourceOptions {
            registry_auth: None,
            private: false,
            timeout: crate::knobs::ms("DATANOTES_APPS_SOURCE_TIMEOUT_MS", 300_000),
        }
    }
}

/// A source given by reference.
#[derive(Debug, Clone)]
pub enum Source {
    /// `oci://registry/repository:tag` or `@sha256:...`.
    Oci(oci_client::Reference),
    /// An `https://` URL (or `http://` on loopback), pinned by the component's SHA-256.
    Url {
        /// The URL.
        url: String,
        /// The SHA-256 the owner gave (hex, lowercase).
        sha256: String,
    },
}

/// Whether `source` names a reference (`oci://`, `https://`, `http://`) rather than a file.
pub fn is_reference(source: &str) -> bool {
    ["oci://", "https://", "http://"]
        .iter()
        .any(|p| source.starts_with(p))
}

impl Source {
    /// Parses a `source` and, for a URL, its required `sha256`.
    pub fn parse(source: &str, sha256: Option<&str>) -> Result<Source> {
        if let Some(r) = source.strip_prefix("oci://") {
            if sha256.is_some() {
                return Err(Error::invalid("sha256 is for URL sources")
                    .column("sha256")
                    .hint("an oci:// reference is pinned with @sha256:<digest>; drop sha256"));
            }
            return oci::parse_reference(r).map(Source::Oci);
        }
        if source.starts_with("https://") || source.starts_with("http://") {
            url::check_url(source)?;
            let Some(h) = sha256 else {
                return Err(Error::invalid(format!("{source}: a URL source needs its sha256"))
                    .column("sha256")
                    .rule("required")
                    .hint("add \"sha256\": \"<the component's SHA-256, 64 hex digits>\" (sha256sum app.wasm)"));
            };
            let h = h.trim().to_ascii_lowercase();
            if h.len() != 64 || !h.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(Error::invalid(format!("sha256 {h:?} is not 64 hex digits"))
                    .column("sha256")
                    .hint("give the component's SHA-256 as sha256sum prints it"));
            }
            return Ok(Source::Url {
                url: source.to_string(),
                sha256: h,
            });
        }
        Err(Error::invalid(format!("source {source:?} is not a reference"))
            .column("source")
            .hint("give oci://registry/repository:tag, oci://registry/repository@sha256:..., or https://.../app.wasm with sha256"))
    }

    /// The source as the owner wrote it.
    pub fn text(&self) -> String {
        match self {
            Source::Oci(r) => format!("oci://{}", r.whole()),
            Source::Url { url, .. } => url.clone(),
        }
    }
}

/// Where an installed component came from: kept on its entry, shown to the owner.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Origin {
    /// The source as given (a tag stays a tag: an upgrade pulls it again).
    pub source: String,
    /// The digest it was installed at (`sha256:...`: an OCI manifest's, or a URL component's).
    pub digest: String,
    /// When (RFC 3339).
    pub installed: String,
    /// Its signature, as checked at install.
    pub signature: SignatureCheck,
    /// The version its manifest gives, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// The rights its manifest asked for.
    #[serde(default)]
    pub asked: AppRights,
}

/// The version an upgrade replaced (or a rollback left), kept for `apps/rollback`: its
/// component stays in `.datanotes/apps/`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Previous {
    /// The component's SHA-256 (hex).
    pub sha256: String,
    /// Its size in bytes.
    pub size: u64,
    /// Where it came from (null: a file or an upload).
    #[serde(default)]
    pub origin: Option<Origin>,
}

/// An artifact fetched and checked, not installed yet.
pub struct Artifact {
    /// Where from.
    pub source: Source,
    /// The digest pinned.
    pub digest: String,
    /// The component's SHA-256 (hex).
    pub sha256: String,
    /// The component.
    pub bytes: Vec<u8>,
    /// What the app says of itself and asks for.
    pub manifest: Option<AppManifest>,
    /// Its signature.
    pub signature: SignatureCheck,
}

impl Artifact {
    /// What its entry keeps.
    pub fn origin(&self) -> Origin {
        Origin {
            source: self.source.text(),
            digest: self.digest.clone(),
            installed: crate::engine::journal::now(),
            signature: self.signature.clone(),
            version: self.manifest.as_ref().and_then(|m| m.version.clone()),
            asked: self.asked(),
        }
    }

    /// The rights it asks for.
    pub fn asked(&self) -> AppRights {
        self.manifest
            .as_ref()
            .map(|m| m.rights.clone())
            .unwrap_or_default()
    }
}

/// What a fetch must hold to.
pub struct Expect<'a> {
    /// The digest a plan showed: a tag that now resolves elsewhere is refused.
    pub digest: Option<&'a str>,
    /// The keys the owner trusts.
    pub trusted: &'a [TrustedKey],
    /// Whether a signature by one of them is required.
    pub require_signature: bool,
    /// The largest component.
    pub max_bytes: u64,
}

/// Fetches and checks a source: the tag resolved once, the plan's digest held to, the
/// signature checked (and required when the owner says so) before the component is pulled,
/// the component's bytes checked against their digest. `cached(sha)` answers a component
/// already stored. Bounded by the options' time as a whole.
pub async fn fetch(
    src: &Source,
    expect: &Expect<'_>,
    opts: &SourceOptions,
    cached: impl Fn(&str) -> Option<Vec<u8>>,
) -> Result<Artifact> {
    let work = fetch_inner(src, expect, opts, cached);
    tokio::time::timeout(opts.timeout, work)
        .await
        .map_err(|_| {
            Error::invalid(format!(
                "{}: no complete answer within {} s",
                src.text(),
                opts.timeout.as_secs_f32()
            ))
            .column("source")
            .hint("check that the registry or server is up and answers; try again")
        })?
}

async fn fetch_inner(
    src: &Source,
    expect: &Expect<'_>,
    opts: &SourceOptions,
    cached: impl Fn(&str) -> Option<Vec<u8>>,
) -> Result<Artifact> {
    match src {
        Source::Oci(r) => {
            let registry = r.resolve_registry().to_string();
            let auth = oci::auth_for(&registry, opts.registry_auth.as_deref())?;
            // One sign-in, its address checked: every read below carries its token.
            let signed = oci::sign_in(r, &auth, opts).await?;
            let digest = oci::resolve(&signed, r, opts).await?;
            moved(src, expect.digest, &digest)?;
            // The manifest first (what the artifact is), then who signed it, then its bytes.
            let art = oci::manifest(&signed, r, &digest, expect.max_bytes, opts).await?;
            let manifest = AppManifest::from_annotations(&art.annotations)?;
            let signature = signature::verify(&signed, r, &digest, expect.trusted, opts).await?;
            if expect.require_signature && signature.status != Status::Signed {
                return Err(signature::required_error(
                    &signature,
                    expect.trusted,
                    &digest,
                ));
            }
            let bytes = match cached(&art.sha256) {
                Some(b) => b,
                None => oci::blob(&signed, &art, opts).await?,
            };
            Ok(Artifact {
                source: src.clone(),
                digest,
                sha256: art.sha256,
                bytes,
                manifest,
                signature,
            })
        }
        Source::Url { url: u, sha256 } => {
            let digest = format!("sha256:{sha256}");
            moved(src, expect.digest, &digest)?;
            let signature = SignatureCheck {
                status: Status::Unsigned,
                key: None,
                fingerprint: None,
                detail: "a URL source carries no signature; publish to an OCI registry to sign"
                    .into(),
            };
            if expect.require_signature {
                return Err(signature::required_error(
                    &signature,
                    expect.trusted,
                    &digest,
                ));
            }
            let bytes = match cached(sha256) {
                Some(b) => b,
                None => {
                    let f = url::get(u, &[], expect.max_bytes, opts, false)
                        .await?
                        .ok_or_else(|| Error::internal("no body"))?;
                    if &f.sha256 != sha256 {
                        return Err(Error::invalid(format!(
                            "{u}: the bytes fetched have the SHA-256 {}, not the {sha256} given",
                            f.sha256
                        ))
                        .column("sha256")
                        .rule("digest")
                        .hint("check the sha256 the author published; nothing was installed"));
                    }
                    f.bytes
                }
            };
            let manifest = match url::sidecar(u) {
                Some(side) => {
                    match url::get(&side, &[], manifest::MAX_MANIFEST_BYTES as u64, opts, true)
                        .await?
                    {
                        Some(f) => Some(AppManifest::parse(&f.bytes, &side)?),
                        None => None,
                    }
                }
                None => None,
            };
            Ok(Artifact {
                source: src.clone(),
                digest,
                sha256: sha256.clone(),
                bytes,
                manifest,
                signature,
            })
        }
    }
}

/// How long a component fetched for a plan that was never confirmed stays stored (a confirm
/// within it finds it again instead of pulling it anew).
pub const PLAN_KEPT_FOR: Duration = Duration::from_secs(24 * 3600);

/// Removes the components in `apps_dir` that no app uses (`in_use`) and nothing touched for
/// `older_than`: those fetched for plans never confirmed. Answers how many.
pub fn sweep(
    apps_dir: &std::path::Path,
    in_use: impl Fn(&str) -> bool,
    older_than: Duration,
) -> usize {
    let Ok(entries) = std::fs::read_dir(apps_dir) else {
        return 0;
    };
    let mut n = 0;
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(sha) = name.to_str().and_then(|n| n.strip_suffix(".wasm")) else {
            continue;
        };
        let old = e
            .metadata()
            .ok()
            .filter(|m| m.is_file())
            .and_then(|m| m.modified().ok())
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age > older_than);
        if old && !in_use(sha) && std::fs::remove_file(e.path()).is_ok() {
            n += 1;
        }
    }
    n
}

/// Refuses a digest other than the one the plan showed.
fn moved(src: &Source, planned: Option<&str>, now: &str) -> Result<()> {
    match planned {
        Some(p) if p != now => Err(Error::conflict(format!(
            "{} resolves to {now}, not to {p} (the digest confirmed): it moved since the plan, or the digest is not the plan's",
            src.text()
        ))
        .column("digest")
        .rule("moved")
        .hint("nothing was installed; ask for a plan again and read it before confirming")),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_are_parsed_or_refused_with_the_field() {
        let latest = Source::parse("oci://example.org/apps/planning", None).unwrap();
        assert_eq!(latest.text(), "oci://example.org/apps/planning:latest");
        let s = Source::parse("oci://127.0.0.1:5000/apps/planning:0.1.0", None).unwrap();
        assert_eq!(s.text(), "oci://127.0.0.1:5000/apps/planning:0.1.0");
        let d = format!("oci://ghcr.io/a/b@sha256:{}", "a".repeat(64));
        assert_eq!(Source::parse(&d, None).unwrap().text(), d);
        let h = "b".repeat(64);
        assert!(matches!(
            Source::parse("https://example.org/app.wasm", Some(&h)).unwrap(),
            Source::Url { .. }
        ));
        for (src, sha, column) in [
            ("oci://planning:0.1.0", None, "source"),
            ("oci://example.org/", None, "source"),
            ("oci://example.org/apps/Planning:1", None, "source"),
            ("https://example.org/app.wasm", None, "sha256"),
            ("https://example.org/app.wasm", Some("abc"), "sha256"),
            ("http://example.org/app.wasm", Some(h.as_str()), "source"),
            ("ftp://example.org/app.wasm", None, "source"),
            ("oci://example.org/a/b:1", Some(h.as_str()), "sha256"),
        ] {
            let e = Source::parse(src, sha).unwrap_err();
            assert_eq!(e.column.as_deref(), Some(column), "{src}: {}", e.message);
        }
    }

    #[test]
    fn only_loopback_registries_are_plain_http() {
        for r in [
            "127.0.0.1:5000",
            "localhost:5000",
            "localhost",
            "[::1]:5000",
            "::1",
        ] {
            assert!(oci::is_loopback(r), "{r}");
        }
        for r in [
            "ghcr.io",
            "10.0.0.1:5000",
            "example.org:443",
            "127.0.0.1.nip.io",
        ] {
            assert!(!oci::is_loopback(r), "{r}");
        }
        assert_eq!(
            url::sidecar("https://example.org/d/app.wasm?x=1").as_deref(),
            Some("https://example.org/d/app.datanotes.json")
        );
        assert_eq!(url::sidecar("https://example.org/d/app"), None);
    }

    #[test]
    fn only_old_components_no_app_uses_are_swept() {
        let d = tempfile::tempdir().unwrap();
        for n in ["used.wasm", "planned.wasm", "notes.txt"] {
            std::fs::write(d.path().join(n), b"x").unwrap();
        }
        assert_eq!(sweep(d.path(), |_| false, Duration::from_secs(3600)), 0);
        assert_eq!(sweep(d.path(), |s| s == "used", Duration::ZERO), 1);
        let mut left: Vec<_> = std::fs::read_dir(d.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(left, ["notes.txt", "used.wasm"]);
    }
}
