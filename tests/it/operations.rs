//! Operator tooling: key rotation while the service serves, and the CLI commands run as the real
//! binary against the service's database.

use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use mcp_connect::crypto::{connection_aad, generate_key};
use mcp_connect::db::Db;
use reqwest::StatusCode;
use secrecy::SecretString;
use serde_json::{Value, json};

use crate::admin::{audit_rows, insert_bulk};
use crate::harness::*;
use crate::on_both_databases;

/// Options whose ring is `keys` in that order (the harness writes `["{key}"]`).
fn with_keys(keys: &[&str], extra: &str) -> Options {
    Options {
        key: keys.join("\", \""),
        extra_toml: extra.to_owned(),
        ..Options::default()
    }
}

/// Peers that belong to nobody (the app that started them keeps them; see `restart`).
pub fn no_peers() -> Peers {
    Peers {
        identity: String::new(),
        upstream: String::new(),
        child: None,
    }
}

async fn restart(app: TestApp, opts: &Options) -> TestApp {
    let mut app = app;
    let peers = std::mem::replace(&mut app.peers, no_peers());
    let db_url = app.db_url.clone();
    app.shutdown_keeping_database().await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    TestApp::spawn_on(listener, peers, db_url, opts).await
}

async fn not_under(db: &Db, key_id: &str) -> i64 {
    let prefix = format!("{key_id}.");
    let (n,): (i64,) = sqlx::query_as(
        "SELECT COUNT(*) FROM connections WHERE (access_token IS NOT NULL AND substr(access_token, 1, length($1)) <> $1) \
         OR (refresh_token IS NOT NULL AND substr(refresh_token, 1, length($1)) <> $1)",
    )
    .bind(&prefix)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    n
}

/// The operator's procedure: new key first in the ring, restart, `keys rotate`, drop the old
/// key, restart. Token fetches (with real refreshes racing the rotation) never fail.
async fn rotate_while_serving(kind: DbKind, n: usize) {
    let k1 = generate_key("k1");
    let k2 = generate_key("k2");
    let a = TestApp::spawn_with(kind, with_keys(&[&k1], "")).await;
    a.connect("alice").await;
    let started = Instant::now();
    insert_bulk(&a, &key_ring(&[&k1]), n, "active").await;
    eprintln!("inserted {n} connections in {:?}", started.elapsed());
    let b = restart(a, &with_keys(&[&k2, &k1], "")).await;

    let stop = Arc::new(AtomicBool::new(false));
    let ok = Arc::new(AtomicU64::new(0));
    let mut fetchers = Vec::new();
    // One client keeps forcing real refreshes of alice (new tokens, rotated refresh tokens),
    // others read bulk connections.
    for worker in 0..3 {
        let (stop, ok, api, base) = (stop.clone(), ok.clone(), b.api.clone(), b.url.clone());
        fetchers.push(tokio::spawn(async move {
            let mut i = worker * 7919;
            let mut failures = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                if worker == 0 {
                    let (s, v) = fetch_token(
                        &api,
                        &base,
                        json!({"subject": "alice", "provider": "acme", "force_refresh": true}),
                    )
                    .await;
                    if s != StatusCode::OK {
                        failures.push(format!("alice: {s} {v}"));
                    }
                } else {
                    i = (i + 101) % n;
                    let (s, v) = fetch_token(
                        &api,
                        &base,
                        json!({"subject": format!("bulk-{i:05}"), "provider": "acme"}),
                    )
                    .await;
                    let t = v["access_token"].as_str().unwrap_or_default();
                    if s != StatusCode::OK
                        || (t != format!("bulk-at-{i}") && t != format!("bulk-at-{i}-v2"))
                    {
                        failures.push(format!("bulk-{i}: {s} {v}"));
                    }
                }
                ok.fetch_add(1, Ordering::Relaxed);
            }
            failures
        }));
    }
    // Another writer stores new tokens for bulk rows while the rotation runs, as refreshes in
    // the service would (sealed with the service's current key, fenced by token_version). The
    // rotation must never put an older value back over one of these.
    let rewriter = {
        let (stop, state) = (stop.clone(), b.state.clone());
        tokio::spawn(async move {
            let issuer = state.identity.issuer().to_owned();
            let mut rewritten = std::collections::HashMap::new();
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) && rewritten.len() < n / 2 {
                i = (i + 37) % n;
                let subject = format!("bulk-{i:05}");
                let c = state
                    .db
                    .find_accounts(&issuer, &subject, "acme")
                    .await
                    .unwrap()
                    .remove(0);
                let at = SecretString::from(format!("bulk-at-{i}-v2"));
                let rt = SecretString::from(format!("bulk-rt-{i}-v2"));
                let stored = mcp_connect::db::connections::save_refreshed_tokens(
                    &mut state.db.pool.acquire().await.unwrap(),
                    &state.config.keys,
                    &c.id,
                    c.token_version,
                    &mcp_connect::db::connections::NewTokens {
                        access_token: &at,
                        refresh_token: Some(&rt),
                        token_type: "Bearer",
                        expires_at: None,
                        scopes: &["api".to_owned()],
                        account_label: None,
                    },
                )
                .await
                .unwrap();
                if stored {
                    rewritten.insert(c.id, i);
                }
                tokio::task::yield_now().await;
            }
            rewritten
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;

    // `keys rotate` is another process: its own pool on the same database.
    let cli_db = Db::connect(&b.db_url.parse().unwrap()).await.unwrap();
    let started = Instant::now();
    let report = mcp_connect::grants::rotation::rotate(
        &cli_db,
        &key_ring(&[&k2, &k1]),
        500,
        "test",
        &|_| {},
    )
    .await
    .unwrap();
    eprintln!("rotated {report:?} in {:?}", started.elapsed());
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::Relaxed);
    for f in fetchers {
        let failures = f.await.unwrap();
        assert!(
            failures.is_empty(),
            "token fetches failed during rotation: {failures:?}"
        );
    }
    assert!(
        ok.load(Ordering::Relaxed) > 10,
        "fetches ran during the rotation"
    );
    let rewritten = rewriter.await.unwrap();
    assert!(
        !rewritten.is_empty(),
        "tokens were rewritten during the rotation"
    );
    assert_eq!(report.remaining, 0, "{report:?}");
    assert!(report.unreadable.is_empty(), "{report:?}");
    assert!(
        report.rows_rotated as usize + rewritten.len() >= n,
        "{report:?}"
    );
    assert_eq!(not_under(&cli_db, "k2").await, 0);
    assert_eq!(
        mcp_connect::grants::rotation::count_pending(&cli_db, &key_ring(&[&k2]))
            .await
            .unwrap(),
        0
    );

    // Every value opens with the new key alone, and is what was stored.
    let only_new = key_ring(&[&k2]);
    let rows: Vec<(String, String, Option<String>, Option<String>)> =
        sqlx::query_as("SELECT id, subject, access_token, refresh_token FROM connections")
            .fetch_all(&cli_db.pool)
            .await
            .unwrap();
    assert_eq!(rows.len(), n + 1);
    for (id, subject, at, rt) in &rows {
        let at = only_new
            .open(at.as_deref().unwrap(), &connection_aad(id, "access_token"))
            .unwrap();
        only_new
            .open(rt.as_deref().unwrap(), &connection_aad(id, "refresh_token"))
            .unwrap();
        if let Some(i) = subject.strip_prefix("bulk-") {
            let i: usize = i.parse().unwrap();
            let expected = if rewritten.contains_key(id.as_str()) {
                format!("bulk-at-{i}-v2")
            } else {
                format!("bulk-at-{i}")
            };
            assert_eq!(
                String::from_utf8(at).unwrap(),
                expected,
                "a newer value was overwritten"
            );
        }
    }
    assert_eq!(audit_rows(&b, "keys.rotated").await[0].0, "test");

    // The old key is removed from the configuration: the service starts and serves everything,
    // and alice's refresh token (rotated by the provider during the run) still works.
    let c = restart(b, &with_keys(&[&k2], "")).await;
    let (s, t) = c
        .post(
            "/v1/tokens",
            json!({"subject": "alice", "provider": "acme", "force_refresh": true}),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{t}");
    assert_eq!(
        c.peers.whoami(t["access_token"].as_str().unwrap()).await.0,
        StatusCode::OK
    );
    assert_eq!(c.peers.stats().await["refresh_invalid_grant"], 0);
    for i in [0, n / 2, n - 1] {
        let (s, v) = c.token(&format!("bulk-{i:05}")).await;
        assert_eq!(s, StatusCode::OK, "{v}");
        assert!(
            v["access_token"]
                .as_str()
                .unwrap()
                .starts_with(&format!("bulk-at-{i}")),
            "{v}"
        );
    }
    c.shutdown().await;
}

on_both_databases!(keys_rotate_while_tokens_are_served, |kind| async move {
    rotate_while_serving(kind, 1_000).await;
});

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_rotate_ten_thousand_connections_while_tokens_are_served() {
    rotate_while_serving(DbKind::Postgres, 10_000).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotation_never_overwrites_a_value_that_changed_meanwhile() {
    // A row re-sealed by someone else between the read and the write: the conditional UPDATE
    // leaves it alone (simulated by sealing with a key the rotation does not know first).
    let k1 = generate_key("k1");
    let k2 = generate_key("k2");
    let app = TestApp::spawn_with(DbKind::Sqlite, with_keys(&[&k1], "")).await;
    let id = app.connect("alice").await;
    let db = app.db().clone();
    let (at_before, _) = db.raw_connection_secrets(&id).await.unwrap();
    // A refresh under the service's key lands: the value differs from what a stale reader saw.
    let (s, _) = app
        .post(
            "/v1/tokens",
            json!({"subject": "alice", "provider": "acme", "force_refresh": true}),
        )
        .await;
    assert_eq!(s, StatusCode::OK);
    let (at_now, _) = db.raw_connection_secrets(&id).await.unwrap();
    assert_ne!(at_before, at_now);
    let r = sqlx::query(
        "UPDATE connections SET access_token = 'k2.x' WHERE id = $1 AND COALESCE(access_token, '') = $2",
    )
    .bind(&id)
    .bind(at_before.unwrap())
    .execute(&db.pool)
    .await
    .unwrap();
    assert_eq!(r.rows_affected(), 0, "the stale write is refused");
    // Rotating twice is harmless: the second run has nothing to do.
    let both = key_ring(&[&k2, &k1]);
    let first = mcp_connect::grants::rotation::rotate(&db, &both, 1, "t", &|_| {})
        .await
        .unwrap();
    assert_eq!(
        (first.rows_rotated, first.values_rotated, first.remaining),
        (1, 2, 0)
    );
    let again = mcp_connect::grants::rotation::rotate(&db, &both, 1, "t", &|_| {})
        .await
        .unwrap();
    assert_eq!((again.rows_rotated, again.remaining), (0, 0));
    app.shutdown().await;
}

fn bin() -> std::process::Command {
    let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_mcp-connect"));
    for (k, _) in std::env::vars() {
        if k.starts_with("MCP_CONNECT_") {
            c.env_remove(k);
        }
    }
    c.stdin(Stdio::null());
    c
}

pub(crate) fn run(config: &std::path::Path, args: &[&str]) -> (bool, String, String) {
    let out = bin()
        .arg("--config")
        .arg(config)
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

on_both_databases!(
    cli_lists_shows_tails_revokes_and_rotates,
    |kind| async move {
        let k1 = generate_key("k1");
        let k2 = generate_key("k2");
        let app = TestApp::spawn_with(kind, with_keys(&[&k1], "")).await;
        let alice = app.connect("alice").await;
        app.connect("bob").await;
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("mcp-connect.toml");
        std::fs::write(
            &config,
            config_toml(&app.url, &app.db_url, &app.peers, &with_keys(&[&k1], "")),
        )
        .unwrap();

        let (ok, out, err) = run(&config, &["connections", "list", "--subject", "ALI"]);
        assert!(ok, "{err}");
        assert!(
            out.contains(&alice) && out.contains("active") && !out.contains("bob"),
            "{out}"
        );
        let (ok, out, _) = run(&config, &["connections", "list", "--json"]);
        assert!(ok);
        let v: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["total"], 2);
        assert!(!out.contains("access_token\""), "never a token: {out}");
        let (ok, out, err) = run(&config, &["connections", "show", &alice]);
        assert!(ok, "{err}");
        assert!(
            out.contains("connection.created") && out.contains("sealed with: k1"),
            "{out}"
        );
        let (ok, out, _) = run(&config, &["audit", "tail", "-n", "100"]);
        assert!(ok);
        assert!(
            out.contains("elicitation.completed") && out.contains("subject=alice"),
            "{out}"
        );

        // --follow prints what happens after it started.
        let mut follow = tokio::process::Command::new(env!("CARGO_BIN_EXE_mcp-connect"))
            .arg("--config")
            .arg(&config)
            .args([
                "audit",
                "tail",
                "-n",
                "1",
                "--follow",
                "--event",
                "elicitation.",
            ])
            .stdout(Stdio::piped())
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let mut lines = tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(
            follow.stdout.take().unwrap(),
        ));
        lines.next_line().await.unwrap(); // the one past event
        app.elicit("carol").await;
        let line = tokio::time::timeout(Duration::from_secs(10), lines.next_line())
            .await
            .expect("a followed event within 10 s")
            .unwrap()
            .unwrap();
        assert!(
            line.contains("elicitation.created") && line.contains("subject=carol"),
            "{line}"
        );
        let _ = follow.kill().await;

        // Revoking asks first; with no terminal to ask on, nothing happens without --yes.
        let (ok, _, err) = run(&config, &["connections", "revoke", &alice]);
        assert!(!ok && err.contains("--yes"), "{err}");
        assert_eq!(app.token("alice").await.0, StatusCode::OK);
        let before = app.peers.stats().await["revocations"].as_i64().unwrap();
        let (ok, out, err) = run(
            &config,
            &[
                "connections",
                "revoke",
                &alice,
                "--yes",
                "--reason",
                "offboarding",
            ],
        );
        assert!(ok, "{err}");
        assert!(out.contains("revoked"), "{out}");
        assert!(app.peers.stats().await["revocations"].as_i64().unwrap() > before);
        assert_eq!(app.token("alice").await.1["error"], "not_connected");
        let events = audit_rows(&app, "admin.connection_revoked").await;
        assert!(events[0].0.starts_with("cli:"), "{events:?}");

        // keys rotate with the new key first; then status shows only the new key.
        std::fs::write(
            &config,
            config_toml(
                &app.url,
                &app.db_url,
                &app.peers,
                &with_keys(&[&k2, &k1], ""),
            ),
        )
        .unwrap();
        let (ok, out, err) = run(&config, &["keys", "rotate", "--batch-size", "1"]);
        assert!(ok, "{out}\n{err}");
        assert!(out.contains("done:"), "{out}");
        assert_eq!(not_under(app.db(), "k2").await, 0);
        let (ok, out, _) = run(&config, &["keys", "status"]);
        assert!(ok);
        assert!(
            out.contains("key \"k2\" seals") && !out.contains("key \"k1\" seals"),
            "{out}"
        );
        app.shutdown().await;
    }
);
