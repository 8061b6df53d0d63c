//! Tokens: 256 random bits with a prefix per kind, kept only as their SHA-256 and compared in
//! constant time; and the owner token's files (`.datanotes/owner-token`, 0600, for the local
//! CLI, and its hash).

use sha2::{Digest, Sha256};
use std::path::Path;
use subtle::ConstantTimeEq;

/// The owner token's prefix.
pub const OWNER_PREFIX: &str = "dn_owner_";
/// An app token's prefix.
pub const APP_PREFIX: &str = "dn_app_";

/// A new token of the given kind.
pub fn new_token(prefix: &str) -> String {
    let bytes: [u8; 32] = rand::random();
    format!("{prefix}{}", hex::encode(bytes))
}

/// A token's SHA-256, hex: what the server keeps instead of the token.
pub fn token_hash(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

/// Constant-time comparison of a presented token with a stored hash.
pub fn matches(token: &str, hash_hex: &str) -> bool {
    let h = Sha256::digest(token.as_bytes());
    match hex::decode(hash_hex) {
        Ok(stored) => bool::from(h.as_slice().ct_eq(&stored)),
        Err(_) => false,
    }
}

/// Creates the owner token on first start: written once to `.datanotes/owner-token` (0600) for
/// the local CLI; its hash goes to `.datanotes/owner-token.sha256`. Returns the token if new.
pub fn ensure_owner_token(meta_dir: &Path) -> std::io::Result<(String, Option<String>)> {
    let hash_path = meta_dir.join("owner-token.sha256");
    if let Ok(h) = std::fs::read_to_string(&hash_path) {
        return Ok((h.trim().to_string(), None));
    }
    let token = new_token(OWNER_PREFIX);
    let token_path = meta_dir.join("owner-token");
    write_private(&token_path, token.as_bytes())?;
    let hash = token_hash(&token);
    write_private(&hash_path, hash.as_bytes())?;
    Ok((hash, Some(token)))
}

/// Writes a file only its owner can read (0600), atomically.
pub fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)?;
    if let Some(d) = path.parent() {
        std::fs::File::open(d)?.sync_all()?;
    }
    Ok(())
}

/// Reads the owner token the engine saved (for the local CLI); an error names the file and
/// what to check.
pub fn read_owner_token(db: &Path) -> std::io::Result<String> {
    let path = db.join(".datanotes/owner-token");
    match std::fs::read_to_string(&path) {
        Ok(t) => Ok(t.trim().to_string()),
        Err(e) => Err(std::io::Error::new(
            e.kind(),
            format!(
                "cannot read the owner token {} ({e}): is {} a datanotes database folder, and are you its owner?",
                path.display(),
                db.display()
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_matches_its_hash_only() {
        let t = new_token(APP_PREFIX);
        assert!(t.starts_with(APP_PREFIX) && t.len() == APP_PREFIX.len() + 64);
        assert!(matches(&t, &token_hash(&t)));
        assert!(!matches("x", &token_hash(&t)));
        assert!(!matches(&t, "not hex"));
    }
}
