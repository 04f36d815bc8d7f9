//! The token cache across replicas (`src/grants/cache.rs`): every change to a connection made on
//! replica A reaches replica B's cache within the sync window, a revocation before A answers,
//! so does an app's grant taken away (the apps that may use a connection are cached with it),
//! a lost change feed turns the cache off until it is back and flushed, and nothing in clear is
//! kept. Correctness only; its speed is in BENCHMARKS.md.

use std::time::{Duration, Instant};

use mcp_connect::crypto::{connection_aad, generate_key};
use mcp_connect::db::token_cache::CacheStats;
use reqwest::StatusCode;
use secrecy::ExposeSecret;
use serde_json::{Value, json};

use crate::harness::*;
use crate::on_both_databases;

/// A second app (in this process, its own pool, cache and listener) on A's database and peers.
async fn replica(a: &TestApp, opts: &Options) -> TestApp {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let peers = Peers {
        identity: a.peers.identity.clone(),
        upstream: a.peers.upstream.clone(),
        child: None,
    };
    let opts = Options {
        key: a.key.clone(),
        ..opts.clone()
    };
    let b = TestApp::spawn_on(listener, peers, a.db_url.clone(), &opts).await;
    wait_until_usable(&b).await;
    b
}

async fn wait_until_usable(app: &TestApp) {
    let started = Instant::now();
    while !app.state.token_cache.is_usable() {
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "the cache never became usable: {:?}",
            stats(app)
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn stats(app: &TestApp) -> CacheStats {
    app.state.token_cache.stats()
}

async fn fetch(app: &TestApp, body: Value) -> (StatusCode, Value) {
    app.post("/v1/tokens", body).await
}

/// The access token `app` hands out for alice, asserting it does.
async fn token(app: &TestApp) -> String {
    let (s, v) = app.token("alice").await;
    if s != StatusCode::OK {
        let logs = captured_logs();
        let errors: Vec<&str> = logs.lines().filter(|l| l.contains("ERROR")).collect();
        panic!("{s} {v}\n{}", errors.join("\n"));
    }
    v["access_token"].as_str().unwrap().to_owned()
}

/// Fetches on `app` until an answer comes from its cache (on a loaded machine the change feed
/// can fall behind the window for a moment, and then the cache is rightly not used).
async fn cached_token(app: &TestApp) -> String {
    for _ in 0..20 {
        wait_until_usable(app).await;
        let first = token(app).await;
        let before = stats(app).hits;
        let second = token(app).await;
        assert_eq!(first, second);
        if stats(app).hits > before {
            return second;
        }
    }
    panic!("never a cache hit: {:?}", stats(app));
}

on_both_databases!(
    changes_on_one_replica_reach_the_cache_of_another,
    |kind| async move {
        let (k1, k2) = (generate_key("k1"), generate_key("k2"));
        let opts = Options {
            // Both keys open; k1 seals. (The harness writes `["{key}"]`.)
            key: format!("{k1}\", \"{k2}"),
            ..Options::default()
        };
        let a = TestApp::spawn_with(kind, opts.clone()).await;
        let id = a.connect("alice").await;
        let b = replica(&a, &opts).await;
        let window = b.state.token_cache.window();
        let after_window = || tokio::time::sleep(window + Duration::from_millis(20));

        let t1 = cached_token(&b).await;
        assert!(b.state.token_cache.holds(&id));
        // Nothing in clear: the cached row holds the sealed columns, never the token.
        let (sealed_at, _) = a.db().raw_connection_secrets(&id).await.unwrap();
        let dump = b.state.token_cache.dump();
        assert_eq!(dump.len(), 1);
        assert!(!dump[0].contains(&t1), "the cache holds a token in clear");
        // Sealed with k1, as stored (the row's column names its key before the '.').
        let key_id = sealed_at.as_deref().unwrap().split_once('.').unwrap().0;
        assert_eq!(key_id, "k1");
        assert!(
            dump[0].contains("sealed_access_token: Some(Sealed(k1))"),
            "{}",
            dump[0]
        );

        // Refresh on A.
        let (s, v) = fetch(
            &a,
            json!({"subject": "alice", "provider": "acme", "force_refresh": true}),
        )
        .await;
        assert_eq!(s, StatusCode::OK, "{v}");
        let t2 = v["access_token"].as_str().unwrap().to_owned();
        assert_ne!(t1, t2);
        after_window().await;
        assert_eq!(cached_token(&b).await, t2, "B missed A's refresh");

        // Reconnect on A (the provider hands out new tokens; same connection).
        assert_eq!(a.connect("alice").await, id);
        let t3 = token(&a).await;
        assert_ne!(t3, t2);
        after_window().await;
        assert_eq!(cached_token(&b).await, t3, "B missed A's reconnect");

        // Key rotation (another process: its own pool) re-seals the row under k2.
        let cli = mcp_connect::db::Db::connect(&a.db_url.parse().unwrap())
            .await
            .unwrap();
        let report = mcp_connect::grants::rotation::rotate(
            &cli,
            &key_ring(&[&k2, &k1]),
            100,
            "test",
            &|_| {},
        )
        .await
        .unwrap();
        assert_eq!(report.rows_rotated, 1, "{report:?}");
        cli.pool.close().await;
        after_window().await;
        assert!(
            !b.state.token_cache.holds(&id),
            "B kept the row sealed under the old key"
        );
        assert_eq!(cached_token(&b).await, t3);
        let (resealed, _) = a.db().raw_connection_secrets(&id).await.unwrap();
        assert!(resealed.as_deref().unwrap().starts_with("k2."));
        let dump = b.state.token_cache.dump();
        assert!(
            dump[0].contains("sealed_access_token: Some(Sealed(k2))"),
            "{}",
            dump[0]
        );

        // Status change on A: the grant died at the provider, A finds out on a refresh.
        let c = a.db().get_connection(&id).await.unwrap().unwrap();
        let rt = c.refresh_token(&a.state.config.keys).unwrap().unwrap();
        let s = a.peers.revoke_refresh_token(rt.expose_secret()).await;
        assert!(s.is_success());
        let (s, v) = fetch(
            &a,
            json!({"subject": "alice", "provider": "acme", "force_refresh": true}),
        )
        .await;
        assert_eq!(s, StatusCode::CONFLICT, "{v}");
        after_window().await;
        // The access token itself has an hour left: only the status says no.
        let (s, v) = b.token("alice").await;
        assert_eq!(
            (s, v["error"].as_str()),
            (StatusCode::CONFLICT, Some("reauthorization_required")),
            "B missed A's status change: {v}"
        );

        // Revocation on A: refused by B as soon as A has answered, trial after trial.
        assert_eq!(a.connect("alice").await, id);
        let (at, rt) = a.db().raw_connection_secrets(&id).await.unwrap();
        for trial in 0..10 {
            if trial > 0 {
                // Reinstate the row as it was (the trigger tells B; not a product path).
                sqlx::query(
                    "UPDATE connections SET status = 'active', access_token = $2, refresh_token = $3, \
                     expires_at = $4 WHERE id = $1",
                )
                .bind(&id)
                .bind(&at)
                .bind(&rt)
                .bind(mcp_connect::time::now() + 3000)
                .execute(&a.db().pool)
                .await
                .unwrap();
                after_window().await;
            }
            cached_token(&b).await;
            let (s, v) = a.delete(&format!("/v1/connections/{id}")).await;
            assert_eq!(s, StatusCode::OK, "{v}");
            let (s, v) = b.token("alice").await;
            assert_eq!(
                (s, v["error"].as_str()),
                (StatusCode::NOT_FOUND, Some("not_connected")),
                "trial {trial}: B served a revoked connection after A's DELETE returned: {v}"
            );
        }
        b.shutdown_keeping_database().await;
        a.shutdown().await;
    }
);

/// `POST /v1/tokens` for alice as the client with `key`.
async fn fetch_as(app: &TestApp, key: &str) -> (StatusCode, Value) {
    reply(
        app.api
            .post(format!("{}/v1/tokens", app.url))
            .bearer_auth(key)
            .json(&json!({"subject": "alice", "provider": "acme"})),
    )
    .await
}

/// Fetches as the client with `key` on `app` until the answer (a token) came from the cache.
async fn cached_fetch_as(app: &TestApp, key: &str) {
    for _ in 0..20 {
        wait_until_usable(app).await;
        let (s, v) = fetch_as(app, key).await;
        assert_eq!(s, StatusCode::OK, "{v}");
        let before = stats(app).hits;
        let (s, v) = fetch_as(app, key).await;
        assert_eq!(s, StatusCode::OK, "{v}");
        if stats(app).hits > before {
            return;
        }
    }
    panic!("never a cache hit: {:?}", stats(app));
}

async fn grant_other_app(a: &TestApp, id: &str) {
    sqlx::query(
        "INSERT INTO connection_clients (connection_id, client_id, granted_at) VALUES ($1, 'other-mcp', $2)",
    )
    .bind(id)
    .bind(mcp_connect::time::now())
    .execute(&a.db().pool)
    .await
    .unwrap();
}

on_both_databases!(
    grants_changed_on_one_replica_reach_the_cache_of_another,
    |kind| async move {
        let a = TestApp::spawn(kind).await;
        let id = a.connect("alice").await;
        let b = replica(&a, &Options::default()).await;
        let window = b.state.token_cache.window();
        let after_window = || tokio::time::sleep(window + Duration::from_millis(20));

        // Only Demo MCP was approved; B caches the row with that answer.
        cached_fetch_as(&b, API_KEY).await;
        let (s, v) = fetch_as(&b, OTHER_API_KEY).await;
        assert_eq!(
            (s, v["error"].as_str()),
            (StatusCode::NOT_FOUND, Some("not_connected")),
            "{v}"
        );
        assert!(b.state.token_cache.holds(&id));

        // A grant to other-mcp written on A's side (the trigger tells B; an operator's SQL
        // here, the consent page in the product): B lets other-mcp use it within the window.
        grant_other_app(&a, &id).await;
        after_window().await;
        cached_fetch_as(&b, OTHER_API_KEY).await;

        // other-mcp disconnects on A (Demo MCP keeps the grant): refused by B as soon as A has
        // answered, from B's cache, trial after trial.
        for trial in 0..5 {
            if trial > 0 {
                grant_other_app(&a, &id).await;
                after_window().await;
                cached_fetch_as(&b, OTHER_API_KEY).await;
            }
            let r = a
                .api
                .delete(format!("{}/v1/connections/{id}", a.url))
                .bearer_auth(OTHER_API_KEY)
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), StatusCode::OK);
            let v: Value = r.json().await.unwrap();
            assert_eq!(v["tokens_deleted"], false, "{v}");
            let (s, v) = fetch_as(&b, OTHER_API_KEY).await;
            assert_eq!(
                (s, v["error"].as_str()),
                (StatusCode::NOT_FOUND, Some("not_connected")),
                "trial {trial}: B let other-mcp use the grant after A's DELETE returned: {v}"
            );
            cached_fetch_as(&b, API_KEY).await;
        }

        // Taken away by SQL on A's side: B refuses within the window.
        grant_other_app(&a, &id).await;
        after_window().await;
        cached_fetch_as(&b, OTHER_API_KEY).await;
        sqlx::query(
            "DELETE FROM connection_clients WHERE connection_id = $1 AND client_id = 'other-mcp'",
        )
        .bind(&id)
        .execute(&a.db().pool)
        .await
        .unwrap();
        after_window().await;
        let (s, v) = fetch_as(&b, OTHER_API_KEY).await;
        assert_eq!(
            (s, v["error"].as_str()),
            (StatusCode::NOT_FOUND, Some("not_connected")),
            "B missed a grant deleted on A: {v}"
        );
        b.shutdown_keeping_database().await;
        a.shutdown().await;
    }
);

/// The listener's connection is killed: B stops using its cache at once and, once the listener
/// is back, starts from an empty cache (what changed meanwhile was never announced to it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_listener_turns_the_cache_off_until_it_is_back_and_flushed() {
    let a = TestApp::spawn(DbKind::Postgres).await;
    let id = a.connect("alice").await;
    let b = replica(&a, &Options::default()).await;
    let window = b.state.token_cache.window();
    let t1 = cached_token(&b).await;

    // A change B is never told of (the trigger off for it): B keeps serving its row, which is
    // what a lost notification would do — and why a lost listener must flush.
    let sealed = a
        .state
        .config
        .keys
        .seal(
            b"a-token-nobody-announced",
            &connection_aad(&id, "access_token"),
        )
        .unwrap();
    let mut tx = a.db().pool.begin().await.unwrap();
    for sql in [
        "ALTER TABLE connections DISABLE TRIGGER connections_changed",
        "UPDATE connections SET access_token = $1",
        "ALTER TABLE connections ENABLE TRIGGER connections_changed",
    ] {
        let q = sqlx::query(sql);
        let q = if sql.contains("$1") {
            q.bind(&sealed)
        } else {
            q
        };
        q.execute(&mut *tx).await.unwrap();
    }
    tx.commit().await.unwrap();
    tokio::time::sleep(window * 2).await;
    assert_eq!(token(&b).await, t1, "B's cache served the row it holds");

    let losses = stats(&b).sync_losses;
    let (killed,): (bool,) = sqlx::query_as(
        "SELECT COALESCE(bool_or(pg_terminate_backend(pid)), false) FROM pg_stat_activity \
         WHERE application_name = $1",
    )
    .bind(format!("mcp-connect listener {}", b.state.process_tag))
    .fetch_one(&a.db().pool)
    .await
    .unwrap();
    assert!(killed, "no listener connection found");
    let started = Instant::now();
    while stats(&b).sync_losses == losses {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the lost listener went unnoticed"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // From the loss on, B answers from the database: never the row it held.
    let bypasses = stats(&b).bypasses;
    while !b.state.token_cache.is_usable() {
        assert_eq!(token(&b).await, "a-token-nobody-announced");
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "the listener never came back"
        );
    }
    assert!(stats(&b).bypasses > bypasses, "{:?}", stats(&b));
    // Back: the cache is in use again, and started empty.
    assert_eq!(cached_token(&b).await, "a-token-nobody-announced");
    b.shutdown_keeping_database().await;
    a.shutdown().await;
}

on_both_databases!(
    a_revocation_on_one_replica_is_refused_by_a_serve_process_at_once,
    |kind| async move {
        // B is a real `mcp-connect serve` process; its cache state is only visible from
        // outside, so this checks the answers.
        let a = TestApp::spawn(kind).await;
        let id = a.connect("alice").await;
        let (b_url, _child) = a.spawn_replica_process(&Options::default()).await;
        let api = reqwest::Client::new();
        let fetch_b = || async {
            let r = api
                .post(format!("{b_url}/v1/tokens"))
                .bearer_auth(API_KEY)
                .json(&json!({"subject": "alice", "provider": "acme"}))
                .send()
                .await
                .unwrap();
            let s = r.status();
            (s, r.json::<Value>().await.unwrap())
        };
        // Let B's change feed come up, and its cache fill.
        tokio::time::sleep(Duration::from_millis(300)).await;
        for _ in 0..3 {
            let (s, v) = fetch_b().await;
            assert_eq!(s, StatusCode::OK, "{v}");
        }
        let (s, v) = a.delete(&format!("/v1/connections/{id}")).await;
        assert_eq!(s, StatusCode::OK, "{v}");
        let (s, v) = fetch_b().await;
        assert_eq!(
            (s, v["error"].as_str()),
            (StatusCode::NOT_FOUND, Some("not_connected")),
            "{v}"
        );
        a.shutdown().await;
    }
);

/// One value of the `/metrics` exposition (`name{labels}` exactly as written there).
fn scraped(body: &str, series: &str) -> u64 {
    let prefix = format!("{series} ");
    body.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("no {series} in\n{body}"))
        .trim()
        .parse()
        .unwrap()
}

on_both_databases!(
    the_cache_reports_its_lookups_and_size_on_metrics,
    |kind| async move {
        let app = TestApp::spawn(kind).await;
        app.connect("alice").await;
        // The figures are compared at a moment they held still across the scrape, with the
        // entry in the cache: under load the change feed may fall behind between two reads and
        // the cache flush itself, which is the figures' business, not this comparison's.
        let mut held_still = None;
        for _ in 0..10 {
            // A miss that fills, then a hit (later rounds: hits, or a refill after a flush).
            cached_token(&app).await;
            let s = stats(&app);
            let body = app.metrics_text().await;
            if s.entries == 1 && stats(&app) == s {
                held_still = Some((s, body));
                break;
            }
        }
        let (s, body) = held_still.expect("the cache's figures never held still across a scrape");
        assert!(
            s.hits >= 1 && s.misses >= 1 && s.fills >= 1 && s.entries == 1,
            "{s:?}"
        );
        for (series, want) in [
            (
                "mcp_connect_token_cache_lookups_total{result=\"hit\"}",
                s.hits,
            ),
            (
                "mcp_connect_token_cache_lookups_total{result=\"miss\"}",
                s.misses,
            ),
            (
                "mcp_connect_token_cache_lookups_total{result=\"bypass\"}",
                s.bypasses,
            ),
            ("mcp_connect_token_cache_fills_total", s.fills),
            ("mcp_connect_token_cache_entries", s.entries),
            ("mcp_connect_token_cache_bytes", s.bytes),
        ] {
            assert_eq!(scraped(&body, series), want, "{series}");
        }
        assert!(scraped(&body, "mcp_connect_token_cache_usable") <= 1);
        for counter in ["invalidations", "flushes", "sync_losses"] {
            scraped(&body, &format!("mcp_connect_token_cache_{counter}_total"));
        }
        assert!(!body.contains("alice"), "no subject in the cache's figures");
        app.shutdown().await;
    }
);
