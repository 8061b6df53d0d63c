//! WASM apps end to end, through the real server: the three example apps (Rust, Python,
//! JavaScript) installed, listed and called over `/apps/call/` and MCP; scopes enforced on a
//! component's engine calls; name collisions; the compile cache across restarts; hostile
//! components contained while good calls go on; a timed-out call cancelled; a component for
//! another world refused; outgoing HTTP (wasi:http) only to the hosts the owner allows.
//!
//! The components come from `target/plugins/` (built by `scripts/build-plugins`, run once here:
//! it does nothing when they are up to date). Compiled components are cached in one folder for
//! every test (`target/wasm-test-cache`), so the Python and JavaScript apps compile once.
//!
//! `examples.rs`, `install.rs`, `contained.rs` and `outgoing_and_memory.rs` hold the tests;
//! `cancel`, `idle`, `typed` and `v2` the features of their names.

use crate::kit::*;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

mod cancel;
mod contained;
mod examples;
mod idle;
mod install;
mod outgoing_and_memory;
mod typed;
mod v2;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The path of a built component; builds them all once per test run.
pub(crate) fn component(name: &str) -> PathBuf {
    static BUILT: OnceLock<()> = OnceLock::new();
    BUILT.get_or_init(|| {
        let out = std::process::Command::new(root().join("scripts/build-plugins"))
            .output()
            .expect("run scripts/build-plugins");
        assert!(
            out.status.success(),
            "scripts/build-plugins failed:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    });
    let p = root().join("target/plugins").join(format!("{name}.wasm"));
    assert!(p.exists(), "{} is missing", p.display());
    p
}

pub(crate) fn shared_cache() -> String {
    let d = root().join("target/wasm-test-cache");
    std::fs::create_dir_all(&d).unwrap();
    d.to_string_lossy().into_owned()
}

/// A server whose compile cache is the shared one.
fn server() -> Server {
    Server::start_with_env(&[("DATANOTES_CACHE_DIR", &shared_cache())])
}

impl Server {
    /// Installs a component as a WASM app; answers the create answer.
    pub(crate) fn install(&self, name: &str, file: &str, extra: Value) -> Value {
        let mut body = json!({"name": name, "wasm_path": component(file)});
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        let (st, v) = self.post("/datanotes/apps/create/", Some(&self.token), &body);
        assert_eq!(st, 200, "installing {name}: {v}");
        assert_eq!(v["app"]["kind"], "wasm", "{v}");
        v
    }

    /// Calls a tool through `/apps/call/`: answers `{ok, value, servedBy}`.
    pub(crate) fn tool(&self, tool: &str, args: Value) -> Value {
        let (st, v) = self.post(
            "/datanotes/apps/call/",
            Some(&self.token),
            &json!({"tool": tool, "arguments": args}),
        );
        assert_eq!(st, 200, "{tool}: {v}");
        v
    }

    /// Calls a tool that must succeed; answers its structured result (or its text).
    pub(crate) fn tool_ok(&self, tool: &str, args: Value) -> Value {
        let v = self.tool(tool, args.clone());
        assert_eq!(v["ok"], true, "{tool} {args}: {v}");
        match v["value"].get("structuredContent") {
            Some(s) => s.clone(),
            None => v["value"]["content"][0]["text"].clone(),
        }
    }

    /// Calls a tool that must fail; answers its error text.
    fn tool_err(&self, tool: &str, args: Value) -> String {
        let v = self.tool(tool, args.clone());
        assert_eq!(v["ok"], false, "{tool} {args} should fail: {v}");
        v["value"]["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    pub(crate) fn app(&self, name: &str) -> Value {
        let (st, v) = self.post(
            "/datanotes/apps/get/",
            Some(&self.token),
            &json!({"name": name}),
        );
        assert_eq!(st, 200, "{v}");
        v["app"].clone()
    }
}

/// `Ok` once `n` instances of the app `hostile` are in calls (live, none warm); else what its
/// runtime shows.
fn in_calls(s: &Server, n: u64) -> Result<(), String> {
    let r = s.app("hostile")["runtime"].clone();
    if r["instances"] == n && r["warm"] == 0 {
        Ok(())
    } else {
        Err(r.to_string())
    }
}
