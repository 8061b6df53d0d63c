//! The address a remote app gives for itself (`apps/update {"mcp_url"}` with its own token):
//! the engine will POST there, so it is never a loopback, private, link-local or otherwise
//! non-public address unless the owner allowed it (`self_url_private: true` on the app's entry).
//! Every spelling of an address counts (`127.1`, `0x7f000001`, `[::ffff:127.0.0.1]`,
//! `localhost`), and a name counts as the addresses it resolves to now.

use crate::error::{Error, Result};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Duration;

/// How long resolving an app's host name may take.
const RESOLVE: Duration = Duration::from_secs(3);

/// Checks an address the app `app` sets for itself; `Ok` when it may.
pub(crate) async fn check(app: &str, url: &str, private_allowed: bool) -> Result<()> {
    if private_allowed {
        return Ok(());
    }
    let refuse = |why: String| {
        Error::forbidden(format!(
            "app {app} may not set its mcp_url to {url}: {why}"
        ))
        .column("mcp_url")
        .rule("private_address")
        .hint(format!(
            "an app may register a loopback or private address only if the owner allows it (apps/update {{\"name\": \"{app}\", \"self_url_private\": true}} with the owner token), or the owner sets its mcp_url"
        ))
    };
    // The WHATWG reading, as the HTTP client will read it: every IPv4 notation becomes one.
    let parsed = reqwest::Url::parse(url).map_err(|e| {
        Error::invalid(format!("invalid mcp_url {url:?}: {e}"))
            .column("mcp_url")
            .rule("url")
            .hint("give an http(s) URL, e.g. https://planning.example.com/mcp")
    })?;
    let port = parsed.port_or_known_default().unwrap_or(80);
    // The parser writes an IP address in its canonical form (IPv6 in brackets).
    let host = parsed.host_str().unwrap_or("");
    let ip = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .parse::<IpAddr>();
    let addrs: Vec<IpAddr> = match ip {
        Ok(a) => vec![a],
        Err(_) if host.is_empty() => return Err(refuse("it has no host".into())),
        Err(_) => {
            let d = host.trim_end_matches('.').to_ascii_lowercase();
            if d == "localhost" || d.ends_with(".localhost") {
                return Err(refuse("it is a loopback address".into()));
            }
            let found = tokio::time::timeout(RESOLVE, tokio::net::lookup_host((d.as_str(), port)));
            match found.await {
                Ok(Ok(a)) => a.map(|s| s.ip()).collect(),
                Ok(Err(e)) => return Err(refuse(format!("its host {d} does not resolve ({e})"))),
                Err(_) => return Err(refuse(format!("resolving its host {d} timed out"))),
            }
        }
    };
    match addrs
        .iter()
        .find_map(|a| not_public(*a).map(|why| (a, why)))
    {
        Some((a, why)) => Err(refuse(format!("{a} is {why}"))),
        None => Ok(()),
    }
}

/// Why an address is not a public one, if it is not.
fn not_public(a: IpAddr) -> Option<&'static str> {
    match a {
        IpAddr::V4(v) => not_public_v4(v),
        IpAddr::V6(v) => {
            if let Some(v4) = v.to_ipv4_mapped() {
                return not_public_v4(v4);
            }
            let s = v.segments();
            // NAT64 (64:ff9b::/96) carries an IPv4 address.
            if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
                let o = v.octets();
                return not_public_v4(Ipv4Addr::new(o[12], o[13], o[14], o[15]));
            }
            if v.is_loopback() {
                Some("a loopback address")
            } else if v.is_unspecified() {
                Some("the unspecified address")
            } else if (s[0] & 0xfe00) == 0xfc00 {
                Some("a private (unique local) address")
            } else if (s[0] & 0xffc0) == 0xfe80 {
                Some("a link-local address")
            } else if v.is_multicast() {
                Some("a multicast address")
            } else if s[..6] == [0; 6] && v != Ipv6Addr::UNSPECIFIED {
                // ::a.b.c.d (IPv4-compatible, deprecated).
                let o = v.octets();
                not_public_v4(Ipv4Addr::new(o[12], o[13], o[14], o[15]))
            } else {
                None
            }
        }
    }
}

fn not_public_v4(v: Ipv4Addr) -> Option<&'static str> {
    let o = v.octets();
    if v.is_loopback() {
        Some("a loopback address")
    } else if v.is_private() {
        Some("a private address")
    } else if v.is_link_local() {
        Some("a link-local address")
    } else if o[0] == 0 {
        Some("the unspecified address")
    } else if o[0] == 100 && (o[1] & 0xc0) == 64 {
        Some("a shared (carrier-grade NAT) address")
    } else if v.is_broadcast() || v.is_multicast() || o[0] >= 240 {
        Some("not a unicast address")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn loopback_and_private_addresses_in_every_spelling_are_refused() {
        for u in [
            "http://127.0.0.1:5235/mcp",
            "http://127.1/mcp",
            "http://0x7f000001/mcp",
            "http://2130706433/mcp",
            "http://0177.0.0.1/mcp",
            "http://[::1]/mcp",
            "http://[::ffff:127.0.0.1]/mcp",
            "http://[::ffff:10.0.0.1]/mcp",
            "http://[64:ff9b::a00:1]/mcp",
            "http://localhost:80/mcp",
            "http://LOCALHOST./mcp",
            "http://app.localhost/mcp",
            "http://10.1.2.3/mcp",
            "http://172.16.0.1/mcp",
            "http://192.168.1.20/mcp",
            "http://169.254.169.254/latest",
            "http://100.64.0.1/mcp",
            "http://0.0.0.0/mcp",
            "http://[fd00::1]/mcp",
            "http://[fe80::1]/mcp",
            "http://user@127.0.0.1/mcp",
        ] {
            let e = check("planning", u, false).await.unwrap_err();
            assert_eq!(
                e.rule.as_deref(),
                Some("private_address"),
                "{u}: {}",
                e.message
            );
            assert!(check("planning", u, true).await.is_ok(), "{u}");
        }
        for u in [
            "https://93.184.215.14/mcp",
            "http://[2606:4700::1111]:8080/mcp",
        ] {
            assert!(check("planning", u, false).await.is_ok(), "{u}");
        }
    }
}
