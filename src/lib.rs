//! datanotes: a local-first database engine for Markdown notes, with an apps host.
//!
//! See ARCHITECTURE.md for the map.

pub mod apps;
pub mod auth;
pub mod cli;
pub mod demo;
pub mod engine;
pub mod error;
pub mod feed;
pub mod http;
pub mod listen;
pub mod mcp;
pub mod names;
pub mod ops;
pub mod server;
pub mod start;
