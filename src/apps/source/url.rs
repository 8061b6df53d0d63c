//! A component from a URL, pinned by the SHA-256 the owner gives: `https://`, or `http://` to a
//! loopback address. The server is hostile input: each redirect is followed by hand (at most
//! [`MAX_HOPS`]) and only to a public address unless the owner allows private ones (the outbound
//! rule, `crate::outbound`, checked again at the connection); the body is bounded and hashed as
//! it streams.
//!
//! The owner allows private addresses with `--apps-private-sources`.

use super::SourceOptions;
use crate::error::{Error, Result};
use crate::outbound::{self, Policy};
use sha2::Digest;
use std::time::Duration;

/// The most redirects followed.
const MAX_HOPS: usize = 5;

/// A fetched body and where it came from at last.
pub struct Fetched {
    /// The bytes.
    pub bytes: Vec<u8>,
    /// Their SHA-256, hex.
    pub sha256: String,
}

fn bad(url: &str, why: impl std::fmt::Display) -> Error {
    Error::invalid(format!("cannot fetch {url}: {why}"))
        .column("source")
        .hint("check the URL; it must be https (http only on a loopback address)")
}

/// Whether a URL's host is a loopback address or `localhost`.
fn loopback_host(u: &reqwest::Url) -> bool {
    u.host_str().is_some_and(crate::outbound::is_loopback_host)
}

/// Checks a URL's form: https, or http to a loopback address; no credentials.
pub fn check_url(u: &str) -> Result<reqwest::Url> {
    let parsed = reqwest::Url::parse(u).map_err(|e| bad(u, format!("not a URL ({e})")))?;
    let ok = match parsed.scheme() {
        "https" => true,
        "http" => loopback_host(&parsed),
        _ => false,
    };
    if !ok {
        return Err(bad(
            u,
            "only https is allowed (plain http only to a loopback address)",
        ));
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(bad(u, "a URL with credentials is refused"));
    }
    Ok(parsed)
}

/// GETs `url`, following redirects by hand under the rules above, at most `max` bytes, in the
/// options' time; `headers` go to the first address only (a registry's credentials: the
/// redirects of its blobs, to a storage service, get none). `None`: the server answered 404 and
/// `missing_ok`.
pub async fn get(
    url: &str,
    headers: &[(reqwest::header::HeaderName, String)],
    max: u64,
    opts: &SourceOptions,
    missing_ok: bool,
) -> Result<Option<Fetched>> {
    let work = async {
        let mut at = check_url(url)?;
        for hop in 0..=MAX_HOPS {
            // The owner named the first address; a redirect may lead only to public ones (the
            // client's resolver checks again as it connects).
            let policy = if hop == 0 {
                Policy::Any
            } else {
                Policy::private_if(opts.private)
            };
            let host = at.host_str().unwrap_or_default().to_string();
            outbound::resolve(&host, policy).await.map_err(|r| {
                if !r.is_address() {
                    return bad(url, r);
                }
                bad(
                    url,
                    format!(
                        "it redirects to {at}: {r}; the owner may allow private, loopback or link-local addresses with --apps-private-sources"
                    ),
                )
            })?;
            let client = outbound::builder(policy)
                .connect_timeout(Duration::from_secs(10))
                .read_timeout(Duration::from_secs(30))
                .build()
                .map_err(|e| Error::internal(format!("cannot build an HTTP client: {e}")))?;
            let mut req = client.get(at.clone());
            if hop == 0 {
                for (k, v) in headers {
                    req = req.header(k, v);
                }
            }
            let mut r = req
                .send()
                .await
                .map_err(|e| bad(url, outbound::describe(&e)))?;
            if r.status().is_redirection() {
                let to = r
                    .headers()
                    .get(reqwest::header::LOCATION)
                    .and_then(|l| l.to_str().ok())
                    .and_then(|l| at.join(l).ok())
                    .ok_or_else(|| bad(url, "a redirect without a valid Location"))?;
                at = check_url(to.as_str())?;
                continue;
            }
            if r.status() == reqwest::StatusCode::NOT_FOUND && missing_ok {
                return Ok(None);
            }
            if !r.status().is_success() {
                return Err(bad(url, format!("the server answered {}", r.status())));
            }
            let too_big = || bad(url, format!("it is larger than {max} bytes"));
            if r.content_length().is_some_and(|n| n > max) {
                return Err(too_big());
            }
            let mut bytes = Vec::new();
            let mut h = sha2::Sha256::new();
            while let Some(chunk) = r.chunk().await.map_err(|e| bad(url, e))? {
                if (bytes.len() + chunk.len()) as u64 > max {
                    return Err(too_big());
                }
                h.update(&chunk);
                bytes.extend_from_slice(&chunk);
            }
            return Ok(Some(Fetched {
                bytes,
                sha256: hex::encode(h.finalize()),
            }));
        }
        Err(bad(url, format!("more than {MAX_HOPS} redirects")))
    };
    tokio::time::timeout(opts.timeout, work)
        .await
        .map_err(|_| {
            bad(
                url,
                format!("no answer within {} s", opts.timeout.as_secs_f32()),
            )
        })?
}

/// The sidecar manifest's URL: the final `.wasm` replaced by `.datanotes.json`.
pub fn sidecar(url: &str) -> Option<String> {
    let parsed = reqwest::Url::parse(url).ok()?;
    let path = parsed.path().strip_suffix(".wasm")?;
    let mut s = parsed.clone();
    s.set_path(&format!("{path}.datanotes.json"));
    s.set_query(None);
    Some(s.to_string())
}
