//! OCI registries: the `oci-client` client (for `datanotes apps sign`; plain HTTP only to a
//! loopback registry, bounded connect and read times), the owner's credentials (a Docker
//! `config.json`), and a tag resolved to a digest. The reads of a pull (the manifest, then the
//! one `application/wasm` layer) are each one GET with the token of the pull's one sign-in
//! (`sign_in.rs`) through `url.rs`: bounded (4 MiB; the size the manifest declares), their redirects held to public
//! addresses, their bytes checked against their digests. The registry is hostile input.

pub use super::sign_in::{SignedIn, sign_in};
use crate::error::{Error, Result};
use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::manifest::{OciDescriptor, OciImageManifest};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};
use std::path::Path;
use std::time::Duration;

/// How long connecting to a registry may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a registry may leave a read waiting.
const READ_TIMEOUT: Duration = Duration::from_secs(30);

/// Whether a registry (`host[:port]`) is on a loopback address: reached over plain HTTP, as
/// docker and oras do for localhost. Any other registry only over HTTPS.
pub fn is_loopback(registry: &str) -> bool {
    crate::outbound::is_loopback_host(registry)
}

/// The client for a registry.
pub fn client_for(registry: &str) -> Client {
    let insecure = if is_loopback(registry) {
        vec![registry.to_string()]
    } else {
        vec![]
    };
    Client::new(ClientConfig {
        protocol: ClientProtocol::HttpsExcept(insecure),
        connect_timeout: Some(CONNECT_TIMEOUT),
        read_timeout: Some(READ_TIMEOUT),
        ..Default::default()
    })
}

/// The credentials for a registry from the owner's Docker `config.json` (`auths.<registry>`:
/// `auth` = base64 `user:password`, or `username` and `password`); anonymous when no file is
/// given or it names no credentials for this registry. Never stored, never shown to apps.
pub fn auth_for(registry: &str, file: Option<&Path>) -> Result<RegistryAuth> {
    use base64::Engine as _;
    let Some(file) = file else {
        return Ok(RegistryAuth::Anonymous);
    };
    let bad = |why: String| {
        Error::invalid(format!(
            "the registry credentials file {} cannot be used: {why}",
            file.display()
        ))
        .hint("give a Docker config.json: {\"auths\": {\"host:port\": {\"auth\": \"<base64 of user:password>\"}}}")
    };
    let bytes = read_small(file, 1 << 20).map_err(|e| bad(e.to_string()))?;
    let v: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|e| bad(format!("not JSON ({e})")))?;
    let auths = &v["auths"];
    let entry = [
        registry.to_string(),
        format!("https://{registry}"),
        format!("http://{registry}"),
    ]
    .iter()
    .find_map(|k| auths.get(k))
    .cloned();
    let Some(e) = entry else {
        return Ok(RegistryAuth::Anonymous);
    };
    if let (Some(u), Some(p)) = (e["username"].as_str(), e["password"].as_str()) {
        return Ok(RegistryAuth::Basic(u.into(), p.into()));
    }
    if let Some(a) = e["auth"].as_str() {
        let plain = base64::engine::general_purpose::STANDARD
            .decode(a.trim())
            .map_err(|_| bad(format!("auths.{registry}.auth is not base64")))?;
        let plain = String::from_utf8(plain)
            .map_err(|_| bad(format!("auths.{registry}.auth is not text")))?;
        let Some((u, p)) = plain.split_once(':') else {
            return Err(bad(format!("auths.{registry}.auth is not user:password")));
        };
        return Ok(RegistryAuth::Basic(u.into(), p.into()));
    }
    if let Some(t) = e["registrytoken"].as_str().or(e["identitytoken"].as_str()) {
        return Ok(RegistryAuth::Bearer(t.into()));
    }
    Err(bad(format!(
        "auths.{registry} has neither auth nor username and password"
    )))
}

/// Parses an `oci://` reference (the scheme already removed): `host[:port]/repo:tag` or
/// `host[:port]/repo@sha256:...`. The registry must be named (no Docker Hub default).
pub fn parse_reference(r: &str) -> Result<Reference> {
    let bad = |why: &str| {
        Error::invalid(format!("invalid OCI reference {r:?}: {why}"))
            .column("source")
            .hint("give oci://registry[:port]/repository:tag or oci://registry[:port]/repository@sha256:<64 hex>")
    };
    let (first, rest) = r.split_once('/').ok_or_else(|| bad("no repository"))?;
    if first.is_empty() || !(first.contains('.') || first.contains(':') || first == "localhost") {
        return Err(bad("the registry's host is missing"));
    }
    if rest.is_empty() {
        return Err(bad("no repository"));
    }
    let parsed: Reference = r
        .parse()
        .map_err(|e: oci_client::ParseError| bad(&e.to_string()))?;
    if parsed.tag().is_none() && parsed.digest().is_none() {
        return Err(bad("no tag or digest"));
    }
    Ok(parsed)
}

/// A registry error in words an owner reads (never a Rust type name).
pub fn registry_error(what: &str, r: &Reference, e: impl std::fmt::Display) -> Error {
    Error::invalid(format!("{what} {}: {e}", r.whole()))
        .column("source")
        .hint("check the reference, that the registry is up, and its credentials (--registry-auth)")
}

/// A small file the owner points to, read whole up to `max` bytes (more: refused).
pub(crate) fn read_small(path: &Path, max: u64) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let f = std::fs::File::open(path)?;
    if !f.metadata()?.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    let mut out = Vec::new();
    f.take(max + 1).read_to_end(&mut out)?;
    if out.len() as u64 > max {
        return Err(std::io::Error::other(format!("larger than {max} bytes")));
    }
    Ok(out)
}

/// The media types of a WASM component layer: the CNCF Wasm artifact layout's, and the older
/// one some tools still push.
const WASM_LAYERS: [&str; 2] = [
    "application/wasm",
    oci_client::manifest::WASM_LAYER_MEDIA_TYPE,
];

/// An artifact's manifest, read and checked: the one WASM layer it names.
pub struct Artifact {
    /// The reference, pinned to the manifest's digest.
    pub pinned: Reference,
    /// The component's layer.
    pub layer: OciDescriptor,
    /// The component's SHA-256 (hex): its layer's digest.
    pub sha256: String,
    /// Its size in bytes, as the manifest declares it.
    pub size: u64,
    /// The manifest's annotations, then the layer's.
    pub annotations: std::collections::BTreeMap<String, String>,
}

/// Resolves a reference to its manifest digest: a digest as is; a tag by reading the manifest
/// it names ([`read_manifest`]: bounded, redirects held to public addresses), whose digest is
/// the SHA-256 of its bytes.
pub async fn resolve(
    signed: &SignedIn,
    r: &Reference,
    opts: &super::SourceOptions,
) -> Result<String> {
    if let Some(d) = r.digest() {
        return Ok(d.to_string());
    }
    match read_manifest(signed, r, opts).await? {
        Some((_, digest)) => Ok(digest),
        None => Err(registry_error(
            "cannot resolve",
            r,
            "the registry has no such tag",
        )),
    }
}

/// The refusal of an artifact that is not one WASM component, saying why.
fn not_wasm(r: &Reference, why: String) -> Error {
    Error::invalid(format!(
        "{} is not a WASM component artifact: {why}",
        r.whole()
    ))
    .column("source")
    .rule("artifact")
    .hint("publish the component with wkg (wkg oci push) or oras, as one application/wasm layer")
}

/// Reads a manifest of `r`'s repository by its tag or digest: one bounded GET (4 MiB) with the
/// pull's credentials, its bytes checked against the digest when `r` names one. Answers it
/// and its digest; `None` when the registry has none (404).
pub async fn read_manifest(
    signed: &SignedIn,
    r: &Reference,
    opts: &super::SourceOptions,
) -> Result<Option<(OciImageManifest, String)>> {
    use oci_client::manifest::{IMAGE_MANIFEST_MEDIA_TYPE, OCI_IMAGE_MEDIA_TYPE};
    use reqwest::header::ACCEPT;
    let failed = |why: String| registry_error("cannot read the manifest of", r, why);
    let mut headers = signed.headers();
    let accept = format!("{OCI_IMAGE_MEDIA_TYPE}, {IMAGE_MANIFEST_MEDIA_TYPE}");
    headers.push((ACCEPT, accept));
    let at = r.digest().or(r.tag()).unwrap_or("latest");
    let url = v2_url(r, "manifests", at);
    let Some(raw) = super::url::get(&url, &headers, MAX_MANIFEST, opts, true)
        .await
        .map_err(|e| failed(e.message.clone()))?
    else {
        return Ok(None);
    };
    let digest = format!("sha256:{}", raw.sha256);
    if let Some(d) = r.digest()
        && d != digest
    {
        return Err(failed(format!(
            "the registry served a manifest whose digest is {digest}, not {d}"
        )));
    }
    let m = serde_json::from_slice(&raw.bytes)
        .map_err(|e| failed(format!("the manifest is malformed ({e})")))?;
    Ok(Some((m, digest)))
}

/// Reads the manifest `digest` of `r`'s repository ([`read_manifest`]) and finds its one WASM
/// layer, at most `max` bytes as declared, with no foreign URLs.
pub async fn manifest(
    signed: &SignedIn,
    r: &Reference,
    digest: &str,
    max: u64,
    opts: &super::SourceOptions,
) -> Result<Artifact> {
    let rd = r.clone_with_digest(digest.to_string());
    let Some((m, _)) = read_manifest(signed, &rd, opts).await? else {
        return Err(registry_error(
            "cannot read the manifest of",
            &rd,
            "the registry has no such manifest",
        ));
    };
    let layers: Vec<_> = m
        .layers
        .iter()
        .filter(|l| WASM_LAYERS.contains(&l.media_type.as_str()))
        .collect();
    let [layer] = layers[..] else {
        let kinds: Vec<&str> = m.layers.iter().map(|l| l.media_type.as_str()).collect();
        return Err(not_wasm(
            &rd,
            format!(
                "it has {} WASM layers (layers: {kinds:?}); one is expected",
                layers.len()
            ),
        ));
    };
    if layer.urls.as_ref().is_some_and(|u| !u.is_empty()) {
        return Err(not_wasm(&rd, "its layer points to other URLs".into()));
    }
    let Some(sha) = layer
        .digest
        .strip_prefix("sha256:")
        .filter(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()))
    else {
        let why = format!(
            "its layer's digest {:?} is not a sha256 digest",
            layer.digest
        );
        return Err(not_wasm(&rd, why));
    };
    if layer.size < 0 || layer.size as u64 > max {
        return Err(Error::invalid(format!(
            "{}: its manifest declares a component of {} bytes, more than the limit of {max}",
            rd.whole(),
            layer.size
        ))
        .column("source")
        .rule("max")
        .hint("nothing was downloaded; install a smaller component"));
    }
    let mut annotations = m.annotations.clone().unwrap_or_default();
    for (k, v) in layer.annotations.clone().unwrap_or_default() {
        annotations.entry(k).or_insert(v);
    }
    Ok(Artifact {
        sha256: sha.to_ascii_lowercase(),
        size: layer.size as u64,
        layer: layer.clone(),
        pinned: rd,
        annotations,
    })
}

/// The largest manifest read (the distribution specification's bound for what a registry
/// must accept).
const MAX_MANIFEST: u64 = 4 << 20;

/// The address of a manifest or a blob of `r`'s repository (plain HTTP on loopback only).
fn v2_url(r: &Reference, what: &str, digest: &str) -> String {
    let registry = r.resolve_registry();
    let scheme = if is_loopback(registry) {
        "http"
    } else {
        "https"
    };
    format!(
        "{scheme}://{registry}/v2/{}/{what}/{digest}",
        r.repository()
    )
}

/// Reads a blob of `r`'s repository: one GET with the pull's credentials, its redirects (to
/// a storage service) followed only to public addresses, at most the `max` bytes and exactly
/// the size its descriptor declares, checked against its digest.
pub async fn read_blob(
    signed: &SignedIn,
    r: &Reference,
    desc: &OciDescriptor,
    max: u64,
    opts: &super::SourceOptions,
) -> Result<Vec<u8>> {
    let refused = |why: String| {
        Error::invalid(format!("{}: {why}", r.whole()))
            .column("source")
            .rule("digest")
            .hint("the registry does not serve what its manifest declares; nothing was installed")
    };
    let size = u64::try_from(desc.size).unwrap_or(u64::MAX);
    if size > max {
        return Err(refused(format!(
            "a blob of {size} bytes is declared, more than the limit of {max}"
        )));
    }
    let headers = signed.headers();
    let url = v2_url(r, "blobs", &desc.digest);
    let fetched = super::url::get(&url, &headers, size, opts, false)
        .await
        .map_err(|e| {
            let mut e = refused(format!(
                "a blob cannot be pulled ({}); the manifest declares {size} bytes",
                e.message
            ));
            e.hint = Some(
                "the registry refused, redirected where it may not, or sent more than its manifest declares; nothing was installed"
                    .into(),
            );
            e
        })?
        .ok_or_else(|| Error::internal("no body"))?;
    if fetched.bytes.len() as u64 != size {
        return Err(refused(format!(
            "the registry sent {} bytes, its manifest declares {size}",
            fetched.bytes.len()
        )));
    }
    if format!("sha256:{}", fetched.sha256) != desc.digest.to_ascii_lowercase() {
        return Err(refused(format!(
            "the bytes sent have the digest sha256:{}, not the declared {}",
            fetched.sha256, desc.digest
        )));
    }
    Ok(fetched.bytes)
}

/// Pulls an artifact's component ([`read_blob`]).
pub async fn blob(signed: &SignedIn, a: &Artifact, opts: &super::SourceOptions) -> Result<Vec<u8>> {
    read_blob(signed, &a.pinned, &a.layer, a.size, opts).await
}
