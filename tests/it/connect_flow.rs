//! The browser flow end to end against the real `oidc-provider` peers.

use reqwest::StatusCode;
use serde_json::json;

use crate::harness::*;
use crate::on_both_databases;

on_both_databases!(
    full_flow_stores_a_token_the_provider_accepts,
    |kind| async move {
        let app = TestApp::spawn(kind).await;
        let e = app.elicit("alice").await;
        assert_eq!(e["status"], "pending");
        assert!(
            e["url"]
                .as_str()
                .unwrap()
                .starts_with(&format!("{}/connect/", app.url))
        );
        assert!(
            !e["url"].as_str().unwrap().contains("alice"),
            "the URL must not carry the subject"
        );

        let b = app.browser();
        let consent = b
            .sign_in_to_consent(e["url"].as_str().unwrap(), "alice")
            .await;
        assert_eq!(consent.status, StatusCode::OK);
        assert!(
            consent.has("Demo MCP") && consent.has("Acme") && consent.has("offline_access"),
            "{}",
            consent.body
        );
        let done = b.consent_and_allow(&consent, "alice").await;
        assert_eq!(done.status, StatusCode::OK, "{}", done.body);
        assert!(done.has("Acme is connected"), "{}", done.body);

        let (s, status) = app
            .get(&format!("/v1/elicitations/{}", e["id"].as_str().unwrap()))
            .await;
        assert_eq!(s, StatusCode::OK);
        assert_eq!(status["status"], "completed");
        let (s, tok) = app.token("alice").await;
        assert_eq!(s, StatusCode::OK, "{tok}");
        assert_eq!(tok["token_type"], "Bearer");
        assert_eq!(tok["connection_id"], status["connection_id"]);
        let (ws, who) = app
            .peers
            .whoami(tok["access_token"].as_str().unwrap())
            .await;
        assert_eq!(ws, StatusCode::OK);
        assert_eq!(who["sub"], "alice");

        let (s, list) = app.get("/v1/connections?subject=alice").await;
        assert_eq!(s, StatusCode::OK);
        let c = &list["connections"][0];
        assert_eq!(c["status"], "active");
        assert_eq!(c["has_refresh_token"], true);
        assert_eq!(
            c["account_label"], "alice",
            "label from the provider's userinfo"
        );
        assert!(
            c.get("access_token").is_none()
                && !list
                    .to_string()
                    .contains(tok["access_token"].as_str().unwrap())
        );
        app.shutdown().await;
    }
);

on_both_databases!(
    mismatched_subject_is_refused_and_nothing_is_stored,
    |kind| async move {
        let app = TestApp::spawn(kind).await;
        let for_alice = app.elicit("alice").await;
        let for_bob = app.elicit("bob").await;
        // Bob's browser signs in as bob through his own link ...
        let bob = app.browser();
        let page = bob
            .sign_in_to_consent(for_bob["url"].as_str().unwrap(), "bob")
            .await;
        assert!(page.has("Continue"));
        // ... then opens the link an attacker made for alice.
        let refused = bob.get(for_alice["url"].as_str().unwrap()).await;
        assert_eq!(refused.status, StatusCode::FORBIDDEN);
        assert!(refused.has("different account"), "{}", refused.body);
        assert!(
            !refused.has("Continue") && !refused.has("alice"),
            "{}",
            refused.body
        );

        // A forged consent post for alice's elicitation is refused too.
        let (action, fields) = page.form("form.actions");
        let forged_action = action.replace(
            for_bob["id"].as_str().unwrap(),
            for_alice["id"].as_str().unwrap(),
        );
        let mut fields = fields;
        fields.push(("action".into(), "continue".into()));
        let r = bob
            .client
            .post(&forged_action)
            .form(&fields)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::FORBIDDEN);

        let (_, a) = app
            .get(&format!(
                "/v1/elicitations/{}",
                for_alice["id"].as_str().unwrap()
            ))
            .await;
        assert_eq!(a["status"], "pending");
        let (s, v) = app.token("alice").await;
        assert_eq!(
            (s, v["error"].as_str()),
            (StatusCode::NOT_FOUND, Some("not_connected"))
        );
        let (s, v) = app.token("bob").await;
        assert_eq!(
            (s, v["error"].as_str()),
            (StatusCode::NOT_FOUND, Some("not_connected"))
        );
        let audit = app.db().recent_audit(Some("alice"), 50).await.unwrap();
        assert!(
            audit
                .iter()
                .any(|a| a.event == "elicitation.subject_mismatch_refused"
                    && a.actor.as_deref() == Some("bob"))
        );
        app.shutdown().await;
    }
);

/// Walks to the provider and stops at the redirect back to mcp-connect; returns that URL.
async fn callback_url(app: &TestApp, b: &Browser, subject: &str) -> String {
    let e = app.elicit(subject).await;
    b.provider_callback_url(e["url"].as_str().unwrap(), subject)
        .await
}

on_both_databases!(
    a_state_presented_twice_at_once_is_taken_once,
    |kind| async move {
        let app = TestApp::spawn(kind).await;
        let b = Browser::stopping_at_callback();
        let url = callback_url(&app, &b, "alice").await;
        let (p1, p2) = tokio::join!(b.get(&url), b.get(&url));
        let mut statuses = [p1.status, p2.status];
        statuses.sort();
        // The other is refused: 400 when it reaches the state claim after the first claimed it,
        // or 410 ("already connected") when the first finished the whole flow before the
        // second was checked at all. Either way exactly one completes.
        assert_eq!(statuses[0], StatusCode::OK, "{} / {}", p1.body, p2.body);
        assert!(
            matches!(statuses[1], StatusCode::BAD_REQUEST | StatusCode::GONE),
            "{:?}: {} / {}",
            statuses,
            p1.body,
            p2.body
        );
        let (s, _) = app.token("alice").await;
        assert_eq!(s, StatusCode::OK);
        let rows: Vec<(String, Option<i64>)> = sqlx::query_as(
            "SELECT COALESCE(verifier, ''), used_at FROM auth_flows WHERE kind = 'provider'",
        )
        .fetch_all(&app.db().pool)
        .await
        .unwrap();
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].0, "", "the PKCE verifier is wiped once used");
        assert!(rows[0].1.is_some());
        app.shutdown().await;
    }
);

on_both_databases!(
    replayed_or_forged_callbacks_are_refused,
    |kind| async move {
        let app = TestApp::spawn(kind).await;
        let b = Browser::stopping_at_callback();
        let url = callback_url(&app, &b, "alice").await;
        assert!(
            url.contains("/oauth/acme/callback?") && url.contains("state="),
            "{url}"
        );

        // Another browser (no session) presenting the callback gets a refusal, and burns nothing.
        let other = Browser::new();
        let p = other.get(&url).await;
        assert_eq!(p.status, StatusCode::BAD_REQUEST, "{}", p.body);

        let first = b.get(&url).await;
        assert_eq!(first.status, StatusCode::OK, "{}", first.body);
        let (s, tok) = app.token("alice").await;
        assert_eq!(s, StatusCode::OK);

        let replay = b.get(&url).await;
        assert_eq!(replay.status, StatusCode::BAD_REQUEST);
        assert!(replay.has("already used"), "{}", replay.body);
        let (s, tok2) = app.token("alice").await;
        assert_eq!(s, StatusCode::OK);
        assert_eq!(
            tok["access_token"], tok2["access_token"],
            "a replay must change nothing"
        );

        let forged = b
            .get(&format!(
                "{}/oauth/acme/callback?code=abc&state=forged-state-value",
                app.url
            ))
            .await;
        assert_eq!(forged.status, StatusCode::BAD_REQUEST);
        let missing = b
            .get(&format!("{}/oauth/acme/callback?code=abc", app.url))
            .await;
        assert_eq!(missing.status, StatusCode::BAD_REQUEST);
        let audit = app.db().recent_audit(None, 100).await.unwrap();
        assert!(audit.iter().any(|a| a.event == "state.replay_refused"));
        app.shutdown().await;
    }
);

on_both_databases!(
    declining_at_consent_or_at_the_provider_is_recorded,
    |kind| async move {
        let app = TestApp::spawn(kind).await;
        let e = app.elicit("alice").await;
        let b = app.browser();
        let consent = b
            .sign_in_to_consent(e["url"].as_str().unwrap(), "alice")
            .await;
        let declined = b
            .submit(&consent, "form.actions", &[("action", "decline")])
            .await;
        assert_eq!(declined.status, StatusCode::OK);
        assert!(declined.has("You declined"));
        let (_, v) = app
            .get(&format!("/v1/elicitations/{}", e["id"].as_str().unwrap()))
            .await;
        assert_eq!(v["status"], "declined");
        // The link now says so instead of offering consent again.
        let again = b.get(e["url"].as_str().unwrap()).await;
        assert_eq!(again.status, StatusCode::GONE);

        let e = app.elicit("alice").await;
        let consent = b.get(e["url"].as_str().unwrap()).await;
        let login = b
            .submit(&consent, "form.actions", &[("action", "continue")])
            .await;
        let up = b.submit(&login, "form", &[("login", "alice")]).await;
        let denied = b.submit(&up, "form", &[("decision", "deny")]).await;
        assert_eq!(denied.status, StatusCode::OK, "{}", denied.body);
        assert!(denied.has("You declined"));
        let (_, v) = app
            .get(&format!("/v1/elicitations/{}", e["id"].as_str().unwrap()))
            .await;
        assert_eq!(v["status"], "declined");
        let (s, _) = app.token("alice").await;
        assert_eq!(s, StatusCode::NOT_FOUND);
        app.shutdown().await;
    }
);

on_both_databases!(long_poll_wakes_when_the_flow_completes, |kind| async move {
    let app = TestApp::spawn(kind).await;
    let e = app.elicit("alice").await;
    let id = e["id"].as_str().unwrap().to_owned();
    let waiter = {
        let api = app.api.clone();
        let url = format!("{}/v1/elicitations/{id}?wait=30", app.url);
        tokio::spawn(async move {
            api.get(url)
                .bearer_auth(API_KEY)
                .send()
                .await
                .unwrap()
                .json::<serde_json::Value>()
                .await
                .unwrap()
        })
    };
    let tokens_waiter = {
        let api = app.api.clone();
        let url = format!("{}/v1/tokens", app.url);
        let body = json!({"subject": "alice", "provider": "acme", "elicitation_id": id, "wait_seconds": 30});
        tokio::spawn(async move {
            api.post(url)
                .bearer_auth(API_KEY)
                .json(&body)
                .send()
                .await
                .unwrap()
                .json::<serde_json::Value>()
                .await
                .unwrap()
        })
    };
    let b = app.browser();
    let consent = b
        .sign_in_to_consent(e["url"].as_str().unwrap(), "alice")
        .await;
    b.consent_and_allow(&consent, "alice").await;
    let v = waiter.await.unwrap();
    assert_eq!(v["status"], "completed", "{v}");
    let t = tokens_waiter.await.unwrap();
    assert!(t["access_token"].is_string(), "{t}");
    // A short wait on a pending elicitation returns it still pending.
    let e2 = app
        .post(
            "/v1/elicitations",
            json!({"subject": "carol", "provider": "acme"}),
        )
        .await
        .1;
    let (s, v) = app
        .get(&format!(
            "/v1/elicitations/{}?wait=1",
            e2["id"].as_str().unwrap()
        ))
        .await;
    assert_eq!((s, v["status"].as_str()), (StatusCode::OK, Some("pending")));
    app.shutdown().await;
});

// A long poll held by another replica (its own process) wakes when the flow completes here:
// through LISTEN/NOTIFY on Postgres, through the replica's sweep on SQLite.
on_both_databases!(
    long_poll_on_another_replica_wakes_when_the_flow_completes,
    |kind| async move {
        let app = TestApp::spawn(kind).await;
        let (replica_url, _replica) = app.spawn_replica_process(&Options::default()).await;
        let e = app.elicit("alice").await;
        let id = e["id"].as_str().unwrap().to_owned();
        let waiter = {
            let api = app.api.clone();
            let url = format!("{replica_url}/v1/elicitations/{id}?wait=30");
            tokio::spawn(async move {
                let started = std::time::Instant::now();
                let v = api
                    .get(url)
                    .bearer_auth(API_KEY)
                    .send()
                    .await
                    .unwrap()
                    .json::<serde_json::Value>()
                    .await
                    .unwrap();
                (v, started.elapsed())
            })
        };
        let b = app.browser();
        let consent = b
            .sign_in_to_consent(e["url"].as_str().unwrap(), "alice")
            .await;
        b.consent_and_allow(&consent, "alice").await;
        let (v, waited) = waiter.await.unwrap();
        assert_eq!(v["status"], "completed", "{v}");
        assert!(
            waited < std::time::Duration::from_secs(25),
            "woken by the change, not by the end of the wait ({waited:?})"
        );
        app.shutdown().await;
    }
);

on_both_databases!(
    parallel_flows_in_one_browser_both_complete,
    |kind| async move {
        let app = TestApp::spawn(kind).await;
        let e1 = app.post("/v1/elicitations", json!({"subject": "alice", "provider": "acme", "scopes": ["openid", "offline_access", "api"]})).await.1;
        let e2 = app.post("/v1/elicitations", json!({"subject": "alice", "provider": "acme", "scopes": ["openid", "offline_access"]})).await.1;
        assert_ne!(e1["id"], e2["id"]);
        let b = app.browser();
        let c1 = b
            .sign_in_to_consent(e1["url"].as_str().unwrap(), "alice")
            .await;
        let c2 = b.get(e2["url"].as_str().unwrap()).await;
        // Start both provider flows before finishing either.
        let up1 = b
            .submit(&c1, "form.actions", &[("action", "continue")])
            .await;
        let up2 = b
            .submit(&c2, "form.actions", &[("action", "continue")])
            .await;
        let up1 = if up1.has("name=\"login\"") {
            b.submit(&up1, "form", &[("login", "alice")]).await
        } else {
            up1
        };
        let up2 = if up2.has("name=\"login\"") {
            b.submit(&up2, "form", &[("login", "alice")]).await
        } else {
            up2
        };
        let d2 = b.submit(&up2, "form", &[("decision", "allow")]).await;
        let d1 = b.submit(&up1, "form", &[("decision", "allow")]).await;
        assert_eq!(d1.status, StatusCode::OK, "{}", d1.body);
        assert_eq!(d2.status, StatusCode::OK, "{}", d2.body);
        for e in [&e1, &e2] {
            let (_, v) = app
                .get(&format!("/v1/elicitations/{}", e["id"].as_str().unwrap()))
                .await;
            assert_eq!(v["status"], "completed");
        }
        app.shutdown().await;
    }
);

on_both_databases!(reconnect_keeps_the_connection_id, |kind| async move {
    let app = TestApp::spawn(kind).await;
    let first = app.connect("alice").await;
    let (_, t1) = app.token("alice").await;
    let second = app.connect("alice").await;
    assert_eq!(first, second);
    let (_, t2) = app.token("alice").await;
    assert_ne!(t1["access_token"], t2["access_token"]);
    let audit = app.db().recent_audit(Some("alice"), 50).await.unwrap();
    assert!(audit.iter().any(|a| a.event == "connection.reconnected"));
    app.shutdown().await;
});

on_both_databases!(
    elicitations_are_reused_while_pending_and_offered_by_tokens,
    |kind| async move {
        let app = TestApp::spawn(kind).await;
        let a = app.elicit("alice").await;
        let b = app.elicit("alice").await;
        assert_eq!(a["id"], b["id"]);
        let c = app
            .post(
                "/v1/elicitations",
                json!({"subject": "alice", "provider": "acme", "scopes": ["api"]}),
            )
            .await
            .1;
        assert_ne!(a["id"], c["id"]);
        let (s, v) = app
            .post(
                "/v1/tokens",
                json!({"subject": "alice", "provider": "acme", "elicit": true}),
            )
            .await;
        assert_eq!(s, StatusCode::CONFLICT);
        assert_eq!(v["error"], "authorization_required");
        assert_eq!(v["elicitation"]["id"], a["id"]);
        // Both protocol eras' payloads, ready to send.
        let m = &v["elicitation"]["mcp"];
        assert_eq!(m["2026-07-28"]["method"], "elicitation/create");
        assert_eq!(m["2026-07-28"]["params"]["mode"], "url");
        assert!(m["2026-07-28"]["params"].get("elicitationId").is_none());
        assert_eq!(m["2025-11-25"]["params"]["elicitationId"], a["id"]);
        assert_eq!(m["2025-11-25"]["error"]["code"], -32042);
        assert_eq!(
            m["2025-11-25"]["error"]["data"]["elicitations"][0]["url"],
            a["url"]
        );
        assert!(a["message"].as_str().unwrap().contains("Acme"));
        app.shutdown().await;
    }
);

on_both_databases!(
    the_refusal_page_lets_the_user_switch_accounts,
    |kind| async move {
        let app = TestApp::spawn(kind).await;
        let for_alice = app.elicit("alice").await;
        let for_bob = app.elicit("bob").await;
        let b = app.browser();
        b.sign_in_to_consent(for_bob["url"].as_str().unwrap(), "bob")
            .await;
        let refused = b.get(for_alice["url"].as_str().unwrap()).await;
        assert_eq!(refused.status, StatusCode::FORBIDDEN);
        // "Sign out and use another account": the issuer is asked for a fresh login, not its
        // remembered session (which would sign bob straight back in).
        let login = b.submit(&refused, "form.actions", &[]).await;
        assert!(
            login.has("name=\"login\""),
            "expected a fresh login page: {} {}",
            login.url,
            login.body
        );
        let consent = b.submit(&login, "form", &[("login", "alice")]).await;
        assert!(consent.has("Continue"), "{}", consent.body);
        let done = b.consent_and_allow(&consent, "alice").await;
        assert_eq!(done.status, StatusCode::OK);
        let (s, _) = app.token("alice").await;
        assert_eq!(s, StatusCode::OK);
        app.shutdown().await;
    }
);

on_both_databases!(
    short_lived_writes_do_not_wait_for_the_disk_and_nothing_else_inherits_it,
    |kind| async move {
        let app = TestApp::spawn(kind).await;
        let db = app.db();
        let mut tx = db.begin_ephemeral().await.unwrap();
        if kind == DbKind::Postgres {
            let (v,): (String,) = sqlx::query_as("SHOW synchronous_commit")
                .fetch_one(&mut *tx)
                .await
                .unwrap();
            assert_eq!(
                v, "off",
                "a short-lived write must not wait for the WAL flush"
            );
        }
        sqlx::query(
            // A far expiry: the cleanup task deletes expired sessions.
            "INSERT INTO sessions (id, data, expires_at) VALUES ('ephemeral-test', '{}', 4102444800)",
        )
        .execute(&mut *tx)
        .await
        .unwrap();
        tx.commit().await.unwrap();
        // One statement on its own (a session row, a claimed state): the setting in the
        // statement itself, for its own transaction only.
        if let Some(from) = db.no_flush_from() {
            for _ in 0..4 {
                let (v,): (String,) = sqlx::query_as(&format!(
                    "SELECT current_setting('synchronous_commit') FROM {from}"
                ))
                .fetch_one(&db.pool)
                .await
                .unwrap();
                assert_eq!(v, "off", "a one-statement short-lived write must not wait");
            }
        }
        // The setting was local to those transactions: every pooled connection, and so every
        // grant written afterwards, commits synchronously again.
        if kind == DbKind::Postgres {
            let mut held = Vec::new();
            for _ in 0..4 {
                let mut c = db.pool.acquire().await.unwrap();
                let (v,): (String,) = sqlx::query_as("SHOW synchronous_commit")
                    .fetch_one(&mut *c)
                    .await
                    .unwrap();
                assert_eq!(v, "on");
                held.push(c);
            }
        }
        let (n,): (i64,) =
            sqlx::query_as("SELECT COUNT(*) FROM sessions WHERE id = 'ephemeral-test'")
                .fetch_one(&db.pool)
                .await
                .unwrap();
        assert_eq!(n, 1, "committed and visible");
        app.shutdown().await;
    }
);
