//! The start-up: the router composed of the HTTP door ([`crate::http`]) and the MCP door
//! ([`crate::mcp`]) over one [`Shared`] state, served through [`crate::listen`] until ctrl-c /
//! SIGTERM. The top of the module graph: nothing in the library imports it.
//!
//! [`runtime`] builds the server's tokio runtime, whose threads ask the kernel for its shortest
//! time slice (100 µs, Linux 6.12 or later): woken for a request, they preempt the writer at once
//! instead of waiting up to its slice.

use crate::server::Shared;
use axum::Router;
use axum::http::HeaderMap;
use std::sync::Arc;

/// Every address the server answers: the HTTP door's routes (and its 404/405 answers), then
/// `/mcp`.
pub(crate) fn router(s: Shared, hosts: crate::mcp::hosts::Hosts) -> Router {
    crate::http::router(s.clone()).merge(crate::mcp::router(s, hosts))
}

/// Every path the server answers (the HTTP door's, as written on its router, then `/mcp`): what
/// the decision matrix enumerates.
pub fn paths() -> Vec<String> {
    let mut v = crate::http::paths();
    v.push(crate::mcp::PATH.to_string());
    v
}

/// The server's runtime: tokio's worker threads (one per core) and blocking threads, each asking
/// the kernel for a short time slice (see [`short_slice`]).
pub fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    let slice = crate::knobs::num("DATANOTES_SLICE_US", SLICE_US);
    tokio::runtime::Builder::new_multi_thread()
        .on_thread_start(move || {
            short_slice(slice);
        })
        .enable_all()
        .build()
}

/// The time slice the server's threads ask for, in µs (the kernel's least).
const SLICE_US: u64 = 100;

/// Asks the kernel for a time slice of `us` µs for this thread (Linux 6.12 and later: a custom
/// slice of the fair scheduler; `0` keeps the kernel's, 1.4 ms on a 2-core machine). A thread with a short slice
/// that wakes up preempts one with a longer slice on its core at once: a request's thread waits
/// less behind the writer thread's commits (issue 13: a call through `/mcp` waited up to a
/// slice behind them when the other core was busy). Older kernels refuse it: nothing changes
/// then, and the answer is false.
fn short_slice(us: u64) -> bool {
    #[cfg(target_os = "linux")]
    if us > 0 {
        /// The kernel's `struct sched_attr` (`sched_setattr(2)`).
        #[repr(C)]
        struct SchedAttr {
            size: u32,
            policy: u32,
            flags: u64,
            nice: i32,
            priority: u32,
            runtime: u64,
            deadline: u64,
            period: u64,
            util_min: u32,
            util_max: u32,
        }
        let attr = SchedAttr {
            size: std::mem::size_of::<SchedAttr>() as u32,
            policy: libc::SCHED_OTHER as u32,
            flags: 0,
            // The thread's nice value, kept (Linux: `getpriority` of pid 0 is the thread's).
            // SAFETY: getpriority only reads.
            nice: unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) },
            priority: 0,
            runtime: us.clamp(100, 100_000) * 1000,
            deadline: 0,
            period: 0,
            util_min: 0,
            util_max: 0,
        };
        // SAFETY: sched_setattr reads `size` bytes of `attr`, for this thread (pid 0).
        let r = unsafe { libc::syscall(libc::SYS_sched_setattr, 0, &attr as *const SchedAttr, 0) };
        if r != 0 {
            tracing::debug!(
                "no short time slice for this thread: {}",
                std::io::Error::last_os_error()
            );
        }
        return r == 0;
    }
    false
}

/// How long requests still running at ctrl-c / SIGTERM may take to finish.
const STOP_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// Serves until ctrl-c / SIGTERM, connections bounded by `limits` (see [`crate::listen`]),
/// `/mcp` answering the hosts of `hosts` (see [`crate::mcp::hosts`]).
/// Open MCP sessions are ended at once; other requests (feed streams, long polls) get
/// [`STOP_GRACE`] to finish, then the server stops anyway: a client holding a stream open must
/// not keep the server from stopping.
pub async fn serve(
    s: Shared,
    listener: tokio::net::TcpListener,
    limits: crate::listen::Limits,
    hosts: crate::mcp::hosts::Hosts,
) -> std::io::Result<()> {
    let app = router(s.clone(), hosts);
    let mut closing = s.closing.subscribe();
    {
        let s = s.clone();
        tokio::spawn(async move {
            shutdown_signal().await;
            s.closing.send_replace(true);
        });
    }
    let is_owner: crate::listen::IsOwner = {
        let s = s.clone();
        Arc::new(move |headers: &HeaderMap| s.is_owner(headers))
    };
    let server = crate::listen::serve(listener, app, is_owner, limits, s.closing.subscribe());
    let grace = async move {
        let _ = closing.wait_for(|v| *v).await;
        tokio::time::sleep(STOP_GRACE).await;
    };
    tokio::select! {
        _ = server => Ok(()),
        _ = grace => {
            tracing::warn!("requests still open {} s after the stop signal: stopping anyway", STOP_GRACE.as_secs());
            Ok(())
        }
    }
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("signal handler");
    tokio::select! {
        _ = ctrl_c => {},
        _ = term.recv() => {},
    }
}

/// The DNS server the owner named for outbound connections (`DATANOTES_DNS`), if any; an error
/// says what the variable takes.
pub fn outbound_dns() -> anyhow::Result<Option<std::net::SocketAddr>> {
    crate::outbound::dns::from_env().map_err(anyhow::Error::msg)
}

/// Starts the export of traces and metrics over OTLP if the flags or the standard `OTEL_*`
/// variables ask for it: the endpoints they export to (`None`: off).
pub fn start_tracing(
    endpoint: Option<String>,
    protocol: Option<String>,
    record_content: bool,
) -> anyhow::Result<(Option<String>, Option<String>)> {
    let config = crate::telemetry::trace::Config {
        endpoint,
        protocol,
        record_content,
    };
    Ok((
        crate::telemetry::trace::start(&config)?,
        crate::telemetry::otlp_metrics::start(&config)?,
    ))
}

/// Exports the spans still queued and the metrics since the last export (at shutdown).
pub fn stop_tracing() {
    crate::telemetry::trace::stop();
    crate::telemetry::otlp_metrics::stop();
}

#[cfg(test)]
mod tests {
    /// This thread's `se.slice` (ns), where the kernel shows it.
    fn my_slice() -> Option<u64> {
        std::fs::read_to_string("/proc/thread-self/sched")
            .ok()?
            .lines()
            .find(|l| l.starts_with("se.slice"))?
            .rsplit(':')
            .next()?
            .trim()
            .parse()
            .ok()
    }

    /// Linux 6.12 and later take a custom slice; older kernels refuse it and the thread goes on
    /// with the kernel's own. Both branches are checked on whichever kernel runs this (the
    /// end-to-end test checks the server's threads).
    #[test]
    #[cfg(target_os = "linux")]
    fn a_short_slice_is_taken_where_the_kernel_can_and_changes_nothing_elsewhere() {
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
        let mut v = release
            .split(['.', '-'])
            .map(|p| p.parse::<u32>().unwrap_or(0));
        let can = (v.next().unwrap_or(0), v.next().unwrap_or(0)) >= (6, 12);
        std::thread::spawn(move || {
            let before = my_slice();
            assert!(!super::short_slice(0), "0 asks for nothing");
            assert_eq!(my_slice(), before, "0 changed the slice");
            let taken = super::short_slice(250);
            assert_eq!(taken, can, "kernel {release}: taken {taken}");
            if taken {
                assert_eq!(my_slice(), Some(250_000));
            } else {
                assert_eq!(my_slice(), before, "a refused slice changed the thread's");
            }
        })
        .join()
        .unwrap();
    }
}
