//! What anonymous callers may hold. Anyone may open an authorization request
//! (`GET /oauth/authorize`) or register a client (`POST /oauth/register`); neither may push out
//! what the owner started. Both are bounded per client address and in total, and at a bound the
//! new one is refused (`429`, with `Retry-After`), never an older one evicted:
//!
//! - authorization requests waiting for the owner: [`MAX_REQUESTS`] in all, and
//!   `DATANOTES_OAUTH_REQUESTS_PER_ADDRESS` (32) per address; each stays valid for its 10
//!   minutes unless the owner decides it;
//! - registrations: `DATANOTES_OAUTH_REGISTER_PER_ADDRESS` (100) per address in an hour, and
//!   [`MAX_CLIENTS`] kept in all, where only a client registered over
//!   [`UNUSED_AFTER`] ago and never used (no grant, no code, no request waiting) makes room.
//!
//! An address is the peer's IP address (an IPv6 address's /64, which one host holds whole), as
//! the listener saw it: behind a tunnel or proxy on the same machine every client is that
//! proxy's address, and only the totals tell them apart. `X-Forwarded-For` is not believed.

use super::OAuthError;
use std::collections::VecDeque;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The most authorization requests waiting for the owner, from every address.
pub(super) const MAX_REQUESTS: usize = 256;
/// A client registered this long ago (seconds) and never used may make room for a new one.
pub(super) const UNUSED_AFTER: i64 = 3600;
/// The window of the per-address bound of registrations.
const REGISTER_WINDOW: Duration = Duration::from_secs(3600);
/// The most registrations remembered for the per-address bound (beyond, refused until the
/// oldest leaves the window).
const MAX_REMEMBERED: usize = 4 * MAX_CLIENTS;
/// The most clients registered dynamically (see `Store::add_client`).
pub(super) const MAX_CLIENTS: usize = 1000;

/// Authorization requests waiting per address (`DATANOTES_OAUTH_REQUESTS_PER_ADDRESS`, 32).
pub(super) fn requests_per_address() -> usize {
    crate::knobs::num("DATANOTES_OAUTH_REQUESTS_PER_ADDRESS", 32).max(1) as usize
}

/// Registrations per address in an hour (`DATANOTES_OAUTH_REGISTER_PER_ADDRESS`, 100).
fn registrations_per_address() -> usize {
    crate::knobs::num("DATANOTES_OAUTH_REGISTER_PER_ADDRESS", 100).max(1) as usize
}

/// The address a bound counts by: the IP address, an IPv6 one's /64.
pub(super) fn address(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v) => {
            let s = v.segments();
            IpAddr::V6(std::net::Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
        }
        v4 => v4,
    }
}

/// A refusal at a bound: `429 temporarily_unavailable`, try again in `after`.
pub(super) fn busy(why: String, after: Duration) -> OAuthError {
    let secs = after.as_secs().clamp(1, 3600);
    let mut e = OAuthError::new(
        429,
        "temporarily_unavailable",
        format!("{why}; nothing was changed: try again in {secs} s"),
    );
    e.retry_after = Some(secs);
    e
}

/// Whether one more authorization request from `from` may wait for the owner, given those
/// waiting (their addresses and when they came; none expired): else the refusal, with the
/// time until the oldest one in the way expires (`life`).
pub(super) fn room_for_request(
    waiting: impl Iterator<Item = (Option<IpAddr>, Instant)> + Clone,
    from: Option<IpAddr>,
    life: Duration,
) -> Result<(), OAuthError> {
    let until = |oldest: Option<Instant>| {
        oldest.map_or(Duration::from_secs(1), |at| {
            life.saturating_sub(at.elapsed())
        })
    };
    let total = waiting.clone().count();
    if total >= MAX_REQUESTS {
        return Err(busy(
            format!("{MAX_REQUESTS} authorization requests are already waiting for the owner"),
            until(waiting.map(|(_, at)| at).min()),
        ));
    }
    if let Some(from) = from {
        let per = requests_per_address();
        let mine = waiting.filter(|(a, _)| *a == Some(from));
        if mine.clone().count() >= per {
            return Err(busy(
                format!(
                    "{per} authorization requests from this address are already waiting for the owner"
                ),
                until(mine.map(|(_, at)| at).min()),
            ));
        }
    }
    Ok(())
}

/// The registrations of the last hour, by address.
#[derive(Default)]
pub(super) struct Registrations(Mutex<VecDeque<(IpAddr, Instant)>>);

impl Registrations {
    /// Counts one registration from `from`, or refuses it at the bound.
    pub(super) fn take(&self, from: Option<IpAddr>) -> Result<(), OAuthError> {
        let Some(from) = from else { return Ok(()) };
        let mut q = self.0.lock().unwrap();
        while q
            .front()
            .is_some_and(|(_, at)| at.elapsed() >= REGISTER_WINDOW)
        {
            q.pop_front();
        }
        let until = |at: &Instant| REGISTER_WINDOW.saturating_sub(at.elapsed());
        if q.len() >= MAX_REMEMBERED {
            let after = q.front().map_or(REGISTER_WINDOW, |(_, at)| until(at));
            return Err(busy(
                format!("{MAX_REMEMBERED} clients registered in the last hour"),
                after,
            ));
        }
        let per = registrations_per_address();
        let mut mine = q.iter().filter(|(a, _)| *a == from).map(|(_, at)| at);
        if mine.clone().count() >= per {
            return Err(busy(
                format!("{per} clients were registered from this address in the last hour"),
                mine.next().map_or(REGISTER_WINDOW, until),
            ));
        }
        q.push_back((from, Instant::now()));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ipv6_address_counts_by_its_64() {
        let a = address("2001:db8:1:2:3:4:5:6".parse().unwrap());
        assert_eq!(a, address("2001:db8:1:2:ff::1".parse().unwrap()));
        assert_ne!(a, address("2001:db8:1:3::1".parse().unwrap()));
        assert_eq!(
            address("::ffff:10.0.0.1".parse().unwrap()),
            "10.0.0.1".parse::<IpAddr>().unwrap()
        );
    }

    #[test]
    fn registrations_are_refused_past_the_bound_per_address() {
        let r = Registrations::default();
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        for _ in 0..registrations_per_address() {
            r.take(Some(a)).unwrap();
        }
        let e = r.take(Some(a)).unwrap_err();
        assert_eq!((e.status, e.error), (429, "temporarily_unavailable"));
        assert!(e.retry_after.is_some_and(|s| s > 3500), "{e:?}");
        r.take(Some(b)).unwrap();
    }
}
