//! Operations routes: liveness, readiness, metrics, and the OpenAPI document.

use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::json;
use utoipa::OpenApi;

use crate::AppState;
use crate::api;
use crate::error::Error;

pub fn router(state: AppState) -> Router {
    let r = Router::new()
        .route("/healthz", get(|| async { Json(json!({"status": "ok"})) }))
        .route("/readyz", get(readyz))
        .route("/openapi.json", get(|| async { Json(ApiDoc::openapi()) }));
    // With `metrics_listen`, metrics live only on that (private) address.
    let r = if state.config.metrics_listen.is_none() {
        r.route("/metrics", get(guarded_metrics))
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
    if state.draining.load(std::sync::atomic::Ordering::SeqCst) {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"status": "draining", "error": "unavailable", "message": "this replica is shutting down"})),
        )
            .into_response();
    }
    match state.db.ping().await {
        Ok(()) => Json(json!({"status": "ready"})).into_response(),
        Err(e) => {
            tracing::warn!(error = %e, "not ready: database unreachable");
            (StatusCode::SERVICE_UNAVAILABLE, Json(json!({"status": "unavailable", "error": "unavailable", "message": "the database is unreachable"}))).into_response()
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
                let mut r = Error::page(
                    StatusCode::UNAUTHORIZED,
                    "unauthorized",
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
            let local = crate::limits::peer_ip(req.extensions()).is_some_and(|ip| ip.is_loopback());
            if !local || forwarded {
                return Error::page(
                    StatusCode::FORBIDDEN,
                    "forbidden",
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

/// Every API operation may answer 429 `rate_limited` (the per-client rate, failed
/// authentication from the caller's address, or a cap on streams and long polls).
struct RateLimited;

impl utoipa::Modify for RateLimited {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::{
            ContentBuilder, HeaderBuilder, Ref, ResponseBuilder, Type, schema::ObjectBuilder,
        };
        for (path, item) in openapi.paths.paths.iter_mut() {
            if !path.starts_with("/v1/") {
                continue;
            }
            for op in [
                &mut item.get,
                &mut item.post,
                &mut item.put,
                &mut item.delete,
                &mut item.patch,
            ]
            .into_iter()
            .flatten()
            {
                op.responses.responses.entry("429".into()).or_insert_with(|| {
                    ResponseBuilder::new()
                        .description("`rate_limited`: too many requests from this client or address; retry after `Retry-After` seconds")
                        .header(
                            "Retry-After",
                            HeaderBuilder::new()
                                .schema(ObjectBuilder::new().schema_type(Type::Integer))
                                .description(Some("seconds to wait"))
                                .build(),
                        )
                        .content(
                            "application/json",
                            ContentBuilder::new()
                                .schema(Some(Ref::from_schema_name("ErrorBody")))
                                .build(),
                        )
                        .build()
                        .into()
                });
            }
        }
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
    modifiers(&BearerAuth, &RateLimited)
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
