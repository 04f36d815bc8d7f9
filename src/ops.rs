//! Operations routes: liveness, readiness, metrics, and the OpenAPI document.

use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::json;
use utoipa::OpenApi;

use crate::AppState;
use crate::api;

pub fn router(state: AppState) -> Router {
    let r = Router::new()
        .route("/healthz", get(|| async { Json(json!({"status": "ok"})) }))
        .route("/readyz", get(readyz))
        .route("/openapi.json", get(|| async { Json(ApiDoc::openapi()) }));
    // With `metrics_listen`, metrics live only on that (private) address.
    let r = if state.config.metrics_listen.is_none() {
        r.route("/metrics", get(metrics))
    } else {
        r
    };
    r.with_state(state)
}

/// The router of the separate metrics listener (`metrics_listen`).
pub fn metrics_router(state: AppState) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { Json(json!({"status": "ok"})) }))
        .with_state(state)
}

async fn readyz(State(state): State<AppState>) -> Response {
    match state.db.ping().await {
        Ok(()) => Json(json!({"status": "ready"})).into_response(),
        Err(e) => {
            tracing::warn!(error = %e, "not ready: database unreachable");
            (StatusCode::SERVICE_UNAVAILABLE, Json(json!({"status": "unavailable", "error": "unavailable", "message": "the database is unreachable"}))).into_response()
        }
    }
}

async fn metrics(State(state): State<AppState>) -> Response {
    let body = state.metrics.render(&state.db.pool);
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        body,
    )
        .into_response()
}

struct BearerAuth;

impl utoipa::Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "api_key",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some("An API key from [[clients]]"))
                    .build(),
            ),
        );
    }
}

#[derive(OpenApi)]
#[openapi(
    info(title = "mcp-connect", description = "Third-party OAuth for MCP servers through URL-mode elicitation. Errors are `{\"error\": code, \"message\": text}` (schema `ErrorBody`). Completion signals: `GET /v1/events` (server-sent events) and, for clients with a `webhook_url`, webhooks signed per Standard Webhooks (`webhook-id`, `webhook-timestamp`, `webhook-signature: v1,<base64 HMAC-SHA256 of \"id.timestamp.body\">`) whose body is `EventBody`."),
    paths(api::elicitations::create, api::elicitations::show, api::tokens::fetch, api::connections::list, api::connections::revoke, api::events::stream),
    components(schemas(
        api::elicitations::CreateElicitation,
        crate::elicitations::ElicitationView,
        crate::db::elicitations::ElicitationStatus,
        api::tokens::TokenRequest,
        api::tokens::TokenResponse,
        api::connections::ConnectionView,
        api::connections::ConnectionList,
        crate::db::connections::ConnectionStatus,
        crate::tokens::RevocationReport,
        crate::error::ErrorBody,
        crate::events::EventBody,
        crate::events::EventData,
        crate::events::EventType,
    )),
    modifiers(&BearerAuth)
)]
pub struct ApiDoc;

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/openapi.json is the published contract; it must match the code. Regenerate with
    /// `UPDATE_OPENAPI=1 cargo test openapi`.
    #[test]
    fn openapi_document_in_docs_matches_the_code() {
        let generated = ApiDoc::openapi().to_pretty_json().unwrap() + "\n";
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/openapi.json");
        if std::env::var_os("UPDATE_OPENAPI").is_some() {
            std::fs::write(path, &generated).unwrap();
        }
        let committed = std::fs::read_to_string(path).unwrap_or_default();
        assert!(
            committed == generated,
            "docs/openapi.json is stale: run `UPDATE_OPENAPI=1 cargo test openapi`"
        );
    }
}
