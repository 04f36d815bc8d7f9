//! `mcp-connect-bench <scenario>`: the benchmarks of issue 6. Every scenario prints Markdown
//! tables (stdout) headed by the command and the machine's load; progress goes to stderr.

mod connect_flow;
mod cpu;
mod exchange;
mod footprint;
mod load;
mod long_poll;
mod proxy;
mod refresh_storm;
mod revoke;
mod setup;
mod token_fetch;
mod token_wrk;

use clap::{Parser, Subcommand};

/// The binary's allocator (`src/main.rs`), so the service runs here as it ships.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "mcp-connect-bench",
    about = "Benchmarks for mcp-connect (see bench/README.md)"
)]
struct Cli {
    /// Worker threads of the load generator's runtime (the server side gets one per core, like
    /// the binary's `#[tokio::main]`).
    #[arg(long, global = true, default_value_t = 2)]
    client_threads: usize,
    /// Pin the load generator's runtime to CPU 0 and the server's to CPU 1, one worker each,
    /// so neither takes the other's scheduler slices (needs two CPUs; overrides
    /// `--client-threads`).
    #[arg(long, global = true)]
    pin: bool,
    #[command(subcommand)]
    scenario: Scenario,
}

#[derive(Subcommand)]
enum Scenario {
    /// POST /v1/tokens (valid token) next to fixed-JSON and pgbench -S baselines.
    TokenFetch(token_fetch::Args),
    /// Issue 22's ratio measured from outside: wrk against the fixed-JSON handler and the
    /// token fetch for one user, alternating (needs `wrk` on PATH).
    TokenWrk(token_wrk::Args),
    /// RFC 8693 token exchange on a cache hit next to POST /v1/tokens, same run, same tokens.
    Exchange(exchange::Args),
    /// The proxy next to haproxy (64 connections), its added latency, memory streaming 1 GiB.
    Proxy(proxy::Args),
    /// Server time and database round trips of the browser connect flow.
    ConnectFlow(connect_flow::Args),
    /// Concurrent fetches of one expiring token over two processes: upstream refreshes.
    RefreshStorm(refresh_storm::Args),
    /// Concurrent long polls held by the binary: memory, CPU, wake-up delay.
    LongPoll(long_poll::Args),
    /// Revoke on one replica, fetch on another: never served after the DELETE returned, and
    /// how soon the other replica refuses (1,000 trials).
    Revoke(revoke::Args),
    /// Binary size, start-up time, idle RSS, RSS under load.
    Footprint(footprint::Args),
    /// (internal) The long-poll floor: an axum server that holds every request.
    #[command(hide = true)]
    HoldServer {
        #[arg(long)]
        port: u16,
    },
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    if let Scenario::HoldServer { port } = cli.scenario {
        // Like the binary: a default multi-thread runtime.
        return tokio::runtime::Runtime::new()?.block_on(long_poll::hold_server(port));
    }
    let command: Vec<String> = std::env::args().skip(1).collect();
    println!(
        "Command: `cargo run --release --manifest-path bench/Cargo.toml -- {}`  ",
        command.join(" ")
    );
    println!("Machine: {}\n", setup::machine());
    let pin = cli.pin.then_some(setup::Pin {
        client: 0,
        server: 1,
    });
    let mut client = tokio::runtime::Builder::new_multi_thread();
    client
        .worker_threads(if pin.is_some() { 1 } else { cli.client_threads })
        .thread_name("loadgen")
        .enable_all();
    if let Some(pin) = pin {
        client.on_thread_start(move || setup::pin_this_thread(pin.client));
        // The main thread drives `block_on`: it is the load generator's too.
        setup::pin_this_thread(pin.client);
    }
    let client = client.build()?;
    match cli.scenario {
        Scenario::TokenFetch(args) => {
            // As the binary does: the request spans exist, nothing is logged per request.
            mcp_connect::server::telemetry::init(mcp_connect::config::LogFormat::Text);
            let server = setup::ServerRuntime::new(pin)?;
            client.block_on(token_fetch::run(args, &server))?;
        }
        Scenario::TokenWrk(args) => {
            mcp_connect::server::telemetry::init(mcp_connect::config::LogFormat::Text);
            let server = setup::ServerRuntime::new(pin)?;
            client.block_on(token_wrk::run(args, &server))?;
        }
        Scenario::Exchange(args) => {
            mcp_connect::server::telemetry::init(mcp_connect::config::LogFormat::Text);
            let server = setup::ServerRuntime::new(pin)?;
            client.block_on(exchange::run(args, &server))?;
        }
        Scenario::Proxy(args) => {
            mcp_connect::server::telemetry::init(mcp_connect::config::LogFormat::Text);
            let server = setup::ServerRuntime::new(pin)?;
            client.block_on(proxy::run(args, &server))?;
        }
        Scenario::ConnectFlow(args) => {
            let filter = connect_flow::install_subscriber();
            let server = setup::ServerRuntime::new(pin)?;
            client.block_on(connect_flow::run(args, &server, filter))?;
        }
        Scenario::RefreshStorm(args) => {
            mcp_connect::server::telemetry::init(mcp_connect::config::LogFormat::Text);
            let server = setup::ServerRuntime::new(pin)?;
            client.block_on(refresh_storm::run(args, &server))?;
        }
        Scenario::LongPoll(args) => {
            mcp_connect::server::telemetry::init(mcp_connect::config::LogFormat::Text);
            let server = setup::ServerRuntime::new(pin)?;
            client.block_on(long_poll::run(args, &server))?;
        }
        Scenario::Revoke(args) => {
            mcp_connect::server::telemetry::init(mcp_connect::config::LogFormat::Text);
            let server = setup::ServerRuntime::new(pin)?;
            client.block_on(revoke::run(args, &server))?;
        }
        Scenario::Footprint(args) => {
            client.block_on(footprint::run(args))?;
        }
        Scenario::HoldServer { .. } => {}
    }
    println!("\nFinished: load average {}", setup::load_average());
    Ok(())
}
