//! The `mcp-connect` command: parses arguments and calls into the library.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use mcp_connect::config::{Config, redact_url};
use mcp_connect::{Application, db::Db, telemetry};

#[derive(Parser)]
#[command(
    name = "mcp-connect",
    version,
    about = "Third-party OAuth for MCP servers through URL-mode elicitation"
)]
struct Cli {
    /// The TOML config file (keys can be overridden by MCP_CONNECT_* environment variables).
    #[arg(long, global = true, env = "MCP_CONNECT_CONFIG")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Run the service (the default).
    Serve,
    /// Create the database if needed and apply migrations, then exit.
    Migrate,
    /// Validate the configuration and report every problem, key by key.
    CheckConfig,
    /// Print a new encryption key in the `id:base64` form for `encryption_keys`.
    GenKey {
        /// The key id (defaults to today's date, e.g. k20261202).
        #[arg(long)]
        id: Option<String>,
    },
}

fn load(path: Option<&std::path::Path>) -> Result<Config, ExitCode> {
    Config::load(path).map_err(|e| {
        eprintln!("mcp-connect: invalid configuration:\n{e}");
        ExitCode::from(2)
    })
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command.unwrap_or(Command::Serve) {
        Command::GenKey { id } => {
            let id = id.unwrap_or_else(|| {
                let d = time::OffsetDateTime::now_utc().date();
                format!("k{:04}{:02}{:02}", d.year(), u8::from(d.month()), d.day())
            });
            println!("{}", mcp_connect::crypto::generate_key(&id));
            ExitCode::SUCCESS
        }
        Command::CheckConfig => match load(cli.config.as_deref()) {
            Ok(c) => {
                println!(
                    "configuration is valid: public_url {}, database {}, {} provider(s), {} client(s), encrypting with key {}",
                    c.public_url,
                    redact_url(&c.database_url),
                    c.providers.len(),
                    c.clients.len(),
                    c.keys.current_id()
                );
                ExitCode::SUCCESS
            }
            Err(code) => code,
        },
        Command::Migrate => {
            let c = match load(cli.config.as_deref()) {
                Ok(c) => c,
                Err(code) => return code,
            };
            telemetry::init(c.log_format);
            let r = async {
                let db = Db::connect(&c.database_url).await?;
                db.migrate().await
            }
            .await;
            match r {
                Ok(()) => {
                    tracing::info!(database = %redact_url(&c.database_url), "migrations applied");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    tracing::error!(error = format!("{e:#}"), "migration failed");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Serve => {
            let c = match load(cli.config.as_deref()) {
                Ok(c) => c,
                Err(code) => return code,
            };
            telemetry::init(c.log_format);
            let public_url = c.public_url.clone();
            let db_url = redact_url(&c.database_url);
            let app = match Application::build(c).await {
                Ok(a) => a,
                Err(e) => {
                    tracing::error!(error = format!("{e:#}"), "could not start");
                    return ExitCode::FAILURE;
                }
            };
            tracing::info!(address = %app.local_addr(), public_url = %public_url, database = %db_url, "mcp-connect listening");
            match app.run_until(shutdown_signal()).await {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    tracing::error!(error = format!("{e:#}"), "server failed");
                    ExitCode::FAILURE
                }
            }
        }
    }
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! { _ = ctrl_c => {}, _ = term => {} }
}
