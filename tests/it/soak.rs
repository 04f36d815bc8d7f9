//! Soak (issue 24): mixed load on the real binary for a while, sampling its resident memory, open
//! files, the database's size and the token fetch p99 every window; after warm-up they must stay
//! flat. The suite runs a short version (`SOAK_SECONDS`, default 30, windows of
//! `SOAK_SAMPLE_SECONDS`, default 5); RELIABILITY.md has the 30-minute run:
//!
//! ```sh
//! SOAK_SECONDS=1800 SOAK_SAMPLE_SECONDS=60 SOAK_PACE_MS=20 \
//!   cargo nextest run --no-capture -E 'test(/soak::soak_mixed_load_stays_flat::postgres/)'
//! ```
//!
//! (`SOAK_PACE_MS`: each token caller's pause between requests; 0, back to back, in the
//! suite. Not `MCP_CONNECT_*`: the replica process would take those for configuration.)
//!
//! The load, all at once: token fetches over 10,000 connections (8 callers), connect flows one
//! after another, a refresh storm every few seconds (10 concurrent forced refreshes of one grant,
//! the provider rotating its refresh token), a revocation every second, 20 long polls and 3 event
//! streams held open. The measured process is a replica running the binary; connect flows run
//! through the in-process replica beside it (the test peers know one redirect URI), so the
//! measured one sees their grants arrive through the database.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::json;

use crate::admin::insert_bulk;
use crate::harness::*;
use crate::on_both_databases;

const CONNECTIONS: usize = 10_000;
/// Bulk connections the token callers read; the ones above are revoked during the run.
const READ: usize = 8_000;

fn env_secs(name: &str, default: u64) -> Duration {
    Duration::from_secs(
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default),
    )
}

/// What the callers saw in the current window.
#[derive(Default)]
struct Window {
    token_ms: Vec<f64>,
    statuses: BTreeMap<String, u64>,
}

impl Window {
    fn count(&mut self, what: &str, s: StatusCode) {
        *self
            .statuses
            .entry(format!("{what} {}", s.as_u16()))
            .or_default() += 1;
    }
}

/// One sample of the measured process and the database.
struct Sample {
    at: Duration,
    rss_kib: u64,
    open_files: usize,
    db_bytes: i64,
    fetches: usize,
    p99_ms: f64,
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn open_files(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

async fn db_bytes(app: &TestApp, kind: DbKind) -> i64 {
    match kind {
        DbKind::Postgres => {
            let (n,): (i64,) = sqlx::query_as("SELECT pg_database_size(current_database())")
                .fetch_one(&app.db().pool)
                .await
                .unwrap();
            n
        }
        DbKind::Sqlite => {
            let path = app.db_url.strip_prefix("sqlite://").unwrap();
            ["", "-wal"]
                .iter()
                .filter_map(|s| std::fs::metadata(format!("{path}{s}")).ok())
                .map(|m| m.len() as i64)
                .sum()
        }
    }
}

on_both_databases!(soak_mixed_load_stays_flat, |kind| async move {
    let total = env_secs("SOAK_SECONDS", 30);
    let every = env_secs("SOAK_SAMPLE_SECONDS", 5);
    // Each token caller waits this long between its requests (0: back to back, the default).
    let pace = Duration::from_millis(
        std::env::var("SOAK_PACE_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0),
    );
    // One machine plays every user: the per-address browser limit is for strangers.
    let front = TestApp::spawn_with(
        kind,
        Options {
            extra_toml: "[limits]\nbrowser_requests_per_minute = 0\n".into(),
            ..Options::default()
        },
    )
    .await;
    front.connect("storm").await;
    insert_bulk(&front, &front.state.config.keys, CONNECTIONS, "active").await;
    let (url, mut child) = front.spawn_replica_process(&Options::default()).await;
    let pid = child.id().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let window = Arc::new(Mutex::new(Window::default()));
    let mut load = Vec::new();

    // Token fetches over the bulk connections.
    for worker in 0..8u64 {
        let (stop, window, api, base) =
            (stop.clone(), window.clone(), front.api.clone(), url.clone());
        load.push(tokio::spawn(async move {
            let mut i = (worker * 1_117) as usize;
            while !stop.load(Ordering::Relaxed) {
                i = (i + 7_919) % READ;
                let started = Instant::now();
                let body = json!({"subject": format!("bulk-{i:05}"), "provider": "acme"});
                let (s, _) = fetch_token(&api, &base, body).await;
                let ms = started.elapsed().as_secs_f64() * 1e3;
                {
                    let mut w = window.lock().unwrap();
                    w.token_ms.push(ms);
                    w.count("token", s);
                }
                if !pace.is_zero() {
                    tokio::time::sleep(pace).await;
                }
            }
        }));
    }
    // Connect flows, one after another, through the other replica.
    let flows = Arc::new(AtomicU64::new(0));
    {
        let (stop, window, flows) = (stop.clone(), window.clone(), flows.clone());
        let (api, base) = (front.api.clone(), front.url.clone());
        load.push(tokio::spawn(async move {
            let mut k = 0;
            while !stop.load(Ordering::Relaxed) {
                k += 1;
                let (s, e) = reply(
                    api.post(format!("{base}/v1/elicitations"))
                        .bearer_auth(API_KEY)
                        .json(&json!({"subject": format!("soak-{k}"), "provider": "acme"})),
                )
                .await;
                window.lock().unwrap().count("elicit", s);
                if s == StatusCode::CREATED {
                    let done = Browser::new()
                        .connect(e["url"].as_str().unwrap(), &format!("soak-{k}"))
                        .await;
                    window.lock().unwrap().count("flow", done.status);
                    flows.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    // Refresh storms: ten concurrent forced refreshes of one grant every few seconds.
    {
        let (stop, window, api, base) =
            (stop.clone(), window.clone(), front.api.clone(), url.clone());
        load.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let storm: Vec<_> = (0..10)
                    .map(|_| {
                        let (api, base) = (api.clone(), base.clone());
                        tokio::spawn(async move {
                            let body = json!({"subject": "storm", "provider": "acme", "force_refresh": true});
                            fetch_token(&api, &base, body).await.0
                        })
                    })
                    .collect();
                for s in storm {
                    let s = s.await.unwrap();
                    window.lock().unwrap().count("refresh", s);
                }
                tokio::time::sleep(Duration::from_secs(3)).await;
            }
        }));
    }
    // A revocation every second (the connections above READ).
    {
        let (stop, window, api, base) =
            (stop.clone(), window.clone(), front.api.clone(), url.clone());
        load.push(tokio::spawn(async move {
            let mut i = READ;
            while !stop.load(Ordering::Relaxed) && i < CONNECTIONS {
                let list = reply(
                    api.get(format!("{base}/v1/connections?subject=bulk-{i:05}"))
                        .bearer_auth(API_KEY),
                )
                .await;
                if let Some(id) = list.1["connections"][0]["id"].as_str() {
                    let (s, _) = reply(
                        api.delete(format!("{base}/v1/connections/{id}"))
                            .bearer_auth(API_KEY),
                    )
                    .await;
                    window.lock().unwrap().count("revoke", s);
                }
                i += 1;
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }));
    }
    // Long polls held open (pending elicitations nobody completes), and event streams.
    for p in 0..20 {
        let (stop, window, api, base) =
            (stop.clone(), window.clone(), front.api.clone(), url.clone());
        load.push(tokio::spawn(async move {
            let mut id = String::new();
            while !stop.load(Ordering::Relaxed) {
                if id.is_empty() {
                    // A pending elicitation to wait on (a new one once it expired: an MCP server
                    // waits on what its user has not answered yet).
                    let (_, e) = reply(
                        api.post(format!("{base}/v1/elicitations"))
                            .bearer_auth(API_KEY)
                            .json(&json!({"subject": format!("poll-{p}"), "provider": "acme"})),
                    )
                    .await;
                    id = e["id"].as_str().unwrap_or_default().to_owned();
                }
                let (s, e) = reply(
                    api.get(format!("{base}/v1/elicitations/{id}?wait=10"))
                        .bearer_auth(API_KEY),
                )
                .await;
                window.lock().unwrap().count("long_poll", s);
                if e["status"] != "pending" {
                    id.clear();
                }
            }
        }));
    }
    for _ in 0..3 {
        let (stop, window, api, base) =
            (stop.clone(), window.clone(), front.api.clone(), url.clone());
        load.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let r = api
                    .get(format!("{base}/v1/events"))
                    .bearer_auth(API_KEY)
                    .send()
                    .await;
                let Ok(mut r) = r else { continue };
                window.lock().unwrap().count("events", r.status());
                while !stop.load(Ordering::Relaxed) {
                    match tokio::time::timeout(Duration::from_millis(500), r.chunk()).await {
                        Ok(Ok(Some(_))) | Err(_) => {}
                        _ => break,
                    }
                }
            }
        }));
    }

    let started = Instant::now();
    let mut samples = Vec::new();
    let mut seen = BTreeMap::<String, u64>::new();
    while started.elapsed() < total {
        tokio::time::sleep(every).await;
        let w = std::mem::take(&mut *window.lock().unwrap());
        let mut ms = w.token_ms;
        ms.sort_by(f64::total_cmp);
        let p99 = ms
            .get((ms.len() as f64 * 0.99) as usize)
            .or(ms.last())
            .copied()
            .unwrap_or(0.0);
        for (k, n) in w.statuses {
            *seen.entry(k).or_default() += n;
        }
        samples.push(Sample {
            at: started.elapsed(),
            rss_kib: rss_kib(pid),
            open_files: open_files(pid),
            db_bytes: db_bytes(&front, kind).await,
            fetches: ms.len(),
            p99_ms: p99,
        });
    }
    stop.store(true, Ordering::Relaxed);
    for l in load {
        l.abort();
    }
    eprintln!(
        "soak ({kind:?}): {total:?}, {} connect flows; answers: {seen:?}",
        flows.load(Ordering::Relaxed)
    );
    eprintln!("| at | RSS (MiB) | open files | database (MiB) | token fetches | p99 (ms) |");
    eprintln!("|---|---|---|---|---|---|");
    for s in &samples {
        eprintln!(
            "| {:.0} s | {:.1} | {} | {:.1} | {} | {:.1} |",
            s.at.as_secs_f64(),
            s.rss_kib as f64 / 1024.0,
            s.open_files,
            s.db_bytes as f64 / 1048576.0,
            s.fetches,
            s.p99_ms
        );
    }

    // Every answer was the expected one: tokens, finished flows, refreshes (the storm's callers
    // share one refresh), revocations, long polls answering "still pending".
    for (what, n) in &seen {
        let ok = matches!(
            what.as_str(),
            "token 200"
                | "elicit 201"
                | "flow 200"
                | "refresh 200"
                | "revoke 200"
                | "long_poll 200"
                | "events 200"
        );
        assert!(ok, "{n} unexpected answers {what}: {seen:?}");
    }
    assert!(flows.load(Ordering::Relaxed) >= 1);
    assert!(seen.get("refresh 200").copied().unwrap_or(0) >= 10);
    // Flat after warm-up (the first third of the run): memory and open files do not grow with
    // time under the same load.
    let warm = &samples[samples.len() / 3];
    let last = samples.last().unwrap();
    assert!(
        last.rss_kib <= warm.rss_kib + warm.rss_kib / 4 + 16 * 1024,
        "resident memory grew from {} KiB to {} KiB",
        warm.rss_kib,
        last.rss_kib
    );
    assert!(
        last.open_files <= warm.open_files + 32,
        "open files grew from {} to {}",
        warm.open_files,
        last.open_files
    );
    let _ = child.kill().await;
    front.shutdown().await;
});
