//! Scenario 6: revoke on one replica, refused on another. Two replicas on one Postgres
//! database, the token cache on (the default): replica A is the app in this process, replica B
//! the real binary (`target/release/mcp-connect serve`). Each trial takes a connection of its
//! own and
//!
//! 1. fetches its token on B twice (the first fetch reads the row and caches it, the second is
//!    served from B's cache);
//! 2. starts a second client that keeps fetching the same token on B, back to back, on its own
//!    connection (the fetches that race the revocation);
//! 3. revokes the connection on A (`DELETE /v1/connections/{id}`);
//! 4. as soon as the DELETE has returned, fetches on B until it refuses.
//!
//! It records any fetch on B that was *sent after* the DELETE returned and still answered 200
//! (must be none, both from step 4 and from the racing client), and the time from the DELETE
//! returning to B's first refusal. SQLite is one process: A and B are the same app.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use tokio::time::Instant;

use crate::setup::{
    self, BinaryProcess, ConfigOpts, Engine, InProcessApp, PeerUrls, ServerRuntime,
};

#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    #[arg(long, value_delimiter = ',', default_values = ["postgres", "sqlite"])]
    pub engines: Vec<Engine>,
    /// Trials per engine (each revokes a connection of its own).
    #[arg(long, default_value_t = 1000)]
    pub trials: usize,
}

type Sender = SendRequest<Full<Bytes>>;

/// Sends one request and returns the status and the body once the whole answer is in.
async fn send(
    s: &mut Sender,
    addr: std::net::SocketAddr,
    method: hyper::Method,
    path: &str,
    body: Option<String>,
) -> anyhow::Result<(u16, Bytes)> {
    let mut req = hyper::Request::builder()
        .method(method)
        .uri(path)
        .header(hyper::header::HOST, addr.to_string())
        .header(
            hyper::header::AUTHORIZATION,
            format!("Bearer {}", setup::API_KEY),
        );
    if body.is_some() {
        req = req.header(hyper::header::CONTENT_TYPE, "application/json");
    }
    let req = req.body(Full::new(Bytes::from(body.unwrap_or_default())))?;
    s.ready().await?;
    let resp = s.send_request(req).await?;
    let status = resp.status().as_u16();
    let body = resp.into_body().collect().await?.to_bytes();
    Ok((status, body))
}

fn fetch_body(user: usize) -> String {
    format!(r#"{{"subject":"user{user}","provider":"acme"}}"#)
}

async fn fetch(s: &mut Sender, addr: std::net::SocketAddr, user: usize) -> anyhow::Result<u16> {
    Ok(send(
        s,
        addr,
        hyper::Method::POST,
        "/v1/tokens",
        Some(fetch_body(user)),
    )
    .await?
    .0)
}

/// The error code of a JSON error body, for the table of refusals.
fn error_code(body: &[u8]) -> String {
    serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v["error"].as_str().map(str::to_owned))
        .unwrap_or_default()
}

#[derive(Default)]
struct Outcome {
    trials: usize,
    /// Fetches on B sent after the DELETE returned that were answered 200 (step 4).
    served_after: usize,
    /// Fetches of the racing client sent after the DELETE returned and answered 200.
    raced_served_after: usize,
    /// Racing fetches in total, and those sent after the DELETE returned.
    raced: usize,
    raced_after: usize,
    /// DELETE-return → B's first refusal, ms.
    refused_ms: Vec<f64>,
    /// The DELETE's own latency, ms.
    delete_ms: Vec<f64>,
    /// Trials whose warm-up fetches on B were not both 200 (not counted).
    setup_failed: usize,
    /// Status and error code of B's first refusal, counted.
    refusals: std::collections::BTreeMap<String, usize>,
    errors: Vec<String>,
    load: String,
}

/// What the racing client saw: (sent after the DELETE returned, status).
type Raced = Vec<(bool, u16)>;

async fn trial(
    i: usize,
    a: std::net::SocketAddr,
    b: std::net::SocketAddr,
    sa: &mut Sender,
    sb: &mut Sender,
    out: &mut Outcome,
) -> anyhow::Result<()> {
    let user = i;
    let id = format!("bench{i:012}");
    // 1. B reads and caches the row; the second fetch is a cache hit.
    let f1 = fetch(sb, b, user).await?;
    let f2 = fetch(sb, b, user).await?;
    if f1 != 200 || f2 != 200 {
        out.setup_failed += 1;
        out.errors.push(format!(
            "trial {i}: warm-up fetches on B answered {f1}, {f2}"
        ));
        return Ok(());
    }
    // 2. The racing client: fetches on B back to back until told to stop.
    let (returned_tx, returned_rx) = tokio::sync::watch::channel(None::<Instant>);
    let (stop_tx, mut stop_rx) = tokio::sync::oneshot::channel::<()>();
    let mut racer_sender = crate::load::connect(b).await?;
    let racer = tokio::spawn(async move {
        let mut seen: Raced = Vec::new();
        loop {
            if stop_rx.try_recv().is_ok() {
                break;
            }
            let sent = Instant::now();
            let st = match fetch(&mut racer_sender, b, user).await {
                Ok(st) => st,
                Err(_) => break,
            };
            let after = returned_rx.borrow().is_some_and(|r| sent >= r);
            seen.push((after, st));
        }
        seen
    });
    tokio::time::sleep(Duration::from_millis(2)).await;
    // 3. Revoke on A.
    let t0 = Instant::now();
    let (st, body) = send(
        sa,
        a,
        hyper::Method::DELETE,
        &format!("/v1/connections/{id}"),
        None,
    )
    .await?;
    let returned = Instant::now();
    let _ = returned_tx.send(Some(returned));
    if st != 200 {
        out.errors.push(format!(
            "trial {i}: DELETE answered {st} {}",
            error_code(&body)
        ));
    }
    out.delete_ms.push((returned - t0).as_secs_f64() * 1000.0);
    // 4. Fetch on B until it refuses.
    let mut refused = None;
    while returned.elapsed() < Duration::from_secs(10) {
        let (st, body) = send(
            sb,
            b,
            hyper::Method::POST,
            "/v1/tokens",
            Some(fetch_body(user)),
        )
        .await?;
        if st == 200 {
            out.served_after += 1;
            continue;
        }
        refused = Some(Instant::now());
        *out.refusals
            .entry(format!("{st} {}", error_code(&body)))
            .or_default() += 1;
        break;
    }
    match refused {
        Some(at) => out.refused_ms.push((at - returned).as_secs_f64() * 1000.0),
        None => out
            .errors
            .push(format!("trial {i}: B still served after 10 s")),
    }
    // A few more racing fetches after the refusal, then stop the racer.
    tokio::time::sleep(Duration::from_millis(2)).await;
    let _ = stop_tx.send(());
    let seen = racer.await?;
    out.raced += seen.len();
    for (after, st) in seen {
        if after {
            out.raced_after += 1;
            if st == 200 {
                out.raced_served_after += 1;
            }
        }
    }
    out.trials += 1;
    Ok(())
}

async fn run_engine(
    engine: Engine,
    trials: usize,
    server: &ServerRuntime,
) -> anyhow::Result<(Outcome, &'static str)> {
    let peers = PeerUrls::unreachable();
    let name = "mcpc_bench_revoke";
    let (db_url, _) =
        setup::prepare_connections(engine, name, trials as u64, &peers.identity, true).await?;
    let opts = ConfigOpts {
        refresh_ahead_seconds: Some(0),
        ..ConfigOpts::default()
    };
    let a = InProcessApp::start(server, &db_url, &peers, &opts, None).await?;
    let (b, topology) = match engine {
        Engine::Postgres => (
            Some(BinaryProcess::start(&db_url, &peers, &opts).await?),
            "A: the app in the bench process; B: `target/release/mcp-connect serve`",
        ),
        Engine::Sqlite => (
            None,
            "one process: A and B are the app in the bench process",
        ),
    };
    let b_addr = b.as_ref().map(|b| b.addr).unwrap_or(a.addr);
    let mut sa = crate::load::connect(a.addr).await?;
    let mut sb = crate::load::connect(b_addr).await?;
    let mut out = Outcome {
        load: setup::load_average(),
        ..Outcome::default()
    };
    for i in 0..trials {
        if let Err(e) = trial(i, a.addr, b_addr, &mut sa, &mut sb, &mut out).await {
            out.errors.push(format!("trial {i}: {e:#}"));
            sa = crate::load::connect(a.addr).await?;
            sb = crate::load::connect(b_addr).await?;
        }
        if (i + 1) % 100 == 0 {
            eprintln!(
                "{}: {} trials, served after DELETE {} + {} raced",
                engine.label(),
                i + 1,
                out.served_after,
                out.raced_served_after
            );
        }
    }
    out.refused_ms.sort_by(f64::total_cmp);
    out.delete_ms.sort_by(f64::total_cmp);
    if let Some(b) = b {
        b.stop().await;
    }
    a.stop().await;
    Ok((out, topology))
}

pub async fn run(args: Args, server: &ServerRuntime) -> anyhow::Result<()> {
    setup::raise_fd_limit();
    println!(
        "### Revoke on replica A → refused on replica B ({} trials per database, token cache on)\n",
        args.trials
    );
    println!(
        "Each trial: two fetches of the connection's token on B (the second a cache hit), a second client fetching it on B back to back meanwhile, `DELETE /v1/connections/{{id}}` on A, then fetches on B from the moment the DELETE returned until B refuses. \"Served after\": fetches *sent* after the DELETE returned that B answered 200 (must be 0). Delay: DELETE returned → B's refusal fully received.\n"
    );
    println!(
        "| database | replicas | trials | **served after the DELETE returned** (follow-up fetches) | racing fetches: total / sent after return / **served after return** | **refused after: p50 ms** | p99 | **max** | DELETE latency p50 / p99 / max ms | B's refusal | setup failures | errors | load avg |"
    );
    println!("|---|---|---:|---:|---|---:|---:|---:|---|---|---:|---:|---|");
    let mut all_errors = Vec::new();
    for &engine in &args.engines {
        let (o, topology) = run_engine(engine, args.trials, server).await?;
        let refusals = o
            .refusals
            .iter()
            .map(|(k, v)| format!("{k} ×{v}"))
            .collect::<Vec<_>>()
            .join(", ");
        println!(
            "| {} | {} | {} | **{}** | {} / {} / **{}** | **{:.2}** | {:.2} | **{:.2}** | {:.1} / {:.1} / {:.1} | {} | {} | {} | {} |",
            engine.label(),
            topology,
            o.trials,
            o.served_after,
            o.raced,
            o.raced_after,
            o.raced_served_after,
            setup::pct(&o.refused_ms, 0.5),
            setup::pct(&o.refused_ms, 0.99),
            o.refused_ms.last().copied().unwrap_or(f64::NAN),
            setup::pct(&o.delete_ms, 0.5),
            setup::pct(&o.delete_ms, 0.99),
            o.delete_ms.last().copied().unwrap_or(f64::NAN),
            refusals,
            o.setup_failed,
            o.errors.len(),
            o.load,
        );
        all_errors.extend(
            o.errors
                .into_iter()
                .map(|e| format!("{}: {e}", engine.label())),
        );
    }
    if !all_errors.is_empty() {
        println!("\nErrors (first 20):\n");
        for e in all_errors.iter().take(20) {
            println!("- {e}");
        }
    }
    println!();
    Ok(())
}
