//! The `mcp-connect` command: parses arguments and calls into the library.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use mcp_connect::cli::{self, Cli as Ops};
use mcp_connect::config::{Config, Files};
use mcp_connect::db::audit::AuditFilter;
use mcp_connect::db::connections::ConnectionFilter;
use mcp_connect::server::telemetry;
use mcp_connect::{
    Application,
    db::{Db, Migrations},
};

/// mimalloc rather than glibc's malloc: a request allocates and frees many small buffers on
/// whichever worker runs it, where glibc's arenas spent about a tenth of a token fetch's CPU
/// (BENCHMARKS.md; the bench hosts the service with the same allocator).
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

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

/// `--config` on a subcommand that reads no configuration: still accepted (`--config` is global,
/// so `mcp-connect --config x demo` and an exported `MCP_CONNECT_CONFIG` must not fail), but not
/// offered in its help. An argument of the subcommand's own with the global's id keeps the
/// global one from being copied in.
#[derive(clap::Args)]
struct IgnoredConfig {
    #[arg(
        long = "config",
        id = "config",
        hide = true,
        env = "MCP_CONNECT_CONFIG"
    )]
    config: Option<PathBuf>,
}

#[derive(Subcommand)]
enum Command {
    /// Run the service (the default).
    Serve,
    /// Create the database if needed and apply migrations, then exit.
    Migrate {
        /// Also apply the post-deploy migrations (contract steps the previous release cannot
        /// run on): only once every replica runs this release.
        #[arg(long)]
        post_deploy: bool,
    },
    /// Validate the configuration and report every problem, key by key.
    CheckConfig {
        /// Read every `*_file` secret from this folder, by the file name the configuration
        /// gives (`/run/secrets/mcp-connect/database_url` is read as `DIR/database_url`): checks
        /// a deployment's configuration on another machine without rewriting it.
        #[arg(long, value_name = "DIR")]
        secrets_dir: Option<PathBuf>,
    },
    /// Try it on this machine: the real service on 127.0.0.1 with SQLite in a data folder, plus
    /// a development identity issuer and sandbox provider (development only; never use for real).
    /// It writes and runs with its own configuration in the data folder, so `MCP_CONNECT_*`
    /// variables do not apply. Its admin pages take the user "admin".
    #[cfg(feature = "demo")]
    Demo {
        /// The port to listen on (0 picks a free one).
        #[arg(long, default_value_t = 8080)]
        port: u16,
        /// The address to listen on; must be loopback.
        #[arg(long, default_value = "127.0.0.1", value_parser = mcp_connect::demo::parse_host)]
        host: std::net::IpAddr,
        /// Where the database, keys and generated configuration live (created if missing).
        #[arg(long, default_value = "demo-data")]
        data_dir: PathBuf,
        #[command(flatten)]
        ignored: IgnoredConfig,
    },
    /// Print a new encryption key in the `id:base64` form for `encryption_keys`.
    GenKey {
        /// The key id (defaults to today's date, e.g. k20261202).
        #[arg(long)]
        id: Option<String>,
        #[command(flatten)]
        ignored: IgnoredConfig,
    },
    /// Inspect, import and revoke connected accounts.
    Connections {
        #[command(subcommand)]
        command: ConnectionsCommand,
    },
    /// Read the audit log.
    Audit {
        #[command(subcommand)]
        command: AuditCommand,
    },
    /// Encryption key maintenance.
    Keys {
        #[command(subcommand)]
        command: KeysCommand,
    },
    /// The provider catalog and the configured providers (no database needed).
    Providers {
        #[command(subcommand)]
        command: ProvidersCommand,
    },
}

#[derive(Subcommand)]
enum ProvidersCommand {
    /// The catalog's providers, and with a config the configured ones and their redirect URIs.
    List {
        #[arg(long)]
        json: bool,
    },
    /// One configured provider or catalog kind: endpoints, quirks, the redirect URI to register.
    Show {
        name: String,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
enum ConnectionsCommand {
    /// List connections (most recently changed first).
    List {
        /// Only subjects containing this text (case-insensitive).
        #[arg(long)]
        subject: Option<String>,
        #[arg(long)]
        provider: Option<String>,
        /// active, needs_reauth or revoked.
        #[arg(long, value_parser = ["active", "needs_reauth", "revoked"])]
        status: Option<String>,
        /// Only connections this organisation owns or its own app issued.
        #[arg(long)]
        organization: Option<String>,
        #[arg(long, default_value_t = 50)]
        limit: i64,
        #[arg(long)]
        json: bool,
    },
    /// Show one connection and its history.
    Show {
        id: String,
        #[arg(long)]
        json: bool,
    },
    /// Import grants from another token store (JSON Lines, one grant a line).
    ///
    /// The format is in docs/operations.md, "Importing grants". Nothing is written unless every
    /// line is valid; a grant already stored is left as it is.
    Import {
        /// The file, or `-` for standard input.
        file: PathBuf,
        /// Check every line and say what would be imported; write nothing.
        #[arg(long)]
        dry_run: bool,
        /// Grants per transaction (1 to 5000).
        #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u16).range(1..=5000))]
        batch_size: u16,
        /// The summary as one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Revoke every live connection an organisation owns (at one provider, with --provider).
    RevokeOrganization {
        organization: String,
        #[arg(long)]
        provider: Option<String>,
        /// Do not ask for confirmation.
        #[arg(long, short)]
        yes: bool,
        /// Kept in the audit log.
        #[arg(long)]
        reason: Option<String>,
    },
    /// Revoke a connection at its provider and delete its tokens.
    Revoke {
        id: String,
        /// Do not ask for confirmation.
        #[arg(long, short)]
        yes: bool,
        /// Kept in the audit log.
        #[arg(long)]
        reason: Option<String>,
    },
}

#[derive(Subcommand)]
enum AuditCommand {
    /// Print the latest events, oldest first; with --follow, keep printing new ones.
    Tail {
        #[arg(long, short = 'n', default_value_t = 20)]
        lines: i64,
        #[arg(long, short)]
        follow: bool,
        #[arg(long)]
        subject: Option<String>,
        /// An event name, or a prefix such as `admin.`.
        #[arg(long)]
        event: Option<String>,
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
enum KeysCommand {
    /// Re-encrypt every stored value under the first key of encryption_keys, while the service
    /// keeps serving. Safe to interrupt and run again.
    Rotate {
        /// Rows per transaction.
        #[arg(long, default_value_t = 500)]
        batch_size: usize,
    },
    /// Show which key seals how many stored values.
    Status,
}

fn load(path: Option<&std::path::Path>) -> Result<Config, ExitCode> {
    load_with(path, &Files::AsWritten)
}

fn load_with(path: Option<&std::path::Path>, files: &Files) -> Result<Config, ExitCode> {
    Config::load_with(path, files).map_err(|e| {
        eprintln!("mcp-connect: invalid configuration:\n{e}");
        ExitCode::from(2)
    })
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command.unwrap_or(Command::Serve) {
        Command::GenKey { id, ignored: _ } => {
            let id = id.unwrap_or_else(|| {
                let d = mcp_connect::time::today();
                format!("k{:04}{:02}{:02}", d.year(), u8::from(d.month()), d.day())
            });
            println!("{}", mcp_connect::crypto::generate_key(&id));
            ExitCode::SUCCESS
        }
        #[cfg(feature = "demo")]
        Command::Demo {
            port,
            host,
            data_dir,
            ignored,
        } => {
            if cli.config.is_some() || ignored.config.is_some() {
                eprintln!(
                    "mcp-connect demo: ignoring --config / MCP_CONNECT_CONFIG (the demo writes its own)"
                );
            }
            telemetry::init(mcp_connect::config::LogFormat::Text);
            let opts = mcp_connect::demo::DemoOptions {
                host,
                port,
                data_dir,
            };
            match mcp_connect::demo::run(opts, shutdown_signal()).await {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("mcp-connect demo: {e:#}");
                    if e.is::<mcp_connect::demo::NotLoopback>() {
                        ExitCode::from(2)
                    } else {
                        ExitCode::FAILURE
                    }
                }
            }
        }
        Command::Providers { command } => {
            let config = match cli.config.as_deref() {
                Some(path) => match load(Some(path)) {
                    Ok(c) => Some(c),
                    Err(code) => return code,
                },
                None => None,
            };
            let mut out = std::io::stdout();
            let r = match command {
                ProvidersCommand::List { json } => {
                    cli::providers_list(config.as_ref(), json, &mut out)
                }
                ProvidersCommand::Show { name, json } => {
                    cli::providers_show(config.as_ref(), &name, json, &mut out).await
                }
            };
            match r {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("mcp-connect: {e:#}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::CheckConfig { secrets_dir } => match load_with(
            cli.config.as_deref(),
            &secrets_dir.map_or(Files::AsWritten, Files::In),
        ) {
            Ok(c) => {
                println!(
                    "configuration is valid: public_url {}, database {}, {} provider(s), {} client(s), encrypting with key {}",
                    c.public_url,
                    c.database_url,
                    c.providers.len(),
                    c.clients.len(),
                    c.keys.current_id()
                );
                ExitCode::SUCCESS
            }
            Err(code) => code,
        },
        Command::Migrate { post_deploy } => {
            let c = match load(cli.config.as_deref()) {
                Ok(c) => c,
                Err(code) => return code,
            };
            telemetry::init(c.log_format);
            let r = async {
                let db = Db::connect(&c.database_url).await?;
                db.migrate(if post_deploy {
                    Migrations::PostDeploy
                } else {
                    Migrations::Deploy
                })
                .await
            }
            .await;
            match r {
                Ok(pending) if pending.is_empty() => {
                    tracing::info!(database = %c.database_url, "migrations applied");
                    ExitCode::SUCCESS
                }
                Ok(pending) => {
                    tracing::info!(
                        database = %c.database_url,
                        post_deploy_pending = pending.join(", "),
                        "migrations applied; once every replica runs this release, run `mcp-connect migrate --post-deploy`"
                    );
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    tracing::error!(error = format!("{e:#}"), "migration failed");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Connections { command } => {
            ops(cli.config.as_deref(), |o| async move {
                let mut out = std::io::stdout();
                match command {
                    ConnectionsCommand::List {
                        subject,
                        provider,
                        status,
                        organization,
                        limit,
                        json,
                    } => {
                        let f = ConnectionFilter {
                            subject,
                            provider,
                            status,
                            organization,
                        };
                        cli::connections_list(&o, f, limit, json, &mut out).await
                    }
                    ConnectionsCommand::Show { id, json } => {
                        cli::connections_show(&o, &id, json, &mut out).await
                    }
                    ConnectionsCommand::Import {
                        file,
                        dry_run,
                        batch_size,
                        json,
                    } => {
                        let opts = cli::ImportOptions {
                            dry_run,
                            batch_size: batch_size.into(),
                            json,
                        };
                        let actor = cli::cli_actor();
                        if file.as_os_str() == "-" {
                            let input = std::io::stdin().lock();
                            cli::connections_import(&o, input, "stdin", opts, &actor, &mut out)
                                .await
                        } else {
                            let input = std::fs::File::open(&file)
                                .map(std::io::BufReader::new)
                                .map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
                            let source = file.display().to_string();
                            cli::connections_import(&o, input, &source, opts, &actor, &mut out)
                                .await
                        }
                    }
                    ConnectionsCommand::RevokeOrganization {
                        organization,
                        provider,
                        yes,
                        reason,
                    } => {
                        if !yes
                            && !confirm(&format!(
                                "Revoke every connection organisation {organization:?} owns{} at the provider and delete their tokens?",
                                provider.as_deref().map(|p| format!(" at {p}")).unwrap_or_default()
                            ))
                        {
                            anyhow::bail!(
                                "not confirmed (pass --yes to skip the question); nothing changed"
                            );
                        }
                        cli::connections_revoke_organization(
                            &o,
                            &organization,
                            provider.as_deref(),
                            &cli::cli_actor(),
                            reason.as_deref(),
                            &mut out,
                        )
                        .await
                    }
                    ConnectionsCommand::Revoke { id, yes, reason } => {
                        if !yes
                            && !confirm(&format!(
                                "Revoke connection {id} at its provider and delete its tokens?"
                            ))
                        {
                            anyhow::bail!(
                                "not confirmed (pass --yes to skip the question); nothing changed"
                            );
                        }
                        cli::connections_revoke(
                            &o,
                            &id,
                            &cli::cli_actor(),
                            reason.as_deref(),
                            &mut out,
                        )
                        .await
                    }
                }
            })
            .await
        }
        Command::Audit {
            command:
                AuditCommand::Tail {
                    lines,
                    follow,
                    subject,
                    event,
                    json,
                },
        } => {
            ops(cli.config.as_deref(), |o| async move {
                let f = AuditFilter {
                    subject,
                    event,
                    ..Default::default()
                };
                let mut out = std::io::stdout();
                cli::audit_tail(&o, f, lines, follow, json, &mut out, shutdown_signal()).await
            })
            .await
        }
        Command::Keys { command } => {
            ops(cli.config.as_deref(), |o| async move {
                let mut out = std::io::stdout();
                match command {
                    KeysCommand::Rotate { batch_size } => {
                        let r =
                            cli::keys_rotate(&o, batch_size, &cli::cli_actor(), &mut out).await?;
                        if r.remaining > 0 || !r.unreadable.is_empty() {
                            anyhow::bail!("rotation incomplete");
                        }
                        Ok(())
                    }
                    KeysCommand::Status => cli::keys_status(&o, &mut out).await,
                }
            })
            .await
        }
        Command::Serve => {
            let c = match load(cli.config.as_deref()) {
                Ok(c) => c,
                Err(code) => return code,
            };
            // Dropped when this arm returns, after the server has drained: the last spans are
            // exported then.
            let _traces = match telemetry::init_serving(c.log_format, c.otlp_endpoint.as_ref()) {
                Ok(t) => t,
                Err(e) => {
                    eprintln!("mcp-connect: could not start the trace exporter: {e:#}");
                    return ExitCode::FAILURE;
                }
            };
            let public_url = c.public_url.clone();
            let db_url = c.database_url.clone();
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

/// Runs an operator command against the configured database. Logs only warnings unless
/// MCP_CONNECT_LOG says otherwise, so stdout stays the command's output.
async fn ops<F, Fut>(config: Option<&std::path::Path>, f: F) -> ExitCode
where
    F: FnOnce(Ops) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    let c = match load(config) {
        Ok(c) => c,
        Err(code) => return code,
    };
    telemetry::init_with_default(c.log_format, "warn");
    let o = match Ops::open(c).await {
        Ok(o) => o,
        Err(e) => {
            eprintln!("mcp-connect: {e:#}");
            return ExitCode::FAILURE;
        }
    };
    match f(o).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mcp-connect: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Asks on the terminal; without one, the answer is no.
fn confirm(question: &str) -> bool {
    use std::io::{BufRead, IsTerminal, Write};
    if !std::io::stdin().is_terminal() {
        return false;
    }
    eprint!("{question} [y/N] ");
    let _ = std::io::stderr().flush();
    let mut line = String::new();
    if std::io::stdin().lock().read_line(&mut line).is_err() {
        return false;
    }
    matches!(line.trim(), "y" | "Y" | "yes")
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
