//! An agent-side client: lists and calls tools through the engine's one MCP address (`/mcp`),
//! with rmcp's client over streamable HTTP.
//!
//! ```sh
//! export DATANOTES_TOKEN=$(cat demo/.datanotes/owner-token)
//! cargo run --example agent -- list
//! cargo run --example agent -- call list_tables '{}'
//! cargo run --example agent -- --actor "my-agent / some-model" call planning_add_task '{"title": "Call Ada"}'
//! ```
//!
//! `list` prints one tool a line (`name<TAB>description`); `call` prints the result as JSON and
//! exits with status 2 when the result is an error (`isError`).

use clap::{Parser, Subcommand};
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::Value;
use std::collections::HashMap;

#[derive(Parser)]
#[command(about = "List and call datanotes tools over MCP")]
struct Args {
    /// The engine's base URL (its MCP address is URL/mcp).
    #[arg(long, default_value = "http://127.0.0.1:5234", env = "DATANOTES_URL")]
    url: String,
    /// A token (owner or app).
    #[arg(long, env = "DATANOTES_TOKEN", hide_env_values = true)]
    token: String,
    /// The actor to record (`harness / model`).
    #[arg(long)]
    actor: Option<String>,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// List the tools: the engine's operations first, then the apps'.
    List,
    /// Call a tool with JSON arguments.
    Call {
        tool: String,
        #[arg(default_value = "{}")]
        arguments: String,
    },
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let url = format!(
        "{}/mcp",
        args.url.trim_end_matches('/').trim_end_matches("/mcp")
    );
    let mut cfg = StreamableHttpClientTransportConfig::with_uri(url).auth_header(args.token);
    if let Some(a) = &args.actor {
        cfg = cfg.custom_headers(HashMap::from([(
            http::HeaderName::from_static("x-datanotes-actor"),
            a.parse()?,
        )]));
    }
    let client = ().serve(StreamableHttpClientTransport::from_config(cfg)).await?;
    let mut status = 0;
    match args.cmd {
        Cmd::List => {
            for t in client.list_all_tools().await? {
                let d = t.description.as_deref().unwrap_or("");
                println!("{}\t{}", t.name, d.lines().next().unwrap_or(""));
            }
        }
        Cmd::Call { tool, arguments } => {
            let Value::Object(a) = serde_json::from_str(&arguments)? else {
                anyhow::bail!("the arguments must be a JSON object");
            };
            let r = client
                .call_tool(CallToolRequestParams::new(tool).with_arguments(a))
                .await?;
            if r.is_error == Some(true) {
                status = 2;
            }
            println!("{}", serde_json::to_string_pretty(&r)?);
        }
    }
    client.cancel().await?;
    std::process::exit(status);
}
