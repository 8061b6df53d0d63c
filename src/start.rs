//! The start-up: the router composed of the HTTP door ([`crate::http`]) and the MCP door
//! ([`crate::mcp`]) over one [`Shared`] state, served through [`crate::listen`] until ctrl-c /
//! SIGTERM. The top of the module graph: nothing in the library imports it.

use crate::server::Shared;
use axum::Router;
use axum::http::HeaderMap;
use std::sync::Arc;

/// Every address the server answers: the HTTP door's routes (and its 404/405 answers), then
/// `/mcp`.
pub(crate) fn router(s: Shared, hosts: crate::mcp::hosts::Hosts) -> Router {
    crate::http::router(s.clone()).merge(crate::mcp::router(s, hosts))
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
