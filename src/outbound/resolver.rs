//! Name resolution under a [`Policy`]: the one resolver of every outbound HTTP client
//! ([`Guard`], reqwest's `dns::Resolve`), asked again at each new connection, so that a name
//! that resolved to a public address when it was checked and to a private one later is not
//! reached. The lookup itself is behind [`Lookup`] (the system's, or a test's).

use super::{Policy, Refused};
use futures_util::future::BoxFuture;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

/// How long resolving a host name may take.
const RESOLVE: Duration = Duration::from_secs(5);

/// The words that end a refusal at connection time (`plain.rs` finds them in an error chain).
pub const NOT_CONNECTED: &str = "which the engine does not connect to";

/// A resolver of host names to addresses.
pub trait Lookup: Send + Sync + 'static {
    /// The addresses of `host` (a name, never an IP address).
    fn lookup(&self, host: String) -> BoxFuture<'static, std::io::Result<Vec<IpAddr>>>;
}

/// The system's resolver, through tokio (`getaddrinfo` on a blocking thread).
pub struct System;

impl Lookup for System {
    fn lookup(&self, host: String) -> BoxFuture<'static, std::io::Result<Vec<IpAddr>>> {
        Box::pin(async move {
            let found = tokio::time::timeout(RESOLVE, tokio::net::lookup_host((host, 0)))
                .await
                .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "timed out"))??;
            Ok(found.map(|a| a.ip()).collect())
        })
    }
}

/// Resolves names under a policy: the addresses it refuses are dropped, and a name left with
/// none is refused.
#[derive(Clone)]
pub struct Guard {
    policy: Policy,
    lookup: Arc<dyn Lookup>,
}

impl Guard {
    /// A guard resolving with `lookup`.
    pub fn new(policy: Policy, lookup: Arc<dyn Lookup>) -> Guard {
        Guard { policy, lookup }
    }

    /// The addresses of `host` (a name, or an IP address in any URL spelling) the policy lets
    /// the engine connect to; `all`: refused as soon as one address is not allowed (a check
    /// before a fetch, whose refusal names that address), else the others are kept.
    pub async fn addresses(&self, host: &str, all: bool) -> Result<Vec<IpAddr>, Refused> {
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if let Ok(ip) = host.parse::<IpAddr>() {
            return match self.policy.refuses(ip) {
                Some(why) => Err(Refused(format!("{ip} is {why}, {NOT_CONNECTED}"))),
                None => Ok(vec![ip]),
            };
        }
        let name = host.trim_end_matches('.').to_ascii_lowercase();
        let found = self
            .lookup
            .lookup(name.clone())
            .await
            .map_err(|e| Refused(format!("cannot resolve {name} ({e})")))?;
        let mut kept = Vec::with_capacity(found.len());
        let mut first_refused = None;
        for ip in found {
            match self.policy.refuses(ip) {
                None => kept.push(ip),
                Some(why) => {
                    if first_refused.is_none() {
                        first_refused = Some((ip, why));
                    }
                }
            }
        }
        match first_refused {
            Some((ip, why)) if all || kept.is_empty() => Err(Refused(format!(
                "{name} resolves to {ip}, {why}, {NOT_CONNECTED}"
            ))),
            _ if kept.is_empty() => Err(Refused(format!("{name} has no address"))),
            _ => Ok(kept),
        }
    }
}

impl reqwest::dns::Resolve for Guard {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let guard = self.clone();
        let host = name.as_str().to_string();
        Box::pin(async move {
            let ips = guard.addresses(&host, false).await?;
            let addrs: reqwest::dns::Addrs =
                Box::new(ips.into_iter().map(|ip| SocketAddr::new(ip, 0)));
            Ok(addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outbound::Place;
    use std::sync::Mutex;

    /// A resolver that answers its list of answers in turn (the last one again once used up):
    /// a DNS server that rebinds a name between two connections.
    struct Rebinding(Mutex<Vec<Vec<IpAddr>>>);

    impl Lookup for Rebinding {
        fn lookup(&self, _host: String) -> BoxFuture<'static, std::io::Result<Vec<IpAddr>>> {
            let mut answers = self.0.lock().unwrap();
            let next = if answers.len() > 1 {
                answers.remove(0)
            } else {
                answers[0].clone()
            };
            Box::pin(async move { Ok(next) })
        }
    }

    fn ips(list: &[&str]) -> Vec<IpAddr> {
        list.iter().map(|s| s.parse().unwrap()).collect()
    }

    fn rebinding(answers: &[&[&str]]) -> Arc<dyn Lookup> {
        Arc::new(Rebinding(Mutex::new(
            answers.iter().map(|a| ips(a)).collect(),
        )))
    }

    async fn resolved(g: &Guard, host: &str) -> Result<Vec<IpAddr>, String> {
        use reqwest::dns::Resolve;
        match g.resolve(host.parse().unwrap()).await {
            Ok(a) => Ok(a.map(|s| s.ip()).collect()),
            Err(e) => Err(e.to_string()),
        }
    }

    #[tokio::test]
    async fn a_name_that_rebinds_to_a_private_address_is_refused_at_the_next_connection() {
        for private in [
            "127.0.0.1",
            "10.0.0.7",
            "169.254.169.254",
            "::ffff:127.0.0.1",
        ] {
            let lookup = rebinding(&[&["93.184.215.14"], &[private]]);
            let g = Guard::new(Policy::Public, lookup);
            assert_eq!(
                resolved(&g, "app.example.com").await,
                Ok(ips(&["93.184.215.14"]))
            );
            let second = resolved(&g, "app.example.com").await.unwrap_err();
            assert!(second.contains(private), "{second}");
            assert!(second.contains(NOT_CONNECTED), "{second}");
        }
    }

    #[tokio::test]
    async fn refused_addresses_are_dropped_and_the_rest_kept() {
        let lookup = rebinding(&[&["10.0.0.1", "93.184.215.14", "::1"]]);
        let g = Guard::new(Policy::Public, lookup.clone());
        assert_eq!(resolved(&g, "a.example").await, Ok(ips(&["93.184.215.14"])));
        // A check before a fetch refuses the name outright, naming the address.
        let all = g.addresses("a.example", true).await.unwrap_err();
        assert!(all.0.contains("10.0.0.1, a private address"), "{}", all.0);
        // The owner's choice: any address.
        let any = Guard::new(Policy::Any, lookup);
        assert_eq!(resolved(&any, "a.example").await.unwrap().len(), 3);
    }

    #[tokio::test]
    async fn a_place_allows_its_own_addresses_only() {
        let lookup = rebinding(&[&["127.0.0.1", "::1", "10.0.0.1"]]);
        let g = Guard::new(Policy::PublicAnd(Place::Loopback), lookup.clone());
        assert_eq!(
            resolved(&g, "localhost").await,
            Ok(ips(&["127.0.0.1", "::1"]))
        );
        let ip = "10.0.0.1".parse().unwrap();
        let g = Guard::new(Policy::PublicAnd(Place::Ip(ip)), lookup);
        assert_eq!(resolved(&g, "nas.lan").await, Ok(vec![ip]));
        assert!(g.addresses("[::1]", true).await.is_err());
        assert!(g.addresses("10.0.0.1", true).await.is_ok());
    }

    #[tokio::test]
    async fn literal_addresses_are_judged_without_a_lookup() {
        let g = Guard::new(Policy::Public, rebinding(&[&[]]));
        assert!(g.addresses("[::ffff:127.0.0.1]", true).await.is_err());
        assert!(g.addresses("[64:ff9b::a00:1]", true).await.is_err());
        assert_eq!(
            g.addresses("1.1.1.1", true).await.unwrap(),
            ips(&["1.1.1.1"])
        );
        let none = g.addresses("nothing.example", false).await.unwrap_err();
        assert!(none.0.contains("has no address"), "{}", none.0);
    }
}
