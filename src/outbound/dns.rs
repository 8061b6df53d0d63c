//! A DNS server the owner names (`DATANOTES_DNS=ip[:port]`), asked instead of the system's
//! resolver by every outbound connection: for an owner who filters what apps may reach by name,
//! and for the tests of DNS rebinding, which answer one address at the check and another at
//! the connection. The packets are `simple-dns`'s; this file sends an `A` and an `AAAA` question
//! over UDP and keeps the addresses of the answers.

use super::resolver::Lookup;
use futures_util::future::BoxFuture;
use simple_dns::rdata::RData;
use simple_dns::{CLASS, Name, Packet, Question, TYPE};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

/// The variable that names the DNS server.
pub const VAR: &str = "DATANOTES_DNS";

/// How long one question waits for its answer.
const ANSWER: Duration = Duration::from_secs(2);

/// The DNS server in `DATANOTES_DNS`, if set: `ip` (port 53) or `ip:port`; an error names the
/// variable and what it takes.
pub fn from_env() -> Result<Option<SocketAddr>, String> {
    parse(&std::env::var(VAR).unwrap_or_default())
}

/// A value of `DATANOTES_DNS`: empty (none), `ip` or `ip:port`.
fn parse(v: &str) -> Result<Option<SocketAddr>, String> {
    let v = v.trim();
    if v.is_empty() {
        return Ok(None);
    }
    v.parse::<SocketAddr>()
        .or_else(|_| v.parse::<IpAddr>().map(|ip| SocketAddr::new(ip, 53)))
        .map(Some)
        .map_err(|_| {
            let v: String = v.chars().take(80).collect();
            format!("{VAR}={v:?} is not a DNS server's address: give an IP address, with a port if not 53 (for example 127.0.0.1:5353)")
        })
}

/// Resolves names by asking one DNS server.
pub struct Server(pub SocketAddr);

impl Lookup for Server {
    fn lookup(&self, host: String) -> BoxFuture<'static, std::io::Result<Vec<IpAddr>>> {
        let server = self.0;
        Box::pin(async move {
            let (v4, v6) =
                tokio::join!(ask(server, &host, TYPE::A), ask(server, &host, TYPE::AAAA));
            let mut found = v4?;
            found.extend(v6.unwrap_or_default());
            Ok(found)
        })
    }
}

/// One question of type `ty` about `host`: the addresses of its answer.
async fn ask(server: SocketAddr, host: &str, ty: TYPE) -> std::io::Result<Vec<IpAddr>> {
    let invalid = |e: simple_dns::SimpleDnsError| {
        std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string())
    };
    let id: u16 = rand::random();
    let mut query = Packet::new_query(id);
    query.set_flags(simple_dns::PacketFlag::RECURSION_DESIRED);
    let name = Name::new(host).map_err(invalid)?;
    query
        .questions
        .push(Question::new(name, ty.into(), CLASS::IN.into(), false));
    let bytes = query.build_bytes_vec().map_err(invalid)?;
    let bind: SocketAddr = if server.is_ipv4() {
        (Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let socket = tokio::net::UdpSocket::bind(bind).await?;
    socket.connect(server).await?;
    socket.send(&bytes).await?;
    let mut buf = vec![0u8; 4096];
    let timed_out = || std::io::Error::new(std::io::ErrorKind::TimedOut, "timed out");
    let deadline = tokio::time::Instant::now() + ANSWER;
    loop {
        let n = tokio::time::timeout_at(deadline, socket.recv(&mut buf))
            .await
            .map_err(|_| timed_out())??;
        // Another packet than the answer to this question (a late answer, a stray) is skipped.
        let Ok(answer) = Packet::parse(&buf[..n]) else {
            continue;
        };
        if answer.id() != id {
            continue;
        }
        return Ok(answer
            .answers
            .iter()
            .filter_map(|rr| match &rr.rdata {
                RData::A(a) => Some(IpAddr::V4(Ipv4Addr::from(a.address))),
                RData::AAAA(a) => Some(IpAddr::V6(Ipv6Addr::from(a.address))),
                _ => None,
            })
            .collect());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_server_is_an_ip_address_with_or_without_a_port() {
        let port = |v: &str| parse(v).unwrap().map(|a| a.port());
        assert_eq!(port("10.0.0.1"), Some(53));
        assert_eq!(port(" 127.0.0.1:5353 "), Some(5353));
        assert_eq!(port("[::1]:53"), Some(53));
        assert_eq!(port(""), None);
        let e = parse("dns.example").unwrap_err();
        assert!(e.contains("DATANOTES_DNS=\"dns.example\" is not"), "{e}");
    }
}
