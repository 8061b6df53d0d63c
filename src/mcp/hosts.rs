//! Which `Host` and `Origin` `/mcp` answers (DNS rebinding protection), following the address
//! the server listens on and the names the owner gives (`--public-host`).
//!
//! A DNS rebinding attack reaches the server under a name the attacker controls; a request
//! whose `Host` is an IP address reached that address directly. So `/mcp` accepts:
//! `localhost` and the loopback addresses always; the address it listens on (every address
//! of the machine when it listens on `0.0.0.0` or `::`, so any IP address then); and each
//! `--public-host` name. Any port. An `Origin` header, when sent, must name an accepted host
//! too (`http` or `https`); `Origin: null` is refused. Everything else is answered 403 before
//! the MCP layer.
//!
//! The check comes first, for the lean path and rmcp alike; rmcp's own host check is off.

use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use std::net::{IpAddr, SocketAddr};

/// The hosts `/mcp` answers.
#[derive(Debug, Clone)]
pub struct Hosts {
    /// The address listened on (unspecified: every address of the machine).
    listen: IpAddr,
    /// The owner's names (lowercase, no trailing dot).
    names: Vec<String>,
}

impl Default for Hosts {
    /// Loopback only (a server on 127.0.0.1 without public names).
    fn default() -> Hosts {
        Hosts::new(SocketAddr::from(([127, 0, 0, 1], 0)), &[])
    }
}

impl Hosts {
    /// The hosts of a server listening on `listen`, with the owner's `--public-host` names.
    pub fn new(listen: SocketAddr, names: &[String]) -> Hosts {
        Hosts {
            listen: listen.ip(),
            names: names
                .iter()
                .map(|n| n.trim().trim_end_matches('.').to_ascii_lowercase())
                .filter(|n| !n.is_empty())
                .collect(),
        }
    }

    /// Whether a host name or address (no port, IPv6 without brackets) is accepted.
    fn allows(&self, host: &str) -> bool {
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        if host == "localhost" {
            return true;
        }
        if let Ok(ip) = host.parse::<IpAddr>() {
            return ip.is_loopback()
                || self.listen.is_unspecified()
                || ip == self.listen
                || ip.to_canonical() == self.listen.to_canonical();
        }
        self.names.contains(&host)
    }

    /// The refusal of a request whose `Host` or `Origin` is not accepted; `None`: it may pass.
    pub(super) fn refuse(&self, h: &HeaderMap) -> Option<Response> {
        let host = h.get(header::HOST).and_then(|v| v.to_str().ok());
        let Some(name) = host.and_then(authority_host) else {
            return Some(forbidden("a Host header is required"));
        };
        if !self.allows(name) {
            return Some(forbidden(&format!(
                "Host {name} is not served here (DNS rebinding protection): use the server's address, localhost, or a name the owner gave with --public-host"
            )));
        }
        if let Some(origin) = h.get(header::ORIGIN) {
            let o = origin.to_str().unwrap_or("");
            let host = o
                .strip_prefix("http://")
                .or_else(|| o.strip_prefix("https://"))
                .and_then(authority_host);
            if !host.is_some_and(|n| self.allows(n)) {
                return Some(forbidden(&format!(
                    "Origin {o} is not served here (DNS rebinding protection): a browser page may call /mcp only from the server's own address, localhost, or a --public-host name"
                )));
            }
        }
        None
    }
}

/// The host of an authority (`name`, `name:port`, `[v6]:port`), without its port.
fn authority_host(a: &str) -> Option<&str> {
    let a = a.trim();
    if a.contains(['/', '@', ' ']) {
        return None;
    }
    let host = if let Some(rest) = a.strip_prefix('[') {
        rest.split_once(']')?.0
    } else {
        a.rsplit_once(':').map_or(a, |(n, _)| n)
    };
    (!host.is_empty()).then_some(host)
}

fn forbidden(why: &str) -> Response {
    (StatusCode::FORBIDDEN, why.to_string()).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(host: &str, origin: Option<&str>) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::HOST, host.parse().unwrap());
        if let Some(o) = origin {
            h.insert(header::ORIGIN, o.parse().unwrap());
        }
        h
    }

    #[test]
    fn hosts_follow_the_listen_address_and_public_names() {
        let local = Hosts::default();
        for ok in [
            "localhost:5234",
            "127.0.0.1:5234",
            "[::1]:5234",
            "LOCALHOST",
        ] {
            assert!(local.refuse(&headers(ok, None)).is_none(), "{ok}");
        }
        for bad in ["evil.example.com", "192.168.1.5:5234", "notes.lan"] {
            assert!(local.refuse(&headers(bad, None)).is_some(), "{bad}");
        }
        let any = Hosts::new("0.0.0.0:5234".parse().unwrap(), &["Notes.LAN.".into()]);
        for ok in [
            "192.168.1.5:5234",
            "10.0.0.2",
            "[fe80::1]:5234",
            "notes.lan:5234",
        ] {
            assert!(any.refuse(&headers(ok, None)).is_none(), "{ok}");
        }
        assert!(any.refuse(&headers("evil.example.com", None)).is_some());
        let lan = Hosts::new("192.168.1.5:5234".parse().unwrap(), &[]);
        assert!(lan.refuse(&headers("192.168.1.5:5234", None)).is_none());
        assert!(lan.refuse(&headers("192.168.1.6:5234", None)).is_some());
        // Origin: absent passes; it must name an accepted host.
        let ok = |o: &str| lan.refuse(&headers("192.168.1.5:5234", Some(o))).is_none();
        assert!(ok("http://192.168.1.5:5234") && ok("https://localhost:3000"));
        assert!(!ok("http://evil.example.com") && !ok("null") && !ok("file://x"));
    }
}
