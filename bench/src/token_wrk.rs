//! `token-wrk`: issue 22's figure measured as the issue measured it, from outside: `wrk` (its own
//! process, in C) drives `POST /v1/tokens` for one connected user at 64 connections, and the
//! same `wrk` the fixed-JSON axum handler (same runtime, same request) right before, alternating,
//! `--rounds` times per engine. The in-process load generator of `token-fetch` is idle here: the
//! two cores are shared by the server's runtime and wrk only. With `--binary` the token fetch is
//! served by the release binary as its own process, as a deployment runs it. Each run also
//! reads what the server, wrk and the whole machine spent in CPU per request (`cpu`), and the
//! budget the token fetch's server has for the ratio to reach 0.6.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, bail};

use crate::cpu::{self, Cpu, Meter};
use crate::setup::{
    self, BinaryProcess, ConfigOpts, Engine, InProcessApp, PeerUrls, ServerRuntime,
};

#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Databases to run on.
    #[arg(long, value_delimiter = ',', default_values = ["postgres", "sqlite"])]
    pub engines: Vec<Engine>,
    /// wrk's connections.
    #[arg(long, default_value_t = 64)]
    pub conns: usize,
    /// wrk's threads.
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
    /// Seconds measured per cell. Short cells, many of them: on shared cores every party's CPU
    /// per request drifts between levels over seconds, and a ratio is fair only when both of
    /// its halves saw the same level; alternating every 2 s puts them close together in time.
    #[arg(long, default_value_t = 2)]
    pub duration: u64,
    /// Alternations of fixed JSON and token fetch per engine (the median ratio is reported).
    #[arg(long, default_value_t = 15)]
    pub rounds: usize,
    /// Serve the token fetch from the release binary as its own process (`mcp-connect serve`,
    /// `$MCP_CONNECT_BIN` or `target/release/mcp-connect`) instead of in this process.
    #[arg(long)]
    pub binary: bool,
}

/// The app under test: in this process (on the server runtime) or the release binary.
enum Served {
    InProcess(InProcessApp),
    Binary(BinaryProcess),
}

impl Served {
    /// Whose CPU serves the token fetch.
    fn meter(&self) -> Meter {
        match self {
            Self::InProcess(_) => SERVER,
            Self::Binary(b) => Meter::Process(b.pid().unwrap_or(0)),
        }
    }

    fn url(&self) -> &str {
        match self {
            Self::InProcess(a) => &a.url,
            Self::Binary(b) => &b.url,
        }
    }

    async fn stop(self) {
        match self {
            Self::InProcess(a) => a.stop().await,
            Self::Binary(b) => b.stop().await,
        }
    }
}

/// The in-process server's threads (the fixed-JSON handler's, and the app's when in process).
const SERVER: Meter = Meter::Threads(&["server", "sqlx-sqlite"]);

/// One wrk run, with the CPU the server (`meter`), wrk and the whole machine spent in it.
async fn measured(
    script: &Path,
    url: &str,
    args: &Args,
    meter: Meter,
) -> anyhow::Result<(WrkResult, [Cpu; 3])> {
    let meters = [meter, Meter::Children, Meter::Machine];
    let before = cpu::read_all(&meters);
    let r = wrk(script, url, args.threads, args.conns, args.duration).await?;
    let spent = cpu::spent(&meters, &before);
    Ok((r, [spent[0], spent[1], spent[2]]))
}

/// µs of CPU per request of one of `spent`, user + kernel.
fn us(r: &WrkResult, c: &Cpu) -> f64 {
    let (user, kernel) = c.per_request_us(r.requests);
    user + kernel
}

/// `server (user, kernel) + wrk / machine` µs per request, each user + kernel: the server's
/// split shows how much of its cost is the kernel's (the answer's write, the wake-ups).
fn costs(r: &WrkResult, spent: &[Cpu; 3]) -> String {
    let (user, kernel) = spent[0].per_request_us(r.requests);
    format!(
        "{:.1} ({user:.1}, {kernel:.1}) + {:.1} / {:.1}",
        us(r, &spent[0]),
        us(r, &spent[1]),
        us(r, &spent[2])
    )
}

/// What the token fetch's server may spend per request for the token fetch to reach 0.6 of
/// the fixed handler's throughput: the machine's CPU time per request at that rate less what
/// wrk spent per token request (at a higher rate it batches more, so this is if anything
/// generous).
fn budget(fixed: &WrkResult, token: &WrkResult, token_cpu: &[Cpu; 3]) -> f64 {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    cores * 1e6 / (0.6 * fixed.rps()) - us(token, &token_cpu[1])
}

/// The service's token cache lookups so far (`mcp_connect_token_cache_lookups_total`, from its
/// `/metrics`): hits, and all lookups.
async fn cache_lookups(api: &reqwest::Client, base: &str) -> anyhow::Result<(u64, u64)> {
    let body = api
        .get(format!("{base}/metrics"))
        .send()
        .await?
        .text()
        .await?;
    let count = |result: &str| {
        let series = format!("mcp_connect_token_cache_lookups_total{{result=\"{result}\"}} ");
        body.lines()
            .find_map(|l| l.strip_prefix(series.as_str()))
            .and_then(|v| v.trim().parse::<u64>().ok())
    };
    let (hit, miss, bypass) = (count("hit"), count("miss"), count("bypass"));
    match (hit, miss, bypass) {
        (Some(h), Some(m), Some(b)) => Ok((h, h + m + b)),
        _ => bail!("no token cache lookups on {base}/metrics"),
    }
}

/// What one wrk run reports (its Lua `done` hook prints these, latencies in µs).
#[derive(Debug, Clone, Copy)]
struct WrkResult {
    requests: u64,
    duration_us: u64,
    non_2xx: u64,
    socket_errors: u64,
    p50_us: f64,
    p90_us: f64,
    p99_us: f64,
    p999_us: f64,
}

impl WrkResult {
    fn rps(&self) -> f64 {
        self.requests as f64 / (self.duration_us as f64 / 1e6)
    }
}

const SCRIPT: &str = r#"
wrk.method = "POST"
wrk.body = '{"subject":"user0","provider":"acme"}'
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer API_KEY"
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("WRK %d %d %d %d %.1f %.1f %.1f %.1f\n",
    summary.requests, summary.duration, e.status, e.connect + e.read + e.write + e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99),
    latency:percentile(99.9)))
end
"#;

async fn wrk(
    script: &Path,
    url: &str,
    threads: usize,
    conns: usize,
    secs: u64,
) -> anyhow::Result<WrkResult> {
    let out = tokio::process::Command::new("wrk")
        .arg(format!("-t{threads}"))
        .arg(format!("-c{conns}"))
        .arg(format!("-d{secs}s"))
        .arg("-s")
        .arg(script)
        .arg(url)
        .output()
        .await
        .context("running wrk (apt-get install wrk)")?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let Some(line) = stdout.lines().find(|l| l.starts_with("WRK ")) else {
        bail!(
            "wrk printed no summary: {stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let f: Vec<&str> = line.split_whitespace().skip(1).collect();
    let n = |i: usize| -> anyhow::Result<f64> {
        f.get(i)
            .context("short wrk summary")?
            .parse::<f64>()
            .context("wrk summary")
    };
    Ok(WrkResult {
        requests: n(0)? as u64,
        duration_us: n(1)? as u64,
        non_2xx: n(2)? as u64,
        socket_errors: n(3)? as u64,
        p50_us: n(4)?,
        p90_us: n(5)?,
        p99_us: n(6)?,
        p999_us: n(7)?,
    })
}

pub async fn run(args: Args, server: &ServerRuntime) -> anyhow::Result<()> {
    let peers = PeerUrls::unreachable();
    let dir = std::env::temp_dir().join("mcp-connect-bench");
    std::fs::create_dir_all(&dir)?;
    let script = dir.join("token-wrk.lua");
    std::fs::write(&script, SCRIPT.replace("API_KEY", setup::API_KEY))?;
    let fixed = setup::start_fixed_json(server).await?;
    let fixed_url = format!("http://{fixed}/v1/tokens");
    println!(
        "wrk -t{} -c{} -d{}s, one connected user (`user0` of 1,000 stored), fixed JSON then \
         token fetch, {} rounds per engine; latencies as wrk records them (closed loop). The \
         token fetch is served by {}.\n",
        args.threads,
        args.conns,
        args.duration,
        args.rounds,
        if args.binary {
            "the release binary as its own process"
        } else {
            "the app in this process (on the server runtime)"
        }
    );
    println!(
        "| engine | round | fixed JSON req/s | token req/s | **token ÷ fixed** | fixed p50 / p99 ms | \
         token p50 / p90 / **p99** / p99.9 ms | non-2xx, socket errors | token fetches from the cache | CPU µs/request: fixed server (user, kernel) + wrk / machine | token server (user, kernel) + wrk / machine | token server's budget at 0.6× | load |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|");
    let api = setup::api_client()?;
    for &engine in &args.engines {
        let name = match engine {
            Engine::Postgres => "mcpc_bench_pg_1000",
            Engine::Sqlite => "mcpc_bench_sqlite_1000",
        };
        let (db, _) =
            setup::prepare_connections(engine, name, 1_000, &peers.identity, false).await?;
        let opts = ConfigOpts::default();
        let app = if args.binary {
            Served::Binary(BinaryProcess::start(&db, &peers, &opts).await?)
        } else {
            Served::InProcess(InProcessApp::start(server, &db, &peers, &opts, None).await?)
        };
        let token_url = format!("{}/v1/tokens", app.url());
        // Warm the pool, the caches and the connections' first pages.
        wrk(&script, &token_url, args.threads, args.conns, 2).await?;
        wrk(&script, &fixed_url, args.threads, args.conns, 2).await?;
        let mut ratios = Vec::new();
        let mut p99s = Vec::new();
        for round in 1..=args.rounds {
            let load = setup::load_average();
            let (f, f_cpu) = measured(&script, &fixed_url, &args, SERVER).await?;
            tokio::time::sleep(Duration::from_millis(500)).await;
            let (hits0, lookups0) = cache_lookups(&api, app.url()).await?;
            let (t, t_cpu) = measured(&script, &token_url, &args, app.meter()).await?;
            let (hits1, lookups1) = cache_lookups(&api, app.url()).await?;
            let from_cache = 100.0 * (hits1 - hits0) as f64 / (lookups1 - lookups0).max(1) as f64;
            tokio::time::sleep(Duration::from_millis(500)).await;
            let ratio = t.rps() / f.rps();
            ratios.push(ratio);
            p99s.push(t.p99_us / 1e3);
            eprintln!(
                "{} round {round}: fixed {:.0}/s, token {:.0}/s ({:.0}%), token p99 {:.2} ms",
                engine.label(),
                f.rps(),
                t.rps(),
                ratio * 100.0,
                t.p99_us / 1e3
            );
            println!(
                "| {} | {round} | {:.0} | {:.0} | **{:.0}%** | {:.2} / {:.2} | {:.2} / {:.2} / **{:.2}** / {:.2} | {}, {} | {from_cache:.1}% | {} | {} | {:.1} | {load} |",
                engine.label(),
                f.rps(),
                t.rps(),
                ratio * 100.0,
                f.p50_us / 1e3,
                f.p99_us / 1e3,
                t.p50_us / 1e3,
                t.p90_us / 1e3,
                t.p99_us / 1e3,
                t.p999_us / 1e3,
                t.non_2xx + f.non_2xx,
                t.socket_errors + f.socket_errors,
                costs(&f, &f_cpu),
                costs(&t, &t_cpu),
                budget(&f, &t, &t_cpu),
            );
        }
        app.stop().await;
        let median = |v: &mut Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        println!(
            "| {} | median | | | **{:.0}%** | | **{:.2}** ms p99 | | | | | | |",
            engine.label(),
            median(&mut ratios) * 100.0,
            median(&mut p99s)
        );
    }
    Ok(())
}
