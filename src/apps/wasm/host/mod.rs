//! The host side of a store: [`Host`], a store's data, with the WASI and wasi:http views, and
//! one file per interface the world imports (`engine.rs`: `datanotes:app/engine` and
//! `datanotes:app/log`, of both versions of the world: 0.2 adds `progress` and `cancelled`) or that the sandbox needs (`pipe.rs`: the guest's stdout and stderr).

mod engine;
mod pipe;

pub(crate) use pipe::{LogPipe, stderr_tail};

use super::limits::GuestLimits;
use super::net::Outgoing;
use crate::apps::backend::ClientChannel;
use crate::auth::AppScope;
use crate::engine::{Actor, Engine};
use std::sync::Arc;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

/// A store's data: WASI with nothing granted, wasi:http behind the app's `allow_hosts`, the
/// app's scope, the current call's actor.
pub(crate) struct Host {
    pub(in crate::apps::wasm) wasi: WasiCtx,
    pub(in crate::apps::wasm) http: WasiHttpCtx,
    pub(in crate::apps::wasm) outgoing: Outgoing,
    pub(in crate::apps::wasm) table: ResourceTable,
    pub(in crate::apps::wasm) limits: GuestLimits,
    pub(in crate::apps::wasm) engine: Arc<Engine>,
    /// The server's runtime: engine calls run in its blocking threads, like the HTTP door's.
    pub(in crate::apps::wasm) server: tokio::runtime::Handle,
    pub(in crate::apps::wasm) scope: Arc<AppScope>,
    pub(in crate::apps::wasm) actor: Actor,
    /// The epoch ticks the current call may still run guest code for (`cpu_ms`).
    pub(in crate::apps::wasm) ticks_left: u64,
    /// Set when an engine call returns: the tick seen next passed (at least partly) while the
    /// guest waited for it, and is not charged.
    pub(in crate::apps::wasm) waited: bool,
    /// The current call's caller, for `engine.progress` (0.2): none outside a call, or when it
    /// can receive nothing.
    pub(in crate::apps::wasm) client: Option<Arc<dyn ClientChannel>>,
    /// The current call's cancellation, for `engine.cancelled` (0.2).
    pub(in crate::apps::wasm) cancel: tokio_util::sync::CancellationToken,
    /// The current call's trace (export on): the guest's run, else the call's own span; the
    /// engine operations it calls are traced under it.
    pub(in crate::apps::wasm) trace: Option<opentelemetry::trace::SpanContext>,
    pub(in crate::apps::wasm) stdout: LogPipe,
    pub(in crate::apps::wasm) stderr: LogPipe,
}

impl WasiView for Host {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl WasiHttpView for Host {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView {
            ctx: &mut self.http,
            table: &mut self.table,
            hooks: &mut self.outgoing,
        }
    }
}
