//! Operators and users: the admin pages (who may see them, search, revoke with CSRF, the audit
//! entry), the account page (disconnect revokes upstream, reconnect), audit events for expiry
//! and retention, and metrics.

use reqwest::StatusCode;
use serde_json::json;

use crate::harness::*;
use crate::on_both_databases;

pub const ADMIN: &str = "ops-admin";

pub fn admin_options() -> Options {
    Options {
        extra_toml: format!("[admin]\nsubjects = [\"{ADMIN}\"]\n"),
        ..Options::default()
    }
}

/// A browser signed in as `user`, looking at `path` (after the identity round trip).
pub async fn signed_in(app: &TestApp, user: &str, path: &str) -> (Browser, Page) {
    let b = app.browser();
    let url = format!("{}{path}", app.url);
    let page = b.sign_in_to_consent(&url, user).await;
    (b, page)
}

pub async fn audit_rows(app: &TestApp, event: &str) -> Vec<(String, String, String)> {
    sqlx::query_as(
        "SELECT COALESCE(actor, ''), COALESCE(subject, ''), COALESCE(connection_id, '') FROM audit_events WHERE event = $1 ORDER BY id",
    )
    .bind(event)
    .fetch_all(&app.db().pool)
    .await
    .unwrap()
}

async fn status_of(app: &TestApp, id: &str) -> String {
    let (s,): (String,) = sqlx::query_as("SELECT status FROM connections WHERE id = $1")
        .bind(id)
        .fetch_one(&app.db().pool)
        .await
        .unwrap();
    s
}

on_both_databases!(
    admin_sees_connections_and_a_non_admin_gets_403,
    |kind| async move {
        let app = TestApp::spawn_with(kind, admin_options()).await;
        app.connect("alice").await;
        app.connect("bob").await;

        let (_admin, page) = signed_in(&app, ADMIN, "/admin/connections").await;
        assert_eq!(page.status, StatusCode::OK, "{}", page.body);
        assert!(page.url.ends_with("/admin/connections"), "{}", page.url);
        assert!(page.has("alice") && page.has("bob"), "{}", page.body);
        assert!(page.has("2 connections found"), "{}", page.body);

        // alice is a user, not an admin: a clear 403 that shows nothing of the others.
        for path in [
            "/admin",
            "/admin/connections",
            "/admin/audit",
            "/admin/providers",
        ] {
            let (_b, refused) = signed_in(&app, "alice", path).await;
            assert_eq!(refused.status, StatusCode::FORBIDDEN, "{path}");
            assert!(refused.has("Administrators only"), "{}", refused.body);
            assert!(!refused.has("bob"), "{}", refused.body);
            assert!(
                refused.has("Sign out"),
                "the refusal offers to switch accounts"
            );
        }
        let refusals = audit_rows(&app, "admin.access_refused").await;
        assert!(refusals.iter().all(|(actor, _, _)| actor == "alice"));
        // One row a minute per user; the other three are counted into the next one
        // (`signin_hardening::repeated_refusals_of_a_signed_in_user_and_their_rows_are_bounded`).
        assert_eq!(refusals.len(), 1);

        // Without a session, admin pages send the browser to sign in.
        let r = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap()
            .get(format!("{}/admin/connections", app.url))
            .send()
            .await
            .unwrap();
        assert_sent_to_sign_in(&r, &app);
        app.shutdown().await;
    }
);

/// Inserts `n` connections for `bulk-000`.. without going through a provider.
pub async fn insert_bulk(
    app: &TestApp,
    keys: &mcp_connect::crypto::KeyRing,
    n: usize,
    status: &str,
) {
    let issuer = app.state.identity.issuer().to_owned();
    let now = mcp_connect::time::now();
    let mut tx = app.db().pool.begin().await.unwrap();
    for i in 0..n {
        let id = mcp_connect::crypto::random_token(16);
        let at = keys
            .seal(
                format!("bulk-at-{i}").as_bytes(),
                &mcp_connect::crypto::connection_aad(&id, "access_token"),
            )
            .unwrap();
        let rt = keys
            .seal(
                format!("bulk-rt-{i}").as_bytes(),
                &mcp_connect::crypto::connection_aad(&id, "refresh_token"),
            )
            .unwrap();
        sqlx::query(
            "INSERT INTO connections (id, issuer, subject, provider, status, scopes, token_type, access_token, refresh_token, \
             expires_at, created_at, updated_at) VALUES ($1, $2, $3, 'acme', $4, 'api', 'Bearer', $5, $6, NULL, $7, $7)",
        )
        .bind(&id)
        .bind(&issuer)
        .bind(format!("bulk-{i:05}"))
        .bind(status)
        .bind(at)
        .bind(rt)
        .bind(now - i as i64)
        .execute(&mut *tx)
        .await
        .unwrap();
    }
    tx.commit().await.unwrap();
}

on_both_databases!(
    admin_search_filters_and_pages_connections,
    |kind| async move {
        let app = TestApp::spawn_with(kind, admin_options()).await;
        app.connect("alice").await;
        insert_bulk(&app, &app.state.config.keys, 30, "needs_reauth").await;
        let (b, _) = signed_in(&app, ADMIN, "/admin").await;
        let get = |path: &str| {
            let url = format!("{}{path}", app.url);
            let b = &b;
            async move { b.get(&url).await }
        };
        let p = get("/admin/connections?q=ALI").await;
        assert!(p.has("1 connection found") && p.has("alice"), "{}", p.body);
        assert!(!p.has("bulk-"), "{}", p.body);
        // LIKE wildcards are taken literally.
        let p = get("/admin/connections?q=%25").await;
        assert!(p.has("0 connections found"), "{}", p.body);
        let p = get("/admin/connections?status=needs_reauth&provider=acme").await;
        assert!(
            p.has("30 connections found") && !p.has(">alice<"),
            "{}",
            p.body
        );
        assert!(p.has("Page 1 of 2") && p.has("rel=\"next\""), "{}", p.body);
        let p2 = get("/admin/connections?status=needs_reauth&provider=acme&page=2").await;
        assert!(
            p2.has("Page 2 of 2") && p2.has("rel=\"prev\""),
            "{}",
            p2.body
        );
        let rows = |p: &Page| p.body.matches("href=\"/admin/connections/").count();
        assert_eq!(rows(&p) + rows(&p2), 30);
        let p = get("/admin/connections?status=revoked").await;
        assert!(p.has("0 connections found"), "{}", p.body);
        let p = get("/admin/connections?provider=other").await;
        assert!(p.has("0 connections found"), "{}", p.body);

        // The overview counts by status; elicitations and providers render.
        let p = get("/admin").await;
        assert!(
            p.has("<strong>30</strong>") && p.has("<strong>1</strong>"),
            "{}",
            p.body
        );
        let e = app.elicit("carol").await;
        let p = get("/admin/elicitations").await;
        assert!(p.has("carol") && p.has("completed"), "{}", p.body);
        assert!(
            !p.has(e["id"].as_str().unwrap()),
            "a pending connect URL id is not shown"
        );
        let p = get("/admin/providers").await;
        assert_eq!(p.status, StatusCode::OK);
        assert!(
            p.has("✓ reachable"),
            "the peer provider answers: {}",
            p.body
        );
        assert!(
            p.has("✗ problem"),
            "the provider on port 9 does not: {}",
            p.body
        );
        assert!(p.has("demo-mcp") && !p.has(API_KEY), "{}", p.body);
        app.shutdown().await;
    }
);

on_both_databases!(
    admin_revokes_with_confirmation_and_csrf_and_it_is_audited,
    |kind| async move {
        let app = TestApp::spawn_with(kind, admin_options()).await;
        let alice = app.connect("alice").await;
        let before = app.peers.stats().await["revocations"].as_i64().unwrap();
        let (b, _) = signed_in(&app, ADMIN, "/admin").await;
        let detail = b
            .get(&format!("{}/admin/connections/{alice}", app.url))
            .await;
        assert!(
            detail.has("Active") && detail.has("connection.created"),
            "{}",
            detail.body
        );
        let confirm = b
            .get(&format!("{}/admin/connections/{alice}/revoke", app.url))
            .await;
        assert!(confirm.has("cannot be undone"), "{}", confirm.body);

        // A post without the session's CSRF token (a forged form) changes nothing.
        let r = b
            .client
            .post(format!("{}/admin/connections/{alice}/revoke", app.url))
            .form(&[("csrf", "forged")])
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::FORBIDDEN);
        let r = b
            .client
            .post(format!("{}/admin/connections/{alice}/revoke", app.url))
            .header("origin", "https://evil.example")
            .form(&confirm.form("form[action$='/revoke']").1)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::FORBIDDEN);
        assert_eq!(status_of(&app, &alice).await, "active");

        // A non-admin with a valid token of their own session is still refused.
        let (mallory, own) = signed_in(&app, "mallory", "/account").await;
        let (_, fields) = own.form("form[action='/auth/logout']");
        let r = mallory
            .client
            .post(format!("{}/admin/connections/{alice}/revoke", app.url))
            .form(&fields)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::FORBIDDEN);
        assert_eq!(status_of(&app, &alice).await, "active");

        let done = b
            .submit(
                &confirm,
                "form[action$='/revoke']",
                &[("reason", "left the company")],
            )
            .await;
        assert_eq!(done.status, StatusCode::OK, "{}", done.body);
        assert!(
            done.has("was revoked") && done.has("Revoked"),
            "{}",
            done.body
        );
        assert_eq!(status_of(&app, &alice).await, "revoked");
        let stats = app.peers.stats().await;
        assert!(stats["revocations"].as_i64().unwrap() > before, "{stats}");
        assert_eq!(app.token("alice").await.1["error"], "not_connected");

        let admin_events = audit_rows(&app, "admin.connection_revoked").await;
        assert_eq!(
            admin_events,
            vec![(ADMIN.to_owned(), "alice".to_owned(), alice.clone())]
        );
        let revoked = audit_rows(&app, "connection.revoked").await;
        assert_eq!(revoked[0].0, ADMIN);
        let page = b
            .get(&format!(
                "{}/admin/audit?event=admin.&subject=alice",
                app.url
            ))
            .await;
        assert!(
            page.has("<code class=\"event\">admin.connection_revoked</code>")
                && page.has("left the company"),
            "{}",
            page.body
        );
        assert!(!page.has(">connection.created</code>"), "{}", page.body);
        let page = b
            .get(&format!(
                "{}/admin/audit?from=2000-01-01&to=2000-01-02",
                app.url
            ))
            .await;
        assert!(page.has("No events match"), "{}", page.body);
        // A second revoke is refused and changes nothing.
        let again = b.submit(&confirm, "form[action$='/revoke']", &[]).await;
        assert_eq!(again.status, StatusCode::CONFLICT);
        app.shutdown().await;
    }
);

on_both_databases!(
    account_disconnect_revokes_upstream_and_reconnect_restores,
    |kind| async move {
        let app = TestApp::spawn(kind).await;
        let id = app.connect("alice").await;
        let (b, page) = signed_in(&app, "alice", "/account").await;
        assert!(
            page.has("Acme") && page.has("Connected") && page.has("Disconnect"),
            "{}",
            page.body
        );
        assert!(
            !page.has("Reconnect</button>"),
            "an active connection needs no reconnect"
        );

        // The grant breaks (say, the user revoked it at the provider): Reconnect is offered and
        // runs the whole flow again for the same connection.
        sqlx::query("UPDATE connections SET status = 'needs_reauth' WHERE id = $1")
            .bind(&id)
            .execute(&app.db().pool)
            .await
            .unwrap();
        let page = b.get(&format!("{}/account", app.url)).await;
        assert!(
            page.has("Needs reconnecting") && page.has("Reconnect"),
            "{}",
            page.body
        );
        let consent = b.submit(&page, "form[action$='/reconnect']", &[]).await;
        assert!(consent.url.contains("/connect/"), "{}", consent.url);
        assert!(
            consent.has("Demo MCP"),
            "the app that asked before: {}",
            consent.body
        );
        let done = b.consent_and_allow(&consent, "alice").await;
        assert_eq!(done.status, StatusCode::OK, "{}", done.body);
        assert_eq!(status_of(&app, &id).await, "active");
        assert_eq!(audit_rows(&app, "connection.reconnected").await[0].2, id);
        assert_eq!(
            audit_rows(&app, "connection.reconnect_started").await[0].0,
            "alice"
        );
        let (s, t) = app.token("alice").await;
        assert_eq!(s, StatusCode::OK, "{t}");

        let before = app.peers.stats().await["revocations"].as_i64().unwrap();
        let page = b.get(&format!("{}/account", app.url)).await;
        let done = b.submit(&page, "form[action$='/disconnect']", &[]).await;
        assert!(
            done.has("was disconnected") && done.has("Disconnected"),
            "{}",
            done.body
        );
        let stats = app.peers.stats().await;
        assert!(stats["revocations"].as_i64().unwrap() > before, "{stats}");
        assert_eq!(
            app.peers
                .whoami(t["access_token"].as_str().unwrap())
                .await
                .0,
            StatusCode::UNAUTHORIZED,
            "the provider no longer accepts the token"
        );
        assert_eq!(app.token("alice").await.1["error"], "not_connected");
        let revoked = audit_rows(&app, "connection.revoked").await;
        assert_eq!(
            (revoked[0].0.as_str(), revoked[0].1.as_str()),
            ("alice", "alice")
        );

        // Someone else's connection cannot be touched from /account.
        let bob = app.connect("bob").await;
        let r = b
            .client
            .post(format!("{}/account/connections/{bob}/disconnect", app.url))
            .form(&page.form("form[action$='/disconnect']").1)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::NOT_FOUND);
        assert_eq!(status_of(&app, &bob).await, "active");
        app.shutdown().await;
    }
);

on_both_databases!(
    expired_elicitations_are_recorded_and_old_audit_events_are_deleted,
    |kind| async move {
        let app = TestApp::spawn(kind).await;
        let e = app.elicit("alice").await;
        let id = e["id"].as_str().unwrap();
        sqlx::query("UPDATE elicitations SET expires_at = $1 WHERE id = $2")
            .bind(mcp_connect::time::now() - 1)
            .bind(id)
            .execute(&app.db().pool)
            .await
            .unwrap();
        sqlx::query("INSERT INTO audit_events (at, event) VALUES ($1, 'ancient.event')")
            .bind(mcp_connect::time::now() - 366 * 86_400)
            .execute(&app.db().pool)
            .await
            .unwrap();
        app.state.cleanup_once().await;
        // The app's own cleanup task may have expired it first (its first pass runs at start):
        // then its audit record may land a moment after ours returned, so look for a while.
        let mut expired: Vec<(String, String, String)> = Vec::new();
        for _ in 0..50 {
            expired = sqlx::query_as(
                "SELECT COALESCE(subject, ''), COALESCE(elicitation_id, ''), COALESCE(client_id, '') FROM audit_events WHERE event = 'elicitation.expired'",
            )
            .fetch_all(&app.db().pool)
            .await
            .unwrap();
            if !expired.is_empty() {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        assert_eq!(
            expired,
            vec![("alice".into(), id.to_owned(), "demo-mcp".into())]
        );
        let (_, v) = app.get(&format!("/v1/elicitations/{id}")).await;
        assert_eq!(v["status"], "expired");
        // Once only: a second pass finds nothing left to expire.
        app.state.cleanup_once().await;
        assert_eq!(audit_rows(&app, "elicitation.expired").await.len(), 1);
        assert!(audit_rows(&app, "ancient.event").await.is_empty());
        assert_eq!(audit_rows(&app, "elicitation.created").await.len(), 1);
        app.shutdown().await;
    }
);

fn metric(body: &str, name_and_labels: &str) -> f64 {
    body.lines()
        .find(|l| l.starts_with(name_and_labels))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

on_both_databases!(
    metrics_count_routes_outcomes_and_upstream_calls,
    |kind| async move {
        let app = TestApp::spawn(kind).await;
        app.connect("alice").await;
        let e = app.elicit("bob").await;
        let id = e["id"].as_str().unwrap().to_owned();
        app.get(&format!("/v1/elicitations/{id}")).await;
        let (s, _) = app
            .post(
                "/v1/tokens",
                json!({"subject": "alice", "provider": "acme", "force_refresh": true}),
            )
            .await;
        assert_eq!(s, StatusCode::OK);
        reqwest::get(format!("{}/no/such/{id}", app.url))
            .await
            .unwrap();
        let r = reqwest::get(format!("{}/metrics", app.url)).await.unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        let body = r.text().await.unwrap();
        assert!(!body.contains(&id), "no raw URI (nor any id) in a label");
        assert!(
            !body.contains("alice") && !body.contains("bob"),
            "no subject in a label"
        );
        assert_eq!(
            metric(
                &body,
                "mcp_connect_http_requests_total{method=\"GET\",route=\"/v1/elicitations/{id}\",status=\"200\"}"
            ),
            2.0,
            "{body}"
        );
        assert!(
            metric(
                &body,
                "mcp_connect_http_requests_total{method=\"GET\",route=\"unmatched\",status=\"404\"}"
            ) >= 1.0,
            "{body}"
        );
        assert!(
            body.contains("mcp_connect_http_request_duration_seconds_bucket{le="),
            "{body}"
        );
        assert_eq!(
            metric(&body, "mcp_connect_elicitations_total{outcome=\"created\"}"),
            2.0,
            "{body}"
        );
        assert_eq!(
            metric(
                &body,
                "mcp_connect_elicitations_total{outcome=\"completed\"}"
            ),
            1.0,
            "{body}"
        );
        assert_eq!(
            metric(
                &body,
                "mcp_connect_token_refreshes_total{provider=\"acme\",outcome=\"success\"}"
            ),
            1.0,
            "{body}"
        );
        assert!(
            metric(
                &body,
                "mcp_connect_upstream_request_duration_seconds_count{provider=\"acme\",operation=\"code_exchange\"}"
            ) >= 1.0,
            "{body}"
        );
        assert!(
            body.contains("mcp_connect_db_pool_connections{state=\"open\"}"),
            "{body}"
        );

        // The upstream failing: counted as errors per provider.
        let http = reqwest::Client::new();
        http.post(format!("{}/__fail?status=400&count=1", app.peers.upstream))
            .send()
            .await
            .unwrap();
        app.post(
            "/v1/tokens",
            json!({"subject": "alice", "provider": "acme", "force_refresh": true}),
        )
        .await;
        let body = app.metrics_text().await;
        assert_eq!(
            metric(
                &body,
                "mcp_connect_upstream_errors_total{provider=\"acme\",operation=\"refresh\"}"
            ),
            1.0,
            "{body}"
        );
        assert_eq!(
            metric(
                &body,
                "mcp_connect_token_refreshes_total{provider=\"acme\",outcome=\"error\"}"
            ),
            1.0,
            "{body}"
        );
        app.shutdown().await;
    }
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_can_move_to_their_own_address() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let peers = crate::operations::no_peers();
    let db = db_url(DbKind::Sqlite);
    let toml = config_toml(&url, &db, &peers, &Options::default())
        .replace(
            "listen = \"127.0.0.1:0\"",
            "listen = \"127.0.0.1:0\"\nmetrics_listen = \"127.0.0.1:0\"",
        )
        .replace("issuer = \"\"", "issuer = \"http://127.0.0.1:9\"");
    let config = mcp_connect::config::Config::from_parts(&toml, &[])
        .unwrap_or_else(|e| panic!("{e}\n{toml}"));
    let app = mcp_connect::Application::build_with_listener(config, listener)
        .await
        .unwrap();
    let metrics = format!("http://{}", app.metrics_addr().unwrap());
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(app.run_until(async {
        let _ = rx.await;
    }));
    let r = reqwest::get(format!("{url}/metrics")).await.unwrap();
    assert_eq!(
        r.status(),
        StatusCode::NOT_FOUND,
        "not on the public address"
    );
    let r = reqwest::get(format!("{metrics}/metrics")).await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let body = r.text().await.unwrap();
    assert!(
        body.contains("route=\"/metrics\"") || body.contains("mcp_connect_http_requests_total"),
        "{body}"
    );
    let _ = tx.send(());
    task.await.unwrap().unwrap();
}
