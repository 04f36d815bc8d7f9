//! The JSON API for MCP servers under `/v1`: bearer API keys, JSON errors.

pub mod connections;
pub mod elicitations;
pub mod events;
pub mod tokens;

use std::sync::Arc;

use axum::Router;
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{DefaultBodyLimit, FromRequest, FromRequestParts, Request};
use axum::http::header;
use axum::http::request::Parts;
use axum::routing::{delete, get, post};
use serde::de::DeserializeOwned;

use crate::AppState;
use crate::config::ClientConfig;
use crate::crypto::{ct_eq, sha256};
use crate::error::Error;

/// API request bodies are small; anything bigger is refused before parsing.
const MAX_BODY: usize = 16 * 1024;

pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/v1/elicitations", post(elicitations::create))
        .route("/v1/elicitations/{id}", get(elicitations::show))
        .route("/v1/tokens", post(tokens::fetch))
        .route("/v1/connections", get(connections::list))
        .route("/v1/connections/{id}", delete(connections::revoke))
        .route("/v1/events", get(events::stream))
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(state)
}

/// The authenticated API client (from `Authorization: Bearer <api key>`).
#[derive(Debug, Clone)]
pub struct ApiClient(pub Arc<ClientConfig>);

impl FromRequestParts<AppState> for ApiClient {
    type Rejection = Error;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Error> {
        // An address that keeps presenting bad keys is refused before its key is looked at.
        let ip = state
            .limits
            .client_ip(crate::limits::peer_ip(&parts.extensions), &parts.headers);
        state.limits.check_auth_allowed(ip)?;
        let client = Self::authenticate(parts, state);
        match &client {
            Ok(c) => state.limits.check_api(&c.0.id)?,
            // A wrong key is a guess; a request without credentials guesses nothing (and
            // probes of the API's 401 must not lock its address out).
            Err(_) if parts.headers.contains_key(header::AUTHORIZATION) => {
                state.limits.auth_failed(ip)
            }
            Err(_) => {}
        }
        client
    }
}

impl ApiClient {
    fn authenticate(parts: &Parts, state: &AppState) -> Result<Self, Error> {
        let presented = parts
            .headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| {
                v.strip_prefix("Bearer ")
                    .or_else(|| v.strip_prefix("bearer "))
            })
            .map(str::trim)
            .filter(|k| !k.is_empty())
            .ok_or(Error::Unauthorized)?;
        let hash = sha256(presented.as_bytes());
        // Compare against every client in constant time, so timing reveals nothing.
        let mut found = None;
        for c in &state.clients {
            if ct_eq(&c.api_key_sha256, &hash) {
                found = Some(c);
            }
        }
        found
            .map(|c| ApiClient(Arc::new(c.clone())))
            .ok_or(Error::Unauthorized)
    }

    /// The provider, if this client may use it.
    pub fn provider<'a>(
        &self,
        state: &'a AppState,
        name: &str,
    ) -> Result<&'a Arc<crate::providers::Provider>, Error> {
        let p = state
            .providers
            .get(name)
            .ok_or_else(|| Error::not_found(format!("no provider named {name:?} is configured")))?;
        if !self.0.providers.iter().any(|x| x == name) {
            return Err(Error::ForbiddenProvider(format!(
                "this API client may not use provider {name:?}"
            )));
        }
        Ok(p)
    }
}

/// JSON body whose rejections are our JSON errors (400 with a message, 413 for too large).
pub struct ApiJson<T>(pub T);

impl<T: DeserializeOwned + Send, S: Send + Sync> FromRequest<S> for ApiJson<T> {
    type Rejection = Error;

    async fn from_request(req: Request, state: &S) -> Result<Self, Error> {
        match axum::Json::<T>::from_request(req, state).await {
            Ok(axum::Json(v)) => Ok(Self(v)),
            Err(JsonRejection::BytesRejection(e))
                if e.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE =>
            {
                Err(Error::page(
                    e.status(),
                    "invalid_request",
                    "Request too large",
                    format!("the request body is larger than {MAX_BODY} bytes"),
                ))
            }
            Err(JsonRejection::MissingJsonContentType(_)) => Err(Error::invalid(
                "send the body as JSON with Content-Type: application/json",
            )),
            Err(e) => Err(Error::invalid(format!(
                "invalid JSON body: {}",
                e.body_text()
            ))),
        }
    }
}

/// Query string whose rejections are our JSON errors.
pub struct ApiQuery<T>(pub T);

impl<T: DeserializeOwned + Send, S: Send + Sync> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = Error;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Error> {
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|q| Self(q.0))
            .map_err(|e: QueryRejection| {
                Error::invalid(format!("invalid query string: {}", e.body_text()))
            })
    }
}

/// Subjects come from validated MCP access tokens; still, bound them. A subject of nothing but
/// whitespace names nobody.
pub fn validate_subject(subject: &str) -> Result<(), Error> {
    if subject.trim().is_empty() || subject.len() > 255 || subject.chars().any(char::is_control) {
        return Err(Error::invalid(
            "subject must be 1 to 255 characters, not only whitespace, without control characters",
        ));
    }
    Ok(())
}
