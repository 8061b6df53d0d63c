//! What the owner can see of what agents and apps do: metrics ([`metrics`], served as
//! Prometheus text at `GET /datanotes/metrics`, and over OTLP when configured:
//! [`otlp_metrics`]) and traces ([`trace`], exported over OTLP when configured; where OTLP goes:
//! `otlp`), following OpenTelemetry's MCP and GenAI conventions.
//!
//! - [`request::Observed`]: one request at a door, from its arrival to its answer written.
//! - [`app_call::AppCall`]: one call from the engine to an app's tool.
//! - `span_queue`: the bounded span queue and its export thread.
//! - `sampling`: which spans are recorded (`OTEL_TRACES_SAMPLER`).
//! - [`recent`]: each tool's calls of the last hour, minute by minute, for the console.
//!
//! Below the doors and the apps: it knows nothing of either, they tell it what happened.
//!
//! The HTTP door observes each request in a middleware (`http/mod.rs`, `observe`: the route's
//! pattern as its name and label); `Authed` hands it to the operation's `Ctx`, and `ops::call`
//! makes each operation's span under it. At `/mcp`, `mcp/observe.rs` does the same for each POSTed
//! request. The metrics are served by `http/operations.rs` to the owner and to the metrics tokens
//! of `auth/metrics_tokens.rs`; the gauges' source is set by `Server::new`.

pub mod app_call;
pub mod metrics;
mod otlp;
pub mod otlp_metrics;
pub mod recent;
pub mod request;
mod sampling;
mod span_queue;
pub mod trace;

pub use app_call::AppCall;
pub use request::Observed;

/// Lowers the calling thread's CPU priority (Linux: nice 10, for this thread alone, and the
/// threads it then starts): export is background work, and on a busy machine the requests it
/// describes come first. Its encoding and sending used to take a core from them for a few
/// microseconds per span; a lagging export only fills the queue, which is bounded and counted.
pub fn yield_to_requests() {
    #[cfg(target_os = "linux")]
    // SAFETY: gettid and setpriority take no pointers; on Linux a thread's ID names that
    // thread alone for PRIO_PROCESS.
    unsafe {
        let tid = libc::gettid();
        libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, 10);
    }
}
