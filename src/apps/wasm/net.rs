//! Outgoing HTTP for WASM apps: `allow_hosts`, owner-granted.
//!
//! wasi:http is linked for every app, but every outgoing request goes through
//! [`Outgoing::send_request`], which sends it only to a host the app's `allow_hosts` lists; any
//! other request fails with `HTTP-request-denied` (and a log line). Without `allow_hosts` every
//! request is denied: the world offers no network.
//!
//! An entry is a host name or an IP address, optionally with a port:
//! - `api.example.org`: that host, on any port;
//! - `api.example.org:8443`, `127.0.0.1:8080`, `[::1]:8080`: that host on that port only;
//! - `*.example.org`: any host below example.org (not example.org itself), on any port (or
//!   `*.example.org:443`: on that port).
//!
//! Names are compared without regard to case. A name is checked as the app wrote it in its
//! request, before any DNS lookup.
//!
//! A request is bounded by the call's remaining time.

use crate::error::{Error, Result};
use serde_json::Value;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::Arc;
use std::time::{Duration, Instant};
use wasmtime_wasi_http::{Error as HttpError, RequestOptions, WasiBody, WasiHttpHooks};

/// At most this many entries.
const MAX_ENTRIES: usize = 256;

/// Why an `allow_hosts` entry is not a host; its text says how to write one.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum NotAHost {
    /// An empty entry.
    Empty,
    /// An entry with white space.
    Spaces,
    /// An entry with a scheme (the scheme).
    Scheme(String),
    /// An entry with a path, a query or a fragment.
    Path,
    /// An entry with user information.
    UserInfo,
    /// `[` without `]`.
    Unclosed,
    /// Brackets around something else than an IPv6 address (that).
    NotIpv6(String),
    /// Something else than `:port` after `[address]`.
    AfterIpv6,
    /// An IPv6 address without brackets.
    Unbracketed,
    /// `*`.
    Every,
    /// A `*` elsewhere than a leading `*.`.
    Wildcard,
    /// A port that is not 1 to 65535 (as written).
    Port(String),
    /// No host before the port.
    NoHost,
    /// A name over 253 characters.
    TooLong,
    /// A name that is not a DNS name (the name).
    NotDnsName(String),
}

impl std::fmt::Display for NotAHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotAHost::Empty => f.write_str("it is empty"),
            NotAHost::Spaces => f.write_str("it contains spaces"),
            NotAHost::Scheme(scheme) => write!(
                f,
                "it has a scheme ({scheme}://): give the host alone, the app chooses http or https"
            ),
            NotAHost::Path => f.write_str("it has a path: give the host alone"),
            NotAHost::UserInfo => f.write_str("it has user information (@): give the host alone"),
            NotAHost::Unclosed => f.write_str("its IPv6 address has no closing ]"),
            NotAHost::NotIpv6(addr) => write!(f, "{addr:?} is not an IPv6 address"),
            NotAHost::AfterIpv6 => f.write_str("only :port may follow an IPv6 address"),
            NotAHost::Unbracketed => {
                f.write_str("an IPv6 address goes in brackets, e.g. [::1] or [::1]:8080")
            }
            NotAHost::Every => {
                f.write_str("allowing every host is not supported: list the hosts the app needs")
            }
            NotAHost::Wildcard => {
                f.write_str("a wildcard is supported only as a leading *. (e.g. *.example.org)")
            }
            NotAHost::Port(p) => write!(f, "its port {p:?} is not a number from 1 to 65535"),
            NotAHost::NoHost => f.write_str("it has no host"),
            NotAHost::TooLong => f.write_str("its host name is longer than 253 characters"),
            NotAHost::NotDnsName(name) => write!(
                f,
                "{name:?} is not a host name (labels of letters, digits and -, separated by dots)"
            ),
        }
    }
}

/// Why an outgoing request is denied (said in the log).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Denied {
    /// The request's URI has no host.
    NoHost,
    /// The app has no `allow_hosts`.
    NoAllowHosts,
    /// The host is not in them.
    NotListed,
}

impl std::fmt::Display for Denied {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Denied::NoHost => "the request has no host",
            Denied::NoAllowHosts => "the app has no allow_hosts: it may not use the network",
            Denied::NotListed => "not in the app's allow_hosts",
        })
    }
}

/// One parsed `allow_hosts` entry.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Allowed {
    /// Lowercase; for `*.example.org`, `.example.org` with `wildcard` set.
    host: String,
    wildcard: bool,
    port: Option<u16>,
}

impl Allowed {
    /// Parses an entry; the error says why it is not a host and how to write one.
    pub(crate) fn parse(entry: &str) -> std::result::Result<Allowed, NotAHost> {
        let e = entry;
        if e.is_empty() {
            return Err(NotAHost::Empty);
        }
        if e.contains(char::is_whitespace) {
            return Err(NotAHost::Spaces);
        }
        if let Some((scheme, _)) = e.split_once("://") {
            return Err(NotAHost::Scheme(scheme.to_string()));
        }
        if e.contains(['/', '?', '#']) {
            return Err(NotAHost::Path);
        }
        if e.contains('@') {
            return Err(NotAHost::UserInfo);
        }
        // The host and the port.
        let (host, port) = if let Some(rest) = e.strip_prefix('[') {
            let Some((addr, after)) = rest.split_once(']') else {
                return Err(NotAHost::Unclosed);
            };
            let Ok(ip) = addr.parse::<Ipv6Addr>() else {
                return Err(NotAHost::NotIpv6(addr.to_string()));
            };
            let port = match after {
                "" => None,
                p => match p.strip_prefix(':') {
                    Some(p) => Some(port(p)?),
                    None => return Err(NotAHost::AfterIpv6),
                },
            };
            (format!("[{ip}]"), port)
        } else {
            match e.matches(':').count() {
                0 => (e.to_ascii_lowercase(), None),
                1 => {
                    let (h, p) = e.split_once(':').unwrap();
                    (h.to_ascii_lowercase(), Some(port(p)?))
                }
                _ => {
                    return Err(NotAHost::Unbracketed);
                }
            }
        };
        if host.starts_with('[') {
            return Ok(Allowed {
                host,
                wildcard: false,
                port,
            });
        }
        if host == "*" {
            return Err(NotAHost::Every);
        }
        let (name, wildcard) = match host.strip_prefix("*.") {
            Some(rest) => (rest.to_string(), true),
            None => (host.clone(), false),
        };
        if name.contains('*') {
            return Err(NotAHost::Wildcard);
        }
        if !wildcard && name.parse::<Ipv4Addr>().is_ok() {
            return Ok(Allowed {
                host: name,
                wildcard: false,
                port,
            });
        }
        dns_name(&name)?;
        Ok(Allowed {
            host: if wildcard { format!(".{name}") } else { name },
            wildcard,
            port,
        })
    }

    /// Does this entry let a request to `host` (lowercase, IPv6 in brackets) on `port` out?
    fn allows(&self, host: &str, port: u16) -> bool {
        let host_ok = if self.wildcard {
            host.len() > self.host.len() && host.ends_with(&self.host)
        } else {
            host == self.host
        };
        host_ok && self.port.is_none_or(|p| p == port)
    }
}

/// A port from 1 to 65535.
fn port(p: &str) -> std::result::Result<u16, NotAHost> {
    match p.parse::<u16>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(NotAHost::Port(p.to_string())),
    }
}

/// A DNS name: labels of letters, digits, `-` (and `_`), 1 to 63 long, at most 253 in all.
fn dns_name(name: &str) -> std::result::Result<(), NotAHost> {
    if name.is_empty() {
        return Err(NotAHost::NoHost);
    }
    if name.len() > 253 {
        return Err(NotAHost::TooLong);
    }
    for label in name.split('.') {
        let ok = !label.is_empty()
            && label.len() <= 63
            && !label.starts_with('-')
            && !label.ends_with('-')
            && label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if !ok {
            return Err(NotAHost::NotDnsName(name.to_string()));
        }
    }
    Ok(())
}

/// Checks an `allow_hosts` value from a request: an array of entries. Answers them, lowercase.
pub(crate) fn allow_hosts(v: &Value) -> Result<Vec<String>> {
    let hint = "give host names or host:port, e.g. [\"api.example.org\", \"127.0.0.1:8080\", \
                \"*.example.org\"]: no scheme, no path";
    let Some(items) = v.as_array() else {
        return Err(
            Error::invalid(format!("allow_hosts must be an array of hosts, not {v}"))
                .column("allow_hosts")
                .rule("type")
                .hint(hint),
        );
    };
    if items.len() > MAX_ENTRIES {
        return Err(Error::invalid(format!(
            "allow_hosts has {} entries, more than {MAX_ENTRIES}",
            items.len()
        ))
        .column("allow_hosts")
        .rule("max")
        .hint("use a wildcard (*.example.org) for many hosts of one domain"));
    }
    let mut out: Vec<String> = vec![];
    for (i, item) in items.iter().enumerate() {
        let Some(s) = item.as_str() else {
            return Err(
                Error::invalid(format!("allow_hosts[{i}] ({item}) is not a string"))
                    .column("allow_hosts")
                    .rule("type")
                    .hint(hint),
            );
        };
        if let Err(why) = Allowed::parse(s) {
            return Err(
                Error::invalid(format!("allow_hosts[{i}] ({s:?}) is not a host: {why}"))
                    .column("allow_hosts")
                    .rule("host")
                    .hint(hint),
            );
        }
        let s = s.to_ascii_lowercase();
        if !out.contains(&s) {
            out.push(s);
        }
    }
    Ok(out)
}

/// The hosts an app may reach, parsed once per backend. An entry that does not parse (a
/// hand-edited registry) allows nothing.
pub(crate) fn parse_list(app: &str, entries: &[String]) -> Arc<[Allowed]> {
    entries
        .iter()
        .filter_map(|e| match Allowed::parse(e) {
            Ok(a) => Some(a),
            Err(why) => {
                tracing::warn!(app = %app, "allow_hosts entry {e:?} ignored: {why}");
                None
            }
        })
        .collect()
}

/// The wasi:http hooks of one store: its app's `allow_hosts`, and the current call's deadline.
pub(crate) struct Outgoing {
    /// The app's name, for the log.
    pub(crate) app: Arc<str>,
    /// Its `allow_hosts`, parsed.
    pub(crate) allowed: Arc<[Allowed]>,
    /// When the current call's wall-clock time (`timeout_ms`) is up: a request may not take
    /// longer (connecting, the first byte, between bytes).
    pub(crate) deadline: Instant,
}

type SendResult = wasmtime_wasi_http::Result<(
    http::Response<WasiBody>,
    Box<dyn Future<Output = wasmtime_wasi_http::Result<()>> + Send>,
)>;

impl Outgoing {
    /// Whether a request to this URI may go out; `Err` says why not.
    fn check(&self, uri: &http::Uri) -> std::result::Result<(), Denied> {
        let Some(host) = uri.host() else {
            return Err(Denied::NoHost);
        };
        let mut host = host.trim_end_matches('.').to_ascii_lowercase();
        // An IPv6 address in its one canonical form, as entries are kept.
        if let Some(ip) = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .and_then(|h| h.parse::<Ipv6Addr>().ok())
        {
            host = format!("[{ip}]");
        }
        let port = uri
            .port_u16()
            .unwrap_or(if uri.scheme() == Some(&http::uri::Scheme::HTTPS) {
                443
            } else {
                80
            });
        if self.allowed.is_empty() {
            return Err(Denied::NoAllowHosts);
        }
        if self.allowed.iter().any(|a| a.allows(&host, port)) {
            Ok(())
        } else {
            Err(Denied::NotListed)
        }
    }
}

impl WasiHttpHooks for Outgoing {
    fn send_request(
        &mut self,
        request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
        fut: Box<dyn Future<Output = wasmtime_wasi_http::Result<()>> + Send>,
    ) -> Box<dyn Future<Output = SendResult> + Send> {
        if let Err(why) = self.check(request.uri()) {
            // The authority only: a path or a query may carry a secret.
            let to = request
                .uri()
                .authority()
                .map(|a| a.to_string())
                .unwrap_or_default();
            tracing::warn!(app = %self.app, "outgoing HTTP request to {to} denied: {why}");
            return Box::new(async { Err(HttpError::HttpRequestDenied) });
        }
        // Within the call's remaining wall-clock time, whatever the guest asked.
        let left = self.deadline.saturating_duration_since(Instant::now());
        let bound = |d: Option<Duration>| Some(d.map_or(left, |d| d.min(left)));
        let o = options.unwrap_or_default();
        let options = RequestOptions {
            connect_timeout: bound(o.connect_timeout),
            first_byte_timeout: bound(o.first_byte_timeout),
            between_bytes_timeout: bound(o.between_bytes_timeout),
        };
        wasmtime_wasi_http::default_hooks().send_request(request, Some(options), fut)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allows(entries: &[&str], url: &str) -> bool {
        let list: Vec<String> = entries.iter().map(|s| s.to_string()).collect();
        let o = Outgoing {
            app: "t".into(),
            allowed: parse_list("t", &list),
            deadline: Instant::now(),
        };
        o.check(&url.parse().unwrap()).is_ok()
    }

    #[test]
    fn entries_match_hosts_and_ports() {
        assert!(allows(&["example.org"], "https://example.org/x"));
        assert!(allows(&["example.org"], "http://EXAMPLE.org:8080/"));
        assert!(!allows(&["example.org"], "https://api.example.org/"));
        assert!(allows(&["example.org:443"], "https://example.org/"));
        assert!(!allows(&["example.org:443"], "http://example.org/"));
        assert!(allows(&["127.0.0.1:8080"], "http://127.0.0.1:8080/"));
        assert!(!allows(&["127.0.0.1:8080"], "http://127.0.0.1:8081/"));
        assert!(!allows(&["127.0.0.1:8080"], "http://localhost:8080/"));
        assert!(allows(&["*.example.org"], "https://a.b.example.org/"));
        assert!(!allows(&["*.example.org"], "https://example.org/"));
        assert!(!allows(&["*.example.org"], "https://badexample.org/"));
        assert!(allows(&["[::1]:8080"], "http://[::1]:8080/"));
        assert!(allows(&["[0:0::1]"], "http://[::0:1]:8080/"));
        assert!(!allows(&[], "https://example.org/"));
    }

    #[test]
    fn bad_entries_say_why() {
        for (e, why) in [
            ("https://example.org", "scheme"),
            ("example.org/api", "path"),
            ("*", "every host"),
            ("a.*.org", "leading *."),
            ("example.org:0", "port"),
            ("example.org:http", "port"),
            ("::1", "brackets"),
            ("[zz]:1", "IPv6"),
            ("", "empty"),
            ("ex ample.org", "spaces"),
            ("-x.org", "not a host name"),
            ("user@example.org", "user"),
        ] {
            let err = Allowed::parse(e).unwrap_err();
            let err = err.to_string();
            assert!(err.contains(why), "{e:?}: {err}");
        }
        for ok in [
            "Example.ORG",
            "10.0.0.1",
            "[::1]",
            "*.example.org:443",
            "a_b.example",
        ] {
            assert!(Allowed::parse(ok).is_ok(), "{ok}");
        }
    }
}
