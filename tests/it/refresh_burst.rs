//! Refresh bursts (issue 10): many grants due at the same moment, against a provider whose
//! token endpoint is slow, must not starve the pool. Every caller gets its token, each grant is
//! redeemed once, other requests keep being served, and no rotated refresh token is lost — also
//! when the database goes away in the middle of the burst.
//!
//! The provider is a stub at the HTTP boundary (`rotating_provider.rs`): a rotating, single-use
//! refresh token per grant (`rt-<grant>-<n>` → `rt-<grant>-<n+1>`), answering after a delay.

use std::sync::Arc;
use std::time::Duration;

use reqwest::StatusCode;
use secrecy::SecretString;
use serde_json::{Value, json};

use crate::harness::*;
use crate::on_both_databases;
use crate::rotating_provider::{Shared, seed_due_grant, stub};

async fn app_with_stub(kind: DbKind, delay_ms: u64) -> (TestApp, Shared) {
    let (url, provider) = stub(delay_ms).await;
    let opts = Options {
        other_provider: format!(
            "authorization_url = \"{url}/authorize\"\ntoken_url = \"{url}/token\"\nclient_id = \"stub\"\nclient_secret = \"stub-secret\"\ntoken_auth = \"post\"\npkce = false\nscopes = [\"read\"]"
        ),
        ..Options::default()
    };
    (TestApp::spawn_with(kind, opts).await, provider)
}

/// Stores `n` grants whose access tokens expire in 30 s (due for any `min_ttl_seconds` above
/// that), registered at the provider as generation 0; grant `i` belongs to `burst-g<i>`.
async fn seed_due_grants(app: &TestApp, provider: &Shared, n: usize) {
    let issuer = app.state.config.identity.issuer.to_string();
    for i in 0..n {
        let grant = format!("g{i}");
        let subject = format!("burst-{grant}");
        seed_due_grant(
            app.db(),
            &app.state.config.keys,
            &issuer,
            provider,
            &grant,
            &subject,
        )
        .await;
    }
}

async fn fetch(
    api: &reqwest::Client,
    base: &str,
    subject: &str,
    min_ttl: i64,
) -> (StatusCode, Value) {
    let r = api
        .post(format!("{base}/v1/tokens"))
        .bearer_auth(OTHER_API_KEY)
        .json(&json!({"subject": subject, "provider": "other", "min_ttl_seconds": min_ttl}))
        .send()
        .await;
    match r {
        Ok(r) => {
            let s = r.status();
            (s, r.json().await.unwrap_or(Value::Null))
        }
        Err(e) => (StatusCode::IM_A_TEAPOT, json!({"transport": e.to_string()})),
    }
}

/// Fetches every grant's token at once (forcing a refresh), returning each answer.
async fn burst(app: &TestApp, n: usize) -> Vec<(usize, StatusCode, Value)> {
    let api = reqwest::Client::new();
    let calls = (0..n).map(|i| {
        let api = api.clone();
        let base = app.url.clone();
        async move {
            let (s, v) = fetch(&api, &base, &format!("burst-g{i}"), 600).await;
            (i, s, v)
        }
    });
    futures_util::future::join_all(calls).await
}

/// Requests that have nothing to do with the burst, made while it runs: `/readyz` and a token
/// read of a grant that is not due. Returns every status seen.
fn bystanders(
    app: &TestApp,
    stop: Arc<std::sync::atomic::AtomicBool>,
) -> tokio::task::JoinHandle<Vec<(String, StatusCode, Duration)>> {
    let base = app.url.clone();
    tokio::spawn(async move {
        let api = reqwest::Client::new();
        let mut seen = Vec::new();
        while !stop.load(std::sync::atomic::Ordering::SeqCst) {
            let t = std::time::Instant::now();
            let r = api.get(format!("{base}/readyz")).send().await;
            let s = r.map(|r| r.status()).unwrap_or(StatusCode::IM_A_TEAPOT);
            seen.push(("readyz".to_owned(), s, t.elapsed()));
            let t = std::time::Instant::now();
            let (s, _) = fetch(&api, &base, "steady", 60).await;
            seen.push(("token".to_owned(), s, t.elapsed()));
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        seen
    })
}

async fn seed_steady(app: &TestApp) {
    let issuer = app.state.config.identity.issuer.to_string();
    let at = SecretString::from("at-steady");
    mcp_connect::db::connections::store_connected(
        &mut app.db().pool.acquire().await.unwrap(),
        &app.state.config.keys,
        &mcp_connect::db::connections::NewAccount {
            organization: "",
            client_organization: "",
            issuer: &issuer,
            subject: "steady",
            provider: "other",
            id: "",
            max: 5,
        },
        &mcp_connect::db::connections::NewTokens {
            access_token: &at,
            refresh_token: None,
            token_type: "Bearer",
            expires_at: Some(mcp_connect::time::now() + 3600),
            scopes: &["read".to_owned()],
            account_label: None,
        },
        None,
    )
    .await
    .unwrap()
    .unwrap();
}

fn pool_size(app: &TestApp) -> usize {
    app.db().pool.max_connections() as usize
}

/// Grants in a burst: 3x the pool, or `MCP_CONNECT_BURST_FACTOR` times it for the longer runs
/// recorded in RELIABILITY.md.
fn burst_size(app: &TestApp) -> usize {
    let factor = std::env::var("MCP_CONNECT_BURST_FACTOR")
        .ok()
        .and_then(|f| f.parse().ok())
        .unwrap_or(3);
    factor * pool_size(app)
}

on_both_databases!(
    a_refresh_burst_of_three_times_the_pool_serves_everyone_and_redeems_each_grant_once,
    |kind| async move {
        let (app, provider) = app_with_stub(kind, 1500).await;
        let n = burst_size(&app);
        seed_due_grants(&app, &provider, n).await;
        seed_steady(&app).await;

        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let side = bystanders(&app, stop.clone());
        let started = std::time::Instant::now();
        let answers = burst(&app, n).await;
        let took = started.elapsed();
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
        let side = side.await.unwrap();
        // Figures for RELIABILITY.md (printed, never asserted).
        eprintln!(
            "burst figures: kind={kind:?} grants={n} pool={} all_served_in={took:?} bystander_requests={} bystander_max={:?}",
            pool_size(&app),
            side.len(),
            side.iter().map(|(_, _, d)| *d).max().unwrap_or_default()
        );

        for (i, s, v) in &answers {
            assert_eq!(*s, StatusCode::OK, "grant {i}: {v}");
            assert_eq!(v["access_token"], format!("at-g{i}-1"), "grant {i}");
        }
        assert!(!side.is_empty());
        for (what, s, _) in &side {
            assert_eq!(*s, StatusCode::OK, "{what} during the burst");
        }
        {
            let p = provider.lock().unwrap();
            assert!(p.refused.is_empty(), "refused: {:?}", p.refused);
            for i in 0..n {
                assert_eq!(
                    p.redeemed.get(&format!("g{i}")),
                    Some(&1),
                    "grant {i} redeemed once"
                );
            }
        }
        // Every refresh was audited (in the transaction of the save).
        let (audited,): (i64,) = sqlx::query_as(
            "SELECT COUNT(*) FROM audit_events WHERE event = 'connection.refreshed'",
        )
        .fetch_one(&app.db().pool)
        .await
        .unwrap();
        assert_eq!(audited as usize, n);

        // The rotated refresh tokens were all stored: every grant refreshes again at once.
        provider.lock().unwrap().delay_ms = 0;
        sqlx::query(
            "UPDATE connections SET last_refresh_at = last_refresh_at - 600, expires_at = $1",
        )
        .bind(mcp_connect::time::now() + 30)
        .execute(&app.db().pool)
        .await
        .unwrap();
        for (i, s, v) in burst(&app, n).await {
            assert_eq!(s, StatusCode::OK, "grant {i} again: {v}");
            assert_eq!(v["access_token"], format!("at-g{i}-2"), "grant {i}");
        }
        assert!(provider.lock().unwrap().refused.is_empty());
        app.shutdown().await;
    }
);

/// The database goes away in the middle of a burst (every session killed, new ones refused)
/// while the provider is redeeming: callers may get a 503 while it is gone, but no redeemed
/// grant is lost — once it is back, every grant's latest refresh token is the stored one, and
/// the next round of refreshes succeeds for all with no invalid_grant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_outage_mid_burst_loses_no_redeemed_grant() {
    let (app, provider) = app_with_stub(DbKind::Postgres, 1500).await;
    let n = burst_size(&app);
    seed_due_grants(&app, &provider, n).await;
    let name = app.db_url.rsplit('/').next().unwrap().to_owned();
    let admin = postgres_admin().await;

    let outage = {
        let admin = admin.clone();
        let name = name.clone();
        tokio::spawn(async move {
            // Mid-redemption: the first wave holds its locks and waits on the provider.
            tokio::time::sleep(Duration::from_millis(700)).await;
            sqlx::query(&format!("ALTER DATABASE {name} ALLOW_CONNECTIONS false"))
                .execute(&admin)
                .await
                .unwrap();
            sqlx::query(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1",
            )
            .bind(&name)
            .execute(&admin)
            .await
            .unwrap();
            tokio::time::sleep(Duration::from_secs(3)).await;
            sqlx::query(&format!("ALTER DATABASE {name} ALLOW_CONNECTIONS true"))
                .execute(&admin)
                .await
                .unwrap();
        })
    };
    let first = burst(&app, n).await;
    outage.await.unwrap();
    for (i, s, v) in &first {
        assert!(
            *s == StatusCode::OK || *s == StatusCode::SERVICE_UNAVAILABLE,
            "grant {i}: {s} {v}"
        );
    }

    assert!(
        captured_logs().contains("could not store a refreshed grant; retrying until it is stored"),
        "the outage hit grants the provider had already redeemed"
    );
    // Callers retry until everyone has a token.
    provider.lock().unwrap().delay_ms = 0;
    let api = reqwest::Client::new();
    for i in 0..n {
        let mut last = (StatusCode::IM_A_TEAPOT, Value::Null);
        for _ in 0..60 {
            last = fetch(&api, &app.url, &format!("burst-g{i}"), 600).await;
            if last.0 == StatusCode::OK {
                break;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        assert_eq!(
            last.0,
            StatusCode::OK,
            "grant {i} after the outage: {}",
            last.1
        );
    }
    {
        let p = provider.lock().unwrap();
        assert!(
            p.refused.is_empty(),
            "a rotated refresh token was lost: {:?}",
            p.refused
        );
    }
    // Every stored refresh token is the provider's current one: all refresh again.
    sqlx::query("UPDATE connections SET last_refresh_at = last_refresh_at - 600, expires_at = $1")
        .bind(mcp_connect::time::now() + 30)
        .execute(&app.db().pool)
        .await
        .unwrap();
    for (i, s, v) in burst(&app, n).await {
        assert_eq!(s, StatusCode::OK, "grant {i} in the next round: {v}");
    }
    {
        let p = provider.lock().unwrap();
        assert!(
            p.refused.is_empty(),
            "a rotated refresh token was lost: {:?}",
            p.refused
        );
        let current = p.current.clone();
        drop(p);
        for i in 0..n {
            let g = format!("g{i}");
            assert!(current[&g] >= 2, "grant {i} refreshed after the outage");
        }
    }
    app.shutdown().await;
}
