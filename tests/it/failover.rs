//! Postgres failover (issue 24): a primary and a streaming standby of the test's own, the
//! service reaching the primary through a TCP proxy (as a managed endpoint or haproxy would).
//! The primary crashes, the standby is promoted and the proxy switched: tokens are served again
//! by themselves, and with synchronous replication no refresh token the provider already
//! rotated is lost. With asynchronous replication a refresh that had not reached the standby is
//! lost, and the grant then needs its user (docs/deploy.md, "Postgres HA"). The long run's
//! figures are in RELIABILITY.md.

use std::sync::Arc;
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::harness::*;
use crate::private_postgres::PrivatePostgres;

/// A TCP proxy to `127.0.0.1:<target>`, the target switchable (the "-rw" endpoint that moves to
/// the promoted standby).
struct Proxy {
    port: u16,
    target: Arc<AtomicU16>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    async fn start(target: u16) -> Proxy {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        let target = Arc::new(AtomicU16::new(target));
        let to = target.clone();
        let task = tokio::spawn(async move {
            while let Ok((mut client, _)) = l.accept().await {
                let port = to.load(Ordering::SeqCst);
                tokio::spawn(async move {
                    if let Ok(mut server) =
                        tokio::net::TcpStream::connect(("127.0.0.1", port)).await
                    {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                });
            }
        });
        Proxy { port, target, task }
    }

    fn switch(&self, to: u16) {
        self.target.store(to, Ordering::SeqCst);
    }
}

async fn replication_state(primary: &PrivatePostgres) -> Option<String> {
    let pool = sqlx::PgPool::connect(&format!("{}/postgres", primary.base_url))
        .await
        .ok()?;
    let row: Option<(String,)> =
        sqlx::query_as("SELECT sync_state FROM pg_stat_replication WHERE state = 'streaming'")
            .fetch_optional(&pool)
            .await
            .ok()?;
    pool.close().await;
    row.map(|r| r.0)
}

/// Waits until the standby has replayed everything the primary has written so far: cutting it
/// off must lose only what comes after (alice's connection itself must be there), however slowly
/// a loaded machine replays.
async fn wait_caught_up(primary: &PrivatePostgres, standby: &PrivatePostgres) {
    let p = sqlx::PgPool::connect(&format!("{}/postgres", primary.base_url))
        .await
        .unwrap();
    let (lsn,): (String,) = sqlx::query_as("SELECT pg_current_wal_lsn()::text")
        .fetch_one(&p)
        .await
        .unwrap();
    p.close().await;
    let s = sqlx::PgPool::connect(&format!("{}/postgres", standby.base_url))
        .await
        .unwrap();
    for _ in 0..300 {
        let (done,): (bool,) =
            sqlx::query_as("SELECT COALESCE(pg_last_wal_replay_lsn() >= $1::pg_lsn, false)")
                .bind(&lsn)
                .fetch_one(&s)
                .await
                .unwrap();
        if done {
            s.close().await;
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the standby did not replay up to {lsn} within 30 s");
}

async fn force_refresh(app: &TestApp) -> (StatusCode, Value) {
    app.post(
        "/v1/tokens",
        json!({"subject": "alice", "provider": "acme", "force_refresh": true}),
    )
    .await
}

/// How the standby follows, and what happens to it before the primary crashes.
#[derive(Clone, Copy, PartialEq)]
enum Replication {
    /// `synchronous_standby_names = '*'`: a commit waits for the standby.
    Synchronous,
    /// Asynchronous, and the standby is cut off before the last refresh: that refresh never
    /// reaches it.
    AsynchronousLagging,
}

/// Connects alice, refreshes (the provider rotates her refresh token), crashes the primary,
/// promotes the standby and switches the proxy. Returns how long after the crash both a token
/// and a forced refresh (which needs the database itself) were answered again, and that
/// refresh's answer.
async fn fail_over(replication: Replication) -> (Duration, StatusCode, Value) {
    let sync = ["synchronous_standby_names='*'"];
    let primary = PrivatePostgres::start_with(if replication == Replication::Synchronous {
        &sync
    } else {
        &[]
    })
    .await
    .unwrap_or_else(|e| panic!("starting the primary: {e}"));
    let standby = PrivatePostgres::standby_of(&primary, &[])
        .await
        .unwrap_or_else(|e| panic!("starting the standby: {e}\n{}", primary.log()));
    let want = match replication {
        Replication::Synchronous => "sync",
        Replication::AsynchronousLagging => "async",
    };
    let mut state = None;
    for _ in 0..100 {
        state = replication_state(&primary).await;
        if state.as_deref() == Some(want) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(state.as_deref(), Some(want), "{}", primary.log());

    let proxy = Proxy::start(primary.port).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let peers = Peers::start(&url, 3600).await;
    let db_url = format!(
        "postgres://postgres@127.0.0.1:{}/mcpc_failover_{}",
        proxy.port,
        random_name()
    );
    let app = TestApp::spawn_on(listener, peers, db_url, &Options::default()).await;
    app.connect("alice").await;
    if replication == Replication::AsynchronousLagging {
        wait_caught_up(&primary, &standby).await;
        standby.stop_server().await.unwrap();
    }
    // The provider rotates alice's refresh token; the new one is committed on the primary.
    let (s, refreshed) = force_refresh(&app).await;
    assert_eq!(s, StatusCode::OK, "{refreshed}");

    // Load through the failover: four callers fetching alice's token back to back.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load: Vec<_> = (0..4)
        .map(|_| {
            let (api, base, stop) = (app.api.clone(), app.url.clone(), stop.clone());
            tokio::spawn(async move {
                let mut seen = std::collections::BTreeMap::<u16, u64>::new();
                while !stop.load(Ordering::SeqCst) {
                    let body = json!({"subject": "alice", "provider": "acme"});
                    let (s, _) = fetch_token(&api, &base, body).await;
                    *seen.entry(s.as_u16()).or_default() += 1;
                }
                seen
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;

    primary.crash().await.unwrap();
    let down = Instant::now();
    if replication == Replication::AsynchronousLagging {
        standby.start_server().await.unwrap();
    }
    standby
        .promote()
        .await
        .unwrap_or_else(|e| panic!("promoting: {e}\n{}", standby.log()));
    proxy.switch(standby.port);
    let mut served = None;
    for _ in 0..300 {
        let (s, v) = app.token("alice").await;
        if s == StatusCode::OK {
            served = Some(down.elapsed());
            let same = v["access_token"] == refreshed["access_token"];
            // What the standby had: the refreshed token when the refresh reached it.
            assert_eq!(same, replication == Replication::Synchronous, "{v}");
            break;
        }
        assert_eq!(s, StatusCode::SERVICE_UNAVAILABLE, "never a 500: {v}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let served = served.unwrap_or_else(|| panic!("no token 30 s after the failover"));
    stop.store(true, Ordering::SeqCst);
    let mut answers = std::collections::BTreeMap::<u16, u64>::new();
    for l in load {
        for (s, n) in l.await.unwrap() {
            *answers.entry(s).or_default() += n;
        }
    }
    eprintln!("answers to the callers during the failover (status: count): {answers:?}");
    assert!(
        answers.keys().all(|s| *s == 200 || *s == 503),
        "only tokens or 503 (try again) while the database moves: {answers:?}"
    );
    assert!(answers.get(&200).copied().unwrap_or(0) > 0);
    // Connections the pool still held to the crashed primary fail once each (503, "try again
    // shortly"): a client retries, as the API says.
    let mut after = force_refresh(&app).await;
    for _ in 0..50 {
        if after.0 != StatusCode::SERVICE_UNAVAILABLE {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        after = force_refresh(&app).await;
    }
    // A refresh needs the database itself (the token above may have come from the cache).
    let refreshed_again = down.elapsed();
    app.shutdown().await;
    proxy.task.abort();
    primary.remove().await;
    standby.remove().await;
    (served.max(refreshed_again), after.0, after.1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_to_a_synchronous_standby_loses_no_rotated_refresh_token() {
    let (served, s, v) = fail_over(Replication::Synchronous).await;
    eprintln!("failover (synchronous): served and refreshed again {served:?} after the crash");
    // The refresh token the provider rotated before the crash is the one stored: it refreshes.
    assert_eq!(s, StatusCode::OK, "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_to_a_lagging_asynchronous_standby_can_lose_a_rotation() {
    let (served, s, v) = fail_over(Replication::AsynchronousLagging).await;
    eprintln!("failover (asynchronous, lagging): served and refreshed again {served:?}");
    // The standby holds the refresh token the provider already replaced: refused, and the user
    // must connect again (never a token that does not work, never a 500).
    assert_eq!(
        (s, v["error"].as_str()),
        (StatusCode::CONFLICT, Some("reauthorization_required")),
        "{v}"
    );
}
