//! `datanotes apps keygen | sign | trust`: the keys that sign apps, made, used and trusted here
//! (`sign` needs no server).

use super::{Conn, post};
use crate::apps::source::oci;
use crate::apps::source::signature::{self, TrustedKey};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

/// `datanotes apps sign REF --key FILE`.
#[derive(clap::Args)]
pub struct SignArgs {
    /// The app in its registry: [oci://]REGISTRY/REPO:TAG or [oci://]REGISTRY/REPO@sha256:HEX.
    #[arg(value_name = "REF")]
    pub reference: String,
    /// The private key (PREFIX.key from `datanotes apps keygen`, or a cosign.key with
    /// COSIGN_PASSWORD set).
    #[arg(long)]
    pub key: PathBuf,
    /// The registry's credentials: a Docker config.json.
    #[arg(long, env = "DATANOTES_REGISTRY_AUTH")]
    pub registry_auth: Option<PathBuf>,
}

/// PREFIX with a suffix appended (`keys/alice` → `keys/alice.key`).
pub(super) fn with_suffix(prefix: &Path, suffix: &str) -> PathBuf {
    let mut s = prefix.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

/// `datanotes apps keygen PREFIX`: PREFIX.key (0600) and PREFIX.pub, never over existing files.
pub fn keygen(prefix: &Path) -> anyhow::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let (key, public) = (with_suffix(prefix, ".key"), with_suffix(prefix, ".pub"));
    for p in [&key, &public] {
        if p.exists() {
            anyhow::bail!(
                "{} already exists: it is not overwritten; give another PREFIX",
                p.display()
            );
        }
    }
    let (private_pem, public_pem) = signature::keygen()?;
    let write = |p: &Path, text: &str, mode: u32| -> anyhow::Result<()> {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(p)
            .map_err(|e| anyhow::anyhow!("cannot write {}: {}", p.display(), plain_io(&e)))?;
        f.write_all(text.as_bytes())
            .map_err(|e| anyhow::anyhow!("cannot write {}: {}", p.display(), plain_io(&e)))
    };
    write(&key, &private_pem, 0o600)?;
    write(&public, &public_pem, 0o644)?;
    let encrypted = private_pem.contains("ENCRYPTED");
    println!(
        "wrote {} (the private key{}: keep it secret) and {} (the public key, fingerprint {})",
        key.display(),
        if encrypted {
            ", encrypted with COSIGN_PASSWORD"
        } else {
            ""
        },
        public.display(),
        signature::fingerprint(&public_pem)
    );
    println!(
        "sign an app:   datanotes apps sign oci://REGISTRY/REPO:TAG --key {}",
        key.display()
    );
    println!(
        "trust the key: datanotes apps trust NAME --key {} --database DIR",
        public.display()
    );
    Ok(())
}

/// An I/O error in plain words (no "os error N").
pub(super) fn plain_io(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound => "no such file or folder".into(),
        std::io::ErrorKind::PermissionDenied => "permission denied".into(),
        std::io::ErrorKind::AlreadyExists => "it already exists".into(),
        _ => {
            let s = e.to_string();
            s.split(" (os error").next().unwrap_or(&s).to_string()
        }
    }
}

/// An engine error as the CLI says it: the message, then the hint.
pub(super) fn said(e: crate::error::Error) -> anyhow::Error {
    match &e.hint {
        Some(h) => anyhow::anyhow!("{}\nhint: {h}", e.message),
        None => anyhow::anyhow!("{}", e.message),
    }
}

/// A small text file the user points to (a key).
pub(super) fn read_key(p: &Path) -> anyhow::Result<String> {
    let b = oci::read_small(p, 64 * 1024)
        .map_err(|e| anyhow::anyhow!("cannot read the key {}: {}", p.display(), plain_io(&e)))?;
    String::from_utf8(b).map_err(|_| anyhow::anyhow!("{} is not a PEM key file", p.display()))
}

/// `datanotes apps sign REF --key FILE`: signs in this process and pushes the `.sig` tag.
pub fn sign(a: SignArgs) -> anyhow::Result<()> {
    let r = a.reference.strip_prefix("oci://").unwrap_or(&a.reference);
    let image = oci::parse_reference(r).map_err(said)?;
    let key = read_key(&a.key)?;
    let auth = oci::auth_for(image.registry(), a.registry_auth.as_deref()).map_err(said)?;
    let client = oci::client_for(image.registry());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let (digest, tag) = rt.block_on(signature::sign(&client, &auth, &image, &key))?;
    println!("signed {} ({digest})", image.whole());
    println!(
        "pushed the signature to {}/{}:{tag}",
        image.registry(),
        image.repository()
    );
    Ok(())
}

/// `datanotes apps trust NAME --key FILE.pub`: adds the key to the server's `trusted_keys`.
pub fn trust(conn: &Conn, name: String, key: &Path) -> anyhow::Result<()> {
    let public_key = read_key(key)?;
    if public_key.contains("PRIVATE KEY-----") {
        anyhow::bail!(
            "{} is a private key: give the public one (PREFIX.pub), and keep this one secret",
            key.display()
        );
    }
    let k = TrustedKey { name, public_key };
    k.check().map_err(said)?;
    let settings = post(conn, "get_engine_settings", json!({}))?["settings"].clone();
    let Some(keys) = settings.get("trusted_keys").and_then(Value::as_array) else {
        anyhow::bail!(
            "this server has no trusted_keys setting: it predates signed apps; upgrade it"
        );
    };
    let mut keys = keys.clone();
    let fp = crate::apps::source::signature::fingerprint(&k.public_key);
    for x in &keys {
        let same = x["public_key"]
            .as_str()
            .is_some_and(|p| signature::fingerprint(p) == fp);
        match (x["name"] == k.name.as_str(), same) {
            (true, true) => {
                println!("{} is already trusted (key {fp})", k.name);
                return Ok(());
            }
            (true, false) => anyhow::bail!(
                "another key is already trusted as {}: choose another name (or remove it from trusted_keys with set_engine_settings)",
                k.name
            ),
            (false, true) => anyhow::bail!(
                "this key is already trusted as {}",
                x["name"].as_str().unwrap_or("?")
            ),
            _ => {}
        }
    }
    keys.push(serde_json::to_value(&k)?);
    post(
        conn,
        "set_engine_settings",
        json!({"settings": {"trusted_keys": keys}}),
    )?;
    println!(
        "trusted {} (key {fp}): apps signed with its private key show \"signed by {}\"",
        k.name, k.name
    );
    if settings["require_signature"] != true {
        println!(
            "signatures are not required: to refuse apps not signed by a trusted key, set \
             require_signature (set_engine_settings {{\"settings\": {{\"require_signature\": true}}}})"
        );
    }
    Ok(())
}
