//! Provider quirks no real server here reproduces, against a stub at the HTTP boundary: a
//! refresh answer without a refresh token, `expires_in` as a string, client credentials in the
//! body, a provider that rejects PKCE.

use std::sync::{Arc, Mutex};

use axum::extract::{Query, State};
use axum::response::{IntoResponse, Redirect};
use axum::routing::{get, post};
use axum::{Form, Json, Router};
use reqwest::StatusCode;
use serde_json::json;

use crate::harness::*;
use crate::on_both_databases;

#[derive(Default)]
struct Seen {
    code_challenges: Vec<Option<String>>,
    refresh_tokens: Vec<String>,
    client_secrets: Vec<Option<String>>,
    authorization_headers: usize,
}

type Shared = Arc<Mutex<Seen>>;

async fn authorize(
    State(seen): State<Shared>,
    Query(q): Query<std::collections::HashMap<String, String>>,
) -> impl IntoResponse {
    seen.lock()
        .unwrap()
        .code_challenges
        .push(q.get("code_challenge").cloned());
    Redirect::to(&format!(
        "{}?code=stub-code&state={}",
        q["redirect_uri"], q["state"]
    ))
}

async fn token(
    State(seen): State<Shared>,
    headers: axum::http::HeaderMap,
    Form(f): Form<std::collections::HashMap<String, String>>,
) -> impl IntoResponse {
    let mut s = seen.lock().unwrap();
    s.client_secrets.push(f.get("client_secret").cloned());
    if headers.contains_key("authorization") {
        s.authorization_headers += 1;
    }
    match f.get("grant_type").map(String::as_str) {
        Some("authorization_code") if f.get("code").map(String::as_str) == Some("stub-code") => {
            Json(json!({"access_token": "stub-at-1", "token_type": "bearer", "refresh_token": "stub-rt-1", "expires_in": "120", "scope": "read write"})).into_response()
        }
        Some("refresh_token") => {
            let rt = f.get("refresh_token").cloned().unwrap_or_default();
            s.refresh_tokens.push(rt.clone());
            if rt != "stub-rt-1" {
                return (StatusCode::BAD_REQUEST, Json(json!({"error": "invalid_grant"}))).into_response();
            }
            // No refresh_token in the answer: the old one stays valid and must be kept.
            let n = s.refresh_tokens.len();
            Json(json!({"access_token": format!("stub-at-{}", n + 1), "token_type": "Bearer", "expires_in": "120"})).into_response()
        }
        _ => (StatusCode::BAD_REQUEST, Json(json!({"error": "invalid_grant"}))).into_response(),
    }
}

async fn stub() -> (String, Shared) {
    let seen: Shared = Arc::default();
    let app = Router::new()
        .route("/authorize", get(authorize))
        .route("/token", post(token))
        .with_state(seen.clone());
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(l, app).await.unwrap() });
    (url, seen)
}

on_both_databases!(
    refresh_without_new_refresh_token_keeps_the_old_one,
    |kind| async move {
        let (stub_url, seen) = stub().await;
        let opts = Options {
            other_provider: format!(
                "authorization_url = \"{stub_url}/authorize\"\ntoken_url = \"{stub_url}/token\"\nclient_id = \"stub-client\"\nclient_secret = \"stub-secret\"\ntoken_auth = \"post\"\npkce = false\nscopes = [\"read\"]"
            ),
            ..Options::default()
        };
        let app = TestApp::spawn_with(kind, opts).await;
        let api = reqwest::Client::new();
        let call = |path: &'static str, body: serde_json::Value| {
            let api = api.clone();
            let url = format!("{}{path}", app.url);
            async move {
                let r = api
                    .post(url)
                    .bearer_auth(OTHER_API_KEY)
                    .json(&body)
                    .send()
                    .await
                    .unwrap();
                let s = r.status();
                (s, r.json::<serde_json::Value>().await.unwrap())
            }
        };
        let (s, e) = call(
            "/v1/elicitations",
            json!({"subject": "alice", "provider": "other"}),
        )
        .await;
        assert_eq!(s, StatusCode::CREATED);
        let b = Browser::new();
        let consent = b
            .sign_in_to_consent(e["url"].as_str().unwrap(), "alice")
            .await;
        let done = b
            .submit(&consent, "form.actions", &[("action", "continue")])
            .await;
        assert_eq!(done.status, StatusCode::OK, "{}", done.body);

        let (s, t) = call(
            "/v1/tokens",
            json!({"subject": "alice", "provider": "other"}),
        )
        .await;
        assert_eq!(s, StatusCode::OK, "{t}");
        assert_eq!(t["access_token"], "stub-at-1");
        assert_eq!(t["scopes"], json!(["read", "write"]));
        // expires_in arrived as the string "120".
        let exp = time::OffsetDateTime::parse(
            t["expires_at"].as_str().unwrap(),
            &time::format_description::well_known::Rfc3339,
        )
        .unwrap();
        let left = (exp - time::OffsetDateTime::now_utc()).whole_seconds();
        assert!((100..=121).contains(&left), "{left}");

        for round in 2..=3 {
            app.age("alice").await;
            let (s, t) = call(
                "/v1/tokens",
                json!({"subject": "alice", "provider": "other", "min_ttl_seconds": 300}),
            )
            .await;
            assert_eq!(s, StatusCode::OK, "{t}");
            assert_eq!(t["access_token"], format!("stub-at-{round}"));
        }
        {
            let s = seen.lock().unwrap();
            assert_eq!(
                s.refresh_tokens,
                vec!["stub-rt-1", "stub-rt-1"],
                "the original refresh token was kept and reused"
            );
            assert_eq!(
                s.code_challenges,
                vec![None],
                "no PKCE for a provider configured with pkce = false"
            );
            assert!(
                s.client_secrets
                    .iter()
                    .all(|c| c.as_deref() == Some("stub-secret")),
                "token_auth = post sends the secret in the body"
            );
            assert_eq!(s.authorization_headers, 0);
        }
        app.shutdown().await;
    }
);
