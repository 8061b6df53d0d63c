//! The `datanotes` command line.

use clap::{Parser, Subcommand};
use datanotes::engine::Engine;
use std::net::SocketAddr;
use std::path::PathBuf;

#[derive(Parser)]
#[command(
    name = "datanotes",
    version,
    about = "A local-first database engine for Markdown notes, with an apps host"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Create a database folder (and its owner token). Refused while a server serves the folder.
    Init {
        #[arg(long)]
        database: PathBuf,
    },
    /// Serve a database over HTTP.
    Serve {
        /// The database folder.
        #[arg(long, required_unless_present = "demo")]
        database: Option<PathBuf>,
        /// Serve a demo database (in ./demo unless --database is given), created with example tables on first use.
        #[arg(long)]
        demo: bool,
        #[arg(long, default_value = "127.0.0.1:5234")]
        listen: SocketAddr,
    },
    /// Manage apps on a running server (the owner's commands).
    Apps {
        #[command(flatten)]
        conn: datanotes::cli::Conn,
        #[command(subcommand)]
        cmd: Box<datanotes::cli::AppsCmd>,
    },
    /// Serve MCP over stdio for desktop clients, proxying to a running server.
    Mcp {
        /// The running server.
        #[arg(long, default_value = "http://127.0.0.1:5234", env = "DATANOTES_URL")]
        url: String,
        /// A token (owner or app); or use --database to read the owner token.
        #[arg(long, env = "DATANOTES_TOKEN", hide_env_values = true)]
        token: Option<String>,
        /// Read the owner token from this database folder.
        #[arg(long)]
        database: Option<PathBuf>,
        /// The actor to record (`harness / model`); by default the MCP client's name and version.
        #[arg(long)]
        actor: Option<String>,
    },
    /// (Internal) Compile a WASM component into the compile cache, then exit: the server runs
    /// itself so, so that compiling does not grow its own memory.
    #[command(name = datanotes::apps::wasm::COMPILE_COMMAND, hide = true)]
    CompileWasm { input: PathBuf, output: PathBuf },
}

/// Logs to stderr, filtered by `DATANOTES_LOG` (else `default`); colours only on a terminal.
/// rmcp's own lines are left out by default: its transport workers log every failed attempt to
/// reach an app (the aggregator logs one line per change of an app's reachability instead) and
/// its structs at INFO.
fn init_logs(default: &str) {
    use std::io::IsTerminal;
    let filter = match std::env::var("DATANOTES_LOG") {
        // rmcp's lines only when asked for by name.
        Ok(f) if !f.contains("rmcp") => format!("{f},rmcp=off"),
        Ok(f) => f,
        Err(_) => default.to_string(),
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_new(&filter)
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default)),
        )
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .init();
}

/// Opens a database and makes sure it has an owner token; prints a new token once.
fn open(db: &std::path::Path) -> anyhow::Result<(std::sync::Arc<Engine>, String)> {
    let engine = Engine::open(db)?;
    let (hash, new) = datanotes::auth::ensure_owner_token(&engine.meta_dir)?;
    if let Some(token) = new {
        println!(
            "owner token (shown once; saved to {} with mode 0600):\n  {token}",
            engine.meta_dir.join("owner-token").display()
        );
    }
    Ok((engine, hash))
}

fn main() {
    let cli = Cli::parse();
    // `datanotes mcp` says nothing on stderr unless something is wrong.
    init_logs(match cli.cmd {
        Command::Mcp { .. } => "warn,rmcp=off",
        _ => "info,rmcp=off",
    });
    // A failure is one plain line (with its causes), never a backtrace.
    if let Err(e) = run(cli) {
        eprintln!("datanotes: {e:#}");
        std::process::exit(1);
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.cmd {
        Command::Init { database } => {
            let (engine, _) = open(&database)?;
            engine.shutdown();
            println!("database ready at {}", engine.root.display());
        }
        Command::Serve {
            database,
            demo,
            listen,
        } => {
            // This binary compiles WASM components in a child process of its own.
            datanotes::apps::wasm::compile_in_child();
            let db = database.unwrap_or_else(|| PathBuf::from("demo"));
            let (engine, hash) = open(&db)?;
            if demo {
                datanotes::demo::seed(&engine)?;
            }
            // Connections hold file descriptors: as many as the system lets this process have.
            match datanotes::listen::raise_nofile() {
                Some((old, new)) if new > old => {
                    tracing::info!("open files limit raised from {old} to {new}")
                }
                Some((old, _)) => tracing::info!("open files limit: {old}"),
                None => {}
            }
            let limits = datanotes::listen::Limits::from_env();
            tracing::info!(
                max_connections = limits.max,
                header_timeout_ms = limits.header.as_millis() as u64,
                idle_timeout_ms = limits.idle.as_millis() as u64,
                "connection limits"
            );
            let rt = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()?;
            rt.block_on(async {
                let listener = tokio::net::TcpListener::bind(listen).await?;
                let addr = listener.local_addr()?;
                // A second server on this folder names this one and its address.
                engine.record_address(&addr.to_string())?;
                tracing::info!(database = %engine.root.display(), "serving on http://{addr}");
                println!(
                    "datanotes serving {} on http://{addr}",
                    engine.root.display()
                );
                let server = datanotes::server::Server::new(engine.clone(), hash)?;
                datanotes::start::serve(server, listener, limits).await?;
                Ok::<_, anyhow::Error>(())
            })?;
            engine.shutdown();
        }
        Command::Apps { conn, cmd } => datanotes::cli::run(conn, *cmd)?,
        Command::Mcp {
            url,
            token,
            database,
            actor,
        } => {
            let token = match (token, database) {
                (Some(t), _) => t,
                (None, Some(db)) => datanotes::auth::read_owner_token(&db)?,
                (None, None) => anyhow::bail!("give --token (or DATANOTES_TOKEN) or --database"),
            };
            let url = format!("{}/mcp", url.trim_end_matches('/').trim_end_matches("/mcp"));
            let rt = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()?;
            rt.block_on(datanotes::mcp::stdio::run(url, token, actor))?;
        }
        Command::CompileWasm { input, output } => {
            std::process::exit(datanotes::apps::wasm::compile_main(&input, &output))
        }
    }
    Ok(())
}
