//! The world check before compiling, for `datanotes apps install`: a component's exported
//! `tools` interface read from its bytes (wasmparser, already there through wasmtime), in a
//! fraction of the time a compile takes (seconds for a Python or JavaScript component). It
//! catches a component built for another version of the world (a `tools` export with a function
//! missing or with other parameters; a component without that export is a typed one) before
//! anything is sent or compiled; the server's install checks every type
//! after the compile ([`super::world`]), for every door.

use super::error::WasmError;
use super::world::{TOOLS_INTERFACE, TOOLS_INTERFACE_V2};
use wasmparser::component_types::ComponentEntityType;
use wasmparser::{Parser, Payload, Validator, WasmFeatures};

/// The functions of the tools interface and their parameters, as the world declares them.
const FUNCS: &[(&str, &[&str])] = &[
    ("list-tools", &[]),
    ("instructions", &[]),
    ("call-tool", &["name", "arguments", "ctx"]),
];

/// The names the component exports at its top level (not those of the components inside it).
fn top_exports(bytes: &[u8]) -> Option<Vec<String>> {
    let mut depth = 0usize;
    let mut names = vec![];
    for p in Parser::new(0).parse_all(bytes) {
        match p.ok()? {
            Payload::Version { .. } => depth += 1,
            Payload::End(_) => depth = depth.saturating_sub(1),
            Payload::ComponentExportSection(r) if depth == 1 => {
                for e in r {
                    names.push(e.ok()?.name.name.to_string());
                }
            }
            _ => {}
        }
    }
    Some(names)
}

/// Checks what can be checked of the world without compiling. A component that cannot be read
/// here passes: the compile says what is wrong with it.
fn check(bytes: &[u8]) -> Result<(), WasmError> {
    let Some(exports) = top_exports(bytes) else {
        return Ok(());
    };
    // Version 0.1 or 0.2 of the world: the same tools interface.
    let find = |iface: &str| {
        let prefix = iface.trim_end_matches('0');
        exports
            .iter()
            .find(|n| *n == iface)
            .or_else(|| exports.iter().find(|n| n.starts_with(prefix)))
            .cloned()
    };
    let Some(name) = find(TOOLS_INTERFACE).or_else(|| find(TOOLS_INTERFACE_V2)) else {
        // A typed component (no `tools` export): its exported functions are its tools, which
        // only the server's install can read.
        return Ok(());
    };
    let Ok(types) = Validator::new_with_features(WasmFeatures::all()).validate_all(bytes) else {
        return Ok(());
    };
    let t = types.as_ref();
    let Some(ComponentEntityType::Instance(id)) = t.component_item_for_export(&name).map(|i| i.ty)
    else {
        return Err(WasmError::NotInterface { name });
    };
    let inst = &t[id];
    let mut problems = vec![];
    for (func, want) in FUNCS {
        match inst.exports.get(*func).map(|i| i.ty) {
            None => problems.push(format!("it has no function {func}")),
            Some(ComponentEntityType::Func(f)) => {
                let have: Vec<&str> = t[f].params.iter().map(|(n, _)| n.as_str()).collect();
                if have != *want {
                    problems.push(format!(
                        "{func} takes ({}), the world's takes ({})",
                        have.join(", "),
                        want.join(", ")
                    ));
                }
            }
            Some(_) => problems.push(format!("its {func} is not a function")),
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(WasmError::Mismatch { name, problems })
    }
}

/// The world check before compiling, for the command line: `None` when the component may be
/// sent, else what does not match, in plain words.
pub fn check_before_compile(bytes: &[u8]) -> Option<String> {
    check(bytes).err().map(|e| e.to_string())
}

/// Whether the bytes are a WebAssembly component at all: `None` when they are, else why not,
/// in plain words (before any compile, for sources fetched from elsewhere).
pub fn not_a_component(bytes: &[u8]) -> Option<String> {
    match bytes.get(..8) {
        Some([0, b'a', b's', b'm', 0x0d, 0, 1, 0]) => None,
        Some([0, b'a', b's', b'm', 1, 0, 0, 0]) => Some(
            "it is a core WebAssembly module, not a component: make it a component (cargo component, componentize-py, jco, or wasm-tools component new)".into(),
        ),
        _ => Some("it is not WebAssembly (a component's first bytes are \\0asm)".into()),
    }
}
