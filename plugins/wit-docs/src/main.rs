//! `wit-docs WIT_DIR COMPONENT`: appends the doc comments of the WIT package in `WIT_DIR` to
//! `COMPONENT` as its `package-docs` custom section (wit-component's format: a version byte,
//! then JSON), so that datanotes describes each typed tool with its WIT doc comment. Works on a
//! component from any toolchain (cargo, componentize-py, componentize-js, TinyGo).

use std::process::ExitCode;
use wit_parser::{PackageMetadata, Resolve};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [wit, component] = &args[..] else {
        eprintln!("usage: wit-docs WIT_DIR COMPONENT.wasm");
        return ExitCode::from(2);
    };
    match run(wit, component) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("wit-docs: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(wit: &str, component: &str) -> Result<(), Box<dyn std::error::Error>> {
    let mut resolve = Resolve::default();
    let (pkg, _) = resolve.push_dir(wit)?;
    let data = PackageMetadata::extract(&resolve, pkg).encode()?;
    let mut bytes = std::fs::read(component)?;
    if bytes.get(..4) != Some(b"\0asm".as_slice()) {
        return Err(format!("{component} is not a WebAssembly file").into());
    }
    // A custom section (id 0): its size, its name, then the data.
    let name = PackageMetadata::SECTION_NAME.as_bytes();
    let mut body = leb(name.len());
    body.extend_from_slice(name);
    body.extend_from_slice(&data);
    bytes.push(0);
    bytes.extend(leb(body.len()));
    bytes.extend(body);
    std::fs::write(component, bytes)?;
    Ok(())
}

/// An unsigned LEB128 number.
fn leb(mut n: usize) -> Vec<u8> {
    let mut out = vec![];
    loop {
        let b = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(b);
            return out;
        }
        out.push(b | 0x80);
    }
}
