//! [`WasmError`]: what went wrong loading, instantiating or calling a WASM app, and the one
//! place it becomes the aggregator's [`BackendError`]. Its messages name the world's interfaces
//! (`world.rs`), and `world.rs` answers these errors: a vocabulary and its errors, which know
//! each other (the one circle of this room besides `runtime/` and `typed/`).

use super::WORLD;
use super::world::{TOOLS_INTERFACE, TOOLS_INTERFACE_V2};
use crate::apps::backend::BackendError;
use std::fmt;
use std::path::PathBuf;

/// What went wrong with a WASM app. Its text (`Display`) is what the owner or the agent reads:
/// it names what failed and which limit ran out, never a Rust type.
#[derive(Debug, Clone)]
pub(crate) enum WasmError {
    /// The installed component's file cannot be read.
    Read {
        /// The file.
        path: PathBuf,
        /// Why not.
        why: String,
    },
    /// The file is not a component wasmtime can compile.
    Compile(String),
    /// The compiled component cannot be loaded.
    Deserialize(String),
    /// A typed component imports what the engine does not provide.
    Import {
        /// The import.
        name: String,
    },
    /// The component exports neither the tools interface nor any function.
    NoTools {
        /// What it exports instead.
        exports: Vec<String>,
    },
    /// The component's tools export is not an interface.
    NotInterface {
        /// The export.
        name: String,
    },
    /// The component's tools interface differs from the world's.
    Mismatch {
        /// The interface, as the component names it.
        name: String,
        /// One line per function that differs.
        problems: Vec<String>,
    },
    /// The linker refused the component (wasmtime's own type check).
    Link(String),
    /// Making an instance failed: a [`WasmError::Memory`], a [`WasmError::Count`], or
    /// [`WasmError::Wasmtime`].
    Instantiate(Box<WasmError>),
    /// A memory or table growth the memory budget refused (the limiter's message).
    Memory(String),
    /// The component needs more memories, tables or core instances than an app may have.
    Count {
        /// How many it asked for.
        n: String,
        /// Of what.
        what: &'static str,
        /// The cap.
        most: usize,
    },
    /// Any other error of wasmtime, as it says it.
    Wasmtime(String),
    /// A call trapped or failed in the guest.
    Trap {
        /// The trap, said plainly.
        what: String,
        /// The end of the guest's stderr, if it wrote any.
        stderr: Option<String>,
    },
    /// A tool's result is over `max_result_bytes`.
    TooLarge {
        /// The tool.
        tool: String,
        /// The result's size.
        bytes: usize,
        /// `max_result_bytes`.
        max: usize,
    },
    /// A listed tool's input schema is not JSON.
    BadSchema {
        /// The tool.
        tool: String,
        /// The parser's error.
        why: String,
    },
    /// A listed tool is not a valid MCP tool.
    BadTool {
        /// The tool.
        tool: String,
        /// Why not.
        why: String,
    },
    /// `timeout_ms` ran out.
    Timeout {
        /// What timed out ("listing tools", "calling x").
        what: String,
        /// `timeout_ms`.
        ms: u128,
    },
    /// No instance was free before the deadline.
    Busy {
        /// `max_instances`.
        n: u32,
    },
    /// The app is closed.
    Closed,
    /// A panic in the host while doing `0` ("the listing", "calling x").
    Panicked(String),
}

impl WasmError {
    /// The cause, through an [`WasmError::Instantiate`].
    fn cause(&self) -> &WasmError {
        match self {
            WasmError::Instantiate(e) => e.cause(),
            e => e,
        }
    }

    /// More memories, tables or core instances than an app may have.
    pub(super) fn is_count(&self) -> bool {
        matches!(self.cause(), WasmError::Count { .. })
    }

    /// The memory budget (`memory_mb`) ran out.
    pub(super) fn is_memory(&self) -> bool {
        matches!(self.cause(), WasmError::Memory(_))
    }
}

impl fmt::Display for WasmError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WasmError::Read { path, why } => write!(f, "cannot read {}: {why}", path.display()),
            WasmError::Compile(e) => write!(f, "not a valid component: {e}"),
            WasmError::Deserialize(e) => write!(f, "cannot load the compiled component: {e}"),
            WasmError::NoTools { exports } => {
                let listed = if exports.is_empty() {
                    "nothing".to_string()
                } else {
                    exports.join(", ")
                };
                write!(
                    f,
                    "the component exports neither the interface {TOOLS_INTERFACE} (or {TOOLS_INTERFACE_V2}) nor any function (it exports {listed})"
                )
            }
            WasmError::Import { name } => write!(
                f,
                "the component imports {name}, which datanotes does not provide: a component may import only datanotes:app/engine, datanotes:app/log and WASI (wasi:cli, wasi:io, wasi:clocks, wasi:random, wasi:http)"
            ),
            WasmError::NotInterface { name } => {
                write!(f, "the component's export {name} is not an interface")
            }
            WasmError::Mismatch { name, problems } => {
                // The world of the version the component targets.
                let world = if name.contains("@0.2.") {
                    "datanotes:app@0.2.0 (wit/0.2)"
                } else {
                    WORLD
                };
                write!(
                    f,
                    "its {name} does not match the world {world}: {}",
                    problems.join("; ")
                )
            }
            WasmError::Link(e) => write!(
                f,
                "the component's imports or exports do not match what the engine provides ({WORLD} or datanotes:app@0.2.0, or typed functions importing WASI, datanotes:app/engine and log): {e}"
            ),
            WasmError::Instantiate(e) => write!(f, "cannot instantiate: {e}"),
            WasmError::Memory(m) | WasmError::Wasmtime(m) => f.write_str(m),
            WasmError::Count { n, what, most } => write!(
                f,
                "the app needs {n} {what}, more than the {most} an app may have"
            ),
            WasmError::Trap { what, stderr } => match stderr {
                Some(t) => write!(f, "{what}; its stderr ended with: {t}"),
                None => f.write_str(what),
            },
            WasmError::TooLarge { tool, bytes, max } => write!(
                f,
                "the result of {tool} is {bytes} bytes, over the limit of {max}"
            ),
            WasmError::BadSchema { tool, why } => {
                write!(f, "tool {tool}: its input schema is not JSON: {why}")
            }
            WasmError::BadTool { tool, why } => write!(f, "tool {tool}: {why}"),
            WasmError::Timeout { what, ms } => write!(f, "timed out {what} ({ms} ms)"),
            WasmError::Busy { n } => write!(
                f,
                "timed out waiting for one of its {n} instances (max_instances) to be free"
            ),
            WasmError::Closed => f.write_str("the app is closed"),
            WasmError::Panicked(what) => write!(f, "{what} panicked"),
        }
    }
}

impl std::error::Error for WasmError {}

/// The one place a WASM app's error becomes the aggregator's: its text, unchanged.
impl From<WasmError> for BackendError {
    fn from(e: WasmError) -> BackendError {
        BackendError(e.to_string())
    }
}
