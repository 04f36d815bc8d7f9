//! SPEC invariants that must fail loudly when broken: sealed storage bound to its row, no secret
//! in logs or in the database in clear, sign-in rotates the session id.

use reqwest::StatusCode;
use secrecy::ExposeSecret;
use serde_json::json;

use crate::harness::*;
use crate::on_both_databases;

on_both_databases!(
    ciphertext_moved_to_another_row_fails_to_decrypt,
    |kind| async move {
        let app = TestApp::spawn(kind).await;
        let alice = app.connect("alice").await;
        let bob = app.connect("bob").await;
        let (_, alice_token) = app.token("alice").await;
        // An attacker with database access copies alice's sealed token into bob's row.
        sqlx::query("UPDATE connections SET access_token = (SELECT access_token FROM connections WHERE id = $1) WHERE id = $2")
        .bind(&alice)
        .bind(&bob)
        .execute(&app.db().pool)
        .await
        .unwrap();
        app.wait_for_cache_sync().await;
        let (s, v) = app.token("bob").await;
        assert_eq!(s, StatusCode::INTERNAL_SERVER_ERROR, "{v}");
        assert!(
            !v.to_string()
                .contains(alice_token["access_token"].as_str().unwrap())
        );
        let c = app.db().get_connection(&bob).await.unwrap().unwrap();
        assert!(c.access_token(&app.state.config.keys).is_err());
        // The field binding holds too: a refresh token cannot pose as an access token.
        let c = app.db().get_connection(&alice).await.unwrap().unwrap();
        let (at, rt) = app.db().raw_connection_secrets(&alice).await.unwrap();
        let keys = &app.state.config.keys;
        assert!(
            keys.open(
                at.as_deref().unwrap(),
                &mcp_connect::crypto::connection_aad(&alice, "refresh_token")
            )
            .is_err()
        );
        assert!(
            keys.open(
                rt.as_deref().unwrap(),
                &mcp_connect::crypto::connection_aad(&alice, "access_token")
            )
            .is_err()
        );
        assert!(c.access_token(keys).unwrap().is_some());
        app.shutdown().await;
    }
);

on_both_databases!(
    no_secret_reaches_logs_or_the_database_in_clear,
    |kind| async move {
        let app = TestApp::spawn(kind).await;
        let b = Browser::stopping_at_callback();
        let e = app.elicit("alice").await;
        let consent = b
            .sign_in_to_consent(e["url"].as_str().unwrap(), "alice")
            .await;
        let login = b
            .submit(&consent, "form.actions", &[("action", "continue")])
            .await;
        let state_sent = reqwest::Url::parse(&login.url).ok().and_then(|u| {
            u.query_pairs()
                .find(|(k, _)| k == "state")
                .map(|(_, v)| v.into_owned())
        });
        let up = b.submit(&login, "form", &[("login", "alice")]).await;
        let (action, _) = up.form("form");
        let r = b
            .client
            .post(&action)
            .form(&[("decision", "allow")])
            .send()
            .await
            .unwrap();
        let callback = r.headers()["location"].to_str().unwrap().to_owned();
        let cb = reqwest::Url::parse(&callback).unwrap();
        let code = cb
            .query_pairs()
            .find(|(k, _)| k == "code")
            .unwrap()
            .1
            .into_owned();
        let state = cb
            .query_pairs()
            .find(|(k, _)| k == "state")
            .unwrap()
            .1
            .into_owned();
        if let Some(s) = state_sent {
            assert_eq!(s, state);
        }
        assert_eq!(b.get(&callback).await.status, StatusCode::OK);
        let (_, tok) = app.token("alice").await;
        let access = tok["access_token"].as_str().unwrap().to_owned();
        let conn = app
            .db()
            .get_connection(tok["connection_id"].as_str().unwrap())
            .await
            .unwrap()
            .unwrap();
        let refresh = conn
            .refresh_token(&app.state.config.keys)
            .unwrap()
            .unwrap()
            .expose_secret()
            .to_owned();
        // Force a refresh and a revocation so those paths log too.
        let (s, t2) = app
            .post(
                "/v1/tokens",
                json!({"subject": "alice", "provider": "acme", "force_refresh": true}),
            )
            .await;
        assert_eq!(s, StatusCode::OK, "{t2}");
        let access2 = t2["access_token"].as_str().unwrap().to_owned();
        let (s, _) = app.delete(&format!("/v1/connections/{}", conn.id)).await;
        assert_eq!(s, StatusCode::OK);

        let key_b64 = app.key.split_once(':').unwrap().1.to_owned();
        let cookies = b.cookies(&app.url);
        let session_cookie = cookies
            .split("; ")
            .find_map(|c| c.strip_prefix("mcp-connect="))
            .expect("a session cookie")
            .to_owned();
        let secrets = [
            access.as_str(),
            access2.as_str(),
            refresh.as_str(),
            code.as_str(),
            state.as_str(),
            API_KEY,
            IDENTITY_SECRET,
            UPSTREAM_SECRET,
            key_b64.as_str(),
            session_cookie.as_str(),
        ];
        let logs = captured_logs();
        assert!(logs.contains("connection.created"), "logs were captured");
        for s in secrets {
            if let Some(line) = logs.lines().find(|l| l.contains(s)) {
                eprintln!("LEAK: {}", line.replace(s, "<SECRET>"));
            }
            assert!(
                !logs.contains(s),
                "a secret ({}…) appears in the logs",
                &s[..4]
            );
        }
        assert!(
            !logs.contains("code_verifier"),
            "a PKCE verifier parameter appears in the logs"
        );

        // Every text column of every table, in clear.
        let mut dump = String::new();
        for (table, cols) in [
            (
                "connections",
                "id, issuer, subject, provider, status, scopes, token_type, COALESCE(access_token, ''), COALESCE(refresh_token, ''), COALESCE(last_error, '')",
            ),
            ("sessions", "id, data, ''"),
            (
                "auth_flows",
                "state_hash, binding_hash, COALESCE(nonce, ''), COALESCE(verifier, ''), COALESCE(return_to, '')",
            ),
            (
                "audit_events",
                "event, COALESCE(detail, ''), COALESCE(subject, '')",
            ),
            ("elicitations", "id, subject, scopes"),
        ] {
            let rows: Vec<sqlx::any::AnyRow> = sqlx::query(&format!("SELECT {cols} FROM {table}"))
                .fetch_all(&app.db().pool)
                .await
                .unwrap();
            use sqlx::Row;
            for r in rows {
                for i in 0..r.len() {
                    dump.push_str(&r.try_get::<String, _>(i).unwrap_or_default());
                    dump.push('\n');
                }
            }
        }
        assert!(dump.contains("alice"));
        for s in secrets {
            assert!(
                !dump.contains(s),
                "a secret ({}…) is stored in clear",
                &s[..4]
            );
        }
        app.shutdown().await;
    }
);

on_both_databases!(
    the_session_starts_at_sign_in_and_the_pre_sign_in_cookie_is_none,
    |kind| async move {
        let app = TestApp::spawn(kind).await;
        let e = app.elicit("alice").await;
        let url = e["url"].as_str().unwrap();
        let b = Browser::stopping_at_callback();
        let first = b.client.get(url).send().await.unwrap();
        assert!(
            first.url().as_str().starts_with(&app.peers.identity),
            "sent to sign in"
        );
        let cookie = |all: &str, name: &str| {
            all.split("; ")
                .find(|p| p.starts_with(&format!("{name}=")))
                .map(str::to_owned)
        };
        let before = b.cookies(&app.url);
        assert!(
            cookie(&before, "mcp-connect").is_none(),
            "no session before sign-in: {before}"
        );
        let pre = cookie(&before, "mcp-connect-signin").expect("a pre-sign-in cookie");
        let page = b.sign_in_to_consent(url, "alice").await;
        assert!(page.has("Continue"));
        let after = b.cookies(&app.url);
        assert!(
            cookie(&after, "mcp-connect").is_some(),
            "a session after sign-in"
        );
        // The pre-sign-in cookie (say, copied or planted by an attacker) signs nobody in.
        let r = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap()
            .get(url)
            .header("cookie", &pre)
            .send()
            .await
            .unwrap();
        assert_sent_to_sign_in(&r, &app);
        app.shutdown().await;
    }
);
