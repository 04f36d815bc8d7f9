//! An API-key provider through the browser: the subject check, the masked key input with its
//! hint, the validation call against a loopback stub (a refused key is not stored), the key
//! sealed at rest, handed to the API caller with its type and header, replaced and deleted from
//! `/account`, and never logged.

use std::sync::{Arc, Mutex};

use axum::http::HeaderMap;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::harness::*;
use crate::on_both_databases;

const GOOD: &str = "good-key-7f3a9c1e5b2d4f60";
const GOOD2: &str = "good-key-second-0a1b2c3d4e";
const BAD: &str = "wrong-key-000111222333";

/// The provider's API: `GET /check` accepts `X-API-Key` values starting with `good-`, and
/// remembers every key it was shown.
async fn validation_stub() -> (String, Arc<Mutex<Vec<String>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    let app = axum::Router::new().route(
        "/check",
        axum::routing::get(move |h: HeaderMap| {
            let s = s.clone();
            async move {
                let key = h
                    .get("x-api-key")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_owned();
                s.lock().unwrap().push(key.clone());
                if key.starts_with("good-") {
                    (StatusCode::OK, "{}")
                } else {
                    (StatusCode::UNAUTHORIZED, "{\"error\":\"invalid key\"}")
                }
            }
        }),
    );
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", l.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(l, app).await });
    (base, seen)
}

async fn call(app: &TestApp, method: &str, path: &str, body: Value) -> (StatusCode, Value) {
    reply(
        app.api
            .request(method.parse().unwrap(), format!("{}{path}", app.url))
            .bearer_auth(OTHER_API_KEY)
            .json(&body),
    )
    .await
}

async fn stored(app: &TestApp) -> (Option<String>, String) {
    sqlx::query_as(
        "SELECT access_token, token_type FROM connections WHERE subject = 'alice' AND provider = 'other'",
    )
    .fetch_one(&app.state.db.pool)
    .await
    .unwrap()
}

on_both_databases!(
    an_api_key_is_typed_checked_sealed_handed_out_replaced_and_deleted,
    |kind| async move {
        let (stub, seen) = validation_stub().await;
        let app = TestApp::spawn_with(
            kind,
            Options {
                other_provider: format!(
                    "display_name = \"Keyed\"\nauth = \"api_key\"\napi_key_header = \"X-API-Key\"\n\
                     api_key_hint = \"Find it under Settings, then API keys.\"\n\
                     validation_url = \"{stub}/check\""
                ),
                ..Options::default()
            },
        )
        .await;
        let (s, e) = call(
            &app,
            "POST",
            "/v1/elicitations",
            json!({"subject": "alice", "provider": "other"}),
        )
        .await;
        assert_eq!(s, StatusCode::CREATED, "{e}");
        let link = e["url"].as_str().unwrap().to_owned();
        let eid = e["id"].as_str().unwrap().to_owned();

        // Someone else cannot answer it.
        let mallory = app.browser();
        let refused = mallory.sign_in_to_consent(&link, "mallory").await;
        assert_eq!(refused.status, StatusCode::FORBIDDEN, "{}", refused.body);
        assert!(!refused.has("name=\"api_key\""));

        // alice gets the masked key form with its hint.
        let b = app.browser();
        let form = b.sign_in_to_consent(&link, "alice").await;
        assert_eq!(form.status, StatusCode::OK, "{}", form.body);
        let doc = scraper::Html::parse_document(&form.body);
        let input = doc
            .select(&scraper::Selector::parse("input[name=api_key]").unwrap())
            .next()
            .expect("a key input");
        assert_eq!(input.value().attr("type"), Some("password"));
        assert_eq!(input.value().attr("autocomplete"), Some("off"));
        assert!(form.has("Find it under Settings, then API keys."));
        let (action, _) = form.form("form.credential");
        assert!(action.ends_with("/credential"), "{action}");

        // A key the provider refuses is not stored.
        let again = b
            .submit(&form, "form.credential", &[("api_key", BAD)])
            .await;
        assert_eq!(again.status, StatusCode::BAD_REQUEST, "{}", again.body);
        assert!(again.has("did not accept"), "{}", again.body);
        assert!(!again.has(BAD), "the refused key is echoed back");
        assert_eq!(seen.lock().unwrap().as_slice(), [BAD.to_owned()]);
        let (_, v) = call(&app, "GET", &format!("/v1/elicitations/{eid}"), json!(null)).await;
        assert_eq!(v["status"], "pending", "{v}");
        let (s, v) = call(
            &app,
            "POST",
            "/v1/tokens",
            json!({"subject": "alice", "provider": "other"}),
        )
        .await;
        assert_eq!(s, StatusCode::NOT_FOUND, "{v}");

        // The right one is checked, stored sealed, and completes the elicitation.
        let done = b
            .submit(&again, "form.credential", &[("api_key", GOOD)])
            .await;
        assert_eq!(done.status, StatusCode::OK, "{}", done.body);
        assert!(done.has("Keyed is connected"), "{}", done.body);
        assert_eq!(seen.lock().unwrap().last().unwrap(), GOOD);
        let (_, v) = call(&app, "GET", &format!("/v1/elicitations/{eid}"), json!(null)).await;
        assert_eq!(v["status"], "completed", "{v}");
        let (at_rest, token_type) = stored(&app).await;
        let at_rest = at_rest.expect("a sealed value");
        assert_eq!(token_type, "api_key");
        assert!(!at_rest.contains(GOOD), "stored in clear: {at_rest}");
        assert!(!at_rest.contains("good-key"), "stored in clear: {at_rest}");

        // Handed to the API caller with its type and header, also on a forced refresh.
        for force in [false, true] {
            let (s, v) = call(
                &app,
                "POST",
                "/v1/tokens",
                json!({"subject": "alice", "provider": "other", "force_refresh": force}),
            )
            .await;
            assert_eq!(s, StatusCode::OK, "{v}");
            assert_eq!(v["credential_type"], "api_key", "{v}");
            assert_eq!(v["api_key"], GOOD, "{v}");
            assert_eq!(v["header_name"], "X-API-Key", "{v}");
            assert_eq!(v["header_value"], GOOD, "{v}");
            assert!(v["expires_at"].is_null(), "{v}");
        }

        // Replaced from /account: a new connect flow that asks for the new key.
        let account = b.get(&format!("{}/account", app.url)).await;
        assert!(account.has("Replace key"), "{}", account.body);
        let form = b.submit(&account, "form[action$='/reconnect']", &[]).await;
        assert!(form.has("name=\"api_key\""), "{} {}", form.url, form.body);
        let done = b
            .submit(&form, "form.credential", &[("api_key", GOOD2)])
            .await;
        assert_eq!(done.status, StatusCode::OK, "{}", done.body);
        let (s, v) = call(
            &app,
            "POST",
            "/v1/tokens",
            json!({"subject": "alice", "provider": "other"}),
        )
        .await;
        assert_eq!(s, StatusCode::OK, "{v}");
        assert_eq!(v["api_key"], GOOD2, "{v}");

        // Deleted from /account: gone from the row and from the API.
        let account = b.get(&format!("{}/account", app.url)).await;
        let after = b.submit(&account, "form[action$='/disconnect']", &[]).await;
        assert_eq!(after.status, StatusCode::OK, "{}", after.body);
        assert!(after.has("disconnected"), "{}", after.body);
        let (at_rest, _) = stored(&app).await;
        assert_eq!(at_rest, None);
        let (s, v) = call(
            &app,
            "POST",
            "/v1/tokens",
            json!({"subject": "alice", "provider": "other"}),
        )
        .await;
        assert_eq!(s, StatusCode::NOT_FOUND, "{v}");

        // Audit rows for each step; no key in them, nor in the logs.
        let rows: Vec<(String,)> = sqlx::query_as(
            "SELECT event FROM audit_events WHERE provider = 'other' OR elicitation_id = $1",
        )
        .bind(&eid)
        .fetch_all(&app.state.db.pool)
        .await
        .unwrap();
        let events = rows.into_iter().map(|r| r.0).collect::<Vec<_>>().join(",");
        for ev in [
            "credential.validation_refused",
            "connection.created",
            "connection.reconnected",
            "connection.revoked",
            "elicitation.subject_mismatch_refused",
        ] {
            assert!(events.contains(ev), "{ev} not audited: {events}");
        }
        let (dump,): (String,) = sqlx::query_as(
            "SELECT COALESCE(MAX(detail), '') FROM audit_events WHERE detail LIKE '%key-%'",
        )
        .fetch_one(&app.state.db.pool)
        .await
        .unwrap();
        assert_eq!(dump, "", "a key in the audit log");
        let logs = captured_logs();
        for k in [GOOD, GOOD2, BAD] {
            assert!(!logs.contains(k), "{k} logged");
        }
        app.shutdown().await;
    }
);
