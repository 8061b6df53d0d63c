//! The address a remote app gives for itself (`apps/update {"mcp_url"}` with its own token):
//! the engine will POST there, so a token holder must not point it at a service the owner did
//! not mean it to reach. The rule:
//!
//! - a public address: always (whatever the entry had, loopback included);
//! - within the place the owner gave it (the entry's `mcp_url` as it is now): another port or
//!   path of the same IP address, and when that address is this machine's loopback
//!   (`127.0.0.0/8`, `::1`, `[::ffff:127.x.y.z]` or `localhost`), any loopback address of this
//!   machine, in any of those spellings (an app picks its port at start: the owner registers it
//!   at `http://127.0.0.1:9/mcp`, it moves itself to `http://127.0.0.1:41234/mcp`);
//! - anything else that is not public (loopback, private, link-local, shared, unspecified, in
//!   any spelling: `127.1`, `0x7f000001`, `[::ffff:127.0.0.1]`, `localhost`, or a name that
//!   resolves to one): never, unless the owner allowed it (`self_url_private: true`). So a
//!   public or remote app never moves into loopback or private space, a loopback app never into
//!   the private network, a private one never to another host or to loopback; and an entry the
//!   owner made with no `mcp_url` (an API client, maybe on another machine) gives no place at
//!   all: the owner registers a local app at its loopback address first (any port), or allows
//!   it.
//!
//! Names other than `localhost` never count as a place (what they resolve to may change): an
//! entry the owner gave as `http://nas.lan:9/mcp` may move to a non-public address only if the
//! owner allows it.
//!
//! The rule holds at every connection, not only at the change: the app's client connects under
//! [`policy`] (a name the app gave that resolves to a private address later is not reached).
//! The addresses themselves are judged by `crate::outbound`.
//!
//! The pin (`self_url: false`) and the record of each change (`urlChangedAt`, `previousUrl`) are
//! the registry's (`apps/mod.rs`).

use super::AppRecord;
use crate::error::{Error, Result};
use crate::outbound::{self, Place, Policy};
use std::time::Duration;

/// How long resolving an app's host name may take.
const RESOLVE: Duration = Duration::from_secs(3);

/// Checks the address an app sets for itself, against its entry as it is now (its `mcp_url`,
/// `self_url_private`); `Ok` when it may.
pub(crate) async fn check(entry: &AppRecord, url: &str) -> Result<()> {
    check_move(
        &entry.name,
        entry.mcp_url.as_deref(),
        url,
        entry.self_url_private,
    )
    .await
}

/// The addresses the engine may connect to for an app at `url` (its `mcp_url`): an address the
/// owner set, or one the app set when the owner allowed it any (`self_url_private`), may be
/// anything the owner meant (loopback included); one the app set for itself under the rule
/// stays under it at every connection, whatever its name resolves to later: public addresses,
/// and the place it was allowed in (the loopback or IP address its URL names, if any).
pub(crate) fn policy(entry: &AppRecord, url: &str) -> Policy {
    let by_app = entry
        .url_change
        .as_ref()
        .is_some_and(|c| c.by.starts_with("app:"));
    if !by_app || entry.self_url_private {
        return Policy::Any;
    }
    match reqwest::Url::parse(url)
        .ok()
        .and_then(|u| Place::of_url(&u))
    {
        Some(p) if !p.is_public() => Policy::PublicAnd(p),
        _ => Policy::Public,
    }
}

/// [`check`] on its parts: the app `app`, its `mcp_url` now (`current`), the one it asks for.
async fn check_move(
    app: &str,
    current: Option<&str>,
    url: &str,
    private_allowed: bool,
) -> Result<()> {
    if private_allowed {
        return Ok(());
    }
    // The WHATWG reading, as the HTTP client will read it: every IPv4 notation becomes one.
    let parsed = reqwest::Url::parse(url).map_err(|e| {
        Error::invalid(format!("invalid mcp_url {url:?}: {e}"))
            .column("mcp_url")
            .rule("url")
            .hint("give an http(s) URL, e.g. https://planning.example.com/mcp")
    })?;
    let here = current
        .and_then(|c| reqwest::Url::parse(c).ok())
        .and_then(|c| Place::of_url(&c));
    if here.is_some() && here == Place::of_url(&parsed) {
        return Ok(());
    }
    let refuse = |why: String| {
        let whence = match (current, &here) {
            (None, _) => "its entry has no mcp_url yet".to_string(),
            (Some(c), Some(Place::Loopback)) => format!(
                "from {c} it may move itself to any loopback address of this machine, or to a public address"
            ),
            (Some(c), Some(Place::Ip(ip))) if !outbound::is_public(*ip) => format!(
                "from {c} it may move itself to another port of {ip}, or to a public address"
            ),
            (Some(c), _) => format!("from {c} it may move itself only to a public address"),
        };
        Error::forbidden(format!(
            "app {app} may not set its mcp_url to {url}: {why}; {whence}"
        ))
        .column("mcp_url")
        .rule("private_address")
        .hint(format!(
            "the owner decides: register the app at its address (apps/update {{\"name\": \"{app}\", \"mcp_url\": \"http://127.0.0.1:9/mcp\"}} with the owner token), then it may move itself to another port of that address (from a loopback address, to any loopback address of this machine); or allow it any address (apps/update {{\"name\": \"{app}\", \"self_url_private\": true}})"
        ))
    };
    let host = parsed.host_str().unwrap_or("");
    if host.is_empty() {
        return Err(refuse("it has no host".into()));
    }
    let d = host.trim_end_matches('.').to_ascii_lowercase();
    if d == "localhost" || d.ends_with(".localhost") {
        return Err(refuse("it is a loopback address".into()));
    }
    match tokio::time::timeout(RESOLVE, outbound::resolve(host, Policy::Public)).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(r)) => Err(refuse(r.to_string())),
        Err(_) => Err(refuse(format!("resolving its host {d} timed out"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rule's answer for a move of the app `planning` from `from` to `to`: `Ok`, or the
    /// refusal's rule.
    async fn moving(
        from: Option<&str>,
        to: &str,
        allowed: bool,
    ) -> std::result::Result<(), String> {
        check_move("planning", from, to, allowed)
            .await
            .map_err(|e| format!("{}: {}", e.rule.clone().unwrap_or_default(), e.message))
    }

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
            // An entry with no mcp_url, or a public one: no place the owner gave.
            for from in [None, Some("https://93.184.215.14/mcp")] {
                let e = check_move("planning", from, u, false).await.unwrap_err();
                assert_eq!(
                    e.rule.as_deref(),
                    Some("private_address"),
                    "{u}: {}",
                    e.message
                );
                assert_eq!(e.column.as_deref(), Some("mcp_url"), "{u}");
                assert!(check_move("planning", from, u, true).await.is_ok(), "{u}");
            }
        }
        for u in [
            "https://93.184.215.14/mcp",
            "http://[2606:4700::1111]:8080/mcp",
        ] {
            assert!(moving(None, u, false).await.is_ok(), "{u}");
        }
    }

    #[tokio::test]
    async fn a_loopback_app_moves_to_any_loopback_address_of_this_machine() {
        for from in [
            "http://127.0.0.1:9/mcp",
            "http://[::1]:9/mcp",
            "http://localhost:9/mcp",
            "http://127.1:9/mcp",
        ] {
            for to in [
                "http://127.0.0.1:10/mcp",
                "http://127.0.0.1:41234/other",
                "http://127.0.0.2:10/mcp",
                "http://0x7f000001:10/mcp",
                "http://[::1]:10/mcp",
                "http://[::ffff:127.0.0.1]:10/mcp",
                "http://localhost:10/mcp",
                "http://LOCALHOST.:10/mcp",
            ] {
                assert_eq!(
                    moving(Some(from), to, false).await,
                    Ok(()),
                    "{from} -> {to}"
                );
            }
        }
    }

    #[tokio::test]
    async fn a_loopback_app_moves_nowhere_else_that_is_not_public() {
        for to in [
            "http://10.0.0.1/mcp",
            "http://192.168.1.20:9/mcp",
            "http://169.254.169.254/latest",
            "http://0.0.0.0:10/mcp",
            "http://[fd00::1]/mcp",
            // A name is no loopback place, whatever it resolves to.
            "http://app.localhost:10/mcp",
            // NAT64 and IPv4-compatible forms go elsewhere than this machine.
            "http://[64:ff9b::7f00:1]:10/mcp",
            "http://[::127.0.0.1]:10/mcp",
        ] {
            let e = moving(Some("http://127.0.0.1:9/mcp"), to, false).await;
            assert!(
                e.as_ref()
                    .is_err_and(|e| e.starts_with("private_address: ")),
                "{to}: {e:?}"
            );
            assert!(
                e.unwrap_err()
                    .contains("any loopback address of this machine")
            );
            assert_eq!(
                moving(Some("http://127.0.0.1:9/mcp"), to, true).await,
                Ok(())
            );
        }
        // To a public address: allowed, as from anywhere.
        assert_eq!(
            moving(
                Some("http://127.0.0.1:9/mcp"),
                "https://93.184.215.14/mcp",
                false
            )
            .await,
            Ok(())
        );
    }

    #[tokio::test]
    async fn a_private_app_moves_only_to_another_port_of_its_address() {
        let from = Some("http://192.168.1.20:9/mcp");
        for to in [
            "http://192.168.1.20:10/mcp",
            "https://192.168.1.20/mcp",
            "http://[::ffff:192.168.1.20]:10/mcp",
            "http://0xc0a80114:10/mcp",
        ] {
            assert_eq!(moving(from, to, false).await, Ok(()), "{to}");
        }
        for to in [
            "http://192.168.1.1/mcp",
            "http://10.0.0.1/mcp",
            "http://127.0.0.1:9/mcp",
            "http://[::1]:9/mcp",
            "http://localhost:9/mcp",
        ] {
            let e = moving(from, to, false).await;
            assert!(
                e.as_ref()
                    .is_err_and(|e| e.starts_with("private_address: ")),
                "{to}: {e:?}"
            );
            assert_eq!(moving(from, to, true).await, Ok(()), "{to}");
        }
    }

    #[tokio::test]
    async fn a_host_name_gives_no_place() {
        // Names other than localhost may resolve elsewhere tomorrow: the app's own port moves
        // on a named host are public-only (the owner allows more with self_url_private).
        for from in ["http://nas.invalid:9/mcp", "https://app.example.com/mcp"] {
            for to in ["http://127.0.0.1:10/mcp", "http://10.0.0.1/mcp"] {
                let e = moving(Some(from), to, false).await;
                assert!(
                    e.as_ref()
                        .is_err_and(|e| e.starts_with("private_address: ")),
                    "{from} -> {to}: {e:?}"
                );
            }
        }
    }
}
