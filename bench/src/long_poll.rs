//! Scenario 4: long-poll capacity. N concurrent `GET /v1/elicitations/{id}?wait=60` held by the
//! real binary (each waiter on its own pending elicitation, as N users each connecting one
//! account), the binary's RSS before and while holding them, its CPU use while they idle, and
//! the delay from completing an elicitation to its waiter's answer.
//!
//! Completion goes through the app's own code path: `AppState::finish_elicitation` called in
//! this process on a second replica on the same Postgres database (status update, audit record,
//! and the notification the binary's listener turns into a wake-up), exactly what the provider
//! callback does on whichever replica the browser reaches.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use mcp_connect::db::elicitations::Ending;
use mcp_connect::ids::ConnectionId;
use tokio::sync::{Semaphore, oneshot};
use tokio::time::Instant;

use crate::setup::{
    self, BinaryProcess, ConfigOpts, Engine, InProcessApp, PeerUrls, ServerRuntime,
};

#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Concurrent waiters (one run per value).
    #[arg(long, value_delimiter = ',', default_values_t = vec![1_000usize, 10_000])]
    pub waiters: Vec<usize>,
    /// Elicitations completed one at a time to measure the wake-up delay.
    #[arg(long, default_value_t = 200)]
    pub complete: usize,
    /// Seconds to hold all waiters before measuring RSS and CPU.
    #[arg(long, default_value_t = 6.0)]
    pub settle: f64,
}

/// CPU seconds (user + system) a process has used.
fn cpu_seconds(pid: u32) -> f64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which is in parentheses and may contain spaces).
    let rest = s.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let utime: f64 = f.get(11).and_then(|v| v.parse().ok()).unwrap_or(0.0);
    let stime: f64 = f.get(12).and_then(|v| v.parse().ok()).unwrap_or(0.0);
    (utime + stime) / ticks
}

struct Waiter {
    id: String,
    answered: oneshot::Receiver<(Instant, bool)>,
    task: tokio::task::JoinHandle<()>,
}

async fn insert_elicitations(
    app: &InProcessApp,
    issuer: &str,
    n: usize,
    tag: &str,
) -> anyhow::Result<Vec<String>> {
    let now = mcp_connect::time::now();
    let ids: Vec<String> = (0..n).map(|i| format!("lp{tag}x{i:010}xxxxxxxx")).collect();
    for chunk in ids.chunks(1000) {
        let values: Vec<String> = chunk
            .iter()
            .enumerate()
            .map(|(i, id)| {
                format!(
                    "('{id}', 'bench-mcp', '{issuer}', 'waiter-{tag}-{i}-{id}', 'acme', 'api offline_access openid', 'pending', {now}, {})",
                    now + 900
                )
            })
            .collect();
        sqlx::query(&format!(
            "INSERT INTO elicitations (id, client_id, issuer, subject, provider, scopes, status, created_at, expires_at) VALUES {}",
            values.join(", ")
        ))
        .execute(&app.state.db.pool)
        .await?;
    }
    Ok(ids)
}

/// Opens one connection per elicitation and parks a long poll on it.
async fn park(b: &BinaryProcess, ids: Vec<String>, sent: Arc<AtomicUsize>) -> Vec<Waiter> {
    park_at(b.addr, ids, sent).await
}

async fn park_at(
    addr: std::net::SocketAddr,
    ids: Vec<String>,
    sent: Arc<AtomicUsize>,
) -> Vec<Waiter> {
    let gate = Arc::new(Semaphore::new(256));
    let mut out = Vec::with_capacity(ids.len());
    for id in ids {
        let (tx, rx) = oneshot::channel();
        let gate = gate.clone();
        let sent = sent.clone();
        let path = format!("/v1/elicitations/{id}?wait=60");
        let task = tokio::spawn(async move {
            let mut sender = {
                let _permit = gate.acquire().await;
                let mut tries = 0;
                loop {
                    match crate::load::connect(addr).await {
                        Ok(s) => break s,
                        Err(_) if tries < 20 => {
                            tries += 1;
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        }
                        Err(_) => {
                            let _ = tx.send((Instant::now(), false));
                            return;
                        }
                    }
                }
            };
            let req = hyper::Request::get(path)
                .header(hyper::header::HOST, addr.to_string())
                .header(
                    hyper::header::AUTHORIZATION,
                    format!("Bearer {}", setup::API_KEY),
                )
                .body(Full::new(Bytes::new()));
            let Ok(req) = req else { return };
            let fut = sender.send_request(req);
            sent.fetch_add(1, Ordering::Relaxed);
            let ok = match fut.await {
                Ok(resp) => {
                    let ok = resp.status().is_success();
                    let body = resp.into_body().collect().await.map(|b| b.to_bytes());
                    ok && body.is_ok_and(|b| b.windows(11).any(|w| w == b"\"completed\""))
                }
                Err(_) => false,
            };
            let _ = tx.send((Instant::now(), ok));
        });
        out.push(Waiter {
            id,
            answered: rx,
            task,
        });
    }
    out
}

struct Run {
    n: usize,
    rss_idle: u64,
    rss_held: u64,
    rss_after: u64,
    cpu_held: f64,
    delays: Vec<f64>,
    finish_ms: Vec<f64>,
    failed: usize,
    early: usize,
    load: String,
}

async fn one_run(
    a: &InProcessApp,
    b: &BinaryProcess,
    issuer: &str,
    n: usize,
    args: &Args,
    tag: &str,
) -> anyhow::Result<Run> {
    let ids = insert_elicitations(a, issuer, n, tag).await?;
    let pid = b.pid().unwrap_or(0);
    let load = setup::load_average();
    let rss_idle = b.rss_kib().0;
    let sent = Arc::new(AtomicUsize::new(0));
    let mut waiters = park(b, ids, sent.clone()).await;
    let t_sent = Instant::now();
    while sent.load(Ordering::Relaxed) < n && t_sent.elapsed() < Duration::from_secs(30) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Let the service take every request in (each first reads its elicitation), then measure
    // while they idle.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let c0 = cpu_seconds(pid);
    let w0 = Instant::now();
    tokio::time::sleep(Duration::from_secs_f64(args.settle)).await;
    let cpu_held = (cpu_seconds(pid) - c0) / w0.elapsed().as_secs_f64();
    let rss_held = b.rss_kib().0;
    // Did any answer arrive before its elicitation was completed?
    let mut early = 0;
    for w in waiters.iter_mut() {
        if w.answered.try_recv().is_ok() {
            early += 1;
        }
    }

    let mut delays = Vec::new();
    let mut finish_ms = Vec::new();
    let mut failed = 0;
    let k = args.complete.min(n);
    let rest = waiters.split_off(k);
    for w in waiters {
        let Some(e) = a.state.db.get_elicitation(&w.id).await? else {
            failed += 1;
            continue;
        };
        // A completion names its connection; the bench has none, any id will do (plain TEXT).
        let connection_id = ConnectionId::new(format!("bench-{}", e.id));
        let t0 = Instant::now();
        a.state
            .connect
            .finish_elicitation(
                &e,
                Ending::Completed {
                    connection_id: &connection_id,
                    account: &mcp_connect::db::connections::AccountRef {
                        id: String::new(),
                        label: None,
                        nickname: None,
                    },
                },
                None,
            )
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        finish_ms.push(t0.elapsed().as_secs_f64() * 1000.0);
        match tokio::time::timeout(Duration::from_secs(10), w.answered).await {
            Ok(Ok((at, true))) => delays.push((at - t0).as_secs_f64() * 1000.0),
            _ => failed += 1,
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    delays.sort_by(f64::total_cmp);
    finish_ms.sort_by(f64::total_cmp);
    // Hang up on the rest.
    for w in rest {
        w.task.abort();
    }
    Ok(Run {
        n,
        rss_idle,
        rss_held,
        rss_after: 0,
        cpu_held,
        delays,
        finish_ms,
        failed,
        early,
        load,
    })
}

/// The framework's floor: a plain axum server (this program, `hold-server`) whose handler just
/// holds every request for 60 s, measured the same way.
pub async fn hold_server(port: u16) -> anyhow::Result<()> {
    let app = axum::Router::new().route(
        "/v1/elicitations/{id}",
        axum::routing::get(|| async {
            tokio::time::sleep(Duration::from_secs(60)).await;
            axum::Json(serde_json::json!({"status": "pending"}))
        }),
    );
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    println!("ready");
    axum::serve(listener, app).await?;
    Ok(())
}

/// RSS of the `hold-server` floor with `n` requests held: (before, holding) in KiB.
async fn floor(n: usize) -> anyhow::Result<(u64, u64)> {
    let port = testkit::process::free_port();
    let mut child = tokio::process::Command::new(std::env::current_exe()?)
        .args(["hold-server", "--port", &port.to_string()])
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let mut lines = tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(
        child
            .stdout
            .take()
            .ok_or_else(|| anyhow::anyhow!("no stdout"))?,
    ));
    let _ = lines.next_line().await?;
    let pid = child.id().unwrap_or(0);
    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse()?;
    let api = setup::api_client()?;
    for _ in 0..50 {
        let _ = api.get(format!("http://{addr}/healthz")).send().await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let before = setup::rss_of(pid).0;
    let ids: Vec<String> = (0..n).map(|i| format!("floor{i:012}xxxxxxxx")).collect();
    let sent = Arc::new(AtomicUsize::new(0));
    let waiters = park_at(addr, ids, sent.clone()).await;
    let t = Instant::now();
    while sent.load(Ordering::Relaxed) < n && t.elapsed() < Duration::from_secs(30) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let holding = setup::rss_of(pid).0;
    for w in waiters {
        w.task.abort();
    }
    let _ = child.kill().await;
    Ok((before, holding))
}

pub async fn run(args: Args, server: &ServerRuntime) -> anyhow::Result<()> {
    let limit = setup::raise_fd_limit();
    let peers = PeerUrls::unreachable();
    let name = "mcpc_bench_longpoll";
    setup::drop_db(Engine::Postgres, name).await?;
    let db_url = setup::db_url(Engine::Postgres, name);
    let opts = ConfigOpts {
        refresh_ahead_seconds: None,
        ..ConfigOpts::default()
    };
    let a = InProcessApp::start(server, &db_url, &peers, &opts, None).await?;
    let mut rows = Vec::new();
    for (i, &n) in args.waiters.iter().enumerate() {
        // A fresh service process per run, so each run starts from the same memory.
        let b = BinaryProcess::start(&db_url, &peers, &opts).await?;
        // Warm it a little (pools, allocator) before the "before" reading.
        let api = setup::api_client()?;
        for _ in 0..50 {
            let _ = api
                .get(format!("{}/v1/elicitations/lpwarmupwarmupwarmup", b.url))
                .bearer_auth(setup::API_KEY)
                .send()
                .await;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        let mut r = one_run(&a, &b, &peers.identity, n, &args, &i.to_string()).await?;
        // Abandoned waiters close when their tasks end; give the service a moment.
        tokio::time::sleep(Duration::from_secs(2)).await;
        r.rss_after = b.rss_kib().0;
        eprintln!(
            "{n} waiters: RSS {} → {} KiB, wake p99 {:.1} ms",
            r.rss_idle,
            r.rss_held,
            setup::pct(&r.delays, 0.99)
        );
        b.stop().await;
        rows.push(r);
    }
    a.stop().await;
    let mut floors = Vec::new();
    for &n in &args.waiters {
        floors.push((n, floor(n).await?));
    }

    println!(
        "### Long-poll capacity (Postgres; the service is `target/release/mcp-connect serve`; fd limit {limit})\n"
    );
    println!(
        "Each waiter holds `GET /v1/elicitations/{{id}}?wait=60` on its own connection and its own pending elicitation. RSS is VmRSS of the service process. Wake-up delay: from the call of `finish_elicitation` on the other replica to the waiter having the whole answer; elicitations completed one at a time, 10 ms apart.\n"
    );
    println!(
        "| waiters | RSS before | RSS holding | **per waiter** | service CPU while holding | wake p50 ms | p90 | **p99** | max | finish_elicitation p50 ms | failed | answered early | load avg |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|");
    for r in &rows {
        let per = (r.rss_held.saturating_sub(r.rss_idle)) as f64 * 1024.0 / r.n as f64;
        println!(
            "| {} | {:.1} MB | **{:.1} MB** | **{:.1} KB** | {:.0}% of a core | {:.1} | {:.1} | **{:.1}** | {:.1} | {:.1} | {} | {} | {} |",
            crate::token_fetch::thousands(r.n as u64),
            r.rss_idle as f64 / 1024.0,
            r.rss_held as f64 / 1024.0,
            per / 1000.0,
            r.cpu_held * 100.0,
            setup::pct(&r.delays, 0.5),
            setup::pct(&r.delays, 0.9),
            setup::pct(&r.delays, 0.99),
            r.delays.last().copied().unwrap_or(f64::NAN),
            setup::pct(&r.finish_ms, 0.5),
            r.failed,
            r.early,
            r.load,
        );
    }
    println!(
        "\nFloor, measured the same way: a plain axum server (same axum/hyper/tokio, default allocator) whose handler only sleeps 60 s:\n"
    );
    println!("| held requests | RSS before | RSS holding | per held request |");
    println!("|---:|---:|---:|---:|");
    for (n, (before, holding)) in &floors {
        println!(
            "| {} | {:.1} MB | {:.1} MB | {:.1} KB |",
            crate::token_fetch::thousands(*n as u64),
            *before as f64 / 1024.0,
            *holding as f64 / 1024.0,
            holding.saturating_sub(*before) as f64 * 1024.0 / *n as f64 / 1000.0
        );
    }
    println!(
        "\nRSS after the waiters went away (2 s later): {}.\n",
        rows.iter()
            .map(|r| format!("{} waiters → {:.1} MB", r.n, r.rss_after as f64 / 1024.0))
            .collect::<Vec<_>>()
            .join("; ")
    );
    Ok(())
}
