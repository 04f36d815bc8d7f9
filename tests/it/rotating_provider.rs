//! A provider stub at the HTTP boundary for refresh tests: a rotating, single-use refresh token
//! per grant, counting redemptions and refused (replayed or lost) tokens. Used by the refresh
//! burst tests and the fleet tests.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::response::IntoResponse;
use axum::routing::post;
use axum::{Form, Json, Router};
use reqwest::StatusCode;
use serde_json::json;

#[derive(Default)]
pub struct Provider {
    pub delay_ms: u64,
    /// Grant → the generation of its current refresh token.
    pub current: HashMap<String, u64>,
    /// Grant → successful redemptions.
    pub redeemed: HashMap<String, u64>,
    /// Refresh tokens presented that were not current (replays, lost rotations).
    pub refused: Vec<String>,
}

pub type Shared = Arc<Mutex<Provider>>;

/// A rotating, single-use refresh token per grant (`rt-<grant>-<n>` → `rt-<grant>-<n+1>`),
/// answered after `delay_ms`. A caller that goes away during the delay (a killed replica) has
/// redeemed nothing: hyper drops the handler with the connection.
async fn token(
    State(p): State<Shared>,
    Form(f): Form<HashMap<String, String>>,
) -> impl IntoResponse {
    let delay = p.lock().unwrap().delay_ms;
    tokio::time::sleep(Duration::from_millis(delay)).await;
    let rt = f.get("refresh_token").cloned().unwrap_or_default();
    let Some((grant, generation)) = rt
        .strip_prefix("rt-")
        .and_then(|r| r.rsplit_once('-'))
        .and_then(|(g, n)| Some((g.to_owned(), n.parse::<u64>().ok()?)))
    else {
        return (
            StatusCode::BAD_REQUEST,
            Json(json!({"error": "invalid_grant"})),
        )
            .into_response();
    };
    let mut s = p.lock().unwrap();
    if s.current.get(&grant) != Some(&generation) {
        s.refused.push(rt);
        return (
            StatusCode::BAD_REQUEST,
            Json(json!({"error": "invalid_grant"})),
        )
            .into_response();
    }
    let next = generation + 1;
    s.current.insert(grant.clone(), next);
    *s.redeemed.entry(grant.clone()).or_default() += 1;
    Json(json!({
        "access_token": format!("at-{grant}-{next}"),
        "refresh_token": format!("rt-{grant}-{next}"),
        "token_type": "Bearer",
        "expires_in": 3600,
    }))
    .into_response()
}

pub async fn stub(delay_ms: u64) -> (String, Shared) {
    let p: Shared = Arc::new(Mutex::new(Provider {
        delay_ms,
        ..Provider::default()
    }));
    let app = Router::new()
        .route("/token", post(token))
        .with_state(p.clone());
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(l, app).await.unwrap() });
    (url, p)
}

/// Stores grant `grant` of user `subject` at provider `other`, due for a refresh (its access
/// token expires in 30 s and it was last refreshed long ago), registered at the stub as
/// generation 0 (`rt-<grant>-0`).
pub async fn seed_due_grant(
    db: &mcp_connect::db::Db,
    keys: &mcp_connect::crypto::KeyRing,
    issuer: &str,
    provider: &Shared,
    grant: &str,
    subject: &str,
) {
    let at = secrecy::SecretString::from(format!("at-{grant}-0"));
    let rt = secrecy::SecretString::from(format!("rt-{grant}-0"));
    let mut conn = db.pool.acquire().await.unwrap();
    mcp_connect::db::connections::store_connected(
        &mut conn,
        keys,
        &mcp_connect::db::connections::NewAccount {
            organization: "",
            client_organization: "",
            issuer,
            subject,
            provider: "other",
            id: "",
            max: 5,
        },
        &mcp_connect::db::connections::NewTokens {
            access_token: &at,
            refresh_token: Some(&rt),
            token_type: "Bearer",
            expires_at: Some(mcp_connect::time::now() + 30),
            scopes: &["read".to_owned()],
            account_label: None,
        },
        None,
    )
    .await
    .unwrap()
    .unwrap();
    // Not "just refreshed": a refresh really is due.
    sqlx::query(
        "UPDATE connections SET last_refresh_at = last_refresh_at - 600 WHERE subject = $1",
    )
    .bind(subject)
    .execute(&db.pool)
    .await
    .unwrap();
    provider.lock().unwrap().current.insert(grant.to_owned(), 0);
}
