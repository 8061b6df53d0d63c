//! [`HostileRegistry`]: a tiny OCI registry written in the test (plain HTTP on 127.0.0.1, a
//! thread per connection, one request per connection), which serves one WASM artifact in the
//! CNCF Wasm layout under any repository and tag, honestly or not (a [`Mode`]): a size that
//! lies, a blob that never ends or is huge, a registry that hangs, a redirect, bytes that are
//! no component, a manifest that is no JSON, a tag that moves. It counts what it served, so a
//! test can check that a client stopped reading early.
//!
//! [`FileServer`]: the same plumbing serving files and redirects by path (the `http://` URL
//! sources of apps, and the target of a redirect).
//!
//! - here: the media types and the [`Mode`]s;
//! - `artifact`: the manifest and blobs a mode serves;
//! - `server`: [`HostileRegistry`] started in a mode, and what it counts;
//! - `answer`: what the registry answers each request;
//! - `file_server`: [`FileServer`];
//! - `http`: the HTTP plumbing they share.

mod answer;
mod artifact;
mod file_server;
mod http;
mod server;

pub use file_server::{FileServer, Route};
pub use server::HostileRegistry;

use sha2::Digest as _;

/// The media types of the CNCF Wasm OCI artifact layout.
pub const MANIFEST_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";
/// The config's media type.
pub const CONFIG_TYPE: &str = "application/vnd.wasm.config.v0+json";
/// The component layer's media type.
pub const LAYER_TYPE: &str = "application/wasm";

/// The size an [`Mode::EndlessBlob`] manifest declares: 2 MiB (well within any bound).
pub const ENDLESS_DECLARED: u64 = 2 << 20;
/// The size a [`Mode::HugeBlob`] manifest declares: 10 GiB.
pub const HUGE_DECLARED: u64 = 10 << 30;

/// What the registry does.
pub enum Mode {
    /// Serves this component correctly.
    Honest(Vec<u8>),
    /// The manifest declares a 1,000-byte layer (with the right digest); the blob served is the
    /// real, larger bytes.
    LyingSize(Vec<u8>),
    /// The manifest declares [`ENDLESS_DECLARED`] bytes; the blob streams bytes forever
    /// (chunked), until the client hangs up.
    EndlessBlob,
    /// The manifest declares [`HUGE_DECLARED`] bytes; the blob (with that length) streams until
    /// the client hangs up.
    HugeBlob,
    /// Accepts connections and never answers.
    Hang,
    /// Serves this component's manifest; its blob is a 302 to the URL.
    RedirectBlob(Vec<u8>, String),
    /// A layer of 4 KiB of random bytes, with correct sizes and digests.
    NotAComponent,
    /// A manifest that is not JSON (its digest matches its bytes).
    MalformedManifest,
    /// The tag names the first component until [`HostileRegistry::move_tag`], then the second.
    MovingTag(Vec<u8>, Vec<u8>),
    /// A `HEAD` of the manifest answers a digest; its `GET` streams bytes forever (chunked),
    /// counted as [`HostileRegistry::blob_bytes_sent`].
    EndlessManifest,
    /// `/v2/` answers 401 with a challenge whose sign-in `realm` is this URL.
    SignInAt(String),
    /// Serves this component; `/v2/` answers 401 with a challenge whose `realm` is the
    /// registry's own `/token` (which answers a token) the first time, and this URL after.
    SignInTwice(Vec<u8>, String),
}

/// `sha256:<hex>` of bytes.
pub fn digest_of(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(sha2::Sha256::digest(bytes)))
}
