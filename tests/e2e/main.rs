//! The end-to-end tests: one binary (it links the engine, wasmtime and cranelift once), one
//! module per area, one harness ([`kit`]). Every test starts the real `datanotes` binary on
//! 127.0.0.1 over a temporary folder and talks to it like a client.
//!
//! ```sh
//! cargo test --test e2e                 # every area
//! cargo test --test e2e mcp::           # one area (a module below: apps, auth, engine, mcp, wasm, ...)
//! cargo test --test e2e feed::sse_      # the tests of an area whose names start so
//! ```
//!
//! The crash matrix reads two variables, as before: `DATANOTES_CRASH_LONG=1` runs its long
//! profile (more rows, more kills per operation), `DATANOTES_CRASH_CASE=TEXT` only the cases whose
//! name holds `TEXT` (`DATANOTES_CRASH_LONG=1 cargo test --test e2e crash::`).

mod kit;

mod apps;
mod auth;
mod cli;
mod connections;
mod crash;
mod docs;
mod engine;
mod feed;
mod mcp;
mod plain_words;
mod smoke;
mod telemetry;
mod wasm;
