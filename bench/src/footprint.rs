//! Scenario 5: footprint of the real binary: size, start-up time (process start to the first
//! `/readyz` 200), idle RSS, and RSS under token-fetch load.

use std::sync::Arc;
use std::time::Duration;

use crate::load;
use crate::setup::{self, BinaryProcess, ConfigOpts, Engine, PeerUrls};

#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Start-ups timed per database.
    #[arg(long, default_value_t = 10)]
    pub starts: usize,
    /// Seconds of load for the RSS-under-load figure.
    #[arg(long, default_value_t = 10.0)]
    pub duration: f64,
    /// Connections of that load.
    #[arg(long, default_value_t = 64)]
    pub conns: usize,
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    let bin = setup::binary_path();
    let size = std::fs::metadata(&bin)?.len();
    let stripped = {
        let tmp = std::env::temp_dir().join("mcp-connect-bench-stripped");
        std::fs::copy(&bin, &tmp)?;
        let ok = std::process::Command::new("strip")
            .arg(&tmp)
            .status()
            .is_ok_and(|s| s.success());
        let s = std::fs::metadata(&tmp).map(|m| m.len()).ok().filter(|_| ok);
        let _ = std::fs::remove_file(&tmp);
        s
    };
    let peers = PeerUrls::unreachable();
    let opts = ConfigOpts {
        refresh_ahead_seconds: None,
        ..ConfigOpts::default()
    };

    // Start-up.
    let mut startup_rows = Vec::new();
    for (label, engine, fresh) in [
        (
            "SQLite, new database file (creates and migrates)",
            Engine::Sqlite,
            true,
        ),
        ("SQLite, existing database", Engine::Sqlite, false),
        ("Postgres, existing database", Engine::Postgres, false),
    ] {
        let name = "mcpc_bench_startup";
        setup::drop_db(engine, name).await?;
        let url = setup::db_url(engine, name);
        let mut times = Vec::new();
        let mut idle = Vec::new();
        for i in 0..args.starts {
            if fresh {
                setup::drop_db(engine, name).await?;
            }
            let b = BinaryProcess::start(&url, &peers, &opts).await?;
            times.push(b.started_to_ready.as_secs_f64() * 1000.0);
            if i == 0 {
                tokio::time::sleep(Duration::from_secs(3)).await;
                idle.push(b.rss_kib().0);
            }
            b.stop().await;
        }
        // For "existing database" rows the first start created the database: leave it out.
        if !fresh && times.len() > 1 {
            times.remove(0);
        }
        times.sort_by(f64::total_cmp);
        startup_rows.push((label, times, idle));
        setup::drop_db(engine, name).await?;
    }

    // RSS under load: token fetch with 1,000 stored connections on Postgres.
    let (url, _) = setup::prepare_connections(
        Engine::Postgres,
        "mcpc_bench_pg_1000",
        1000,
        &peers.identity,
        false,
    )
    .await?;
    let b = BinaryProcess::start(&url, &peers, &opts).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let idle_pg = b.rss_kib().0;
    let target = Arc::new(crate::token_fetch::target(b.addr, 1000));
    let pid = b.pid().unwrap_or(0);
    let sampler = tokio::spawn(async move {
        let mut peak = 0;
        for _ in 0..10_000 {
            peak = peak.max(setup::rss_of(pid).0);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        peak
    });
    let load_avg = setup::load_average();
    let r = load::closed_loop(
        target,
        args.conns,
        Duration::from_secs(1),
        Duration::from_secs_f64(args.duration),
    )
    .await;
    let (rss_end, hwm) = b.rss_kib();
    sampler.abort();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss_after = b.rss_kib().0;
    b.stop().await;

    println!("### Footprint of `target/release/mcp-connect`\n");
    println!(
        "Binary: {:.1} MB ({} bytes){}.\n",
        size as f64 / 1e6,
        size,
        stripped
            .map(|s| format!("; {:.1} MB stripped", s as f64 / 1e6))
            .unwrap_or_default()
    );
    println!(
        "| start-up (process start → first `/readyz` 200) | runs | median ms | max ms | idle RSS 3 s after start |"
    );
    println!("|---|---:|---:|---:|---:|");
    for (label, times, idle) in &startup_rows {
        println!(
            "| {label} | {} | **{:.0}** | {:.0} | {} |",
            times.len(),
            setup::pct(times, 0.5),
            times.last().copied().unwrap_or(f64::NAN),
            idle.first()
                .map(|k| format!("**{:.1} MB**", *k as f64 / 1024.0))
                .unwrap_or_default()
        );
    }
    println!(
        "\nUnder load (Postgres, 1,000 stored connections, {} connections closed loop for {:.0} s, {:.0} token fetches/s, {} errors; load average {load_avg}): RSS idle {:.1} MB → **peak {:.1} MB** (VmHWM), {:.1} MB at the end, {:.1} MB 2 s after.\n",
        args.conns,
        args.duration,
        r.throughput(),
        r.errors,
        idle_pg as f64 / 1024.0,
        hwm as f64 / 1024.0,
        rss_end as f64 / 1024.0,
        rss_after as f64 / 1024.0,
    );
    Ok(())
}
