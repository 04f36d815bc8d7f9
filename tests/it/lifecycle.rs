//! After the first connect: refresh (one redemption at a time across replicas), invalid_grant,
//! revocation at the provider, reconnect in place, outages.

use reqwest::StatusCode;
use secrecy::ExposeSecret;
use serde_json::{Value, json};

use crate::harness::*;
use crate::on_both_databases;

/// Tokens from the upstream live 120 s; asking with a 300 s minimum forces a refresh.
fn short_lived() -> Options {
    Options {
        access_token_ttl: 120,
        ..Options::default()
    }
}

on_both_databases!(
    near_expiry_token_is_refreshed_and_rotation_keeps_working,
    |kind| async move {
        let app = TestApp::spawn_with(kind, short_lived()).await;
        app.connect("alice").await;
        let (_, t0) = app.token("alice").await;
        for _ in 0..3 {
            app.age("alice").await;
            let (s, t) = app
                .post(
                    "/v1/tokens",
                    json!({"subject": "alice", "provider": "acme", "min_ttl_seconds": 300}),
                )
                .await;
            assert_eq!(s, StatusCode::OK, "{t}");
            assert_ne!(t["access_token"], t0["access_token"]);
            assert_eq!(
                app.peers
                    .whoami(t["access_token"].as_str().unwrap())
                    .await
                    .0,
                StatusCode::OK
            );
        }
        let stats = app.peers.stats().await;
        assert_eq!(stats["refresh_token"], 3, "{stats}");
        assert_eq!(stats["refresh_invalid_grant"], 0, "{stats}");
        let (_, list) = app.get("/v1/connections?subject=alice").await;
        assert!(list["connections"][0]["last_refresh_at"].is_string());
        app.shutdown().await;
    }
);

/// N concurrent requests over two replicas (this process and another `mcp-connect` process)
/// on one database: one upstream refresh.
async fn storm(kind: DbKind, n: usize) {
    let a = TestApp::spawn_with(kind, short_lived()).await;
    a.connect("alice").await;
    a.age("alice").await;
    let (b_url, _replica) = a.spawn_replica_process(&short_lived()).await;
    let before = a.peers.stats().await["refresh_token"].as_i64().unwrap();
    let mut tasks = Vec::new();
    for i in 0..n {
        let base = if i % 2 == 0 {
            a.url.clone()
        } else {
            b_url.clone()
        };
        let api = a.api.clone();
        tasks.push(tokio::spawn(async move {
            fetch_token(
                &api,
                &base,
                json!({"subject": "alice", "provider": "acme", "min_ttl_seconds": 300}),
            )
            .await
        }));
    }
    let mut tokens = std::collections::HashSet::new();
    for t in tasks {
        let (s, v) = t.await.unwrap();
        assert_eq!(s, StatusCode::OK, "{v}");
        tokens.insert(v["access_token"].as_str().unwrap().to_owned());
    }
    let stats = a.peers.stats().await;
    assert_eq!(
        stats["refresh_token"].as_i64().unwrap() - before,
        1,
        "exactly one upstream refresh: {stats}"
    );
    assert_eq!(stats["refresh_invalid_grant"], 0, "{stats}");
    assert_eq!(tokens.len(), 1, "everyone got the one new token");
    for t in &tokens {
        assert_eq!(a.peers.whoami(t).await.0, StatusCode::OK);
    }
    a.shutdown().await;
}

on_both_databases!(
    concurrent_requests_on_two_replicas_cause_one_refresh,
    |kind| async move {
        storm(kind, 24).await;
    }
);

on_both_databases!(
    a_stalled_provider_does_not_cause_a_second_redemption,
    |kind| async move {
        let app = TestApp::spawn_with(kind, short_lived()).await;
        app.connect("alice").await;
        app.age("alice").await;
        let http = reqwest::Client::new();
        http.post(format!("{}/__stall?ms=3000", app.peers.upstream))
            .send()
            .await
            .unwrap();
        let before = app.peers.stats().await["refresh_token"].as_i64().unwrap();
        let mut tasks = Vec::new();
        for _ in 0..6 {
            let api = app.api.clone();
            let base = app.url.clone();
            tasks.push(tokio::spawn(async move {
                fetch_token(
                    &api,
                    &base,
                    json!({"subject": "alice", "provider": "acme", "min_ttl_seconds": 300}),
                )
                .await
            }));
        }
        for t in tasks {
            let (s, v) = t.await.unwrap();
            assert_eq!(s, StatusCode::OK, "{v}");
        }
        http.post(format!("{}/__stall?ms=0", app.peers.upstream))
            .send()
            .await
            .unwrap();
        let stats = app.peers.stats().await;
        assert_eq!(
            stats["refresh_token"].as_i64().unwrap() - before,
            1,
            "{stats}"
        );
        assert_eq!(stats["refresh_invalid_grant"], 0);
        app.shutdown().await;
    }
);

on_both_databases!(
    transient_provider_errors_are_retried_and_keep_the_grant,
    |kind| async move {
        let app = TestApp::spawn_with(kind, short_lived()).await;
        app.connect("alice").await;
        let http = reqwest::Client::new();
        // Two failures, then success: the retry inside one request gets through.
        app.age("alice").await;
        http.post(format!("{}/__fail?status=503&count=2", app.peers.upstream))
            .send()
            .await
            .unwrap();
        let (s, v) = app
            .post(
                "/v1/tokens",
                json!({"subject": "alice", "provider": "acme", "min_ttl_seconds": 300}),
            )
            .await;
        assert_eq!(s, StatusCode::OK, "{v}");
        // Many failures: the still-valid token is handed out, and the grant is not marked dead.
        http.post(format!("{}/__fail?status=503&count=10", app.peers.upstream))
            .send()
            .await
            .unwrap();
        app.age("alice").await;
        let (s, v2) = app
            .post(
                "/v1/tokens",
                json!({"subject": "alice", "provider": "acme", "min_ttl_seconds": 300}),
            )
            .await;
        assert_eq!(s, StatusCode::OK, "{v2}");
        assert_eq!(v["access_token"], v2["access_token"]);
        http.post(format!("{}/__fail?status=503&count=0", app.peers.upstream))
            .send()
            .await
            .unwrap();
        let (_, list) = app.get("/v1/connections?subject=alice").await;
        assert_eq!(list["connections"][0]["status"], "active");
        assert!(
            list["connections"][0]["last_error"]
                .as_str()
                .unwrap()
                .contains("unreachable"),
            "{list}"
        );
        let (s, _) = app
            .post(
                "/v1/tokens",
                json!({"subject": "alice", "provider": "acme", "min_ttl_seconds": 300}),
            )
            .await;
        assert_eq!(s, StatusCode::OK);
        app.shutdown().await;
    }
);

on_both_databases!(
    dead_grant_needs_reauth_and_reconnect_repairs_it_in_place,
    |kind| async move {
        let app = TestApp::spawn_with(kind, short_lived()).await;
        let id = app.connect("alice").await;
        // The user revokes the grant at the provider behind our back.
        let c = app.db().get_connection(&id).await.unwrap().unwrap();
        let rt = c.refresh_token(&app.state.config.keys).unwrap().unwrap();
        let s = app.peers.revoke_refresh_token(rt.expose_secret()).await;
        assert!(s.is_success(), "{s}");
        app.age("alice").await;
        let (s, v) = app
            .post(
                "/v1/tokens",
                json!({"subject": "alice", "provider": "acme", "min_ttl_seconds": 300}),
            )
            .await;
        assert_eq!(
            (s, v["error"].as_str()),
            (StatusCode::CONFLICT, Some("reauthorization_required")),
            "{v}"
        );
        let (_, list) = app.get("/v1/connections?subject=alice").await;
        assert_eq!(list["connections"][0]["status"], "needs_reauth");
        assert_eq!(list["connections"][0]["id"], id.as_str());
        let (s, v) = app
            .post(
                "/v1/tokens",
                json!({"subject": "alice", "provider": "acme", "elicit": true}),
            )
            .await;
        assert_eq!(s, StatusCode::CONFLICT);
        assert_eq!(v["error"], "reauthorization_required");
        assert!(v["elicitation"]["url"].is_string(), "{v}");
        // Through /connect again: same connection, active.
        let again = app.connect("alice").await;
        assert_eq!(again, id);
        let (s, t) = app.token("alice").await;
        assert_eq!(s, StatusCode::OK, "{t}");
        assert_eq!(t["connection_id"], id.as_str());
        app.shutdown().await;
    }
);

on_both_databases!(
    revocation_reaches_the_provider_and_deletes_the_tokens,
    |kind| async move {
        let app = TestApp::spawn(kind).await;
        let id = app.connect("alice").await;
        let (_, t) = app.token("alice").await;
        let access = t["access_token"].as_str().unwrap();
        assert_eq!(app.peers.whoami(access).await.0, StatusCode::OK);
        let before = app.peers.stats().await["revocations"].as_i64().unwrap();
        let (s, report) = app.delete(&format!("/v1/connections/{id}")).await;
        assert_eq!(s, StatusCode::OK, "{report}");
        assert_eq!(report["refresh_token"], "revoked");
        assert_eq!(report["access_token"], "revoked");
        assert_eq!(report["tokens_deleted"], true);
        assert_eq!(
            app.peers.stats().await["revocations"].as_i64().unwrap() - before,
            2
        );
        assert_eq!(app.peers.whoami(access).await.0, StatusCode::UNAUTHORIZED);
        let (at, rt) = app.db().raw_connection_secrets(&id).await.unwrap();
        assert!(at.is_none() && rt.is_none());
        let (s, v) = app.token("alice").await;
        assert_eq!(
            (s, v["error"].as_str()),
            (StatusCode::NOT_FOUND, Some("not_connected"))
        );
        let (_, list) = app.get("/v1/connections?subject=alice").await;
        assert_eq!(list["connections"][0]["status"], "revoked");
        app.shutdown().await;
    }
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revocation_with_the_provider_down_still_deletes_and_says_so() {
    let mut app = TestApp::spawn_with(DbKind::Sqlite, Options::default()).await;
    let id = app.connect("alice").await;
    app.peers.kill().await;
    let (s, report) = app.delete(&format!("/v1/connections/{id}")).await;
    assert_eq!(s, StatusCode::OK, "{report}");
    assert_eq!(report["tokens_deleted"], true);
    assert_eq!(report["refresh_token"], "failed", "{report}");
    assert!(report["message"].as_str().unwrap().contains("failed"));
    let (at, rt) = app.db().raw_connection_secrets(&id).await.unwrap();
    assert!(at.is_none() && rt.is_none());
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn database_outage_gives_503_and_the_service_recovers() {
    let app = TestApp::spawn(DbKind::Postgres).await;
    app.connect("alice").await;
    let name = app.db_url.rsplit('/').next().unwrap().to_owned();
    let admin = postgres_admin().await;
    sqlx::query(&format!("ALTER DATABASE {name} ALLOW_CONNECTIONS false"))
        .execute(&admin)
        .await
        .unwrap();
    sqlx::query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1")
        .bind(&name)
        .execute(&admin)
        .await
        .unwrap();
    let (s, v) = app.token("alice").await;
    assert_eq!(
        (s, v["error"].as_str()),
        (StatusCode::SERVICE_UNAVAILABLE, Some("unavailable")),
        "{v}"
    );
    let (s, _) = app.get("/readyz").await;
    assert_eq!(s, StatusCode::SERVICE_UNAVAILABLE);
    sqlx::query(&format!("ALTER DATABASE {name} ALLOW_CONNECTIONS true"))
        .execute(&admin)
        .await
        .unwrap();
    let mut ok = false;
    for _ in 0..20 {
        let (s, _) = app.token("alice").await;
        if s == StatusCode::OK {
            ok = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
    assert!(
        ok,
        "the service recovers by itself when the database returns"
    );
    app.shutdown().await;
}

/// The pool pings only connections that sat idle (a hot connection skips the round trip): one
/// the server dropped while idle is found dead and replaced, and the token read is repeated on
/// another connection if it got one that was dropped after its last use.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pooled_connections_dropped_while_idle_are_replaced_without_an_error() {
    let app = TestApp::spawn(DbKind::Postgres).await;
    app.connect("alice").await;
    let name = app.db_url.rsplit('/').next().unwrap().to_owned();
    let admin = postgres_admin().await;
    tokio::time::sleep(std::time::Duration::from_millis(1200)).await;
    sqlx::query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1")
        .bind(&name)
        .execute(&admin)
        .await
        .unwrap();
    for _ in 0..5 {
        let (s, v) = app.token("alice").await;
        assert_eq!(s, StatusCode::OK, "{v}");
    }
    app.shutdown().await;
}

on_both_databases!(
    tokens_are_refreshed_ahead_in_the_background,
    |kind| async move {
        let app = TestApp::spawn_with(
            kind,
            Options {
                refresh_ahead: 300,
                ..short_lived()
            },
        )
        .await;
        app.connect("alice").await;
        let (_, before) = app.token("alice").await;
        let base = app.peers.stats().await["refresh_token"].as_i64().unwrap();
        app.age("alice").await;
        // The provider counts the redemption before we store its answer: wait for the stored
        // token (a plain fetch, which must not refresh by itself: 120 s left > 60 s asked).
        let mut after = serde_json::Value::Null;
        for _ in 0..40 {
            let (s, t) = app.token("alice").await;
            assert_eq!(s, StatusCode::OK, "{t}");
            if t["access_token"] != before["access_token"] {
                after = t;
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(250)).await;
        }
        assert!(
            after.is_object(),
            "the background task refreshed the expiring token"
        );
        assert_eq!(
            app.peers
                .whoami(after["access_token"].as_str().unwrap())
                .await
                .0,
            StatusCode::OK
        );
        tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
        let stats = app.peers.stats().await;
        assert_eq!(
            stats["refresh_token"].as_i64().unwrap(),
            base + 1,
            "no second redemption: {stats}"
        );
        assert_eq!(stats["refresh_invalid_grant"], 0);
        app.shutdown().await;
    }
);

on_both_databases!(
    a_replica_killed_while_holding_the_refresh_lock_does_not_block_the_next,
    |kind| async move {
        let app = TestApp::spawn_with(kind, short_lived()).await;
        app.connect("alice").await;
        app.age("alice").await;
        // A second replica, as its own process.
        let (url, mut replica) = app.spawn_replica_process(&short_lived()).await;
        let http = reqwest::Client::new();
        let before = app.peers.stats().await;
        http.post(format!("{}/__stall?ms=2500", app.peers.upstream))
            .send()
            .await
            .unwrap();
        let doomed = {
            let http = http.clone();
            let url = url.clone();
            tokio::spawn(async move {
                fetch_token(
                    &http,
                    &url,
                    json!({"subject": "alice", "provider": "acme", "min_ttl_seconds": 300}),
                )
                .await
            })
        };
        // The replica is now inside its refresh, holding the lock, waiting on the provider.
        let mut stalled = false;
        for _ in 0..50 {
            if app.peers.stats().await["stalled_requests"]
                .as_i64()
                .unwrap()
                > before["stalled_requests"].as_i64().unwrap()
            {
                stalled = true;
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        assert!(stalled, "the replica reached the provider");
        replica.kill().await.unwrap();
        let _ = doomed.await;
        http.post(format!("{}/__stall?ms=0", app.peers.upstream))
            .send()
            .await
            .unwrap();
        let (s, v) = app
            .post(
                "/v1/tokens",
                json!({"subject": "alice", "provider": "acme", "min_ttl_seconds": 300}),
            )
            .await;
        assert_eq!(s, StatusCode::OK, "{v}");
        assert_eq!(
            app.peers
                .whoami(v["access_token"].as_str().unwrap())
                .await
                .0,
            StatusCode::OK
        );
        let after = app.peers.stats().await;
        assert_eq!(
            after["refresh_invalid_grant"], before["refresh_invalid_grant"],
            "{after}"
        );
        assert_eq!(
            after["refresh_token"].as_i64().unwrap() - before["refresh_token"].as_i64().unwrap(),
            1,
            "{after}"
        );
        app.shutdown().await;
    }
);

on_both_databases!(
    a_connection_row_with_an_unknown_status_is_never_served,
    |kind| async move {
        let app = TestApp::spawn(kind).await;
        let id = app.connect("alice").await;
        let (s, _) = app.token("alice").await;
        assert_eq!(s, StatusCode::OK);
        // A status this version does not know (a newer binary's, or a corrupted row) must not
        // read as a working grant.
        sqlx::query("UPDATE connections SET status = 'paused' WHERE id = $1")
            .bind(&id)
            .execute(&app.db().pool)
            .await
            .unwrap();
        // A raw write reaches the token cache within its sync window (docs/token-cache.md).
        app.wait_for_cache_sync().await;
        let (s, v) = app.token("alice").await;
        assert_eq!(s, StatusCode::INTERNAL_SERVER_ERROR, "{v}");
        assert!(v.get("access_token").is_none(), "{v}");
        let e = app.db().get_connection(&id).await.unwrap_err().to_string();
        assert!(e.contains(&id) && e.contains("paused"), "{e}");
        app.shutdown().await;
    }
);

/// SIGTERM drains: readiness goes off first while requests are still served (so a load
/// balancer takes the replica out), then a long poll in flight is answered rather than cut off,
/// and the process exits cleanly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_turns_readiness_off_first_then_answers_long_polls_and_exits() {
    let app = TestApp::spawn(DbKind::Postgres).await;
    app.connect("alice").await;
    let e = app.elicit("bob").await;
    let (replica, mut child) = app
        .spawn_replica_process_with_env(
            &Options::default(),
            &[("MCP_CONNECT_DRAIN_DELAY_SECONDS", "2")],
        )
        .await;
    let http = reqwest::Client::new();
    let poll = {
        let http = http.clone();
        let url = format!(
            "{replica}/v1/elicitations/{}?wait=30",
            e["id"].as_str().unwrap()
        );
        tokio::spawn(async move {
            let r = http.get(url).bearer_auth(API_KEY).send().await.unwrap();
            (r.status(), r.json::<Value>().await.unwrap())
        })
    };
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let pid = child.id().unwrap().to_string();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(killed.success());
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    // Draining: not ready, still serving.
    let r = http.get(format!("{replica}/readyz")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(r.json::<Value>().await.unwrap()["status"], "draining");
    let r = http
        .post(format!("{replica}/v1/tokens"))
        .bearer_auth(API_KEY)
        .json(&json!({"subject": "alice", "provider": "acme"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    // The long poll is answered (still pending) once the delay is over, not cut off.
    let (s, v) = poll.await.unwrap();
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["status"], "pending");
    let status = tokio::time::timeout(std::time::Duration::from_secs(20), child.wait())
        .await
        .expect("the replica exits after draining")
        .unwrap();
    assert!(status.success(), "{status:?}");
    app.shutdown().await;
}
