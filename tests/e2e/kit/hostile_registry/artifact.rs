//! The artifact a registry serves: a manifest in the CNCF Wasm layout, its digest, and the blobs
//! it names (a component's bytes, or a blob that never ends, is huge or redirects).

use super::{CONFIG_TYPE, LAYER_TYPE, MANIFEST_TYPE, digest_of};

/// A blob's answer.
pub(super) enum Blob {
    Bytes(Vec<u8>),
    Endless,
    Huge,
    Redirect(String),
}

/// A manifest, its digest, and the blobs it names.
pub(super) struct Artifact {
    pub(super) manifest: Vec<u8>,
    pub(super) digest: String,
    pub(super) blobs: Vec<(String, Blob)>,
}

/// The manifest of a component (declared `size`, `digest`) with a small config.
pub(super) fn artifact(
    layer_digest: &str,
    size: u64,
    blob: Blob,
    annotations: &[(String, String)],
) -> Artifact {
    let config = serde_json::to_vec(&serde_json::json!({
        "architecture": "wasm", "os": "wasip2", "layerDigests": [layer_digest]
    }))
    .unwrap();
    let config_digest = digest_of(&config);
    let mut manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": MANIFEST_TYPE,
        "config": {"mediaType": CONFIG_TYPE, "digest": config_digest, "size": config.len()},
        "layers": [{"mediaType": LAYER_TYPE, "digest": layer_digest, "size": size}],
    });
    if !annotations.is_empty() {
        let a: serde_json::Map<String, serde_json::Value> = annotations
            .iter()
            .map(|(k, v)| (k.clone(), v.clone().into()))
            .collect();
        manifest["annotations"] = a.into();
    }
    let manifest = serde_json::to_vec(&manifest).unwrap();
    Artifact {
        digest: digest_of(&manifest),
        manifest,
        blobs: vec![
            (config_digest, Blob::Bytes(config)),
            (layer_digest.to_string(), blob),
        ],
    }
}

pub(super) fn honest(bytes: &[u8], annotations: &[(String, String)]) -> Artifact {
    artifact(
        &digest_of(bytes),
        bytes.len() as u64,
        Blob::Bytes(bytes.to_vec()),
        annotations,
    )
}
