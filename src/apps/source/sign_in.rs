//! Signing in to a registry, once per pull: the registry's `/v2/` challenge is read once, the
//! address of its sign-in (the `realm` of a Bearer challenge) is checked by the outbound rule,
//! and the token is asked of that very address through a client that connects only to the
//! addresses the rule allows. Every read of the pull (manifests, signatures, the component)
//! carries the one `Authorization` got here: no later challenge is read, so a registry cannot
//! answer a public realm to the check and a private one to the pull.

use crate::error::{Error, Result};
use crate::outbound::{self, Policy};
use oci_client::Reference;
use oci_client::secrets::RegistryAuth;
use reqwest::header::{AUTHORIZATION, HeaderName, WWW_AUTHENTICATE};
use std::collections::BTreeMap;
use std::time::Duration;

/// How long connecting to a registry, or to where it signs in, may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long either may leave a read waiting.
const READ_TIMEOUT: Duration = Duration::from_secs(30);
/// The largest answer of a sign-in (a token in JSON).
const MAX_TOKEN_ANSWER: usize = 64 << 10;

/// The `Authorization` every read of one pull carries (none: anonymous).
#[derive(Debug, Clone, Default)]
pub struct SignedIn(Option<String>);

impl SignedIn {
    /// The headers of a read.
    pub fn headers(&self) -> Vec<(HeaderName, String)> {
        self.0.iter().map(|v| (AUTHORIZATION, v.clone())).collect()
    }
}

/// A sign-in refused or failed, in words an owner reads.
fn failed(r: &Reference, why: impl std::fmt::Display) -> Error {
    Error::invalid(format!(
        "cannot sign in to the registry of {}: {why}",
        r.whole()
    ))
    .column("source")
    .hint("check the reference, that the registry is up, and its credentials (--registry-auth)")
}

/// Signs in for a pull from `r`'s repository with the owner's credentials `auth`: a token the
/// owner gave is used as is; else the registry's one challenge decides (Bearer: a token asked
/// of its checked realm; Basic or none: the owner's Basic credentials, if any).
pub async fn sign_in(
    r: &Reference,
    auth: &RegistryAuth,
    opts: &super::SourceOptions,
) -> Result<SignedIn> {
    use base64::Engine as _;
    let basic = match auth {
        RegistryAuth::Bearer(t) => return Ok(SignedIn(Some(format!("Bearer {t}")))),
        RegistryAuth::Basic(u, p) => {
            let b = base64::engine::general_purpose::STANDARD.encode(format!("{u}:{p}"));
            Some(format!("Basic {b}"))
        }
        RegistryAuth::Anonymous => None,
    };
    let registry = r.resolve_registry();
    let Some(challenge) = challenge(registry).await? else {
        return Ok(SignedIn(basic));
    };
    let Some(params) = bearer_params(&challenge) else {
        return Ok(SignedIn(basic));
    };
    let Some(realm) = params.get("realm") else {
        return Ok(SignedIn(basic));
    };
    let (url, policy) = checked_realm(registry, realm, opts).await?;
    let token = token(r, url, policy, params.get("service"), basic).await?;
    Ok(SignedIn(Some(format!("Bearer {token}"))))
}

/// The registry's `/v2/` challenge (`WWW-Authenticate`), if it sends one.
async fn challenge(registry: &str) -> Result<Option<String>> {
    let scheme = if crate::outbound::is_loopback_host(registry) {
        "http"
    } else {
        "https"
    };
    // The owner named the registry: any address.
    let client = client(Policy::Any)?;
    let url = format!("{scheme}://{registry}/v2/");
    let r = client.get(&url).send().await.map_err(|e| {
        let e = outbound::describe(&e);
        Error::invalid(format!("cannot reach the registry {registry}: {e}"))
            .column("source")
            .hint("check the reference and that the registry is up")
    })?;
    Ok(r.headers()
        .get(WWW_AUTHENTICATE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string))
}

fn client(policy: Policy) -> Result<reqwest::Client> {
    outbound::builder(policy)
        .connect_timeout(CONNECT_TIMEOUT)
        .read_timeout(READ_TIMEOUT)
        .build()
        .map_err(|e| Error::internal(format!("cannot build an HTTP client: {e}")))
}

/// Where the registry sends clients to sign in must be the registry itself or a public address,
/// unless the owner allows private ones; https, or plain http on loopback. Answers the URL and
/// the policy the connection to it holds to (checked again as it connects).
async fn checked_realm(
    registry: &str,
    realm: &str,
    opts: &super::SourceOptions,
) -> Result<(reqwest::Url, Policy)> {
    let refused = |why: String| {
        Error::invalid(format!(
            "the registry {registry} sends clients to sign in at {realm:?}: {why}"
        ))
        .column("source")
    };
    let url = reqwest::Url::parse(realm).map_err(|e| refused(format!("not a URL ({e})")))?;
    super::url::check_url(url.as_str()).map_err(|_| {
        refused("only https is allowed (plain http only to a loopback address)".into())
    })?;
    let host = url.host_str().unwrap_or_default().trim_matches(['[', ']']);
    let own = registry
        .rsplit_once(':')
        .map_or(registry, |(h, _)| h)
        .trim_matches(['[', ']']);
    if opts.private || host.eq_ignore_ascii_case(own) {
        return Ok((url, Policy::Any));
    }
    let hint = "the owner may allow that with --apps-private-sources";
    match outbound::resolve(host, Policy::Public).await {
        Ok(_) => Ok((url, Policy::Public)),
        Err(e) if e.is_address() => Err(refused(e.to_string()).hint(hint)),
        Err(e) => Err(Error::invalid(format!(
            "cannot resolve {host}, where {registry} signs in: {e}"
        ))
        .column("source")),
    }
}

/// Asks the realm `url` for a token to pull from `r`'s repository (the distribution token
/// protocol), with the owner's Basic credentials if any; no redirect is followed.
async fn token(
    r: &Reference,
    mut url: reqwest::Url,
    policy: Policy,
    service: Option<&String>,
    basic: Option<String>,
) -> Result<String> {
    url.query_pairs_mut()
        .append_pair("scope", &format!("repository:{}:pull", r.repository()));
    if let Some(s) = service {
        url.query_pairs_mut().append_pair("service", s);
    }
    let mut req = client(policy)?.get(url);
    if let Some(b) = basic {
        req = req.header(AUTHORIZATION, b);
    }
    let mut a = req
        .send()
        .await
        .map_err(|e| failed(r, outbound::describe(&e)))?;
    if !a.status().is_success() {
        return Err(failed(r, format!("the sign-in answered {}", a.status())));
    }
    let mut body = Vec::new();
    while let Some(chunk) = a.chunk().await.map_err(|e| failed(r, e))? {
        if body.len() + chunk.len() > MAX_TOKEN_ANSWER {
            return Err(failed(r, "the sign-in's answer is too large"));
        }
        body.extend_from_slice(&chunk);
    }
    let v: serde_json::Value =
        serde_json::from_slice(&body).map_err(|_| failed(r, "the sign-in's answer is not JSON"))?;
    v["token"]
        .as_str()
        .or(v["access_token"].as_str())
        .filter(|t| !t.is_empty() && t.bytes().all(|b| b.is_ascii_graphic()))
        .map(str::to_string)
        .ok_or_else(|| failed(r, "the sign-in's answer holds no token"))
}

/// The parameters of a Bearer challenge (names in lower case; quoted values unescaped), or
/// `None` when the challenge is of another scheme or malformed.
fn bearer_params(h: &str) -> Option<BTreeMap<String, String>> {
    let h = h.trim_start();
    let (scheme, mut s) = h.split_at(h.find(char::is_whitespace)?);
    if !scheme.eq_ignore_ascii_case("bearer") {
        return None;
    }
    let mut out = BTreeMap::new();
    s = s.trim_start();
    while !s.is_empty() {
        let (k, after) = s.split_once('=')?;
        let after = after.trim_start();
        let (v, next) = match after.strip_prefix('"') {
            Some(q) => {
                let (mut v, mut chars, mut end) = (String::new(), q.char_indices(), None);
                while let Some((i, c)) = chars.next() {
                    match c {
                        '\\' => v.extend(chars.next().map(|(_, n)| n)),
                        '"' => {
                            end = Some(i + 1);
                            break;
                        }
                        c => v.push(c),
                    }
                }
                (v, &q[end?..])
            }
            None => {
                let end = after.find(',').unwrap_or(after.len());
                (after[..end].trim().to_string(), &after[end..])
            }
        };
        out.entry(k.trim().to_ascii_lowercase()).or_insert(v);
        s = next.trim_start().trim_start_matches(',').trim_start();
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bearer_challenge_is_read_whole_and_only_as_written() {
        let p = bearer_params(
            r#"Bearer realm="https://auth.example/token",service="reg \"x\"", scope=repository:a:pull"#,
        )
        .unwrap();
        assert_eq!(p["realm"], "https://auth.example/token");
        assert_eq!(p["service"], "reg \"x\"");
        assert_eq!(p["scope"], "repository:a:pull");
        // A parameter whose name ends in realm is not the realm; the first of two counts.
        let p = bearer_params(r#"bearer xrealm="http://127.0.0.1/", realm="https://a.example/t", realm="http://10.0.0.1/""#).unwrap();
        assert_eq!(p["realm"], "https://a.example/t");
        assert_eq!(p["xrealm"], "http://127.0.0.1/");
        for other in [
            r#"Basic realm="registry""#,
            "Bearer",
            r#"Bearer realm="unterminated"#,
        ] {
            assert_eq!(bearer_params(other), None, "{other}");
        }
    }
}
