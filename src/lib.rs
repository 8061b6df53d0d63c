//! datanotes: a local-first database engine for Markdown notes, with an apps host.
//!
//! See ARCHITECTURE.md for the map.

#![warn(missing_docs)]

pub mod apps;
pub mod auth;
pub(crate) mod bounded;
pub mod cli;
pub mod demo;
pub mod discover;
pub mod engine;
pub(crate) mod error;
pub(crate) mod feed;
pub(crate) mod http;
pub(crate) mod knobs;
pub mod listen;
pub mod mcp;
pub(crate) mod names;
pub mod ops;
pub(crate) mod outbound;
pub mod server;
pub mod start;
pub(crate) mod telemetry;
