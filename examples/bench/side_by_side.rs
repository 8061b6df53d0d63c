//! Servers side by side in one run (`telemetry`, `versus`): each with the planning WASM app,
//! one raw MCP session on each, and the trivial WASM tool and `ping` timed on any of them.

use super::agg::{mcp_raw_call, mcp_raw_request, mcp_raw_session};
use super::*;

/// The trivial WASM tool called: no arguments, nothing written.
const TOOL: &str = "planning_complete_task";

/// A server to start: its binary, its folder's name, its environment.
pub(crate) type Spec<'a> = (&'a Path, &'a str, &'a [(&'a str, &'a str)]);

pub(crate) struct SideBySide {
    pub(crate) servers: Vec<Server>,
    pub(crate) sids: Vec<String>,
    pub(crate) rt: tokio::runtime::Runtime,
    pub(crate) http: reqwest::Client,
    _tmp: tempfile::TempDir,
}

impl SideBySide {
    /// A server per `(binary, name, environment)`, each with the planning app; None (said as
    /// skipped for `section`) when the component is not built.
    pub(crate) fn start(section: &str, specs: &[Spec]) -> Option<SideBySide> {
        let wasm = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/plugins/planning.wasm");
        if !wasm.is_file() {
            skip(format!(
                "{section}: no {} (bash scripts/build-plugins)",
                wasm.display()
            ));
            return None;
        }
        let tmp = tempfile::tempdir().expect("tempdir");
        let servers: Vec<Server> = specs
            .iter()
            .map(|(bin, name, env)| {
                let s = Server::start_env(bin, &tmp.path().join(name), env);
                s.call(
                    "apps/create",
                    json!({"name": "planning", "write": ["personal.tasks.*"], "wasm_path": wasm}),
                );
                s
            })
            .collect();
        let rt = runtime();
        let http = reqwest::Client::new();
        let sids = servers
            .iter()
            .map(|s| rt.block_on(mcp_raw_session(&http, &s.url, &s.token)))
            .collect();
        Some(SideBySide {
            servers,
            sids,
            rt,
            http,
            _tmp: tmp,
        })
    }

    /// The raw request of the WASM tool call (for a load of one's own).
    pub(crate) fn noop_params() -> Value {
        json!({"name": TOOL, "arguments": {}})
    }

    /// One call of the WASM tool on server `k`, timed.
    pub(crate) fn noop(&self, k: usize) -> Duration {
        let s = &self.servers[k];
        let t0 = Instant::now();
        self.rt.block_on(mcp_raw_request(
            &self.http,
            &s.url,
            &s.token,
            &self.sids[k],
            "tools/call",
            Self::noop_params(),
        ));
        t0.elapsed()
    }

    /// One `ping` on server `k`, timed.
    pub(crate) fn ping(&self, k: usize) -> Duration {
        let s = &self.servers[k];
        let t0 = Instant::now();
        self.rt.block_on(mcp_raw_call(
            &self.http,
            &s.url,
            &s.token,
            &self.sids[k],
            "ping",
        ));
        t0.elapsed()
    }

    /// Stops every server.
    pub(crate) fn stop(self) {
        for s in self.servers {
            s.stop();
        }
    }
}
