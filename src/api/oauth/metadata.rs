//! `GET /.well-known/oauth-authorization-server` (RFC 8414): where the token endpoint is and
//! what it serves, so OAuth libraries can discover it from `public_url` alone.

use axum::Json;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;

use super::exchange::GRANT_TYPE;
use crate::AppState;

/// The metadata mcp-connect publishes as an authorization server (only its token endpoint).
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct ServerMetadata {
    /// `public_url`, without the trailing slash.
    pub issuer: String,
    pub token_endpoint: String,
    /// `urn:ietf:params:oauth:grant-type:token-exchange`.
    pub grant_types_supported: Vec<&'static str>,
    /// `client_secret_basic`: the `[[clients]]` id and API key.
    pub token_endpoint_auth_methods_supported: Vec<&'static str>,
    /// Required by RFC 8414; empty, as there is no authorization endpoint.
    pub response_types_supported: Vec<&'static str>,
}

#[utoipa::path(get, path = "/.well-known/oauth-authorization-server",
    responses((status = 200, body = ServerMetadata),
        (status = 429, body = crate::api::error::ErrorBody, description = "`rate_limited`", headers(("Retry-After" = u64, description = "Seconds to wait before trying again"))),
        (status = 503, body = crate::api::error::ErrorBody, description = "`unavailable`")))]
pub async fn document(State(state): State<AppState>) -> impl IntoResponse {
    let issuer = state.config.url("");
    (
        [(header::CACHE_CONTROL, "public, max-age=3600")],
        Json(ServerMetadata {
            token_endpoint: state.config.url("/oauth2/token"),
            issuer,
            grant_types_supported: vec![GRANT_TYPE],
            token_endpoint_auth_methods_supported: vec!["client_secret_basic"],
            response_types_supported: vec![],
        }),
    )
}
