//! The end-to-end tests: one binary (it links the engine, wasmtime and cranelift once), one
//! module per area, one harness ([`kit`]). Every test starts the real `datanotes` binary on
//! 127.0.0.1 over a temporary folder and talks to it like a client.
//!
//! ```sh
//! cargo test --test e2e                 # every area
//! cargo test --test e2e mcp::           # one area (a module below)
//! cargo test --test e2e feed::sse_      # the tests of an area whose names start so
//! ```
//!
//! The crash matrix reads two variables, as before: `DATANOTES_CRASH_LONG=1` runs its long
//! profile (more rows, more kills per operation), `DATANOTES_CRASH_CASE=TEXT` only the cases whose
//! name holds `TEXT` (`DATANOTES_CRASH_LONG=1 cargo test --test e2e crash::`).

mod kit;

mod app_oauth;
mod apps_registry;
mod apps_scopes;
mod apps_sign;
mod apps_sign_in;
mod apps_tools;
mod apps_upgrade_crash;
mod cli;
mod connections;
mod crash;
mod docs;
mod engine_files;
mod engine_history;
mod engine_ops;
mod engine_validation;
mod everything;
mod feed;
mod list_changed;
mod mcp;
mod mcp_cancel;
mod mcp_exact;
mod mcp_headers;
mod mcp_hostile_content;
mod mcp_relay;
mod mcp_resources;
mod mcp_resubscribe;
mod mcp_rounds;
mod mcp_shown;
mod mcp_tasks;
mod oauth;
mod oauth_reads;
mod plain_words;
mod policy;
mod python_app;
mod semantic;
mod semantic_model;
mod smoke;
mod wasm;
mod wasm_cancel;
mod wasm_idle;
mod wasm_v2;
mod watch_scope;
