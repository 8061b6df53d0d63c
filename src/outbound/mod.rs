//! **Every connection the engine opens to another server goes through here**: the public-address
//! rule ([`ranges`]), the owner's exceptions to it ([`Policy`]), name resolution ([`Guard`]) and
//! the HTTP client that connects only to addresses the policy allows ([`builder`]).
//!
//! - A host name is resolved at each new connection by the client's own resolver, which drops
//!   the addresses the policy refuses (DNS rebinding: a name that resolved to a public address
//!   when it was checked and to `127.0.0.1` later is not reached).
//! - A literal IP address in a URL reaches no resolver: [`check_url`] judges it before the
//!   request, and the client's redirects are checked the same way ([`builder`]).
//! - No system proxy: a proxy would connect for the engine, to an address the engine did not
//!   check (there is no owner setting for one).
//!
//! A check before a fetch ([`resolve`]) gives the clear refusal a user reads (the address and
//! why); the connection's resolver asks again.
//!
//! Who connects through here: remote apps and their OAuth servers, OAuth client ID metadata
//! documents, URL installs, a registry's reads (its challenge, manifests, signatures, blobs and
//! where it redirects them) and its sign-in realm, and webhooks. The one exception is the owner's
//! `datanotes apps sign`, whose push `oci-client` makes with a client of its own to the registry
//! the owner names. The local CLI (`cli/`, `datanotes mcp`) talks to its own server on loopback.
//! [`collector_client`] is the trace and metrics exporters' client (blocking, no proxy, no
//! redirect, to the collector the owner named). A [`Policy`] is public addresses only, public ones
//! and one place the owner gave (loopback, one address), or any address the owner allowed.

pub mod dns;
mod ranges;
mod resolver;

pub use ranges::{is_loopback, is_public, not_public};

/// Whether `host` (`name`, `name:port`, `ip`, `[ipv6]:port`) names this machine: `localhost` or
/// a loopback address (in any spelling [`is_loopback`] takes).
pub fn is_loopback_host(host: &str) -> bool {
    let host = match host.rsplit_once(':') {
        Some((h, p)) if p.chars().all(|c| c.is_ascii_digit()) && !h.ends_with(':') => h,
        _ => host,
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host.parse::<std::net::IpAddr>().is_ok_and(is_loopback)
}
pub use resolver::{Guard, Lookup, NOT_CONNECTED, System};

use std::net::IpAddr;
use std::sync::Arc;

/// Where an address is, for an exception to the rule: this machine's loopback (any spelling),
/// or one IP address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    Loopback,
    Ip(IpAddr),
}

impl Place {
    /// The place a URL names, if its host is an IP address (any spelling the URL parser reads:
    /// `127.1`, `0x7f000001`, `[::ffff:127.0.0.1]`) or `localhost`; a name is none (what it
    /// resolves to may change).
    pub fn of_url(u: &reqwest::Url) -> Option<Place> {
        let ip = match u.host()? {
            url::Host::Domain(d) => {
                return (d.trim_end_matches('.').eq_ignore_ascii_case("localhost"))
                    .then_some(Place::Loopback);
            }
            url::Host::Ipv4(a) => IpAddr::V4(a),
            url::Host::Ipv6(a) => IpAddr::V6(a),
        };
        Some(Place::of_ip(ip))
    }

    /// The place of an address.
    pub fn of_ip(ip: IpAddr) -> Place {
        if is_loopback(ip) {
            Place::Loopback
        } else {
            Place::Ip(ip.to_canonical())
        }
    }

    /// Whether `ip` is in this place.
    pub fn holds(&self, ip: IpAddr) -> bool {
        *self == Place::of_ip(ip)
    }

    /// Whether this place is on the internet (then it is no exception).
    pub fn is_public(&self) -> bool {
        match self {
            Place::Loopback => false,
            Place::Ip(ip) => is_public(*ip),
        }
    }
}

/// Which addresses a connection may reach.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// Public addresses only.
    Public,
    /// Public addresses, and those of one place the owner gave.
    PublicAnd(Place),
    /// Any address: the owner allowed private ones (or set the address).
    Any,
}

impl Policy {
    /// [`Policy::Any`] when the owner allows private addresses, else [`Policy::Public`].
    pub fn private_if(allowed: bool) -> Policy {
        if allowed { Policy::Any } else { Policy::Public }
    }

    /// Why the policy refuses `ip` (a phrase: "a loopback address"), if it does.
    pub fn refuses(&self, ip: IpAddr) -> Option<&'static str> {
        match self {
            Policy::Any => None,
            Policy::PublicAnd(p) if p.holds(ip) => None,
            _ => not_public(ip),
        }
    }
}

/// A refusal, in plain words (the host, the address, why).
#[derive(Debug, Clone, PartialEq)]
pub struct Refused(pub String);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Refused {}

impl Refused {
    /// Whether the policy refused an address (not a name that does not resolve).
    pub fn is_address(&self) -> bool {
        self.0.ends_with(NOT_CONNECTED)
    }
}

/// Judges a URL's host before a request: a literal IP address by the policy (it reaches no
/// resolver); a name passes here (the client's resolver judges it at each connection).
pub fn check_url(u: &reqwest::Url, policy: Policy) -> Result<(), Refused> {
    let ip = match u.host() {
        Some(url::Host::Ipv4(a)) => IpAddr::V4(a),
        Some(url::Host::Ipv6(a)) => IpAddr::V6(a),
        Some(url::Host::Domain(_)) => return Ok(()),
        None => return Err(Refused(format!("{u} has no host"))),
    };
    match policy.refuses(ip) {
        Some(why) => Err(Refused(format!("{ip} is {why}, {NOT_CONNECTED}"))),
        None => Ok(()),
    }
}

/// Resolves `host` (a name or an IP address) as the engine's clients do, refusing it when any of
/// its addresses is refused by the policy: the check before a fetch, whose refusal names the
/// address.
pub async fn resolve(host: &str, policy: Policy) -> Result<Vec<IpAddr>, Refused> {
    Guard::new(policy, lookup()).addresses(host, true).await
}

/// The builder of every outbound HTTP client: its resolver is a [`Guard`] under `policy`, it
/// uses no proxy, and it follows no redirect (a caller that follows them does it by hand, each
/// hop through [`check_url`], or sets [`redirects`]).
pub fn builder(policy: Policy) -> reqwest::ClientBuilder {
    builder_with(policy, lookup())
}

/// The resolver of every outbound connection: the DNS server the owner named
/// ([`dns::VAR`], checked at start), else the system's.
fn lookup() -> Arc<dyn Lookup> {
    static SERVER: std::sync::OnceLock<Option<std::net::SocketAddr>> = std::sync::OnceLock::new();
    match SERVER.get_or_init(|| dns::from_env().ok().flatten()) {
        Some(server) => Arc::new(dns::Server(*server)),
        None => Arc::new(System),
    }
}

/// [`builder`] with another resolver (a test's).
pub fn builder_with(policy: Policy, lookup: Arc<dyn Lookup>) -> reqwest::ClientBuilder {
    reqwest::Client::builder()
        .no_proxy()
        .dns_resolver(Guard::new(policy, lookup))
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(concat!("datanotes/", env!("CARGO_PKG_VERSION")))
}

/// The client that exports traces to the owner's OpenTelemetry collector (an address the
/// owner configured, usually on this machine: no address policy): blocking, for the export
/// thread, with no proxy, no redirect and `timeout` per export. Made on a thread of its own
/// (a blocking client may not be made or dropped on the async runtime's threads), at the
/// export's low priority, which the client's own thread inherits.
pub fn collector_client(timeout: std::time::Duration) -> anyhow::Result<reqwest::blocking::Client> {
    std::thread::spawn(move || {
        crate::telemetry::yield_to_requests();
        reqwest::blocking::Client::builder()
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(timeout)
            .user_agent(concat!("datanotes/", env!("CARGO_PKG_VERSION")))
            .build()
    })
    .join()
    .map_err(|_| anyhow::anyhow!("making the trace exporter's HTTP client failed"))?
    .map_err(|e| anyhow::anyhow!("making the trace exporter's HTTP client failed: {e}"))
}

/// A redirect policy for an outbound client: at most `max` redirects, each to http(s), never
/// from https to http, and a literal IP address judged by `policy` (a name is judged by the
/// client's resolver).
pub fn redirects(policy: Policy, max: usize) -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(move |attempt| {
        let to = attempt.url().clone();
        let downgrade = attempt
            .previous()
            .last()
            .is_some_and(|p| p.scheme() == "https" && to.scheme() != "https");
        if attempt.previous().len() > max {
            attempt.error(Refused(format!("more than {max} redirects")))
        } else if !matches!(to.scheme(), "http" | "https") || downgrade {
            attempt.error(Refused(format!("a redirect to {to} is not followed")))
        } else if let Err(r) = check_url(&to, policy) {
            attempt.error(r)
        } else {
            attempt.follow()
        }
    })
}

/// The refusal an outbound request's error carries, if the policy refused its address.
pub fn refusal(e: &(dyn std::error::Error + 'static)) -> Option<String> {
    let mut cur = Some(e);
    while let Some(s) = cur {
        if let Some(r) = s.downcast_ref::<Refused>() {
            return Some(r.0.clone());
        }
        cur = s.source();
    }
    None
}

/// An outbound request's error in plain words: the policy's refusal when it was one.
pub fn describe(e: &reqwest::Error) -> String {
    if let Some(r) = refusal(e) {
        return r;
    }
    let mut out = e.to_string();
    let mut cur = std::error::Error::source(e);
    while let Some(s) = cur {
        out.push_str(": ");
        out.push_str(&s.to_string());
        cur = s.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(s: &str) -> reqwest::Url {
        reqwest::Url::parse(s).unwrap()
    }

    #[test]
    fn places_in_every_spelling() {
        for u in [
            "http://127.0.0.1:9/mcp",
            "http://127.1/mcp",
            "http://0x7f000001/mcp",
            "http://[::1]/mcp",
            "http://[::ffff:127.0.0.1]/mcp",
            "http://localhost/mcp",
            "http://LOCALHOST./mcp",
        ] {
            assert_eq!(Place::of_url(&url(u)), Some(Place::Loopback), "{u}");
        }
        let ip = Place::Ip("192.168.1.20".parse().unwrap());
        for u in [
            "http://192.168.1.20/",
            "http://[::ffff:192.168.1.20]/",
            "http://0xc0a80114/",
        ] {
            assert_eq!(Place::of_url(&url(u)), Some(ip), "{u}");
        }
        for u in [
            "http://app.localhost/",
            "http://nas.lan/",
            "http://[::127.0.0.1]/",
        ] {
            assert_ne!(Place::of_url(&url(u)), Some(Place::Loopback), "{u}");
        }
    }

    #[test]
    fn literal_hosts_are_judged_before_the_request() {
        for u in [
            "http://127.1/x",
            "http://2130706433/x",
            "http://[::ffff:7f00:1]/x",
            "http://[64:ff9b::a9fe:a9fe]/x",
            "http://169.254.169.254/latest",
            "http://[fe80::1]/x",
        ] {
            assert!(check_url(&url(u), Policy::Public).is_err(), "{u}");
            assert!(check_url(&url(u), Policy::Any).is_ok(), "{u}");
        }
        assert!(
            check_url(
                &url("http://127.0.0.2/"),
                Policy::PublicAnd(Place::Loopback)
            )
            .is_ok()
        );
        assert!(check_url(&url("http://10.0.0.1/"), Policy::PublicAnd(Place::Loopback)).is_err());
        assert!(check_url(&url("https://1.1.1.1/x"), Policy::Public).is_ok());
        // A name is the resolver's to judge.
        assert!(check_url(&url("http://localhost/x"), Policy::Public).is_ok());
    }

    #[tokio::test]
    async fn a_client_never_connects_to_a_refused_literal_or_name() {
        // Something listens on loopback: the client under the public rule does not reach it.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let lookup: Arc<dyn Lookup> = Arc::new(Fixed("127.0.0.1".parse().unwrap()));
        let named = builder_with(Policy::Public, lookup).build().unwrap();
        let e = named
            .get(format!("http://app.example:{port}/"))
            .send()
            .await
            .unwrap_err();
        assert!(describe(&e).contains(NOT_CONNECTED), "{}", describe(&e));
        // A literal reaches no resolver: the caller checks it first.
        let u = url(&format!("http://127.0.0.1:{port}/"));
        assert!(check_url(&u, Policy::Public).is_err());
    }

    struct Fixed(IpAddr);

    impl Lookup for Fixed {
        fn lookup(
            &self,
            _host: String,
        ) -> futures_util::future::BoxFuture<'static, std::io::Result<Vec<IpAddr>>> {
            let ip = self.0;
            Box::pin(async move { Ok(vec![ip]) })
        }
    }
}
