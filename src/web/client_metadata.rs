//! `GET /.well-known/oauth-client/{provider}`: mcp-connect's Client ID Metadata Document for a
//! `kind = "mcp"` provider. Its URL is the `client_id` at authorization servers that advertise
//! `client_id_metadata_document_supported`; they fetch it to learn our name and redirect URI.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::AppState;
use crate::error::ErrorCode;
use crate::providers::mcp::client_metadata_document;

pub async fn document(State(state): State<AppState>, Path(provider): Path<String>) -> Response {
    match state.providers.get(&provider).filter(|p| p.mcp.is_some()) {
        Some(p) => (
            [(header::CACHE_CONTROL, "public, max-age=3600")],
            Json(client_metadata_document(
                state.config.public_url.as_str(),
                &p.name,
                &p.display_name,
            )),
        )
            .into_response(),
        None => (
            StatusCode::NOT_FOUND,
            Json(json!({"error": ErrorCode::NotFound.as_str(), "message": "no upstream MCP provider by this name"})),
        )
            .into_response(),
    }
}
