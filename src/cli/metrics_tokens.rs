//! `datanotes metrics-tokens create | list | revoke`: the read-only tokens a scraper presents at
//! `GET /datanotes/metrics`.

use super::*;

#[derive(Subcommand)]
/// `datanotes metrics-tokens ...`: the owner's read-only metrics tokens (they read
/// `GET /datanotes/metrics` and nothing else).
pub enum MetricsTokensCmd {
    /// Make a token for a scraper; it is printed once.
    Create {
        /// Its name, e.g. `prometheus` (1 to 64 of a-z, 0-9, - and _).
        name: String,
    },
    /// One line per token: name and when it was made.
    List,
    /// Revoke a token: it stops working at once.
    Revoke {
        /// Its name (from `datanotes metrics-tokens list`).
        name: String,
    },
}

/// Runs a `metrics-tokens` command against the server at `conn`.
pub fn run_metrics_tokens(conn: Conn, cmd: MetricsTokensCmd) -> anyhow::Result<()> {
    match cmd {
        MetricsTokensCmd::Create { name } => {
            let v = post(&conn, "metrics-tokens/create", json!({ "name": name }))?;
            eprintln!(
                "metrics token {name}: it reads GET /datanotes/metrics and nothing else (shown once):"
            );
            println!("{}", v["token"].as_str().unwrap_or(""));
        }
        MetricsTokensCmd::List => {
            let v = post(&conn, "metrics-tokens", json!({}))?;
            let tokens = v["tokens"]
                .as_array()
                .map(Vec::as_slice)
                .unwrap_or_default();
            if tokens.is_empty() {
                println!("no metrics tokens (datanotes metrics-tokens create NAME makes one)");
            }
            for t in tokens {
                println!(
                    "{}  created {}",
                    t["name"].as_str().unwrap_or(""),
                    t["created"].as_str().unwrap_or("")
                );
            }
        }
        MetricsTokensCmd::Revoke { name } => {
            post(&conn, "metrics-tokens/revoke", json!({ "name": name }))?;
            println!("revoked metrics token {name}: it no longer works");
        }
    }
    Ok(())
}
