//! Operations routes: liveness, readiness and metrics.

use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::json;

use crate::AppState;
use crate::error::ErrorCode;
use crate::server::edge::Edge;

pub fn router(state: AppState) -> Router {
    let r = Router::new()
        .route("/healthz", get(|| async { Json(json!({"status": "ok"})) }))
        .route("/readyz", get(readyz));
    // With `metrics_listen`, metrics live only on that (private) address.
    let r = if state.config.metrics_listen.is_none() {
        r.route("/metrics", get(guarded_metrics))
    } else {
        r
    };
    r.layer(Edge::new(&state)).with_state(state)
}

/// The router of the separate metrics listener (`metrics_listen`).
pub fn metrics_router(state: AppState) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { Json(json!({"status": "ok"})) }))
        .with_state(state)
}

async fn readyz(State(state): State<AppState>) -> Response {
    if state.draining.load(std::sync::atomic::Ordering::SeqCst) {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"status": "draining", "error": ErrorCode::Unavailable.as_str(), "message": "this replica is shutting down"})),
        )
            .into_response();
    }
    match state.db.ping().await {
        Ok(()) => Json(json!({"status": "ready"})).into_response(),
        Err(e) => {
            tracing::warn!(error = %e, "not ready: database unreachable");
            (StatusCode::SERVICE_UNAVAILABLE, Json(json!({"status": "unavailable", "error": ErrorCode::Unavailable.as_str(), "message": "the database is unreachable"}))).into_response()
        }
    }
}

/// `/metrics` on the main listener: with `metrics_token`, for requests bearing it; without, for
/// loopback peers only, and not when a proxy forwarded the request (a reverse proxy on the same
/// host would otherwise make every stranger look local).
async fn guarded_metrics(State(state): State<AppState>, req: axum::extract::Request) -> Response {
    use secrecy::ExposeSecret;
    let headers = req.headers();
    match &state.config.metrics_token {
        Some(token) => {
            let presented = headers
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "))
                .unwrap_or("");
            let want = crate::crypto::sha256(token.expose_secret().trim().as_bytes());
            if !crate::crypto::ct_eq(&crate::crypto::sha256(presented.trim().as_bytes()), &want) {
                let mut r = crate::server::rendered::edge_refusal(
                    axum::http::StatusCode::UNAUTHORIZED,
                    ErrorCode::Unauthorized,
                    "Unauthorized",
                    "/metrics needs `Authorization: Bearer <metrics_token>`",
                )
                .into_response();
                r.headers_mut()
                    .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
                return r;
            }
        }
        None => {
            let forwarded = ["forwarded", "x-forwarded-for", "x-real-ip"]
                .iter()
                .any(|h| headers.contains_key(*h));
            let local =
                crate::server::limits::peer_ip(req.extensions()).is_some_and(|ip| ip.is_loopback());
            if !local || forwarded {
                return crate::server::rendered::edge_refusal(
                    axum::http::StatusCode::FORBIDDEN,
                    ErrorCode::Forbidden,
                    "Forbidden",
                    "/metrics answers loopback only; set metrics_token or metrics_listen to scrape it from elsewhere",
                )
                .into_response();
            }
        }
    }
    metrics(State(state)).await
}

async fn metrics(State(state): State<AppState>) -> Response {
    let pool = &state.db.pool;
    let body = state.metrics.render(
        crate::metrics::PoolReading {
            open: pool.size(),
            idle: pool.num_idle(),
            max: pool.max_connections(),
        },
        state.token_cache.stats(),
    );
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        body,
    )
        .into_response()
}
