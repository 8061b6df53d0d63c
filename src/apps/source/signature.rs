//! Cosign-compatible signatures (cosign v2, key-based), checked against the keys the owner
//! trusts, and made by `datanotes apps sign`.
//!
//! The tag scheme: the signatures of `REPO@sha256:<hex>` live in the same repository under the
//! tag `sha256-<hex>.sig`, an OCI image manifest with one layer per signature. Each layer is a
//! "simple signing" payload (`application/vnd.dev.cosign.simplesigning.v1+json`) whose
//! annotation `dev.cosignproject.cosign/signature` is the base64 of an ECDSA-P256-SHA256
//! signature (ASN.1 DER) over the layer's exact bytes; the payload's JSON names the digest
//! signed (`critical.image.docker-manifest-digest`) and `critical.type` is `cosign container
//! image signature`. Signing again appends a layer, as cosign does. This is what `cosign sign
//! --key` writes (v2; v3 with `--new-bundle-format=false`) and `cosign verify --key` reads, on
//! registries without the OCI 1.1 referrers API too. Keyless signatures are not checked.
//!
//! Verified against the owner's `trusted_keys` with the `sigstore` crate, and made by `datanotes
//! apps keygen` and `apps sign`.

use super::oci::registry_error;
use crate::error::Error;
use anyhow::{anyhow, bail};
use base64::{Engine as _, engine::general_purpose::STANDARD as B64};
use oci_client::client::{Config, ImageLayer};
use oci_client::errors::OciErrorCode::{ManifestUnknown, NameUnknown, NotFound};
use oci_client::errors::{OciDistributionError, OciError};
use oci_client::manifest::{OCI_IMAGE_MEDIA_TYPE, OciImageManifest};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};
use sigstore::crypto::signing_key::SigStoreKeyPair;
use sigstore::crypto::{CosignVerificationKey, SigStoreSigner, Signature, SigningScheme};
use std::collections::BTreeMap;

/// A signature layer's media type, its annotation holding the signature, its payload's type.
const SIMPLE_SIGNING: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
const SIG_ANNOTATION: &str = "dev.cosignproject.cosign/signature";
const PAYLOAD_TYPE: &str = "cosign container image signature";
/// The most signature layers, and the largest payload, read from one `.sig` manifest.
const MAX_LAYERS: usize = 16;
const MAX_PAYLOAD: u64 = 64 * 1024;

/// A key the owner trusts: kept in the engine settings (`trusted_keys`).
pub use crate::engine::settings::TrustedKey;

/// What the signatures of an artifact say.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Signed by a trusted key.
    Signed,
    /// No signature at all.
    Unsigned,
    /// Signatures, but none by a trusted key (or none valid for this digest).
    Untrusted,
}

/// The outcome of a signature check, as the plan and the entry show it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SignatureCheck {
    /// Signed, unsigned or untrusted.
    pub status: Status,
    /// The name of the trusted key that signed.
    pub key: Option<String>,
    /// That key's fingerprint ([`fingerprint`]); absent from checks recorded before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fingerprint: Option<String>,
    /// What was found, in words.
    pub detail: String,
}

impl SignatureCheck {
    fn new(status: Status, key: Option<String>, detail: String) -> Self {
        SignatureCheck {
            status,
            key,
            fingerprint: None,
            detail,
        }
    }

    /// The signer in words: `alice (key 0123456789abcdef)`.
    fn signer(&self) -> String {
        let name = self.key.as_deref().unwrap_or("?");
        match &self.fingerprint {
            Some(fp) => format!("{name} (key {fp})"),
            None => name.to_string(),
        }
    }

    /// What a version checked `new` changes of the signer of the version checked `self` (the
    /// one installed), in plain words; `None` when the signer stays, or there was none.
    pub fn signer_change(&self, new: &SignatureCheck) -> Option<String> {
        if self.status != Status::Signed {
            return None;
        }
        let was = format!("the installed version was signed by {}", self.signer());
        let now = match new.status {
            Status::Unsigned => "this one is unsigned".to_string(),
            Status::Untrusted => "this one is signed, but by no trusted key".to_string(),
            Status::Signed => {
                let same_key = match (&self.fingerprint, &new.fingerprint) {
                    (Some(a), Some(b)) => a == b,
                    _ => true,
                };
                if self.key == new.key && same_key {
                    return None;
                }
                format!("this one is signed by another key: {}", new.signer())
            }
        };
        Some(format!("{was}; {now}"))
    }

    /// One line for people: "signed by alice", "unsigned", "signed, but by no trusted key".
    pub fn line(&self) -> String {
        match self.status {
            Status::Signed => format!("signed by {}", self.key.as_deref().unwrap_or("?")),
            Status::Unsigned => "unsigned".into(),
            Status::Untrusted => "signed, but by no trusted key".into(),
        }
    }
}

/// The short fingerprint of a PEM public key: SHA-256 of its DER bytes (of the text when it
/// does not decode), first 16 hex digits.
pub fn fingerprint(pem: &str) -> String {
    let b64: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
    let sum = match B64.decode(b64.as_bytes()) {
        Ok(d) if !d.is_empty() => Sha256::digest(&d),
        _ => Sha256::digest(pem.as_bytes()),
    };
    hex::encode(sum)[..16].to_string()
}

/// The tag holding the signatures of `digest` (`sha256:<hex>` → `sha256-<hex>.sig`).
pub fn sig_tag(digest: &str) -> String {
    format!("{}.sig", digest.replace(':', "-"))
}

/// The reference of the signature manifest of `digest`, in `image`'s repository.
fn sig_reference(image: &Reference, digest: &str) -> Reference {
    let (registry, repository) = (image.registry().into(), image.repository().into());
    Reference::with_tag(registry, repository, sig_tag(digest))
}

/// The signature manifest of `digest`, or `None` when there is none (404).
async fn sig_manifest(
    client: &Client,
    auth: &RegistryAuth,
    sig_ref: &Reference,
) -> Result<Option<OciImageManifest>, OciDistributionError> {
    use OciDistributionError as E;
    let unknown = |e: &OciError| matches!(e.code, ManifestUnknown | NotFound | NameUnknown);
    match client.pull_image_manifest(sig_ref, auth).await {
        Ok((m, _)) => Ok(Some(m)),
        Err(E::ImageManifestNotFoundError(_) | E::ServerError { code: 404, .. }) => Ok(None),
        Err(E::RegistryError { envelope, .. }) if envelope.errors.iter().any(unknown) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Checks the cosign signatures of the artifact `image` whose manifest digest is `digest`
/// against the `trusted` keys. A missing `.sig` tag is `unsigned`; a registry failure is an
/// error.
pub async fn verify(
    signed: &super::oci::SignedIn,
    image: &Reference,
    digest: &str,
    trusted: &[TrustedKey],
    opts: &super::SourceOptions,
) -> Result<SignatureCheck, Error> {
    let sig_ref = sig_reference(image, digest);
    let failed =
        |e: &dyn std::fmt::Display| registry_error("cannot read the signatures of", image, e);
    // Bounded reads, as for the artifact itself: the registry is hostile input.
    let m = super::oci::read_manifest(signed, &sig_ref, opts).await?;
    let Some((mut m, _)) = m else {
        let detail = format!("no signature: the tag {} does not exist", sig_tag(digest));
        return Ok(SignatureCheck::new(Status::Unsigned, None, detail));
    };
    m.layers.retain(|l| l.media_type == SIMPLE_SIGNING);
    let refused = |why: String| failed(&format!("{why} ({})", sig_ref.whole()));
    let n = m.layers.len();
    if n > MAX_LAYERS {
        return Err(refused(format!("{n} signatures, more than {MAX_LAYERS}")));
    }
    let mut found = Vec::new();
    for l in &m.layers {
        let Some(sig) = l.annotations.as_ref().and_then(|a| a.get(SIG_ANNOTATION)) else {
            continue;
        };
        if l.size < 0 || l.size as u64 > MAX_PAYLOAD {
            return Err(refused(format!(
                "a signature payload larger than {MAX_PAYLOAD} bytes"
            )));
        }
        let payload = super::oci::read_blob(signed, &sig_ref, l, MAX_PAYLOAD, opts).await?;
        found.push((payload, sig.clone()));
    }
    Ok(judge(&found, digest, trusted))
}

/// The check over the signatures found (payload bytes, base64 signature): the first trusted key
/// that verifies a payload naming `digest` gives `signed`.
fn judge(found: &[(Vec<u8>, String)], digest: &str, trusted: &[TrustedKey]) -> SignatureCheck {
    let mut other_digest = 0;
    for (payload, sig) in found {
        for k in trusted {
            let Ok(vk) = CosignVerificationKey::try_from_pem(k.public_key.as_bytes()) else {
                continue;
            };
            let sig = Signature::Base64Encoded(sig.as_bytes());
            if vk.verify_signature(sig, payload).is_err() {
                continue;
            }
            let v: serde_json::Value = serde_json::from_slice(payload).unwrap_or_default();
            let c = &v["critical"];
            if c["image"]["docker-manifest-digest"] == digest && c["type"] == PAYLOAD_TYPE {
                let fp = fingerprint(&k.public_key);
                let detail = format!("signed by {} (key {fp}) for {digest}", k.name);
                let mut c = SignatureCheck::new(Status::Signed, Some(k.name.clone()), detail);
                c.fingerprint = Some(fp);
                return c;
            }
            other_digest += 1;
        }
    }
    if found.is_empty() {
        let detail = format!("no signature: the tag {} holds none", sig_tag(digest));
        return SignatureCheck::new(Status::Unsigned, None, detail);
    }
    let (n, s) = (found.len(), if found.len() == 1 { "" } else { "s" });
    let mut detail = format!("{n} signature{s} found, none by a trusted key");
    if other_digest > 0 {
        let why = "by a trusted key, but for another digest or of another kind";
        detail.push_str(&format!(" ({other_digest} {why})"));
    }
    if trusted.is_empty() {
        detail.push_str("; no key is trusted");
    }
    SignatureCheck::new(Status::Untrusted, None, detail)
}

/// The refusal when the owner requires a signature by a trusted key and `check` is not one:
/// which keys were expected and what was found.
pub fn required_error(check: &SignatureCheck, trusted: &[TrustedKey], digest: &str) -> Error {
    let expected = if trusted.is_empty() {
        "a trusted key, but no key is trusted".to_string()
    } else {
        let name = |k: &TrustedKey| format!("{} ({})", k.name, fingerprint(&k.public_key));
        let names: Vec<String> = trusted.iter().map(name).collect();
        format!("one of the trusted keys {}", names.join(", "))
    };
    let found = match check.status {
        Status::Unsigned => "it is unsigned".to_string(),
        Status::Untrusted => format!("it is signed by an unknown key: {}", check.detail),
        Status::Signed => format!("it is {}", check.line()),
    };
    let message =
        format!("a signature is required: {digest} must be signed by {expected}, but {found}");
    let hint = "sign it with a trusted key (`datanotes apps sign REF --key KEY`), or trust its signer's public key (`datanotes apps trust NAME --key FILE.pub`, or trusted_keys with set_engine_settings), or turn require_signature off";
    Error::invalid(message).column("source").hint(hint)
}

/// A new ECDSA P-256 key pair: (private key PEM, public key PEM). The private key is PKCS#8,
/// encrypted as cosign does ("ENCRYPTED SIGSTORE PRIVATE KEY") when the environment variable
/// `COSIGN_PASSWORD` is set and not empty, else plain ("PRIVATE KEY").
pub fn keygen() -> anyhow::Result<(String, String)> {
    let kp = SigningScheme::ECDSA_P256_SHA256_ASN1.create_signer();
    let kp = kp.and_then(|s| s.to_sigstore_keypair());
    let kp = kp.map_err(|e| anyhow!("cannot make a key pair: {e}"))?;
    let password = std::env::var("COSIGN_PASSWORD").unwrap_or_default();
    let private = match password.as_str() {
        "" => kp.private_key_to_pem(),
        p => kp.private_key_to_encrypted_pem(p.as_bytes()),
    };
    let private = private.map_err(|e| anyhow!("cannot write the private key: {e}"))?;
    let public = kp.public_key_to_pem();
    let public = public.map_err(|e| anyhow!("cannot write the public key: {e}"))?;
    Ok((private.to_string(), public))
}

/// The signer of a private key PEM: PKCS#8 ("PRIVATE KEY"), or encrypted by cosign or
/// sigstore ("ENCRYPTED COSIGN PRIVATE KEY"), then with the password in `COSIGN_PASSWORD`.
fn signer_from_pem(key_pem: &str) -> anyhow::Result<SigStoreSigner> {
    let kp = if key_pem.contains("-----BEGIN ENCRYPTED") {
        let Ok(password) = std::env::var("COSIGN_PASSWORD") else {
            bail!("the private key is encrypted: set COSIGN_PASSWORD to its password");
        };
        let kp = SigStoreKeyPair::from_encrypted_pem(key_pem.as_bytes(), password.as_bytes());
        kp.map_err(|_| anyhow!("the private key cannot be decrypted: check COSIGN_PASSWORD"))?
    } else {
        let kp = SigStoreKeyPair::from_pem(key_pem.as_bytes());
        kp.map_err(|_| anyhow!("not a private key: make one with `datanotes apps keygen PREFIX`"))?
    };
    kp.to_sigstore_signer(&SigningScheme::ECDSA_P256_SHA256_ASN1)
        .map_err(|_| anyhow!("the private key is not an ECDSA P-256 key"))
}

/// The simple-signing payload for `digest` in `image`'s repository.
fn payload(image: &Reference, digest: &str) -> Vec<u8> {
    let reference = format!("{}/{}", image.registry(), image.repository());
    let v = serde_json::json!({"critical": {"identity": {"docker-reference": reference},
        "image": {"docker-manifest-digest": digest}, "type": PAYLOAD_TYPE}, "optional": null});
    serde_json::to_vec(&v).unwrap_or_default()
}

/// Signs the digest `image` resolves to with the private key `key_pem` and pushes the signature
/// (appended to the `.sig` manifest if there is one): (digest signed, tag pushed).
pub async fn sign(
    client: &Client,
    auth: &RegistryAuth,
    image: &Reference,
    key_pem: &str,
) -> anyhow::Result<(String, String)> {
    let signer = signer_from_pem(key_pem)?;
    let digest = client.fetch_manifest_digest(image, auth).await;
    let digest = digest.map_err(|e| anyhow!("cannot resolve {}: {e}", image.whole()))?;
    let payload = payload(image, &digest);
    let sig = signer.sign(&payload);
    let sig = sig.map_err(|e| anyhow!("cannot sign: {e}"))?;
    let sig_ref = sig_reference(image, &digest);
    let existing = sig_manifest(client, auth, &sig_ref).await;
    let existing = existing.map_err(|e| anyhow!("cannot read {}: {e}", sig_ref.whole()))?;
    let annotations = BTreeMap::from([(SIG_ANNOTATION.to_string(), B64.encode(sig))]);
    let layer = ImageLayer::new(payload, SIMPLE_SIGNING.into(), Some(annotations));
    let config = Config::oci_v1(b"{}".to_vec(), None);
    let mut manifest = OciImageManifest::build(std::slice::from_ref(&layer), &config, None);
    manifest.media_type = Some(OCI_IMAGE_MEDIA_TYPE.to_string());
    if let Some(old) = existing {
        manifest.layers.splice(0..0, old.layers);
    }
    let layers = [layer];
    let pushed = client.push(&sig_ref, &layers, config, auth, Some(manifest));
    let pushed = pushed.await;
    pushed.map_err(|e| anyhow!("cannot push {}: {e}", sig_ref.whole()))?;
    Ok((digest.clone(), sig_tag(&digest)))
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIGEST: &str = "sha256:8459ba71000000000000000000000000000000000000000000000000000000aa";

    fn signed(key_pem: &str, digest: &str) -> (Vec<u8>, String) {
        let image: Reference = "127.0.0.1:5000/apps/planning:0.1.0".parse().unwrap();
        let p = payload(&image, digest);
        let sig = signer_from_pem(key_pem).unwrap().sign(&p).unwrap();
        (p, B64.encode(sig))
    }

    fn key(name: &str, public_key: &str) -> TrustedKey {
        let (name, public_key) = (name.into(), public_key.into());
        TrustedKey { name, public_key }
    }

    fn has(text: &str, part: &str) {
        assert!(text.contains(part), "{part:?} not in {text:?}");
    }

    #[test]
    fn a_signature_verifies_with_its_key_only() {
        let ((alice_key, alice_pub), (bob_key, bob_pub)) = (keygen().unwrap(), keygen().unwrap());
        let (alice, bob) = ([key("alice", &alice_pub)], [key("bob", &bob_pub)]);
        let by_alice = [signed(&alice_key, DIGEST)];
        let c = judge(&by_alice, DIGEST, &[bob[0].clone(), alice[0].clone()]);
        assert_eq!(c.line(), "signed by alice");
        let by_both = [by_alice[0].clone(), signed(&bob_key, DIGEST)];
        let c = judge(&by_both, DIGEST, &bob);
        assert_eq!(c.key.as_deref(), Some("bob"));
        // Another key: untrusted, with the count of signatures found; the 400 names both.
        let c = judge(&by_alice, DIGEST, &bob);
        assert_eq!(c.line(), "signed, but by no trusted key");
        has(&c.detail, "1 signature found");
        let json = serde_json::to_string(&c).unwrap();
        has(&json, r#"{"status":"untrusted","key":null,"#);
        let e = required_error(&c, &bob, DIGEST);
        assert_eq!((e.status, e.column.as_deref()), (400, Some("source")));
        let fp = fingerprint(&bob[0].public_key);
        has(&e.message, &format!("bob ({fp})"));
        has(&e.message, "signed by an unknown key");
        // A good signature over another digest, or a changed payload, does not count.
        let other = "sha256:0000000000000000000000000000000000000000000000000000000000000001";
        let c = judge(&[signed(&alice_key, other)], DIGEST, &alice);
        assert_eq!(c.status, Status::Untrusted, "{c:?}");
        let [(mut p, s)] = by_alice;
        p.push(b' ');
        let c = judge(&[(p, s)], DIGEST, &alice);
        assert_eq!(c.status, Status::Untrusted, "{c:?}");
        let c = judge(&[], DIGEST, &alice);
        assert_eq!(c.line(), "unsigned");
        let e = required_error(&c, &alice, DIGEST);
        has(&e.message, "alice (");
        has(&e.message, "but it is unsigned");
    }

    #[test]
    fn a_change_of_signer_is_said_in_words() {
        let ((alice_key, alice_pub), (bob_key, bob_pub)) = (keygen().unwrap(), keygen().unwrap());
        let both = [key("alice", &alice_pub), key("bob", &bob_pub)];
        let by_alice = judge(&[signed(&alice_key, DIGEST)], DIGEST, &both);
        let fp = fingerprint(&alice_pub);
        assert_eq!(by_alice.fingerprint.as_deref(), Some(fp.as_str()));
        assert_eq!(by_alice.signer_change(&by_alice), None);
        let was = format!("the installed version was signed by alice (key {fp}); ");
        let unsigned = judge(&[], DIGEST, &both);
        let c = by_alice.signer_change(&unsigned).unwrap();
        assert_eq!(c, format!("{was}this one is unsigned"));
        let untrusted = judge(&[signed(&alice_key, DIGEST)], DIGEST, &both[1..]);
        has(
            &by_alice.signer_change(&untrusted).unwrap(),
            "no trusted key",
        );
        let by_bob = judge(&[signed(&bob_key, DIGEST)], DIGEST, &both);
        let c = by_alice.signer_change(&by_bob).unwrap();
        has(
            &c,
            &format!("signed by another key: bob (key {})", fingerprint(&bob_pub)),
        );
        // The same name for another key is another signer; a record without a fingerprint
        // (kept before it was) is judged by the name.
        let mut renamed = by_bob.clone();
        renamed.key = Some("alice".into());
        assert!(by_alice.signer_change(&renamed).is_some());
        let mut old = by_alice.clone();
        old.fingerprint = None;
        let json = serde_json::to_value(&old).unwrap();
        assert!(json.get("fingerprint").is_none(), "{json}");
        let old: SignatureCheck = serde_json::from_value(json).unwrap();
        assert_eq!(old.signer_change(&by_alice), None);
        assert!(old.signer_change(&by_bob).is_some());
        // Nothing to lose: an unsigned or untrusted version installed.
        assert_eq!(unsigned.signer_change(&by_bob), None);
        assert_eq!(untrusted.signer_change(&unsigned), None);
    }

    #[test]
    fn a_trusted_key_needs_a_name_and_a_public_key() {
        let (private, public) = keygen().unwrap();
        key("alice", &public).check().unwrap();
        let e = key(" ", &public).check().unwrap_err();
        has(&e.message, "empty name");
        for bad in ["", "hello", private.as_str()] {
            let e = key("alice", bad).check().unwrap_err();
            has(&e.message, "\"alice\" is not a PEM public key");
            has(e.hint.as_deref().unwrap(), "datanotes apps keygen");
        }
        let v = serde_json::json!({"name": "a", "public_key": public, "x": 1});
        assert!(serde_json::from_value::<TrustedKey>(v).is_err());
        assert_ne!(fingerprint(&public), fingerprint(&keygen().unwrap().1));
    }
}
