//! The engine: files as the truth, operations, history, validation, the watcher and the semantic
//! index (`cargo test --test e2e engine::`).

mod files;
mod history;
mod ops;
pub(crate) mod semantic;
mod semantic_model;
mod validation;
mod watch_scope;
