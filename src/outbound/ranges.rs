//! The public-address rule: which IP addresses are somewhere on the internet, and why the rest
//! are not. Every spelling of an address is judged by what it reaches: an IPv6 address that
//! carries an IPv4 one (IPv4-mapped `::ffff:a.b.c.d`, IPv4-compatible `::a.b.c.d`, SIIT
//! `::ffff:0:a.b.c.d`, NAT64 `64:ff9b::/96`, 6to4 `2002::/16`) by that IPv4 address; a tunnel
//! whose far end cannot be read from the address (Teredo, local-use NAT64) is refused.
//!
//! Every range counts: CGNAT, `0/8`, both NAT64 prefixes, 6to4, Teredo, site-local and the rest.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Why `ip` is not a public address (a phrase: "a loopback address"), or `None` when it is.
pub fn not_public(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v) => not_public_v4(v),
        IpAddr::V6(v) => not_public_v6(v),
    }
}

/// Whether `ip` is a public address.
pub fn is_public(ip: IpAddr) -> bool {
    not_public(ip).is_none()
}

/// Whether `ip` is this machine's loopback, in any spelling (`127.0.0.0/8`, `::1`, and the
/// IPv4-mapped `::ffff:127.x.y.z`).
pub fn is_loopback(ip: IpAddr) -> bool {
    ip.to_canonical().is_loopback()
}

fn not_public_v4(v: Ipv4Addr) -> Option<&'static str> {
    let o = v.octets();
    Some(match o {
        [0, ..] => "the unspecified network (0.0.0.0/8)",
        [10, ..] => "a private address",
        [100, b, ..] if b & 0xc0 == 64 => "a shared (carrier-grade NAT) address",
        [127, ..] => "a loopback address",
        [169, 254, ..] => "a link-local address",
        [172, b, ..] if b & 0xf0 == 16 => "a private address",
        [192, 0, 0, _] => "an IETF protocol address (192.0.0.0/24)",
        [192, 0, 2, _] | [198, 51, 100, _] | [203, 0, 113, _] => "a documentation address",
        [192, 88, 99, _] => "a 6to4 relay address",
        [192, 168, ..] => "a private address",
        [198, b, ..] if b & 0xfe == 18 => "a benchmarking address (198.18.0.0/15)",
        [255, 255, 255, 255] => "the broadcast address",
        [a, ..] if a & 0xf0 == 224 => "a multicast address",
        [a, ..] if a >= 240 => "a reserved address (240.0.0.0/4)",
        _ => return None,
    })
}

fn not_public_v6(v: Ipv6Addr) -> Option<&'static str> {
    if let Some(v4) = embedded_v4(v) {
        return not_public_v4(v4);
    }
    let s = v.segments();
    Some(if v.is_unspecified() {
        "the unspecified address"
    } else if v.is_loopback() {
        "a loopback address"
    } else if s[0] == 0x64 && s[1] == 0xff9b && s[2] == 1 {
        "a local-use NAT64 address (64:ff9b:1::/48)"
    } else if s[0] == 0x2001 && s[1] == 0 {
        "a Teredo tunnel address (2001::/32)"
    } else if (s[0] == 0x2001 && s[1] == 0xdb8) || (s[0] == 0x3fff && s[1] & 0xf000 == 0) {
        "a documentation address"
    } else if s[0] == 0x2001 && s[1] == 2 && s[2] == 0 {
        "a benchmarking address (2001:2::/48)"
    } else if s[0] == 0x2001 && (s[1] & 0xfff0 == 0x10 || s[1] & 0xfff0 == 0x20) {
        "an ORCHID address"
    } else if s[0] & 0xfe00 == 0xfc00 {
        "a private (unique local) address"
    } else if s[0] & 0xffc0 == 0xfe80 {
        "a link-local address"
    } else if s[0] & 0xffc0 == 0xfec0 {
        "a site-local address"
    } else if s[0] & 0xff00 == 0xff00 {
        "a multicast address"
    } else if s[0] == 0x100 && s[1..4] == [0, 0, 0] {
        "a discard-only address (100::/64)"
    } else if s[0] & 0xe000 != 0x2000 {
        // Outside 2000::/3, the global unicast space.
        "a reserved address"
    } else {
        return None;
    })
}

/// The IPv4 address an IPv6 one stands for, when it carries one that the network it reaches
/// can be read from.
fn embedded_v4(v: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = v.segments();
    let low = Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
    match s[..6] {
        // IPv4-mapped ::ffff:a.b.c.d, SIIT ::ffff:0:a.b.c.d, NAT64 64:ff9b::/96.
        [0, 0, 0, 0, 0, 0xffff] | [0, 0, 0, 0, 0xffff, 0] | [0x64, 0xff9b, 0, 0, 0, 0] => Some(low),
        // IPv4-compatible ::a.b.c.d (deprecated); :: and ::1 are themselves.
        [0, 0, 0, 0, 0, 0] if !v.is_unspecified() && !v.is_loopback() => Some(low),
        // 6to4: 2002:AABB:CCDD::/48.
        [0x2002, a, b, ..] => Some(Ipv4Addr::new(
            (a >> 8) as u8,
            a as u8,
            (b >> 8) as u8,
            b as u8,
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap_or_else(|_| panic!("{s} is an address"))
    }

    #[test]
    fn every_non_public_range_in_every_spelling_is_refused() {
        for (a, why) in [
            ("0.0.0.0", "unspecified"),
            ("0.1.2.3", "unspecified"),
            ("10.0.0.1", "private"),
            ("10.255.255.255", "private"),
            ("100.64.0.1", "carrier-grade"),
            ("100.127.255.254", "carrier-grade"),
            ("127.0.0.1", "loopback"),
            ("127.255.0.9", "loopback"),
            ("169.254.169.254", "link-local"),
            ("172.16.0.1", "private"),
            ("172.31.255.255", "private"),
            ("192.0.0.8", "IETF"),
            ("192.0.2.1", "documentation"),
            ("198.51.100.7", "documentation"),
            ("203.0.113.9", "documentation"),
            ("192.88.99.1", "6to4 relay"),
            ("192.168.1.1", "private"),
            ("198.18.0.1", "benchmarking"),
            ("198.19.255.255", "benchmarking"),
            ("224.0.0.1", "multicast"),
            ("239.255.255.250", "multicast"),
            ("240.0.0.1", "reserved"),
            ("255.255.255.255", "broadcast"),
            ("::", "unspecified"),
            ("::1", "loopback"),
            ("::ffff:127.0.0.1", "loopback"),
            ("::ffff:10.0.0.1", "private"),
            ("::ffff:169.254.169.254", "link-local"),
            ("::ffff:0:192.168.0.1", "private"),
            ("::127.0.0.1", "loopback"),
            ("::10.1.2.3", "private"),
            ("::100.64.0.1", "carrier-grade"),
            ("64:ff9b::a00:1", "private"),
            ("64:ff9b::127.0.0.1", "loopback"),
            ("64:ff9b::169.254.169.254", "link-local"),
            ("64:ff9b:1::1.2.3.4", "local-use NAT64"),
            ("2002:7f00:1::", "loopback"),
            ("2002:a9fe:a9fe::1", "link-local"),
            ("2002:c0a8:101::1", "private"),
            ("2001::1", "Teredo"),
            ("2001:0:4136:e378:8000:63bf:3fff:fdd2", "Teredo"),
            ("2001:db8::1", "documentation"),
            ("3fff::1", "documentation"),
            ("2001:2::1", "benchmarking"),
            ("2001:10::1", "ORCHID"),
            ("2001:20::1", "ORCHID"),
            ("fc00::1", "unique local"),
            ("fd12:3456::1", "unique local"),
            ("fe80::1", "link-local"),
            ("febf::1", "link-local"),
            ("fec0::1", "site-local"),
            ("ff02::1", "multicast"),
            ("ff0e::1", "multicast"),
            ("100::1", "discard"),
            ("4000::1", "reserved"),
            ("1::1", "reserved"),
        ] {
            let got = not_public(ip(a));
            assert!(
                got.is_some_and(|w| w.contains(why)),
                "{a}: {got:?}, expected {why}"
            );
        }
    }

    #[test]
    fn public_addresses_pass_in_every_spelling() {
        for a in [
            "1.1.1.1",
            "8.8.8.8",
            "93.184.215.14",
            "100.63.255.255",
            "100.128.0.1",
            "172.15.255.255",
            "172.32.0.1",
            "192.0.1.1",
            "192.169.0.1",
            "198.17.255.255",
            "198.20.0.1",
            "223.255.255.255",
            "2606:4700::1111",
            "2a00:1450:4001:80b::200e",
            "::ffff:1.1.1.1",
            "::ffff:0:8.8.8.8",
            "::8.8.8.8",
            "64:ff9b::8.8.8.8",
            "2002:808:808::1",
            "2001:4860:4860::8888",
        ] {
            assert_eq!(not_public(ip(a)), None, "{a}");
            assert!(is_public(ip(a)), "{a}");
        }
    }

    #[test]
    fn loopback_in_every_spelling() {
        for a in ["127.0.0.1", "127.9.9.9", "::1", "::ffff:127.0.0.1"] {
            assert!(is_loopback(ip(a)), "{a}");
        }
        for a in ["::127.0.0.1", "64:ff9b::7f00:1", "10.0.0.1", "::"] {
            assert!(!is_loopback(ip(a)), "{a}");
        }
    }
}
