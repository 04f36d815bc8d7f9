//! Scenario 1: `POST /v1/tokens` for a valid token (no refresh) against the app served in this
//! process, next to two baselines measured in the same run: an axum handler that returns a fixed
//! JSON body (same runtime, same load generator) and `pgbench -S` (one indexed read per
//! transaction, same client count).

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use bytes::Bytes;
use hyper::header::{AUTHORIZATION, CONTENT_TYPE, HeaderValue};

use crate::load::{self, LoadResult, Target};
use crate::setup::{self, ConfigOpts, Engine, InProcessApp, PeerUrls, ServerRuntime};

#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Databases to run on.
    #[arg(long, value_delimiter = ',', default_values = ["postgres", "sqlite"])]
    pub engines: Vec<Engine>,
    /// Stored connections.
    #[arg(long, value_delimiter = ',', default_values_t = vec![1_000u64, 1_000_000])]
    pub sizes: Vec<u64>,
    /// Concurrent connections of the load generator.
    #[arg(long, value_delimiter = ',', default_values_t = vec![1usize, 16, 64])]
    pub conns: Vec<usize>,
    /// Seconds of warm-up before each measurement.
    #[arg(long, default_value_t = 1.0)]
    pub warmup: f64,
    /// Seconds measured per cell.
    #[arg(long, default_value_t = 5.0)]
    pub duration: f64,
    /// Drop and reload the databases even if they already hold the right rows.
    #[arg(long)]
    pub fresh: bool,
    /// Skip the pgbench baseline.
    #[arg(long)]
    pub no_pgbench: bool,
    /// Also run the largest concurrency at this fraction of the fixed-JSON baseline's
    /// throughput (fixed rate, latency from intended send time); 0 turns it off.
    #[arg(long, default_value_t = 0.5)]
    pub rate_fraction: f64,
    /// And at this fraction of token fetch's own closed-loop throughput (its p99 at a load it
    /// sustains); 0 turns it off.
    #[arg(long, default_value_t = 0.5)]
    pub sustain_fraction: f64,
    /// Also measure the app's `GET /healthz` (routing and middleware only) and `GET /readyz`
    /// (plus one pooled `SELECT 1`), to see where a token fetch's time goes.
    #[arg(long)]
    pub breakdown: bool,
    /// `refresh_ahead_seconds` for the app (the default config has it on; rows are not due).
    #[arg(long)]
    pub refresh_ahead_seconds: Option<u64>,
    /// Draw users from a hot set with Zipf's law of this exponent (rank k picked with
    /// probability ∝ 1/k^s) instead of uniformly; 0 = uniform.
    #[arg(long, default_value_t = 0.0)]
    pub zipf: f64,
    /// Users the requests are drawn from: the first N stored rows (default: all of them).
    /// `--hot-set 1` is the single-user case.
    #[arg(long)]
    pub hot_set: Option<u64>,
    /// Name the account in every request (`"account": "user<N>"`, after setting each stored
    /// row's account id to its subject): the cost of choosing among a user's accounts.
    #[arg(long)]
    pub account: bool,
}

/// Which of `n` users request `i` asks for: uniform (`s` = 0) or Zipf with exponent `s`.
pub struct Users {
    /// Zipf: cumulative probabilities of ranks 1..=n; empty when uniform.
    cdf: Vec<f64>,
    n: u64,
}

impl Users {
    pub fn new(n: u64, s: f64) -> Self {
        let n = n.max(1);
        let mut cdf = Vec::new();
        if s > 0.0 {
            let mut acc = 0.0;
            cdf = (1..=n)
                .map(|k| {
                    acc += 1.0 / (k as f64).powf(s);
                    acc
                })
                .collect();
            for x in &mut cdf {
                *x /= acc;
            }
        }
        Self { cdf, n }
    }

    pub fn pick(&self, i: u64) -> u64 {
        let h = i.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        if self.cdf.is_empty() {
            return (h >> 11) % self.n;
        }
        // A uniform draw in [0, 1) from the hash, then the rank whose cumulative share holds it.
        let h = (h ^ (h >> 29)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        let u = (h >> 11) as f64 / (1u64 << 53) as f64;
        self.cdf
            .partition_point(|&c| c <= u)
            .min(self.cdf.len() - 1) as u64
    }
}

pub fn target(addr: std::net::SocketAddr, n: u64) -> Target {
    target_over(addr, Arc::new(Users::new(n, 0.0)), false)
}

/// Like `target`, users drawn by `users`; with `account`, each request names the user's
/// account (`user<N>`).
pub fn target_over(addr: std::net::SocketAddr, users: Arc<Users>, account: bool) -> Target {
    Target {
        addr,
        method: hyper::Method::POST,
        path: "/v1/tokens".into(),
        headers: vec![
            (
                AUTHORIZATION,
                HeaderValue::from_str(&format!("Bearer {}", setup::API_KEY))
                    .unwrap_or(HeaderValue::from_static("")),
            ),
            (CONTENT_TYPE, HeaderValue::from_static("application/json")),
        ],
        // A different user each request, spread over the hot set.
        body: Box::new(move |i| {
            let u = users.pick(i);
            if account {
                Bytes::from(format!(
                    r#"{{"subject":"user{u}","provider":"acme","account":"user{u}"}}"#
                ))
            } else {
                Bytes::from(format!(r#"{{"subject":"user{u}","provider":"acme"}}"#))
            }
        }),
        ok_status: 200,
    }
}

/// `GET path` with the API key.
pub fn get_target(addr: std::net::SocketAddr, path: &str) -> Target {
    Target {
        addr,
        method: hyper::Method::GET,
        path: path.into(),
        headers: vec![(
            AUTHORIZATION,
            HeaderValue::from_str(&format!("Bearer {}", setup::API_KEY))
                .unwrap_or(HeaderValue::from_static("")),
        )],
        body: Box::new(|_| Bytes::new()),
        ok_status: 200,
    }
}

/// A fixed-rate run.
struct RateRow {
    engine: Engine,
    size: u64,
    conns: usize,
    basis: String,
    r: LoadResult,
    load: String,
}

/// One measured cell of the tables.
struct Cell {
    engine: Engine,
    size: u64,
    conns: usize,
    /// Which pool the token reads went to (`main pool` on SQLite).
    hot: &'static str,
    fixed: LoadResult,
    token: LoadResult,
    pgbench: Option<PgBench>,
    breakdown: Option<(LoadResult, LoadResult)>,
    load: String,
}

#[derive(Clone, Copy)]
pub struct PgBench {
    pub tps: f64,
    pub p50: f64,
    pub p99: f64,
}

const PGBENCH_DB: &str = "mcpc_bench_pgbench";
/// Scale 10 = 1,000,000 rows in pgbench_accounts.
const PGBENCH_SCALE: u32 = 10;

async fn prepare_pgbench() -> anyhow::Result<()> {
    let ok = tokio::process::Command::new("psql")
        .args(["-h", "127.0.0.1", "-U", "postgres", "-Atc"])
        .arg("SELECT count(*) FROM pgbench_accounts")
        .arg(PGBENCH_DB)
        .output()
        .await?;
    if ok.status.success()
        && String::from_utf8_lossy(&ok.stdout).trim()
            == (PGBENCH_SCALE as u64 * 100_000).to_string()
    {
        return Ok(());
    }
    let _ = tokio::process::Command::new("createdb")
        .args(["-h", "127.0.0.1", "-U", "postgres", PGBENCH_DB])
        .output()
        .await?;
    let out = tokio::process::Command::new("pgbench")
        .args(["-h", "127.0.0.1", "-U", "postgres", "-i", "-q", "-s"])
        .arg(PGBENCH_SCALE.to_string())
        .arg(PGBENCH_DB)
        .output()
        .await?;
    if !out.status.success() {
        bail!(
            "pgbench -i failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

/// `pgbench -S -M prepared` with per-transaction logs, so the percentiles come from every
/// transaction of the measurement window (the warm-up is cut off by timestamp).
pub async fn run_pgbench(clients: usize, warmup: f64, measure: f64) -> anyhow::Result<PgBench> {
    let dir =
        std::env::temp_dir().join(format!("mcp-connect-bench-pgbench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let threads = clients.min(
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1),
    );
    let total = (warmup + measure).ceil() as u64;
    let start = time::OffsetDateTime::now_utc().unix_timestamp_nanos() as f64 / 1e9;
    let out = tokio::process::Command::new("pgbench")
        .args([
            "-h",
            "127.0.0.1",
            "-U",
            "postgres",
            "-n",
            "-S",
            "-M",
            "prepared",
            "-l",
        ])
        .arg(format!("--log-prefix={}", dir.join("pgb").display()))
        .arg(format!("-c{clients}"))
        .arg(format!("-j{threads}"))
        .arg(format!("-T{total}"))
        .arg(PGBENCH_DB)
        .current_dir(&dir)
        .output()
        .await
        .context("running pgbench")?;
    if !out.status.success() {
        bail!("pgbench failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    let from = start + warmup;
    let to = from + measure;
    let mut lat = Vec::new();
    for entry in std::fs::read_dir(&dir)? {
        let text = std::fs::read_to_string(entry?.path())?;
        for line in text.lines() {
            // client_id transaction_no time script_no time_epoch time_us
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 6 {
                continue;
            }
            let (Ok(us), Ok(epoch), Ok(epoch_us)) = (
                f[2].parse::<f64>(),
                f[4].parse::<f64>(),
                f[5].parse::<f64>(),
            ) else {
                continue;
            };
            let done = epoch + epoch_us / 1e6;
            if done >= from && done < to {
                lat.push(us / 1000.0);
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    lat.sort_by(f64::total_cmp);
    // The run may end a little before `to` (pgbench -T counts from its own start).
    Ok(PgBench {
        tps: lat.len() as f64 / measure,
        p50: setup::pct(&lat, 0.50),
        p99: setup::pct(&lat, 0.99),
    })
}

fn db_name(engine: Engine, size: u64) -> String {
    let e = match engine {
        Engine::Postgres => "pg",
        Engine::Sqlite => "sqlite",
    };
    format!("mcpc_bench_{e}_{size}")
}

pub async fn run(args: Args, server: &ServerRuntime) -> anyhow::Result<()> {
    let warmup = Duration::from_secs_f64(args.warmup);
    let measure = Duration::from_secs_f64(args.duration);
    let peers = PeerUrls::unreachable();
    if !args.no_pgbench {
        prepare_pgbench().await?;
    }
    let fixed_addr = setup::start_fixed_json(server).await?;
    let mut cells = Vec::new();
    let mut rate_rows = Vec::new();
    let mut loads = Vec::new();
    for &engine in &args.engines {
        for &size in &args.sizes {
            let name = db_name(engine, size);
            let (url, took) =
                setup::prepare_connections(engine, &name, size, &peers.identity, args.fresh)
                    .await?;
            if let Some(t) = took {
                loads.push(format!(
                    "{} {size} rows loaded in {:.1} s",
                    engine.label(),
                    t.as_secs_f64()
                ));
            }
            let app = InProcessApp::start(
                server,
                &url,
                &peers,
                &ConfigOpts {
                    refresh_ahead_seconds: args.refresh_ahead_seconds,
                    ..ConfigOpts::default()
                },
                None,
            )
            .await?;
            // Every query goes through the one pool (`src/db/pool.rs`); the column stays so
            // tables compare with older rounds.
            let label = "main pool";
            let users = Arc::new(Users::new(
                args.hot_set.unwrap_or(size).min(size),
                args.zipf,
            ));
            if args.account {
                // The app has migrated the database by now (migration 0022's `account_id`).
                let db =
                    mcp_connect::db::Db::connect(&url.parse().map_err(anyhow::Error::msg)?).await?;
                sqlx::query("UPDATE connections SET account_id = subject WHERE account_id = ''")
                    .execute(&db.pool)
                    .await?;
                db.close().await;
            }
            let token_target = Arc::new(target_over(app.addr, users.clone(), args.account));
            let fixed_target = Arc::new(target_over(fixed_addr, users, args.account));
            // Warm the pool and the caches once.
            let _ = load::closed_loop(token_target.clone(), 16, warmup, warmup).await;
            for &c in &args.conns {
                let load = setup::load_average();
                let fixed = load::closed_loop(fixed_target.clone(), c, warmup, measure).await;
                eprintln!("{} {size} c={c} [{label}]: token fetch...", engine.label());
                let token = load::closed_loop(token_target.clone(), c, warmup, measure).await;
                eprintln!(
                    "{} {size} c={c} [{label}]: fixed {:.0}/s, token {:.0}/s p99 {:.2} ms",
                    engine.label(),
                    fixed.throughput(),
                    token.throughput(),
                    token.ms(0.99),
                );
                let breakdown = if args.breakdown {
                    let h = Arc::new(get_target(app.addr, "/healthz"));
                    let r = Arc::new(get_target(app.addr, "/readyz"));
                    Some((
                        load::closed_loop(h, c, warmup, measure).await,
                        load::closed_loop(r, c, warmup, measure).await,
                    ))
                } else {
                    None
                };
                let pgbench = if args.no_pgbench {
                    None
                } else {
                    Some(run_pgbench(c, args.warmup, args.duration).await?)
                };
                if let Some(p) = &pgbench {
                    eprintln!("{} {size} c={c}: pgbench {:.0}/s", engine.label(), p.tps);
                }
                cells.push(Cell {
                    engine,
                    size,
                    conns: c,
                    hot: label,
                    fixed: fixed.clone(),
                    token,
                    pgbench,
                    breakdown,
                    load: load.clone(),
                });
            }
            let c = args.conns.iter().copied().max().unwrap_or(64);
            if let Some(base) = cells
                .iter()
                .rev()
                .find(|x| x.engine == engine && x.size == size && x.conns == c)
            {
                let rates = [
                    ("× fixed JSON", args.rate_fraction, base.fixed.throughput()),
                    (
                        "× token fetch",
                        args.sustain_fraction,
                        base.token.throughput(),
                    ),
                ];
                for (of, fraction, base_rate) in rates {
                    if fraction <= 0.0 {
                        continue;
                    }
                    let rate = base_rate * fraction;
                    let load = setup::load_average();
                    let r = load::fixed_rate(token_target.clone(), c, rate, warmup, measure).await;
                    eprintln!(
                        "{} {size} c={c} fixed rate {rate:.0}/s: p99 {:.2} ms",
                        engine.label(),
                        r.ms(0.99)
                    );
                    rate_rows.push(RateRow {
                        engine,
                        size,
                        conns: c,
                        basis: format!("{fraction} {of}"),
                        r,
                        load,
                    });
                }
            }
            app.stop().await;
        }
    }

    println!("### Token fetch: throughput, and ratios to the baselines measured alongside\n");
    let drawn = match (args.hot_set, args.zipf > 0.0) {
        (Some(1), _) => "always the same user (single-user case)".to_owned(),
        (h, zipf) => format!(
            "users drawn {} over {}",
            if zipf {
                format!("by Zipf's law (s = {})", args.zipf)
            } else {
                "uniformly".to_owned()
            },
            h.map(|h| format!("the first {} stored rows", thousands(h)))
                .unwrap_or_else(|| "all stored rows".to_owned())
        ),
    };
    println!(
        "Closed loop, {:.0} s warm-up + {:.0} s measured per cell; {drawn}.\n",
        args.warmup, args.duration
    );
    println!(
        "| database | stored | conns | token reads on | token fetch req/s | fixed JSON req/s | **÷ fixed JSON** | pgbench -S tps | **÷ pgbench** | errors | load avg |"
    );
    println!("|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---|");
    for c in &cells {
        let (pgb, pgr) = match &c.pgbench {
            Some(p) => (
                format!("{:.0}", p.tps),
                format!("**{:.0}%**", 100.0 * c.token.throughput() / p.tps),
            ),
            None => ("–".into(), "–".into()),
        };
        println!(
            "| {} | {} | {} | {} | {:.0} | {:.0} | **{:.0}%** | {pgb} | {pgr} | {} | {} |",
            c.engine.label(),
            thousands(c.size),
            c.conns,
            c.hot,
            c.token.throughput(),
            c.fixed.throughput(),
            100.0 * c.token.throughput() / c.fixed.throughput(),
            c.token.errors,
            c.load
        );
    }
    println!("\n### Token fetch: latency (ms; closed loop)\n");
    println!(
        "\"p99 corr.\" is the wrk-style coordinated-omission correction of the closed-loop histogram (see bench/README.md).\n"
    );
    println!(
        "| database | stored | conns | token reads on | token p50 | p90 | p99 | p99 corr. | max | fixed JSON p50 | p99 | pgbench p50 | p99 |"
    );
    println!("|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for c in &cells {
        let (pg50, pg99) = match &c.pgbench {
            Some(p) => (format!("{:.3}", p.p50), format!("{:.3}", p.p99)),
            None => ("–".into(), "–".into()),
        };
        println!(
            "| {} | {} | {} | {} | {:.3} | {:.3} | **{:.3}** | {:.3} | {:.2} | {:.3} | {:.3} | {pg50} | {pg99} |",
            c.engine.label(),
            thousands(c.size),
            c.conns,
            c.hot,
            c.token.ms(0.50),
            c.token.ms(0.90),
            c.token.ms(0.99),
            c.token.corrected_p99_ms(),
            c.token.max_ms(),
            c.fixed.ms(0.50),
            c.fixed.ms(0.99),
        );
    }
    if cells.iter().any(|c| c.breakdown.is_some()) {
        println!("\n### Where a token fetch's time goes (closed loop, req/s and p50 ms)\n");
        println!(
            "| database | stored | conns | fixed JSON | app `GET /healthz` (middleware) | app `GET /readyz` (+ pooled `SELECT 1`) | token fetch |"
        );
        println!("|---|---:|---:|---:|---:|---:|---:|");
        for c in &cells {
            if let Some((h, r)) = &c.breakdown {
                let f = |x: &LoadResult| format!("{:.0} / {:.3}", x.throughput(), x.ms(0.5));
                println!(
                    "| {} | {} | {} | {} | {} | {} | {} |",
                    c.engine.label(),
                    thousands(c.size),
                    c.conns,
                    f(&c.fixed),
                    f(h),
                    f(r),
                    f(&c.token)
                );
            }
        }
    }
    if !rate_rows.is_empty() {
        println!(
            "\n### Token fetch at a fixed rate (latency from the intended send time, no coordinated omission)\n"
        );
        println!(
            "The rate is a fraction of a closed-loop throughput measured just before in the same block: of the fixed-JSON baseline's (the issue's throughput target: at 0.5 the service must keep up) or of token fetch's own (a load it sustains).\n"
        );
        println!(
            "| database | stored | conns | rate basis | rate req/s | p50 | p90 | p99 | max | errors | load avg |"
        );
        println!("|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---|");
        for x in &rate_rows {
            println!(
                "| {} | {} | {} | {} | {:.0} | {:.3} | {:.3} | **{:.3}** | {:.2} | {} | {} |",
                x.engine.label(),
                thousands(x.size),
                x.conns,
                x.basis,
                x.r.rate.unwrap_or(0.0),
                x.r.ms(0.50),
                x.r.ms(0.90),
                x.r.ms(0.99),
                x.r.max_ms(),
                x.r.errors,
                x.load,
            );
        }
    }
    if !loads.is_empty() {
        println!("\nData load: {}.", loads.join("; "));
    }
    Ok(())
}

pub fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    out
}
