//! Scenario 3: a refresh storm. 500 concurrent `POST /v1/tokens` for one connection whose token
//! is about to expire, split over two replicas on one database: the app in this process and the
//! real binary (`target/release/mcp-connect serve`). The provider must see exactly one refresh.
//!
//! Setup per run: the upstream issues access tokens that live 120 s and every request asks for
//! `min_ttl_seconds: 300`, so every token is "expiring"; tokens refreshed less than 30 s ago are
//! not refreshed again, so `last_refresh_at` is moved 60 s into the past before each storm.
//! All 500 connections are opened first, then released together; each latency runs from the
//! release to the whole answer.

use std::collections::HashSet;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use tokio::time::Instant;

use crate::setup::{
    self, BinaryProcess, ConfigOpts, Engine, InProcessApp, PeerUrls, ServerRuntime,
};
use testkit::{Browser, Peers};

#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    #[arg(long, value_delimiter = ',', default_values = ["postgres"])]
    pub engines: Vec<Engine>,
    /// Concurrent requests per storm.
    #[arg(long, default_value_t = 500)]
    pub requests: usize,
    /// Storms per engine.
    #[arg(long, default_value_t = 3)]
    pub runs: usize,
}

struct Storm {
    refreshes: i64,
    invalid_grant: i64,
    ok: usize,
    errors: Vec<String>,
    distinct_tokens: usize,
    lat: Vec<f64>,
    per_replica_p99: [f64; 2],
    load: String,
}

async fn storm(
    a: &InProcessApp,
    b: &BinaryProcess,
    peers: &Peers,
    n: usize,
) -> anyhow::Result<Storm> {
    sqlx::query(
        "UPDATE connections SET last_refresh_at = last_refresh_at - 60 WHERE subject = 'alice'",
    )
    .execute(&a.state.db.pool)
    .await?;
    let before = peers.stats().await;
    let load = setup::load_average();
    let addrs = [a.addr, b.addr];
    // Open every connection first.
    let mut senders = Vec::with_capacity(n);
    for i in 0..n {
        senders.push((i % 2, crate::load::connect(addrs[i % 2]).await?));
    }
    let (go_tx, go_rx) = tokio::sync::watch::channel(None::<Instant>);
    let mut tasks = Vec::new();
    for (replica, mut s) in senders {
        let mut go = go_rx.clone();
        let addr = addrs[replica];
        tasks.push(tokio::spawn(async move {
            let _ = go.wait_for(|v| v.is_some()).await;
            let t0 = go.borrow().unwrap_or_else(Instant::now);
            let req = hyper::Request::post("/v1/tokens")
                .header(hyper::header::HOST, addr.to_string())
                .header(
                    hyper::header::AUTHORIZATION,
                    format!("Bearer {}", setup::API_KEY),
                )
                .header(hyper::header::CONTENT_TYPE, "application/json")
                .body(Full::new(Bytes::from_static(
                    br#"{"subject":"alice","provider":"acme","min_ttl_seconds":300}"#,
                )))?;
            let resp = s.send_request(req).await?;
            let status = resp.status();
            let body = resp.into_body().collect().await?.to_bytes();
            let dt = t0.elapsed();
            anyhow::Ok((replica, status, body, dt))
        }));
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let _ = go_tx.send(Some(Instant::now()));
    let mut out = Storm {
        refreshes: 0,
        invalid_grant: 0,
        ok: 0,
        errors: Vec::new(),
        distinct_tokens: 0,
        lat: Vec::new(),
        per_replica_p99: [0.0; 2],
        load,
    };
    let mut tokens = HashSet::new();
    let mut per: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    for t in tasks {
        match t.await? {
            Ok((replica, status, body, dt)) => {
                let ms = dt.as_secs_f64() * 1000.0;
                out.lat.push(ms);
                per[replica].push(ms);
                let v: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
                if status.is_success() {
                    out.ok += 1;
                    tokens.insert(v["access_token"].as_str().unwrap_or_default().to_owned());
                } else {
                    out.errors.push(format!("{status} {}", v["error"]));
                }
            }
            Err(e) => out.errors.push(e.to_string()),
        }
    }
    out.lat.sort_by(f64::total_cmp);
    for (i, p) in per.iter_mut().enumerate() {
        p.sort_by(f64::total_cmp);
        out.per_replica_p99[i] = setup::pct(p, 0.99);
    }
    out.distinct_tokens = tokens.len();
    let after = peers.stats().await;
    let d = |k: &str| after[k].as_i64().unwrap_or(0) - before[k].as_i64().unwrap_or(0);
    out.refreshes = d("refresh_token");
    out.invalid_grant = d("refresh_invalid_grant");
    Ok(out)
}

pub async fn run(args: Args, server: &ServerRuntime) -> anyhow::Result<()> {
    setup::raise_fd_limit();
    println!(
        "### Refresh storm: {} concurrent fetches of one expiring token over two processes\n",
        args.requests
    );
    println!(
        "Half the requests go to the app in the bench process, half to `target/release/mcp-connect serve` on the same database. Latency from the common release to the whole answer.\n"
    );
    println!(
        "| database | run | upstream refreshes | invalid_grant | 200s | errors | distinct tokens handed out | p50 ms | p99 ms | max ms | p99 in-process / binary | load avg |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|");
    for &engine in &args.engines {
        let name = "mcpc_bench_storm";
        setup::drop_db(engine, name).await?;
        let db_url = setup::db_url(engine, name);
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let peers = Peers::start(&format!("http://{addr}"), 120).await;
        let urls = PeerUrls::of(&peers);
        // The background refresher would refresh a 120 s token at once; keep it off so the
        // storm is the only thing refreshing.
        let opts = ConfigOpts {
            refresh_ahead_seconds: Some(0),
            ..ConfigOpts::default()
        };
        let a = InProcessApp::start(server, &db_url, &urls, &opts, Some(listener)).await?;
        let (_, url) = setup::elicit(&setup::api_client()?, &a.url, "alice").await?;
        Browser::new().connect(&url, "alice").await;
        let b = BinaryProcess::start(&db_url, &urls, &opts).await?;
        for run in 1..=args.runs {
            let s = storm(&a, &b, &peers, args.requests).await?;
            let mut errs: Vec<String> = s.errors.clone();
            errs.dedup();
            println!(
                "| {} | {run} | **{}** | {} | {} | **{}**{} | {} | {:.1} | **{:.1}** | {:.1} | {:.1} / {:.1} | {} |",
                engine.label(),
                s.refreshes,
                s.invalid_grant,
                s.ok,
                s.errors.len(),
                if errs.is_empty() {
                    String::new()
                } else {
                    format!(
                        " ({})",
                        errs.into_iter().take(3).collect::<Vec<_>>().join("; ")
                    )
                },
                s.distinct_tokens,
                setup::pct(&s.lat, 0.5),
                setup::pct(&s.lat, 0.99),
                s.lat.last().copied().unwrap_or(f64::NAN),
                s.per_replica_p99[0],
                s.per_replica_p99[1],
                s.load,
            );
        }
        b.stop().await;
        a.stop().await;
        drop(peers);
    }
    println!();
    Ok(())
}
